"""memacct-mindspore: MindSpore on Ascend and GPU, through ``mindspore.runtime``.

MindSpore's memory pool reports its own statistics (``total_reserved_memory``,
``max_allocated_memory``, ...); this backend maps them onto torch's key names,
so the core reads every device alike, and keeps the native ones beside them
under ``mindspore.<key>``. Declared quirks: the pool grows in coarse blocks
(1 GiB by default) and fragments, so the default truth source is reserved
memory, as vllm-mindspore chose; ``MS_ALLOC_CONF`` is recorded as the
allocator setting.

What MindSpore cannot tell, and where memacct reads it instead:

* free device memory on Ascend comes from ``mindspore.hal.get_device_properties``
  (``total_memory``, ``free_memory``; zero until the device is initialised);
* on GPU MindSpore gives only ``total_memory``: free memory is read through
  NVML (``pip install 'memacct-mindspore[gpu]'``);
* MindSpore reads the memory of the current device only, so this backend sees
  one device, index 0: the one the process runs on (``mindspore.set_device``);
* there is no per-process figure: snapshots report ``other_processes=None``.

``availability()`` imports no mindspore: it asks whether mindspore is
installed and looks for an Ascend NPU's or NVIDIA GPU's device files
(:mod:`memacct.plugin`). mindspore is imported when the backend is built, and
the constructor refuses when its device target is not Ascend or GPU
(:func:`probe_mindspore`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from typing import Any

from memacct import (
    Availability,
    BackendError,
    BackendQuirks,
    BackendUnavailableError,
    BaseBackend,
    GiB,
    InvalidInputError,
    MiB,
    TruthSource,
)
from memacct.plugin import installed, missing_device, version

__version__ = "0.1.0"

__all__ = [
    "KEY_MAP",
    "MINDSPORE_QUIRKS",
    "NATIVE_PREFIX",
    "MindSporeBackend",
    "default_pool_budget",
    "map_memory_stats",
    "mindspore_availability",
    "mindspore_install_availability",
    "probe_mindspore",
]

KEY_MAP = {
    "total_allocated_memory": "allocated_bytes.all.current",
    "max_allocated_memory": "allocated_bytes.all.peak",
    "total_reserved_memory": "reserved_bytes.all.current",
    "max_reserved_memory": "reserved_bytes.all.peak",
}
"""MindSpore's native statistic -> the torch key memacct reads."""

NATIVE_PREFIX = "mindspore."

MINDSPORE_QUIRKS = BackendQuirks(
    allocator_settings_env=("MS_ALLOC_CONF",),
    growth_granularity_bytes=GiB,
    # A request above the pool's unit doubles the unit until it fits.
    growth_rounding="doubling",
)
"""What is particular to MindSpore's memory pool, as memacct declares it."""

MINDSPORE_HINT = (
    "pip install 'memacct-mindspore[mindspore]', or the MindSpore build for your device "
    "from https://www.mindspore.cn/install"
)
DEVICE_TARGETS = ("Ascend", "GPU")

MemoryInfoReader = Callable[[int], tuple[int, int]]

UNSET_MAX_DEVICE_MEMORY_GB = 1024.0
"""``max_device_memory``'s default in MindSpore ("1024GB"): no budget of its own."""


