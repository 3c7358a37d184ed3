"""The simulator's errors, the out-of-memory message, and the check of a malloc size."""

from __future__ import annotations

import operator

from memacct.errors import InvalidInputError, MemacctError
from memacct.units import format_size

__all__ = [
    "InvalidPointerError",
    "InvalidTypeError",
    "SimOutOfMemory",
    "check_size",
    "out_of_memory_message",
]


class SimOutOfMemory(MemacctError, RuntimeError):
    """The simulated device has not enough free memory for a request.

    Raised by an allocator after its own release-and-retry failed (like
    ``torch.cuda.OutOfMemoryError``), and by :class:`memacct.sim.SimDevice`
    for memory taken outside the allocator.

    Attributes:
        requested: bytes asked for by the caller.
        attempted: bytes the allocator tried to get from the device (a whole
            segment or pool block; equals ``requested`` outside the allocator).
        total: device capacity in bytes.
        free: device bytes free when the request failed.
        reserved: bytes the allocator held from the device.
        allocated: bytes of the allocator's blocks in use.
    """

    def __init__(
        self,
        message: str,
        *,
        requested: int = 0,
        attempted: int = 0,
        total: int = 0,
        free: int = 0,
        reserved: int = 0,
        allocated: int = 0,
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.attempted = attempted
        self.total = total
        self.free = free
        self.reserved = reserved
        self.allocated = allocated

    def __reduce__(self) -> tuple[type[SimOutOfMemory], tuple[str], dict[str, int]]:
        # Keeps the numbers across pickling (multiprocessing, pytest-xdist).
        return (type(self), (str(self.args[0]),), dict(self.__dict__))


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument of the wrong type (also a :class:`TypeError`, as torch raises)."""


class InvalidPointerError(InvalidInputError):
    """``free`` of a pointer or handle that is not live (never allocated, or freed twice)."""


def check_size(size: object) -> int:
    """Validate a malloc size that is not a plain positive int."""
    if isinstance(size, bool):
        raise InvalidInputError(f"malloc size must be an int number of bytes, got {size!r}")
    try:
        n = operator.index(size)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInputError(
            f"malloc size must be an int number of bytes, got {size!r} ({type(size).__name__})"
        ) from None
    if n < 0:
        raise InvalidInputError(f"malloc size must be >= 0 bytes, got {n}")
    return n


def out_of_memory_message(
    preset: str, size: int, attempted: int, *, total: int, free: int, allocated: int,
    reserved: int, hint: str,
) -> str:
    """What an allocator of ``preset`` says when ``attempted`` bytes from the device for a
    request of ``size`` bytes failed (torch's wording), ending with the preset's ``hint``."""
    return (
        f"Simulated device out of memory ({preset} allocator). Tried to allocate "
        f"{format_size(attempted)}. GPU 0 has a total capacity of {format_size(total)} "
        f"of which {format_size(free)} is free (a request of {size} bytes, "
        f"{attempted} bytes from the device). Of the memory this allocator holds, "
        f"{format_size(allocated)} is allocated and {format_size(reserved - allocated)} "
        f"is reserved but unallocated. Free memory (fewer live tensors, a smaller batch, "
        f"a lower gpu_memory_utilization or KV-cache size) and retry. {hint}"
    )
