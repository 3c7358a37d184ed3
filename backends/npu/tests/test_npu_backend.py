"""The npu backend: availability reasons, declared quirks, and the adapter on the simulated device.

torch_npu cannot be installed here (it needs CANN), so the adapter runs
against the simulated device's torch.npu-shaped module, with the ``npu``
allocator preset where the simulator has it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from memacct_npu import NPU_QUIRKS, AscendBackend, npu_availability, npu_install_availability

import memacct
from memacct import BackendUnavailableError, TorchLikeBackend, TruthSource
from memacct.backend import allocator_settings
from memacct.sim import ALLOCATOR_PRESETS, SimDevice
from memacct.testing import (
    Allocator,
    HardwareConformance,
    SimulatedConformance,
    torch_allocator,
)
from memacct.units import GiB, MiB

NPU_PRESET = "npu" if "npu" in ALLOCATOR_PRESETS else "torch-cuda"
TORCH_NPU_MISSING = importlib.util.find_spec("torch_npu") is None


def installed(*names: str) -> Any:
    return lambda name: object() if name in names else None


def importer(**modules: Any) -> Any:
    def import_module(name: str) -> Any:
        module = modules[name]
        if isinstance(module, BaseException):
            raise module
        return module

    return import_module


def fake_torch_npu(available: bool = True, count: int = 8) -> dict[str, Any]:
    npu = SimpleNamespace(is_available=lambda: available, device_count=lambda: count)
    return {"torch_npu": SimpleNamespace(__version__="2.5.1"), "torch": SimpleNamespace(npu=npu)}


class RuntimeReleasingModule:
    """torch.npu-shaped: its empty_cache() also frees runtime memory (vllm-ascend #6625)."""

    def __init__(self, dev: SimDevice) -> None:
        self.dev = dev
        self.runtime: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dev.api, name)

    def take_runtime_memory(self, nbytes: int) -> None:
        self.runtime.append(self.dev.external_malloc(nbytes))

    def empty_cache(self) -> None:
        while self.runtime:
            self.dev.external_free(self.runtime.pop())
        self.dev.api.empty_cache()


@pytest.fixture
def dev() -> SimDevice:
    return SimDevice("ascend-910b-64gb", NPU_PRESET)


class TestAscendConformance(SimulatedConformance):
    # The npu allocator pads each request by 32 bytes before rounding to 512.
    allocation_slack_bytes = 512 if NPU_PRESET == "npu" else 0

    @pytest.fixture
    def backend(self, dev: SimDevice) -> AscendBackend:
        return AscendBackend(dev.api)


@pytest.mark.npu
class TestAscendConformanceOnHardware(HardwareConformance):
    """The same suite on a real NPU; skipped with the backend's reason where there is none."""

    allocation_slack_bytes = 512

    @pytest.fixture
    def allocator(self) -> Allocator:
        return torch_allocator("npu:0")


# -- availability ---------------------------------------------------------------------------


@pytest.mark.skipif(not TORCH_NPU_MISSING, reason="torch_npu is installed on this machine")
def test_availability_here_says_torch_npu_is_missing_with_the_hint() -> None:
    avail = AscendBackend.availability()
    assert (avail.available, avail.reason) == (
        False,
        "torch_npu is not installed (pip install torch-npu; it needs Huawei's CANN toolkit)",
    )


@pytest.mark.skipif(not TORCH_NPU_MISSING, reason="torch_npu is installed on this machine")
def test_get_backend_npu_here_refuses_with_the_reason() -> None:
    with pytest.raises(
        BackendUnavailableError,
        match="backend 'npu' is not available here: torch_npu is not installed",
    ):
        memacct.get_backend("npu")


def test_missing_torch_is_named_before_torch_npu() -> None:
    reason = npu_availability(find_spec=installed()).reason
    assert reason.startswith("torch is not installed (pip install 'memacct-npu[torch-npu]'")


