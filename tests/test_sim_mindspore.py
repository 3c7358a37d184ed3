"""MindSpore's memory pool, both modes, follows the rules in docs/simulator.md ("MindSpore")."""

from __future__ import annotations

import pytest
from _sim_stats import assert_consistent, stat

from memacct.errors import InvalidInputError
from memacct.sim import SimDevice, SimOutOfMemory
from memacct.sim._mindspore import VMM_PAGE, default_budget
from memacct.sim.allocator import (
    CachingAllocator,
    MindSporeBlockPool,
    MindSporeMemoryPool,
    SimpleDeviceMemory,
    make_allocator,
)
from memacct.units import GiB, MiB


def make(
    preset: str = "mindspore", total: int = 8 * GiB, **options: object
) -> tuple[CachingAllocator, SimpleDeviceMemory]:
    memory = SimpleDeviceMemory(total)
    return make_allocator(preset, memory, **options), memory


# ------------------------------------------------------------------ both modes


@pytest.mark.parametrize("preset", ["mindspore", "mindspore-block"])
def test_mindspore_pads_by_32_and_rounds_to_512(preset: str) -> None:
    alloc, _ = make(preset)
    assert [alloc.round_size(n) for n in (1, 480, 481, 512)] == [512, 512, 1024, 1024]


def test_the_mindspore_preset_is_the_vmm_pool_and_vmm_false_the_block_pool() -> None:
    assert isinstance(make("mindspore")[0], MindSporeMemoryPool)
    assert isinstance(make("mindspore", vmm=False)[0], MindSporeBlockPool)
    assert isinstance(SimDevice("ascend-910b-64gb", "mindspore").allocator, MindSporeMemoryPool)


