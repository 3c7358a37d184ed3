"""What the allocator answers about itself: ``memory_stats`` with torch's key names, its
resets and event counters (torch's ``getDeviceStats`` / ``resetPeakStats`` /
``resetAccumulatedStats``), and for the tests its segments and their recount. The
counters behind them are in ``_stats``."""

from __future__ import annotations

from typing import ClassVar

from memacct.sim._blocks import (
    FREE,
    IN_USE,
    UNMAPPED,
    Block,
    Segment,
    SegmentListing,
    list_segments,
)
from memacct.sim._config import NO_LIMIT
from memacct.sim._pools import PoolSet
from memacct.sim._recount import recount
from memacct.sim._stats import Stat, counter_stats, reset_peaks

__all__ = ["AllocatorReadings"]


class AllocatorReadings(PoolSet):
    """The statistics of an allocator's pools and its event counters (``num_*``)."""

    name: ClassVar[str]
    _track_inactive_split: ClassVar[bool]
    _max_split: int
    """Bytes from which blocks are never split (the allocator's setting)."""
    _live: dict[int, Block]
    """The allocator's blocks in use by address."""
    _free_blocks: dict[int, Block]
    """The allocator's free blocks by address."""

    def __init__(self) -> None:
        super().__init__()
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self._acc_base: dict[str, int] = {}
        """Each ``allocated``/``freed`` metric at the last accumulated reset."""
        self.num_alloc_retries = 0
        self.num_ooms = 0

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} allocated={self.allocated} "
            f"reserved={self.reserved} live_blocks={len(self._live)}>"
        )

    @property
    def live_blocks(self) -> int:
        """Number of allocated blocks."""
        return len(self._live)

    @property
    def allocated(self) -> int:
        """Bytes of allocated blocks (``allocated_bytes.all.current``)."""
        return self._small.stats.allocated_bytes + self._large.stats.allocated_bytes

    @property
    def reserved(self) -> int:
        """Bytes held from the device for blocks (``reserved_bytes.all.current``)."""
        return self._small.stats.reserved_bytes + self._large.stats.reserved_bytes

    def reset_peak_memory_stats(self) -> None:
        """Set every peak to its current value; cumulative counters stay."""
        reset_peaks(self._small.stats, self._large.stats, self._peaks)
        for stat in (self.oversize_allocations, self.oversize_segments):
            stat.peak = stat.current

    def reset_accumulated_memory_stats(self) -> None:
        """Zero every ``allocated``/``freed`` metric and the event counters (``num_*``)."""
        stats = self.memory_stats()
        self._acc_base = {
            key: value + self._acc_base.get(key, 0)
            for key, value in stats.items()
            if key.endswith((".allocated", ".freed"))
        }
        self.num_alloc_retries = self.num_ooms = 0
        self.num_sync_all_streams = self.num_device_alloc = self.num_device_free = 0

    def memory_stats(self) -> dict[str, int]:
        """Statistics with torch's key names, sorted by key as torch returns them.

        Keys are ``<stat>.<pool>.<metric>`` for stat in ``allocation``,
        ``allocated_bytes``, ``segment``, ``reserved_bytes``, ``active``,
        ``active_bytes``, ``inactive_split``, ``inactive_split_bytes``,
        ``requested_bytes``; pool in ``all``, ``small_pool``, ``large_pool``;
        metric in ``current``, ``peak``, ``allocated`` (cumulative increase),
        ``freed`` (cumulative decrease); plus ``num_alloc_retries`` and ``num_ooms``.
        """
        out: dict[str, int] = {}
        counter_stats(out, self._small.stat_name, self._small.stats, self._large.stat_name,
                      self._large.stats, self._peaks)
        for name, stat in (
            ("oversize_allocations", self.oversize_allocations),
            ("oversize_segments", self.oversize_segments),
        ):
            out[name + ".allocated"] = stat.allocated
            out[name + ".current"] = stat.current
            out[name + ".freed"] = stat.freed
            out[name + ".peak"] = stat.peak
        if self._acc_base:
            for key, base in self._acc_base.items():
                out[key] -= base
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        out["num_sync_all_streams"] = self.num_sync_all_streams
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        out["max_split_size"] = -1 if self._max_split == NO_LIMIT else self._max_split
        self._extra_stats(out)
        return dict(sorted(out.items()))

    def _extra_stats(self, out: dict[str, int]) -> None:
        """Add preset-specific keys to :meth:`memory_stats`."""

    def _segments(self) -> SegmentListing:
        """``(pool, address, size, [(block address, size, state)])`` for every segment."""
        names = {FREE: "free", IN_USE: "in_use", UNMAPPED: "unmapped"}
        return list_segments(self._pools, names)

    def _recount_stats(self) -> dict[str, int]:
        """Current values recomputed from the blocks, keyed like :meth:`memory_stats`.

        Also checks the structure (blocks tile their segments, free blocks are
        in the free sets, no two free neighbours) and raises
        :class:`AssertionError` on any inconsistency.
        """
        return recount(self._pools, self._live, self._free_blocks,
                       track_inactive_split=self._track_inactive_split,
                       segment_count=self._segment_count)

    def _segment_count(self, seg: Segment) -> int:
        """How many ``segment`` counts ``seg`` contributes (expandable: none)."""
        return 1
