"""The caching-allocator model shared by every preset (the ``torch-cuda`` rules).

See ``memacct.sim.allocator`` for the public face and ``docs/simulator.md`` for the facts
modelled. Everything here is written for speed on the malloc/free hot path:
``__slots__`` classes, plain attribute access, one int key per free block and
incremental statistics; :meth:`CachingAllocator._recount_stats` recomputes the
statistics from the blocks so tests can check the incremental bookkeeping.
"""

# Peaks are kept with ``if c > peak: peak = c``, not ``max()``: a call costs
# more on the hot path, which runs millions of times per benchmark.
# ruff: noqa: PLR1730

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from memacct.backend import LARGE_BUFFER_BYTES
from memacct.errors import InvalidInputError, MemacctError
from memacct.sim._freeset import FreeSet
from memacct.units import MiB, format_size

__all__ = [
    "KEY_SHIFT",
    "LARGE_BUFFER",
    "MIN_BLOCK_SIZE",
    "MIN_LARGE_ALLOC",
    "ONE_EXA_BYTES",
    "ROUND_LARGE",
    "SMALL_BUFFER",
    "SMALL_SIZE",
    "CachingAllocator",
    "DeviceMemory",
    "InvalidPointerError",
    "InvalidTypeError",
    "PrivatePool",
    "SimOutOfMemory",
    "SimpleDeviceMemory",
    "format_size",
]

MIN_BLOCK_SIZE = 512
"""Every request is rounded up to a multiple of this (and is at least this)."""
SMALL_SIZE = 1 * MiB
"""Rounded requests up to this size go to the small pool."""
SMALL_BUFFER = 2 * MiB
"""Segment size of the small pool."""
LARGE_BUFFER = LARGE_BUFFER_BYTES
"""Segment size for large requests below :data:`MIN_LARGE_ALLOC` (torch's ``kLargeBuffer``)."""
MIN_LARGE_ALLOC = 10 * MiB
"""Large requests from this size on get a segment of their own size (rounded)."""
ROUND_LARGE = 2 * MiB
"""Rounding of segments for requests of :data:`MIN_LARGE_ALLOC` and more."""

ONE_EXA_BYTES = 1 << 60
"""Requests of this size or more are refused before the allocator looks anywhere."""
MAX_SPLIT_FLOOR_MB = LARGE_BUFFER // MiB
"""``max_split_size_mb`` must be larger than this (torch's check)."""
_NO_LIMIT = 1 << 127
"""``max_split_size`` when unset (torch's ``SIZE_MAX``)."""

KEY_SHIFT = 64
"""Free blocks are keyed ``size << KEY_SHIFT | address``: best fit, then lowest address."""
_ADDR_MASK = (1 << KEY_SHIFT) - 1
_BASE_ADDRESS = 0x7F00_0000_0000
"""First simulated device address (looks like a real device pointer, never 0)."""
_ADDRESS_ALIGN = 2 * MiB
"""New segments start on this boundary, as device virtual addresses do."""

# Block states (not statistics: ``allocated_bytes`` is a statistic, ``IN_USE`` a state).
FREE = 0
"""Cached: mapped memory no tensor uses."""
IN_USE = 1
"""Handed out by ``malloc`` and not yet freed."""
UNMAPPED = 2
"""Virtual address space without memory behind it (expandable segments only)."""



SegmentListing = list[tuple[str, int, int, list[tuple[int, int, str]]]]


def list_segments(pools: Iterable[Any], names: Mapping[int, str]) -> SegmentListing:
    """``(pool, address, size, [(block address, size, state name)])`` per segment, for tests.

    ``pools`` hold ``segments`` (address -> segment with a linked ``head`` block)
    and a ``stat_name``; ``names`` names each block state.
    """
    out: SegmentListing = []
    for pool in pools:
        for addr in sorted(pool.segments):
            seg = pool.segments[addr]
            blocks = []
            b = seg.head
            while b is not None:
                blocks.append((b.addr, b.size, names[b.state]))
                b = b.next
            out.append((pool.stat_name, seg.addr, seg.size, blocks))
    return out


def walk_blocks(seg: Any, block: str, span: str) -> Iterator[tuple[_Block | None, _Block]]:
    """``(previous block, block)`` along ``seg`` from its lowest address, for the tests' recounts.

    Checks that the chain is linked both ways and tiles the segment, raising
    :class:`AssertionError` (naming the ``block`` and the ``span`` as the allocator
    calls them) where it does not.
    """
    b: _Block | None = seg.head
    expect = seg.addr
    prev: _Block | None = None
    while b is not None:
        if b.addr != expect or b.prev is not prev:
            raise AssertionError(f"broken {block} chain at {b.addr:#x}")
        yield prev, b
        expect = b.addr + b.size
        prev = b
        b = b.next
    if expect != seg.addr + seg.size:
        raise AssertionError(f"{block}s do not tile {span} {seg.addr:#x}")


def link_after(block: _Block, new: _Block) -> None:
    """Put ``new`` into ``block``'s chain just above it."""
    nxt = block.next
    new.prev = block
    new.next = nxt
    if nxt is not None:
        nxt.prev = new
    block.next = new


def merge_neighbours(block: _Block, drop: Callable[[_Block], None]) -> _Block:
    """Merge ``block`` (in no index) with the neighbours in its own state; return the result.

    ``drop`` takes each neighbour it absorbs out of the allocator's indexes first. The
    lower neighbour absorbs ``block``, so a segment's head never moves. (The base
    allocator's free path does the same inline, on its hot path.)
    """
    state = block.state
    below = block.prev
    if below is not None and below.state == state:
        drop(below)
        _join(below, block)
        block = below
    above = block.next
    if above is not None and above.state == state:
        drop(above)
        _join(block, above)
    return block


def _join(lower: _Block, upper: _Block) -> None:
    lower.size += upper.size
    nxt = upper.next
    lower.next = nxt
    if nxt is not None:
        nxt.prev = lower