def test_the_default_budget_is_15_16_of_free_rounded_to_2mib_less_10mib() -> None:
    free = 60 * GiB + 123
    assert default_budget(free) == (free * 15 // 16) // (2 * MiB) * (2 * MiB) - 10 * MiB


@pytest.mark.parametrize(
    ("options", "match"),
    [({"budget_bytes": 0}, "budget_bytes"), ({"budget_bytes": True}, "budget_bytes"),
     ({"version": "2.7"}, "version"), ({"vmm": "yes"}, "vmm")],
)
def test_mindspore_rejects_bad_options_naming_them(options: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        make("mindspore", **options)


# ------------------------------------------------------------------------ VMM


def test_vmm_maps_2mib_pages_on_demand() -> None:
    alloc, memory = make()
    alloc.malloc(1 * MiB)
    assert alloc.reserved == memory.mapped == 2 * MiB
    alloc.malloc(1 * MiB)  # shares the first page, then needs a second
    assert alloc.reserved == 4 * MiB
    assert_consistent(alloc)


def test_vmm_neighbouring_buffers_share_a_page() -> None:
    alloc, _ = make()
    for _ in range(4):
        alloc.malloc(MiB // 2 - 32)  # 512 KiB each: four fill one page
    assert alloc.reserved == 2 * MiB


def test_vmm_keeps_persistent_and_common_allocators_in_separate_ranges() -> None:
    alloc, _ = make()
    alloc.malloc(1 * MiB, persistent=True)
    alloc.malloc(1 * MiB)
    stats = alloc.memory_stats()
    assert stats["reserved_bytes.small_pool.current"] == 2 * MiB  # persistent
    assert stats["reserved_bytes.large_pool.current"] == 2 * MiB  # common
    assert stats["segment.all.current"] == 2  # one virtual range each


def test_vmm_best_fit_reuses_an_idle_buffer_before_mapping() -> None:
    alloc, _ = make()
    a = alloc.malloc(10 * MiB)
    alloc.malloc(10 * MiB)
    alloc.free(a)
    before = alloc.reserved
    assert alloc.malloc(6 * MiB) == a
    assert alloc.reserved == before


def test_vmm_eager_free_moves_idle_pages_where_they_are_needed() -> None:
    # A 64 MiB budget: 16 MiB holes between live buffers cannot hold 40 MiB, but their
    # pages can be unmapped and mapped again behind the live ones.
    alloc, memory = make(budget_bytes=64 * MiB)
    ptrs = [alloc.malloc(16 * MiB - 32) for _ in range(4)]
    alloc.free(ptrs[0])
    alloc.free(ptrs[2])
    assert alloc.reserved == 64 * MiB
    alloc.malloc(32 * MiB - 32)
    assert alloc.reserved == 64 * MiB == memory.mapped
    assert stat(alloc, "num_eager_frees") == 1
    assert_consistent(alloc)


def test_vmm_one_budget_caps_both_allocators_together() -> None:
    alloc, _ = make(budget_bytes=8 * MiB)
    alloc.malloc(6 * MiB - 32, persistent=True)
    alloc.malloc(2 * MiB - 32)
    with pytest.raises(SimOutOfMemory, match="budget"):
        alloc.malloc(2 * MiB - 32)
    assert alloc.reserved == 8 * MiB
    assert stat(alloc, "num_ooms") == 1


def test_vmm_fails_when_the_device_has_no_page_left() -> None:
    alloc, memory = make(total=64 * MiB, budget_bytes=1 * GiB)
    alloc.malloc(60 * MiB)
    with pytest.raises(SimOutOfMemory):
        alloc.malloc(8 * MiB)
    assert memory.mapped == alloc.reserved <= 64 * MiB


def test_vmm_eager_freed_pages_stay_reserved_until_empty_cache() -> None:
    alloc, memory = make(budget_bytes=64 * MiB)
    a = alloc.malloc(32 * MiB - 32)
    alloc.malloc(16 * MiB - 32)
    alloc.free(a)
    alloc.malloc(40 * MiB - 32)  # eager free, then pages reused from the cache
    held = alloc.reserved
    assert held == memory.mapped <= 64 * MiB
    alloc.empty_cache()
    assert alloc.reserved == memory.mapped == 56 * MiB  # the two live buffers' pages
    assert_consistent(alloc)


def test_vmm_empty_cache_returns_every_idle_page() -> None:
    alloc, memory = make()
    ptrs = [alloc.malloc(5 * MiB) for _ in range(6)]
    for p in ptrs:
        alloc.free(p)
    alloc.empty_cache()
    assert alloc.reserved == memory.mapped == 0
    assert_consistent(alloc)


def test_vmm_free_merges_only_with_idle_neighbours() -> None:
    alloc, _ = make()
    a = alloc.malloc(4 * MiB)
    b = alloc.malloc(4 * MiB)
    alloc.malloc(4 * MiB)
    alloc.free(a)
    alloc.free(b)
    [(_, _, _, bufs)] = alloc._segments()
    assert [state for _, _, state in bufs[:3]] == ["idle", "in_use", "eager_free"]
    assert bufs[0][1] == 2 * (4 * MiB + 512)


def test_vmm_2_6_reports_physical_memory_and_absolute_peaks() -> None:
    alloc, _ = make(budget_bytes=1 * GiB)
    alloc.free(alloc.malloc(300 * MiB))
    alloc.reset_peak_memory_stats()
    alloc.malloc(100 * MiB)
    stats = alloc.memory_stats()
    assert stats["total_reserved_memory"] == alloc.reserved == 302 * MiB
    assert stats["total_allocated_memory"] == 100 * MiB + 512
    assert stats["max_allocated_memory"] == 100 * MiB + 512
    assert stats["max_reserved_memory"] == 302 * MiB
    for key in ("total_idle_memory", "total_eager_free_memory", "num_eager_frees"):
        assert key in stats


def test_vmm_2_5_reported_the_virtual_size_and_peaks_since_the_reset() -> None:
    alloc, _ = make(budget_bytes=1 * GiB, version="2.5")
    alloc.malloc(100 * MiB)
    alloc.reset_peak_memory_stats()
    alloc.malloc(50 * MiB)
    stats = alloc.memory_stats()
    assert stats["total_reserved_memory"] == 1 * GiB  # the virtual range, not the pages
    assert stats["max_allocated_memory"] == 50 * MiB + 512
    assert stats["reserved_bytes.all.current"] == alloc.reserved < 1 * GiB


def test_vmm_growth_is_page_granular() -> None:
    assert MindSporeMemoryPool.growth_granularity_bytes == VMM_PAGE == 2 * MiB


def test_vmm_profiled_kv_tensors_are_not_rounded_to_1gib() -> None:
    # The symptom: per-layer K/V tensors each took a 1 GiB block in the block pool.
    vmm, _ = make(budget_bytes=7 * GiB)
    block, _ = make("mindspore-block", budget_bytes=7 * GiB)
    for alloc in (vmm, block):
        for _ in range(12):
            alloc.malloc(300 * MiB)
    assert vmm.reserved == 12 * 300 * MiB + 2 * MiB
    assert block.reserved == 4 * GiB  # three 300 MiB tensors per 1 GiB block


# ----------------------------------------------------------------- block pool


def test_block_pool_grows_a_pool_by_a_1gib_block() -> None:
    alloc, _ = make("mindspore-block")
    alloc.malloc(1 * MiB)
    assert alloc.reserved == 1 * GiB
    assert stat(alloc, "segment.all.current") == 1


def test_block_pool_doubles_the_unit_until_a_large_request_fits() -> None:
    alloc, _ = make("mindspore-block")
    alloc.malloc(1 * GiB)  # 1 GiB + 32 -> 1 GiB + 512: a 2 GiB block
    assert alloc.reserved == 2 * GiB
    alloc.malloc(3 * GiB)  # another block, of 4 GiB
    assert alloc.reserved == 6 * GiB


def test_block_pool_keeps_persistent_and_common_pools_apart() -> None:
    alloc, _ = make("mindspore-block")
    alloc.malloc(1 * MiB, persistent=True)
    alloc.malloc(1 * MiB)
    stats = alloc.memory_stats()
    assert stats["reserved_bytes.small_pool.current"] == 1 * GiB  # persistent
    assert stats["reserved_bytes.large_pool.current"] == 1 * GiB  # common
    assert stats["segment.all.current"] == 2


def test_block_pool_persistent_requests_borrow_idle_common_buffers() -> None:
    alloc, _ = make("mindspore-block")
    alloc.malloc(900 * MiB, persistent=True)  # the persistent block is nearly full
    alloc.malloc(1 * MiB)  # the common pool has a block with room
    alloc.malloc(200 * MiB, persistent=True)
    assert alloc.reserved == 2 * GiB
    assert stat(alloc, "allocated_bytes.large_pool.current") > 200 * MiB


def test_block_pool_persistent_overflow_grows_the_empty_common_pool_first() -> None:
    alloc, _ = make("mindspore-block")
    alloc.malloc(900 * MiB, persistent=True)
    alloc.malloc(200 * MiB, persistent=True)  # the common pool has no block: it gets one
    stats = alloc.memory_stats()
    assert stats["reserved_bytes.large_pool.current"] == 1 * GiB
    alloc.malloc(900 * MiB, persistent=True)  # neither fits: the persistent pool grows
    assert alloc.memory_stats()["reserved_bytes.small_pool.current"] == 2 * GiB


def test_block_pool_caps_a_block_at_the_free_device_memory() -> None:
    alloc, _ = make("mindspore-block", total=1536 * MiB, budget_bytes=1536 * MiB)
    alloc.malloc(100 * MiB, persistent=True)  # a 1 GiB persistent block
    alloc.malloc(300 * MiB)  # the common pool's block: only 512 MiB are free
    assert stat(alloc, "reserved_bytes.large_pool.current") == 512 * MiB
    assert alloc.reserved == 1536 * MiB


def test_block_pool_caps_all_pools_at_one_budget() -> None:
    alloc, memory = make("mindspore-block", budget_bytes=1536 * MiB)
    alloc.malloc(100 * MiB, persistent=True)
    alloc.malloc(300 * MiB)
    assert alloc.reserved == 1536 * MiB < memory.total


def test_block_pool_cannot_merge_idle_buffers_across_blocks() -> None:
    memory = SimpleDeviceMemory(1 * GiB)
    alloc = make_allocator("mindspore-block", memory, unit_bytes=4 * MiB)
    a = alloc.malloc(4 * MiB - 32)  # exactly one 4 MiB block
    b = alloc.malloc(4 * MiB - 32)  # a second one
    alloc.free(a)
    alloc.free(b)
    alloc.malloc(8 * MiB - 32)  # 8 MiB: two idle 4 MiB blocks do not make one
    assert alloc.reserved == 16 * MiB


def test_block_pool_does_not_release_idle_blocks_and_retry() -> None:
    memory = SimpleDeviceMemory(12 * MiB)
    alloc = make_allocator("mindspore-block", memory, unit_bytes=4 * MiB, budget_bytes=12 * MiB)
    a = alloc.malloc(4 * MiB - 32)
    alloc.malloc(4 * MiB - 32)
    alloc.free(a)  # a wholly idle 4 MiB block stays cached
    with pytest.raises(SimOutOfMemory):
        alloc.malloc(8 * MiB - 32)  # 4 MiB free: torch would release the idle block and retry
    assert stat(alloc, "num_alloc_retries") == 0
    assert stat(alloc, "num_ooms") == 1


def test_block_pool_empty_cache_releases_only_wholly_idle_blocks() -> None:
    alloc, memory = make("mindspore-block")
    alloc.malloc(1 * MiB)
    alloc.free(alloc.malloc(1 * MiB, persistent=True))
    alloc.empty_cache()
    assert alloc.reserved == memory.mapped == 1 * GiB
    assert stat(alloc, "segment.small_pool.current") == 0


def test_block_pool_reports_mindspores_native_statistics() -> None:
    alloc, _ = make("mindspore-block")
    alloc.free(alloc.malloc(300 * MiB))
    alloc.malloc(100 * MiB)
    stats = alloc.memory_stats()
    allocated = 100 * MiB + 512
    assert stats["total_reserved_memory"] == 1 * GiB
    assert stats["total_allocated_memory"] == allocated
    assert stats["total_idle_memory"] == 1 * GiB - allocated
    assert stats["max_reserved_memory"] == 1 * GiB
    assert stats["max_allocated_memory"] == 300 * MiB + 512


def test_block_pool_unit_sets_its_growth_granularity() -> None:
    memory = SimpleDeviceMemory(1 * GiB)
    assert MindSporeBlockPool.growth_granularity_bytes == 1 * GiB
    alloc = make_allocator("mindspore-block", memory, unit_bytes=256 * MiB)
    assert alloc.growth_granularity_bytes == 256 * MiB


@pytest.mark.parametrize("unit", [0, 1000, -512, True])
def test_block_pool_rejects_a_unit_that_is_not_a_positive_multiple_of_512(unit: object) -> None:
    with pytest.raises(InvalidInputError, match="unit_bytes"):
        make_allocator("mindspore-block", SimpleDeviceMemory(GiB), unit_bytes=unit)
