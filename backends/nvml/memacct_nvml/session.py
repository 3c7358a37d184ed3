"""A lazily initialised NVML session whose failures are :class:`NvmlError` with the usual cause.

NVML (``libnvidia-ml.so.1``) ships with the NVIDIA driver; ``nvidia-ml-py``
(module ``pynvml``) is its pure-Python binding. Nothing here talks to the
driver before the first reading, and every NVML error becomes an
:class:`NvmlError` whose message names the likely cause and the fix.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from memacct import BackendError, InvalidInputError

__all__ = [
    "MemoryInfo",
    "Nvml",
    "NvmlError",
    "cuda_visible_targets",
    "import_pynvml",
]

T = TypeVar("T")

PIP_HINT = "pip install nvidia-ml-py"

# The usual cause behind each NVML error, keyed by pynvml's class name (so a fake
# module in tests maps the same way).
_CAUSES = {
    "NVMLError_LibraryNotFound": (
        "the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed "
        "here, or the library is not on the loader path (in a container, start it with the "
        "NVIDIA Container Toolkit, e.g. `docker run --gpus all`)"
    ),
    "NVMLError_DriverNotLoaded": (
        "the NVIDIA kernel driver is not loaded (nvidia-smi fails too): load the nvidia "
        "kernel module, or reboot after installing the driver"
    ),
    "NVMLError_NoPermission": (
        "no permission: this user cannot open /dev/nvidiactl and /dev/nvidia*, or the "
        "query needs root (in a container, check that the GPU devices are passed in)"
    ),
    "NVMLError_NotSupported": "this GPU or driver does not support the query",
    "NVMLError_GpuIsLost": (
        "the GPU has fallen off the bus: look for Xid errors in `dmesg`; the GPU needs a reset"
    ),
    "NVMLError_LibRmVersionMismatch": (
        "the NVML library and the kernel driver have different versions (the driver was "
        "updated without a reboot): reboot, or reload the nvidia kernel module"
    ),
    "NVMLError_FunctionNotFound": (
        "this driver's NVML lacks the function (the driver is older than nvidia-ml-py): "
        "update the driver"
    ),
    "NVMLLibraryMismatchError": (
        "nvidia-ml-py and the driver's NVML do not match (the driver is older than "
        "nvidia-ml-py): update the driver, or install an older nvidia-ml-py"
    ),
    "NVMLError_Uninitialized": (
        "NVML is not initialised: something in this process called nvmlShutdown()"
    ),
}

# Memory info v2 is missing or has another layout on older drivers: read v1 instead.
_V2_FALLBACK = {
    "NVMLError_FunctionNotFound",
    "NVMLError_ArgumentVersionMismatch",
    "NVMLError_NotSupported",
    "NVMLLibraryMismatchError",
}


class NvmlError(BackendError):
    """An NVML call failed; the message names the usual cause.

    Attributes:
        nvml_error: pynvml's name for the error (``NVMLError_NoPermission``, ...),
            or ``None`` when the binding itself is missing.
    """

    def __init__(self, message: str, nvml_error: str | None = None) -> None:
        super().__init__(message)
        self.nvml_error = nvml_error


def import_pynvml() -> Any:
    """Import ``pynvml`` from nvidia-ml-py, or raise :class:`NvmlError` with the pip hint."""
    try:
        return importlib.import_module("pynvml")
    except ModuleNotFoundError as exc:
        if exc.name != "pynvml":
            raise
        raise NvmlError(f"nvidia-ml-py is not installed ({PIP_HINT})") from None


def _translate(exc: BaseException, action: str) -> NvmlError:
    kind = type(exc).__name__
    cause = _CAUSES.get(kind)
    if cause is None:
        return NvmlError(f"NVML cannot {action}: {exc} ({kind})", kind)
    return NvmlError(f"NVML cannot {action}: {cause} (NVML: {exc})", kind)


@dataclass(frozen=True)
class MemoryInfo:
    """One GPU's memory as NVML reports it, in bytes.

    Attributes:
        total: the GPU's memory.
        free: memory no process and no driver reservation holds.
        used: memory processes hold; with memory info v2 it excludes ``reserved``.
        reserved: memory the driver and firmware reserve (memory info v2), or
            ``None`` where only v1 is available (then ``used`` includes it).
        version: ``2`` or ``1``, the structure the driver answered with.
    """

    total: int
    free: int
    used: int
    reserved: int | None
    version: int


def cuda_visible_targets(visible: str) -> list[int | str]:
    """The physical GPUs a ``CUDA_VISIBLE_DEVICES`` value exposes, in CUDA's order.

    Entries are NVML indices (integers) or UUIDs and UUID prefixes
    (``GPU-...``, ``MIG-...``); like the CUDA runtime, parsing stops at the
    first entry that is neither.
    """
    targets: list[int | str] = []
    for raw in visible.split(","):
        entry = raw.strip()
        if entry.isdigit():
            targets.append(int(entry))
        elif entry.startswith(("GPU-", "MIG-")):
            targets.append(entry)
        else:
            break
    return targets


class Nvml:
    """An NVML session, initialised on first use and kept for the process.

    Args:
        module: a ``pynvml``-shaped module; imported from nvidia-ml-py when omitted.
    """

    def __init__(self, module: Any | None = None) -> None:
        self._module = module
        self._lock = threading.Lock()
        self._initialised = False

    @property
    def module(self) -> Any:
        """The ``pynvml`` module in use (imported on first access)."""
        if self._module is None:
            self._module = import_pynvml()
        return self._module

    def _errors(self) -> tuple[type[BaseException], ...]:
        found = (
            getattr(self.module, "NVMLError", None),
            getattr(self.module, "NVMLLibraryMismatchError", None),
        )
        return tuple(e for e in found if isinstance(e, type) and issubclass(e, BaseException))

    def init(self) -> None:
        """Initialise NVML once; raise :class:`NvmlError` with the cause when it cannot."""
        with self._lock:
            if self._initialised:
                return
            try:
                self.module.nvmlInit()
            except self._errors() as exc:
                raise _translate(exc, "start") from exc
            self._initialised = True

    def _call(self, action: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.init()
        try:
            return fn(*args, **kwargs)
        except self._errors() as exc:
            raise _translate(exc, action) from exc

    def driver_version(self) -> str:
        """The NVIDIA driver's version string."""
        version = self._call("read the driver version", self.module.nvmlSystemGetDriverVersion)
        return version.decode() if isinstance(version, bytes) else str(version)

    def device_count(self) -> int:
        """How many GPUs NVML sees (all of them: NVML ignores ``CUDA_VISIBLE_DEVICES``)."""
        return int(self._call("count the GPUs", self.module.nvmlDeviceGetCount))

    def handle(self, index: int) -> Any:
        """The NVML handle of GPU ``index`` (NVML's numbering, as ``nvidia-smi`` shows it)."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidInputError(f"GPU index must be a non-negative int, got {index!r}")
        try:
            return self._call(f"open GPU {index}", self.module.nvmlDeviceGetHandleByIndex, index)
        except NvmlError as exc:
            if exc.nvml_error != "NVMLError_InvalidArgument":
                raise
            count = self.device_count()
            raise NvmlError(
                f"GPU index {index} is out of range: NVML sees {count} GPU(s), numbered "
                f"0..{count - 1}",
                exc.nvml_error,
            ) from exc

    def uuid(self, handle: Any) -> str:
        """The GPU's UUID (``GPU-...``)."""
        value = self._call("read the GPU's UUID", self.module.nvmlDeviceGetUUID, handle)
        return value.decode() if isinstance(value, bytes) else str(value)

    def handle_by_uuid(self, uuid: str) -> Any:
        """The handle of the GPU whose UUID is ``uuid`` or starts with it (as CUDA accepts)."""
        try:
            return self._call(f"open GPU {uuid}", self.module.nvmlDeviceGetHandleByUUID, uuid)
        except NvmlError as exc:
            if exc.nvml_error not in {"NVMLError_NotFound", "NVMLError_InvalidArgument"}:
                raise
        matches = [
            handle
            for handle in (self.handle(i) for i in range(self.device_count()))
            if self.uuid(handle).startswith(uuid)
        ]
        if len(matches) != 1:
            raise NvmlError(
                f"no single GPU has a UUID starting with {uuid!r} ({len(matches)} match): check "
                "CUDA_VISIBLE_DEVICES against `nvidia-smi -L`"
            )
        return matches[0]

    def handle_for(self, target: int | str) -> Any:
        """The handle of an NVML index or a UUID (prefix)."""
        return self.handle(target) if isinstance(target, int) else self.handle_by_uuid(target)

    def memory_info(self, handle: Any) -> MemoryInfo:
        """The GPU's memory: memory info v2 where the driver has it, else v1."""
        v2 = getattr(self.module, "nvmlMemory_v2", None)
        if v2 is not None:
            try:
                info = self._call(
                    "read GPU memory", self.module.nvmlDeviceGetMemoryInfo, handle, version=v2
                )
            except NvmlError as exc:
                if exc.nvml_error not in _V2_FALLBACK:
                    raise
            else:
                return MemoryInfo(
                    int(info.total), int(info.free), int(info.used), int(info.reserved), 2
                )
        info = self._call("read GPU memory", self.module.nvmlDeviceGetMemoryInfo, handle)
        return MemoryInfo(int(info.total), int(info.free), int(info.used), None, 1)

    def processes(self, handle: Any) -> dict[int, int | None]:
        """Device memory of each compute process on the GPU: ``{pid: bytes}``.

        ``None`` where the driver does not report a process's memory (Windows
        WDDM, or a restricted container). A process listed more than once
        (one entry per MIG instance) is summed.
        """
        entries = self._call(
            "list the GPU's processes", self.module.nvmlDeviceGetComputeRunningProcesses, handle
        )
        usage: dict[int, int | None] = {}
        for entry in entries:
            pid, used = int(entry.pid), entry.usedGpuMemory
            previous = usage.get(pid, 0)
            usage[pid] = None if used is None or previous is None else previous + int(used)
        return usage

    def process_used_bytes(self, handle: Any, pid: int | None = None) -> int | None:
        """Device memory of process ``pid`` (this process by default), or ``None`` if unknown.

        A process NVML does not list uses no memory on the GPU, provided that
        NVML's process IDs are ours: inside a container with its own PID
        namespace NVML reports host IDs, and then ``None`` says "cannot tell"
        instead of a wrong 0.
        """
        pid = os.getpid() if pid is None else pid
        usage = self.processes(handle)
        if pid in usage:
            return usage[pid]
        if all(_pid_exists(other) for other in usage):
            return 0
        return None


def _pid_exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")
