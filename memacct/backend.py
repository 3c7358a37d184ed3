"""The backend protocol: primitive readings of one kind of device.

A backend reads; the core computes. Every derived number (``used``,
``non_allocator``, peaks, the profile) is computed once, in
:func:`memacct.snapshot` and :mod:`memacct.profiling`, from the readings below.

Device quirks are declared as data in :class:`BackendQuirks` on the backend
instead of branches in the core.

``torch.cuda`` and ``torch_npu``'s ``torch.npu`` share one API shape, and so
does the simulated device's ``.api``; :class:`TorchLikeBackend` adapts any of
them, so a vendor plugin is a few dozen lines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

from memacct.errors import BackendError, InvalidInputError
from memacct.models import TruthSource

__all__ = [
    "REQUIRED_METHODS",
    "Availability",
    "BackendQuirks",
    "DeviceBackend",
    "TorchLikeBackend",
    "allocator_settings",
    "get_quirks",
    "is_out_of_memory",
    "validate_backend",
    "with_allocator_settings",
]


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here and, if not, why (with the fix)."""

    available: bool
    reason: str

    def __bool__(self) -> bool:
        return self.available


@dataclass(frozen=True)
class BackendQuirks:
    """What is special about a device, declared by its backend.

    Attributes:
        empty_cache_releases_runtime_memory: ``empty_cache()`` may also free
            runtime (non-allocator) memory (Ascend), so the profiler reads
            non-allocator memory *before* emptying the cache.
        unified_memory: the device shares host memory (Jetson, GH200): the
            device-wide ``free`` includes reclaimable page cache.
        has_allocator_stats: the backend sees a caching allocator. NVML alone
            does not: its snapshots carry zeros for allocator fields and it
            cannot profile.
        allocator_settings_env: environment variables whose values configure
            the allocator and are recorded in profiles and plans.
        growth_granularity_bytes: the smallest amount by which the allocator
            grows its reservation for a large request (a segment rounding or
            a pool unit); used by the ``auto`` truth source and by the planner,
            which leaves room for each layer's KV-cache tensor to be rounded.
        growth_rounding: how a large tensor is rounded to that granularity:
            ``"multiple"`` (its own segment, rounded up to a multiple: torch's
            and torch_npu's caching allocators), ``"packed"`` (tensors packed
            one after another in one growing segment, mapped in pages of the
            granularity: expandable segments), ``"doubling"`` (a pool block of
            the granularity doubled until it fits, capped at the free memory:
            MindSpore's memory pool).
    """

    empty_cache_releases_runtime_memory: bool = False
    unified_memory: bool = False
    has_allocator_stats: bool = True
    allocator_settings_env: tuple[str, ...] = ()
    growth_granularity_bytes: int = 2 * 1024 * 1024
    growth_rounding: Literal["multiple", "packed", "doubling"] = "multiple"


@runtime_checkable
class DeviceBackend(Protocol):
    """Primitive readings of one kind of device (contract).

    Devices are numbered ``0 .. device_count() - 1``. Optional members, read
    with ``getattr``: ``quirks`` (:class:`BackendQuirks`),
    ``process_memory(device) -> int | None`` (this process's device memory,
    for per-process attribution of the rest to other processes), and
    ``consistent_reading(device)``, a context manager during which the device's
    readings cannot change (the simulated device's lock; a snapshot holds it),
    and the out-of-memory declaration: ``out_of_memory_errors`` (a tuple of
    the exception types the framework raises when the device is full) and
    ``is_out_of_memory(exc) -> bool`` for a framework that raises a generic
    type (MindSpore's ``RuntimeError``); see :func:`is_out_of_memory`.
    """

    name: str
    default_truth_source: TruthSource

    def device_count(self) -> int:
        """Number of devices this backend sees."""
        ...

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """``(free, total)`` bytes of the device, as the driver reports them."""
        ...

    def memory_stats(self, device: int) -> Mapping[str, int]:
        """Allocator statistics with torch's key names (``allocated_bytes.all.peak``, ...)."""
        ...

    def reset_peak_memory_stats(self, device: int) -> None:
        """Set every peak statistic to its current value."""
        ...

    def empty_cache(self) -> None:
        """Return wholly free cached blocks to the device."""
        ...

    def synchronize(self, device: int) -> None:
        """Wait for all queued work on the device."""
        ...


REQUIRED_METHODS = (
    "device_count",
    "mem_get_info",
    "memory_stats",
    "reset_peak_memory_stats",
    "empty_cache",
    "synchronize",
)


