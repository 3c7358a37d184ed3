"""Which cached segments the allocator gives back to the device before it grows.

torch's ``release_available_cached_blocks`` (``max_split_size_mb`` set) and
``garbage_collect_cached_blocks`` (``garbage_collection_threshold`` set),
c10/cuda/CUDACachingAllocator.cpp. Both choose among wholly free segments and release
each through the allocator's ``release`` (which unmaps it and keeps the counters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memacct.sim._blocks import FREE, Pool, Segment

__all__ = ["Release", "garbage_collect", "release_oversize"]

Release = Callable[[Pool, Segment], bool]
"""Unmap a segment of a pool if it is one free block; return whether it was."""


def release_oversize(pool: Pool, rounded: int, max_split: int, release: Release) -> bool:
    """Free ``pool``'s oversize cached segments for a request of ``rounded`` bytes.

    The smallest one that holds ``max(rounded, max_split)`` if any, else the largest ones
    until that many bytes are freed; return whether that many were.
    """
    need = max(rounded, max_split)
    candidates = sorted(
        (
            seg for seg in pool.segments.values()
            if seg.head.state == FREE and seg.head.size == seg.size
            and seg.size >= max_split
        ),
        key=lambda seg: (seg.size, seg.addr),
    )
    fitting = [seg for seg in candidates if seg.size >= need]
    if fitting:
        return release(pool, fitting[0])
    released = 0
    for seg in reversed(candidates):
        if released >= need:
            break
        release(pool, seg)
        released += seg.size
    return released >= need


def garbage_collect(
    pools: Iterable[Pool], target: int, calls: int, freed_at: dict[int, int], release: Release
) -> None:
    """Free at least ``target`` bytes of ``pools``' wholly free segments, the oldest first.

    A block's age is ``calls`` (the large pool's request count) less the count when it
    was last freed (``freed_at``, by address; entries of released segments are dropped).
    Each round frees, in the pools' (stream, size, address) order, every candidate at
    least as old as the candidates' mean age, without stopping inside a round; rounds
    repeat until the bytes freed reach ``target`` or no candidate is left.
    """
    candidates: list[tuple[int, int, int, Pool, Segment]] = []
    for pool in pools:
        for seg in pool.segments.values():
            head = seg.head
            if head.state == FREE and head.size == seg.size:
                candidates.append((pool.stream, seg.size, seg.addr, pool, seg))
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    ages = {c[2]: calls - freed_at.get(c[2], 0) for c in candidates}
    total_age = sum(ages.values())
    freed = 0
    while freed < target and candidates:
        mean = total_age / len(candidates)
        kept = []
        for cand in candidates:
            age = ages[cand[2]]
            if age >= mean:
                release(cand[3], cand[4])
                freed_at.pop(cand[2], None)
                freed += cand[1]
                total_age -= age
            else:
                kept.append(cand)
        candidates = kept
