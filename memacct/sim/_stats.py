"""The allocator's statistics: per-pool counters with peaks and cumulative increases.

torch keeps a ``DeviceStats`` of ``Stat`` records (current, peak, allocated, freed) per
pool kind (c10/core/CachingDeviceAllocator.h); here the counters of one pool are plain
int attributes of :class:`Stats`, because the malloc/free hot path updates several per
call, and :func:`counter_stats` spells them with torch's key names.
"""

# Peaks are kept with ``if c > peak: peak = c``, not ``max()``: a call costs
# more on the hot path, which runs millions of times per benchmark.
# ruff: noqa: PLR1730

from __future__ import annotations

__all__ = [
    "COUNTERS",
    "STAT_SOURCES",
    "Peaks",
    "Stat",
    "Stats",
    "counter_stats",
    "more_inactive_split",
    "reset_peaks",
]

# The counters behind the statistics. Each has a current value, a peak since
# the last reset (``_peak``) and a cumulative increase (``_cum``); the
# cumulative decrease ("freed") is ``cum - current``.
COUNTERS = (
    "allocation",
    "allocated_bytes",
    "requested_bytes",
    "segment",
    "reserved_bytes",
    "inactive_split",
    "inactive_split_bytes",
)
# torch's stat names -> the counter that backs them. Without streams a block
# is active exactly while it is allocated, so ``active*`` share counters.
STAT_SOURCES: tuple[tuple[str, str], ...] = (
    ("active", "allocation"),
    ("active_bytes", "allocated_bytes"),
    ("allocated_bytes", "allocated_bytes"),
    ("allocation", "allocation"),
    ("inactive_split", "inactive_split"),
    ("inactive_split_bytes", "inactive_split_bytes"),
    ("requested_bytes", "requested_bytes"),
    ("reserved_bytes", "reserved_bytes"),
    ("segment", "segment"),
)


class Peaks:
    """Peaks of the all-pools counters.

    The all-pools current and cumulative values are the sums of the two
    pools'; only the peak of the sum needs its own record.
    """

    __slots__ = COUNTERS

    def __init__(self) -> None:
        self.allocation = self.allocated_bytes = self.requested_bytes = 0
        self.segment = self.reserved_bytes = 0
        self.inactive_split = self.inactive_split_bytes = 0


class Stats:
    """The counters of one pool as plain int attributes.

    Each counter has its current value, its peak since the last reset
    (``<counter>_peak``) and its cumulative increase (``<counter>_cum``); the
    cumulative decrease ("freed") is ``cum - current``. Plain attributes, not
    an object per counter, because the malloc/free hot path updates several
    per call. ``other`` is the other pool's counters and ``peaks`` the
    all-pools peaks, both needed to keep the all-pools peak on an increase.
    """

    __slots__ = (
        *(f"{c}{suffix}" for c in COUNTERS for suffix in ("", "_peak", "_cum")),
        "other",
        "peaks",
    )

    def __init__(self, peaks: Peaks) -> None:
        self.allocation = self.allocation_peak = self.allocation_cum = 0
        self.allocated_bytes = self.allocated_bytes_peak = self.allocated_bytes_cum = 0
        self.requested_bytes = self.requested_bytes_peak = self.requested_bytes_cum = 0
        self.segment = self.segment_peak = self.segment_cum = 0
        self.reserved_bytes = self.reserved_bytes_peak = self.reserved_bytes_cum = 0
        self.inactive_split = self.inactive_split_peak = self.inactive_split_cum = 0
        self.inactive_split_bytes = self.inactive_split_bytes_peak = 0
        self.inactive_split_bytes_cum = 0
        self.other = self
        self.peaks = peaks

    def read(self, counter: str) -> tuple[int, int, int]:
        """``(current, peak, cumulative increase)`` of ``counter``."""
        cur: int = getattr(self, counter)
        peak: int = getattr(self, counter + "_peak")
        cum: int = getattr(self, counter + "_cum")
        return cur, peak, cum

    def add(self, counter: str, n: int) -> None:
        """Change ``counter`` by ``n`` (either sign), keeping peaks and the cumulative."""
        cur: int = getattr(self, counter) + n
        setattr(self, counter, cur)
        if n > 0:
            setattr(self, counter + "_cum", getattr(self, counter + "_cum") + n)
            if cur > getattr(self, counter + "_peak"):
                setattr(self, counter + "_peak", cur)
            total = cur + getattr(self.other, counter)
            if total > getattr(self.peaks, counter):
                setattr(self.peaks, counter, total)


class Stat:
    """One torch ``Stat`` outside the pools: current, peak, allocated, freed."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def change(self, n: int) -> None:
        self.current += n
        if n > 0:
            self.allocated += n
            if self.current > self.peak:
                self.peak = self.current
        else:
            self.freed -= n


def more_inactive_split(st: Stats, blocks: int, nbytes: int) -> None:
    """Increase a pool's ``inactive_split`` counters by ``blocks`` >= 0 and ``nbytes`` >= 0."""
    if blocks:
        c = st.inactive_split + blocks
        st.inactive_split = c
        st.inactive_split_cum += blocks
        if c > st.inactive_split_peak:
            st.inactive_split_peak = c
        c += st.other.inactive_split
        if c > st.peaks.inactive_split:
            st.peaks.inactive_split = c
    if nbytes:
        c = st.inactive_split_bytes + nbytes
        st.inactive_split_bytes = c
        st.inactive_split_bytes_cum += nbytes
        if c > st.inactive_split_bytes_peak:
            st.inactive_split_bytes_peak = c
        c += st.other.inactive_split_bytes
        if c > st.peaks.inactive_split_bytes:
            st.peaks.inactive_split_bytes = c


def counter_stats(
    out: dict[str, int], small_name: str, small: Stats, large_name: str, large: Stats,
    peaks: Peaks,
) -> None:
    """Write the counters' ``<stat>.<pool>.<metric>`` keys (pools ``all`` and the two named)."""
    for stat_name, counter in STAT_SOURCES:
        s_cur, s_peak, s_cum = small.read(counter)
        l_cur, l_peak, l_cum = large.read(counter)
        groups = (
            ("all", s_cur + l_cur, getattr(peaks, counter), s_cum + l_cum),
            (small_name, s_cur, s_peak, s_cum),
            (large_name, l_cur, l_peak, l_cum),
        )
        for pool_name, cur, peak, cum in groups:
            prefix = f"{stat_name}.{pool_name}."
            out[prefix + "allocated"] = cum
            out[prefix + "current"] = cur
            out[prefix + "freed"] = cum - cur
            out[prefix + "peak"] = peak


def reset_peaks(small: Stats, large: Stats, peaks: Peaks) -> None:
    """Set every peak of the two pools and of all pools to its current value."""
    for counter in COUNTERS:
        for st in (small, large):
            setattr(st, counter + "_peak", getattr(st, counter))
        setattr(peaks, counter, getattr(small, counter) + getattr(large, counter))
