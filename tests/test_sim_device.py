"""The simulated device: capacity, memory outside the allocator, the torch-like API."""

from __future__ import annotations

import threading

import pytest

from memacct.errors import InvalidInputError
from memacct.sim.allocator import (
    ALLOCATOR_PRESETS,
    InvalidPointerError,
    NpuCachingAllocator,
    SimOutOfMemory,
)
from memacct.sim.device import DEVICE_PRESETS, SimDevice
from memacct.torchlike import TorchLikeBackend
from memacct.units import GiB, MiB


def test_default_device_is_an_h100_with_the_torch_cuda_allocator() -> None:
    dev = SimDevice()
    assert dev.total == DEVICE_PRESETS["h100-80gb"]
    assert dev.name == "h100-80gb"
    assert dev.allocator.name == "torch-cuda"
    assert dev.free_bytes == dev.total
    assert dev.used == 0


def test_presets_have_plausible_visible_capacities() -> None:
    # Visible capacity sits a little below the marketed size (which is in GiB).
    for name, total in DEVICE_PRESETS.items():
        marketed = int(name.rsplit("-", 1)[1].removesuffix("gb")) * GiB
        assert 0.85 * marketed < total <= marketed, name


def test_total_bytes_overrides_the_preset() -> None:
    dev = SimDevice("a100-40gb", total_bytes=3 * GiB)
    assert dev.total == 3 * GiB
    assert dev.preset is None
    assert dev.name == f"sim-{3 * GiB}"
    assert SimDevice(None, total_bytes=GiB, name="tiny").name == "tiny"


def test_unknown_preset_is_rejected_with_the_choices() -> None:
    with pytest.raises(InvalidInputError, match="'h900'") as info:
        SimDevice("h900")
    assert "h100-80gb" in str(info.value)


def test_unknown_allocator_is_rejected_with_the_choices() -> None:
    with pytest.raises(InvalidInputError, match="'jemalloc'") as info:
        SimDevice(allocator="jemalloc")
    for name in ALLOCATOR_PRESETS:
        assert name in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "80GB"])
def test_bad_total_bytes_is_rejected(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="total_bytes"):
        SimDevice(total_bytes=bad)  # type: ignore[arg-type]


def test_no_preset_and_no_total_is_rejected() -> None:
    with pytest.raises(InvalidInputError, match="total_bytes"):
        SimDevice(None)


def test_free_and_used_account_for_allocator_external_and_other_processes() -> None:
    dev = SimDevice(total_bytes=1 * GiB)
    dev.malloc(5 * MiB)  # reserves a 20 MiB segment
    dev.external_malloc(100 * MiB)
    dev.other_process_malloc(200 * MiB)
    assert dev.free_bytes == 1 * GiB - 320 * MiB
    assert dev.used == 320 * MiB
    assert dev.process_memory == 120 * MiB
    assert dev.external_memory == 100 * MiB
    assert dev.other_process_memory == 200 * MiB
    assert dev.mem_get_info() == (1 * GiB - 320 * MiB, 1 * GiB)


def test_freeing_external_and_other_memory_gives_it_back() -> None:
    dev = SimDevice(total_bytes=1 * GiB)
    ext = dev.external_malloc(100 * MiB)
    other = dev.other_process_malloc(200 * MiB)
    dev.external_free(ext)
    dev.other_process_free(other)
    assert dev.free_bytes == 1 * GiB
    assert dev.process_memory == dev.other_process_memory == 0


def test_external_malloc_beyond_free_raises_without_releasing_the_cache() -> None:
    dev = SimDevice(total_bytes=100 * MiB)
    dev.free(dev.malloc(60 * MiB))  # 60 MiB cached by the allocator
    with pytest.raises(SimOutOfMemory, match="outside the allocator"):
        dev.external_malloc(50 * MiB)
    assert dev.allocator.reserved == 60 * MiB


def test_other_processes_make_the_allocator_run_out() -> None:
    dev = SimDevice(total_bytes=100 * MiB)
    dev.other_process_malloc(90 * MiB)
    with pytest.raises(SimOutOfMemory) as info:
        dev.malloc(5 * MiB)  # needs a 20 MiB segment, 10 MiB free
    assert info.value.free == 10 * MiB
    assert dev.memory_stats()["num_ooms"] == 1


def test_allocator_oom_frees_its_cache_for_its_own_retry() -> None:
    dev = SimDevice(total_bytes=100 * MiB)
    dev.free(dev.malloc(60 * MiB))
    dev.external_malloc(20 * MiB)
    dev.malloc(70 * MiB)  # 20 free: release the cached 60, then 80 free
    assert dev.memory_stats()["num_alloc_retries"] == 1
    assert dev.free_bytes == 10 * MiB


def test_freeing_an_unknown_handle_names_it() -> None:
    dev = SimDevice()
    with pytest.raises(InvalidPointerError, match="external_free\\(99\\)"):
        dev.external_free(99)
    with pytest.raises(InvalidPointerError, match="other_process_free\\(98\\)"):
        dev.other_process_free(98)


def test_handles_are_distinct_across_kinds() -> None:
    dev = SimDevice()
    ext = dev.external_malloc(MiB)
    other = dev.other_process_malloc(MiB)
    assert ext != other
    with pytest.raises(InvalidPointerError):
        dev.external_free(other)


