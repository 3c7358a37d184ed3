"""PyTorch's caching allocator with expandable segments (preset ``torch-cuda-expandable``)."""

from __future__ import annotations

from typing import Any

from memacct.sim._blocks import (
    ADDR_MASK,
    FREE,
    IN_USE,
    KEY_SHIFT,
    LARGE_BUFFER,
    MIN_BLOCK_SIZE,
    SMALL_BUFFER,
    UNMAPPED,
    Block,
    Pool,
    Segment,
    link_after,
    merge_neighbours,
)
from memacct.sim._core import CachingAllocator
from memacct.sim._memory import DeviceMemory

__all__ = ["ExpandableSegmentsAllocator"]


class ExpandableSegmentsAllocator(CachingAllocator):
    """PyTorch's CUDA caching allocator with ``expandable_segments:True``, modelled.

    Each pool has one virtual segment (address space for 9/8 of the device,
    as torch reserves) that is backed by physical memory in pages: 2 MiB in
    the small pool, 20 MiB in the large pool. Blocks are free-mapped,
    allocated, or unmapped; ``reserved_bytes`` counts mapped pages only.

    - A request takes the best-fitting free mapped block (as torch-cuda),
      except that a block bordering unmapped space gives way to the next
      larger block whose own growth room is smaller (torch's tie rule for
      expandable blocks).
    - Otherwise the segment grows: starting from the lowest-addressed
      unmapped range (together with a free mapped block just below it) that
      has room, pages are mapped until the free block is large enough.
    - Any block splits when at least 512 bytes remain, in both pools.
    - Free blocks merge with free mapped neighbours; coalescing works across
      the whole segment, because it is one segment.
    - :meth:`empty_cache` (and the release before the one retry on a full
      device) unmaps every page that lies wholly inside a free block, so the
      memory reserved but unallocated is bounded by about one page per hole.

    As in torch, expandable segments are not counted in the ``segment``
    statistic and free blocks are not counted in ``inactive_split``.

    Args:
        device_memory: where pages are mapped from.
        **settings: the torch-cuda settings (``max_split_size_mb``, ...).
    """

    name = "torch-cuda-expandable"
    oom_hint = (
        "Expandable segments already bound fragmentation to about one page per hole; "
        "the memory is genuinely in use."
    )
    growth_granularity_bytes = LARGE_BUFFER
    _track_inactive_split = False
    _refit = True

    def __init__(self, device_memory: DeviceMemory, **settings: Any) -> None:
        super().__init__(device_memory, **settings)
        for pool, page in ((self._small, SMALL_BUFFER), (self._large, LARGE_BUFFER)):
            pool.page = page
            pool.split_min = MIN_BLOCK_SIZE
        self._unmapped_blocks: dict[int, Block] = {}

    def _garbage_collect(self) -> None:
        """Nothing: torch's garbage collection skips expandable-segment blocks."""

    def empty_cache(self) -> None:
        """Unmap every page that lies wholly inside a free block."""
        self._release_cached()

    # ------------------------------------------------------------ fitting

    @staticmethod
    def _room(block: Block) -> int:
        """The block's size plus the unmapped range right above it."""
        nxt = block.next
        if nxt is not None and nxt.state == UNMAPPED:
            return block.size + nxt.size
        return block.size

    def _refit_block(self, pool: Pool, block: Block) -> Block:
        nxt = block.next
        if nxt is None or nxt.state != UNMAPPED:
            return block
        best = block
        best_room = self._room(block)
        key = (block.size << KEY_SHIFT) | block.addr
        while True:
            key = pool.free.ceiling(key + 1)
            if key < 0:
                break
            candidate = self._free_blocks[key & ADDR_MASK]
            room = self._room(candidate)
            if room >= best_room:
                break
            best, best_room = candidate, room
        if best is not block:
            pool.free.remove((best.size << KEY_SHIFT) | best.addr)
            del self._free_blocks[best.addr]
            pool.free.add((block.size << KEY_SHIFT) | block.addr)
            self._free_blocks[block.addr] = block
        return best

    # ------------------------------------------------------------ growing

    def _new_block(self, pool: Pool, rounded: int) -> Block | None:
        found: Block | None = self._find_room(pool, rounded)
        if found is not None and found.state == UNMAPPED:
            found = self._map(pool, found, min(found.size, rounded))
        while found is not None and found.size < rounded:
            nxt = found.next
            if nxt is None or nxt.state != UNMAPPED:
                return None
            found = self._map(pool, nxt, min(rounded - found.size, nxt.size))
        if found is None:
            return None
        pool.free.remove((found.size << KEY_SHIFT) | found.addr)
        del self._free_blocks[found.addr]
        return found

    def _find_room(self, pool: Pool, rounded: int) -> Block:
        """The lowest block from which ``rounded`` bytes of unallocated space run on."""
        for addr in pool.unmapped:
            start = self._unmapped_blocks[addr]
            below = start.prev
            if below is not None and below.state == FREE:
                start = below
            room = 0
            b: Block | None = start
            while room < rounded and b is not None and b.state != IN_USE:
                room += b.size
                b = b.next
            if room >= rounded:
                return start
        return self._new_segment(pool)

    def _new_segment(self, pool: Pool) -> Block:
        """Reserve a virtual segment (no memory behind it yet); return its one unmapped block."""
        page = pool.page
        total = self._device.total
        size = -(-(total + total // 8) // page) * page
        addr = self._take_address(size, align=page)
        block = Block(addr, size, pool, UNMAPPED)
        pool.segments[addr] = Segment(addr, size, block)
        pool.unmapped.add(addr)
        self._unmapped_blocks[addr] = block
        return block

    def _map(self, pool: Pool, block: Block, size: int) -> Block | None:
        """Map the pages covering the first ``size`` bytes of unmapped ``block``.

        Returns the free block they become part of (merged with free
        neighbours, in the free set), or ``None`` if the device is full.
        """
        page = pool.page
        nbytes = min(-(-size // page) * page, block.size)
        if self._allowed is not None and self.reserved + nbytes > self._allowed:
            return None
        if not self._device.map(nbytes):
            return None
        self.num_device_alloc += 1
        pool.unmapped.remove(block.addr)
        del self._unmapped_blocks[block.addr]
        if nbytes < block.size:
            rest = Block(block.addr + nbytes, block.size - nbytes, pool, UNMAPPED)
            link_after(block, rest)
            block.size = nbytes
            pool.unmapped.add(rest.addr)
            self._unmapped_blocks[rest.addr] = rest
        block.state = FREE
        block = self._merge_free(pool, block)
        pool.free.add((block.size << KEY_SHIFT) | block.addr)
        self._free_blocks[block.addr] = block
        pool.stats.add("reserved_bytes", nbytes)
        return block

    # ---------------------------------------------------------- releasing

    def _release_cached(self) -> None:
        """Unmap whole pages of free blocks; drop virtual segments left with no memory."""
        self.num_sync_all_streams += 1
        for pool in self._releasable_pools():
            for key in list(pool.free):
                self._unmap_pages(pool, self._free_blocks[key & ADDR_MASK])
            for seg in list(pool.segments.values()):
                head = seg.head
                if head.state == UNMAPPED and head.size == seg.size:
                    pool.unmapped.remove(head.addr)
                    del self._unmapped_blocks[head.addr]
                    del pool.segments[seg.addr]

    def _unmap_pages(self, pool: Pool, block: Block) -> None:
        """Unmap the pages lying wholly inside free ``block``."""
        page = pool.page
        start = block.addr
        end = start + block.size
        lo = -(-start // page) * page
        hi = end // page * page
        if hi <= lo:
            return
        pool.free.remove((block.size << KEY_SHIFT) | start)
        del self._free_blocks[start]
        # The lowest piece keeps the block object, so a segment's head never moves.
        if lo > start:
            block.size = lo - start
            middle = Block(lo, hi - lo, pool, UNMAPPED)
            link_after(block, middle)
            pool.free.add((block.size << KEY_SHIFT) | start)
            self._free_blocks[start] = block
        else:
            middle = block
            middle.size = hi - lo
            middle.state = UNMAPPED
        if hi < end:
            tail = Block(hi, end - hi, pool)
            link_after(middle, tail)
            pool.free.add((tail.size << KEY_SHIFT) | hi)
            self._free_blocks[hi] = tail

        def drop(neighbour: Block) -> None:
            pool.unmapped.remove(neighbour.addr)
            del self._unmapped_blocks[neighbour.addr]

        middle = merge_neighbours(middle, drop)
        pool.unmapped.add(middle.addr)
        self._unmapped_blocks[middle.addr] = middle
        self._device.unmap(hi - lo)
        self.num_device_free += 1
        pool.stats.add("reserved_bytes", lo - hi)

    # ------------------------------------------------------------ helpers

    def _merge_free(self, pool: Pool, block: Block) -> Block:
        """Merge free ``block`` (not in the free set) with free neighbours; return the result."""

        def drop(neighbour: Block) -> None:
            pool.free.remove((neighbour.size << KEY_SHIFT) | neighbour.addr)
            del self._free_blocks[neighbour.addr]

        return merge_neighbours(block, drop)

    def _segment_count(self, seg: Segment) -> int:
        return 0

