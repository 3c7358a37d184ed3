"""The caching-allocator model shared by every preset (the ``torch-cuda`` rules).

See ``memacct.sim.allocator`` for the public face and ``docs/simulator.md`` for the facts
modelled. Split as c10's CUDACachingAllocator is: the settings (``_config``), the
statistics (``_stats`` counters, ``_readings`` the stats dict), blocks and segments
(``_blocks``), the pools (``_pools``), which cached segments go back (``_reclaim``), and
here the allocator itself. Everything here is written for speed on the malloc/free hot path:
``__slots__`` classes, plain attribute access, one int key per free block and
incremental statistics; :meth:`CachingAllocator._recount_stats` recomputes the
statistics from the blocks (``_recount``) so tests can check the incremental bookkeeping.
"""

# Peaks are kept with ``if c > peak: peak = c``, not ``max()``: a call costs
# more on the hot path, which runs millions of times per benchmark.
# ruff: noqa: PLR1730

from __future__ import annotations

from typing import ClassVar

from memacct.sim._blocks import (
    ADDR_MASK,
    FREE,
    IN_USE,
    KEY_SHIFT,
    MIN_BLOCK_SIZE,
    ROUND_LARGE,
    SMALL_SIZE,
    Block,
    Pool,
    Segment,
    segment_size,
)
from memacct.sim._config import NO_LIMIT, AllocatorSettings, split_fits
from memacct.sim._errors import (
    InvalidPointerError,
    SimOutOfMemory,
    check_size,
    out_of_memory_message,
)
from memacct.sim._memory import DeviceMemory
from memacct.sim._readings import AllocatorReadings
from memacct.sim._reclaim import garbage_collect, release_oversize
from memacct.sim._stats import more_inactive_split
from memacct.units import MiB

__all__ = ["ONE_EXA_BYTES", "CachingAllocator", "SimOutOfMemory"]

ONE_EXA_BYTES = 1 << 60
"""Requests of this size or more are refused before the allocator looks anywhere."""
_BASE_ADDRESS = 0x7F00_0000_0000
"""First simulated device address (looks like a real device pointer, never 0)."""
_ADDRESS_ALIGN = 2 * MiB
"""New segments start on this boundary, as device virtual addresses do."""


