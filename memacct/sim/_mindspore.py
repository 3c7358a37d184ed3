"""MindSpore's dynamic memory pool: the VMM pool (preset ``mindspore``) and the block pool
(preset ``mindspore-block``).

The rules and the MindSpore source files they come from are in ``docs/simulator.md``
(section "MindSpore"). Two modes exist in MindSpore and both are modelled:

* **VMM** (virtual memory management; the default on Ascend 910B/910C): each pool reserves
  one virtual range as large as the pool budget and maps 2 MiB physical pages into it on
  demand; idle pages are unmapped ("eager free") and their physical pages reused when a
  request does not fit.
* **Block pool** (VMM off): each pool grows by blocks of a unit (1 GiB) doubled until the
  request fits, capped at the free memory; a failed growth is final.

In both, one budget (MindSpore's ``max_device_memory``) caps every pool together. The
block pool is in :mod:`memacct.sim._mindspore_block`; the budget, the versions, the checks
both pools share and the ``vmm`` option are in :mod:`memacct.sim._mindspore_budget`.
"""

# Peaks are kept with ``if c > peak: peak = c`` on the hot path, as in ``_core``.
# ruff: noqa: PLR1730

from __future__ import annotations

from typing import ClassVar

from memacct.sim._blocks import (
    ADDR_MASK,
    FREE,
    IN_USE,
    KEY_SHIFT,
    MIN_BLOCK_SIZE,
    UNMAPPED,
    Block,
    Segment,
    link_after,
    list_segments,
    merge_neighbours,
)
from memacct.sim._core import CachingAllocator
from memacct.sim._errors import SimOutOfMemory, check_size
from memacct.sim._memory import DeviceMemory
from memacct.sim._mindspore_budget import (
    MINDSPORE_VERSIONS,
    VMM_PAGE,
    check_budget,
    check_version,
    default_budget,
    no_streams,
)
from memacct.sim._mindspore_vmm import VmmPool, recount_vmm
from memacct.units import format_size

__all__ = [
    "MINDSPORE_VERSIONS",
    "VMM_PAGE",
    "MindSporeMemoryPool",
    "default_budget",
]


