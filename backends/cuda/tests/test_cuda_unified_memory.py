"""The cuda backend on a GPU that shares the host's memory (Jetson, GH200, DGX Spark).

An integrated GPU declares ``unified_memory``; its free memory is then the host's
``MemAvailable`` (the driver counts page cache as used), capped at the device's total
and never below what the driver reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _cuda_fakes import WithProperties
from memacct_cuda import CUDA_QUIRKS, CudaBackend, read_mem_available

from memacct.sim import SimDevice
from memacct.units import GiB


@pytest.fixture
def dev() -> SimDevice:
    return SimDevice("h100-80gb", "torch-cuda")


def meminfo(tmp_path: Path, available_kib: int) -> str:
    path = tmp_path / "meminfo"
    path.write_text(
        "MemTotal:       131072000 kB\n"
        "MemFree:             1000 kB\n"
        f"MemAvailable:   {available_kib} kB\n"
    )
    return str(path)


def test_integrated_gpu_declares_unified_memory(dev: SimDevice) -> None:
    backend = CudaBackend(WithProperties(dev.api, is_integrated=True), attribution=False)
    assert backend.quirks.unified_memory is True
    assert backend.quirks.allocator_settings_env == CUDA_QUIRKS.allocator_settings_env


def test_discrete_gpu_keeps_the_default_quirks(
    dev: SimDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    assert CudaBackend(WithProperties(dev.api, is_integrated=False)).quirks == CUDA_QUIRKS


def test_explicit_unified_memory_overrides_detection(dev: SimDevice) -> None:
    backend = CudaBackend(WithProperties(dev.api, is_integrated=True), unified_memory=False)
    assert backend.quirks.unified_memory is False


def test_unified_memory_free_is_mem_available(dev: SimDevice, tmp_path: Path) -> None:
    dev.other_process_malloc(60 * GiB)  # the driver counts page cache as used
    backend = CudaBackend(
        dev.api, unified_memory=True, attribution=False, meminfo_path=meminfo(tmp_path, 50 * 2**20)
    )
    assert backend.mem_get_info(0) == (50 * GiB, dev.total)


def test_unified_memory_free_is_capped_at_total(dev: SimDevice, tmp_path: Path) -> None:
    backend = CudaBackend(dev.api, unified_memory=True, meminfo_path=meminfo(tmp_path, 10**9))
    assert backend.mem_get_info(0) == (dev.total, dev.total)


def test_unified_memory_keeps_driver_free_when_larger(dev: SimDevice, tmp_path: Path) -> None:
    backend = CudaBackend(dev.api, unified_memory=True, meminfo_path=meminfo(tmp_path, 1024))
    assert backend.mem_get_info(0) == dev.api.mem_get_info(0)


def test_unified_memory_without_meminfo_keeps_driver_free(dev: SimDevice, tmp_path: Path) -> None:
    backend = CudaBackend(dev.api, unified_memory=True, meminfo_path=str(tmp_path / "absent"))
    assert backend.mem_get_info(0) == dev.api.mem_get_info(0)


def test_mem_available_is_read_in_bytes(tmp_path: Path) -> None:
    assert read_mem_available(meminfo(tmp_path, 2048)) == 2048 * 1024


def test_mem_available_missing_line_is_none(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 1 kB\n")
    assert read_mem_available(str(path)) is None