def default_pool_budget(free_bytes: int) -> int:
    """MindSpore's pool budget without ``max_device_memory``, from the free memory at start.

    Free x 15/16, rounded down to 2 MiB, less 10 MiB (``docs/simulator.md``,
    "MindSpore": ``AscendMemAdapter::Initialize``).
    """
    return max(0, (free_bytes * 15 // 16) // (2 * MiB) * (2 * MiB) - 10 * MiB)


def map_memory_stats(native: Mapping[str, Any]) -> dict[str, int]:
    """Torch-style statistics from ``mindspore.runtime.memory_stats()``.

    The four keys memacct reads are mapped (see :data:`KEY_MAP`); every
    numeric native value is kept under ``mindspore.<key>`` (per-pool values as
    ``mindspore.<pool>.<key>``).

    Raises:
        BackendError: a key memacct needs is missing (MindSpore renamed it):
            reading zeros instead would hide every allocation.
    """
    missing = [key for key in KEY_MAP if key not in native]
    if missing:
        raise BackendError(
            f"mindspore.runtime.memory_stats() lacks {', '.join(missing)} (it has "
            f"{', '.join(sorted(native)) or 'nothing'}): this MindSpore reports other statistics "
            "than memacct-mindspore maps; upgrade memacct-mindspore"
        )
    stats: dict[str, int] = {}
    for key, value in native.items():
        if isinstance(value, int) and not isinstance(value, bool):
            stats[NATIVE_PREFIX + key] = value
            if key in KEY_MAP:
                stats[KEY_MAP[key]] = value
        elif isinstance(value, Mapping):
            for sub, subvalue in value.items():
                if isinstance(subvalue, int) and not isinstance(subvalue, bool):
                    stats[f"{NATIVE_PREFIX}{key}.{sub}"] = subvalue
    return stats


def _plugin_error(ms: Any) -> str:
    # MindSpore keeps why its Ascend/GPU plugin did not load; its public check
    # (hal.is_available) only logs it, so read it where MindSpore stores it.
    try:
        context = importlib.import_module(f"{getattr(ms, '__name__', 'mindspore')}._c_expression")
        text = str(context.MSContext.get_instance().load_plugin_error()).strip()
    except Exception:
        return ""
    return f" (its device plugin did not load: {text.splitlines()[0]})" if text else ""


def mindspore_availability(ms: Any) -> Availability:
    """Whether ``ms`` (the imported mindspore) runs on an Ascend or GPU device, and if not, why."""
    version = getattr(ms, "__version__", "(unknown version)")
    target = str(ms.get_context("device_target"))
    if target not in DEVICE_TARGETS:
        return Availability(
            False,
            f"mindspore {version} runs on device target {target}: it finds no Ascend or GPU "
            f"device{_plugin_error(ms)}; memacct-mindspore needs MindSpore on Ascend or GPU",
        )
    try:
        count = int(ms.hal.device_count(target))
    except Exception as exc:
        return Availability(
            False,
            f"mindspore {version} targets {target} but cannot count its devices: "
            f"{type(exc).__name__}: {exc}",
        )
    if count < 1:
        return Availability(
            False, f"mindspore {version} targets {target} but sees no {target} device"
        )
    return Availability(True, f"mindspore {version} on {target}: {count} device(s)")


def probe_mindspore(
    find_spec: Callable[[str], object | None] = importlib.util.find_spec,
    import_module: Callable[[str], Any] = importlib.import_module,
) -> Availability:
    """Import mindspore if it is installed and ask :func:`mindspore_availability`.

    Args:
        find_spec: how to tell whether a package is installed without importing it.
        import_module: how to import one.
    """
    if find_spec("mindspore") is None:
        return Availability(False, f"mindspore is not installed ({MINDSPORE_HINT})")
    try:
        ms = import_module("mindspore")
    except Exception as exc:
        return Availability(False, f"import mindspore failed: {type(exc).__name__}: {exc}")
    return mindspore_availability(ms)


def mindspore_install_availability(
    find_spec: Callable[[str], bool] = installed,
) -> Availability:
    """What can be told without importing mindspore: is it installed, an NPU or GPU here?

    Args:
        find_spec: whether a top-level module is installed, without importing it.
    """
    if not find_spec("mindspore"):
        return Availability(False, f"mindspore is not installed ({MINDSPORE_HINT})")
    release = version("mindspore") or "(unknown version)"
    no_device = missing_device("Ascend NPU", "NVIDIA GPU")
    if no_device is not None:
        return Availability(
            False,
            f"mindspore {release} is installed but {no_device}; memacct-mindspore needs "
            "MindSpore on Ascend or GPU",
        )
    return Availability(
        True, f"mindspore {release} is installed and a device is present (checked on start)"
    )


class MindSporeBackend(BaseBackend):
    """MindSpore's memory pool on Ascend or GPU (registered as ``mindspore``).

    Args:
        mindspore: the ``mindspore`` package (or one shaped like it: ``runtime``,
            ``hal``, ``get_context``); imported when omitted.
        memory_info: ``memory_info(device) -> (free, total)`` bytes, replacing
            MindSpore's own reading: for a device MindSpore cannot read, such
            as the CPU target in tests.
        nvml: the NVML session for free memory on GPU (a ``memacct_nvml.Nvml``);
            the process-wide one when omitted.
        max_device_memory: the pool's budget in bytes, when it was set through
            ``mindspore.runtime.set_memory(max_size=...)``, which MindSpore 2.10
            gives no public way to read back; ``None`` reads
            ``mindspore.get_context("max_device_memory")``, else applies
            MindSpore's default rule (see :meth:`allocator_limit`).
    """

    name = "mindspore"
    default_truth_source = TruthSource.RESERVED
    quirks = MINDSPORE_QUIRKS
    priority = 90

    def __init__(
        self,
        mindspore: Any | None = None,
        *,
        memory_info: MemoryInfoReader | None = None,
        nvml: Any | None = None,
        max_device_memory: int | None = None,
    ) -> None:
        if max_device_memory is not None and (
            isinstance(max_device_memory, bool)
            or not isinstance(max_device_memory, int)
            or max_device_memory <= 0
        ):
            raise InvalidInputError(
                f"max_device_memory must be the pool budget as a positive int of bytes "
                f"(e.g. 60 * 2**30 for set_memory(max_size='60GB')), got {max_device_memory!r}"
            )
        self.max_device_memory = max_device_memory
        if mindspore is None:
            avail = probe_mindspore()
            if not avail.available:
                raise BackendUnavailableError(avail.reason)
            mindspore = importlib.import_module("mindspore")
        self.ms = mindspore
        self._memory_info = memory_info
        self._nvml = nvml
        self._nvml_handle: Any = None

    def __repr__(self) -> str:
        return f"MindSporeBackend(device_target={self.device_target!r})"

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """MindSpore has no out-of-memory type: its pool raises ``RuntimeError`` saying so."""
        return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()

    @classmethod
    def availability(cls) -> Availability:
        """Whether mindspore is installed beside an Ascend NPU or GPU, told without importing it.

        Building the backend imports mindspore and asks :func:`probe_mindspore`.
        """
        return mindspore_install_availability()

    @property
    def device_target(self) -> str:
        """MindSpore's device target: ``Ascend``, ``GPU`` or ``CPU``."""
        return str(self.ms.get_context("device_target"))

    @property
    def device_id(self) -> int:
        """The physical id of the device this process runs on."""
        return int(self.ms.get_context("device_id"))

    def _check(self, device: int) -> int:
        if isinstance(device, bool) or not isinstance(device, int) or device != 0:
            raise InvalidInputError(
                f"device {device!r} is out of range for backend 'mindspore': MindSpore reads only "
                f"the device this process runs on, which memacct numbers 0 ({self.device_target} "
                f"device {self.device_id}; choose it with mindspore.set_device)"
            )
        return device

    def device_count(self) -> int:
        return 1

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """``(free, total)`` bytes of the device, from MindSpore on Ascend and NVML on GPU."""
        self._check(device)
        if self._memory_info is not None:
            free, total = self._memory_info(device)
            return int(free), int(total)
        target = self.device_target
        if target == "Ascend":
            return self._ascend_memory()
        if target == "GPU":
            return self._gpu_memory()
        raise BackendError(
            f"MindSpore runs on device target {target}: it has no device memory to read "
            "(memacct-mindspore reads Ascend and GPU devices)"
        )

    def _ascend_memory(self) -> tuple[int, int]:
        device_id = self.device_id
        properties = self.ms.hal.get_device_properties(device_id, "Ascend")
        total = int(getattr(properties, "total_memory", 0) or 0)
        free = int(getattr(properties, "free_memory", 0) or 0)
        if total <= 0:
            raise BackendError(
                f"MindSpore reports 0 bytes of memory on Ascend device {device_id}: the device is "
                "not initialised yet; call "
                f"mindspore.set_device('Ascend', {device_id}) and run one "
                "operation before measuring"
            )
        return free, total

    def _gpu_memory(self) -> tuple[int, int]:
        try:
            from memacct_nvml import cuda_device_handle, default_session
        except ImportError:
            raise BackendError(
                "MindSpore reports no free memory on GPU (mindspore.hal.get_device_properties "
                "gives total_memory only): install memacct-nvml (pip install "
                "'memacct-mindspore[gpu]') so memacct reads it through NVML"
            ) from None
        session = self._nvml if self._nvml is not None else default_session()
        if self._nvml_handle is None:
            self._nvml_handle = cuda_device_handle(
                session, self.device_id, visible=os.environ.get("CUDA_VISIBLE_DEVICES")
            )
        info = session.memory_info(self._nvml_handle)
        return info.free, info.total

    def memory_stats(self, device: int) -> Mapping[str, int]:
        self._check(device)
        return map_memory_stats(self.ms.runtime.memory_stats())

    def configured_budget(self) -> int | None:
        """The pool budget set for this process, bytes; ``None`` when MindSpore's default applies.

        The constructor's ``max_device_memory`` if given, else
        ``mindspore.get_context("max_device_memory")`` (GB, read as GiB) when it
        is below MindSpore's unset value of 1024.
        """
        if self.max_device_memory is not None:
            return self.max_device_memory
        try:
            value = self.ms.get_context("max_device_memory")
        except (ValueError, KeyError, AttributeError, TypeError):
            return None  # a MindSpore without the context key: nothing set through it
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if not 0 < value < UNSET_MAX_DEVICE_MEMORY_GB:
            return None
        return int(value * GiB)

    def allocator_limit(self, device: int) -> int | None:
        """The memory pool's budget: the most bytes it reserves, all its pools together.

        ``max_device_memory`` when set (:meth:`configured_budget`) and not above
        the device's total (MindSpore treats a larger one as unset); else
        MindSpore's default, :func:`default_pool_budget` of the free memory the
        pool saw when it started, estimated as the free memory now plus what
        the pool holds now (memory taken outside the pool since then makes the
        estimate lower, never higher, than the real budget). See
        ``docs/backends.md``, "Allocator limit".
        """
        self._check(device)
        free, total = self.mem_get_info(device)
        configured = self.configured_budget()
        if configured is not None and configured <= total:
            return configured
        reserved = map_memory_stats(self.ms.runtime.memory_stats())[KEY_MAP[
            "total_reserved_memory"]]
        return default_pool_budget(free + reserved) or None

    def reset_peak_memory_stats(self, device: int) -> None:
        self._check(device)
        self.ms.runtime.reset_peak_memory_stats()

    def empty_cache(self) -> None:
        self.ms.runtime.empty_cache()

    def synchronize(self, device: int) -> None:
        self._check(device)
        # The CPU target has no device stream; MindSpore logs an error if asked to wait on it.
        if self.device_target != "CPU":
            self.ms.runtime.synchronize()
