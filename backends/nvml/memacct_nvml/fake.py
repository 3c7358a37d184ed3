"""A pynvml-shaped module over made-up GPUs, for tests that have no NVIDIA driver.

It raises pynvml's own error classes, so code under test meets the errors it
meets on real hardware::

    from memacct_nvml import Nvml, NvmlBackend
    from memacct_nvml.fake import FakeGpu, FakePynvml

    gpu = FakeGpu("GPU-1111", total_bytes=80 * 2**30, processes={4242: 2**30})
    backend = NvmlBackend(Nvml(FakePynvml([gpu])))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from memacct_nvml.session import import_pynvml

__all__ = ["FakeGpu", "FakePynvml"]


@dataclass
class FakeGpu:
    """One made-up GPU.

    Attributes:
        uuid: its UUID (``GPU-...``).
        total_bytes: its memory.
        reserved_bytes: memory the driver reserves (memory info v2 reports it apart).
        processes: device memory of each compute process, ``{pid: bytes}``;
            ``None`` where the driver would not say.
        other_used_bytes: used memory no compute process accounts for.
    """

    uuid: str
    total_bytes: int
    reserved_bytes: int = 0
    processes: dict[int, int | None] = field(default_factory=dict)
    other_used_bytes: int = 0

    @property
    def used_bytes(self) -> int:
        """Memory processes hold (v2 meaning: without the driver's reservation)."""
        return self.other_used_bytes + sum(b for b in self.processes.values() if b is not None)


class FakePynvml:
    """The part of ``pynvml`` memacct uses, over :class:`FakeGpu` objects.

    Args:
        gpus: the GPUs, in NVML's order.
        driver_version: what ``nvmlSystemGetDriverVersion`` returns.
        memory_v2: whether the "driver" has ``nvmlDeviceGetMemoryInfo_v2``.
    """

    def __init__(
        self, gpus: list[FakeGpu], *, driver_version: str = "550.54.15", memory_v2: bool = True
    ) -> None:
        real = import_pynvml()
        for name in dir(real):
            if name.startswith("NVMLError") or name == "NVMLLibraryMismatchError":
                setattr(self, name, getattr(real, name))
        self.nvmlMemory_v2 = real.nvmlMemory_v2
        self.gpus = gpus
        self.driver_version = driver_version
        self.memory_v2 = memory_v2
        self.init_calls = 0

    def _error(self, name: str) -> BaseException:
        error: BaseException = getattr(self, name)()
        return error

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise self._error("NVMLError_InvalidArgument")
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise self._error("NVMLError_NotFound")

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: int | None = None) -> Any:
        used, reserved = handle.used_bytes, handle.reserved_bytes
        free = handle.total_bytes - used - reserved
        if version is None:
            return SimpleNamespace(total=handle.total_bytes, free=free, used=used + reserved)
        if not self.memory_v2:
            raise self._error("NVMLError_FunctionNotFound")
        return SimpleNamespace(
            version=version, total=handle.total_bytes, reserved=reserved, free=free, used=used
        )

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[Any]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.processes.items()
        ]