def validate_backend(obj: object, origin: str = "backend") -> DeviceBackend:
    """Return ``obj`` if it implements :class:`DeviceBackend`, else raise :class:`BackendError`.

    ``origin`` names where the object came from (an entry point) for the message.
    """
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(obj, m, None))]
    if not isinstance(getattr(obj, "name", None), str):
        missing.append("name (str)")
    truth = getattr(obj, "default_truth_source", None)
    try:
        if truth is None:
            raise ValueError
        TruthSource.parse(truth)
    except (ValueError, InvalidInputError):
        missing.append("default_truth_source (TruthSource)")
    if missing:
        raise BackendError(
            f"{origin} gave {type(obj).__name__!s}, which is not a memacct backend: "
            f"missing {', '.join(missing)}. Implement memacct.DeviceBackend "
            "(see backends/_template)"
        )
    return obj  # type: ignore[return-value]


# torch's expandable segments map large requests in pages of this size, packed in one segment.
EXPANDABLE_PAGE_BYTES = 20 * 1024 * 1024


def with_allocator_settings(quirks: BackendQuirks) -> BackendQuirks:
    """``quirks`` adjusted for the allocator settings in effect now.

    torch's ``expandable_segments:True`` (in any of the declared variables)
    packs large tensors into one growing segment mapped in 20 MiB pages
    instead of rounding each to 2 MiB in a segment of its own.
    """
    for var in quirks.allocator_settings_env:
        options = os.environ.get(var, "").replace(" ", "").lower().split(",")
        if "expandable_segments:true" in options:
            return replace(
                quirks, growth_rounding="packed", growth_granularity_bytes=EXPANDABLE_PAGE_BYTES
            )
    return quirks


def get_quirks(backend: object) -> BackendQuirks:
    """The backend's declared quirks, or the defaults when it declares none."""
    quirks = getattr(backend, "quirks", None)
    return quirks if isinstance(quirks, BackendQuirks) else BackendQuirks()


def is_out_of_memory(backend: object, exc: BaseException) -> bool:
    """Whether ``exc`` means the device ran out of memory, as ``backend`` declares it.

    The core never matches class names or messages: a backend's
    ``is_out_of_memory(exc)`` decides where it has one, else membership in its
    ``out_of_memory_errors``; a backend that declares neither has no
    exception that means out-of-memory.
    """
    check = getattr(backend, "is_out_of_memory", None)
    if callable(check):
        return bool(check(exc))
    errors = getattr(backend, "out_of_memory_errors", ())
    return isinstance(errors, tuple) and bool(errors) and isinstance(exc, errors)


def allocator_settings(backend: object) -> dict[str, str]:
    """The allocator settings in effect: the backend's declared variables that are set."""
    return {
        var: os.environ[var]
        for var in get_quirks(backend).allocator_settings_env
        if var in os.environ
    }


class TorchLikeBackend:
    """A backend over any ``torch.cuda``-shaped memory module.

    The module needs ``device_count()``, ``mem_get_info(device)``,
    ``memory_stats(device)``, ``reset_peak_memory_stats(device)``,
    ``empty_cache()`` and ``synchronize(device)``, as ``torch.cuda``,
    ``torch.npu`` and :attr:`memacct.sim.SimDevice.api` have. Vendor plugins
    subclass it and set ``name``, ``default_truth_source`` and ``quirks``.

    Args:
        module: the memory module.
        name: backend name (``cuda``, ``npu``, ``sim``); defaults to the class's.
        default_truth_source: the truth source this device needs by default.
        quirks: the device's quirks.
    """

    name: str = "torch-like"
    default_truth_source: TruthSource = TruthSource.ALLOCATED_PEAK
    quirks: BackendQuirks = BackendQuirks()
    out_of_memory_errors: tuple[type[BaseException], ...] = ()
    """Exception types that mean the device is full (e.g. ``torch.OutOfMemoryError``)."""

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the device ran out of memory (default: its type is declared)."""
        return bool(self.out_of_memory_errors) and isinstance(exc, self.out_of_memory_errors)

    def __init__(
        self,
        module: Any,
        name: str | None = None,
        default_truth_source: TruthSource | str | None = None,
        quirks: BackendQuirks | None = None,
    ) -> None:
        self.module = module
        if name is not None:
            self.name = name
        if default_truth_source is not None:
            self.default_truth_source = TruthSource.parse(default_truth_source)
        if quirks is not None:
            self.quirks = quirks

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def _check(self, device: int) -> int:
        count = self.device_count()
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
            raise InvalidInputError(
                f"device {device!r} is out of range for backend {self.name!r}: "
                f"it sees {count} device(s), numbered 0..{count - 1}"
            )
        return device

    def device_count(self) -> int:
        return int(self.module.device_count())

    def mem_get_info(self, device: int) -> tuple[int, int]:
        free, total = self.module.mem_get_info(self._check(device))
        return int(free), int(total)

    def memory_stats(self, device: int) -> Mapping[str, int]:
        stats = self.module.memory_stats(self._check(device))
        return {str(k): int(v) for k, v in stats.items() if isinstance(v, (int, float))}

    def reset_peak_memory_stats(self, device: int) -> None:
        self.module.reset_peak_memory_stats(self._check(device))

    def empty_cache(self) -> None:
        self.module.empty_cache()

    def synchronize(self, device: int) -> None:
        self.module.synchronize(self._check(device))
