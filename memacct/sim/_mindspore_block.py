"""MindSpore's memory pool without VMM (preset ``mindspore-block``).

The rules and the MindSpore source files they come from are in ``docs/simulator.md``
(section "MindSpore"); the VMM pool is in :mod:`memacct.sim._mindspore`, the budget
and the checks both pools share in :mod:`memacct.sim._mindspore_budget`.
"""

from __future__ import annotations

from typing import ClassVar

from memacct.errors import InvalidInputError
from memacct.sim._blocks import KEY_SHIFT, MIN_BLOCK_SIZE, Block, Pool
from memacct.sim._core import CachingAllocator
from memacct.sim._memory import DeviceMemory
from memacct.sim._mindspore_budget import check_budget, check_version, default_budget, no_streams
from memacct.units import GiB

__all__ = ["MindSporeBlockPool"]


class MindSporeBlockPool(CachingAllocator):
    """MindSpore's memory pool without VMM, modelled (preset ``mindspore-block``).

    - Sizes as the VMM pool: pad 32 bytes, round up to 512.
    - Two pools: *persistent* (``malloc(..., persistent=True)``) and *common*; in
      torch-style keys ``small_pool`` and ``large_pool``.
    - Each pool grows by blocks (the ``segment`` statistic) of the unit (``unit_bytes``,
      default 1 GiB) doubled until the request fits, capped at the device's free memory
      and at what the budget leaves; never smaller than the request.
    - Best fit over idle buffers of the pool (lowest address on ties); a buffer splits when
      at least 512 bytes remain; a freed buffer merges only with idle neighbours of its
      own block.
    - A persistent request that its pool cannot serve from idle buffers goes to the common
      pool: to an idle buffer there, or, while the common pool has no block, to its first
      block; otherwise the persistent pool grows.
    - **No release-and-retry**: when a block cannot be grown the request fails.
      :meth:`empty_cache` releases only blocks that are entirely idle.

    Args:
        device_memory: where pool blocks are mapped from.
        unit_bytes: the block unit (a positive multiple of 512).
        budget_bytes: the pool budget (``max_device_memory``); ``None`` takes MindSpore's
            default from the device's free memory at the first request.
        version: ``"2.6"`` or ``"2.5"`` (the block pool's statistics are the same in both).
    """

    name: ClassVar[str] = "mindspore-block"
    oom_hint: ClassVar[str] = (
        "Idle memory cannot be merged across pool blocks and the block pool does not "
        "release idle blocks to retry; MindSpore's VMM pool (MS_ALLOC_CONF=enable_vmm:True, "
        "the default on 910B) or a smaller unit (mempool_block_size) wastes less."
    )
    growth_granularity_bytes = 1 * GiB
    _pad: ClassVar[int] = 32

    def __init__(
        self,
        device_memory: DeviceMemory,
        *,
        unit_bytes: int = 1 * GiB,
        budget_bytes: int | None = None,
        version: str = "2.6",
    ) -> None:
        if (
            isinstance(unit_bytes, bool)
            or not isinstance(unit_bytes, int)
            or unit_bytes <= 0
            or unit_bytes % MIN_BLOCK_SIZE
        ):
            raise InvalidInputError(
                f"mindspore unit_bytes must be a positive multiple of {MIN_BLOCK_SIZE} bytes, "
                f"got {unit_bytes!r}"
            )
        self._budget = check_budget(budget_bytes)
        self._version = check_version(version)
        super().__init__(device_memory)
        self.growth_granularity_bytes = unit_bytes
        for pool in self._pools:
            pool.split_min = MIN_BLOCK_SIZE
        self._persistent_pool = self._small
        self._small_max = -1  # every other request goes to the common pool

    @property
    def unit_bytes(self) -> int:
        """The block unit in bytes."""
        return self.growth_granularity_bytes

    @property
    def budget_bytes(self) -> int | None:
        """The pool budget in bytes (``None`` until the first request sets the default)."""
        return self._budget

    def malloc(self, size: int, *, persistent: bool = False, stream: int = 0) -> int:
        """Allocate as described in the class docstring."""
        if stream:
            raise no_streams(stream)
        if self._budget is None:
            self._budget = default_budget(self._device.free)
        if persistent and self._small.segments and size.__class__ is int and size > 0:
            rounded = self.round_size(size)
            if self._small.free.ceiling(rounded << KEY_SHIFT) < 0 and (
                not self._large.segments or self._large.free.ceiling(rounded << KEY_SHIFT) >= 0
            ):
                # No idle persistent buffer fits: the common allocator serves it, from an
                # idle buffer or, while it has no block yet, by growing its first block.
                return super().malloc(size, persistent=False)
        return super().malloc(size, persistent=persistent)

    def _segment_size(self, pool: Pool, rounded: int) -> int:
        size = self.growth_granularity_bytes
        while size < rounded:
            size *= 2
        return size

    def _new_block(self, pool: Pool, rounded: int) -> Block | None:
        size = self._segment_size(pool, rounded)
        room = self._device.free
        if self._budget is not None:
            room = min(room, self._budget - self.reserved)
        room = room // MIN_BLOCK_SIZE * MIN_BLOCK_SIZE
        if size > room:
            size = max(room, rounded)
        if size > room or not self._device.map(size):
            return None
        return self._add_segment(pool, size)

    def _grow(self, pool: Pool, rounded: int, size: int) -> Block:
        block = self._new_block(pool, rounded)
        if block is None:
            # MindSpore's block pool does not release idle blocks and retry.
            raise self._out_of_memory(pool, rounded, size)
        return block

    def _attempt_size(self, pool: Pool, rounded: int) -> int:
        # It failed because less than the request was free, so the block it
        # tried was capped down to the request itself.
        return rounded

    def _extra_stats(self, out: dict[str, int]) -> None:
        reserved = self.reserved
        allocated = self.allocated
        out["total_reserved_memory"] = reserved
        out["total_allocated_memory"] = allocated
        out["total_idle_memory"] = reserved - allocated
        out["total_eager_free_memory"] = 0
        out["max_reserved_memory"] = self._peaks.reserved_bytes
        out["max_allocated_memory"] = self._peaks.allocated_bytes
