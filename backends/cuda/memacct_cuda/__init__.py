"""memacct-cuda: NVIDIA GPUs through ``torch.cuda``, with per-process attribution through NVML.

The readings come from the core's torch-like adapter over ``torch.cuda``;
this plugin adds what is particular to CUDA, as data and small overrides:

* quirks: the allocated peak as the default truth source, and the allocator
  settings to record (``PYTORCH_CUDA_ALLOC_CONF``, and ``PYTORCH_ALLOC_CONF``
  that newer torch reads);
* per-process attribution: this process's device memory from NVML, so memory
  held by other processes on the GPU is reported as ``other_processes`` and
  is not charged to this instance (see :meth:`CudaBackend.process_memory`);
* unified memory (Jetson, DGX Spark): free memory is what the kernel can hand
  out without swapping, ``MemAvailable``, not what the driver calls free (see
  :meth:`CudaBackend.mem_get_info`).

``availability()`` imports no torch: it reads the installed torch's metadata
(a ``+cpu`` wheel cannot serve) and looks for the GPUs' device files
(:mod:`memacct.plugin`). torch is imported when the backend is built, and the
constructor refuses with torch's own diagnosis when ``torch.cuda`` sees no GPU.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from memacct import (
    AllocatorModel,
    Availability,
    BackendQuirks,
    BackendUnavailableError,
    InvalidInputError,
    TorchLikeBackend,
    TruthSource,
    torch_allocator_model,
    with_allocator_settings,
)
from memacct.plugin import installed, missing_device

if TYPE_CHECKING:
    from memacct_nvml import Nvml

__version__ = "0.1.0"

__all__ = [
    "CUDA_QUIRKS",
    "CudaBackend",
    "cuda_availability",
    "import_failure_reason",
    "read_mem_available",
    "torch_cuda_availability",
]

logger = logging.getLogger("memacct")

CUDA_QUIRKS = BackendQuirks(
    allocator_settings_env=("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"),
)
"""What is particular to CUDA's caching allocator, as memacct declares it."""

TORCH_HINT = (
    "pip install 'memacct-cuda[torch]', or a CUDA build of torch from "
    "https://pytorch.org/get-started/locally/"
)
MEMINFO = "/proc/meminfo"


