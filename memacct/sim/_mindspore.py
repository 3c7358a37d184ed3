"""MindSpore's dynamic memory pool (preset ``mindspore``)."""

from __future__ import annotations

from memacct.errors import InvalidInputError
from memacct.sim._core import MIN_BLOCK_SIZE, CachingAllocator, DeviceMemory, _Block, _Pool
from memacct.units import GiB

__all__ = ["MindSporeMemoryPool"]


class MindSporeMemoryPool(CachingAllocator):
    """MindSpore's best-fit dynamic memory pool, modelled (preset ``mindspore``).

    - Sizes: MindSpore aligns a request as ``(size + 512 + 31) // 512 * 512``,
      which is "pad by 32 bytes, then round up to 512": a 512-byte request
      takes 1024 bytes, a 480-byte one 512.
    - Two pools: *persistent* (``malloc(..., persistent=True)``: weights and
      constants) and *common* (activations). In the torch-style statistics
      keys the persistent pool appears as ``small_pool`` and the common pool
      as ``large_pool``; ``all`` is the sum, as everywhere.
    - Each pool grows in blocks (the ``segment`` statistic) of the unit size
      (``unit_bytes``, default 1 GiB, MindSpore's ``mempool_block_size``); a
      request larger than the unit gets the unit doubled until it fits. A
      block is capped at the device's free memory (rounded down to 512), but
      is never smaller than the request.
    - Best fit over idle buffers of the pool (lowest address on ties, where
      MindSpore takes the oldest idle buffer of that size); a buffer splits
      when at least 512 bytes remain; a freed buffer merges only with idle
      neighbours inside its own block.
    - :meth:`empty_cache` releases only blocks that are entirely idle; on a
      full device the pool does the same and retries once before raising.

    Besides torch's keys, :meth:`memory_stats` has MindSpore's own:
    ``total_reserved_memory``, ``total_allocated_memory``,
    ``total_idle_memory``, ``max_reserved_memory``, ``max_allocated_memory``.

    Args:
        device_memory: where pool blocks are mapped from.
        unit_bytes: the block unit (a positive multiple of 512).
    """

    name = "mindspore"
    growth_granularity_bytes = 1 * GiB
    _pad = 32

    def __init__(self, device_memory: DeviceMemory, *, unit_bytes: int = 1 * GiB) -> None:
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

    def _segment_size(self, pool: _Pool, rounded: int) -> int:
        size = self.growth_granularity_bytes
        while size < rounded:
            size *= 2
        return size

    def _new_block(self, pool: _Pool, rounded: int) -> _Block | None:
        size = self._segment_size(pool, rounded)
        free = self._device.free // MIN_BLOCK_SIZE * MIN_BLOCK_SIZE
        if size > free:
            size = max(free, rounded)
        if not self._device.map(size):
            return None
        return self._add_segment(pool, size)

    def _attempt_size(self, pool: _Pool, rounded: int) -> int:
        # It failed because less than the request was free, so the block it
        # tried was capped down to the request itself.
        return rounded

    def _oom_hint(self) -> str:
        return (
            "Idle memory cannot be merged across pool blocks; a smaller unit "
            "(mempool_block_size) wastes less."
        )

    def _extra_stats(self, out: dict[str, int]) -> None:
        reserved = self.reserved
        allocated = self.allocated
        out["total_reserved_memory"] = reserved
        out["total_allocated_memory"] = allocated
        out["total_idle_memory"] = reserved - allocated
        out["max_reserved_memory"] = self._peaks.reserved_bytes
        out["max_allocated_memory"] = self._peaks.allocated_bytes
