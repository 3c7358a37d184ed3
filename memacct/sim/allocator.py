"""Simulated caching allocators: faithful models of the real ones' fragmentation.

Each preset models one framework's device allocator (facts in SIMULATOR.md):

========================  ==========================================================
``torch-cuda``            PyTorch's CUDA caching allocator (:class:`CachingAllocator`)
========================  ==========================================================

:func:`make_allocator` builds one by name over a :class:`DeviceMemory`;
:class:`memacct.sim.SimDevice` does that for you.
"""

from __future__ import annotations

from memacct.errors import InvalidInputError
from memacct.sim._core import (
    CachingAllocator,
    DeviceMemory,
    InvalidPointerError,
    SimOutOfMemory,
    SimpleDeviceMemory,
    format_size,
)

__all__ = [
    "ALLOCATOR_PRESETS",
    "CachingAllocator",
    "DeviceMemory",
    "InvalidPointerError",
    "SimOutOfMemory",
    "SimpleDeviceMemory",
    "format_size",
    "make_allocator",
]

ALLOCATOR_PRESETS: dict[str, type[CachingAllocator]] = {
    cls.name: cls
    for cls in (CachingAllocator,)
}
"""Allocator presets by name."""


def make_allocator(name: str, device_memory: DeviceMemory) -> CachingAllocator:
    """Build the allocator preset ``name`` over ``device_memory``.

    Raises:
        InvalidInputError: ``name`` is not a preset; the message lists the presets.
    """
    try:
        cls = ALLOCATOR_PRESETS[name]
    except (KeyError, TypeError):
        raise InvalidInputError(
            f"unknown allocator preset {name!r}; choose one of: "
            f"{', '.join(sorted(ALLOCATOR_PRESETS))}"
        ) from None
    return cls(device_memory)
