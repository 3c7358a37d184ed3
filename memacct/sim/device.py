"""The simulated device: capacity, a caching allocator, and memory outside it.

A :class:`SimDevice` splits its memory the way memacct sees a real device:
the allocator's reservation, this process's memory outside the allocator
(driver context, NCCL buffers: :meth:`SimDevice.external_malloc`), and other
processes' memory (:meth:`SimDevice.other_process_malloc`). Its ``.api`` is a
``torch.cuda``-shaped memory module, so the core's ``TorchLikeBackend`` reads
it like a real GPU.

Example::

    >>> dev = SimDevice("h100-80gb")
    >>> ptr = dev.malloc(5 * 1024 * 1024)          # a 5 MiB tensor
    >>> dev.api.memory_reserved()                   # in a 20 MiB segment
    20971520
    >>> dev.free(ptr)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from memacct._attrs import ReadOnly
from memacct.devices import DEVICE_PRESETS
from memacct.errors import InvalidInputError
from memacct.sim._blocks import PrivatePool
from memacct.sim._errors import InvalidPointerError, SimOutOfMemory, check_size
from memacct.sim._memory_api import SimMemoryAPI
from memacct.sim.allocator import ALLOCATOR_PRESETS, CachingAllocator, make_allocator
from memacct.units import format_size

__all__ = ["DEVICE_PRESETS", "SimDevice", "SimMemoryAPI"]




def _choices(names: Any) -> str:
    return ", ".join(sorted(names))


class _RawMemory:
    """Memory taken by handle outside the allocator: this process's (``external``) or other
    processes' (``other_process``); ``what`` says which in an out-of-memory message."""

    __slots__ = ("bytes", "kind", "live", "what")

    def __init__(self, kind: str, what: str) -> None:
        self.kind, self.what = kind, what
        self.live: dict[int, int] = {}
        self.bytes = 0

    def take(self, handle: int, nbytes: int) -> None:
        self.live[handle] = nbytes
        self.bytes += nbytes

    def free(self, handle: int) -> None:
        nbytes = self.live.pop(handle, None)
        if nbytes is None:
            raise InvalidPointerError(
                f"{self.kind}_free({handle!r}): no live {self.kind}_malloc handle with that "
                "value (never returned, or already freed)"
            )
        self.bytes -= nbytes


class _AllocatorMemory:
    """The device's memory as its allocator sees it (a :class:`DeviceMemory`)."""

    __slots__ = ("_dev",)

    def __init__(self, dev: SimDevice) -> None:
        self._dev = dev

    total = ReadOnly[int]("_dev._total", "The device's capacity in bytes.")

    @property
    def free(self) -> int:
        return self._dev._free_bytes()

    def map(self, nbytes: int) -> bool:
        dev = self._dev
        if nbytes > dev._free_bytes():
            return False
        dev._allocator_mapped += nbytes
        return True

    def unmap(self, nbytes: int) -> None:
        self._dev._allocator_mapped -= nbytes