def import_failure_reason(exc: BaseException) -> str:
    """Why ``import torch`` failed, with the fix where the cause is known."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":
        return f"torch is not installed ({TORCH_HINT})"
    text = f"import torch failed: {type(exc).__name__}: {exc}"
    if any(word in str(exc).lower() for word in ("npu", "hccl", "ascend", "cann")):
        # torch >= 2.5 imports every installed device extension at `import torch`.
        text += (
            " (torch autoloads the installed torch_npu, which needs CANN: set "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0, or uninstall torch-npu on this machine)"
        )
    return text


def cpu_only_reason(version: str) -> str:
    """Why a CPU-only torch cannot serve this backend (the same words as torch's own check)."""
    return (
        f"torch {version} is a CPU-only build (torch.cuda.is_available() is False): "
        "install a CUDA build of torch (https://pytorch.org/get-started/locally/)"
    )


def cpu_only_build_reason(version_of: Callable[[str], str] | None = None) -> str | None:
    """:func:`cpu_only_reason` when the installed torch wheel is tagged ``+cpu``, else ``None``.

    Reads the distribution's metadata only; ``None`` (look closer by importing
    torch) when torch is not installed or its version carries no ``+cpu`` tag.
    """
    try:
        version = (version_of or importlib.metadata.version)("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    return cpu_only_reason(version) if version.endswith("+cpu") else None


def torch_cuda_availability(
    version_of: Callable[[str], str] = importlib.metadata.version,
) -> Availability:
    """What can be told without importing torch: is it installed, a GPU build, a GPU here?

    Args:
        version_of: how to read an installed distribution's version.
    """
    if not installed("torch"):
        return Availability(False, f"torch is not installed ({TORCH_HINT})")
    cpu_only = cpu_only_build_reason(version_of)
    if cpu_only is not None:
        return Availability(False, cpu_only)
    try:
        version = version_of("torch")
    except importlib.metadata.PackageNotFoundError:  # importable without metadata
        version = "(unknown version)"
    no_gpu = missing_device("AMD GPU" if "+rocm" in version else "NVIDIA GPU")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if no_gpu is None and visible is not None and visible.strip() in ("", "-1"):
        no_gpu = f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process"
    if no_gpu is not None:
        return Availability(False, f"torch {version} is installed but {no_gpu}")
    return Availability(
        True, f"torch {version} is installed and a GPU is present (torch.cuda is asked on start)"
    )


def cuda_availability(torch: Any) -> Availability:
    """Whether ``torch`` can use a GPU here, and if not, the specific reason.

    Args:
        torch: the imported ``torch`` module (or one shaped like it).
    """
    version = str(torch.__version__)
    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    if cuda is None and hip is None:
        return Availability(False, cpu_only_reason(version))
    built = f"CUDA {cuda}" if cuda else f"ROCm {hip}"
    # torch explains a failed CUDA initialisation in a warning ("Found no NVIDIA driver
    # on your system ..."): that text is the specific reason.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        usable = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count()) if usable else 0
    if usable and count > 0:
        return Availability(True, f"torch {version} built with {built}: {count} GPU(s) visible")
    said = "; ".join(
        str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()
    )
    cause = said or "no NVIDIA driver is loaded, or no GPU is visible to this process"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        cause += f" (CUDA_VISIBLE_DEVICES={visible!r})"
    return Availability(
        False,
        f"torch {version} is built with {built} but torch.cuda.is_available() is False: {cause}",
    )


def read_mem_available(path: str = MEMINFO) -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes, or ``None`` where it cannot be read."""
    try:
        with open(path, encoding="ascii") as meminfo:
            for line in meminfo:
                key, _, value = line.partition(":")
                if key == "MemAvailable":
                    number, _, unit = value.strip().partition(" ")
                    return int(number) * (1024 if unit.strip() == "kB" else 1)
    except (OSError, ValueError):
        return None
    return None


def _import_torch_cuda() -> Any:
    """``torch.cuda`` once torch imports and sees a GPU; else :class:`BackendUnavailableError`."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:
        raise BackendUnavailableError(import_failure_reason(exc)) from exc
    avail = cuda_availability(torch)
    if not avail.available:
        raise BackendUnavailableError(avail.reason)
    return torch.cuda


def _is_integrated(module: Any) -> bool:
    properties = getattr(module, "get_device_properties", None)
    if not callable(properties):
        return False
    try:
        return any(
            bool(getattr(properties(i), "is_integrated", False))
            for i in range(int(module.device_count()))
        )
    except Exception:  # a reading that fails is not evidence of unified memory
        return False


def _torch_out_of_memory_errors() -> tuple[type[BaseException], ...]:
    """``torch.OutOfMemoryError`` (torch >= 2.5) where torch is loaded."""
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(
        getattr(torch, "cuda", None), "OutOfMemoryError", None
    )
    return (oom,) if isinstance(oom, type) and issubclass(oom, BaseException) else ()


class CudaBackend(TorchLikeBackend):
    """NVIDIA GPUs through ``torch.cuda`` (registered as ``cuda``).

    Devices are numbered as torch numbers them (after ``CUDA_VISIBLE_DEVICES``).

    Args:
        module: a ``torch.cuda``-shaped module; ``torch.cuda`` when omitted
            (tests pass the simulated device's ``.api``).
        attribution: read this process's memory through NVML so other
            processes' memory is kept out of ``non_allocator``. ``False``
            charges the whole device to this process, as vLLM does.
        nvml: the NVML session to use (a ``memacct_nvml.Nvml``); the
            process-wide one when omitted.
        unified_memory: whether the GPU shares host memory; detected from
            ``torch.cuda.get_device_properties(i).is_integrated`` when omitted.
        meminfo_path: where to read ``MemAvailable`` on unified memory.
    """

    name = "cuda"
    default_truth_source = TruthSource.ALLOCATED_PEAK
    quirks = CUDA_QUIRKS
    priority = 100

    def __init__(
        self,
        module: Any | None = None,
        *,
        attribution: bool = True,
        nvml: Nvml | None = None,
        unified_memory: bool | None = None,
        meminfo_path: str = MEMINFO,
    ) -> None:
        if module is None:
            module = _import_torch_cuda()
        super().__init__(module)
        self.out_of_memory_errors = _torch_out_of_memory_errors()
        if unified_memory is None:
            unified_memory = _is_integrated(module)
        self.quirks = with_allocator_settings(replace(CUDA_QUIRKS, unified_memory=unified_memory))
        # The simulator's models of torch's allocator, for auto's replay (None under settings
        # they do not model).
        self._allocator_preset = torch_allocator_model(
            self.quirks, "torch-cuda", "torch-cuda-expandable"
        )
        self.attribution = attribution
        self.attribution_error: str | None = None
        self._nvml = nvml
        self._handles: dict[int, Any] = {}
        self._meminfo_path = meminfo_path

    @property
    def allocator_model(self) -> AllocatorModel | None:
        """The simulator's model of torch's caching allocator under the settings read when built.

        ``None`` under settings no preset models. The simulator is imported only when a
        replay asks for the model (``auto`` with a serving trace).
        """
        from memacct.sim.allocator import preset_model

        return preset_model(self._allocator_preset)

    @classmethod
    def availability(cls) -> Availability:
        """Whether torch is a GPU build and the machine has a GPU, told without importing torch.

        A CPU-only wheel is told by its version (PyTorch's ``+cpu`` local tag), a GPU by
        its device file: ``memacct backends`` stays quick. Building the backend imports
        torch and asks :func:`cuda_availability`.
        """
        return torch_cuda_availability()

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """``(free, total)`` bytes of the GPU.

        On unified memory the driver counts the host's page cache as used
        (vLLM #13131): the kernel would drop that cache to satisfy an
        allocation, so free memory is ``MemAvailable`` (capped at the GPU's
        total) whenever that is larger than what the driver reports.
        """
        free, total = super().mem_get_info(device)
        if self.quirks.unified_memory:
            available = read_mem_available(self._meminfo_path)
            if available is not None:
                free = max(free, min(available, total))
        return free, total

    def process_memory(self, device: int) -> int | None:
        """This process's memory on the GPU, from NVML; ``None`` when it cannot be read.

        The GPU is found through its UUID when torch reports it, else through
        ``CUDA_VISIBLE_DEVICES``. When NVML is missing or refuses (no driver
        library, no permission, a container's own PID namespace), attribution
        is switched off for this backend, with :attr:`attribution_error`
        saying why, and snapshots report ``other_processes=None``.
        """
        self._check(device)
        if not self.attribution:
            return None
        try:
            from memacct_nvml import NvmlError, cuda_device_handle, default_session
        except ImportError as exc:
            self._stop_attribution(
                f"memacct-nvml is not installed (pip install memacct-nvml): {exc}"
            )
            return None
        session = self._nvml if self._nvml is not None else default_session()
        try:
            handle = self._handles.get(device)
            if handle is None:
                handle = cuda_device_handle(
                    session,
                    device,
                    uuid=self._uuid(device),
                    visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
                )
                self._handles[device] = handle
            return session.process_used_bytes(handle)
        except (NvmlError, InvalidInputError) as exc:
            self._stop_attribution(str(exc))
            return None

    def _uuid(self, device: int) -> str | None:
        properties = getattr(self.module, "get_device_properties", None)
        if not callable(properties):
            return None
        uuid = getattr(properties(device), "uuid", None)
        return str(uuid) if uuid else None

    def _stop_attribution(self, reason: str) -> None:
        # Switched off for good: snapshots of one session must attribute alike.
        self.attribution = False
        self.attribution_error = reason
        logger.warning(
            "memacct: per-process attribution is off for backend %r (%s); memory of other "
            "processes on the GPU now counts as this process's non-allocator memory",
            self.name,
            reason,
        )
