"""The physical memory an allocator maps its segments from (torch's ``cudaMalloc`` side)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from memacct.errors import InvalidInputError

__all__ = ["DeviceMemory", "SimpleDeviceMemory"]


@runtime_checkable
class DeviceMemory(Protocol):
    """The physical memory an allocator maps its segments from.

    :class:`memacct.sim.SimDevice` implements it for its allocator; an
    allocator never sees anything else of the device.
    """

    @property
    def total(self) -> int:
        """Capacity of the device in bytes."""
        ...

    @property
    def free(self) -> int:
        """Bytes nobody holds (the allocator, the process outside it, other processes)."""
        ...

    def map(self, nbytes: int) -> bool:
        """Take ``nbytes`` for the allocator; ``False`` (and nothing taken) if fewer are free."""
        ...

    def unmap(self, nbytes: int) -> None:
        """Give back ``nbytes`` the allocator took."""
        ...


class SimpleDeviceMemory:
    """A stand-alone :class:`DeviceMemory` of ``total`` bytes used by one allocator.

    For tests and benchmarks of an allocator without a :class:`memacct.sim.SimDevice`.
    """

    __slots__ = ("_total", "mapped")

    def __init__(self, total: int) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
            raise InvalidInputError(f"device memory total must be a positive int, got {total!r}")
        self._total = total
        self.mapped = 0

    @property
    def total(self) -> int:
        """Capacity in bytes."""
        return self._total

    @property
    def free(self) -> int:
        """Bytes not mapped."""
        return self._total - self.mapped

    def map(self, nbytes: int) -> bool:
        """Map ``nbytes`` if that many are free."""
        if nbytes > self._total - self.mapped:
            return False
        self.mapped += nbytes
        return True

    def unmap(self, nbytes: int) -> None:
        """Unmap ``nbytes``."""
        self.mapped -= nbytes
