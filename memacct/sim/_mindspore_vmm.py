"""One MindSpore allocator under VMM (its virtual ranges of buffers), and the tests'
recount of the buffers of the ``mindspore`` preset (:mod:`memacct.sim._mindspore`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memacct.sim._blocks import FREE, IN_USE, KEY_SHIFT, UNMAPPED, Block, Segment, walk_blocks
from memacct.sim._freeset import FreeSet
from memacct.sim._mindspore_budget import VMM_PAGE

__all__ = ["VmmPool", "recount_vmm"]


class VmmPool:
    """One MindSpore allocator (persistent or common) under VMM: virtual ranges of buffers."""

    __slots__ = (
        "allocated",
        "allocation",
        "eager",
        "idle",
        "pages",
        "peak_allocated",
        "peak_allocation",
        "persistent",
        "requested",
        "segments",
        "stat_name",
    )

    def __init__(self, stat_name: str, persistent: bool) -> None:
        self.stat_name = stat_name
        self.persistent = persistent
        self.idle = FreeSet()
        """Keys of idle (mapped) buffers."""
        self.eager = FreeSet()
        """Keys of eager-free buffers (virtual space whose whole pages are unmapped)."""
        self.pages: set[int] = set()
        """Indexes (address // page) of this pool's mapped pages."""
        self.segments: dict[int, Segment] = {}
        self.allocation = self.allocated = self.requested = 0
        self.peak_allocation = self.peak_allocated = 0


def recount_vmm(
    pools: Sequence[VmmPool],
    vlive: Mapping[int, tuple[VmmPool, Block]],
    bufs: Mapping[int, tuple[VmmPool, Block]],
    *,
    cached_pages: int,
    held_pages: int,
) -> dict[str, int]:
    """Current values recomputed from the buffers of ``pools``, keyed like ``memory_stats``
    (all but ``reserved_bytes.all.current``); ``vlive`` and ``bufs`` index the buffers in
    use and the others by address, ``cached_pages`` and ``held_pages`` count the physical
    pages unmapped but kept, and all held.

    Raises:
        AssertionError: any inconsistency of the buffers, the indexes or the pages (named).
    """
    out: dict[str, int] = {}
    totals = {"allocation": 0, "allocated_bytes": 0, "requested_bytes": 0}
    seen_free = 0
    for pool in pools:
        counts = dict.fromkeys(totals, 0)
        mapped_needed: set[int] = set()
        for seg in pool.segments.values():
            for prev, b in walk_blocks(seg, "buffer", "range"):
                if b.state == IN_USE:
                    if vlive.get(b.addr, (None, None))[1] is not b:
                        raise AssertionError(f"buffer {b.addr:#x} in use but not live")
                    counts["allocation"] += 1
                    counts["allocated_bytes"] += b.size
                    counts["requested_bytes"] += b.requested
                else:
                    seen_free += 1
                    target = pool.idle if b.state == FREE else pool.eager
                    if ((b.size << KEY_SHIFT) | b.addr) not in target:
                        raise AssertionError(f"buffer {b.addr:#x} not indexed")
                    if prev is not None and prev.state == b.state:
                        raise AssertionError(f"neighbours not merged at {b.addr:#x}")
                if b.state != UNMAPPED:
                    mapped_needed.update(
                        range(b.addr // VMM_PAGE, (b.addr + b.size - 1) // VMM_PAGE + 1)
                    )
        if not mapped_needed <= pool.pages:
            raise AssertionError("a buffer in use or idle lies on an unmapped page")
        for name, value in counts.items():
            out[f"{name}.{pool.stat_name}.current"] = value
            totals[name] += value
        out[f"reserved_bytes.{pool.stat_name}.current"] = len(pool.pages) * VMM_PAGE
    if seen_free != len(bufs):
        raise AssertionError("buffer index out of step with the ranges")
    mapped = sum(len(pool.pages) for pool in pools)
    if mapped + cached_pages != held_pages:
        raise AssertionError("physical pages out of step")
    for name, value in totals.items():
        out[f"{name}.all.current"] = value
    return out
