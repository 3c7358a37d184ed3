"""The simulated caching allocators follow the rules in docs/simulator.md, byte for byte.

Every expected number below is derived by hand from those rules; the
comment above each assertion says how.
"""

from __future__ import annotations

import contextlib
import pickle
import random

import pytest
from _sim_stats import assert_consistent, stat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memacct.errors import InvalidInputError, MemacctError
from memacct.sim.allocator import (
    ALLOCATOR_PRESETS,
    CachingAllocator,
    InvalidPointerError,
    NpuCachingAllocator,
    SimOutOfMemory,
    SimpleDeviceMemory,
    make_allocator,
)
from memacct.units import GiB, KiB, MiB


def make(
    preset: str = "torch-cuda", total: int = 8 * GiB
) -> tuple[CachingAllocator, SimpleDeviceMemory]:
    memory = SimpleDeviceMemory(total)
    return make_allocator(preset, memory), memory




# ---------------------------------------------------------------- rounding


def test_round_size_is_a_multiple_of_512_and_at_least_512() -> None:
    alloc, _ = make()
    assert [alloc.round_size(n) for n in (1, 511, 512, 513, 1024, 1025)] == [
        512,
        512,
        512,
        1024,
        1024,
        1536,
    ]


def test_one_byte_request_allocates_512_bytes_but_requests_one() -> None:
    alloc, _ = make()
    alloc.malloc(1)
    assert stat(alloc, "allocated_bytes.all.current") == 512
    assert stat(alloc, "requested_bytes.all.current") == 1


def test_zero_byte_request_returns_null_and_allocates_nothing() -> None:
    alloc, _ = make()
    assert alloc.malloc(0) == 0
    alloc.free(0)
    assert alloc.reserved == 0
    assert stat(alloc, "allocation.all.allocated") == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True, None])
def test_malloc_rejects_sizes_that_are_not_non_negative_ints(bad: object) -> None:
    alloc, _ = make()
    with pytest.raises(InvalidInputError, match="malloc size"):
        alloc.malloc(bad)  # type: ignore[arg-type]


# ------------------------------------------------------- pools and segments


def test_request_of_1mib_uses_a_2mib_small_segment() -> None:
    alloc, _ = make()
    alloc.malloc(1 * MiB)
    assert stat(alloc, "segment.small_pool.current") == 1
    assert stat(alloc, "reserved_bytes.small_pool.current") == 2 * MiB
    assert stat(alloc, "segment.large_pool.current") == 0


def test_request_just_over_1mib_uses_the_large_pool() -> None:
    alloc, _ = make()
    # 1 MiB + 1 rounds to 1 MiB + 512 > 1 MiB: large pool, a 20 MiB segment.
    alloc.malloc(1 * MiB + 1)
    assert stat(alloc, "segment.small_pool.current") == 0
    assert stat(alloc, "reserved_bytes.large_pool.current") == 20 * MiB


def test_5mib_request_gets_a_20mib_segment() -> None:
    alloc, _ = make()
    alloc.malloc(5 * MiB)
    assert alloc.reserved == 20 * MiB
    assert alloc.allocated == 5 * MiB
    # The 15 MiB tail is split off and cached.
    assert stat(alloc, "inactive_split_bytes.all.current") == 15 * MiB


def test_30mib_request_gets_a_segment_rounded_up_to_2mib() -> None:
    alloc, _ = make()
    # 30 MiB + 1 rounds to 30 MiB + 512; its segment rounds up to 32 MiB.
    alloc.malloc(30 * MiB + 1)
    assert alloc.reserved == 32 * MiB
    # The remainder, 2 MiB - 512, is more than 1 MiB: split off.
    assert alloc.allocated == 30 * MiB + 512


def test_30mib_request_exactly_gets_an_exact_segment() -> None:
    alloc, _ = make()
    alloc.malloc(30 * MiB)
    assert alloc.reserved == 30 * MiB
    assert stat(alloc, "inactive_split.all.current") == 0


# ---------------------------------------------------------------- best fit


def test_best_fit_takes_the_smallest_free_block_that_fits() -> None:
    alloc, _ = make()
    big = alloc.malloc(64 * KiB)
    alloc.malloc(512)  # guard: keeps the holes apart
    small = alloc.malloc(32 * KiB)
    alloc.malloc(512)
    alloc.free(big)
    alloc.free(small)
    # Free: 64 KiB hole, 32 KiB hole, and the segment's large tail.
    assert alloc.malloc(20 * KiB) == small
    assert alloc.malloc(40 * KiB) == big