def test_npu_workspace_is_process_memory_outside_reserved() -> None:
    dev = SimDevice("ascend-910b-64gb", allocator="npu")
    alloc = dev.allocator
    assert isinstance(alloc, NpuCachingAllocator)
    alloc.reserve_workspace(64 * MiB)
    assert dev.process_memory == dev.used == 64 * MiB
    assert dev.api.memory_reserved() == 0
    dev.empty_cache()  # torch.npu.empty_cache() releases the workspace too
    assert dev.process_memory == 0


def test_allocator_options_reach_the_preset() -> None:
    dev = SimDevice(allocator="mindspore-block", allocator_options={"unit_bytes": 256 * MiB})
    dev.malloc(1 * MiB)
    assert dev.api.memory_reserved() == 256 * MiB
    with pytest.raises(InvalidInputError, match="does not take options"):
        SimDevice(allocator_options={"unit_bytes": 1})


@pytest.mark.parametrize("allocator", sorted(ALLOCATOR_PRESETS))
def test_every_allocator_preset_runs_on_the_device(allocator: str) -> None:
    dev = SimDevice("l4-24gb", allocator=allocator)
    ptrs = [dev.malloc(n, persistent=i == 0) for i, n in enumerate((300 * MiB, 5 * MiB, 700))]
    assert dev.process_memory == dev.api.memory_reserved() >= 305 * MiB
    for ptr in ptrs:
        dev.free(ptr)
    dev.empty_cache()
    assert dev.free_bytes == dev.total


def test_empty_cache_and_reset_peaks_go_through_the_device() -> None:
    dev = SimDevice()
    dev.free(dev.malloc(30 * MiB))
    dev.reset_peak_memory_stats()
    assert dev.memory_stats()["allocated_bytes.all.peak"] == 0
    dev.empty_cache()
    assert dev.free_bytes == dev.total


# ----------------------------------------------------------------- .api


def test_api_has_the_torch_cuda_memory_module_shape() -> None:
    dev = SimDevice(total_bytes=1 * GiB)
    api = dev.api
    assert api.is_available() is True
    assert api.device_count() == 1
    assert api.current_device() == 0
    assert api.OutOfMemoryError is SimOutOfMemory
    ptr = dev.malloc(5 * MiB)
    dev.free(dev.malloc(30 * MiB))
    assert api.mem_get_info() == api.mem_get_info(0) == (1 * GiB - 50 * MiB, 1 * GiB)
    assert api.memory_allocated() == 5 * MiB
    assert api.max_memory_allocated(0) == 35 * MiB
    assert api.memory_reserved() == 50 * MiB
    assert api.max_memory_reserved() == 50 * MiB
    assert api.memory_stats()["allocation.all.current"] == 1
    api.empty_cache()
    api.reset_peak_memory_stats()
    api.synchronize()
    assert api.max_memory_reserved() == api.memory_reserved() == 20 * MiB
    dev.free(ptr)


@pytest.mark.parametrize("device", [1, -1, "cuda:1", True])
def test_api_rejects_a_device_other_than_0(device: object) -> None:
    api = SimDevice().api
    with pytest.raises(InvalidInputError, match=repr(device).replace("(", "\\(")):
        api.mem_get_info(device)  # type: ignore[arg-type]


def test_torch_like_backend_reads_the_device_through_the_api() -> None:
    dev = SimDevice(total_bytes=1 * GiB)
    backend = TorchLikeBackend(dev.api, name="sim")
    dev.malloc(5 * MiB)
    assert backend.device_count() == 1
    assert backend.mem_get_info(0) == (1 * GiB - 20 * MiB, 1 * GiB)
    assert backend.memory_stats(0)["reserved_bytes.all.current"] == 20 * MiB


def test_concurrent_use_keeps_every_reading_consistent() -> None:
    # Room for every worker's blocks at once (at most 4 x 300 x 8 MiB).
    dev = SimDevice(total_bytes=16 * GiB)
    errors: list[str] = []
    stop = threading.Event()

    def worker(seed: int) -> None:
        sizes = [(seed * 7919 + i * 104729) % (8 * MiB) + 1 for i in range(300)]
        try:
            for round_ in range(3):
                ptrs = [dev.malloc(n) for n in sizes]
                handle = dev.external_malloc(MiB * (round_ + 1))
                for ptr in ptrs:
                    dev.free(ptr)
                dev.external_free(handle)
                dev.empty_cache()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    def reader() -> None:
        while not stop.is_set():
            with dev.lock:
                free, total = dev.api.mem_get_info()
                reserved = dev.api.memory_reserved()
                used = dev.used
                if free + used != total or used != reserved + dev.external_memory:
                    errors.append(f"inconsistent: {free=} {used=} {reserved=}")
            stats = dev.memory_stats()
            if stats["allocated_bytes.all.current"] > stats["reserved_bytes.all.current"]:
                errors.append("allocated above reserved")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert errors == []
    assert dev.allocator.allocated == 0
    assert dev.free_bytes == dev.total
    assert dev.memory_stats()["allocation.all.allocated"] == 4 * 3 * 300
