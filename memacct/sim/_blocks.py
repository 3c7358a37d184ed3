"""Blocks, segments and pools: the structures the caching allocator keeps (torch's
``Block``, ``BlockPool``, ``PrivatePool`` and their sizes, c10/cuda/CUDACachingAllocator.cpp).

A segment is one mapping from the device, tiled by a doubly linked chain of blocks; a
pool holds its segments and a :class:`~memacct.sim._freeset.FreeSet` of its free blocks,
keyed ``size << KEY_SHIFT | address`` (best fit, then lowest address).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from memacct.backend import LARGE_BUFFER_BYTES
from memacct.sim._freeset import FreeSet
from memacct.sim._stats import Peaks, Stats
from memacct.units import MiB

__all__ = [
    "ADDR_MASK",
    "FREE",
    "IN_USE",
    "KEY_SHIFT",
    "LARGE_BUFFER",
    "MIN_BLOCK_SIZE",
    "MIN_LARGE_ALLOC",
    "ROUND_LARGE",
    "SMALL_BUFFER",
    "SMALL_SIZE",
    "UNMAPPED",
    "Block",
    "Pool",
    "PrivatePool",
    "Segment",
    "SegmentListing",
    "link_after",
    "list_segments",
    "merge_neighbours",
    "pair_pools",
    "segment_size",
    "walk_blocks",
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

KEY_SHIFT = 64
"""Free blocks are keyed ``size << KEY_SHIFT | address``: best fit, then lowest address."""
ADDR_MASK = (1 << KEY_SHIFT) - 1

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


def walk_blocks(seg: Any, block: str, span: str) -> Iterator[tuple[Block | None, Block]]:
    """``(previous block, block)`` along ``seg`` from its lowest address, for the tests' recounts.

    Checks that the chain is linked both ways and tiles the segment, raising
    :class:`AssertionError` (naming the ``block`` and the ``span`` as the allocator
    calls them) where it does not.
    """
    b: Block | None = seg.head
    expect = seg.addr
    prev: Block | None = None
    while b is not None:
        if b.addr != expect or b.prev is not prev:
            raise AssertionError(f"broken {block} chain at {b.addr:#x}")
        yield prev, b
        expect = b.addr + b.size
        prev = b
        b = b.next
    if expect != seg.addr + seg.size:
        raise AssertionError(f"{block}s do not tile {span} {seg.addr:#x}")


def link_after(block: Block, new: Block) -> None:
    """Put ``new`` into ``block``'s chain just above it."""
    nxt = block.next
    new.prev = block
    new.next = nxt
    if nxt is not None:
        nxt.prev = new
    block.next = new


def merge_neighbours(block: Block, drop: Callable[[Block], None]) -> Block:
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


def _join(lower: Block, upper: Block) -> None:
    lower.size += upper.size
    nxt = upper.next
    lower.next = nxt
    if nxt is not None:
        nxt.prev = lower


class Block:
    """A contiguous range of one segment: allocated, free (cached) or unmapped."""

    __slots__ = ("addr", "next", "pool", "prev", "requested", "size", "state")

    def __init__(self, addr: int, size: int, pool: Pool, state: int = FREE) -> None:
        self.addr = addr
        self.size = size
        self.pool = pool
        self.state = state
        self.requested = 0
        self.prev: Block | None = None
        self.next: Block | None = None


class Segment:
    """One mapping from the device; ``head`` is its lowest block, which never changes."""

    __slots__ = ("addr", "head", "size")

    def __init__(self, addr: int, size: int, head: Block) -> None:
        self.addr = addr
        self.size = size
        self.head = head


class Pool:
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

    def __init__(self, stat_name: str, split_min: int, peaks: Peaks, page: int = 0) -> None:
        self.stat_name = stat_name
        self.small = stat_name == "small_pool"
        self.stream = 0
        self.split_min = split_min
        self.page = page
        self.free = FreeSet()
        self.unmapped = FreeSet()
        self.segments: dict[int, Segment] = {}
        self.stats = Stats(peaks)


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

    def __init__(self, pool_id: int, pools: tuple[Pool, Pool]) -> None:
        self.id = pool_id
        self.pools = pools
        self.released = False

    def __repr__(self) -> str:
        return f"<PrivatePool {self.id}{' released' if self.released else ''}>"


def segment_size(small: bool, rounded: int) -> int:
    """Size of the segment mapped for a request of ``rounded`` bytes that no cached block
    fits (torch's ``get_allocation_size``): a small-pool buffer, a large buffer below
    :data:`MIN_LARGE_ALLOC`, else the request rounded up to :data:`ROUND_LARGE`."""
    if small:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


def pair_pools(first: Pool, second: Pool) -> None:
    """Let each pool's counters see the other's, for the all-pools peaks."""
    first.stats.other = second.stats
    second.stats.other = first.stats
