"""The backend protocol: primitive readings of one kind of device.

A backend reads; the core computes. Every derived number (``used``,
``non_allocator``, peaks, the profile) is computed once, in
:func:`memacct.snapshot` and :mod:`memacct.profiling`, from the readings below.

Device quirks are declared as data in :class:`BackendQuirks` on the backend
instead of branches in the core.

``torch.cuda`` and ``torch_npu``'s ``torch.npu`` share one API shape, and so
does the simulated device's ``.api``; :class:`TorchLikeBackend` adapts any of
them, so a vendor plugin is a few dozen lines; it lives in :mod:`memacct.torchlike`,
which builds on this module (plugins import it from :mod:`memacct`).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from memacct.errors import BackendError, InvalidInputError
from memacct.models import TruthSource

__all__ = [
    "LARGE_BUFFER_BYTES",
    "OPTIONAL_MEMBERS",
    "REQUIRED_METHODS",
    "AllocatorModel",
    "Availability",
    "BackendQuirks",
    "BaseBackend",
    "DeviceBackend",
    "ModelAllocator",
    "allocator_settings",
    "as_base_backend",
    "backend_code",
    "factory_availability",
    "factory_priority",
    "get_quirks",
    "is_out_of_memory",
    "validate_backend",
]


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here and, if not, why (with the fix)."""

    available: bool
    reason: str

    def __bool__(self) -> bool:
        return self.available


LARGE_BUFFER_BYTES = 20 * 1024 * 1024
"""torch's ``kLargeBuffer`` (c10/cuda/CUDACachingAllocator.cpp; torch_npu's allocator has
the same), the one definition memacct has of it: the segment that requests of 1-10 MiB
share, and the page of an expandable segment's large pool (``docs/simulator.md``)."""


@runtime_checkable
class ModelAllocator(Protocol):
    """One fresh instance of an :class:`AllocatorModel`, which ``auto``'s replay drives.

    Traces are lists of ops as :class:`memacct.replay.ServingTrace` gives them
    (``n >= 0`` allocates ``n`` bytes into the next slot, ``n < 0`` frees slot ``~n``).
    """

    @property
    def reserved(self) -> int:
        """Bytes the allocator holds from its device memory now."""
        ...

    def run(self, trace: Sequence[int], persistent: bool = False) -> bool:
        """Replay ``trace`` (``persistent``: tensors that live for the whole run, the weights).

        Returns ``False`` where the model ran out of memory; the instance is then spent.
        """
        ...

    def empty_cache(self) -> None:
        """Return wholly free cached blocks to the device memory."""
        ...


@runtime_checkable
class AllocatorModel(Protocol):
    """A model of a backend's allocator as configured now (``BaseBackend.allocator_model``).

    :mod:`memacct.sim` implements it (``memacct.sim.allocator.preset_model``); the
    replay of :mod:`memacct.replay` bisects the capacity over fresh instances.
    """

    name: str

    def instance(self, capacity: int) -> ModelAllocator:
        """A fresh allocator over ``capacity`` bytes of device memory, holding nothing.

        A pool with a budget of its own below the device's memory (MindSpore's) gets the
        whole capacity as its budget: that budget is the plan's allocator limit.
        """
        ...


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

    Devices are numbered ``0 .. device_count() - 1``. These are the members
    every backend must have; the optional ones (``priority``,
    ``availability()``, ``quirks``, ``process_memory``, ``consistent_reading``,
    ``device_identity``, ``allocator_limit``, and the out-of-memory declaration
    ``out_of_memory_errors`` / ``is_out_of_memory(exc)``, see
    :func:`is_out_of_memory`) are declared with their defaults on
    :class:`BaseBackend`, which plugins subclass.
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