class SimOutOfMemory(MemacctError, RuntimeError):
    """The simulated device has not enough free memory for a request.

    Raised by an allocator after its own release-and-retry failed (like
    ``torch.cuda.OutOfMemoryError``), and by :class:`memacct.sim.SimDevice`
    for memory taken outside the allocator.

    Attributes:
        requested: bytes asked for by the caller.
        attempted: bytes the allocator tried to get from the device (a whole
            segment or pool block; equals ``requested`` outside the allocator).
        total: device capacity in bytes.
        free: device bytes free when the request failed.
        reserved: bytes the allocator held from the device.
        allocated: bytes of the allocator's blocks in use.
    """

    def __init__(
        self,
        message: str,
        *,
        requested: int = 0,
        attempted: int = 0,
        total: int = 0,
        free: int = 0,
        reserved: int = 0,
        allocated: int = 0,
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.attempted = attempted
        self.total = total
        self.free = free
        self.reserved = reserved
        self.allocated = allocated

    def __reduce__(self) -> tuple[type[SimOutOfMemory], tuple[str], dict[str, int]]:
        # Keeps the numbers across pickling (multiprocessing, pytest-xdist).
        return (type(self), (str(self.args[0]),), dict(self.__dict__))


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument of the wrong type (also a :class:`TypeError`, as torch raises)."""


class InvalidPointerError(InvalidInputError):
    """``free`` of a pointer or handle that is not live (never allocated, or freed twice)."""


@runtime_checkable
class DeviceMemory(Protocol):
    """The physical memory an allocator maps its segments from.

    :class:`memacct.sim.SimDevice` implements it for its allocator; an
    allocator never sees anything else of the device.
    """

    @property
    def total(self) -> int:
        """Capacity of the device in bytes."""
        ...

    @property
    def free(self) -> int:
        """Bytes nobody holds (the allocator, the process outside it, other processes)."""
        ...

    def map(self, nbytes: int) -> bool:
        """Take ``nbytes`` for the allocator; ``False`` (and nothing taken) if fewer are free."""
        ...

    def unmap(self, nbytes: int) -> None:
        """Give back ``nbytes`` the allocator took."""
        ...


class SimpleDeviceMemory:
    """A stand-alone :class:`DeviceMemory` of ``total`` bytes used by one allocator.

    For tests and benchmarks of an allocator without a :class:`memacct.sim.SimDevice`.
    """

    __slots__ = ("_total", "mapped")

    def __init__(self, total: int) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
            raise InvalidInputError(f"device memory total must be a positive int, got {total!r}")
        self._total = total
        self.mapped = 0

    @property
    def total(self) -> int:
        """Capacity in bytes."""
        return self._total

    @property
    def free(self) -> int:
        """Bytes not mapped."""
        return self._total - self.mapped

    def map(self, nbytes: int) -> bool:
        """Map ``nbytes`` if that many are free."""
        if nbytes > self._total - self.mapped:
            return False
        self.mapped += nbytes
        return True

    def unmap(self, nbytes: int) -> None:
        """Unmap ``nbytes``."""
        self.mapped -= nbytes


class _Block:
    """A contiguous range of one segment: allocated, free (cached) or unmapped."""

    __slots__ = ("addr", "next", "pool", "prev", "requested", "size", "state")

    def __init__(self, addr: int, size: int, pool: _Pool, state: int = FREE) -> None:
        self.addr = addr
        self.size = size
        self.pool = pool
        self.state = state
        self.requested = 0
        self.prev: _Block | None = None
        self.next: _Block | None = None


class _Segment:
    """One mapping from the device; ``head`` is its lowest block, which never changes."""

    __slots__ = ("addr", "head", "size")

    def __init__(self, addr: int, size: int, head: _Block) -> None:
        self.addr = addr
        self.size = size
        self.head = head


# The counters behind the statistics. Each has a current value, a peak since
# the last reset (``_peak``) and a cumulative increase (``_cum``); the
# cumulative decrease ("freed") is ``cum - current``.
_COUNTERS = (
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
_STAT_SOURCES: tuple[tuple[str, str], ...] = (
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


class _Peaks:
    """Peaks of the all-pools counters.

    The all-pools current and cumulative values are the sums of the two
    pools'; only the peak of the sum needs its own record.
    """

    __slots__ = _COUNTERS

    def __init__(self) -> None:
        self.allocation = self.allocated_bytes = self.requested_bytes = 0
        self.segment = self.reserved_bytes = 0
        self.inactive_split = self.inactive_split_bytes = 0


class _Stats:
    """The counters of one pool as plain int attributes.

    Each counter has its current value, its peak since the last reset
    (``<counter>_peak``) and its cumulative increase (``<counter>_cum``); the
    cumulative decrease ("freed") is ``cum - current``. Plain attributes, not
    an object per counter, because the malloc/free hot path updates several
    per call. ``other`` is the other pool's counters and ``peaks`` the
    all-pools peaks, both needed to keep the all-pools peak on an increase.
    """

    __slots__ = (
        *(f"{c}{suffix}" for c in _COUNTERS for suffix in ("", "_peak", "_cum")),
        "other",
        "peaks",
    )

    def __init__(self, peaks: _Peaks) -> None:
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


class _Pool:
    """A free list with its segments and statistics.

    Attributes:
        stat_name: the pool's name in statistics keys (``small_pool``, ``large_pool``).
        free: keys of the pool's free (mapped) blocks.
        split_min: a block is split when the remainder is at least this many bytes.
        segments: the pool's segments by address.
        page: mapping granularity (expandable segments only).
        unmapped: addresses of the pool's unmapped blocks (expandable segments only).
        stats: the pool's counters.
    """

    __slots__ = (
        "free", "page", "segments", "small", "split_min", "stat_name", "stats", "stream",
        "unmapped",
    )

    def __init__(self, stat_name: str, split_min: int, peaks: _Peaks, page: int = 0) -> None:
        self.stat_name = stat_name
        self.small = stat_name == "small_pool"
        self.stream = 0
        self.split_min = split_min
        self.page = page
        self.free = FreeSet()
        self.unmapped = FreeSet()
        self.segments: dict[int, _Segment] = {}
        self.stats = _Stats(peaks)


class PrivatePool:
    """A private memory pool (torch's CUDA-graph pool or ``torch.cuda.MemPool``).

    Allocations routed to it (:meth:`CachingAllocator.use_pool`) take segments
    that only the pool uses; blocks freed in it stay in it. Its wholly free
    segments go back to the device only after :meth:`CachingAllocator.release_pool`
    (the graph or ``MemPool`` was deleted), at the next ``empty_cache`` or retry.

    Attributes:
        id: the pool's number (1, 2, ...; 0 is the default pool).
        released: whether its owner let it go.
    """

    __slots__ = ("id", "pools", "released")

    def __init__(self, pool_id: int, pools: tuple[_Pool, _Pool]) -> None:
        self.id = pool_id
        self.pools = pools
        self.released = False

    def __repr__(self) -> str:
        return f"<PrivatePool {self.id}{' released' if self.released else ''}>"


class _Stat:
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


def _pair_pools(first: _Pool, second: _Pool) -> None:
    """Let each pool's counters see the other's, for the all-pools peaks."""
    first.stats.other = second.stats
    second.stats.other = first.stats


def _more_inactive_split(st: _Stats, blocks: int, nbytes: int) -> None:
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


def _check_size(size: object) -> int:
    """Validate a malloc size that is not a plain positive int."""
    if isinstance(size, bool):
        raise InvalidInputError(f"malloc size must be an int number of bytes, got {size!r}")
    try:
        n = operator.index(size)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInputError(
            f"malloc size must be an int number of bytes, got {size!r} ({type(size).__name__})"
        ) from None
    if n < 0:
        raise InvalidInputError(f"malloc size must be >= 0 bytes, got {n}")
    return n


def _check_max_split(value: object) -> int:
    if value is None:
        return _NO_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value <= MAX_SPLIT_FLOOR_MB:
        raise InvalidInputError(
            f"max_split_size_mb too small, must be > {MAX_SPLIT_FLOOR_MB} (an int of MiB), "
            f"got {value!r}; leave it unset for no limit"
        )
    return value * MiB


def _check_divisions(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (
        value > 1 and value & (value - 1)
    ):
        raise InvalidInputError(
            f"roundup_power2_divisions must be a power of 2 (or 0/1 for off), got {value!r}"
        )
    return value


def _check_gc_threshold(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise InvalidInputError(
            f"garbage_collection_threshold must be a number strictly between 0.0 and 1.0, "
            f"got {value!r}"
        )
    return float(value)


def _split_settings(text: str) -> list[str]:
    """Split ``a:1,b:[x:1,y:2]`` at the commas outside brackets."""
    items: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        items.append(current)
    return [item for item in items if item.strip()]


def _int_setting(values: dict[str, str], key: str) -> int:
    try:
        return int(values[key])
    except ValueError:
        raise InvalidInputError(
            f"allocator setting {key} must be an int, got {values[key]!r}"
        ) from None


def _float_setting(values: dict[str, str], key: str) -> float:
    try:
        return float(values[key])
    except ValueError:
        raise InvalidInputError(
            f"allocator setting {key} must be a number, got {values[key]!r}"
        ) from None


def _parse_buckets(text: str) -> dict[int, int]:
    """``[64:8,128:2,>:1]`` -> divisions by log2(size in MiB); ``-1`` for ``>``."""
    buckets: dict[int, int] = {}
    last = 0
    for item in text.strip("[]").split(","):
        key, _, value = item.partition(":")
        divisions = _check_divisions(int(value))
        if key.strip() == ">":
            buckets[-1] = divisions
            continue
        mib = int(key)
        if mib <= 0 or mib & (mib - 1):
            raise InvalidInputError(
                f"roundup_power2_divisions interval {mib} MiB must be a power of 2"
            )
        bucket = mib.bit_length() - 1
        for b in range(last, bucket + 1):
            buckets.setdefault(b, divisions)
        last = bucket + 1
    if -1 in buckets:
        for b in range(last, 40):
            buckets.setdefault(b, buckets[-1])
    return buckets


def _roundup_power2(size: int, divisions: int, rounded: int) -> int:
    """torch's ``roundup_power2_next_division`` for sizes above ``512 x divisions``."""
    if size <= MIN_BLOCK_SIZE * divisions:
        return rounded
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    base = size & ~(step - 1)
    return size if base == size else base + step


class CachingAllocator:
    """PyTorch's CUDA caching allocator, modelled (preset ``torch-cuda``).

    Requests are rounded up to a multiple of 512 bytes. Rounded requests up to
    1 MiB are served from the small pool (2 MiB segments), larger ones from
    the large pool (a 20 MiB segment below 10 MiB, else a segment of the
    request rounded up to 2 MiB). A request takes the smallest free block of
    its pool that is large enough (lowest address on ties); the block is split
    when the remainder is at least 512 bytes (small pool) or more than 1 MiB
    (large pool), otherwise the remainder stays inside the allocated block
    (counted in ``allocated_bytes`` but not ``requested_bytes``). The
    allocated piece keeps the low address. A freed block merges with free
    neighbours of its own segment only. When no cached block fits, a new
    segment is mapped; if the device is full, every wholly free segment is
    released (``num_alloc_retries``) and the mapping retried once; then
    :class:`SimOutOfMemory` (``num_ooms``).

    The allocator is not thread safe; :class:`memacct.sim.SimDevice` locks
    around it. A request of 0 bytes returns the null pointer ``0`` and
    allocates nothing (as torch does for empty tensors); ``free(0)`` is a no-op.
    Virtual addresses of released segments are never reused, so the same
    trace always gives the same addresses and statistics.

    Settings (``PYTORCH_CUDA_ALLOC_CONF``), rules in ``docs/simulator.md``:
    ``max_split_size_mb`` (blocks of that size or more are never split and
    serve only requests within 20 MiB of their size; ``oversize_*`` counts
    them), ``roundup_power2_divisions`` (sizes rounded up to one of N steps
    between powers of two), ``garbage_collection_threshold`` (with
    :meth:`set_memory_fraction`: free cached segments before growing past
    that share of the allowed memory).

    Private pools (:meth:`private_pool`, :meth:`use_pool`) hold CUDA-graph and
    ``MemPool`` memory; ``stream=`` keeps one free list per stream.

    Args:
        device_memory: where segments are mapped from.
        max_split_size_mb: ``None`` (unlimited) or an int > 20.
        roundup_power2_divisions: ``None``/0/1 (off) or a power of two.
        garbage_collection_threshold: ``None`` or a float in (0, 1).
    """

    name: ClassVar[str] = "torch-cuda"
    """Preset name."""
    oom_hint: ClassVar[str] = (
        "If reserved but unallocated memory is large, the torch-cuda-expandable "
        "allocator (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) avoids that "
        "fragmentation."
    )
    """The preset's advice, last in its out-of-memory message."""
    growth_granularity_bytes: int = ROUND_LARGE
    """Bytes by which the reservation grows for a large request (a class
    attribute; a preset with a configurable unit overrides it per instance)."""
    _pad: ClassVar[int] = 0
    """Bytes added to every request before rounding."""
    _track_inactive_split: ClassVar[bool] = True
    """Whether free split blocks count as ``inactive_split`` (not for expandable segments)."""
    _refit: ClassVar[bool] = False
    """Whether :meth:`_refit_block` may replace the best-fit block (expandable segments)."""

    def __init__(
        self,
        device_memory: DeviceMemory,
        *,
        max_split_size_mb: int | None = None,
        roundup_power2_divisions: int | None = None,
        garbage_collection_threshold: float | None = None,
    ) -> None:
        self._device = device_memory
        self._max_split = _check_max_split(max_split_size_mb)
        self._divisions = _check_divisions(roundup_power2_divisions)
        self._gc_threshold = _check_gc_threshold(garbage_collection_threshold)
        self._peaks = _Peaks()
        self._small = _Pool("small_pool", MIN_BLOCK_SIZE, self._peaks)
        # Large blocks split only when more than 1 MiB would remain.
        self._large = _Pool("large_pool", SMALL_SIZE + 1, self._peaks)
        _pair_pools(self._small, self._large)
        self._small_max = SMALL_SIZE
        """Rounded requests up to this size use the small pool."""
        self._persistent_pool: _Pool | None = None
        """Pool for ``persistent=True`` requests, if the preset has one."""
        self._extra_pools: list[_Pool] = []
        """Stream and private pools (they share the default pools' counters)."""
        self._stream_pools: dict[tuple[int, int], tuple[_Pool, _Pool]] = {}
        self._private: dict[int, PrivatePool] = {}
        self._capture: PrivatePool | None = None
        self._division_buckets: dict[int, int] = {}
        self._slow_rounding = self._divisions > 1
        self._allowed: int | None = None
        self._gc_calls = 0
        """torch's ``get_free_blocks_call_count`` of the large pool (garbage collection on)."""
        self._gc_base: dict[int, int] = {}
        """``gc_count_base`` of free blocks: the call count when each was last freed."""
        self._slow = self._slow_rounding
        """Requests take the slow path (rounding, a private pool in use, garbage collection)."""
        self._fraction = 1.0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.oversize_allocations = _Stat()
        self.oversize_segments = _Stat()
        self._acc_base: dict[str, int] = {}
        self._live: dict[int, _Block] = {}
        self._free_blocks: dict[int, _Block] = {}
        self._next_addr = _BASE_ADDRESS
        self.num_alloc_retries = 0
        self.num_ooms = 0

    @property
    def _pools(self) -> tuple[_Pool, ...]:
        return (self._small, self._large, *self._extra_pools)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} allocated={self.allocated} "
            f"reserved={self.reserved} live_blocks={len(self._live)}>"
        )

    # ------------------------------------------------------------------ API

    @property
    def allocated(self) -> int:
        """Bytes of allocated blocks (``allocated_bytes.all.current``)."""
        return self._small.stats.allocated_bytes + self._large.stats.allocated_bytes

    @property
    def reserved(self) -> int:
        """Bytes held from the device for blocks (``reserved_bytes.all.current``)."""
        return self._small.stats.reserved_bytes + self._large.stats.reserved_bytes

    @property
    def live_blocks(self) -> int:
        """Number of allocated blocks."""
        return len(self._live)

    def round_size(self, size: int) -> int:
        """The block size a request of ``size`` bytes (> 0) needs before any split rule."""
        rounded = (size + self._pad + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        if self._slow_rounding:
            return self._roundup(size, rounded)
        return rounded

    def configure(self, settings: str) -> None:
        """Apply allocator settings as ``PYTORCH_CUDA_ALLOC_CONF`` spells them.

        Like ``torch.cuda.memory._set_allocator_settings``, every call starts from
        the defaults: keys not named are reset. Keys: ``max_split_size_mb``,
        ``roundup_power2_divisions`` (``4`` or ``[64:8,128:2,>:1]``, sizes in MiB),
        ``garbage_collection_threshold``, ``expandable_segments`` (must match the
        preset).

        Raises:
            InvalidInputError: an unknown key or an invalid value (named).
        """
        values: dict[str, str] = {}
        for item in _split_settings(settings):
            key, sep, value = item.partition(":")
            key = key.strip()
            if not sep or not key:
                raise InvalidInputError(
                    f"allocator setting {item!r} is not key:value; e.g. max_split_size_mb:128"
                )
            values[key] = value.strip()
        known = {
            "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
            "expandable_segments",
        }
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidInputError(
                f"Unrecognized allocator setting {unknown[0]!r}; known: {', '.join(sorted(known))}"
            )
        if "expandable_segments" in values:
            wanted = values["expandable_segments"] == "True"
            if wanted != (self._refit is True):
                raise InvalidInputError(
                    f"expandable_segments:{values['expandable_segments']} does not match the "
                    f"{self.name} preset; choose the preset with(out) -expandable instead"
                )
        self._max_split = _check_max_split(
            _int_setting(values, "max_split_size_mb") if "max_split_size_mb" in values else None
        )
        self._gc_threshold = _check_gc_threshold(
            _float_setting(values, "garbage_collection_threshold")
            if "garbage_collection_threshold" in values else None
        )
        self._divisions = 0
        self._division_buckets = {}
        text = values.get("roundup_power2_divisions")
        if text is not None and text.startswith("["):
            self._division_buckets = _parse_buckets(text)
        elif text is not None:
            self._divisions = _check_divisions(_int_setting(values, "roundup_power2_divisions"))
        self._slow_rounding = self._divisions > 1 or bool(self._division_buckets)
        self._set_slow()

    def _roundup(self, size: int, rounded: int) -> int:
        """Rounding under ``roundup_power2_divisions`` (torch's ``round_size``)."""
        n = size + self._pad
        divisions = self._divisions
        if self._division_buckets:
            bucket = max(0, n.bit_length() - 1 - 20)  # log2 of the size in MiB
            divisions = self._division_buckets.get(bucket, self._division_buckets.get(-1, 0))
        if divisions > 1:
            return _roundup_power2(n, divisions, rounded)
        return rounded

    def malloc(self, size: int, *, persistent: bool = False, stream: int = 0) -> int:
        """Allocate ``size`` bytes and return the block's address.

        Args:
            size: bytes requested (``0`` returns the null pointer ``0``).
            persistent: the block holds weights or constants; only the
                ``mindspore`` presets use the hint (their persistent pool).
            stream: the stream the block is allocated on (0: the default); a
                block is reused only by requests on its stream.

        Raises:
            SimOutOfMemory: the device cannot hold the request even after the
                allocator released its wholly free cached segments.
            InvalidInputError: ``size`` is negative or not an int.
        """
        # Hot path: everything inline, statistics included.
        if size.__class__ is not int or size <= 0:
            size = _check_size(size)
            if size == 0:
                return 0
        rounded = (size + self._pad + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        if persistent and self._persistent_pool is not None:
            pool = self._persistent_pool
        elif self._slow or stream:
            pool, rounded = self._route(size, rounded, stream)
        elif rounded <= self._small_max:
            pool = self._small
        else:
            pool = self._large
        key = pool.free.pop_ceiling(rounded << KEY_SHIFT)
        if key >= 0 and self._max_split < _NO_LIMIT and not self._split_fit(key, rounded):
            pool.free.add(key)
            key = -1
        if key >= 0:
            block = self._free_blocks.pop(key & _ADDR_MASK)
            if self._refit:
                block = self._refit_block(pool, block)
        else:
            block = self._grow(pool, rounded, size)
        ps = pool.stats
        nxt = block.next
        remaining = block.size - rounded
        if block.size >= self._max_split:
            self.oversize_allocations.change(1)
        elif remaining >= pool.split_min and (pool.small or rounded < self._max_split):
            addr = block.addr
            rest = _Block(addr + rounded, remaining, pool)
            rest.prev = block
            rest.next = nxt
            if nxt is not None:
                nxt.prev = rest
            block.next = rest
            block.size = rounded
            pool.free.add((remaining << KEY_SHIFT) | (addr + rounded))
            self._free_blocks[addr + rounded] = rest
            if self._track_inactive_split:
                if block.prev is not None or nxt is not None:
                    # The free remainder replaces the split block it came from.
                    ps.inactive_split_bytes -= rounded
                else:
                    _more_inactive_split(ps, 1, remaining)
        elif self._track_inactive_split and (block.prev is not None or nxt is not None):
            ps.inactive_split -= 1
            ps.inactive_split_bytes -= block.size
        block.state = IN_USE
        block.requested = size
        addr = block.addr
        self._live[addr] = block
        n = block.size
        o = ps.other
        ap = ps.peaks
        c = ps.allocation + 1
        ps.allocation = c
        ps.allocation_cum += 1
        if c > ps.allocation_peak:
            ps.allocation_peak = c
        c += o.allocation
        if c > ap.allocation:
            ap.allocation = c
        c = ps.allocated_bytes + n
        ps.allocated_bytes = c
        ps.allocated_bytes_cum += n
        if c > ps.allocated_bytes_peak:
            ps.allocated_bytes_peak = c
        c += o.allocated_bytes
        if c > ap.allocated_bytes:
            ap.allocated_bytes = c
        c = ps.requested_bytes + size
        ps.requested_bytes = c
        ps.requested_bytes_cum += size
        if c > ps.requested_bytes_peak:
            ps.requested_bytes_peak = c
        c += o.requested_bytes
        if c > ap.requested_bytes:
            ap.requested_bytes = c
        return addr

    def free(self, ptr: int) -> None:
        """Return a block to the cache, merging it with free neighbours of its segment.

        Raises:
            InvalidPointerError: ``ptr`` is not a live allocation (never
                returned by :meth:`malloc`, or already freed).
        """
        block = self._live.pop(ptr, None)
        if block is None:
            self._free_unknown(ptr)
            return
        pool = block.pool
        size = block.size
        requested = block.requested
        if size >= self._max_split:
            self.oversize_allocations.change(-1)
        free_set = pool.free
        free_blocks = self._free_blocks
        block.state = FREE
        net_blocks = 0
        net_bytes = 0
        prev = block.prev
        if prev is not None and prev.state == FREE:
            psize = prev.size
            free_set.remove((psize << KEY_SHIFT) | prev.addr)
            del free_blocks[prev.addr]
            net_blocks = -1
            net_bytes = -psize
            prev.size = psize + size
            nxt = block.next
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        nxt = block.next
        if nxt is not None and nxt.state == FREE:
            nsize = nxt.size
            free_set.remove((nsize << KEY_SHIFT) | nxt.addr)
            del free_blocks[nxt.addr]
            net_blocks -= 1
            net_bytes -= nsize
            block.size += nsize
            after = nxt.next
            block.next = after
            if after is not None:
                after.prev = block
        free_set.add((block.size << KEY_SHIFT) | block.addr)
        free_blocks[block.addr] = block
        if self._slow and self._gc_threshold:
            self._gc_base[block.addr] = self._gc_calls
        ps = pool.stats
        if self._track_inactive_split:
            if block.prev is not None or block.next is not None:
                net_blocks += 1
                net_bytes += block.size
            if net_blocks < 0:
                ps.inactive_split += net_blocks
                net_blocks = 0
            if net_bytes < 0:
                ps.inactive_split_bytes += net_bytes
                net_bytes = 0
            if net_blocks or net_bytes:
                _more_inactive_split(ps, net_blocks, net_bytes)
        ps.allocation -= 1
        ps.allocated_bytes -= size
        ps.requested_bytes -= requested

    def empty_cache(self) -> None:
        """Release every wholly free segment to the device.

        A free tail of a partly used segment is never returned: it stays
        reserved and shows in ``inactive_split_bytes``.
        """
        self._release_cached()

    def reset_peak_memory_stats(self) -> None:
        """Set every peak to its current value; cumulative counters stay."""
        small, large = self._small.stats, self._large.stats
        for counter in _COUNTERS:
            for st in (small, large):
                setattr(st, counter + "_peak", getattr(st, counter))
            setattr(self._peaks, counter, getattr(small, counter) + getattr(large, counter))
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

    def set_memory_fraction(self, fraction: float) -> None:
        """Cap this allocator's reservation at ``fraction`` of the device (``0.0``-``1.0``).

        Raises:
            InvalidInputError: ``fraction`` is not a float in [0, 1] (torch's
                ``set_per_process_memory_fraction`` checks).
        """
        if not isinstance(fraction, float):
            raise InvalidTypeError(
                f"Invalid type for fraction argument, must be float, got {fraction!r}: "
                "pass e.g. 0.5"
            )
        if not 0.0 <= fraction <= 1.0:
            raise InvalidInputError(
                f"Invalid fraction value: {fraction}. Allowed range: 0~1; pass a fraction "
                "of the device between 0 and 1"
            )
        self._allowed = int(fraction * self._device.total)
        self._set_slow()
        self._fraction = fraction

    @property
    def memory_fraction(self) -> float:
        """The cap set by :meth:`set_memory_fraction` (1.0 when unset)."""
        return self._fraction

    # ------------------------------------------------------- private pools

    def private_pool(self) -> PrivatePool:
        """A new private pool (a CUDA graph's pool, or ``torch.cuda.MemPool``)."""
        pool_id = len(self._private) + 1
        while pool_id in self._private:
            pool_id += 1
        pools = (self._make_pool(self._small), self._make_pool(self._large))
        pp = PrivatePool(pool_id, pools)
        self._private[pool_id] = pp
        return pp

    def use_pool(self, pool: PrivatePool | None) -> None:
        """Route the following requests to ``pool`` (``None``: back to the default pools).

        Raises:
            InvalidInputError: ``pool`` is not one of this allocator's live private pools.
        """
        if pool is not None and self._private.get(getattr(pool, "id", -1)) is not pool:
            raise InvalidInputError(
                f"{pool!r} is not a live private pool of this allocator: make one with "
                "private_pool() and do not use it after release_pool()"
            )
        if pool is not None and pool.released:
            raise InvalidInputError(f"{pool!r} was released; make a new private pool")
        self._capture = pool
        self._set_slow()

    def release_pool(self, pool: PrivatePool) -> None:
        """The pool's owner is gone: its free segments may go back to the device.

        Raises:
            InvalidInputError: ``pool`` is not a live private pool of this allocator.
        """
        if self._private.get(getattr(pool, "id", -1)) is not pool:
            raise InvalidInputError(f"{pool!r} is not a live private pool of this allocator")
        pool.released = True
        if self._capture is pool:
            self.use_pool(None)
        self._drop_released_pools()

    def pool_reserved(self, pool: PrivatePool) -> int:
        """Bytes reserved by the segments of ``pool``."""
        return sum(seg.size for p in pool.pools for seg in p.segments.values())

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
        small, large = self._small.stats, self._large.stats
        for stat_name, counter in _STAT_SOURCES:
            s_cur, s_peak, s_cum = small.read(counter)
            l_cur, l_peak, l_cum = large.read(counter)
            groups = (
                ("all", s_cur + l_cur, getattr(self._peaks, counter), s_cum + l_cum),
                (self._small.stat_name, s_cur, s_peak, s_cum),
                (self._large.stat_name, l_cur, l_peak, l_cum),
            )
            for pool_name, cur, peak, cum in groups:
                prefix = f"{stat_name}.{pool_name}."
                out[prefix + "allocated"] = cum
                out[prefix + "current"] = cur
                out[prefix + "freed"] = cum - cur
                out[prefix + "peak"] = peak
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
        out["max_split_size"] = -1 if self._max_split == _NO_LIMIT else self._max_split
        self._extra_stats(out)
        return dict(sorted(out.items()))

    # ------------------------------------------------------- preset hooks

    def _segment_size(self, pool: _Pool, rounded: int) -> int:
        """Size of the segment mapped for a request that no cached block fits."""
        if pool.small:
            return SMALL_BUFFER
        if rounded < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE

    def _refit_block(self, pool: _Pool, block: _Block) -> _Block:
        """Replace the best-fit ``block`` (out of the free set) by another; see ``_refit``."""
        return block

    def _new_block(self, pool: _Pool, rounded: int) -> _Block | None:
        """Map memory for the request: a free block of at least ``rounded`` bytes
        (not in the free set), or ``None`` if the device has not enough free."""
        size = self._segment_size(pool, rounded)
        if self._allowed is not None and self.reserved + size > self._allowed:
            return None
        if not self._device.map(size):
            return None
        if size >= self._max_split:
            self.oversize_segments.change(1)
        return self._add_segment(pool, size)

    def _release_for_retry(self) -> None:
        """What the allocator frees before its one retry."""
        self._release_cached()

    def _attempt_size(self, pool: _Pool, rounded: int) -> int:
        """Bytes the allocator asks the device for, as named in the OOM message."""
        return self._segment_size(pool, rounded)

    def _free_unknown(self, ptr: int) -> None:
        """``free`` of a pointer with no live allocation: a no-op for the null pointer (0);
        otherwise :class:`InvalidPointerError`."""
        if ptr == 0 and isinstance(ptr, int) and not isinstance(ptr, bool):
            return
        raise InvalidPointerError(
            f"free({ptr!r}): no live allocation of the {self.name} allocator at that "
            "address (never returned by malloc, or already freed); free each pointer "
            "malloc returned exactly once"
        )

    def _extra_stats(self, out: dict[str, int]) -> None:
        """Add preset-specific keys to :meth:`memory_stats`."""

    # ------------------------------------------------------------ internals

    def _grow(self, pool: _Pool, rounded: int, size: int) -> _Block:
        if size >= ONE_EXA_BYTES:
            # Refused before any cache look-up, retry or statistic, as torch does.
            raise self._refusal(
                f"Simulated device out of memory ({self.name} allocator). Tried to allocate "
                f"more than 1EB memory ({size} bytes requested); ask for less",
                size,
                size,
            )
        if self._gc_threshold and self._allowed is not None:
            self._garbage_collect()
        block = self._new_block(pool, rounded)
        if block is None and self._max_split < _NO_LIMIT and self._release_oversize(pool, rounded):
            block = self._new_block(pool, rounded)
        if block is None and self._capture is None:
            # No release during a capture: torch retries only with no capture underway.
            self._release_for_retry()
            self.num_alloc_retries += 1
            block = self._new_block(pool, rounded)
        if block is None:
            raise self._out_of_memory(pool, rounded, size)
        return block

    def _add_segment(self, pool: _Pool, size: int) -> _Block:
        """Record a segment of ``size`` bytes just mapped; return its single free block."""
        addr = self._take_address(size)
        block = _Block(addr, size, pool)
        pool.segments[addr] = _Segment(addr, size, block)
        self.num_device_alloc += 1
        pool.stats.add("segment", 1)
        pool.stats.add("reserved_bytes", size)
        return block

    def _take_address(self, size: int, align: int = _ADDRESS_ALIGN) -> int:
        """Virtual address range of ``size`` bytes starting at a multiple of ``align``."""
        # Virtual addresses are never reused: a released segment's range stays
        # unused, which keeps addresses (and so tie-breaks) deterministic.
        addr = (self._next_addr + align - 1) // align * align
        self._next_addr = addr + size
        return addr

    def _release_cached(self) -> None:
        """Unmap every segment that is one free block (torch's ``release_cached_blocks``).

        Segments of private pools whose owner is alive stay.
        """
        self.num_sync_all_streams += 1
        for pool in self._releasable_pools():
            for seg in list(pool.segments.values()):
                self._release_segment(pool, seg)
        self._drop_released_pools()

    def _release_segment(self, pool: _Pool, seg: _Segment) -> bool:
        """Unmap ``seg`` if it is one free block; return whether it was."""
        head = seg.head
        if head.state != FREE or head.size != seg.size:
            return False
        pool.free.remove((head.size << KEY_SHIFT) | head.addr)
        del self._free_blocks[head.addr]
        del pool.segments[seg.addr]
        self._device.unmap(seg.size)
        self.num_device_free += 1
        if seg.size >= self._max_split:
            self.oversize_segments.change(-1)
        pool.stats.add("segment", -1)
        pool.stats.add("reserved_bytes", -seg.size)
        return True

    def _releasable_pools(self) -> list[_Pool]:
        held = {id(p) for pp in self._private.values() if not pp.released for p in pp.pools}
        return [p for p in self._pools if id(p) not in held]

    def _drop_released_pools(self) -> None:
        for pool_id, pp in list(self._private.items()):
            if pp.released and not any(p.segments for p in pp.pools):
                del self._private[pool_id]
                self._extra_pools = [p for p in self._extra_pools if p not in pp.pools]

    def _make_pool(self, like: _Pool) -> _Pool:
        """A pool of ``like``'s kind sharing its counters (streams, private pools)."""
        pool = _Pool(like.stat_name, like.split_min, self._peaks, like.page)
        pool.small = like.small
        pool.stats = like.stats
        self._extra_pools.append(pool)
        return pool

    def _gc_active(self) -> bool:
        return bool(self._gc_threshold) and self._allowed is not None

    def _set_slow(self) -> None:
        self._slow = self._slow_rounding or self._capture is not None or self._gc_active()

    def _route(self, size: int, rounded: int, stream: int) -> tuple[_Pool, int]:
        """Pool and rounded size of a request on the slow path (settings, streams, pools)."""
        if self._slow_rounding:
            rounded = self._roundup(size, rounded)
        small = rounded <= self._small_max
        if not small and self._capture is None and self._gc_active():
            self._gc_calls += 1  # torch counts get_free_block calls on the large pool
        if self._capture is not None:
            pools = self._capture.pools
        elif stream:
            if (
                isinstance(stream, bool)
                or not isinstance(stream, int)
                or stream < 0
            ):
                raise InvalidInputError(
                    f"stream must be a non-negative int stream id, got {stream!r}"
                )
            pools = self._stream_pools.get((stream, 0)) or self._new_stream_pools(stream)
        else:
            pools = (self._small, self._large)
        return (pools[0] if small else pools[1]), rounded

    def _new_stream_pools(self, stream: int) -> tuple[_Pool, _Pool]:
        pools = (self._make_pool(self._small), self._make_pool(self._large))
        for p in pools:
            p.stream = stream
        self._stream_pools[(stream, 0)] = pools
        return pools

    def _split_fit(self, key: int, rounded: int) -> bool:
        """torch's ``max_split_size`` rule for a best-fit candidate of size ``key >> 64``."""
        bsize = key >> KEY_SHIFT
        limit = self._max_split
        if rounded < limit and bsize >= limit:
            return False
        return not (rounded >= limit and bsize >= rounded + LARGE_BUFFER)

    def _release_oversize(self, pool: _Pool, rounded: int) -> bool:
        """torch's ``release_available_cached_blocks``: free oversize cached segments."""
        need = max(rounded, self._max_split)
        candidates = sorted(
            (
                seg for seg in pool.segments.values()
                if seg.head.state == FREE and seg.head.size == seg.size
                and seg.size >= self._max_split
            ),
            key=lambda seg: (seg.size, seg.addr),
        )
        fitting = [seg for seg in candidates if seg.size >= need]
        if fitting:
            return self._release_segment(pool, fitting[0])
        released = 0
        for seg in reversed(candidates):
            if released >= need:
                break
            self._release_segment(pool, seg)
            released += seg.size
        return released >= need

    def _garbage_collect(self) -> None:
        """torch's ``garbage_collect_cached_blocks``: the oldest unused large segments first.

        Candidates are the wholly free segments of the large pool (all streams, no
        private pool). A block's age is the number of large-pool requests since it was
        last freed. Each round frees, in the pool's (stream, size, address) order, every
        candidate at least as old as the candidates' mean age, without stopping inside a
        round; rounds repeat until the bytes freed reach ``reserved - threshold x allowed``.
        """
        allowed = self._allowed or 0
        threshold = int(self._gc_threshold * allowed)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pools = [self._large] + [pair[1] for pair in self._stream_pools.values()]
        candidates: list[tuple[int, int, int, _Pool, _Segment]] = []
        for pool in pools:
            for seg in pool.segments.values():
                head = seg.head
                if head.state == FREE and head.size == seg.size:
                    candidates.append((pool.stream, seg.size, seg.addr, pool, seg))
        candidates.sort(key=lambda c: (c[0], c[1], c[2]))
        ages = {c[2]: self._gc_calls - self._gc_base.get(c[2], 0) for c in candidates}
        total_age = sum(ages.values())
        freed = 0
        while freed < target and candidates:
            mean = total_age / len(candidates)
            kept = []
            for cand in candidates:
                age = ages[cand[2]]
                if age >= mean:
                    self._release_segment(cand[3], cand[4])
                    self._gc_base.pop(cand[2], None)
                    freed += cand[1]
                    total_age -= age
                else:
                    kept.append(cand)
            candidates = kept

    def _out_of_memory(self, pool: _Pool, rounded: int, size: int) -> SimOutOfMemory:
        """Count an out-of-memory (``num_ooms``) and build the error for the caller to raise."""
        self.num_ooms += 1
        attempted = self._attempt_size(pool, rounded)
        total = self._device.total
        free = self._device.free
        reserved = self.reserved
        allocated = self.allocated
        message = (
            f"Simulated device out of memory ({self.name} allocator). Tried to allocate "
            f"{format_size(attempted)}. GPU 0 has a total capacity of {format_size(total)} "
            f"of which {format_size(free)} is free (a request of {size} bytes, "
            f"{attempted} bytes from the device). Of the memory this allocator holds, "
            f"{format_size(allocated)} is allocated and {format_size(reserved - allocated)} "
            f"is reserved but unallocated. Free memory (fewer live tensors, a smaller batch, "
            f"a lower gpu_memory_utilization or KV-cache size) and retry. {self.oom_hint}"
        )
        return self._refusal(message, size, attempted)

    def _refusal(self, message: str, requested: int, attempted: int) -> SimOutOfMemory:
        """:class:`SimOutOfMemory` with ``message`` and the readings of the device and of
        this allocator now."""
        return SimOutOfMemory(
            message,
            requested=requested,
            attempted=attempted,
            total=self._device.total,
            free=self._device.free,
            reserved=self.reserved,
            allocated=self.allocated,
        )

    # ------------------------------------------------------ for the tests

    def _segments(self) -> list[tuple[str, int, int, list[tuple[int, int, str]]]]:
        """``(pool, address, size, [(block address, size, state)])`` for every segment."""
        names = {FREE: "free", IN_USE: "in_use", UNMAPPED: "unmapped"}
        return list_segments(self._pools, names)

    def _recount_stats(self) -> dict[str, int]:
        """Current values recomputed from the blocks, keyed like :meth:`memory_stats`.

        Also checks the structure (blocks tile their segments, free blocks are
        in the free sets, no two free neighbours) and raises
        :class:`AssertionError` on any inconsistency.
        """
        totals: dict[str, dict[str, int]] = {}
        free_seen = 0
        live_seen = 0
        unmapped_seen = 0
        for pool in self._pools:
            counts = totals.setdefault(pool.stat_name, dict.fromkeys(_COUNTERS, 0))
            for seg in pool.segments.values():
                counts["segment"] += self._segment_count(seg)
                for prev, b in walk_blocks(seg, "block", "segment"):
                    if b.pool is not pool:
                        raise AssertionError(f"broken block chain at {b.addr:#x}")
                    if b.state != UNMAPPED:
                        counts["reserved_bytes"] += b.size
                    if b.state == IN_USE:
                        live_seen += 1
                        if self._live.get(b.addr) is not b:
                            raise AssertionError(f"allocated block {b.addr:#x} not live")
                        counts["allocation"] += 1
                        counts["allocated_bytes"] += b.size
                        counts["requested_bytes"] += b.requested
                    elif b.state == FREE:
                        free_seen += 1
                        if self._free_blocks.get(b.addr) is not b:
                            raise AssertionError(f"free block {b.addr:#x} not indexed")
                        if ((b.size << KEY_SHIFT) | b.addr) not in pool.free:
                            raise AssertionError(f"free block {b.addr:#x} not in free set")
                        if prev is not None and prev.state == FREE:
                            raise AssertionError(f"free neighbours not merged at {b.addr:#x}")
                        if self._track_inactive_split and (
                            b.prev is not None or b.next is not None
                        ):
                            counts["inactive_split"] += 1
                            counts["inactive_split_bytes"] += b.size
                    else:
                        unmapped_seen += 1
                        if b.addr not in pool.unmapped:
                            raise AssertionError(f"unmapped block {b.addr:#x} not indexed")
                        if prev is not None and prev.state == UNMAPPED:
                            raise AssertionError(f"unmapped neighbours not merged at {b.addr:#x}")
        if live_seen != len(self._live) or free_seen != len(self._free_blocks):
            raise AssertionError("block indexes out of step with the segments")
        if sum(len(p.free) for p in self._pools) != free_seen:
            raise AssertionError("free sets hold stale keys")
        if sum(len(p.unmapped) for p in self._pools) != unmapped_seen:
            raise AssertionError("unmapped sets hold stale addresses")
        totals["all"] = {c: sum(t[c] for t in totals.values()) for c in _COUNTERS}
        out: dict[str, int] = {}
        for stat_name, counter in _STAT_SOURCES:
            for pool_name, counts in totals.items():
                out[f"{stat_name}.{pool_name}.current"] = counts[counter]
        return out

    def _segment_count(self, seg: _Segment) -> int:
        """How many ``segment`` counts ``seg`` contributes (expandable: none)."""
        return 1
