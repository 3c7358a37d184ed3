"""The cuda backend: availability reasons, quirks, attribution and unified memory.

The adapter runs against the simulated device's torch.cuda-shaped module, and
NVML is a fake whose process list follows the simulated device. On real
hardware the same conformance suite runs under the ``cuda`` marker (see
docs/hardware.md).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import torch
from _cuda_fakes import WithProperties
from memacct_cuda import (
    CudaBackend,
    cpu_only_build_reason,
    cuda_availability,
    import_failure_reason,
    torch_cuda_availability,
)
from memacct_nvml import Nvml
from memacct_nvml.fake import FakeGpu, FakePynvml

import memacct
from memacct import BackendUnavailableError, TorchLikeBackend, TruthSource
from memacct.backend import allocator_settings
from memacct.sim import SimDevice
from memacct.testing import (
    Allocator,
    HardwareConformance,
    SimulatedConformance,
    fresh_python,
    torch_allocator,
)
from memacct.units import GiB, MiB

NEIGHBOUR_PID = os.getppid()
CPU_ONLY_TORCH = torch.version.cuda is None and torch.version.hip is None


class SimNvml(FakePynvml):
    """NVML over a simulated GPU: this process and one neighbour, read live from the device."""

    def __init__(self, dev: SimDevice, uuid: str = "GPU-sim-0") -> None:
        super().__init__([FakeGpu(uuid, dev.total)])
        self.dev = dev

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[Any]:
        return [
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=self.dev.process_memory),
            SimpleNamespace(pid=NEIGHBOUR_PID, usedGpuMemory=self.dev.other_process_memory),
        ]


def fake_torch(
    version: str = "2.5.0",
    cuda: str | None = "12.4",
    hip: str | None = None,
    available: bool = True,
    count: int = 2,
    warning: str | None = None,
) -> Any:
    def is_available() -> bool:
        if warning:
            warnings.warn(warning, UserWarning, stacklevel=1)
        return available

    return SimpleNamespace(
        __version__=version,
        version=SimpleNamespace(cuda=cuda, hip=hip),
        cuda=SimpleNamespace(is_available=is_available, device_count=lambda: count),
    )


@pytest.fixture
def dev() -> SimDevice:
    return SimDevice("h100-80gb", "torch-cuda")


@pytest.fixture
def attributed(dev: SimDevice) -> CudaBackend:
    return CudaBackend(dev.api, nvml=Nvml(SimNvml(dev)))


class TestCudaConformance(SimulatedConformance):
    @pytest.fixture
    def backend(self, dev: SimDevice) -> CudaBackend:
        return CudaBackend(dev.api, nvml=Nvml(SimNvml(dev)))


@pytest.mark.cuda
class TestCudaConformanceOnHardware(HardwareConformance):
    """The same suite on a real GPU; skipped with the backend's reason where there is none."""

    @pytest.fixture
    def allocator(self) -> Allocator:
        return torch_allocator("cuda:0")


