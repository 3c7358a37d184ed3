"""The mindspore backend: its key mapping against the real MindSpore, and its readings.

The CPU build of MindSpore installed here answers ``mindspore.runtime`` with
the real key set and zeros, so the mapping and the conformance suite run
against the real package; device readings that need Ascend or a GPU run
against a fake package of the same shape.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from memacct_mindspore import (
    KEY_MAP,
    MINDSPORE_QUIRKS,
    MindSporeBackend,
    map_memory_stats,
    mindspore_availability,
    mindspore_install_availability,
    probe_mindspore,
)

import memacct
from memacct import BackendError, BackendUnavailableError, InvalidInputError, TruthSource
from memacct.backend import allocator_settings
from memacct.sim import SimDevice
from memacct.testing import BackendConformance, SimulatedConformance
from memacct.units import GiB, MiB

ms = pytest.importorskip("mindspore")

CAPACITY = 64 * GiB


def fixed_capacity(device: int) -> tuple[int, int]:
    # The CPU target has no device memory; the suite needs some reading.
    return CAPACITY, CAPACITY


class FakeRuntime:
    """``mindspore.runtime``-shaped, with a pool that grows in whole blocks."""

    def __init__(self) -> None:
        self.allocated = self.reserved = self.max_allocated = self.max_reserved = 0
        self.synchronized = 0

    def grow(self, allocated: int, reserved: int) -> None:
        self.allocated += allocated
        self.reserved += reserved
        self.max_allocated = max(self.max_allocated, self.allocated)
        self.max_reserved = max(self.max_reserved, self.reserved)

    def memory_stats(self) -> dict[str, Any]:
        return {
            "total_reserved_memory": self.reserved,
            "total_allocated_memory": self.allocated,
            "total_idle_memory": self.reserved - self.allocated,
            "total_eager_free_memory": 0,
            "max_reserved_memory": self.max_reserved,
            "max_allocated_memory": self.max_allocated,
            "common_mem_pool_stats": {"block_unit_size": GiB, "block_counts": 1, "blocks_info": {}},
        }

    def reset_peak_memory_stats(self) -> None:
        self.max_allocated, self.max_reserved = self.allocated, self.reserved

    def empty_cache(self) -> None:
        pass

    def synchronize(self) -> None:
        self.synchronized += 1


def fake_mindspore(
    target: str = "Ascend", device_id: int = 3, count: Any = 8, properties: Any = None
) -> Any:
    def device_count(device_target: str) -> int:
        if isinstance(count, BaseException):
            raise count
        return int(count)

    context = {"device_target": target, "device_id": device_id}
    return SimpleNamespace(
        __name__="fake_mindspore",
        __version__="2.6.0",
        get_context=context.__getitem__,
        runtime=FakeRuntime(),
        hal=SimpleNamespace(
            device_count=device_count, get_device_properties=lambda device_id, target: properties
        ),
    )


class TestMindSporeConformanceOnRealCpuPackage(BackendConformance):
    @pytest.fixture
    def backend(self) -> MindSporeBackend:
        return MindSporeBackend(ms, memory_info=fixed_capacity)


class SimulatedMindSporeOnAscend:
    """``mindspore``-shaped over the simulator's MindSpore pool, with MindSpore's native keys."""

    def __init__(self, dev: SimDevice) -> None:
        self.dev = dev
        self.runtime = self
        self.hal = self

    def get_context(self, key: str) -> Any:
        return {"device_target": "Ascend", "device_id": 0}[key]

    def get_device_properties(self, device_id: int, target: str) -> Any:
        free, total = self.dev.mem_get_info()
        return SimpleNamespace(name="Ascend910B", total_memory=total, free_memory=free)

    def memory_stats(self) -> dict[str, Any]:
        torch_keys = self.dev.memory_stats()
        reserved = torch_keys["reserved_bytes.all.current"]
        allocated = torch_keys["allocated_bytes.all.current"]
        return {
            "total_reserved_memory": reserved,
            "total_allocated_memory": allocated,
            "total_idle_memory": reserved - allocated,
            "max_reserved_memory": torch_keys["reserved_bytes.all.peak"],
            "max_allocated_memory": torch_keys["allocated_bytes.all.peak"],
        }

    def reset_peak_memory_stats(self) -> None:
        self.dev.reset_peak_memory_stats()

    def empty_cache(self) -> None:
        self.dev.empty_cache()

    def synchronize(self) -> None:
        pass


class TestMindSporeConformanceOnSimulatedAscend(SimulatedConformance):
    # MindSpore's pool pads each request by 32 bytes and rounds to 512.
    allocation_slack_bytes = 512

    @pytest.fixture
    def dev(self) -> SimDevice:
        return SimDevice("ascend-910b-64gb", "mindspore")

    @pytest.fixture
    def backend(self, dev: SimDevice) -> MindSporeBackend:
        return MindSporeBackend(SimulatedMindSporeOnAscend(dev))


@pytest.mark.mindspore
class TestMindSporeConformanceOnHardware(BackendConformance):
    """The same suite on a real Ascend or GPU device (readings and profiling; no allocator hook)."""

    @pytest.fixture
    def backend(self, memacct_backend: memacct.DeviceBackend) -> memacct.DeviceBackend:
        # MindSpore reports 0 bytes of an Ascend device until one operation has run on it.
        ms.ops.ones((1,), ms.float32).asnumpy()
        return memacct_backend


# -- availability -------------------------------------------------------------------------


@pytest.mark.skipif(
    ms.get_context("device_target") != "CPU", reason="MindSpore here targets a device"
)
def test_building_here_says_the_cpu_target_has_no_ascend_or_gpu() -> None:
    with pytest.raises(BackendUnavailableError) as caught:
        MindSporeBackend()
    assert str(caught.value).startswith(
        f"mindspore {ms.__version__} runs on device target CPU: it finds no Ascend or GPU device"
    )
    assert str(caught.value).endswith("memacct-mindspore needs MindSpore on Ascend or GPU")


def test_availability_without_a_device_file_names_both_kinds(
    device_files: Callable[..., Path],
) -> None:
    dev = device_files()
    avail = MindSporeBackend.availability()
    assert not avail.available
    assert avail.reason.startswith(
        f"mindspore {ms.__version__} is installed but this machine has no Ascend NPU (no "
        f"davinci0, davinci1, ... in {dev})"
    )
    assert "; no NVIDIA GPU (no nvidia0" in avail.reason
    assert avail.reason.endswith("memacct-mindspore needs MindSpore on Ascend or GPU")


@pytest.mark.parametrize("device_file", ["davinci0", "nvidia3"])
def test_availability_with_an_npu_or_gpu_is_told_without_importing_mindspore(
    device_file: str, device_files: Callable[..., Path]
) -> None:
    device_files(device_file)
    avail = mindspore_install_availability(find_spec=lambda name: name == "mindspore")
    assert avail.available and "is installed and a device is present" in avail.reason


def test_availability_without_mindspore_gives_the_install_hint() -> None:
    reason = mindspore_install_availability(find_spec=lambda name: False).reason
    assert reason.startswith("mindspore is not installed (pip install 'memacct-mindspore[")


def test_missing_mindspore_gives_the_install_hint() -> None:
    reason = probe_mindspore(find_spec=lambda name: None).reason
    assert reason.startswith(
        "mindspore is not installed (pip install 'memacct-mindspore[mindspore]'"
    )


def test_failed_import_is_reported() -> None:
    def broken(name: str) -> Any:
        raise ImportError("libmindspore_backend.so: undefined symbol")

    reason = probe_mindspore(find_spec=lambda name: object(), import_module=broken).reason
    assert (
        reason == "import mindspore failed: ImportError: libmindspore_backend.so: undefined symbol"
    )


def test_cpu_target_without_plugin_detail_still_names_the_target() -> None:
    assert mindspore_availability(fake_mindspore(target="CPU")).reason == (
        "mindspore 2.6.0 runs on device target CPU: it finds no Ascend or GPU device; "
        "memacct-mindspore needs MindSpore on Ascend or GPU"
    )


def test_ascend_target_with_devices_is_available() -> None:
    avail = mindspore_availability(fake_mindspore())
    assert (avail.available, avail.reason) == (True, "mindspore 2.6.0 on Ascend: 8 device(s)")


def test_target_without_devices_says_so() -> None:
    assert mindspore_availability(fake_mindspore(target="GPU", count=0)).reason == (
        "mindspore 2.6.0 targets GPU but sees no GPU device"
    )


def test_device_count_failure_is_reported() -> None:
    reason = mindspore_availability(
        fake_mindspore(count=RuntimeError("Device Ascend not exist."))
    ).reason
    assert (
        reason == "mindspore 2.6.0 targets Ascend but cannot count its devices: "
        "RuntimeError: Device Ascend not exist."
    )


# -- the key mapping --------------------------------------------------------------------------


def test_real_runtime_stats_map_onto_the_torch_keys() -> None:
    stats = map_memory_stats(ms.runtime.memory_stats())
    assert {key: stats[key] for key in KEY_MAP.values()} == dict.fromkeys(KEY_MAP.values(), 0)


def test_real_runtime_native_keys_are_kept_beside() -> None:
    stats = map_memory_stats(ms.runtime.memory_stats())
    assert stats["mindspore.total_idle_memory"] == 0
    assert "mindspore.common_mem_pool_stats.block_unit_size" in stats


def test_each_native_statistic_lands_on_its_torch_key() -> None:
    native = {
        "total_allocated_memory": 1,
        "max_allocated_memory": 2,
        "total_reserved_memory": 3,
        "max_reserved_memory": 4,
    }
    stats = map_memory_stats(native)
    assert [stats[KEY_MAP[k]] for k in native] == [1, 2, 3, 4]


def test_renamed_native_statistic_is_an_error_not_a_zero() -> None:
    with pytest.raises(BackendError, match="lacks max_reserved_memory"):
        map_memory_stats(
            {
                "total_allocated_memory": 1,
                "max_allocated_memory": 2,
                "total_reserved_memory": 3,
                "peak_reserved": 4,
            }
        )


def test_backend_reads_the_real_runtime_through_the_mapping() -> None:
    stats = MindSporeBackend(ms, memory_info=fixed_capacity).memory_stats(0)
    assert stats["reserved_bytes.all.peak"] == 0


# -- declared quirks ------------------------------------------------------------------------


def test_quirks_declare_reserved_truth_and_coarse_growth() -> None:
    assert MindSporeBackend.default_truth_source is TruthSource.RESERVED
    assert MindSporeBackend.quirks is MINDSPORE_QUIRKS
    assert MINDSPORE_QUIRKS.growth_granularity_bytes == GiB
    assert (MindSporeBackend.name, MindSporeBackend.priority) == ("mindspore", 90)


def test_allocator_settings_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MS_ALLOC_CONF", "enable_vmm:true")
    assert allocator_settings(MindSporeBackend(ms, memory_info=fixed_capacity)) == {
        "MS_ALLOC_CONF": "enable_vmm:true"
    }


def test_default_truth_source_charges_the_pools_block_growth() -> None:
    fake = fake_mindspore()
    runtime = fake.runtime
    backend = MindSporeBackend(fake, memory_info=lambda d: (CAPACITY - runtime.reserved, CAPACITY))
    baseline = memacct.snapshot(backend)
    with memacct.memory_profiling(backend, baseline, weights_memory=0) as session:
        runtime.grow(allocated=300 * MiB, reserved=GiB)  # a whole block for 300 MiB
        runtime.grow(allocated=-300 * MiB, reserved=0)
    result = session.result
    assert (result.truth_source, result.activation_peak) == (TruthSource.RESERVED, GiB)
    assert result.allocated_peak_increase == 300 * MiB


# -- device readings ------------------------------------------------------------------------


def test_only_the_current_device_is_readable() -> None:
    backend = MindSporeBackend(fake_mindspore(device_id=3), memory_info=fixed_capacity)
    assert backend.device_count() == 1
    with pytest.raises(InvalidInputError, match=r"out of range.*Ascend device 3"):
        backend.memory_stats(1)


def test_cpu_target_has_no_device_memory_to_read() -> None:
    with pytest.raises(BackendError, match="device target CPU: it has no device memory"):
        MindSporeBackend(ms).mem_get_info(0)


def test_ascend_memory_comes_from_device_properties() -> None:
    props = SimpleNamespace(name="Ascend910B", total_memory=64 * GiB, free_memory=60 * GiB)
    assert MindSporeBackend(fake_mindspore(properties=props)).mem_get_info(0) == (
        60 * GiB,
        64 * GiB,
    )


def test_uninitialised_ascend_device_says_what_to_do() -> None:
    props = SimpleNamespace(name="", total_memory=0, free_memory=0)
    with pytest.raises(
        BackendError, match=r"not initialised yet; call mindspore.set_device\('Ascend', 3\)"
    ):
        MindSporeBackend(fake_mindspore(properties=props)).mem_get_info(0)


def test_gpu_free_memory_comes_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = pytest.importorskip("memacct_nvml")
    from memacct_nvml.fake import FakeGpu, FakePynvml

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpus = [
        FakeGpu("GPU-a", 80 * GiB),
        FakeGpu("GPU-b", 40 * GiB, processes={os.getpid(): 4 * GiB}),
    ]
    backend = MindSporeBackend(
        fake_mindspore(target="GPU", device_id=0), nvml=nvml.Nvml(FakePynvml(gpus))
    )
    assert backend.mem_get_info(0) == (36 * GiB, 40 * GiB)


def test_gpu_without_memacct_nvml_says_what_mindspore_cannot_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "memacct_nvml", None)
    with pytest.raises(
        BackendError, match="MindSpore reports no free memory on GPU.*memacct-mindspore\\[gpu\\]"
    ):
        MindSporeBackend(fake_mindspore(target="GPU")).mem_get_info(0)


def test_synchronize_waits_on_a_device_target() -> None:
    fake = fake_mindspore()
    MindSporeBackend(fake).synchronize(0)
    assert fake.runtime.synchronized == 1


def test_synchronize_skips_the_cpu_target() -> None:
    fake = fake_mindspore(target="CPU")
    MindSporeBackend(fake).synchronize(0)
    assert fake.runtime.synchronized == 0


def test_default_package_is_mindspore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ms, "get_context", lambda key: "Ascend" if key == "device_target" else 0)
    monkeypatch.setattr(ms.hal, "device_count", lambda target: 1)
    assert MindSporeBackend().ms is ms
