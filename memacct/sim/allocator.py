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
:class:`memacct.sim.SimDevice` does that for you. :func:`preset_model` gives a preset
as the :class:`memacct.backend.AllocatorModel` a backend declares for ``auto``'s replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memacct.errors import InvalidInputError
from memacct.sim._core import CachingAllocator
from memacct.sim._errors import InvalidPointerError, SimOutOfMemory
from memacct.sim._expandable import ExpandableSegmentsAllocator
from memacct.sim._memory import DeviceMemory, SimpleDeviceMemory
from memacct.sim._mindspore import MindSporeMemoryPool
from memacct.sim._mindspore_block import MindSporeBlockPool
from memacct.sim._mindspore_budget import mindspore_options
from memacct.sim._npu import NpuCachingAllocator, NpuExpandableAllocator
from memacct.trace import run_trace
from memacct.units import format_size

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
    "preset_model",
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


class _Instance:
    """One fresh allocator of a preset, as :class:`memacct.backend.ModelAllocator`."""

    __slots__ = ("_alloc",)

    def __init__(self, alloc: CachingAllocator) -> None:
        self._alloc = alloc

    @property
    def reserved(self) -> int:
        return int(self._alloc.reserved)

    def run(self, trace: Sequence[int], persistent: bool = False) -> bool:
        malloc = self._alloc.malloc
        try:
            if persistent:
                for op in trace:
                    malloc(op, persistent=True)
                return True
            run_trace(malloc, self._alloc.free, trace)
        except SimOutOfMemory:
            return False
        return True

    def empty_cache(self) -> None:
        self._alloc.empty_cache()


class PresetModel:
    """An allocator preset as the model of a backend's allocator (``AllocatorModel``).

    Args:
        name: a key of :data:`ALLOCATOR_PRESETS`.
    """

    def __init__(self, name: str) -> None:
        if name not in ALLOCATOR_PRESETS:
            raise InvalidInputError(
                f"unknown allocator preset {name!r}; choose one of: "
                f"{', '.join(sorted(ALLOCATOR_PRESETS))}"
            )
        self.name = name
        # A pool with a budget of its own (MindSpore's) gets the whole capacity as its budget:
        # the replay measures what the activations need, and a budget below the device's free
        # memory is the planner's cap (the profile's allocator limit).
        budgeted = issubclass(ALLOCATOR_PRESETS[name], (MindSporeMemoryPool, MindSporeBlockPool))
        self._budgeted = budgeted

    def instance(self, capacity: int) -> _Instance:
        """A fresh allocator of the preset over ``capacity`` bytes."""
        options = {"budget_bytes": capacity} if self._budgeted else {}
        return _Instance(make_allocator(self.name, SimpleDeviceMemory(capacity), **options))

    def __repr__(self) -> str:
        return f"PresetModel({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PresetModel) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def preset_model(name: str | None) -> PresetModel | None:
    """The preset ``name`` as an allocator model (``None`` for ``None``: no model)."""
    return None if name is None else PresetModel(name)