def test_torch_allocator_holds_the_tensor_until_released(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[weakref.ref[torch.Tensor]] = []
    empty = torch.empty

    def recording_empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        tensor = empty(*args, **kwargs)
        made.append(weakref.ref(tensor))
        return tensor

    monkeypatch.setattr(torch, "empty", recording_empty)
    alloc = torch_allocator("cpu")
    key = alloc.allocate(4096)
    held = made[0]()
    assert held is not None and (held.numel(), held.dtype) == (4096, torch.uint8)
    del held
    alloc.release(key)
    assert made[0]() is None


# -- availability ---------------------------------------------------------------------


@pytest.mark.skipif(not CPU_ONLY_TORCH, reason="this machine's torch is built with CUDA or ROCm")
def test_availability_here_names_the_cpu_only_build_and_its_version() -> None:
    avail = CudaBackend.availability()
    assert not avail.available
    assert avail.reason.startswith(
        f"torch {torch.__version__} is a CPU-only build (torch.cuda.is_available() is False)"
    )


@pytest.mark.skipif(not CPU_ONLY_TORCH, reason="this machine's torch is built with CUDA or ROCm")
def test_get_backend_cuda_here_refuses_with_the_reason() -> None:
    with pytest.raises(
        BackendUnavailableError, match="backend 'cuda' is not available here: .*CPU-only build"
    ):
        memacct.get_backend("cuda")


def test_cuda_build_without_driver_repeats_torchs_diagnosis() -> None:
    torch_ = fake_torch(
        available=False,
        warning="CUDA initialization: Found no NVIDIA driver on your system.\nMore.",
    )
    avail = cuda_availability(torch_)
    assert avail.reason == (
        "torch 2.5.0 is built with CUDA 12.4 but torch.cuda.is_available() is False: "
        "CUDA initialization: Found no NVIDIA driver on your system."
    )


def test_cuda_build_with_gpus_hidden_names_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    avail = cuda_availability(fake_torch(available=False))
    assert avail.reason.endswith(
        "no NVIDIA driver is loaded, or no GPU is visible to this process (CUDA_VISIBLE_DEVICES='')"
    )


def test_cuda_build_with_gpus_is_available() -> None:
    avail = cuda_availability(fake_torch())
    assert (avail.available, avail.reason) == (
        True,
        "torch 2.5.0 built with CUDA 12.4: 2 GPU(s) visible",
    )


def test_rocm_build_is_served_by_torch_cuda() -> None:
    assert cuda_availability(fake_torch(cuda=None, hip="6.2", count=1)).reason.endswith(
        "ROCm 6.2: 1 GPU(s) visible"
    )


def _torch_not_installed(name: str) -> str:
    if name == "torch":
        raise importlib.metadata.PackageNotFoundError(name)
    return importlib.metadata.distribution(name).version


def test_missing_torch_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(importlib.metadata, "version", _torch_not_installed)
    avail = CudaBackend.availability()
    assert avail.reason.startswith("torch is not installed (pip install 'memacct-cuda[torch]'")


def test_torch_broken_by_autoloaded_torch_npu_says_how_to_import_it() -> None:
    reason = import_failure_reason(ImportError("libhccl.so: cannot open shared object file"))
    assert reason.startswith("import torch failed: ImportError: libhccl.so")
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in reason


def test_other_torch_import_failure_is_reported_as_is() -> None:
    assert import_failure_reason(OSError("libcudart.so.12: bad ELF")) == (
        "import torch failed: OSError: libcudart.so.12: bad ELF"
    )


# -- declared quirks ----------------------------------------------------------------------


def test_quirks_declare_allocated_peak_and_both_allocator_variables() -> None:
    assert CudaBackend.default_truth_source is TruthSource.ALLOCATED_PEAK
    assert CudaBackend.quirks.allocator_settings_env == (
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
    )
    assert CudaBackend.quirks.empty_cache_releases_runtime_memory is False
    assert CudaBackend.priority == 100


def test_allocator_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, attributed: CudaBackend
) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    assert allocator_settings(attributed) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_profile_records_the_allocator_settings(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice, attributed: CudaBackend
) -> None:
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:512")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    baseline = memacct.snapshot(attributed)
    with memacct.memory_profiling(attributed, baseline) as session:
        dev.free(dev.malloc(GiB))
    assert session.result.allocator_settings == {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"}


@pytest.mark.skipif(not CPU_ONLY_TORCH, reason="this machine's torch is built with CUDA or ROCm")
def test_built_on_a_cpu_only_torch_refuses_with_the_reason() -> None:
    with pytest.raises(BackendUnavailableError, match="CPU-only build"):
        CudaBackend()


def test_built_without_a_module_imports_torch_and_takes_torch_cuda(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice
) -> None:
    fake = fake_torch()
    fake.cuda = dev.api
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert CudaBackend().module is dev.api


def test_built_on_a_gpu_build_without_driver_refuses_with_torchs_diagnosis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = fake_torch(available=False, warning="CUDA initialization: Found no NVIDIA driver.")
    monkeypatch.setitem(sys.modules, "torch", fake)
    with pytest.raises(BackendUnavailableError, match="Found no NVIDIA driver"):
        CudaBackend()


def test_gpu_build_with_a_gpu_device_file_is_available_without_importing_torch(
    monkeypatch: pytest.MonkeyPatch, device_files: Callable[..., Path]
) -> None:
    device_files("nvidia0", "nvidiactl")
    monkeypatch.setitem(sys.modules, "torch", None)  # importing it would fail
    monkeypatch.setattr("memacct_cuda.installed", lambda name: True)
    avail = torch_cuda_availability(lambda name: "2.13.0+cu128")
    assert (avail.available, avail.reason) == (
        True,
        "torch 2.13.0+cu128 is installed and a GPU is present (torch.cuda is asked on start)",
    )


def test_gpu_build_without_a_gpu_device_file_names_the_files_and_the_cause(
    device_files: Callable[..., Path],
) -> None:
    dev = device_files("nvidiactl", "kfd")
    avail = torch_cuda_availability(lambda name: "2.13.0")
    assert not avail.available
    assert avail.reason.startswith(
        f"torch 2.13.0 is installed but this machine has no NVIDIA GPU (no nvidia0, nvidia1, "
        f"..., dxg (WSL2), nvhost-ctrl-gpu or nvgpu (Jetson) in {dev}): no NVIDIA driver is loaded"
    )


def test_rocm_build_looks_for_the_rocm_device_file(device_files: Callable[..., Path]) -> None:
    device_files("nvidia0")
    assert "no AMD GPU (no kfd" in torch_cuda_availability(lambda name: "2.5.1+rocm6.2").reason
    device_files("kfd")
    assert torch_cuda_availability(lambda name: "2.5.1+rocm6.2").available


def test_cuda_visible_devices_that_hides_every_gpu_is_named(
    monkeypatch: pytest.MonkeyPatch, device_files: Callable[..., Path]
) -> None:
    device_files("nvidia0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert torch_cuda_availability(lambda name: "2.13.0").reason == (
        "torch 2.13.0 is installed but CUDA_VISIBLE_DEVICES='' hides every GPU from this process"
    )


# -- per-process attribution ----------------------------------------------------------------


def test_snapshot_attributes_a_neighbour_through_nvml(
    dev: SimDevice, attributed: CudaBackend
) -> None:
    dev.malloc(4 * GiB)
    dev.external_malloc(300 * MiB)
    dev.other_process_malloc(7 * GiB)
    snap = memacct.snapshot(attributed)
    assert snap.other_processes == 7 * GiB
    assert snap.non_allocator == 300 * MiB


def test_profiling_keeps_a_neighbours_allocation_out(
    dev: SimDevice, attributed: CudaBackend
) -> None:
    baseline = memacct.snapshot(attributed)
    with memacct.memory_profiling(attributed, baseline, weights_memory=0) as session:
        dev.free(dev.malloc(GiB))
        dev.other_process_malloc(5 * GiB)
    assert session.result.non_allocator_increase == 0


def test_attribution_off_charges_the_neighbour_as_vllm_does(dev: SimDevice) -> None:
    backend = CudaBackend(dev.api, attribution=False)
    baseline = memacct.snapshot(backend)
    with memacct.memory_profiling(backend, baseline, weights_memory=0) as session:
        dev.other_process_malloc(5 * GiB)
    assert session.result.non_allocator_increase == 5 * GiB
    assert session.result.after.other_processes is None


def test_attribution_follows_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice
) -> None:
    fake = SimNvml(dev)
    fake.gpus.insert(0, FakeGpu("GPU-other", 80 * GiB, processes={os.getpid(): 123}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    dev.malloc(GiB)
    assert CudaBackend(dev.api, nvml=Nvml(fake)).process_memory(0) == dev.process_memory


def test_attribution_prefers_the_uuid_torch_reports(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice
) -> None:
    fake = SimNvml(dev, uuid="GPU-5e1f")
    fake.gpus.insert(0, FakeGpu("GPU-other", 80 * GiB, processes={os.getpid(): 123}))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    module = WithProperties(dev.api, uuid="5e1f", is_integrated=False)
    dev.malloc(GiB)
    assert CudaBackend(module, nvml=Nvml(fake)).process_memory(0) == dev.process_memory


def test_nvml_failure_turns_attribution_off_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice, caplog: pytest.LogCaptureFixture
) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    backend = CudaBackend(dev.api, nvml=Nvml(pynvml))
    with caplog.at_level(logging.WARNING, logger="memacct"):
        first = memacct.snapshot(backend)
        memacct.snapshot(backend)
    assert first.other_processes is None
    assert (
        backend.attribution_error is not None and "libnvidia-ml.so.1" in backend.attribution_error
    )
    assert len([r for r in caplog.records if "attribution is off" in r.getMessage()]) == 1


def test_cuda_index_beyond_visible_devices_turns_attribution_off(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    backend = CudaBackend(dev.api, nvml=Nvml(SimNvml(dev)))
    assert backend.process_memory(0) is None
    assert backend.attribution_error is not None and "exposes 0 GPU(s)" in backend.attribution_error


def test_missing_memacct_nvml_turns_attribution_off(
    monkeypatch: pytest.MonkeyPatch, dev: SimDevice
) -> None:
    monkeypatch.setitem(sys.modules, "memacct_nvml", None)
    backend = CudaBackend(dev.api)
    assert backend.process_memory(0) is None
    assert backend.attribution_error is not None
    assert backend.attribution_error.startswith("memacct-nvml is not installed")


def test_attribution_checks_the_device_index(attributed: CudaBackend) -> None:
    with pytest.raises(memacct.InvalidInputError, match="out of range"):
        attributed.process_memory(1)


def test_plain_torch_like_adapter_has_no_attribution(dev: SimDevice) -> None:
    # The contrast the cuda plugin adds: the core adapter alone cannot attribute.
    assert TorchLikeBackend(dev.api).process_memory(0) is None


@pytest.mark.skipif(
    not torch.__version__.endswith("+cpu"), reason="this machine's torch wheel is not tagged +cpu"
)
def test_cpu_only_wheel_is_told_by_its_version_without_importing_torch() -> None:
    # `memacct backends` on a CPU machine must not pay torch's import (seconds).
    code = (
        "import sys, memacct_cuda\n"
        "print(memacct_cuda.CudaBackend.availability().reason)\n"
        "print('torch' in sys.modules)\n"
    )
    reason, imported = fresh_python(code)
    assert reason.startswith(f"torch {torch.__version__} is a CPU-only build")
    assert imported == "False"


def test_cpu_only_reason_needs_the_cpu_tag() -> None:
    assert cpu_only_build_reason(lambda name: "2.13.0+cu128") is None
    reason = cpu_only_build_reason(lambda name: "2.13.0+cpu") or ""
    assert "2.13.0+cpu is a CPU-only build" in reason


@pytest.mark.parametrize("var", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_expandable_segments_setting_declares_packed_growth(
    var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(var, "max_split_size_mb:512, expandable_segments:True")
    quirks = CudaBackend(SimDevice().api, attribution=False).quirks
    assert (quirks.growth_rounding, quirks.growth_granularity_bytes) == ("packed", 20 * 2**20)


def test_default_allocator_rounds_each_tensor_to_2_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    quirks = CudaBackend(SimDevice().api, attribution=False).quirks
    assert (quirks.growth_rounding, quirks.growth_granularity_bytes) == ("multiple", 2 * 2**20)


@pytest.mark.parametrize("device_file", ["nvidia0", "dxg", "nvhost-ctrl-gpu", "nvgpu"])
def test_a_gpu_is_told_by_the_device_files_of_linux_wsl2_and_jetson(
    device_file: str, device_files: Callable[..., Path]
) -> None:
    device_files(device_file)
    assert torch_cuda_availability(lambda name: "2.13.0").available
