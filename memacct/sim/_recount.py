"""The tests' check of the incremental bookkeeping: the counters recomputed from the blocks.

The allocator keeps its statistics incrementally on the malloc/free hot path;
:func:`recount` walks every segment's block chain instead, checks the structure (blocks
tile their segments, free blocks are indexed, no two free neighbours) and returns the
current values keyed like ``memory_stats``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from memacct.sim._blocks import FREE, IN_USE, KEY_SHIFT, UNMAPPED, Block, Pool, Segment, walk_blocks
from memacct.sim._stats import COUNTERS, STAT_SOURCES

__all__ = ["recount"]


def recount(
    pools: Iterable[Pool],
    live: Mapping[int, Block],
    free_blocks: Mapping[int, Block],
    *,
    track_inactive_split: bool,
    segment_count: Callable[[Segment], int],
) -> dict[str, int]:
    """Current values recomputed from the blocks of ``pools``, keyed like ``memory_stats``.

    ``live`` and ``free_blocks`` are the allocator's indexes by address of the blocks in
    use and free; ``segment_count`` says how many ``segment`` counts a segment makes.

    Raises:
        AssertionError: any inconsistency of the structure or the indexes (named).
    """
    pools = tuple(pools)
    totals: dict[str, dict[str, int]] = {}
    seen = {"free": 0, "live": 0, "unmapped": 0}
    for pool in pools:
        counts = totals.setdefault(pool.stat_name, dict.fromkeys(COUNTERS, 0))
        for seg in pool.segments.values():
            counts["segment"] += segment_count(seg)
            for prev, b in walk_blocks(seg, "block", "segment"):
                _count_block(pool, prev, b, counts, seen, live, free_blocks,
                             track_inactive_split)
    if seen["live"] != len(live) or seen["free"] != len(free_blocks):
        raise AssertionError("block indexes out of step with the segments")
    if sum(len(p.free) for p in pools) != seen["free"]:
        raise AssertionError("free sets hold stale keys")
    if sum(len(p.unmapped) for p in pools) != seen["unmapped"]:
        raise AssertionError("unmapped sets hold stale addresses")
    totals["all"] = {c: sum(t[c] for t in totals.values()) for c in COUNTERS}
    out: dict[str, int] = {}
    for stat_name, counter in STAT_SOURCES:
        for pool_name, counts in totals.items():
            out[f"{stat_name}.{pool_name}.current"] = counts[counter]
    return out


def _count_block(
    pool: Pool, prev: Block | None, b: Block, counts: dict[str, int], seen: dict[str, int],
    live: Mapping[int, Block], free_blocks: Mapping[int, Block], track_inactive_split: bool,
) -> None:
    """Add block ``b`` (after ``prev`` in its chain) to its pool's ``counts``, checking it."""
    if b.pool is not pool:
        raise AssertionError(f"broken block chain at {b.addr:#x}")
    if b.state != UNMAPPED:
        counts["reserved_bytes"] += b.size
    if b.state == IN_USE:
        seen["live"] += 1
        if live.get(b.addr) is not b:
            raise AssertionError(f"allocated block {b.addr:#x} not live")
        counts["allocation"] += 1
        counts["allocated_bytes"] += b.size
        counts["requested_bytes"] += b.requested
    elif b.state == FREE:
        seen["free"] += 1
        if free_blocks.get(b.addr) is not b:
            raise AssertionError(f"free block {b.addr:#x} not indexed")
        if ((b.size << KEY_SHIFT) | b.addr) not in pool.free:
            raise AssertionError(f"free block {b.addr:#x} not in free set")
        if prev is not None and prev.state == FREE:
            raise AssertionError(f"free neighbours not merged at {b.addr:#x}")
        if track_inactive_split and (b.prev is not None or b.next is not None):
            counts["inactive_split"] += 1
            counts["inactive_split_bytes"] += b.size
    else:
        seen["unmapped"] += 1
        if b.addr not in pool.unmapped:
            raise AssertionError(f"unmapped block {b.addr:#x} not indexed")
        if prev is not None and prev.state == UNMAPPED:
            raise AssertionError(f"unmapped neighbours not merged at {b.addr:#x}")
