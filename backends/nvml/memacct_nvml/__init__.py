"""memacct-nvml: NVIDIA GPU memory through NVML, device-wide and per process.

Two roles:

* the ``nvml`` backend: device-level snapshots of any NVIDIA GPU, with no
  framework in the process. NVML sees no caching allocator, so the backend
  reports no allocator statistics (not zeros) and cannot profile;
* per-process attribution for the ``cuda`` backend: this process's device
  memory from ``nvmlDeviceGetComputeRunningProcesses``, so memory that a
  co-tenant holds is reported as ``other_processes`` instead of being charged
  to this instance.

Example (on a machine with an NVIDIA driver)::

    import memacct
    backend = memacct.get_backend("nvml")
    print(memacct.snapshot(backend, device=0))   # other_processes filled in

``availability()`` loads neither pynvml nor the driver's library: it asks
whether nvidia-ml-py is installed and looks for the GPUs' device files
(:mod:`memacct.plugin`). NVML is started when the backend is built, and the
constructor refuses with NVML's own error (:func:`nvml_availability`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from memacct import (
    Availability,
    BackendQuirks,
    BackendUnavailableError,
    BaseBackend,
    InvalidInputError,
    TruthSource,
)
from memacct.plugin import installed, missing_device
from memacct_nvml.session import (
    PIP_HINT,
    MemoryInfo,
    Nvml,
    NvmlError,
    cuda_visible_targets,
    import_pynvml,
)

__version__ = "0.1.0"

__all__ = [
    "MemoryInfo",
    "Nvml",
    "NvmlBackend",
    "NvmlError",
    "cuda_device_handle",
    "cuda_visible_targets",
    "default_session",
    "import_pynvml",
    "nvml_availability",
    "nvml_install_availability",
]

logger = logging.getLogger("memacct")

# Errors that take away per-process figures but leave the device readable.
_ATTRIBUTION_ONLY = {"NVMLError_NoPermission", "NVMLError_NotSupported"}

_default: Nvml | None = None
_default_lock = threading.Lock()


def default_session() -> Nvml:
    """The process-wide NVML session, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Nvml()
        return _default


def nvml_availability(session: Nvml) -> Availability:
    """Whether NVML works through ``session`` and sees a GPU, and if not, why."""
    try:
        count = session.device_count()
        driver = session.driver_version()
    except NvmlError as exc:
        return Availability(False, str(exc))
    if count == 0:
        return Availability(False, f"NVML works (driver {driver}) but sees no NVIDIA GPU")
    return Availability(True, f"NVML with driver {driver} sees {count} GPU(s)")


def nvml_install_availability(find_spec: Callable[[str], bool] = installed) -> Availability:
    """What can be told without loading NVML: is nvidia-ml-py installed, a GPU here?

    Args:
        find_spec: whether a top-level module is installed, without importing it.
    """
    if not find_spec("pynvml"):
        return Availability(False, f"nvidia-ml-py is not installed ({PIP_HINT})")
    no_gpu = missing_device("NVIDIA GPU")
    if no_gpu is not None:
        return Availability(False, f"nvidia-ml-py is installed but {no_gpu}")
    return Availability(
        True, "nvidia-ml-py is installed and a GPU is present (NVML is asked on start)"
    )


def cuda_device_handle(
    session: Nvml, index: int, *, uuid: str | None = None, visible: str | None = None
) -> Any:
    """The NVML handle of the GPU that the CUDA runtime numbers ``index``.

    CUDA numbers the GPUs that ``CUDA_VISIBLE_DEVICES`` exposes, in its order;
    NVML numbers every GPU by PCI bus. The device's UUID, when the framework
    reports it, settles the question; otherwise ``CUDA_VISIBLE_DEVICES``
    (integers or UUIDs) is followed, and without it the indices are taken to
    agree (true with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and on machines whose
    GPUs are all the same model).

    Args:
        session: the NVML session.
        index: the CUDA device index.
        uuid: the device's UUID as the framework reports it, if known.
        visible: the ``CUDA_VISIBLE_DEVICES`` value; ``None`` when unset.
    """
    if uuid:
        try:
            return session.handle_by_uuid(
                uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            )
        except NvmlError as exc:
            logger.debug(
                "memacct: GPU UUID %s not found through NVML (%s); using indices", uuid, exc
            )
    if visible is None:
        return session.handle(index)
    targets = cuda_visible_targets(visible)
    if not 0 <= index < len(targets):
        raise InvalidInputError(
            f"CUDA device {index} is out of range: CUDA_VISIBLE_DEVICES={visible!r} exposes "
            f"{len(targets)} GPU(s)"
        )
    return session.handle_for(targets[index])


class NvmlBackend(BaseBackend):
    """Device-level memory of NVIDIA GPUs through NVML (registered as ``nvml``).

    Devices are numbered as NVML and ``nvidia-smi`` number them (every GPU;
    ``CUDA_VISIBLE_DEVICES`` does not apply). ``memory_stats`` is empty and
    ``quirks.has_allocator_stats`` is ``False``: NVML sees no caching
    allocator, so snapshots split ``used`` into this process and other
    processes only, and profiling is refused. ``reset_peak_memory_stats``,
    ``empty_cache`` and ``synchronize`` have nothing to act on.

    Args:
        nvml: the NVML session; the process-wide one when omitted.
    """

    name = "nvml"
    # Required by the protocol, never used: this backend cannot profile.
    default_truth_source = TruthSource.ALLOCATED_PEAK
    quirks = BackendQuirks(has_allocator_stats=False)
    # Never chosen automatically: it cannot profile.
    priority = 0

    def __init__(self, nvml: Nvml | None = None) -> None:
        if nvml is None:
            nvml = default_session()
            avail = nvml_availability(nvml)
            if not avail.available:
                raise BackendUnavailableError(avail.reason)
        self.nvml = nvml
        self.attribution_error: str | None = None

    def __repr__(self) -> str:
        return "NvmlBackend()"

    @classmethod
    def availability(cls) -> Availability:
        """Whether nvidia-ml-py is installed and the machine has a GPU, told without NVML.

        Building the backend starts NVML and asks :func:`nvml_availability`.
        """
        return nvml_install_availability()

    def device_count(self) -> int:
        return self.nvml.device_count()

    def memory_info(self, device: int) -> MemoryInfo:
        """The GPU's total, free, used and driver-reserved memory, in bytes."""
        return self.nvml.memory_info(self.nvml.handle(device))

    def mem_get_info(self, device: int) -> tuple[int, int]:
        info = self.memory_info(device)
        return info.free, info.total

    def memory_stats(self, device: int) -> Mapping[str, int]:
        self.nvml.handle(device)
        return {}

    def reset_peak_memory_stats(self, device: int) -> None:
        self.nvml.handle(device)

    def empty_cache(self) -> None:
        pass

    def synchronize(self, device: int) -> None:
        self.nvml.handle(device)

    def processes(self, device: int) -> dict[int, int | None]:
        """Device memory of every compute process on the GPU, ``{pid: bytes}``."""
        return self.nvml.processes(self.nvml.handle(device))

    def process_memory(self, device: int) -> int | None:
        """This process's memory on the GPU; ``None`` where NVML will not tell.

        Per-process figures can be denied (no permission, unsupported) while
        the device stays readable: then the snapshot reports
        ``other_processes=None`` and :attr:`attribution_error` says why.
        """
        handle = self.nvml.handle(device)
        try:
            return self.nvml.process_used_bytes(handle, os.getpid())
        except NvmlError as exc:
            if exc.nvml_error not in _ATTRIBUTION_ONLY:
                raise
            self.attribution_error = str(exc)
            return None
