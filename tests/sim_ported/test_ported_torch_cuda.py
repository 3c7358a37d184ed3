"""PyTorch's own caching-allocator expectations, ported to the simulated device.

Each test names the upstream test it comes from (pytorch/pytorch, ``test/test_cuda.py``,
``TestCuda``; read at commit 000e43cd) and keeps its numbers and assertions. The
expandable-segments variant (``test/test_cuda_expandable_segments.py`` reruns
``TestCuda`` with ``expandable_segments:True``) is the ``torch-cuda-expandable``
parametrisation. Deviations are listed in docs/simulator.md ("Ported expectations").
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from memacct.sim import SimDevice, SimOutOfMemory
from memacct.units import GiB, MiB

sys.path.insert(0, str(Path(__file__).parent))
from _torchlike import empty

PRESETS = ["torch-cuda", "torch-cuda-expandable"]


@pytest.fixture(params=PRESETS)
def dev(request: pytest.FixtureRequest) -> SimDevice:
    return SimDevice("h100-80gb", request.param)


def test_memory_allocation(dev: SimDevice) -> None:
    """test_cuda.py::TestCuda::test_memory_allocation."""
    api = dev.api
    api.empty_cache()
    prev = api.memory_allocated()
    mem = dev.malloc(1)  # torch.cuda.caching_allocator_alloc(1)
    assert api.memory_allocated() > prev
    dev.free(mem)  # caching_allocator_delete
    assert api.memory_allocated() == prev


def test_memory_stats(dev: SimDevice) -> None:
    """test_cuda.py::TestCuda::test_memory_stats."""
    api = dev.api
    api.empty_cache()
    api.reset_peak_memory_stats()
    api.reset_accumulated_memory_stats()
    prev_allocated = api.memory_allocated()
    prev_reserved = api.memory_reserved()
    prev_max_allocated = api.max_memory_allocated()
    prev_max_reserved = api.max_memory_reserved()
    assert prev_allocated == prev_max_allocated
    assert prev_reserved == prev_max_reserved
    prev_active_current = api.memory_stats()["active_bytes.all.current"]
    tmp = empty(dev, 256)  # torch.randn(256): 1 kB
    assert api.memory_stats()["active_bytes.all.current"] == 1024 + prev_active_current
    assert api.memory_stats()["active_bytes.all.freed"] == 0
    tmp.delete()
    api.empty_cache()
    assert api.memory_stats()["active_bytes.all.current"] == prev_active_current
    assert api.memory_stats()["active_bytes.all.freed"] == 1024
    api.reset_peak_memory_stats()
    assert api.max_memory_allocated() == prev_max_allocated
    assert api.max_memory_reserved() == prev_max_reserved


def test_out_of_memory(dev: SimDevice) -> None:
    """test_cuda.py::TestCuda::test_out_of_memory."""
    tensor = empty(dev, 1024)
    with pytest.raises(
        SimOutOfMemory, match=r"Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of"
    ):
        empty(dev, 1024 * 1024 * 1024 * 800000000, dtype="int8")
    with pytest.raises(SimOutOfMemory, match="Tried to allocate more than 1EB memory"):
        empty(dev, 1024 * 1024 * 1024 * 8000000000, dtype="int8")
    # An out-of-memory error does not disturb what follows.
    assert dev.allocator.live_blocks == 1
    tensor.delete()
    dev.free(dev.malloc(4096))


def test_out_of_memory_retry(dev: SimDevice) -> None:
    """test_cuda.py::TestCuda::test_out_of_memory_retry."""
    api = dev.api
    api.empty_cache()
    total_memory = dev.total
    size = int(total_memory * 0.5)
    a = empty(dev, size, dtype="int8")
    with pytest.raises(SimOutOfMemory, match="Tried to allocate"):
        empty(dev, size, dtype="int8")
    a.delete()
    b = empty(dev, size, dtype="int8")
    b.delete()
    api.empty_cache()
    api.reset_peak_memory_stats()


def test_set_per_process_memory_fraction(dev: SimDevice) -> None:
    """test_cuda.py::TestCuda::test_set_per_process_memory_fraction."""
    api = dev.api
    api.reset_peak_memory_stats(0)
    with pytest.raises(TypeError, match="Invalid type"):
        api.set_per_process_memory_fraction(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Invalid fraction value"):
        api.set_per_process_memory_fraction(-0.1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        api.set_per_process_memory_fraction(2.0)
    tensor = empty(dev, 1024)
    api.empty_cache()
    total_memory = dev.total
    api.set_per_process_memory_fraction(0.5, 0)
    application = int(total_memory * 0.499) - api.max_memory_reserved()
    tmp = empty(dev, application, dtype="int8")
    tmp.delete()
    api.empty_cache()
    application = int(total_memory * 0.5)
    with pytest.raises(SimOutOfMemory, match="out of memory"):
        empty(dev, application, dtype="int8")
    tensor.delete()


def test_get_per_process_memory_fraction(dev: SimDevice) -> None:
    """test_cuda.py::TestCuda::test_get_per_process_memory_fraction."""
    api = dev.api
    assert api.get_per_process_memory_fraction() == 1.0
    api.set_per_process_memory_fraction(1.0)
    assert api.get_per_process_memory_fraction() == 1.0
    api.set_per_process_memory_fraction(0.0)
    assert api.get_per_process_memory_fraction() == 0.0
    rng = random.Random(0)
    for _ in range(3):
        val = rng.random()
        api.set_per_process_memory_fraction(val)
        assert api.get_per_process_memory_fraction() == val


def _power2_div(size: int, div_factor: int) -> float:
    # test_cuda.py::TestCuda::test_allocator_settings's helper, as written there.
    pow2 = 1
    while pow2 < size:
        pow2 = pow2 * 2
    if pow2 == size:
        return pow2
    step = pow2 / 2 / div_factor
    ret = pow2 / 2
    while ret < size:
        ret = ret + step
    return ret


def test_allocator_settings() -> None:
    """test_cuda.py::TestCuda::test_allocator_settings (the caching allocator's part)."""
    dev = SimDevice("h100-80gb", "torch-cuda")
    api = dev.api
    api.empty_cache()
    key_allocated = "active_bytes.all.allocated"
    key_requested = "requested_bytes.all.allocated"
    nelems = 21 * 1024 * 1024
    nbytes = 4 * nelems
    nelems_big = 100 * 1024 * 1024
    nbytes_big = 4 * nelems_big
    start_mem = api.memory_stats()[key_allocated]
    dev.set_allocator_settings("")
    empty(dev, nelems)
    reg_mem = api.memory_stats()[key_allocated]
    start_requested = api.memory_stats()[key_requested]
    dev.set_allocator_settings("roundup_power2_divisions:4")
    empty(dev, nelems)
    pow2_div4_mem = api.memory_stats()[key_allocated]
    current_requested = api.memory_stats()[key_requested]
    assert reg_mem - start_mem == nbytes
    assert pow2_div4_mem - reg_mem == _power2_div(nbytes, 4)
    assert current_requested - start_requested == nbytes
    dev.set_allocator_settings("garbage_collection_threshold:0.5")
    dev.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    # Setting other keys resets the power-2 divisions.
    api.empty_cache()
    start_mem = api.memory_stats()[key_allocated]
    empty(dev, nelems)
    reg_mem = api.memory_stats()[key_allocated]
    assert reg_mem - start_mem == nbytes
    # The per-interval syntax.
    api.empty_cache()
    dev.set_allocator_settings(
        "garbage_collection_threshold:0.5,"
        "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"
    )
    start_mem = api.memory_stats()[key_allocated]
    empty(dev, nelems)
    pow2_div8_mem = api.memory_stats()[key_allocated]
    assert pow2_div8_mem - start_mem == _power2_div(nbytes, 8)
    api.empty_cache()
    start_mem = api.memory_stats()[key_allocated]
    empty(dev, nelems_big)
    pow2_div2_mem = api.memory_stats()[key_allocated]
    assert pow2_div2_mem - start_mem == _power2_div(nbytes_big, 2)


@pytest.mark.parametrize(
    "settings", ["foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2"]
)
def test_allocator_settings_refuses_bad_values(settings: str) -> None:
    """test_cuda.py::TestCuda::test_allocator_settings: bad settings are refused."""
    dev = SimDevice("h100-80gb", "torch-cuda")
    with pytest.raises(ValueError):
        dev.set_allocator_settings(settings)


# --- our own expectations, from the same suites' subjects ----------------------------------


def test_default_stats_carry_torchs_counters_and_max_split_size() -> None:
    stats = SimDevice("h100-80gb").memory_stats()
    assert stats["max_split_size"] == -1  # SIZE_MAX as torch's int64 statistic
    for key in ("num_sync_all_streams", "num_device_alloc", "num_device_free"):
        assert stats[key] == 0


def test_device_alloc_free_and_sync_counters_follow_segments() -> None:
    dev = SimDevice("h100-80gb")
    dev.free(dev.malloc(30 * MiB))
    dev.free(dev.malloc(100))
    stats = dev.memory_stats()
    assert stats["num_device_alloc"] == 2 and stats["num_device_free"] == 0
    dev.empty_cache()
    stats = dev.memory_stats()
    assert stats["num_device_free"] == 2 and stats["num_sync_all_streams"] == 1


def test_reset_accumulated_memory_stats_zeroes_allocated_and_freed_only() -> None:
    dev = SimDevice("h100-80gb")
    keep = dev.malloc(5 * MiB)
    dev.free(dev.malloc(7 * MiB))
    dev.reset_accumulated_memory_stats()
    stats = dev.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == stats["allocated_bytes.all.freed"] == 0
    assert stats["allocated_bytes.all.current"] == 5 * MiB
    assert stats["num_device_alloc"] == 0
    dev.free(keep)
    assert dev.memory_stats()["allocated_bytes.all.freed"] == 5 * MiB


def test_absurd_sizes_are_refused_before_any_retry_or_statistic() -> None:
    dev = SimDevice("h100-80gb")
    dev.free(dev.malloc(30 * MiB))  # a cached segment a retry would release
    with pytest.raises(SimOutOfMemory, match="more than 1EB"):
        dev.malloc(1 << 60)
    stats = dev.memory_stats()
    assert stats["num_alloc_retries"] == stats["num_ooms"] == 0
    assert dev.api.memory_reserved() == 30 * MiB


def test_max_split_size_keeps_oversize_blocks_whole_and_counts_them() -> None:
    dev = SimDevice("h100-80gb", "torch-cuda", allocator_options={"max_split_size_mb": 40})
    big = dev.malloc(100 * MiB)
    stats = dev.memory_stats()
    assert stats["oversize_allocations.current"] == stats["oversize_segments.current"] == 1
    assert stats["max_split_size"] == 40 * MiB
    dev.free(big)
    small = dev.malloc(30 * MiB)  # below max_split: may not use the 100 MiB block
    assert dev.api.memory_reserved() == 130 * MiB
    dev.free(small)
    near = dev.malloc(90 * MiB)  # within 20 MiB of the cached block: reuses it whole
    assert dev.api.memory_reserved() == 130 * MiB
    assert dev.allocator._live[near].size == 100 * MiB
    assert dev.memory_stats()["oversize_allocations.current"] == 1


def test_max_split_size_frees_oversize_cached_blocks_before_the_full_retry() -> None:
    dev = SimDevice(None, "torch-cuda", total_bytes=300 * MiB,
                    allocator_options={"max_split_size_mb": 40})
    dev.free(dev.malloc(200 * MiB))
    dev.malloc(150 * MiB)  # no fit (too far above), device full: release the oversize block
    stats = dev.memory_stats()
    assert stats["num_alloc_retries"] == 0  # released without the full retry
    assert stats["oversize_segments.current"] == 1


def test_garbage_collection_threshold_frees_cached_segments_before_growing() -> None:
    dev = SimDevice("h100-80gb", "torch-cuda",
                    allocator_options={"garbage_collection_threshold": 0.5})
    dev.set_memory_fraction(100 * MiB / dev.total)
    dev.free(dev.malloc(60 * MiB))  # 60 MiB cached: above half of the allowed 100 MiB
    dev.malloc(70 * MiB)  # does not fit the cached block; growing would pass the cap
    assert dev.api.memory_reserved() == 70 * MiB
    assert dev.memory_stats()["num_alloc_retries"] == 0  # freed by the collection


def test_graph_pool_keeps_its_memory_apart_until_released() -> None:
    dev = SimDevice("h100-80gb")
    with dev.graph_pool() as pool:
        dev.free(dev.malloc(64 * MiB))
    assert dev.pool_reserved(pool) == 64 * MiB
    dev.malloc(64 * MiB)  # outside the graph: the graph's cached block is not reused
    assert dev.api.memory_reserved() == 128 * MiB
    dev.empty_cache()  # the graph is alive: its pool keeps its memory
    assert dev.pool_reserved(pool) == 64 * MiB
    dev.release_pool(pool)
    dev.empty_cache()
    assert dev.api.memory_reserved() == 64 * MiB


def test_graphs_sharing_a_pool_reuse_each_others_freed_blocks() -> None:
    dev = SimDevice("h100-80gb")
    with dev.graph_pool() as pool:
        dev.free(dev.malloc(64 * MiB))
    with dev.graph_pool(pool):
        dev.malloc(60 * MiB)
    assert dev.pool_reserved(pool) == 64 * MiB


def test_no_release_and_retry_during_a_capture() -> None:
    dev = SimDevice(None, "torch-cuda", total_bytes=100 * MiB)
    dev.free(dev.malloc(60 * MiB))
    with dev.graph_pool(), pytest.raises(SimOutOfMemory):
        dev.malloc(60 * MiB)
    assert dev.memory_stats()["num_alloc_retries"] == 0


def test_streams_keep_their_own_free_blocks() -> None:
    dev = SimDevice("h100-80gb")
    dev.free(dev.malloc(30 * MiB, stream=1))
    dev.malloc(30 * MiB)  # default stream: cannot take stream 1's cached block
    assert dev.api.memory_reserved() == 60 * MiB
    dev.malloc(30 * MiB, stream=1)
    assert dev.api.memory_reserved() == 60 * MiB


def test_npu_preset_has_expandable_segments() -> None:
    dev = SimDevice("ascend-910b-64gb", "npu", allocator_options={"expandable_segments": True})
    assert dev.allocator.name == "npu-expandable"
    ptrs = [dev.malloc(50 * MiB) for _ in range(8)]
    for p in ptrs[::2]:
        dev.free(p)
    dev.empty_cache()
    # 420 MiB of 20 MiB pages; each freed 50 MiB block holds at least one whole page
    # (the first, page-aligned, two): 100 MiB go back.
    assert dev.api.memory_reserved() == 420 * MiB - 100 * MiB
    assert dev.allocator.round_size(512) == 1024  # torch_npu's 32-byte pad


def test_power2_rounding_is_torchs_formula() -> None:
    dev = SimDevice("h100-80gb", allocator_options={"roundup_power2_divisions": 4})
    for size in (1200 * 1024, 3 * MiB + 1, 1 * GiB + 5, 2048):
        assert dev.allocator.round_size(size) >= size
        if size > 512 * 4:
            assert dev.allocator.round_size(size) == _power2_div(size, 4)


def test_garbage_collection_frees_the_oldest_cached_segment_first() -> None:
    # c10/cuda/CUDACachingAllocator.cpp garbage_collect_cached_blocks: a block's age is the
    # large pool's get_free_block calls since it was freed; blocks at least as old as the
    # mean go first. The younger segment has the lower address: freeing by address would
    # release it instead.
    dev = SimDevice("h100-80gb", "torch-cuda",
                    allocator_options={"garbage_collection_threshold": 0.5})
    dev.set_memory_fraction(200 * MiB / dev.total)
    young = dev.malloc(40 * MiB)  # lower address
    old = dev.malloc(40 * MiB)
    dev.free(old)
    dev.malloc(50 * MiB)  # one more large request: the old block ages by one
    dev.free(young)
    dev.malloc(80 * MiB)  # reserved 130 MiB > 100 MiB: collect 30 MiB before growing
    assert dev.api.memory_reserved() == 170 * MiB
    assert dev.malloc(40 * MiB) == young  # the young segment stayed cached
    assert dev.memory_stats()["num_alloc_retries"] == 0


def test_mempool_empty_cache() -> None:
    # test/test_cuda.py TestMemPool::test_mempool_empty_cache (and torch_npu's aligned copy in
    # test/npu/): a pool's cached segments outlive the pool object, for empty_cache to reclaim.
    dev = SimDevice("h100-80gb", "torch-cuda")
    pool = dev.private_pool()
    x = dev.malloc(4 * MiB)
    with dev.use_pool(pool):
        y = dev.malloc(4 * MiB)
    dev.free(y)
    dev.free(x)
    dev.release_pool(pool)  # del pool
    assert dev.api.memory_reserved() == 2 * 20 * MiB  # both segments still cached
    dev.empty_cache()
    assert dev.api.memory_reserved() == 0