def test_torch_npu_without_cann_reports_the_import_error() -> None:
    error = ImportError("libhccl.so: cannot open shared object file: No such file or directory")
    avail = npu_availability(installed("torch", "torch_npu"), importer(torch_npu=error))
    assert not avail.available
    assert avail.reason.startswith(
        "torch_npu is installed but failed to import: ImportError: "
        "libhccl.so: cannot open shared object file"
    )
    assert "set_env.sh" in avail.reason


def test_torch_npu_without_visible_npu_names_the_visibility_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "")
    avail = npu_availability(
        installed("torch", "torch_npu"), importer(**fake_torch_npu(available=False))
    )
    assert avail.reason.startswith("torch_npu 2.5.1 imported but torch.npu.is_available() is False")
    assert "ASCEND_RT_VISIBLE_DEVICES=''" in avail.reason


def test_torch_npu_with_npus_is_available() -> None:
    avail = npu_availability(installed("torch", "torch_npu"), importer(**fake_torch_npu()))
    assert (avail.available, avail.reason) == (True, "torch_npu 2.5.1: 8 NPU(s) visible")


def test_installed_torch_npu_without_an_npu_device_file_is_told_without_importing_it(
    monkeypatch: pytest.MonkeyPatch, device_files: Callable[..., Path]
) -> None:
    device_files()
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # importing it would fail
    avail = npu_install_availability(find_spec=lambda name: True)
    assert not avail.available
    assert "is installed but this machine has no Ascend NPU (no davinci0" in avail.reason
    device_files("davinci0")
    assert npu_install_availability(find_spec=lambda name: True).available


def test_install_check_names_torch_before_torch_npu() -> None:
    assert npu_install_availability(find_spec=lambda name: False).reason.startswith(
        "torch is not installed (pip install 'memacct-npu[torch-npu]'"
    )


@pytest.mark.skipif(not TORCH_NPU_MISSING, reason="torch_npu is installed on this machine")
def test_building_without_torch_npu_refuses_with_the_reason() -> None:
    with pytest.raises(BackendUnavailableError, match="torch_npu is not installed"):
        AscendBackend()


# -- declared quirks ------------------------------------------------------------------------


def test_quirks_declare_that_empty_cache_releases_runtime_memory() -> None:
    assert AscendBackend.quirks is NPU_QUIRKS
    assert NPU_QUIRKS.empty_cache_releases_runtime_memory is True
    assert (AscendBackend.name, AscendBackend.default_truth_source, AscendBackend.priority) == (
        "npu",
        TruthSource.ALLOCATED_PEAK,
        100,
    )


def test_allocator_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice
) -> None:
    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "not:ours")
    assert allocator_settings(AscendBackend(dev.api)) == {
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"
    }


def profile_runtime_memory(backend: memacct.DeviceBackend, module: RuntimeReleasingModule) -> int:
    baseline = memacct.snapshot(backend)
    with memacct.memory_profiling(backend, baseline, weights_memory=0) as session:
        module.dev.free(module.dev.malloc(GiB))
        module.take_runtime_memory(256 * MiB)  # taken again by every forward pass
    return session.result.non_allocator_increase


def test_runtime_memory_freed_by_empty_cache_is_still_charged(dev: SimDevice) -> None:
    module = RuntimeReleasingModule(dev)
    assert profile_runtime_memory(AscendBackend(module), module) == 256 * MiB


def test_without_the_quirk_empty_cache_would_hide_runtime_memory(dev: SimDevice) -> None:
    module = RuntimeReleasingModule(dev)
    assert profile_runtime_memory(TorchLikeBackend(module, name="npu"), module) == 0


def test_npu_expandable_segments_setting_declares_packed_growth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    quirks = AscendBackend(SimDevice(allocator="npu").api).quirks
    assert quirks.growth_rounding == "packed"
    assert quirks.empty_cache_releases_runtime_memory