class MindSporeMemoryPool(CachingAllocator):
    """MindSpore's memory pool with virtual memory management, modelled (preset ``mindspore``).

    - Sizes: ``(size + 512 + 31) // 512 * 512`` (pad 32 bytes, round up to 512).
    - Two allocators, *persistent* (``malloc(..., persistent=True)``: weights, constants)
      and *common* (activations, KV cache). Each reserves one virtual range of the pool
      budget (more only if a request is larger) and tiles it with buffers that are in use,
      idle (mapped) or eager-free (unmapped).
    - Malloc: the best-fitting idle buffer (smallest, then lowest address); else the
      best-fitting eager-free buffer, whose pages covering the request are mapped (a page
      already mapped for a neighbour is shared); a buffer splits when at least 512 bytes
      remain, the remainder keeping its state. If that fails (no buffer, or no physical
      page: the budget or the device is exhausted), every idle buffer of every allocator
      turns eager-free, the whole pages inside eager-free buffers are unmapped into a cache
      of physical pages, and the request is retried; then a new virtual range is reserved
      and tried; then :class:`SimOutOfMemory`.
    - A physical page comes from the cache of unmapped pages first, else from the device,
      and only while the pages held stay below the budget (one budget for both allocators).
    - Free: the buffer turns idle and merges with idle neighbours.
    - :meth:`empty_cache` turns idle buffers eager-free, unmaps their whole pages and gives
      every cached physical page back to the device.

    Statistics: ``reserved`` (``reserved_bytes.all.current``) is the physical memory held,
    mapped pages plus cached ones; ``allocated`` the bytes of buffers in use. In torch-style
    keys the persistent allocator is ``small_pool`` and the common one ``large_pool``; the
    cached pages count in ``all`` only. MindSpore's own keys are added
    (``total_reserved_memory``, ...), with the semantics of ``version``: ``"2.6"`` reports
    the physical memory and absolute peaks; ``"2.5"`` reported the virtual size as
    ``total_reserved_memory`` and peaks relative to the last reset.

    Args:
        device_memory: where physical pages come from.
        budget_bytes: the pool budget (MindSpore's ``max_device_memory``); ``None`` takes
            MindSpore's default from the device's free memory at the first request.
        version: ``"2.6"`` (default) or ``"2.5"``: statistics semantics.
    """

    name: ClassVar[str] = "mindspore"
    growth_granularity_bytes = VMM_PAGE
    _pad: ClassVar[int] = 32

    def __init__(
        self,
        device_memory: DeviceMemory,
        *,
        budget_bytes: int | None = None,
        version: str = "2.6",
    ) -> None:
        self._budget_option = check_budget(budget_bytes)
        self._version = check_version(version)
        super().__init__(device_memory)
        self._budget = self._budget_option
        self._persist = VmmPool("small_pool", True)
        self._common = VmmPool("large_pool", False)
        self._bufs: dict[int, tuple[VmmPool, Block]] = {}
        """Every idle or eager-free buffer by address, with its allocator."""
        self._vlive: dict[int, tuple[VmmPool, Block]] = {}
        self._handles = 0
        """Physical pages held (mapped + cached)."""
        self._cached = 0
        """Physical pages unmapped but kept for reuse."""
        self._peak_reserved = 0
        self._peak_all_allocated = 0
        self._peak_all_allocation = 0
        self._peak_all_requested = 0
        self._reset_allocated = 0
        self._reset_reserved = 0
        self.num_eager_frees = 0

    # ------------------------------------------------------------------ readings

    @property
    def budget_bytes(self) -> int | None:
        """The pool budget in bytes (``None`` until the first request sets the default)."""
        return self._budget

    @property
    def version(self) -> str:
        """MindSpore version whose statistics semantics are modelled."""
        return self._version

    @property
    def allocated(self) -> int:
        """Bytes of buffers in use."""
        return self._persist.allocated + self._common.allocated

    @property
    def reserved(self) -> int:
        """Physical bytes held: mapped pages plus cached ones."""
        return self._handles * VMM_PAGE

    @property
    def live_blocks(self) -> int:
        """Number of buffers in use."""
        return len(self._vlive)

    @property
    def _live(self) -> dict[int, Block]:
        return {addr: block for addr, (_, block) in self._vlive.items()}

    @_live.setter
    def _live(self, value: dict[int, Block]) -> None:
        # The base class initialises an unused mapping; the VMM pool keeps its own.
        pass

    # ---------------------------------------------------------------- malloc/free

    def malloc(self, size: int, *, persistent: bool = False, stream: int = 0) -> int:
        """Allocate ``size`` bytes from the persistent or the common allocator.

        Raises:
            SimOutOfMemory: no buffer fits even after eager free and a new virtual range.
            InvalidInputError: ``size`` is negative or not an int, or ``stream`` is not 0.
        """
        if stream:
            raise no_streams(stream)
        if size.__class__ is not int or size <= 0:
            size = check_size(size)
            if size == 0:
                return 0
        if self._budget is None:
            self._budget = default_budget(self._device.free)
        rounded = (size + 32 + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        pool = self._persist if persistent else self._common
        if not pool.segments:
            self._reserve_range(pool, rounded)
        block = self._take(pool, rounded)
        if block is None:
            self._eager_free_all()
            block = self._take(pool, rounded)
            if block is None:
                self._reserve_range(pool, rounded)
                block = self._take(pool, rounded)
                if block is None:
                    self.num_ooms += 1
                    raise self._vmm_oom(size, rounded)
        block.state = IN_USE
        block.requested = size
        self._vlive[block.addr] = (pool, block)
        n = block.size
        pool.allocation += 1
        pool.allocated += n
        pool.requested += size
        if pool.allocation > pool.peak_allocation:
            pool.peak_allocation = pool.allocation
        if pool.allocated > pool.peak_allocated:
            pool.peak_allocated = pool.allocated
        total = self._persist.allocated + self._common.allocated
        if total > self._peak_all_allocated:
            self._peak_all_allocated = total
        count = self._persist.allocation + self._common.allocation
        if count > self._peak_all_allocation:
            self._peak_all_allocation = count
        req = self._persist.requested + self._common.requested
        if req > self._peak_all_requested:
            self._peak_all_requested = req
        return block.addr

    def free(self, ptr: int) -> None:
        """Return a buffer: it turns idle and merges with idle neighbours.

        Raises:
            InvalidPointerError: ``ptr`` is not a live allocation.
        """
        entry = self._vlive.pop(ptr, None)
        if entry is None:
            self._free_unknown(ptr)
            return
        pool, block = entry
        pool.allocation -= 1
        pool.allocated -= block.size
        pool.requested -= block.requested
        self._settle(pool, block, FREE)

    def empty_cache(self) -> None:
        """Eager-free every idle buffer and give every cached physical page back."""
        self._eager_free_all()
        if self._cached:
            self._device.unmap(self._cached * VMM_PAGE)
            self._handles -= self._cached
            self._cached = 0

    def reset_peak_memory_stats(self) -> None:
        """Set every peak to its current value (MindSpore resets max allocated and reserved)."""
        for pool in (self._persist, self._common):
            pool.peak_allocated = pool.allocated
            pool.peak_allocation = pool.allocation
        self._peak_all_allocated = self.allocated
        self._peak_all_allocation = self._persist.allocation + self._common.allocation
        self._peak_all_requested = self._persist.requested + self._common.requested
        self._peak_reserved = self.reserved
        self._reset_allocated = self.allocated
        self._reset_reserved = self._virtual_bytes()

    def memory_stats(self) -> dict[str, int]:
        """Torch-style keys plus MindSpore's own (see the class docstring)."""
        out: dict[str, int] = {}
        pools = (self._persist, self._common)
        reserved = self.reserved
        mapped = {p.stat_name: len(p.pages) * VMM_PAGE for p in pools}
        segments = {p.stat_name: len(p.segments) for p in pools}
        values: dict[str, dict[str, tuple[int, int]]] = {
            "allocation": {p.stat_name: (p.allocation, p.peak_allocation) for p in pools},
            "allocated_bytes": {p.stat_name: (p.allocated, p.peak_allocated) for p in pools},
            "requested_bytes": {p.stat_name: (p.requested, p.requested) for p in pools},
            "reserved_bytes": {name: (v, v) for name, v in mapped.items()},
            "segment": {name: (v, v) for name, v in segments.items()},
        }
        all_values = {
            "allocation": (
                self._persist.allocation + self._common.allocation,
                self._peak_all_allocation,
            ),
            "allocated_bytes": (self.allocated, self._peak_all_allocated),
            "requested_bytes": (
                self._persist.requested + self._common.requested,
                self._peak_all_requested,
            ),
            "reserved_bytes": (reserved, self._peak_reserved),
            "segment": (sum(segments.values()), sum(segments.values())),
        }
        aliases = (
            ("active", "allocation"),
            ("active_bytes", "allocated_bytes"),
            ("allocated_bytes", "allocated_bytes"),
            ("allocation", "allocation"),
            ("requested_bytes", "requested_bytes"),
            ("reserved_bytes", "reserved_bytes"),
            ("segment", "segment"),
        )
        for stat, source in aliases:
            for pool_name, (cur, peak) in (("all", all_values[source]), *values[source].items()):
                prefix = f"{stat}.{pool_name}."
                out[prefix + "current"] = cur
                out[prefix + "peak"] = max(peak, cur)
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        self._extra_stats(out)
        return dict(sorted(out.items()))

    def _extra_stats(self, out: dict[str, int]) -> None:
        idle = sum(k >> KEY_SHIFT for p in (self._persist, self._common) for k in p.idle)
        eager = sum(k >> KEY_SHIFT for p in (self._persist, self._common) for k in p.eager)
        out["total_allocated_memory"] = self.allocated
        out["total_idle_memory"] = idle
        out["total_eager_free_memory"] = eager
        if self._version == "2.5":
            # Up to 2.5 the VMM pool reported its virtual size as reserved memory, and
            # its peaks relative to the last reset.
            virtual = self._virtual_bytes()
            out["total_reserved_memory"] = virtual
            out["max_reserved_memory"] = virtual - self._reset_reserved
            out["max_allocated_memory"] = max(0, self._peak_all_allocated - self._reset_allocated)
        else:
            out["total_reserved_memory"] = self.reserved
            out["max_reserved_memory"] = max(self._peak_reserved, self.reserved)
            out["max_allocated_memory"] = self._peak_all_allocated
        out["num_eager_frees"] = self.num_eager_frees

    # ------------------------------------------------------------------ internals

    def _virtual_bytes(self) -> int:
        return sum(s.size for p in (self._persist, self._common) for s in p.segments.values())

    def _reserve_range(self, pool: VmmPool, rounded: int) -> None:
        """Reserve a virtual range (no memory behind it) of the budget, or the request if larger."""
        budget = self._budget or VMM_PAGE
        size = max(budget, rounded)
        size = -(-size // VMM_PAGE) * VMM_PAGE
        addr = self._take_address(size, align=VMM_PAGE)
        block = Block(addr, size, self._small if pool.persistent else self._large, UNMAPPED)
        pool.segments[addr] = Segment(addr, size, block)
        pool.eager.add((size << KEY_SHIFT) | addr)
        self._bufs[addr] = (pool, block)

    def _take(self, pool: VmmPool, rounded: int) -> Block | None:
        """Best fit among idle buffers, else among eager-free ones; map and split it."""
        key = pool.idle.pop_ceiling(rounded << KEY_SHIFT)
        if key >= 0:
            _, block = self._bufs.pop(key & ADDR_MASK)
        else:
            key = pool.eager.pop_ceiling(rounded << KEY_SHIFT)
            if key < 0:
                return None
            _, block = self._bufs.pop(key & ADDR_MASK)
            remaining = block.size - rounded
            span = rounded if remaining >= MIN_BLOCK_SIZE else block.size
            if not self._map(pool, block.addr, span):
                pool.eager.add(key)
                self._bufs[block.addr] = (pool, block)
                return None
        remaining = block.size - rounded
        if remaining >= MIN_BLOCK_SIZE:
            rest = Block(block.addr + rounded, remaining, block.pool, block.state)
            link_after(block, rest)
            block.size = rounded
            (pool.idle if rest.state == FREE else pool.eager).add(
                (remaining << KEY_SHIFT) | rest.addr
            )
            self._bufs[rest.addr] = (pool, rest)
        return block

    def _map(self, pool: VmmPool, addr: int, nbytes: int) -> bool:
        """Map every unmapped page of ``[addr, addr + nbytes)``; all or nothing."""
        first = addr // VMM_PAGE
        last = (addr + nbytes - 1) // VMM_PAGE
        pages = pool.pages
        new = [p for p in range(first, last + 1) if p not in pages]
        from_cache = min(self._cached, len(new))
        fresh = len(new) - from_cache
        if fresh:
            budget = self._budget or 0
            if (self._handles + fresh) * VMM_PAGE > budget:
                return False
            if not self._device.map(fresh * VMM_PAGE):
                return False
            self._handles += fresh
            if self._handles * VMM_PAGE > self._peak_reserved:
                self._peak_reserved = self._handles * VMM_PAGE
        self._cached -= from_cache
        pages.update(new)
        return True

    def _settle(self, pool: VmmPool, block: Block, state: int) -> Block:
        """Give ``block`` (in no set) ``state``, merge it with same-state neighbours, index it."""
        block.state = state
        target = pool.idle if state == FREE else pool.eager

        def drop(neighbour: Block) -> None:
            target.remove((neighbour.size << KEY_SHIFT) | neighbour.addr)
            del self._bufs[neighbour.addr]

        block = merge_neighbours(block, drop)
        target.add((block.size << KEY_SHIFT) | block.addr)
        self._bufs[block.addr] = (pool, block)
        return block

    def _eager_free_all(self) -> None:
        """Idle buffers turn eager-free; whole pages inside eager-free buffers are unmapped."""
        self.num_eager_frees += 1
        self.num_alloc_retries += 1
        for pool in (self._persist, self._common):
            for key in list(pool.idle):
                _, block = self._bufs.pop(key & ADDR_MASK)
                pool.idle.remove(key)
                self._settle(pool, block, UNMAPPED)
            pages = pool.pages
            for key in pool.eager:
                size = key >> KEY_SHIFT
                addr = key & ADDR_MASK
                lo = -(-addr // VMM_PAGE)
                hi = (addr + size) // VMM_PAGE
                # Walk whichever is shorter: the buffer's pages or the mapped ones (an
                # eager-free tail can span the whole virtual range of a large budget).
                if hi - lo > len(pages):
                    doomed = [page for page in pages if lo <= page < hi]
                else:
                    doomed = [page for page in range(lo, hi) if page in pages]
                for page in doomed:
                    pages.remove(page)
                    self._cached += 1

    def _vmm_oom(self, size: int, rounded: int) -> SimOutOfMemory:
        total = self._device.total
        free = self._device.free
        reserved = self.reserved
        allocated = self.allocated
        budget = self._budget or 0
        return self._refusal(
            f"Simulated device out of memory ({self.name} pool, VMM). Tried to allocate "
            f"{format_size(rounded)} for a request of {size} bytes. The pool budget "
            f"(max_device_memory) is {format_size(budget)}, of which the pool holds "
            f"{format_size(reserved)} ({format_size(allocated)} in use); the device has "
            f"{format_size(free)} free of {format_size(total)}. Free memory, lower "
            "gpu_memory_utilization or the KV-cache size, or raise max_device_memory.",
            size,
            rounded,
        )

    # ------------------------------------------------------------- for the tests

    def _segments(self) -> list[tuple[str, int, int, list[tuple[int, int, str]]]]:
        names = {FREE: "idle", IN_USE: "in_use", UNMAPPED: "eager_free"}
        return list_segments((self._persist, self._common), names)

    def _recount_stats(self) -> dict[str, int]:
        """Current values recomputed from the buffers; checks the structure too."""
        out = recount_vmm(
            (self._persist, self._common), self._vlive, self._bufs,
            cached_pages=self._cached, held_pages=self._handles,
        )
        out["reserved_bytes.all.current"] = self.reserved
        return out
