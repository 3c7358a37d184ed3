"""``torch.cuda``'s memory functions over one simulated device (:class:`SimMemoryAPI`).

The core's ``TorchLikeBackend`` reads a device through a module shaped like
``torch.cuda``; ``SimDevice.api`` is this one, so a simulated device is read exactly
as a real GPU is.
"""

from __future__ import annotations

import operator
import threading
from typing import Protocol

from memacct.errors import InvalidInputError
from memacct.sim._core import CachingAllocator
from memacct.sim._errors import SimOutOfMemory

__all__ = ["MemoryDevice", "SimMemoryAPI"]


class MemoryDevice(Protocol):
    """What :class:`SimMemoryAPI` reads and drives (:class:`memacct.sim.SimDevice`)."""

    @property
    def name(self) -> str: ...
    @property
    def lock(self) -> threading.RLock: ...
    @property
    def allocator(self) -> CachingAllocator: ...
    def mem_get_info(self) -> tuple[int, int]: ...
    def memory_stats(self) -> dict[str, int]: ...
    def reset_peak_memory_stats(self) -> None: ...
    def reset_accumulated_memory_stats(self) -> None: ...
    def set_memory_fraction(self, fraction: float) -> None: ...
    def empty_cache(self) -> None: ...


class SimMemoryAPI:
    """A ``torch.cuda``-shaped memory module over one :class:`SimDevice`.

    It has one device, index ``0``; every ``device`` argument must be ``0``
    or ``None``. Readings are taken under the device's lock.
    """

    OutOfMemoryError = SimOutOfMemory

    def __init__(self, device: MemoryDevice) -> None:
        self._dev = device

    def _check(self, device: object) -> None:
        if device is None:
            return
        if not isinstance(device, bool):
            try:
                if operator.index(device) == 0:  # type: ignore[arg-type]
                    return
            except TypeError:
                pass
        raise InvalidInputError(
            f"device {device!r} does not exist: the simulated device API has one device, "
            "index 0 (or None for the current device)"
        )

    def is_available(self) -> bool:
        """Always ``True``."""
        return True

    def device_count(self) -> int:
        """Always ``1``."""
        return 1

    def current_device(self) -> int:
        """Always ``0``."""
        return 0

    def get_device_name(self, device: int | None = None) -> str:
        """The simulated device's name."""
        self._check(device)
        return self._dev.name

    def mem_get_info(self, device: int | None = None) -> tuple[int, int]:
        """``(free, total)`` bytes of the device, read together."""
        self._check(device)
        return self._dev.mem_get_info()

    def memory_stats(self, device: int | None = None) -> dict[str, int]:
        """The allocator's statistics with torch's key names."""
        self._check(device)
        return self._dev.memory_stats()

    def _stat(self, device: int | None, key: str) -> int:
        self._check(device)
        with self._dev.lock:
            return self._dev.allocator.memory_stats()[key]

    def memory_allocated(self, device: int | None = None) -> int:
        """``allocated_bytes.all.current``."""
        return self._stat(device, "allocated_bytes.all.current")

    def max_memory_allocated(self, device: int | None = None) -> int:
        """``allocated_bytes.all.peak``."""
        return self._stat(device, "allocated_bytes.all.peak")

    def memory_reserved(self, device: int | None = None) -> int:
        """``reserved_bytes.all.current``."""
        return self._stat(device, "reserved_bytes.all.current")

    def max_memory_reserved(self, device: int | None = None) -> int:
        """``reserved_bytes.all.peak``."""
        return self._stat(device, "reserved_bytes.all.peak")

    def reset_peak_memory_stats(self, device: int | None = None) -> None:
        """Set every peak to its current value."""
        self._check(device)
        self._dev.reset_peak_memory_stats()

    def reset_accumulated_memory_stats(self, device: int | None = None) -> None:
        """Zero the ``allocated``/``freed`` metrics and the ``num_*`` counters."""
        self._check(device)
        self._dev.reset_accumulated_memory_stats()

    def set_per_process_memory_fraction(self, fraction: float, device: int | None = None) -> None:
        """Cap the allocator at ``fraction`` of the device (a float in [0, 1])."""
        self._check(device)
        self._dev.set_memory_fraction(fraction)

    def get_per_process_memory_fraction(self, device: int | None = None) -> float:
        """The cap set by :meth:`set_per_process_memory_fraction` (1.0 when unset)."""
        self._check(device)
        with self._dev.lock:
            return self._dev.allocator.memory_fraction

    def empty_cache(self) -> None:
        """Release the allocator's releasable cached memory."""
        self._dev.empty_cache()

    def synchronize(self, device: int | None = None) -> None:
        """Nothing to wait for: the simulated device runs no queued work."""
        self._check(device)
