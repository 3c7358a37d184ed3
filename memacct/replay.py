"""Sizing the activations' memory by replaying serving-step shapes through an allocator model.

The profile measures one forward pass, of the largest step. Serving runs steps
of every size, and on a caching allocator a step's tensors land in segments
cut for another's: the memory serving needs at the physical limit is neither
the allocated peak nor the reserved peak of the profile. Where the profiled
work's allocation trace is known (the engine's :class:`ServingTrace`) and the
backend names a model of its allocator (``allocator_model``: a
:mod:`memacct.sim` preset, e.g. ``"torch-cuda"``), :func:`replay_need`
measures it: the least memory beyond the weights with which the profiled step
and then a ladder of serving shapes (every token count from the budget down by
halves, with as many sequences as the budget allows and with one, in falling
then rising order, and long prefills alternating with decodes) complete on a
fresh model of the allocator, found by bisection on the model's capacity.
That is what the ``auto`` truth source charges when it has a replay
(:func:`memacct.truth.resolve_truth_source`); without one it falls back to a
bound from the readings.

Example::

    >>> from memacct.engines.forward import TransformerWorkload
    >>> from memacct.planner import load_model_preset
    >>> work = TransformerWorkload.from_config(load_model_preset("qwen2.5-7b"),
    ...                                        max_num_batched_tokens=2048, max_num_seqs=64)
    >>> need = replay_need("torch-cuda", work)
    >>> 0 < need < 4 * 2**30
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["ServingTrace", "cache_ends_over", "replay_need", "serving_shapes"]

_GOLDEN = (5**0.5 - 1) / 2
_RESOLUTION = 2 * 1024 * 1024
"""Bisection stops when the capacity is known to this many bytes."""


@runtime_checkable
class ServingTrace(Protocol):
    """The allocation traces of the profiled work (e.g. a ``TransformerWorkload``).

    A trace is a list of ops: ``n >= 0`` allocates ``n`` bytes into the next
    slot, ``n < 0`` frees slot ``~n`` (:func:`memacct.engines.forward.replay`).
    """

    max_num_batched_tokens: int
    max_num_seqs: int

    def weight_tensors(self) -> list[int]:
        """Sizes of the tensors that live for the whole run (weights, persistent buffers)."""
        ...

    def step_trace(self, num_tokens: int, num_seqs: int) -> list[int]:
        """The trace of one engine step of ``num_tokens`` tokens and ``num_seqs`` sequences."""
        ...

    def kv_cache_tensors(self, num_blocks: int) -> list[int]:
        """Sizes of the KV-cache tensors for ``num_blocks`` blocks, as the engine allocates them."""
        ...


def serving_shapes(max_num_batched_tokens: int, max_num_seqs: int) -> list[tuple[int, int]]:
    """The serving shapes replayed after the profiled step, in order (tokens, sequences)."""
    ladder: list[int] = []
    tokens = max_num_batched_tokens
    while tokens >= 1 and len(ladder) < 5:
        ladder.append(tokens)
        tokens //= 2
    full = [(t, min(max_num_seqs, t)) for t in ladder]
    single = [(t, 1) for t in ladder]
    decode = min(max_num_seqs, max_num_batched_tokens)
    alternating = [(max_num_batched_tokens, 1), (decode, decode)] * 2
    # Ragged steps: token and sequence counts spread evenly over the budgets (a golden-ratio
    # sequence covers the shape space without favouring any size).
    ragged = []
    for i in range(1, 25):
        tokens = max(1, int(max_num_batched_tokens * ((i * _GOLDEN) % 1.0)))
        seqs = max(1, min(tokens, int(max_num_seqs * ((i * _GOLDEN * _GOLDEN) % 1.0))))
        ragged.append((tokens, seqs))
    return full + single[::-1] + full[::-1] + alternating + ragged


def _replay(allocator: object, trace: Sequence[int]) -> None:
    malloc = allocator.malloc  # type: ignore[attr-defined]
    free = allocator.free  # type: ignore[attr-defined]
    ptrs: list[int] = []
    for op in trace:
        if op >= 0:
            ptrs.append(malloc(op))
        else:
            free(ptrs[~op])


def replay_need(
    allocator_model: str,
    work: ServingTrace,
    *,
    kv_cache_bytes: int = 0,
    low_hint: int = 0,
    high_hint: int = 0,
    cache_ends: Sequence[int] = (0,),
) -> int:
    """The least memory beyond the weights' with which the profile and the serving shapes complete.

    Args:
        allocator_model: a :data:`memacct.sim.allocator.ALLOCATOR_PRESETS` name.
        work: the profiled work's traces.
        kv_cache_bytes: about how much KV cache will be allocated between the profile
            and serving (its tensors take cached free blocks the activations then miss).
        low_hint: a capacity expected to fail (the allocated peak increase); only speeds
            up the search, which checks it.
        high_hint: a capacity expected to complete (the reserved peak increase); likewise.
        cache_ends: bytes by which to shorten the cache, one replay each; the answer is
            the most any of them needs. On a packed pool (expandable segments, MindSpore's
            pages) where the cache ends inside a page moves the activations' pages, and the
            plan's cache is not known when profiling: the caller spreads the ends over one
            page (:func:`cache_ends_over`).

    Returns:
        Bytes the allocator needs for activations at the physical limit
        (a capacity that completes, within ``max(_RESOLUTION, kv_cache_bytes / 2048)``
        of the least that does).
    """
    weights = work.weight_tensors()
    steps = [work.step_trace(work.max_num_batched_tokens, min(work.max_num_seqs,
                                                                 work.max_num_batched_tokens))]
    steps += [work.step_trace(t, n) for t, n in serving_shapes(
        work.max_num_batched_tokens, work.max_num_seqs)]

    per_block = sum(work.kv_cache_tensors(1))
    # Known to a 1/2048th of the KV cache (its efficiency to 0.05%), never finer than
    # _RESOLUTION: the answer is the end that completes, so the error is on the safe side.
    resolution = max(_RESOLUTION, kv_cache_bytes // 2048)
    need = 0
    for end in cache_ends:
        kv_bytes = max(0, kv_cache_bytes - end)
        kv = work.kv_cache_tensors(kv_bytes // per_block) if per_block and kv_bytes else []
        need = max(need, _search(allocator_model, weights, steps, kv, resolution,
                                 low_hint, high_hint))
    return need


def cache_ends_over(granularity: int, count: int = 4) -> tuple[int, ...]:
    """``count`` cache ends spread evenly over one page of ``granularity`` bytes."""
    return tuple(k * granularity // count for k in range(count)) if granularity > 0 else (0,)


def _search(
    allocator_model: str,
    weights: Sequence[int],
    steps: Sequence[Sequence[int]],
    kv: Sequence[int],
    resolution: int,
    low_hint: int,
    high_hint: int,
) -> int:
    """Bisect the capacity beyond what weights and cache hold for the least that completes."""
    # The simulated allocators are the models; imported here so that the core's truth
    # source never loads them unless a replay is asked for.
    from memacct.sim._core import SimOutOfMemory, SimpleDeviceMemory
    from memacct.sim.allocator import make_allocator

    # A pool with a budget of its own (MindSpore's) gets the whole capacity as its budget:
    # the replay measures what the activations need, and a budget below the device's
    # free memory is the planner's cap (the profile's allocator limit), not theirs.
    budgeted = allocator_model.startswith("mindspore")

    def run(capacity: int) -> int:
        """Reserved bytes after weights, profile and KV cache; raises SimOutOfMemory."""
        options = {"budget_bytes": capacity} if budgeted else {}
        alloc = make_allocator(allocator_model, SimpleDeviceMemory(capacity), **options)
        for n in weights:
            alloc.malloc(n, persistent=True)
        alloc.empty_cache()
        _replay(alloc, steps[0])
        alloc.empty_cache()  # the profile ends with empty_cache, then the KV cache comes
        for n in kv:
            alloc.malloc(n)
        held = int(alloc.reserved)
        for trace in steps[1:]:
            _replay(alloc, trace)
        return held

    held = run(1 << 50)

    def completes(extra: int) -> bool:
        try:
            run(held + extra)
        except SimOutOfMemory:
            return False
        return True

    high = max(_RESOLUTION, high_hint)
    while not completes(high):
        high *= 2
    low = min(low_hint, high)
    while low > 0 and completes(low):
        high, low = low, low // 2
    while high - low > resolution:
        mid = (low + high) // 2
        if completes(mid):
            high = mid
        else:
            low = mid
    return high