def test_lowest_address_wins_among_equally_good_blocks() -> None:
    alloc, _ = make()
    low = alloc.malloc(64 * KiB)
    alloc.malloc(512)
    high = alloc.malloc(64 * KiB)
    alloc.malloc(512)
    alloc.free(high)
    alloc.free(low)
    assert alloc.malloc(64 * KiB) == low


def test_allocated_piece_takes_the_low_address() -> None:
    alloc, _ = make()
    first = alloc.malloc(5 * MiB)
    # The second request is cut from the free tail just above the first.
    assert alloc.malloc(5 * MiB) == first + 5 * MiB


def test_torch_cuda_ignores_the_persistent_hint() -> None:
    alloc, _ = make()
    alloc.malloc(1 * MiB, persistent=True)
    assert stat(alloc, "reserved_bytes.small_pool.current") == 2 * MiB


def test_pools_never_share_blocks() -> None:
    alloc, _ = make()
    alloc.malloc(5 * MiB)  # large segment with a 15 MiB free tail
    alloc.malloc(512)  # small request: a small segment of its own
    assert stat(alloc, "segment.all.current") == 2
    assert alloc.reserved == 22 * MiB


# ------------------------------------------------------------------ splits


def test_small_pool_splits_off_a_512_byte_remainder() -> None:
    alloc, _ = make()
    hole = alloc.malloc(1536)
    alloc.malloc(512)
    alloc.free(hole)
    assert alloc.malloc(1024) == hole
    # The 512-byte remainder became a free block of its own.
    assert alloc.malloc(512) == hole + 1024
    assert stat(alloc, "allocated_bytes.small_pool.current") == 2048


def test_large_pool_keeps_a_remainder_of_1mib_inside_the_block() -> None:
    alloc, _ = make()
    # 19 MiB gets a 20 MiB segment; the 1 MiB remainder is not > 1 MiB.
    alloc.malloc(19 * MiB)
    assert alloc.allocated == 20 * MiB
    assert stat(alloc, "requested_bytes.all.current") == 19 * MiB
    assert stat(alloc, "inactive_split.all.current") == 0


def test_large_pool_splits_a_remainder_just_over_1mib() -> None:
    alloc, _ = make()
    # 19 MiB - 512 gets a 20 MiB segment; 1 MiB + 512 remains: split.
    alloc.malloc(19 * MiB - 512)
    assert alloc.allocated == 19 * MiB - 512
    assert stat(alloc, "inactive_split_bytes.all.current") == 1 * MiB + 512


def test_unsplit_remainder_is_reused_only_after_free() -> None:
    alloc, _ = make()
    ptr = alloc.malloc(19 * MiB)
    alloc.free(ptr)
    # The whole 20 MiB block comes back; a 19.5 MiB request takes it unsplit.
    assert alloc.malloc(19 * MiB + 512 * KiB) == ptr
    assert alloc.allocated == 20 * MiB
    assert alloc.reserved == 20 * MiB


# ------------------------------------------------------------------ merges


def test_free_merges_with_free_neighbours_of_its_segment() -> None:
    alloc, _ = make()
    a = alloc.malloc(3 * MiB)
    b = alloc.malloc(3 * MiB)
    c = alloc.malloc(3 * MiB)
    alloc.free(a)
    alloc.free(c)  # merges with the 11 MiB tail
    assert stat(alloc, "inactive_split.all.current") == 2
    assert stat(alloc, "inactive_split_bytes.all.current") == 17 * MiB
    alloc.free(b)  # merges with both: the segment is one free block again
    assert stat(alloc, "inactive_split.all.current") == 0
    [(_, _, _, blocks)] = alloc._segments()
    assert blocks == [(a, 20 * MiB, "free")]


def test_merging_never_crosses_segments() -> None:
    alloc, _ = make()
    a = alloc.malloc(20 * MiB)
    b = alloc.malloc(20 * MiB)
    assert b == a + 20 * MiB  # adjacent addresses, separate segments
    alloc.free(a)
    alloc.free(b)
    # Two free 20 MiB blocks, never one 40 MiB block: a new segment is needed.
    alloc.malloc(40 * MiB)
    assert alloc.reserved == 80 * MiB
    assert stat(alloc, "segment.all.current") == 3


# ------------------------------------------------------ release and retry


