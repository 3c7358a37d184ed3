"""Allocation traces: the format, the builder, a replay on an allocator and the peak.

A trace is a flat ``list[int]``: an op ``n >= 0`` allocates ``n`` bytes into
the next slot (slots are numbered in allocation order), an op ``n < 0`` frees
slot ``~n``. :class:`TraceBuilder` writes one, :func:`replay` runs one on an
allocator (a simulated device or a bare allocator), :func:`trace_peak` gives
its largest live byte count without any allocator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = ["Allocator", "TraceBuilder", "replay", "run_trace", "trace_peak"]


class Allocator(Protocol):
    """What :func:`replay` needs: a caching allocator's ``malloc`` and ``free``."""

    def malloc(self, size: int, *, persistent: bool = False) -> int:
        """Allocate ``size`` bytes; return a pointer."""
        ...

    def free(self, ptr: int) -> None:
        """Free a pointer ``malloc`` returned."""
        ...


def run_trace(
    malloc: Callable[[int], int], free: Callable[[int], None], trace: Sequence[int]
) -> None:
    """Run ``trace`` through ``malloc`` and ``free`` (the one trace loop: :func:`replay` and the
    simulator's allocator model, :class:`memacct.backend.ModelAllocator`, both run it).

    Raises whatever they raise; the allocations made before the failure stay live, as they
    would in a process that crashed.
    """
    ptrs: list[int] = []
    push = ptrs.append
    for op in trace:
        if op >= 0:
            push(malloc(op))
        else:
            free(ptrs[~op])


def replay(allocator: Allocator, trace: Sequence[int]) -> None:
    """Run a step trace on ``allocator`` (a :class:`~memacct.sim.SimDevice` or a bare allocator).

    Raises whatever the allocator raises (``SimOutOfMemory`` when the device
    is full); the allocations made before the failure are left live, as they
    would be in a process that crashed.
    """
    run_trace(allocator.malloc, allocator.free, trace)


class TraceBuilder:
    """Builds a step trace: :meth:`alloc` returns a slot, :meth:`free` frees it."""

    __slots__ = ("live", "ops", "slots")

    def __init__(self) -> None:
        self.ops: list[int] = []
        self.slots = 0
        self.live: set[int] = set()

    def alloc(self, nbytes: int) -> int:
        slot = self.slots
        self.slots += 1
        self.ops.append(max(1, int(nbytes)))
        self.live.add(slot)
        return slot

    def free(self, *slots: int) -> None:
        for slot in slots:
            self.live.remove(slot)
            self.ops.append(~slot)


def trace_peak(trace: Sequence[int]) -> int:
    """The largest live byte count of an allocation trace (allocator-free)."""
    sizes: list[int] = []
    live = peak = 0
    for op in trace:
        if op >= 0:
            sizes.append(op)
            live += op
            peak = max(peak, live)
        else:
            live -= sizes[~op]
    return peak
