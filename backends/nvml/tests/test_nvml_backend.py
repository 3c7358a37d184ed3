"""The nvml backend: NVML's errors as clear messages, readings through a fake pynvml.

No NVIDIA driver is needed: error paths make the real ``pynvml`` raise its own
error classes; readings come from :mod:`memacct_nvml.fake`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest
from memacct_nvml import (
    Nvml,
    NvmlBackend,
    NvmlError,
    cuda_device_handle,
    cuda_visible_targets,
    nvml_availability,
    nvml_install_availability,
)
from memacct_nvml.fake import FakeGpu, FakePynvml

import memacct
from memacct import (
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
    MemacctError,
    ProfilingError,
)
from memacct.testing import BackendConformance, HardwareConformance
from memacct.units import GiB, MiB

NEIGHBOUR_PID = os.getppid()  # a process that exists: NVML's PIDs are ours
HIDDEN_PID = 2**22 + 4321  # above Linux's pid_max: from another PID namespace


def raiser(error: type[BaseException]) -> object:
    def fail(*args: object, **kwargs: object) -> None:
        raise error()

    return fail


def nvml_loads_here() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.fixture
def gpus() -> list[FakeGpu]:
    return [
        FakeGpu(
            "GPU-aaaa-1111",
            80 * GiB,
            reserved_bytes=512 * MiB,
            processes={os.getpid(): 3 * GiB, NEIGHBOUR_PID: 10 * GiB},
        ),
        FakeGpu("GPU-bbbb-2222", 40 * GiB),
    ]


@pytest.fixture
def fake(gpus: list[FakeGpu]) -> FakePynvml:
    return FakePynvml(gpus)


@pytest.fixture
def backend(fake: FakePynvml) -> NvmlBackend:
    return NvmlBackend(Nvml(fake))


@pytest.fixture
def real_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Nvml]:
    """A session over the real pynvml whose nvmlInit succeeds (each test breaks one call)."""
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    yield Nvml(pynvml)


class TestNvmlConformance(BackendConformance):
    @pytest.fixture
    def backend(self, fake: FakePynvml) -> NvmlBackend:
        return NvmlBackend(Nvml(fake))


@pytest.mark.nvml
class TestNvmlConformanceOnHardware(HardwareConformance):
    """The same suite on a real GPU; skipped with the backend's reason where there is none."""

    # backend: memacct_backend, the plugin's backend on this machine (HardwareConformance).


# -- availability ------------------------------------------------------------------


@pytest.mark.skipif(nvml_loads_here(), reason="this machine has a working NVIDIA driver")
def test_building_here_names_the_missing_nvml_library() -> None:
    with pytest.raises(BackendUnavailableError) as caught:
        NvmlBackend()
    assert "NVML library (libnvidia-ml.so.1) was not found" in str(caught.value)
    assert "no NVIDIA driver is installed" in str(caught.value)


def test_availability_without_a_gpu_device_file_says_so_without_loading_nvml(
    monkeypatch: pytest.MonkeyPatch, device_files: Callable[..., Path]
) -> None:
    dev = device_files("nvidiactl")
    monkeypatch.setattr(pynvml, "nvmlInit", raiser(AssertionError))  # NVML must not start
    avail = NvmlBackend.availability()
    assert (avail.available, avail.reason) == (
        False,
        f"nvidia-ml-py is installed but this machine has no NVIDIA GPU (no nvidia0, nvidia1, "
        f"..., dxg (WSL2), nvhost-ctrl-gpu or nvgpu (Jetson) in {dev}): no NVIDIA driver is "
        "loaded, or this container was started without its GPUs (docker run --gpus all)",
    )


def test_missing_binding_is_told_without_importing_it() -> None:
    assert nvml_install_availability(find_spec=lambda name: False).reason == (
        "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    )


def test_gpu_device_file_lists_nvml_and_building_it_gives_nvmls_reason(
    monkeypatch: pytest.MonkeyPatch, device_files: Callable[..., Path]
) -> None:
    device_files("nvidia0")
    monkeypatch.setattr(pynvml, "nvmlInit", raiser(pynvml.NVMLError_DriverNotLoaded))
    info = {b.name: b for b in memacct.available_backends()}["nvml"]
    assert (info.available, info.distribution, info.priority) == (True, "memacct-nvml", 0)
    with pytest.raises(BackendUnavailableError, match="the NVIDIA kernel driver is not loaded"):
        memacct.get_backend("nvml")


def test_availability_with_a_gpu_names_driver_and_count(fake: FakePynvml) -> None:
    avail = nvml_availability(Nvml(fake))
    assert avail.available
    assert avail.reason == "NVML with driver 550.54.15 sees 2 GPU(s)"


def test_availability_without_a_gpu_says_so() -> None:
    avail = nvml_availability(Nvml(FakePynvml([], driver_version="535.1")))
    assert not avail.available
    assert avail.reason == "NVML works (driver 535.1) but sees no NVIDIA GPU"


def test_missing_binding_gives_the_pip_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    avail = nvml_availability(Nvml())
    assert avail.reason == "nvidia-ml-py is not installed (pip install nvidia-ml-py)"


# -- NVML errors become MemacctErrors with the usual cause -------------------------


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (pynvml.NVMLError_LibraryNotFound, "NVML library (libnvidia-ml.so.1) was not found"),
        (pynvml.NVMLError_DriverNotLoaded, "the NVIDIA kernel driver is not loaded"),
        (pynvml.NVMLError_NoPermission, "no permission: this user cannot open /dev/nvidiactl"),
        (pynvml.NVMLError_LibRmVersionMismatch, "updated without a reboot"),
    ],
)
def test_failed_start_names_the_usual_cause(
    monkeypatch: pytest.MonkeyPatch, error: type[BaseException], cause: str
) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", raiser(error))
    with pytest.raises(NvmlError, match="^NVML cannot start: ") as info:
        Nvml(pynvml).device_count()
    assert cause in str(info.value)
    assert info.value.nvml_error == error.__name__
    assert isinstance(info.value, MemacctError)