def test_full_device_releases_free_segments_and_retries() -> None:
    alloc, memory = make(total=100 * MiB)
    alloc.free(alloc.malloc(60 * MiB))  # a cached, wholly free 60 MiB segment
    alloc.malloc(70 * MiB)  # 70 > 40 free: release the 60, then map 70
    assert stat(alloc, "num_alloc_retries") == 1
    assert stat(alloc, "num_ooms") == 0
    assert alloc.reserved == memory.mapped == 70 * MiB


def test_retry_that_still_does_not_fit_raises_oom() -> None:
    alloc, _ = make(total=100 * MiB)
    alloc.malloc(60 * MiB)
    with pytest.raises(SimOutOfMemory) as info:
        alloc.malloc(50 * MiB)
    assert stat(alloc, "num_alloc_retries") == 1
    assert stat(alloc, "num_ooms") == 1
    err = info.value
    assert (err.requested, err.attempted, err.total, err.free) == (
        50 * MiB,
        50 * MiB,
        100 * MiB,
        40 * MiB,
    )
    assert (err.reserved, err.allocated) == (60 * MiB, 60 * MiB)
    assert isinstance(err, MemacctError)
    assert isinstance(err, RuntimeError)


def test_oom_message_names_the_segment_and_the_device_numbers() -> None:
    alloc, _ = make(total=10 * MiB)
    with pytest.raises(SimOutOfMemory) as info:
        alloc.malloc(5 * MiB)  # needs a 20 MiB segment
    message = str(info.value)
    assert "Tried to allocate 20.00 MiB" in message
    assert f"request of {5 * MiB} bytes" in message
    assert "total capacity of 10.00 MiB of which 10.00 MiB is free" in message
    assert "expandable" in message


def test_oom_survives_pickling_with_its_numbers() -> None:
    alloc, _ = make(total=10 * MiB)
    with pytest.raises(SimOutOfMemory) as info:
        alloc.malloc(5 * MiB)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value)
    assert copy.attempted == 20 * MiB


def test_failed_malloc_leaves_the_allocator_usable() -> None:
    alloc, _ = make(total=100 * MiB)
    keep = alloc.malloc(60 * MiB)
    with pytest.raises(SimOutOfMemory):
        alloc.malloc(50 * MiB)
    alloc.free(keep)
    assert alloc.malloc(50 * MiB)
    assert_consistent(alloc)


# ------------------------------------------------------------ empty_cache


def test_empty_cache_keeps_a_partly_used_segment_and_reports_its_free_tail() -> None:
    alloc, memory = make()
    alloc.malloc(5 * MiB)  # 20 MiB segment, 15 MiB free tail
    alloc.free(alloc.malloc(30 * MiB))  # a wholly free 30 MiB segment
    alloc.empty_cache()
    assert alloc.reserved == memory.mapped == 20 * MiB
    assert stat(alloc, "segment.all.current") == 1
    assert stat(alloc, "inactive_split_bytes.all.current") == 15 * MiB


def test_empty_cache_after_freeing_everything_releases_everything() -> None:
    alloc, memory = make()
    ptrs = [alloc.malloc(n) for n in (100, 5 * MiB, 30 * MiB, 700 * KiB)]
    for ptr in ptrs:
        alloc.free(ptr)
    alloc.empty_cache()
    assert alloc.reserved == memory.mapped == 0
    assert stat(alloc, "segment.all.freed") == stat(alloc, "segment.all.allocated") == 3


# ------------------------------------------------------------------- stats


def test_memory_stats_keys_follow_torchs_scheme_exactly() -> None:
    alloc, _ = make()
    stats = (
        *("allocation", "allocated_bytes", "segment", "reserved_bytes", "active"),
        *("active_bytes", "inactive_split", "inactive_split_bytes", "requested_bytes"),
    )
    expected = {
        f"{s}.{p}.{m}"
        for s in stats
        for p in ("all", "small_pool", "large_pool")
        for m in ("current", "peak", "allocated", "freed")
    } | {
        f"oversize_{s}.{m}"
        for s in ("allocations", "segments")
        for m in ("current", "peak", "allocated", "freed")
    } | {
        "num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
        "num_device_free", "max_split_size",
    }
    assert set(alloc.memory_stats()) == expected
    assert list(alloc.memory_stats()) == sorted(expected)


