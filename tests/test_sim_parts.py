"""The pieces the torch-cuda allocator model is built from, each on its own.

The allocator tests (test_sim_allocator.py) check them through ``malloc``/``free``;
these pin each rule where it now lives, with numbers worked from docs/simulator.md.
"""

from __future__ import annotations

import pytest

from memacct.errors import InvalidInputError
from memacct.sim._blocks import FREE, KEY_SHIFT, Block, Pool, Segment, segment_size
from memacct.sim._config import NO_LIMIT, parse_settings, split_fits
from memacct.sim._reclaim import Release, garbage_collect, release_oversize
from memacct.sim._recount import recount
from memacct.sim._stats import Peaks
from memacct.units import MiB


def test_settings_not_named_are_reset_and_buckets_cover_every_size() -> None:
    chosen = parse_settings("roundup_power2_divisions:[64:8,>:2]", expandable=False,
                            preset="torch-cuda")  # fmt: skip
    assert chosen.max_split == NO_LIMIT and chosen.gc_threshold == 0.0
    assert chosen.divisions == 0
    # 64 MiB is bucket 6 (log2): buckets 0..6 take 8 divisions, 7 and above take 2.
    assert [chosen.buckets[b] for b in (0, 6, 7, 39)] == [8, 8, 2, 2]


def test_a_setting_of_the_wrong_kind_names_the_key_and_the_value() -> None:
    with pytest.raises(InvalidInputError, match="garbage_collection_threshold must be a number"):
        parse_settings("garbage_collection_threshold:half", expandable=False, preset="p")
    with pytest.raises(InvalidInputError, match="expandable_segments:True does not match the p"):
        parse_settings("expandable_segments:True", expandable=False, preset="p")


def test_an_oversize_block_serves_only_requests_within_20_mib_of_it() -> None:
    limit = 64 * MiB
    assert not split_fits(100 * MiB, 10 * MiB, limit)  # small request, oversize block
    assert split_fits(100 * MiB, 90 * MiB, limit)  # 10 MiB over the request
    assert not split_fits(100 * MiB, 80 * MiB, limit)  # exactly 20 MiB over: refused
    assert split_fits(32 * MiB, 10 * MiB, limit)  # neither is oversize


def test_segment_sizes_follow_the_pool_and_the_request() -> None:
    assert segment_size(True, 512) == 2 * MiB
    assert segment_size(False, 9 * MiB) == 20 * MiB
    assert segment_size(False, 10 * MiB + 1) == 12 * MiB


def _pool_with_free_segments(*sizes: int) -> Pool:
    pool = Pool("large_pool", MiB + 1, Peaks())
    addr = 0
    for size in sizes:
        head = Block(addr, size, pool)
        pool.segments[addr] = Segment(addr, size, head)
        pool.free.add((size << KEY_SHIFT) | addr)
        addr += size
    return pool


def _releaser(released: list[int]) -> Release:
    def release(pool: Pool, seg: Segment) -> bool:
        del pool.segments[seg.addr]
        released.append(seg.addr)
        return True

    return release


def test_garbage_collection_frees_the_older_half_first_and_finishes_its_round() -> None:
    pool = _pool_with_free_segments(20 * MiB, 20 * MiB, 20 * MiB)
    released: list[int] = []
    # Ages 10, 2 and 9 (calls 10 less the count when freed): mean 7, so the first round
    # frees the first and third segments, 40 MiB, though 1 byte was asked for.
    garbage_collect([pool], 1, 10, {20 * MiB: 8, 40 * MiB: 1}, _releaser(released))
    assert released == [0, 40 * MiB]


def test_oversize_release_takes_the_smallest_that_fits_else_the_largest_first() -> None:
    pool = _pool_with_free_segments(70 * MiB, 80 * MiB, 90 * MiB)
    released: list[int] = []
    assert release_oversize(pool, 75 * MiB, 64 * MiB, _releaser(released))
    assert released == [70 * MiB]  # the 80 MiB segment, the smallest holding 75 MiB
    released.clear()
    # None holds 200 MiB: the largest go first (90, then 70 MiB), and 160 MiB is short.
    assert not release_oversize(pool, 200 * MiB, 64 * MiB, _releaser(released))
    assert released == [150 * MiB, 0]
    assert not pool.segments


def test_the_recount_names_a_free_block_missing_from_the_free_set() -> None:
    pool = _pool_with_free_segments(2 * MiB)
    block = pool.segments[0].head
    assert block.state == FREE
    counts = recount([pool], {}, {0: block}, track_inactive_split=True,
                     segment_count=lambda seg: 1)  # fmt: skip
    assert counts["reserved_bytes.large_pool.current"] == 2 * MiB
    pool.free.remove((block.size << KEY_SHIFT) | block.addr)
    with pytest.raises(AssertionError, match="free block 0x0 not in free set"):
        recount([pool], {}, {0: block}, track_inactive_split=True, segment_count=lambda seg: 1)