@pytest.mark.parametrize(
    ("function", "error", "call", "message"),
    [
        pytest.param(
            "nvmlDeviceGetHandleByIndex", pynvml.NVMLError_InvalidArgument,
            lambda nvml: nvml.handle(5),
            r"GPU index 5 is out of range: NVML sees 2 GPU\(s\), numbered 0..1",
            id="index-out-of-range-names-the-count",
        ),
        pytest.param(
            "nvmlDeviceGetMemoryInfo", pynvml.NVMLError_NoPermission,
            lambda nvml: nvml.memory_info(object()),
            "NVML cannot read GPU memory: no permission",
            id="no-permission-for-memory-names-the-device-files",
        ),
        pytest.param(
            "nvmlDeviceGetComputeRunningProcesses", pynvml.NVMLError_Timeout,
            lambda nvml: nvml.processes(object()),
            r"NVML cannot list the GPU's processes: Timeout \(NVMLError_Timeout\)",
            id="unknown-error-keeps-nvml-text",
        ),
    ],
)  # fmt: skip
def test_a_failed_nvml_call_says_what_failed_and_why(
    real_nvml: Nvml,
    monkeypatch: pytest.MonkeyPatch,
    function: str,
    error: type[BaseException],
    call: Callable[[Nvml], object],
    message: str,
) -> None:
    monkeypatch.setattr(pynvml, function, raiser(error))
    with pytest.raises(NvmlError, match=message):
        call(real_nvml)


def test_negative_device_index_is_refused_before_nvml() -> None:
    with pytest.raises(InvalidInputError, match="non-negative int"):
        Nvml(FakePynvml([])).handle(-1)


def test_nvml_error_is_a_backend_error_so_snapshots_report_it(
    fake: FakePynvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake, "nvmlDeviceGetMemoryInfo", raiser(pynvml.NVMLError_GpuIsLost))
    with pytest.raises(BackendError, match="fallen off the bus"):
        memacct.snapshot(NvmlBackend(Nvml(fake)), 0)


def test_nvml_starts_once_per_session(fake: FakePynvml) -> None:
    session = Nvml(fake)
    session.device_count()
    session.handle(0)
    assert fake.init_calls == 1


# -- readings ------------------------------------------------------------------------


def test_memory_info_v2_reports_the_driver_reservation(backend: NvmlBackend) -> None:
    info = backend.memory_info(0)
    assert (info.version, info.reserved) == (2, 512 * MiB)
    assert info.used == 13 * GiB
    assert info.free == 80 * GiB - 13 * GiB - 512 * MiB


def test_memory_info_falls_back_to_v1_on_an_older_driver(gpus: list[FakeGpu]) -> None:
    info = NvmlBackend(Nvml(FakePynvml(gpus, memory_v2=False))).memory_info(0)
    assert (info.version, info.reserved) == (1, None)
    assert info.used == 13 * GiB + 512 * MiB


def test_memory_info_uses_v1_when_the_binding_lacks_v2(fake: FakePynvml) -> None:
    del fake.nvmlMemory_v2
    assert NvmlBackend(Nvml(fake)).memory_info(0).version == 1


def test_mem_get_info_agrees_across_versions(gpus: list[FakeGpu]) -> None:
    v2 = NvmlBackend(Nvml(FakePynvml(gpus))).mem_get_info(0)
    v1 = NvmlBackend(Nvml(FakePynvml(gpus, memory_v2=False))).mem_get_info(0)
    assert v1 == v2 == (80 * GiB - 13 * GiB - 512 * MiB, 80 * GiB)


def test_processes_lists_each_pid_with_its_bytes(backend: NvmlBackend) -> None:
    assert backend.processes(0) == {os.getpid(): 3 * GiB, NEIGHBOUR_PID: 10 * GiB}