def test_active_stats_equal_allocation_stats() -> None:
    alloc, _ = make()
    alloc.free(alloc.malloc(3 * MiB))
    alloc.malloc(100)
    stats = alloc.memory_stats()
    for pool in ("all", "small_pool", "large_pool"):
        for metric in ("current", "peak", "allocated", "freed"):
            assert stats[f"active.{pool}.{metric}"] == stats[f"allocation.{pool}.{metric}"]
            assert (
                stats[f"active_bytes.{pool}.{metric}"] == stats[f"allocated_bytes.{pool}.{metric}"]
            )


def test_all_pool_peak_is_the_peak_of_the_sum_not_the_sum_of_peaks() -> None:
    alloc, _ = make()
    small = alloc.malloc(1 * MiB)
    alloc.free(small)
    alloc.malloc(5 * MiB)
    # Small peaked at 1 MiB, large at 5 MiB, never together: all peaked at 5 MiB.
    assert stat(alloc, "allocated_bytes.small_pool.peak") == 1 * MiB
    assert stat(alloc, "allocated_bytes.large_pool.peak") == 5 * MiB
    assert stat(alloc, "allocated_bytes.all.peak") == 5 * MiB


def test_reset_peak_memory_stats_sets_peaks_to_current_and_keeps_counters() -> None:
    alloc, _ = make()
    alloc.malloc(30 * MiB)
    alloc.free(alloc.malloc(30 * MiB))
    assert stat(alloc, "allocated_bytes.all.peak") == 60 * MiB
    alloc.reset_peak_memory_stats()
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.all.peak"] == 30 * MiB
    assert stats["reserved_bytes.all.peak"] == 60 * MiB  # both segments still cached
    assert stats["allocated_bytes.all.allocated"] == 60 * MiB
    assert stats["allocated_bytes.all.freed"] == 30 * MiB
    for key, value in stats.items():
        if key.endswith(".peak"):
            assert value == stats[key.replace(".peak", ".current")], key


def test_fragmentation_makes_reserved_peak_exceed_allocated_peak() -> None:
    alloc, _ = make()
    a, b, c = (alloc.malloc(6 * MiB) for _ in range(3))  # 18 of a 20 MiB segment
    alloc.free(a)
    alloc.free(c)  # holes of 6 MiB and 8 MiB (with the tail) around b
    alloc.malloc(12 * MiB)  # fits neither hole: a new 12 MiB segment
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.all.peak"] == 18 * MiB
    assert stats["reserved_bytes.all.peak"] == 32 * MiB
    assert b


def test_same_trace_gives_identical_pointers_and_stats() -> None:
    def run() -> tuple[list[int], dict[str, int]]:
        alloc, _ = make(total=1 * GiB)
        rng = random.Random(7)
        live: list[int] = []
        seen: list[int] = []
        for _ in range(3000):
            if live and rng.random() < 0.45:
                alloc.free(live.pop(rng.randrange(len(live))))
            else:
                try:
                    ptr = alloc.malloc(
                        rng.choice((rng.randrange(1, 2 * MiB), rng.randrange(1, 50 * MiB)))
                    )
                except SimOutOfMemory:
                    continue
                live.append(ptr)
                seen.append(ptr)
        return seen, alloc.memory_stats()

    assert run() == run()


# ------------------------------------------------------------------ errors


def test_free_of_an_unknown_pointer_names_it() -> None:
    alloc, _ = make()
    with pytest.raises(InvalidPointerError, match="free\\(12345\\)"):
        alloc.free(12345)


def test_double_free_is_an_error() -> None:
    alloc, _ = make()
    ptr = alloc.malloc(100)
    alloc.free(ptr)
    with pytest.raises(InvalidPointerError, match="already freed"):
        alloc.free(ptr)
    assert isinstance(InvalidPointerError("x"), ValueError)


def test_make_allocator_rejects_an_unknown_name_and_lists_the_presets() -> None:
    with pytest.raises(InvalidInputError, match="'nope'") as info:
        make_allocator("nope", SimpleDeviceMemory(GiB))
    for name in ALLOCATOR_PRESETS:
        assert name in str(info.value)


def test_every_preset_declares_its_name_and_growth_granularity() -> None:
    for name, cls in ALLOCATOR_PRESETS.items():
        assert cls.name == name
        assert cls.growth_granularity_bytes > 0


# -------------------------------------------------------- property tests