class CachingAllocator(AllocatorSettings, AllocatorReadings):
    """PyTorch's CUDA caching allocator, modelled (preset ``torch-cuda``).

    Requests are rounded up to a multiple of 512 bytes. Rounded requests up to
    1 MiB are served from the small pool (2 MiB segments), larger ones from
    the large pool (a 20 MiB segment below 10 MiB, else a segment of the
    request rounded up to 2 MiB). A request takes the smallest free block of
    its pool that is large enough (lowest address on ties); the block is split
    when the remainder is at least 512 bytes (small pool) or more than 1 MiB
    (large pool), otherwise the remainder stays inside the allocated block
    (counted in ``allocated_bytes`` but not ``requested_bytes``). The
    allocated piece keeps the low address. A freed block merges with free
    neighbours of its own segment only. When no cached block fits, a new
    segment is mapped; if the device is full, every wholly free segment is
    released (``num_alloc_retries``) and the mapping retried once; then
    :class:`SimOutOfMemory` (``num_ooms``).

    The allocator is not thread safe; :class:`memacct.sim.SimDevice` locks
    around it. A request of 0 bytes returns the null pointer ``0`` and
    allocates nothing (as torch does for empty tensors); ``free(0)`` is a no-op.
    Virtual addresses of released segments are never reused, so the same
    trace always gives the same addresses and statistics.

    Settings (``PYTORCH_CUDA_ALLOC_CONF``), rules in ``docs/simulator.md``:
    ``max_split_size_mb`` (blocks of that size or more are never split and
    serve only requests within 20 MiB of their size; ``oversize_*`` counts
    them), ``roundup_power2_divisions`` (sizes rounded up to one of N steps
    between powers of two), ``garbage_collection_threshold`` (with
    :meth:`set_memory_fraction`: free cached segments before growing past
    that share of the allowed memory).

    Private pools (:meth:`private_pool`, :meth:`use_pool`) hold CUDA-graph and
    ``MemPool`` memory; ``stream=`` keeps one free list per stream.

    Args:
        device_memory: where segments are mapped from.
        max_split_size_mb: ``None`` (unlimited) or an int > 20.
        roundup_power2_divisions: ``None``/0/1 (off) or a power of two.
        garbage_collection_threshold: ``None`` or a float in (0, 1).
    """

    name: ClassVar[str] = "torch-cuda"
    """Preset name."""
    oom_hint: ClassVar[str] = (
        "If reserved but unallocated memory is large, the torch-cuda-expandable "
        "allocator (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) avoids that "
        "fragmentation."
    )
    """The preset's advice, last in its out-of-memory message."""
    growth_granularity_bytes: int = ROUND_LARGE
    """Bytes by which the reservation grows for a large request (a class
    attribute; a preset with a configurable unit overrides it per instance)."""
    _pad: ClassVar[int] = 0
    """Bytes added to every request before rounding."""
    _track_inactive_split: ClassVar[bool] = True
    """Whether free split blocks count as ``inactive_split`` (not for expandable segments)."""
    _refit: ClassVar[bool] = False
    """Whether :meth:`_refit_block` may replace the best-fit block (expandable segments)."""

    def __init__(
        self,
        device_memory: DeviceMemory,
        *,
        max_split_size_mb: int | None = None,
        roundup_power2_divisions: int | None = None,
        garbage_collection_threshold: float | None = None,
    ) -> None:
        self._device = device_memory
        self._init_settings(
            max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold
        )
        super().__init__()
        self._small_max = SMALL_SIZE
        """Rounded requests up to this size use the small pool."""
        self._persistent_pool: Pool | None = None
        """Pool for ``persistent=True`` requests, if the preset has one."""
        self._gc_calls = 0
        """torch's ``get_free_blocks_call_count`` of the large pool (garbage collection on)."""
        self._gc_base: dict[int, int] = {}
        """``gc_count_base`` of free blocks: the call count when each was last freed."""
        self._live: dict[int, Block] = {}
        self._free_blocks: dict[int, Block] = {}
        self._next_addr = _BASE_ADDRESS

    def malloc(self, size: int, *, persistent: bool = False, stream: int = 0) -> int:
        """Allocate ``size`` bytes and return the block's address.

        Args:
            size: bytes requested (``0`` returns the null pointer ``0``).
            persistent: the block holds weights or constants; only the
                ``mindspore`` presets use the hint (their persistent pool).
            stream: the stream the block is allocated on (0: the default); a
                block is reused only by requests on its stream.

        Raises:
            SimOutOfMemory: the device cannot hold the request even after the
                allocator released its wholly free cached segments.
            InvalidInputError: ``size`` is negative or not an int.
        """
        # Hot path: everything inline, statistics included.
        if size.__class__ is not int or size <= 0:
            size = check_size(size)
            if size == 0:
                return 0
        rounded = (size + self._pad + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        if persistent and self._persistent_pool is not None:
            pool = self._persistent_pool
        elif self._slow or stream:
            pool, rounded = self._route(size, rounded, stream)
        elif rounded <= self._small_max:
            pool = self._small
        else:
            pool = self._large
        key = pool.free.pop_ceiling(rounded << KEY_SHIFT)
        if key >= 0 and self._max_split < NO_LIMIT and not self._split_fit(key, rounded):
            pool.free.add(key)
            key = -1
        if key >= 0:
            block = self._free_blocks.pop(key & ADDR_MASK)
            if self._refit:
                block = self._refit_block(pool, block)
        else:
            block = self._grow(pool, rounded, size)
        ps = pool.stats
        nxt = block.next
        remaining = block.size - rounded
        if block.size >= self._max_split:
            self.oversize_allocations.change(1)
        elif remaining >= pool.split_min and (pool.small or rounded < self._max_split):
            addr = block.addr
            rest = Block(addr + rounded, remaining, pool)
            rest.prev = block
            rest.next = nxt
            if nxt is not None:
                nxt.prev = rest
            block.next = rest
            block.size = rounded
            pool.free.add((remaining << KEY_SHIFT) | (addr + rounded))
            self._free_blocks[addr + rounded] = rest
            if self._track_inactive_split:
                if block.prev is not None or nxt is not None:
                    # The free remainder replaces the split block it came from.
                    ps.inactive_split_bytes -= rounded
                else:
                    more_inactive_split(ps, 1, remaining)
        elif self._track_inactive_split and (block.prev is not None or nxt is not None):
            ps.inactive_split -= 1
            ps.inactive_split_bytes -= block.size
        block.state = IN_USE
        block.requested = size
        addr = block.addr
        self._live[addr] = block
        n = block.size
        o = ps.other
        ap = ps.peaks
        c = ps.allocation + 1
        ps.allocation = c
        ps.allocation_cum += 1
        if c > ps.allocation_peak:
            ps.allocation_peak = c
        c += o.allocation
        if c > ap.allocation:
            ap.allocation = c
        c = ps.allocated_bytes + n
        ps.allocated_bytes = c
        ps.allocated_bytes_cum += n
        if c > ps.allocated_bytes_peak:
            ps.allocated_bytes_peak = c
        c += o.allocated_bytes
        if c > ap.allocated_bytes:
            ap.allocated_bytes = c
        c = ps.requested_bytes + size
        ps.requested_bytes = c
        ps.requested_bytes_cum += size
        if c > ps.requested_bytes_peak:
            ps.requested_bytes_peak = c
        c += o.requested_bytes
        if c > ap.requested_bytes:
            ap.requested_bytes = c
        return addr

    def free(self, ptr: int) -> None:
        """Return a block to the cache, merging it with free neighbours of its segment.

        Raises:
            InvalidPointerError: ``ptr`` is not a live allocation (never
                returned by :meth:`malloc`, or already freed).
        """
        block = self._live.pop(ptr, None)
        if block is None:
            self._free_unknown(ptr)
            return
        pool = block.pool
        size = block.size
        requested = block.requested
        if size >= self._max_split:
            self.oversize_allocations.change(-1)
        free_set = pool.free
        free_blocks = self._free_blocks
        block.state = FREE
        net_blocks = 0
        net_bytes = 0
        prev = block.prev
        if prev is not None and prev.state == FREE:
            psize = prev.size
            free_set.remove((psize << KEY_SHIFT) | prev.addr)
            del free_blocks[prev.addr]
            net_blocks = -1
            net_bytes = -psize
            prev.size = psize + size
            nxt = block.next
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        nxt = block.next
        if nxt is not None and nxt.state == FREE:
            nsize = nxt.size
            free_set.remove((nsize << KEY_SHIFT) | nxt.addr)
            del free_blocks[nxt.addr]
            net_blocks -= 1
            net_bytes -= nsize
            block.size += nsize
            after = nxt.next
            block.next = after
            if after is not None:
                after.prev = block
        free_set.add((block.size << KEY_SHIFT) | block.addr)
        free_blocks[block.addr] = block
        if self._slow and self._gc_threshold:
            self._gc_base[block.addr] = self._gc_calls
        ps = pool.stats
        if self._track_inactive_split:
            if block.prev is not None or block.next is not None:
                net_blocks += 1
                net_bytes += block.size
            if net_blocks < 0:
                ps.inactive_split += net_blocks
                net_blocks = 0
            if net_bytes < 0:
                ps.inactive_split_bytes += net_bytes
                net_bytes = 0
            if net_blocks or net_bytes:
                more_inactive_split(ps, net_blocks, net_bytes)
        ps.allocation -= 1
        ps.allocated_bytes -= size
        ps.requested_bytes -= requested

    def empty_cache(self) -> None:
        """Release every wholly free segment to the device.

        A free tail of a partly used segment is never returned: it stays
        reserved and shows in ``inactive_split_bytes``.
        """
        self._release_cached()

    # ------------------------------------------------------- preset hooks

    def _segment_size(self, pool: Pool, rounded: int) -> int:
        """Size of the segment mapped for a request that no cached block fits."""
        return segment_size(pool.small, rounded)

    def _refit_block(self, pool: Pool, block: Block) -> Block:
        """Replace the best-fit ``block`` (out of the free set) by another; see ``_refit``."""
        return block

    def _new_block(self, pool: Pool, rounded: int) -> Block | None:
        """Map memory for the request: a free block of at least ``rounded`` bytes
        (not in the free set), or ``None`` if the device has not enough free."""
        size = self._segment_size(pool, rounded)
        if self._allowed is not None and self.reserved + size > self._allowed:
            return None
        if not self._device.map(size):
            return None
        if size >= self._max_split:
            self.oversize_segments.change(1)
        return self._add_segment(pool, size)

    def _release_for_retry(self) -> None:
        """What the allocator frees before its one retry."""
        self._release_cached()

    def _attempt_size(self, pool: Pool, rounded: int) -> int:
        """Bytes the allocator asks the device for, as named in the OOM message."""
        return self._segment_size(pool, rounded)

    def _free_unknown(self, ptr: int) -> None:
        """``free`` of a pointer with no live allocation: a no-op for the null pointer (0);
        otherwise :class:`InvalidPointerError`."""
        if ptr == 0 and isinstance(ptr, int) and not isinstance(ptr, bool):
            return
        raise InvalidPointerError(
            f"free({ptr!r}): no live allocation of the {self.name} allocator at that "
            "address (never returned by malloc, or already freed); free each pointer "
            "malloc returned exactly once"
        )

    # ------------------------------------------------------------ internals

    def _grow(self, pool: Pool, rounded: int, size: int) -> Block:
        if size >= ONE_EXA_BYTES:
            # Refused before any cache look-up, retry or statistic, as torch does.
            raise self._refusal(
                f"Simulated device out of memory ({self.name} allocator). Tried to allocate "
                f"more than 1EB memory ({size} bytes requested); ask for less",
                size,
                size,
            )
        if self._gc_threshold and self._allowed is not None:
            self._garbage_collect()
        block = self._new_block(pool, rounded)
        if block is None and self._max_split < NO_LIMIT and self._release_oversize(pool, rounded):
            block = self._new_block(pool, rounded)
        if block is None and self._capture is None:
            # No release during a capture: torch retries only with no capture underway.
            self._release_for_retry()
            self.num_alloc_retries += 1
            block = self._new_block(pool, rounded)
        if block is None:
            raise self._out_of_memory(pool, rounded, size)
        return block

    def _add_segment(self, pool: Pool, size: int) -> Block:
        """Record a segment of ``size`` bytes just mapped; return its single free block."""
        addr = self._take_address(size)
        block = Block(addr, size, pool)
        pool.segments[addr] = Segment(addr, size, block)
        self.num_device_alloc += 1
        pool.stats.add("segment", 1)
        pool.stats.add("reserved_bytes", size)
        return block

    def _take_address(self, size: int, align: int = _ADDRESS_ALIGN) -> int:
        """Virtual address range of ``size`` bytes starting at a multiple of ``align``."""
        # Virtual addresses are never reused: a released segment's range stays
        # unused, which keeps addresses (and so tie-breaks) deterministic.
        addr = (self._next_addr + align - 1) // align * align
        self._next_addr = addr + size
        return addr

    def _release_cached(self) -> None:
        """Unmap every segment that is one free block (torch's ``release_cached_blocks``).

        Segments of private pools whose owner is alive stay.
        """
        self.num_sync_all_streams += 1
        for pool in self._releasable_pools():
            for seg in list(pool.segments.values()):
                self._release_segment(pool, seg)
        self._drop_released_pools()

    def _release_segment(self, pool: Pool, seg: Segment) -> bool:
        """Unmap ``seg`` if it is one free block; return whether it was."""
        head = seg.head
        if head.state != FREE or head.size != seg.size:
            return False
        pool.free.remove((head.size << KEY_SHIFT) | head.addr)
        del self._free_blocks[head.addr]
        del pool.segments[seg.addr]
        self._device.unmap(seg.size)
        self.num_device_free += 1
        if seg.size >= self._max_split:
            self.oversize_segments.change(-1)
        pool.stats.add("segment", -1)
        pool.stats.add("reserved_bytes", -seg.size)
        return True

    def _route(self, size: int, rounded: int, stream: int) -> tuple[Pool, int]:
        """Pool and rounded size of a request on the slow path (settings, streams, pools)."""
        if self._slow_rounding:
            rounded = self._roundup(size, rounded)
        small = rounded <= self._small_max
        if not small and self._capture is None and self._gc_active():
            self._gc_calls += 1  # torch counts get_free_block calls on the large pool
        if self._capture is not None:
            pools = self._capture.pools
        elif stream:
            pools = self._stream_pair(stream)
        else:
            pools = (self._small, self._large)
        return (pools[0] if small else pools[1]), rounded

    def _split_fit(self, key: int, rounded: int) -> bool:
        """torch's ``max_split_size`` rule for a best-fit candidate of size ``key >> 64``."""
        return split_fits(key >> KEY_SHIFT, rounded, self._max_split)

    def _release_oversize(self, pool: Pool, rounded: int) -> bool:
        """torch's ``release_available_cached_blocks``: free oversize cached segments."""
        return release_oversize(pool, rounded, self._max_split, self._release_segment)

    def _garbage_collect(self) -> None:
        """torch's ``garbage_collect_cached_blocks``: the oldest unused large segments first.

        Candidates are the wholly free segments of the large pool (all streams, no
        private pool). A block's age is the number of large-pool requests since it was
        last freed. Each round frees, in the pool's (stream, size, address) order, every
        candidate at least as old as the candidates' mean age, without stopping inside a
        round; rounds repeat until the bytes freed reach ``reserved - threshold x allowed``.
        """
        allowed = self._allowed or 0
        threshold = int(self._gc_threshold * allowed)
        if self.reserved <= threshold:
            return
        pools = [self._large] + [pair[1] for pair in self._stream_pools.values()]
        garbage_collect(pools, self.reserved - threshold, self._gc_calls, self._gc_base,
                        self._release_segment)

    def _out_of_memory(self, pool: Pool, rounded: int, size: int) -> SimOutOfMemory:
        """Count an out-of-memory (``num_ooms``) and build the error for the caller to raise."""
        self.num_ooms += 1
        attempted = self._attempt_size(pool, rounded)
        message = out_of_memory_message(
            self.name, size, attempted, total=self._device.total, free=self._device.free,
            allocated=self.allocated, reserved=self.reserved, hint=self.oom_hint,
        )
        return self._refusal(message, size, attempted)

    def _refusal(self, message: str, requested: int, attempted: int) -> SimOutOfMemory:
        """:class:`SimOutOfMemory` with ``message`` and the readings of the device and of
        this allocator now."""
        return SimOutOfMemory(
            message,
            requested=requested,
            attempted=attempted,
            total=self._device.total,
            free=self._device.free,
            reserved=self.reserved,
            allocated=self.allocated,
        )