def test_process_listed_twice_is_summed() -> None:
    fake = FakePynvml([FakeGpu("GPU-x", GiB)])
    fake.nvmlDeviceGetComputeRunningProcesses = lambda handle: [  # type: ignore[method-assign]
        type("P", (), {"pid": 7, "usedGpuMemory": 100})(),
        type("P", (), {"pid": 7, "usedGpuMemory": 20})(),
    ]
    assert Nvml(fake).processes(fake.gpus[0]) == {7: 120}


def test_process_memory_is_this_pids_usage(backend: NvmlBackend) -> None:
    assert backend.process_memory(0) == 3 * GiB


def test_process_not_listed_uses_nothing_when_pids_are_ours() -> None:
    gpu = FakeGpu("GPU-x", 8 * GiB, processes={NEIGHBOUR_PID: GiB})
    assert NvmlBackend(Nvml(FakePynvml([gpu]))).process_memory(0) == 0


def test_process_not_listed_is_unknown_when_pids_come_from_another_namespace() -> None:
    gpu = FakeGpu("GPU-x", 8 * GiB, processes={HIDDEN_PID: GiB})
    assert NvmlBackend(Nvml(FakePynvml([gpu]))).process_memory(0) is None


def test_unreported_process_memory_is_unknown() -> None:
    gpu = FakeGpu("GPU-x", 8 * GiB, processes={os.getpid(): None})
    assert NvmlBackend(Nvml(FakePynvml([gpu]))).process_memory(0) is None


def test_denied_process_list_leaves_the_device_readable(
    fake: FakePynvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        fake, "nvmlDeviceGetComputeRunningProcesses", raiser(pynvml.NVMLError_NoPermission)
    )
    backend = NvmlBackend(Nvml(fake))
    snap = memacct.snapshot(backend, 0)
    assert snap.other_processes is None
    assert backend.attribution_error is not None and "no permission" in backend.attribution_error


def test_snapshot_splits_the_device_into_this_process_and_others(backend: NvmlBackend) -> None:
    snap = memacct.snapshot(backend, 0)
    assert (snap.allocated, snap.reserved) == (0, 0)
    assert snap.other_processes == 10 * GiB + 512 * MiB  # the neighbour and the driver
    assert snap.non_allocator == 3 * GiB


def test_memory_stats_are_absent_not_zero(backend: NvmlBackend) -> None:
    assert backend.memory_stats(0) == {}
    assert backend.quirks.has_allocator_stats is False


def test_profiling_through_nvml_points_to_the_framework_backend(backend: NvmlBackend) -> None:
    baseline = memacct.snapshot(backend, 0)
    with pytest.raises(ProfilingError, match="backend 'nvml' has no allocator statistics.*cuda"):
        with memacct.memory_profiling(backend, baseline):
            pass


# -- which NVML device a CUDA index is -------------------------------------------------


def test_visible_devices_parse_indices_and_uuids() -> None:
    assert cuda_visible_targets("2, 0,GPU-bbbb") == [2, 0, "GPU-bbbb"]


def test_visible_devices_parsing_stops_at_an_invalid_entry() -> None:
    assert cuda_visible_targets("1,-1,0") == [1]


def test_cuda_index_follows_visible_integers(fake: FakePynvml) -> None:
    assert cuda_device_handle(Nvml(fake), 0, visible="1,0") is fake.gpus[1]


def test_cuda_index_follows_a_visible_uuid_prefix(fake: FakePynvml) -> None:
    assert cuda_device_handle(Nvml(fake), 0, visible="GPU-bbbb") is fake.gpus[1]


def test_cuda_index_without_visible_devices_is_the_nvml_index(fake: FakePynvml) -> None:
    assert cuda_device_handle(Nvml(fake), 1) is fake.gpus[1]


def test_framework_uuid_decides_over_the_index(fake: FakePynvml) -> None:
    assert cuda_device_handle(Nvml(fake), 0, uuid="bbbb-2222", visible="0") is fake.gpus[1]


def test_unknown_framework_uuid_falls_back_to_the_index(fake: FakePynvml) -> None:
    assert cuda_device_handle(Nvml(fake), 0, uuid="ffff", visible="1") is fake.gpus[1]


def test_cuda_index_beyond_visible_devices_is_refused(fake: FakePynvml) -> None:
    with pytest.raises(InvalidInputError, match="CUDA_VISIBLE_DEVICES='0' exposes 1 GPU"):
        cuda_device_handle(Nvml(fake), 1, visible="0")


def test_ambiguous_uuid_prefix_is_refused(fake: FakePynvml) -> None:
    with pytest.raises(NvmlError, match="no single GPU has a UUID starting with 'GPU-'"):
        cuda_device_handle(Nvml(fake), 0, visible="GPU-")