class BaseBackend:
    """The class every backend subclasses: each optional member, declared with its default.

    The core reads a backend only through these names, never by probing it, so
    this class *is* the plugin contract: a plugin sets the class attributes it
    needs, implements the six required methods of :class:`DeviceBackend`, and
    overrides the optional methods its device supports.

    Class attributes:
        name: the backend's name. It must equal the name of its entry point in
            the ``memacct.backends`` group (the registry refuses a mismatch).
        default_truth_source: the truth source the device needs by default.
        priority: which available backend :func:`memacct.get_backend` picks
            when given no name: the highest above 0 wins; 0 is never picked
            automatically (the simulator, NVML).
        quirks: what is special about the device (:class:`BackendQuirks`).

    Example, a backend over a ``torch.cuda``-shaped module (see
    ``backends/_template`` for a whole plugin)::

        class MyBackend(memacct.TorchLikeBackend):   # a BaseBackend
            name = "mydev"
            priority = 50

            @classmethod
            def availability(cls) -> memacct.Availability:
                return memacct.Availability(True, "mydev driver found")
    """

    out_of_memory_errors: tuple[type[BaseException], ...] = ()
    """Exception types that mean the device is full (e.g. ``torch.OutOfMemoryError``)."""

    @property
    def allocator_model(self) -> AllocatorModel | None:
        """The model of this device's allocator as it is configured now (``None``: none).

        Where a profile is given the work's allocation traces
        (``memory_profiling(serving_trace=...)``), ``auto`` replays serving-step shapes
        through it (:mod:`memacct.replay`). Asked only then, so a backend that names a
        :mod:`memacct.sim` preset (``memacct.sim.allocator.preset_model``) imports it here.
        """
        return None

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the device ran out of memory (default: its type is declared)."""
        return bool(self.out_of_memory_errors) and isinstance(exc, self.out_of_memory_errors)

    name: str = "unnamed"
    default_truth_source: TruthSource = TruthSource.ALLOCATED_PEAK
    priority: ClassVar[int] = 0
    quirks: BackendQuirks = BackendQuirks()
    # (issue 12 adds the declaration of which exceptions mean out-of-memory here.)

    @classmethod
    def availability(cls) -> Availability:
        """Whether the backend can run here and why not; cheap, no device work.

        The registry calls it in a worker thread under a time limit
        (``memacct.registry.TIME_LIMIT_S``) whenever backends are listed: tell it
        without importing the framework (:mod:`memacct.plugin`), and check the
        framework in the constructor. Default: available.
        """
        return Availability(True, f"{cls.__name__} declares no availability check")

    def process_memory(self, device: int) -> int | None:
        """This process's device memory in bytes, for per-process attribution; default ``None``.

        ``None`` means the backend cannot tell: other processes' memory is then
        counted in ``non_allocator`` and ``other_processes`` is ``None``.
        """
        return None

    def consistent_reading(self, device: int) -> AbstractContextManager[object]:
        """A context manager during which the device's readings cannot change.

        :func:`memacct.snapshot` holds it around its readings. Default: none
        (the snapshot then reads until two rounds agree).
        """
        return nullcontext()

    def device_identity(self, device: int) -> Hashable:
        """What identifies the physical device, so that profiling sessions on it do not overlap.

        Default: ``(name, device)``; the simulator, whose instances are
        different devices, returns the instance's identity.
        """
        return (self.name, device)

    def allocator_limit(self, device: int) -> int | None:
        """The most bytes this process's allocator may reserve on ``device``; default ``None``.

        ``None`` means no cap beyond the device itself. A backend whose
        allocator refuses to grow past a budget of its own (MindSpore's pool
        budget, torch's per-process memory fraction) returns it, and the
        planner keeps everything the allocator holds within it (see
        ``docs/backends.md``, "Allocator limit"). Read once per profile, after
        the model is loaded; it must not fail where the setting cannot be read
        (return ``None``).
        """
        return None

    # The required readings (DeviceBackend): a subclass implements all six.
    def device_count(self) -> int:
        """Number of devices this backend sees."""
        raise NotImplementedError

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """``(free, total)`` bytes of the device, as the driver reports them."""
        raise NotImplementedError

    def memory_stats(self, device: int) -> Mapping[str, int]:
        """Allocator statistics with torch's key names."""
        raise NotImplementedError

    def reset_peak_memory_stats(self, device: int) -> None:
        """Set every peak statistic to its current value."""
        raise NotImplementedError

    def empty_cache(self) -> None:
        """Return wholly free cached blocks to the device."""
        raise NotImplementedError

    def synchronize(self, device: int) -> None:
        """Wait for all queued work on the device."""
        raise NotImplementedError


OPTIONAL_MEMBERS = (
    "priority",
    "availability",
    "quirks",
    "process_memory",
    "consistent_reading",
    "device_identity",
    "allocator_limit",
    "allocator_model",
)
"""The members :class:`BaseBackend` declares with a default."""


def _declared(obj: object, member: str) -> Any:
    # The one place the core looks a member up by name: an object that only follows the
    # DeviceBackend protocol (not a BaseBackend) gets BaseBackend's default for what it lacks.
    value = getattr(obj, member, None)
    return getattr(BaseBackend, member) if value is None else value


class _ProtocolBackend(BaseBackend):
    """A backend that follows only the :class:`DeviceBackend` protocol, seen as a BaseBackend."""

    def __init__(self, backend: DeviceBackend) -> None:
        self._backend = backend
        self.name = backend.name
        self.default_truth_source = backend.default_truth_source
        quirks = _declared(backend, "quirks")
        self.quirks = quirks if isinstance(quirks, BackendQuirks) else BackendQuirks()
        members = ("process_memory", "consistent_reading", "device_identity", "allocator_limit")
        for member in members:
            method = getattr(backend, member, None)
            if callable(method):
                setattr(self, member, method)
        model = getattr(backend, "allocator_model", None)
        self._model = model if isinstance(model, AllocatorModel) else None

    @property
    def allocator_model(self) -> AllocatorModel | None:
        return self._model

    def device_count(self) -> int:
        return self._backend.device_count()

    def mem_get_info(self, device: int) -> tuple[int, int]:
        return self._backend.mem_get_info(device)

    def memory_stats(self, device: int) -> Mapping[str, int]:
        return self._backend.memory_stats(device)

    def reset_peak_memory_stats(self, device: int) -> None:
        self._backend.reset_peak_memory_stats(device)

    def empty_cache(self) -> None:
        self._backend.empty_cache()

    def synchronize(self, device: int) -> None:
        self._backend.synchronize(device)


def as_base_backend(backend: DeviceBackend) -> BaseBackend:
    """``backend`` itself if it is a :class:`BaseBackend`, else a view of it with the defaults.

    The core calls the optional members on what this returns, so an object that
    implements only the :class:`DeviceBackend` protocol works unchanged.
    """
    if isinstance(backend, BaseBackend):
        return backend
    return _ProtocolBackend(backend)


def backend_code(backend: object) -> str:
    """Where a backend's code lives, for messages: ``memacct_cuda.CudaBackend``."""
    if isinstance(backend, _ProtocolBackend):
        backend = backend._backend
    return f"{type(backend).__module__}.{type(backend).__qualname__}"








def factory_availability(factory: object) -> Availability:
    """Call the factory's ``availability()`` (a :class:`BaseBackend` subclass's classmethod).

    A factory without one (a plain callable given to :func:`memacct.register_backend`)
    is available. The result is returned as given: the registry checks its type.
    """
    check = _declared(factory, "availability")
    if check == BaseBackend.availability:
        return Availability(True, "registered without an availability check")
    result: Availability = check()
    return result


def factory_priority(factory: object) -> int:
    """The factory's ``priority``; 0 (never chosen automatically) when it is not an int."""
    value = _declared(factory, "priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


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


def get_quirks(backend: object) -> BackendQuirks:
    """The backend's declared quirks, or the defaults when it declares none."""
    quirks = _declared(backend, "quirks")
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
