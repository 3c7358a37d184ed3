"""Taking a snapshot: every derived field of :class:`MemorySnapshot` is computed here."""

from __future__ import annotations

import time
from collections.abc import Mapping

from memacct.backend import (
    BaseBackend,
    DeviceBackend,
    as_base_backend,
    validate_backend,
)
from memacct.backend_calls import backend_errors
from memacct.errors import BackendError, InvalidInputError
from memacct.models import MAX_BYTES, MemorySnapshot

__all__ = ["read_stat", "require_backend", "snapshot"]

# Torch's key names, which every backend speaks (MindSpore's are mapped onto them).
ALLOCATED = "allocated_bytes.all.current"
ALLOCATED_PEAK = "allocated_bytes.all.peak"
RESERVED = "reserved_bytes.all.current"
RESERVED_PEAK = "reserved_bytes.all.peak"
INACTIVE_SPLIT = "inactive_split_bytes.all.current"
INACTIVE_SPLIT_PEAK = "inactive_split_bytes.all.peak"


def read_stat(stats: Mapping[str, int], key: str) -> int:
    """``stats[key]`` as an int, 0 where the allocator does not report the key."""
    return int(stats.get(key, 0))


# Allocator counters that identify its state: the current values memacct reads and the
# cumulative ones, which only grow, so a change that was undone between two readings shows.
_STATE_KEYS = (
    ALLOCATED,
    ALLOCATED_PEAK,
    RESERVED,
    RESERVED_PEAK,
    "allocated_bytes.all.allocated",
    "reserved_bytes.all.allocated",
    "reserved_bytes.all.freed",
)
READ_ATTEMPTS = 8
"""Reading rounds :func:`snapshot` takes at most while the device keeps changing."""

_Reading = tuple[Mapping[str, int], int, int, "int | None"]


def _read_consistently(backend: BaseBackend, device: int, allocator_stats: bool) -> _Reading:
    """Read stats, ``(free, total)`` and this process's memory as one state of the device.

    The three readings are separate calls, so a thread that allocates (or another
    process) between them would make a snapshot whose parts disagree. A backend
    that can stop its device from changing offers ``consistent_reading(device)``,
    a context manager held around the readings (the simulated device's lock).
    Otherwise rounds are read until two in a row agree; the last round is used
    even if none did (and checked like any other).
    """
    with backend.consistent_reading(device):
        reading = _read_rounds(backend, device, allocator_stats)
    return reading


def _read_rounds(backend: BaseBackend, device: int, allocator_stats: bool) -> _Reading:
    previous: tuple[object, ...] | None = None
    for _ in range(READ_ATTEMPTS):
        stats = backend.memory_stats(device) if allocator_stats else {}
        free, total = backend.mem_get_info(device)
        own = backend.process_memory(device)
        state = (tuple(stats.get(k) for k in _STATE_KEYS), free, total, own)
        if state == previous:
            break
        previous = state
    return stats, free, total, own


def require_backend(obj: object, caller: str) -> DeviceBackend:
    """``obj`` if it is a backend; a name where a backend belongs says how to get one."""
    if isinstance(obj, str):
        raise InvalidInputError(
            f"{caller}() takes a backend, got the name {obj!r}: pass memacct.get_backend({obj!r})"
        )
    return validate_backend(obj, origin=f"the backend given to {caller}()")


def _as_bytes(where: str, what: str, value: object) -> int:
    """A reading as int bytes; anything else is the backend's fault, named with the value."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BackendError(
            f"{where} reported {what} = {value!r}: not a non-negative number of bytes "
            "(a broken backend or driver)"
        )
    return value


def snapshot(backend: DeviceBackend, device: int = 0) -> MemorySnapshot:
    """Read one device's memory and split it into the three kinds.

    Args:
        backend: the backend to read through (see :func:`memacct.get_backend`).
        device: device index, ``0 .. backend.device_count() - 1``.

    Returns:
        A consistent :class:`MemorySnapshot`: ``used = total - free`` and
        ``non_allocator = used - reserved - other_processes``. Where the backend
        reports this process's own device memory (``process_memory``), the
        rest of ``used`` is attributed to other processes; otherwise
        ``other_processes`` is ``None`` and ``non_allocator`` includes them.

    Raises:
        InvalidInputError: ``device`` is not an index the backend has.
        BackendError: the readings contradict each other or the backend failed.
    """
    backend = as_base_backend(require_backend(backend, "snapshot"))
    quirks = backend.quirks
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise InvalidInputError(
            f"device must be a device index, an int from 0, got {device!r} "
            f"(backend {backend.name!r})"
        )
    with backend_errors(backend, f"failed to read device {device}"):
        count = backend.device_count()
        if device >= count:
            seen = f"{count} device(s), numbered 0..{count - 1}" if count > 0 else "no device"
            raise InvalidInputError(
                f"device {device} is out of range for backend {backend.name!r}: it sees "
                f"{seen} (on a real machine CUDA_VISIBLE_DEVICES or ASCEND_RT_VISIBLE_DEVICES "
                "decides which devices a process sees)"
            )
        backend.synchronize(device)
        stats, free, total, own = _read_consistently(backend, device, quirks.has_allocator_stats)
    where = f"backend {backend.name!r} on device {device}"
    free = _as_bytes(where, "free memory (mem_get_info)", free)
    total = _as_bytes(where, "total memory (mem_get_info)", total)
    allocated = _as_bytes(where, ALLOCATED, stats.get(ALLOCATED, 0))
    reserved = _as_bytes(where, RESERVED, stats.get(RESERVED, 0))
    allocated_peak = _as_bytes(where, ALLOCATED_PEAK, stats.get(ALLOCATED_PEAK, 0))
    reserved_peak = _as_bytes(where, RESERVED_PEAK, stats.get(RESERVED_PEAK, 0))
    used = total - free
    if total <= 0 or free < 0 or free > total or total > MAX_BYTES:
        raise BackendError(
            f"backend {backend.name!r} reported free={free} and total={total} bytes for "
            f"device {device}: these cannot be right (check the driver)"
        )
    if allocated > reserved:
        raise BackendError(
            f"{where} reports {allocated} bytes allocated but only {reserved} reserved: "
            "an allocator never hands out more than it holds (is the backend mapping the "
            "right statistics?)"
        )
    if reserved > used:
        raise BackendError(
            f"backend {backend.name!r} reports {reserved} bytes reserved by the allocator but "
            f"only {used} bytes used on device {device}; the readings are inconsistent "
            "(is another thread allocating while measuring, or is this a unified-memory "
            "device that needs its quirk declared?)"
        )
    other: int | None = None
    if own is not None:
        # Attribution can only move memory out of non_allocator, never below zero: a
        # process reading that lags the device reading must not make numbers negative.
        own = _as_bytes(where, "this process's memory (process_memory)", own)
        other = min(max(0, used - own), used - reserved)
    return MemorySnapshot(
        backend=backend.name,
        device=device,
        timestamp=time.time(),
        total=total,
        free=free,
        used=used,
        allocated=allocated,
        allocated_peak=max(allocated_peak, allocated),
        reserved=reserved,
        reserved_peak=max(reserved_peak, reserved),
        non_allocator=used - reserved - (other or 0),
        other_processes=other,
    )