class SimDevice:
    """A simulated accelerator with a faithful caching-allocator model.

    CUDA-graph memory lives in private pools: ``with dev.graph_pool() as pool:``
    routes the block's allocations to a new (or the given) pool, which keeps its
    cached memory until :meth:`release_pool`; :meth:`private_pool` and
    :meth:`use_pool` are ``torch.cuda.MemPool`` and ``use_mem_pool``. Requests
    take ``stream=`` as in torch; settings go through
    :meth:`set_allocator_settings` (``PYTORCH_CUDA_ALLOC_CONF`` syntax).

    Thread safe: one re-entrant lock (:attr:`lock`) guards every change and
    every reading; hold it yourself to read several values consistently.
    :attr:`allocator` is the bare allocator object, which is not locked.

    Args:
        preset: a name from :data:`DEVICE_PRESETS`, or ``None`` with ``total_bytes``.
        allocator: a name from :data:`memacct.sim.allocator.ALLOCATOR_PRESETS`.
        total_bytes: capacity in bytes; overrides the preset's.
        name: device name in reports; defaults to the preset name (or
            ``sim-<total_bytes>`` for a custom capacity).
        allocator_options: options of the allocator preset (``mindspore``:
            ``vmm``, ``budget_bytes`` (``max_device_memory``), ``version``;
            ``mindspore-block``: ``unit_bytes`` (``mempool_block_size``),
            ``budget_bytes``, ``version``).

    Raises:
        InvalidInputError: unknown preset or allocator, or a capacity that is
            not a positive int; the message lists the choices.
    """

    def __init__(
        self,
        preset: str | None = "h100-80gb",
        allocator: str = "torch-cuda",
        *,
        total_bytes: int | None = None,
        name: str | None = None,
        allocator_options: Mapping[str, Any] | None = None,
    ) -> None:
        if total_bytes is not None:
            if (
                isinstance(total_bytes, bool)
                or not isinstance(total_bytes, int)
                or total_bytes <= 0
            ):
                raise InvalidInputError(
                    f"total_bytes must be a positive int number of bytes, got {total_bytes!r}"
                )
            total = total_bytes
        elif preset is None:
            raise InvalidInputError(
                f"give a device preset ({_choices(DEVICE_PRESETS)}) or total_bytes=N"
            )
        elif not isinstance(preset, str) or preset not in DEVICE_PRESETS:
            raise InvalidInputError(
                f"unknown device preset {preset!r}; choose one of: {_choices(DEVICE_PRESETS)} "
                "(or pass total_bytes=N)"
            )
        else:
            total = DEVICE_PRESETS[preset]
        if not isinstance(allocator, str) or allocator not in ALLOCATOR_PRESETS:
            raise InvalidInputError(
                f"unknown allocator preset {allocator!r}; choose one of: "
                f"{_choices(ALLOCATOR_PRESETS)}"
            )
        self._total = total
        self._preset = preset if total_bytes is None else None
        self._name = name if name is not None else (self._preset or f"sim-{total}")
        self._lock = threading.RLock()
        self._allocator_mapped = 0
        self._external = _RawMemory("external", "outside the allocator (this process)")
        self._others = _RawMemory("other_process", "for another process")
        self._next_handle = 1
        self._allocator = make_allocator(
            allocator, _AllocatorMemory(self), **dict(allocator_options or {})
        )
        self._api = SimMemoryAPI(self)

    def __repr__(self) -> str:
        return (
            f"<SimDevice {self._name!r} total={format_size(self._total)} "
            f"allocator={self._allocator.name!r} free={format_size(self.free_bytes)}>"
        )

    # ------------------------------------------------------------ readings

    name = ReadOnly[str]("_name", "Device name.")
    preset = ReadOnly[str | None](
        "_preset", "The device preset, or ``None`` for a custom capacity."
    )
    lock = ReadOnly[threading.RLock](
        "_lock", "The device's lock; hold it to read several values consistently."
    )
    allocator = ReadOnly[CachingAllocator](
        "_allocator",
        "The caching allocator (not locked: go through the device from several threads).",
    )
    api = ReadOnly[SimMemoryAPI]("_api", "A ``torch.cuda``-shaped memory module over this device.")
    total = ReadOnly[int]("_total", "Capacity in bytes.")

    @property
    def free_bytes(self) -> int:
        """Bytes nobody holds: total - allocator - external - other processes.

        (Named ``free_bytes`` because ``free`` is the method that frees a pointer.)
        """
        with self._lock:
            return self._free_bytes()

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes, read together."""
        with self._lock:
            return self._free_bytes(), self._total

    @property
    def used(self) -> int:
        """``total - free``."""
        with self._lock:
            return self._total - self._free_bytes()

    @property
    def process_memory(self) -> int:
        """This process's device memory: what the allocator maps plus external memory.

        The allocator's mapping is its reservation, plus any memory a preset
        holds beside its pools (the ``npu`` preset's operator workspace).
        """
        with self._lock:
            return self._allocator_mapped + self._external.bytes

    @property
    def external_memory(self) -> int:
        """This process's memory outside the allocator (:meth:`external_malloc`)."""
        with self._lock:
            return self._external.bytes

    @property
    def other_process_memory(self) -> int:
        """Memory held by other processes (:meth:`other_process_malloc`)."""
        with self._lock:
            return self._others.bytes

    def memory_stats(self) -> dict[str, int]:
        """The allocator's statistics with torch's key names."""
        with self._lock:
            return self._allocator.memory_stats()

    # ------------------------------------------------------------ changes

    def malloc(self, size: int, *, persistent: bool = False, stream: int = 0) -> int:
        """Allocate ``size`` bytes through the allocator; see :meth:`CachingAllocator.malloc`."""
        with self._lock:
            return self._allocator.malloc(size, persistent=persistent, stream=stream)

    def free(self, ptr: int) -> None:
        """Free a pointer :meth:`malloc` returned; see :meth:`CachingAllocator.free`."""
        with self._lock:
            self._allocator.free(ptr)

    def empty_cache(self) -> None:
        """Return the allocator's releasable cached memory to the device."""
        with self._lock:
            self._allocator.empty_cache()

    def reset_peak_memory_stats(self) -> None:
        """Set every allocator peak to its current value."""
        with self._lock:
            self._allocator.reset_peak_memory_stats()

    def reset_accumulated_memory_stats(self) -> None:
        """Zero the allocator's ``allocated``/``freed`` metrics and its ``num_*`` counters."""
        with self._lock:
            self._allocator.reset_accumulated_memory_stats()

    def set_allocator_settings(self, settings: str) -> None:
        """Apply ``PYTORCH_CUDA_ALLOC_CONF``-style settings (see ``CachingAllocator.configure``)."""
        with self._lock:
            self._allocator.configure(settings)

    def set_memory_fraction(self, fraction: float) -> None:
        """Cap the allocator's reservation at ``fraction`` of the device (torch's
        ``set_per_process_memory_fraction``)."""
        with self._lock:
            self._allocator.set_memory_fraction(fraction)

    # ------------------------------------------------------- private pools

    def private_pool(self) -> PrivatePool:
        """A new private pool (``torch.cuda.MemPool``): route requests to it with :meth:`use_pool`.

        Its memory counts in the allocator's statistics like any other; its
        cached segments go back to the device only after :meth:`release_pool`.
        """
        with self._lock:
            return self._allocator.private_pool()

    @contextlib.contextmanager
    def use_pool(self, pool: PrivatePool) -> Iterator[PrivatePool]:
        """Within the block, every :meth:`malloc` takes memory from ``pool``
        (``torch.cuda.use_mem_pool``). No release-and-retry happens while it is in use."""
        with self._lock:
            previous = self._allocator._capture
            self._allocator.use_pool(pool)
        try:
            yield pool
        finally:
            with self._lock:
                self._allocator.use_pool(previous if previous and not previous.released else None)

    @contextlib.contextmanager
    def graph_pool(self, pool: PrivatePool | None = None) -> Iterator[PrivatePool]:
        """Capture a CUDA graph: the block's allocations go to a private pool.

        A new pool unless ``pool`` is given (graphs that share a pool, as vLLM's
        do). Tensors freed inside stay cached in the pool; what the pool holds
        is CUDA-graph memory. Call :meth:`release_pool` when the graph is deleted.

        Example::

            >>> dev = SimDevice("h100-80gb")
            >>> with dev.graph_pool() as pool:
            ...     dev.free(dev.malloc(64 * 2**20))      # a graph's scratch tensor
            >>> dev.pool_reserved(pool)                   # held by the graph
            67108864
        """
        if pool is None:
            pool = self.private_pool()
        with self.use_pool(pool):
            yield pool

    def release_pool(self, pool: PrivatePool) -> None:
        """The graph or ``MemPool`` is deleted: the pool's cached memory becomes releasable."""
        with self._lock:
            self._allocator.release_pool(pool)

    def pool_reserved(self, pool: PrivatePool) -> int:
        """Bytes the private ``pool`` holds from the device."""
        with self._lock:
            return self._allocator.pool_reserved(pool)

    def external_malloc(self, nbytes: int) -> int:
        """Take ``nbytes`` for this process outside the allocator; return a handle.

        Raises:
            SimOutOfMemory: fewer than ``nbytes`` are free (the allocator's
                cache is not released for memory outside it).
        """
        return self._raw_malloc(self._external, nbytes)

    def external_free(self, handle: int) -> None:
        """Give back memory taken by :meth:`external_malloc`."""
        with self._lock:
            self._external.free(handle)

    def other_process_malloc(self, nbytes: int) -> int:
        """Take ``nbytes`` as another process would; return a handle.

        Raises:
            SimOutOfMemory: fewer than ``nbytes`` are free.
        """
        return self._raw_malloc(self._others, nbytes)

    def other_process_free(self, handle: int) -> None:
        """Give back memory taken by :meth:`other_process_malloc`."""
        with self._lock:
            self._others.free(handle)

    # ------------------------------------------------------------ internals

    def _free_bytes(self) -> int:
        return self._total - self._allocator_mapped - self._external.bytes - self._others.bytes

    def _raw_malloc(self, raw: _RawMemory, nbytes: int) -> int:
        with self._lock:
            nbytes = check_size(nbytes)
            handle = self._take_raw(nbytes, raw.what)
            raw.take(handle, nbytes)
            return handle

    def _take_raw(self, nbytes: int, what: str) -> int:
        free = self._free_bytes()
        if nbytes > free:
            alloc = self._allocator
            raise SimOutOfMemory(
                f"Simulated device {self._name!r} out of memory: tried to allocate "
                f"{format_size(nbytes)} ({nbytes} bytes) {what}. The device has a total "
                f"capacity of {format_size(self._total)} of which {format_size(free)} is free; "
                f"this process's allocator holds {format_size(alloc.reserved)} "
                f"({format_size(alloc.allocated)} allocated), other processes "
                f"{format_size(self._others.bytes)}. Free memory or ask for less.",
                requested=nbytes,
                attempted=nbytes,
                total=self._total,
                free=free,
                reserved=alloc.reserved,
                allocated=alloc.allocated,
            )
        handle = self._next_handle
        self._next_handle += 1
        return handle
