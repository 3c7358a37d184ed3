"""The allocator's pools: the default pair, a pair per stream, and the private pools.

torch keeps a small and a large ``BlockPool`` per device, serves a stream only from
blocks of that stream, and gives CUDA graphs and ``torch.cuda.MemPool`` private pools
whose segments go back to the device only after their owner is gone
(``beginAllocateToPool`` / ``releasePool``, c10/cuda/CUDACachingAllocator.cpp).
:class:`PoolSet` is the base of :class:`~memacct.sim._core.CachingAllocator` holding them.
"""

from __future__ import annotations

from memacct.errors import InvalidInputError
from memacct.sim._blocks import MIN_BLOCK_SIZE, SMALL_SIZE, Pool, PrivatePool, pair_pools
from memacct.sim._stats import Peaks

__all__ = ["PoolSet"]


class PoolSet:
    """The pools of one allocator; the stream and private pools share the default pair's
    counters (a pool kind's statistics cover every stream and private pool)."""

    def __init__(self) -> None:
        self._peaks = Peaks()
        self._small = Pool("small_pool", MIN_BLOCK_SIZE, self._peaks)
        # Large blocks split only when more than 1 MiB would remain.
        self._large = Pool("large_pool", SMALL_SIZE + 1, self._peaks)
        pair_pools(self._small, self._large)
        self._extra_pools: list[Pool] = []
        """Stream and private pools (they share the default pools' counters)."""
        self._stream_pools: dict[tuple[int, int], tuple[Pool, Pool]] = {}
        self._private: dict[int, PrivatePool] = {}
        self._capture: PrivatePool | None = None
        """The private pool requests go to (``use_pool``), if any."""

    @property
    def _pools(self) -> tuple[Pool, ...]:
        return (self._small, self._large, *self._extra_pools)

    def _set_slow(self) -> None:
        """Recompute whether requests take the allocator's slow path (the allocator's rule)."""

    def private_pool(self) -> PrivatePool:
        """A new private pool (a CUDA graph's pool, or ``torch.cuda.MemPool``)."""
        pool_id = len(self._private) + 1
        while pool_id in self._private:
            pool_id += 1
        pools = (self._make_pool(self._small), self._make_pool(self._large))
        pp = PrivatePool(pool_id, pools)
        self._private[pool_id] = pp
        return pp

    def use_pool(self, pool: PrivatePool | None) -> None:
        """Route the following requests to ``pool`` (``None``: back to the default pools).

        Raises:
            InvalidInputError: ``pool`` is not one of this allocator's live private pools.
        """
        if pool is not None and self._private.get(getattr(pool, "id", -1)) is not pool:
            raise InvalidInputError(
                f"{pool!r} is not a live private pool of this allocator: make one with "
                "private_pool() and do not use it after release_pool()"
            )
        if pool is not None and pool.released:
            raise InvalidInputError(f"{pool!r} was released; make a new private pool")
        self._capture = pool
        self._set_slow()

    def release_pool(self, pool: PrivatePool) -> None:
        """The pool's owner is gone: its free segments may go back to the device.

        Raises:
            InvalidInputError: ``pool`` is not a live private pool of this allocator.
        """
        if self._private.get(getattr(pool, "id", -1)) is not pool:
            raise InvalidInputError(f"{pool!r} is not a live private pool of this allocator")
        pool.released = True
        if self._capture is pool:
            self.use_pool(None)
        self._drop_released_pools()

    def pool_reserved(self, pool: PrivatePool) -> int:
        """Bytes reserved by the segments of ``pool``."""
        return sum(seg.size for p in pool.pools for seg in p.segments.values())

    def _releasable_pools(self) -> list[Pool]:
        held = {id(p) for pp in self._private.values() if not pp.released for p in pp.pools}
        return [p for p in self._pools if id(p) not in held]

    def _drop_released_pools(self) -> None:
        for pool_id, pp in list(self._private.items()):
            if pp.released and not any(p.segments for p in pp.pools):
                del self._private[pool_id]
                self._extra_pools = [p for p in self._extra_pools if p not in pp.pools]

    def _make_pool(self, like: Pool) -> Pool:
        """A pool of ``like``'s kind sharing its counters (streams, private pools)."""
        pool = Pool(like.stat_name, like.split_min, self._peaks, like.page)
        pool.small = like.small
        pool.stats = like.stats
        self._extra_pools.append(pool)
        return pool

    def _stream_pair(self, stream: object) -> tuple[Pool, Pool]:
        """The (small, large) pools of ``stream`` (made on its first request).

        Raises:
            InvalidInputError: ``stream`` is not a non-negative int.
        """
        if (
            isinstance(stream, bool)
            or not isinstance(stream, int)
            or stream < 0
        ):
            raise InvalidInputError(
                f"stream must be a non-negative int stream id, got {stream!r}"
            )
        return self._stream_pools.get((stream, 0)) or self._new_stream_pools(stream)

    def _new_stream_pools(self, stream: int) -> tuple[Pool, Pool]:
        pools = (self._make_pool(self._small), self._make_pool(self._large))
        for p in pools:
            p.stream = stream
        self._stream_pools[(stream, 0)] = pools
        return pools
