"""Sizing the activations' memory by replaying serving-step shapes through an allocator model.

The profile measures one forward pass, of the largest step. Serving runs steps
of every size, and on a caching allocator a step's tensors land in segments
cut for another's: the memory serving needs at the physical limit is neither
the allocated peak nor the reserved peak of the profile. Where the profiled
work's allocation trace is known (the engine's :class:`ServingTrace`) and the
backend declares a model of its allocator (``allocator_model``, a
:class:`memacct.backend.AllocatorModel`: :mod:`memacct.sim` implements it for
its presets, e.g. ``"torch-cuda"``), :func:`replay_need` measures it: the
least memory beyond the weights with which the profiled step and then a
ladder of serving shapes (every token count from the budget down by halves,
with as many sequences as the budget allows and with one, in falling then
rising order, and long prefills alternating with decodes) complete on a fresh
model of the allocator, found by bisection on the model's capacity.
That is what the ``auto`` truth source charges when it has a replay
(:func:`memacct.truth.resolve_truth_source`); without one it falls back to a
bound from the readings. The profiling session runs it and hands the accounting
the number (:func:`memacct.accounting.replay_request` says what to replay); this
module knows no allocator, only the protocol.

Example::

    >>> from memacct_bench.workload import TransformerWorkload  # the harness's workload
    >>> from memacct.planner import load_model_preset
    >>> from memacct.sim.allocator import PresetModel
    >>> work = TransformerWorkload.from_config(load_model_preset("qwen2.5-7b"),
    ...                                        max_num_batched_tokens=2048, max_num_seqs=64)
    >>> need = replay_need(PresetModel("torch-cuda"), work)
    >>> 0 < need < 4 * 2**30
    True
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Protocol, runtime_checkable

from memacct.backend import AllocatorModel, ModelAllocator
from memacct.errors import InvalidInputError
from memacct.truth import cache_ends_over

__all__ = [
    "SERVING_ROLES",
    "ServingTrace",
    "cache_ends_over",
    "check_serving_role",
    "random_runs",
    "replay_need",
    "serving_shapes",
    "shape_grid",
]

_GOLDEN = (5**0.5 - 1) / 2
_RESOLUTION = 2 * 1024 * 1024
"""Bisection stops when the capacity is known to this many bytes."""


@runtime_checkable
class ServingTrace(Protocol):
    """The allocation traces of the profiled work (e.g. the harness's workload).

    A trace is a list of ops: ``n >= 0`` allocates ``n`` bytes into the next
    slot, ``n < 0`` frees slot ``~n`` (:func:`memacct.trace.replay`).
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


SERVING_ROLES = ("mixed", "prefill", "decode")
"""What steps an engine instance serves: ``mixed`` (any), ``prefill`` (a disaggregated
prefill instance: SGLang's ``--disaggregation-mode prefill``, vLLM's ``kv_producer``) or
``decode`` (a disaggregated decode instance: every sequence of a step samples its one new
token, so a step has as many tokens as sequences). A prefill instance still batches prompt
chunks of any size, so it is replayed as ``mixed``; a decode instance never runs a step of
more tokens than sequences."""

_GRID = 8
"""Token counts of the pair grid: the budget in eighths."""

RUNS = 8
"""Random step sequences replayed on a caching allocator (a Monte Carlo sample of orders)."""
RUN_STEPS = 40
"""Steps per random sequence: a few dozen, long enough for the free segments of many
step sizes to accumulate between the releases an out-of-memory retry makes."""


def check_serving_role(role: str) -> str:
    """``role`` if it is one of :data:`SERVING_ROLES`, else a clear error."""
    if role not in SERVING_ROLES:
        raise InvalidInputError(
            f"serving_role {role!r} is not one of {', '.join(SERVING_ROLES)}: use 'decode' for "
            "a disaggregated decode instance, 'prefill' for a prefill instance, else 'mixed'"
        )
    return role


def serving_shapes(
    max_num_batched_tokens: int, max_num_seqs: int, role: str = "mixed"
) -> list[tuple[int, int]]:
    """The serving shapes replayed after the profiled step, in order (tokens, sequences)."""
    check_serving_role(role)
    decode = min(max_num_seqs, max_num_batched_tokens)
    if role == "decode":
        ladder = _halves(decode)
        spread = [max(1, int(decode * ((i * _GOLDEN) % 1.0))) for i in range(1, 25)]
        return [(n, n) for n in ladder + ladder[::-1] + spread]
    ladder = _halves(max_num_batched_tokens)
    full = [(t, min(max_num_seqs, t)) for t in ladder]
    single = [(t, 1) for t in ladder]
    alternating = [(max_num_batched_tokens, 1), (decode, decode)] * 2
    # Ragged steps: token and sequence counts spread evenly over the budgets (a golden-ratio
    # sequence covers the shape space without favouring any size).
    ragged = []
    for i in range(1, 25):
        tokens = max(1, int(max_num_batched_tokens * ((i * _GOLDEN) % 1.0)))
        seqs = max(1, min(tokens, int(max_num_seqs * ((i * _GOLDEN * _GOLDEN) % 1.0))))
        ragged.append((tokens, seqs))
    return full + single[::-1] + full[::-1] + alternating + ragged


def shape_grid(
    max_num_batched_tokens: int, max_num_seqs: int, role: str = "mixed"
) -> list[tuple[int, int]]:
    """The shapes whose every ordered pair :func:`replay_need` replays (``pairs=True``).

    Token counts at each eighth of the budget, each with one sequence (the fewest
    sampler rows, the largest share of the step in the layers' tensors) and with as many
    as the budget allows; for a decode instance, each eighth of the sequence budget.
    """
    check_serving_role(role)
    if role == "decode":
        decode = min(max_num_seqs, max_num_batched_tokens)
        counts = sorted({max(1, decode * i // _GRID) for i in range(1, _GRID + 1)})
        return [(n, n) for n in counts]
    tokens = sorted({max(1, max_num_batched_tokens * i // _GRID) for i in range(1, _GRID + 1)})
    return sorted({(t, n) for t in tokens for n in (1, min(max_num_seqs, t))})


def random_runs(
    max_num_batched_tokens: int, max_num_seqs: int, role: str = "mixed"
) -> list[list[tuple[int, int]]]:
    """The random step sequences :func:`replay_need` replays (``sequences=True``), in order.

    :data:`RUNS` sequences of :data:`RUN_STEPS` steps, each step's token count drawn
    uniformly from the budget and its sequence count uniformly from what that allows
    (a decode instance: a sequence count, with as many tokens), from a fixed seed so the
    replay is reproducible. A sample of the orders a scheduler can produce: the state of a
    caching allocator's free segments after many steps of varied sizes, which no pair of
    steps reaches.
    """
    check_serving_role(role)
    runs: list[list[tuple[int, int]]] = []
    decode = min(max_num_seqs, max_num_batched_tokens)
    for k in range(RUNS):
        rng = random.Random(f"memacct.replay:{k}")
        run: list[tuple[int, int]] = []
        for _ in range(RUN_STEPS):
            if role == "decode":
                n = rng.randint(1, decode)
                run.append((n, n))
            else:
                tokens = rng.randint(1, max_num_batched_tokens)
                run.append((tokens, rng.randint(1, min(max_num_seqs, tokens))))
        runs.append(run)
    return runs


def _halves(top: int, count: int = 5) -> list[int]:
    """``top`` and up to ``count - 1`` halvings of it (at least 1)."""
    out: list[int] = []
    while top >= 1 and len(out) < count:
        out.append(top)
        top //= 2
    return out


def replay_need(
    allocator_model: AllocatorModel,
    work: ServingTrace,
    *,
    kv_cache_bytes: int = 0,
    low_hint: int = 0,
    high_hint: int = 0,
    cache_ends: Sequence[int] = (0,),
    role: str = "mixed",
    pairs: bool = False,
    sequences: bool = False,
    floor: int = 0,
) -> int:
    """The least memory beyond the weights' with which the profile and the serving shapes complete.

    Args:
        allocator_model: the backend's model of its allocator (``BaseBackend.allocator_model``).
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
        role: the steps the instance serves (:data:`SERVING_ROLES`).
        pairs: also replay every ordered pair of :func:`shape_grid`'s shapes, each from
            the state the KV cache left (everything else released between pairs). On a
            caching allocator every step starts with all its cached segments free, so what
            a step strands depends on the segments the step before it cut: the worst pair
            bounds what two steps of those shapes need.
        sequences: also replay :func:`random_runs`'s random step sequences, each from the
            state the KV cache left: after many steps of varied sizes a caching allocator's
            free segments strand more than after any one pair.
        floor: a need the caller charges anyway: the answer is the most of it and the
            replay's need, and nothing below it is bisected (which saves most of the work
            where the floor decides).

    Returns:
        Bytes the allocator needs for activations at the physical limit
        (a capacity that completes, within ``max(_RESOLUTION, kv_cache_bytes / 2048)``
        of the least that does).
    """
    check_serving_role(role)
    mnbt, mns = work.max_num_batched_tokens, work.max_num_seqs
    weights = work.weight_tensors()
    profile = work.step_trace(mnbt, min(mns, mnbt))
    steps = [work.step_trace(t, n) for t, n in serving_shapes(mnbt, mns, role)]
    grid = [work.step_trace(t, n) for t, n in shape_grid(mnbt, mns, role)] if pairs else []
    runs = (
        [[work.step_trace(t, n) for t, n in run] for run in random_runs(mnbt, mns, role)]
        if sequences else []
    )  # fmt: skip

    per_block = sum(work.kv_cache_tensors(1))
    # Known to a 1/2048th of the KV cache (its efficiency to 0.05%), never finer than
    # _RESOLUTION: the answer is the end that completes, so the error is on the safe side.
    resolution = max(_RESOLUTION, kv_cache_bytes // 2048)
    need = 0
    for end in cache_ends:
        kv_bytes = max(0, kv_cache_bytes - end)
        kv = work.kv_cache_tensors(kv_bytes // per_block) if per_block and kv_bytes else []
        model = _Model(allocator_model, weights, profile, kv)
        found = _search(model, steps, resolution, low_hint, high_hint, floor)
        if grid:
            found = _worst_run(model, ((a, b) for a in grid for b in grid), found, resolution)
        if runs:
            found = _worst_run(model, runs, found, resolution)
        need = max(need, found)
    return need


class _Model:
    """Fresh instances of the allocator model holding weights and KV cache, after the profile."""

    def __init__(
        self,
        model: AllocatorModel,
        weights: Sequence[int],
        profile: Sequence[int],
        kv: Sequence[int],
    ) -> None:
        self.model = model
        self.weights = weights
        self.profile = profile
        self.kv = kv
        self.held = 0
        first = self.fresh(1 << 50)
        self.held = 0 if first is None else first.reserved  # what weights and cache reserve

    def fresh(self, extra: int) -> ModelAllocator | None:
        """An instance holding weights and cache, with ``extra`` bytes beyond what they reserve.

        ``None`` when the profile or the cache does not fit.
        """
        alloc = self.model.instance(self.held + extra)
        if not alloc.run(self.weights, persistent=True):
            return None
        alloc.empty_cache()
        if not alloc.run(self.profile):
            return None
        alloc.empty_cache()  # the profile ends with empty_cache, then the KV cache comes
        return alloc if alloc.run(self.kv) else None

    def completes(self, extra: int, steps: Sequence[Sequence[int]]) -> bool:
        """Whether ``steps`` complete, in order, with ``extra`` bytes beyond weights and cache."""
        alloc = self.fresh(extra)
        return alloc is not None and all(alloc.run(trace) for trace in steps)


def _bisect(completes: Callable[[int], bool], low: int, high: int, resolution: int) -> int:
    """The least capacity in ``(low, high]`` that completes, to ``resolution`` (``high`` does)."""
    while high - low > resolution:
        mid = (low + high) // 2
        if completes(mid):
            high = mid
        else:
            low = mid
    return high


def _search(
    model: _Model,
    steps: Sequence[Sequence[int]],
    resolution: int,
    low_hint: int,
    high_hint: int,
    floor: int = 0,
) -> int:
    """Bisect the capacity beyond what weights and cache hold for the least that completes.

    Never below ``floor``: where that completes it is the answer.
    """
    if floor > 0 and model.completes(floor, steps):
        return floor
    high = max(_RESOLUTION, high_hint)
    while not model.completes(high, steps):
        high *= 2
    low = min(low_hint, high)
    while low > 0 and model.completes(low, steps):
        high, low = low, low // 2
    return max(floor, _bisect(partial(model.completes, steps=steps), low, high, resolution))


def _worst_run(
    model: _Model, runs: Iterable[Sequence[Sequence[int]]], need: int, resolution: int
) -> int:
    """Raise ``need`` until every run of steps completes from the state the KV cache left.

    One model at the current need replays the runs, releasing its free cache after each
    (which returns it to the state the KV cache left); a run that fails is bisected from
    the current need up, and the rest continue on a model at the new need.
    """
    alloc = model.fresh(need)
    for run in runs:
        if alloc is not None and all(alloc.run(trace) for trace in run):
            alloc.empty_cache()
            continue
        low, high = need, max(2 * need, need + resolution)
        while not model.completes(high, run):
            low, high = high, 2 * high
        need = _bisect(partial(model.completes, steps=run), low, high, resolution)
        alloc = model.fresh(need)
    return need