_sizes = st.one_of(
    st.integers(1, 1 * MiB),
    st.integers(1 * MiB + 1, 12 * MiB),
    st.integers(12 * MiB, 60 * MiB),
)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("malloc"), _sizes, st.booleans()),
        st.tuples(st.just("free"), st.integers(0, 10_000), st.just(False)),
        st.tuples(st.just("empty_cache"), st.just(0), st.just(False)),
        st.tuples(st.just("reset_peaks"), st.just(0), st.just(False)),
    ),
    max_size=60,
)


@pytest.mark.parametrize("preset", sorted(ALLOCATOR_PRESETS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops)
def test_random_traces_keep_the_books_straight(
    preset: str, ops: list[tuple[str, int, bool]]
) -> None:
    capacity = 256 * MiB
    alloc, memory = make(preset, total=capacity)
    live: list[int] = []
    for op, arg, persistent in ops:
        if op == "malloc":
            with contextlib.suppress(SimOutOfMemory):
                live.append(alloc.malloc(arg, persistent=persistent))
        elif op == "free" and live:
            alloc.free(live.pop(arg % len(live)))
        elif op == "empty_cache":
            alloc.empty_cache()
        elif op == "reset_peaks":
            alloc.reset_peak_memory_stats()
        assert 0 <= alloc.allocated <= alloc.reserved <= memory.mapped <= capacity
        stats = alloc.memory_stats()
        for key, value in stats.items():
            if key.endswith(".peak"):
                assert value >= stats[key.replace(".peak", ".current")], key
            if key.endswith(".freed"):
                assert value >= 0, key
        assert_consistent(alloc)
    for ptr in live:
        alloc.free(ptr)
    alloc.empty_cache()
    assert alloc.allocated == 0
    assert alloc.reserved == 0
    assert memory.mapped == 0
    assert_consistent(alloc)


# ------------------------------------------------- torch-cuda-expandable


def test_expandable_maps_2mib_pages_in_the_small_pool() -> None:
    alloc, _ = make("torch-cuda-expandable")
    alloc.malloc(512)
    assert alloc.reserved == 2 * MiB


def test_expandable_grows_one_segment_by_20mib_pages() -> None:
    alloc, _ = make("torch-cuda-expandable")
    first = alloc.malloc(5 * MiB)  # one 20 MiB page; 15 MiB free above
    # 30 MiB + 512 does not fit the 15 MiB: one more page extends that block.
    second = alloc.malloc(30 * MiB + 1)
    assert second == first + 5 * MiB
    assert alloc.reserved == 40 * MiB
    assert alloc.allocated == 35 * MiB + 512


def test_expandable_prefers_a_block_that_cannot_grow() -> None:
    alloc, _ = make("torch-cuda-expandable")
    hole = alloc.malloc(1 * MiB)  # [0, 1024) KiB of the first 2 MiB page
    alloc.malloc(512)
    alloc.malloc(1024 * KiB - 512 - 500 * KiB)  # leaves a 500 KiB free tail
    alloc.free(hole)
    # Best fit by size is the 500 KiB tail, but it borders unmapped space:
    # torch takes the 1 MiB hole, whose room is smaller, and keeps the tail.
    assert alloc.malloc(400 * KiB) == hole
    plain, _ = make()
    hole = plain.malloc(1 * MiB)
    plain.malloc(512)
    plain.malloc(1024 * KiB - 512 - 500 * KiB)
    plain.free(hole)
    assert plain.malloc(400 * KiB) != hole


def test_expandable_splits_any_remainder_of_at_least_512_bytes() -> None:
    alloc, _ = make("torch-cuda-expandable")
    alloc.malloc(19 * MiB)  # torch-cuda would keep the 1 MiB remainder inside
    assert alloc.allocated == 19 * MiB


def test_expandable_coalesces_across_the_whole_segment() -> None:
    alloc, _ = make("torch-cuda-expandable")
    a = alloc.malloc(20 * MiB)
    b = alloc.malloc(20 * MiB)
    alloc.free(a)
    alloc.free(b)
    # torch-cuda needs a third segment here (see the test above); not this one.
    assert alloc.malloc(40 * MiB) == a
    assert alloc.reserved == 40 * MiB


def test_expandable_empty_cache_unmaps_free_pages_of_a_partly_used_segment() -> None:
    alloc, memory = make("torch-cuda-expandable")
    alloc.malloc(5 * MiB)  # [0, 5) of page 0
    middle = alloc.malloc(90 * MiB)  # [5, 95): maps pages 1-4
    alloc.malloc(5 * MiB)  # [95, 100)
    assert alloc.reserved == 100 * MiB
    alloc.free(middle)
    alloc.empty_cache()
    # Pages [20, 80) lie wholly inside the hole and go back; the partial pages stay.
    assert alloc.reserved == memory.mapped == 40 * MiB
    assert alloc.reserved - alloc.allocated == 30 * MiB


def test_expandable_reuses_an_unmapped_hole_before_growing() -> None:
    alloc, _ = make("torch-cuda-expandable")
    alloc.malloc(5 * MiB)
    middle = alloc.malloc(90 * MiB)
    alloc.malloc(5 * MiB)
    alloc.free(middle)
    alloc.empty_cache()
    # 80 MiB fits the hole [5, 95) (15 + 60 unmapped + 15 MiB): mapped back there.
    assert alloc.malloc(80 * MiB) == middle
    assert alloc.reserved == 100 * MiB


def test_expandable_releases_free_pages_and_retries_on_a_full_device() -> None:
    alloc, _ = make("torch-cuda-expandable", total=100 * MiB)
    a = alloc.malloc(60 * MiB)
    alloc.malloc(20 * MiB)
    alloc.free(a)
    # 70 MiB: no free block fits, 4 new pages do not fit the 20 MiB free;
    # unmapping the 60 MiB hole makes room for them above the live block.
    alloc.malloc(70 * MiB)
    assert stat(alloc, "num_alloc_retries") == 1
    assert alloc.reserved == 100 * MiB


def test_expandable_does_not_count_segments_or_inactive_splits() -> None:
    alloc, _ = make("torch-cuda-expandable")
    alloc.malloc(5 * MiB)
    stats = alloc.memory_stats()
    assert stats["segment.all.current"] == 0
    assert stats["inactive_split_bytes.all.current"] == 0
    assert stats["reserved_bytes.all.current"] == 20 * MiB


# -------------------------------------------------------------------- npu


def test_npu_pads_a_512_byte_request_to_1024_bytes() -> None:
    alloc, _ = make("npu")
    alloc.malloc(512)
    assert stat(alloc, "allocated_bytes.all.current") == 1024
    assert stat(alloc, "requested_bytes.all.current") == 512
    assert alloc.round_size(480) == 512


def test_npu_padding_sends_a_1mib_request_to_the_large_pool() -> None:
    alloc, _ = make("npu")
    alloc.malloc(1 * MiB)  # 1 MiB + 32 rounds to 1 MiB + 512 > 1 MiB
    assert stat(alloc, "reserved_bytes.large_pool.current") == 20 * MiB


def test_npu_workspace_is_device_memory_outside_the_pools() -> None:
    memory = SimpleDeviceMemory(1 * GiB)
    alloc = make_allocator("npu", memory)
    assert isinstance(alloc, NpuCachingAllocator)
    alloc.reserve_workspace(64 * MiB)
    alloc.reserve_workspace(16 * MiB)  # cached: a smaller need takes nothing new
    assert alloc.workspace == memory.mapped == 64 * MiB
    assert alloc.reserved == 0
    alloc.empty_cache()
    assert alloc.workspace == memory.mapped == 0


def test_npu_releases_its_workspace_before_the_retry() -> None:
    memory = SimpleDeviceMemory(100 * MiB)
    alloc = make_allocator("npu", memory)
    assert isinstance(alloc, NpuCachingAllocator)
    alloc.reserve_workspace(50 * MiB)
    alloc.malloc(60 * MiB)  # 50 free: workspace released, then it fits
    assert alloc.workspace == 0
    assert stat(alloc, "num_alloc_retries") == 1
    assert stat(alloc, "num_ooms") == 0


def test_npu_workspace_that_cannot_grow_raises_oom() -> None:
    memory = SimpleDeviceMemory(100 * MiB)
    alloc = make_allocator("npu", memory)
    assert isinstance(alloc, NpuCachingAllocator)
    alloc.malloc(60 * MiB)
    with pytest.raises(SimOutOfMemory, match="workspace"):
        alloc.reserve_workspace(50 * MiB)
    assert alloc.workspace == 0


def test_make_allocator_rejects_options_a_preset_does_not_take() -> None:
    with pytest.raises(InvalidInputError, match="'torch-cuda' does not take options"):
        make_allocator("torch-cuda", SimpleDeviceMemory(GiB), unit_bytes=GiB)
