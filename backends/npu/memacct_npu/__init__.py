"""memacct-npu: Huawei Ascend NPUs through ``torch_npu`` (backend name ``npu``).

``torch.npu`` has the shape of ``torch.cuda``, so the readings come from the
core's torch-like adapter; this plugin declares what is particular to Ascend:

* ``empty_cache()`` can also release runtime (non-torch) memory, which the
  next forward pass takes again (vllm-ascend #6625): the profiler reads
  non-allocator memory before emptying the cache;
* the allocator settings to record: ``PYTORCH_NPU_ALLOC_CONF``.

``availability()`` imports neither torch nor ``torch_npu``: it asks whether
both are installed and looks for the NPUs' device files (:mod:`memacct.plugin`).
``torch_npu`` is imported when the backend is built; its import is guarded:
without CANN's libraries it fails, and the constructor refuses with that reason
(:func:`npu_availability`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

from memacct import (
    AllocatorModel,
    Availability,
    BackendQuirks,
    BackendUnavailableError,
    TorchLikeBackend,
    TruthSource,
    torch_allocator_model,
    with_allocator_settings,
)
from memacct.plugin import installed, missing_device, version

__version__ = "0.1.0"

__all__ = [
    "NPU_QUIRKS",
    "AscendBackend",
    "import_torch_npu",
    "npu_availability",
    "npu_install_availability",
]

NPU_QUIRKS = BackendQuirks(
    empty_cache_releases_runtime_memory=True,
    allocator_settings_env=("PYTORCH_NPU_ALLOC_CONF",),
)
"""What is particular to Ascend's caching allocator, as memacct declares it."""

TORCH_NPU_HINT = "pip install torch-npu; it needs Huawei's CANN toolkit"
TORCH_MISSING = (
    "torch is not installed (pip install 'memacct-npu[torch-npu]'; torch_npu needs "
    "Huawei's CANN toolkit)"
)
CANN_HINT = (
    "source CANN's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh) so that its "
    "libraries (libhccl.so, libascendcl.so, ...) are found"
)


def import_torch_npu() -> Any:
    """Import ``torch_npu`` and return ``torch.npu``, the memory module it adds to torch.

    Raises:
        BackendUnavailableError: torch_npu does not import, or sees no NPU
            (:func:`npu_availability` says why).
    """
    avail = npu_availability()
    if not avail.available:
        raise BackendUnavailableError(avail.reason)
    return importlib.import_module("torch").npu


def npu_install_availability(
    find_spec: Callable[[str], bool] = installed,
) -> Availability:
    """What can be told without importing torch_npu: are torch and torch_npu installed, an NPU here?

    Args:
        find_spec: whether a top-level module is installed, without importing it.
    """
    if not find_spec("torch"):
        return Availability(False, TORCH_MISSING)
    if not find_spec("torch_npu"):
        return Availability(False, f"torch_npu is not installed ({TORCH_NPU_HINT})")
    release = version("torch-npu") or "(unknown version)"
    no_npu = missing_device("Ascend NPU")
    if no_npu is not None:
        return Availability(False, f"torch_npu {release} is installed but {no_npu}")
    return Availability(
        True, f"torch_npu {release} is installed and an NPU is present (checked again on start)"
    )


def npu_availability(
    find_spec: Callable[[str], object | None] = importlib.util.find_spec,
    import_module: Callable[[str], Any] = importlib.import_module,
) -> Availability:
    """Whether ``torch_npu`` works here and sees an NPU, and if not, the specific reason.

    Args:
        find_spec: how to tell whether a package is installed without importing it.
        import_module: how to import one.
    """
    if find_spec("torch") is None:
        return Availability(False, TORCH_MISSING)
    if find_spec("torch_npu") is None:
        return Availability(False, f"torch_npu is not installed ({TORCH_NPU_HINT})")
    try:
        torch_npu = import_module("torch_npu")
        npu = import_module("torch").npu
    except Exception as exc:  # a missing CANN library surfaces as ImportError or OSError
        return Availability(
            False,
            f"torch_npu is installed but failed to import: {type(exc).__name__}: {exc} "
            f"({CANN_HINT})",
        )
    version = getattr(torch_npu, "__version__", "(unknown version)")
    usable = bool(npu.is_available())
    count = int(npu.device_count()) if usable else 0
    if usable and count > 0:
        return Availability(True, f"torch_npu {version}: {count} NPU(s) visible")
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    hides = f"; ASCEND_RT_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return Availability(
        False,
        f"torch_npu {version} imported but torch.npu.is_available() is False: no Ascend NPU is "
        f"visible (is the Ascend driver loaded? `npu-smi info` shows the NPUs{hides})",
    )


class AscendBackend(TorchLikeBackend):
    """Huawei Ascend NPUs through ``torch_npu`` (registered as ``npu``).

    Devices are numbered as ``torch.npu`` numbers them (after
    ``ASCEND_RT_VISIBLE_DEVICES``). There is no per-process attribution:
    torch_npu exposes no per-process device memory, so snapshots report
    ``other_processes=None``.

    Args:
        module: a ``torch.npu``-shaped module; ``torch.npu`` (after importing
            ``torch_npu``) when omitted. Tests pass the simulated device's ``.api``.
    """

    name = "npu"
    default_truth_source = TruthSource.ALLOCATED_PEAK
    quirks = NPU_QUIRKS
    priority = 100

    def __init__(self, module: Any | None = None) -> None:
        super().__init__(module if module is not None else import_torch_npu())
        self.quirks = with_allocator_settings(NPU_QUIRKS)
        # torch_npu's caching allocator follows torch's (the simulator's npu preset, with its
        # 32-byte padding); no preset models its expandable segments.
        self._allocator_preset = torch_allocator_model(self.quirks, "npu")
        torch = sys.modules.get("torch")
        oom = getattr(torch, "OutOfMemoryError", None)
        self.out_of_memory_errors = (oom,) if isinstance(oom, type) else ()

    @property
    def allocator_model(self) -> AllocatorModel | None:
        """The simulator's model of torch_npu's allocator under the settings read when built.

        ``None`` under settings no preset models. The simulator is imported only when a
        replay asks for the model (``auto`` with a serving trace).
        """
        from memacct.sim.allocator import preset_model

        return preset_model(self._allocator_preset)

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """torch.OutOfMemoryError; older torch_npu raised RuntimeError("NPU out of memory ...")."""
        if super().is_out_of_memory(exc):
            return True
        return isinstance(exc, RuntimeError) and str(exc).startswith("NPU out of memory")

    @classmethod
    def availability(cls) -> Availability:
        """Whether torch_npu is installed and the machine has an NPU, told without importing it.

        Building the backend imports torch_npu and asks :func:`npu_availability`.
        """
        return npu_install_availability()
