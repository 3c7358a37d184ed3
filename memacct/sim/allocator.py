"""Simulated caching allocators: faithful models of the real ones' fragmentation.

Each preset models one framework's device allocator (facts and sources in
``docs/simulator.md``):

=========================  ==============================================================
``torch-cuda``             PyTorch's CUDA caching allocator (:class:`CachingAllocator`)
``torch-cuda-expandable``  the same with ``expandable_segments:True``
                           (:class:`ExpandableSegmentsAllocator`)
``npu``                    Ascend torch_npu's allocator (:class:`NpuCachingAllocator`)
``npu-expandable``         the same with ``expandable_segments:True``
                           (:class:`NpuExpandableAllocator`)
``mindspore``              MindSpore's VMM memory pool, the default on Ascend 910B
                           (:class:`MindSporeMemoryPool`)
``mindspore-block``        MindSpore's block pool, used when VMM is off
                           (:class:`MindSporeBlockPool`)
=========================  ==============================================================

:func:`make_allocator` builds one by name over a :class:`DeviceMemory`;
:class:`memacct.sim.SimDevice` does that for you.
"""

from __future__ import annotations

from typing import Any

from memacct.errors import InvalidInputError
from memacct.sim._core import (
    CachingAllocator,
    DeviceMemory,
    InvalidPointerError,
    SimOutOfMemory,
    SimpleDeviceMemory,
    format_size,
)
from memacct.sim._expandable import ExpandableSegmentsAllocator
from memacct.sim._mindspore import MindSporeBlockPool, MindSporeMemoryPool, mindspore_options
from memacct.sim._npu import NpuCachingAllocator, NpuExpandableAllocator

__all__ = [
    "ALLOCATOR_PRESETS",
    "CachingAllocator",
    "DeviceMemory",
    "ExpandableSegmentsAllocator",
    "InvalidPointerError",
    "MindSporeBlockPool",
    "MindSporeMemoryPool",
    "NpuCachingAllocator",
    "NpuExpandableAllocator",
    "SimOutOfMemory",
    "SimpleDeviceMemory",
    "format_size",
    "make_allocator",
]

ALLOCATOR_PRESETS: dict[str, type[CachingAllocator]] = {
    cls.name: cls
    for cls in (
        CachingAllocator,
        ExpandableSegmentsAllocator,
        NpuCachingAllocator,
        NpuExpandableAllocator,
        MindSporeMemoryPool,
        MindSporeBlockPool,
    )
}
"""Allocator presets by name."""


def make_allocator(name: str, device_memory: DeviceMemory, **options: Any) -> CachingAllocator:
    """Build the allocator preset ``name`` over ``device_memory``.

    Args:
        name: a key of :data:`ALLOCATOR_PRESETS`.
        device_memory: where the allocator maps its memory from.
        **options: preset options. ``torch-cuda``, ``torch-cuda-expandable``,
            ``npu``, ``npu-expandable``: ``max_split_size_mb``,
            ``roundup_power2_divisions``, ``garbage_collection_threshold``;
            ``torch-cuda`` and ``npu`` also ``expandable_segments`` (``True``
            gives their ``-expandable`` preset).
            ``mindspore``: ``vmm`` (``False`` gives the
            ``mindspore-block`` preset), ``budget_bytes`` (``max_device_memory``),
            ``version``; ``mindspore-block``: ``unit_bytes``, ``budget_bytes``, ``version``.

    Raises:
        InvalidInputError: ``name`` is not a preset (the message lists the
            presets), or an option is unknown or invalid.
    """
    if name == "mindspore":
        name, options = mindspore_options(options)
    elif name in ("torch-cuda", "npu") and "expandable_segments" in options:
        options = dict(options)
        expandable = options.pop("expandable_segments")
        if not isinstance(expandable, bool):
            raise InvalidInputError(
                f"expandable_segments must be True or False, got {expandable!r}"
            )
        if expandable:
            name = f"{name}-expandable"
    try:
        cls = ALLOCATOR_PRESETS[name]
    except (KeyError, TypeError):
        raise InvalidInputError(
            f"unknown allocator preset {name!r}; choose one of: "
            f"{', '.join(sorted(ALLOCATOR_PRESETS))}"
        ) from None
    try:
        return cls(device_memory, **options)
    except TypeError as exc:
        raise InvalidInputError(
            f"allocator preset {name!r} does not take options {sorted(options)}: {exc}"
        ) from None
