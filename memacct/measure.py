"""Taking a snapshot: every derived field of :class:`MemorySnapshot` is computed here."""

from __future__ import annotations

import time
from collections.abc import Mapping

from memacct.backend import DeviceBackend, get_quirks
from memacct.errors import BackendError
from memacct.models import MemorySnapshot

__all__ = ["read_stat", "snapshot"]

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
        BackendError: the readings contradict each other or the backend failed.
    """
    quirks = get_quirks(backend)
    try:
        backend.synchronize(device)
        stats = backend.memory_stats(device) if quirks.has_allocator_stats else {}
        free, total = backend.mem_get_info(device)
        process_memory = getattr(backend, "process_memory", None)
        own = process_memory(device) if callable(process_memory) else None
    except BackendError:
        raise
    except Exception as exc:
        if getattr(exc, "__module__", "").startswith("memacct"):
            raise
        raise BackendError(
            f"backend {backend.name!r} failed to read device {device}: {type(exc).__name__}: {exc}"
        ) from exc
    allocated = read_stat(stats, ALLOCATED)
    reserved = read_stat(stats, RESERVED)
    used = total - free
    if total <= 0 or free < 0 or free > total:
        raise BackendError(
            f"backend {backend.name!r} reported free={free} and total={total} bytes for "
            f"device {device}: these cannot be right (check the driver)"
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
        other = min(max(0, used - int(own)), used - reserved)
    return MemorySnapshot(
        backend=backend.name,
        device=device,
        timestamp=time.time(),
        total=total,
        free=free,
        used=used,
        allocated=allocated,
        allocated_peak=max(read_stat(stats, ALLOCATED_PEAK), allocated),
        reserved=reserved,
        reserved_peak=max(read_stat(stats, RESERVED_PEAK), reserved),
        non_allocator=used - reserved - (other or 0),
        other_processes=other,
    )
