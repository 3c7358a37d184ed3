"""Reading a simulated allocator's statistics, for the allocator tests (torch's and MindSpore's)."""

from __future__ import annotations

from memacct.sim.allocator import CachingAllocator


def stat(alloc: CachingAllocator, key: str) -> int:
    """One entry of ``alloc.memory_stats()``."""
    return alloc.memory_stats()[key]


def assert_consistent(alloc: CachingAllocator) -> None:
    """Incremental statistics equal a recount from the blocks."""
    stats = alloc.memory_stats()
    for key, value in alloc._recount_stats().items():
        assert stats[key] == value, key
