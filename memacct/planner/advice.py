"""What an offline plan that does not fit says: why, by how much, and what would close the gap.

:func:`refused_plan` turns the planner's refusal of an engine's start-up
estimate into a :class:`~memacct.planner.result.KVCachePlan` with ``fits``
False. Each suggestion is a change that alone closes the gap on that device
(an FP8 checkpoint only where the device runs FP8, an FP8 KV cache only where
the engine stores one), with the figure it gives; they come most effective first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from memacct.engines.base import KVLayout
from memacct.errors import InsufficientMemoryError, MemacctError
from memacct.model.spec import KVCacheSpec
from memacct.planner.budget import MemoryBudget
from memacct.planner.options import PlanOptions
from memacct.planner.result import KVCachePlan
from memacct.units import format_gib as gib

__all__ = ["refused_plan"]

UTILIZATION_SUGGESTED = 0.95
"""The utilization suggested when a higher one would close the gap."""

FP8_KV_DTYPE = {"sglang": "fp8_e4m3"}
"""The name an engine gives an FP8 KV cache where it is not ``fp8`` (SGLang has no ``fp8``
alias: ``--kv-cache-dtype`` choices of SGLang 0.5.23's server args)."""


def _engine_fits(spec: KVCacheSpec, engine: str, kv: int, block_size: int, max_len: int,
                 tokens: int, seqs: int) -> bool:
    from memacct.planner.plan import plan_kv_cache

    if kv <= 0:
        return False
    try:
        plan_kv_cache(None, spec, engine=engine, kv_cache_memory_bytes=kv, block_size=block_size,
                      max_model_len=max_len, max_num_batched_tokens=tokens, max_num_seqs=seqs)
    except InsufficientMemoryError:
        return False
    return True


def _fitting_batch(startup: Any, config: Mapping[str, Any], est: Any, spec: KVCacheSpec, *,
                   device: Any, settings: Any, engine: str, block_size: int,
                   max_len: int) -> tuple[int, int] | None:
    """The largest (max_num_batched_tokens, max_num_seqs), halving from the planned ones, whose
    profile run leaves room for one request of ``max_len`` tokens; None when even the
    smallest batch does not (the weights, not the activation, are what does not fit).

    The batch is halved where the activation comes from: the tokens while the forward
    pass over them is the larger part of the peak, the sequences while the sampler is.
    The token budget never drops below the sequence budget (vLLM requires it).
    """
    tokens, seqs = est.max_num_batched_tokens, est.max_num_seqs
    sampler_part = startup.sampler_peak(spec, config, min(seqs, tokens), None, est.sampler or None)
    for _ in range(64):
        if tokens <= 1 and seqs <= 1:
            return None
        if tokens > seqs and (seqs <= 1 or est.activation_peak > 2 * sampler_part):
            tokens = max(1, tokens // 2)
        else:
            seqs = max(1, seqs // 2)
            tokens = max(tokens // 2, seqs) if tokens > 8192 else tokens
        seqs = min(seqs, tokens)
        trial = replace(settings, max_num_batched_tokens=tokens, max_num_seqs=seqs)
        est = startup.estimate(config, total_memory=device.total, device_name=device.name,
                               settings=trial, weights=est.weights)  # fmt: skip
        sampler_part = startup.sampler_peak(spec, config, seqs, None, est.sampler or None)
        if _engine_fits(spec, engine, est.kv_cache_bytes, block_size, max_len,
                        est.max_num_batched_tokens, est.max_num_seqs):
            return tokens, seqs
    return None


def _fitting_tp(config: Mapping[str, Any], est: Any, tp: int) -> tuple[int, int] | None:
    """The smallest power-of-two multiple of ``tp`` (up to 64) that the model accepts (its
    heads and experts divide, as :meth:`KVCacheSpec.from_hf_config` checks) and whose weights
    leave room for the rest, with its weights per rank; ``None``: no such degree, so no
    tensor-parallel advice (a degree the engine would refuse is never suggested)."""
    from memacct.model.weights.estimate import estimate_weights

    rest = est.activation_peak + est.non_allocator_increase
    candidate = tp * 2
    while candidate <= 64:
        try:
            KVCacheSpec.from_hf_config(dict(config), tensor_parallel_size=candidate)
            weights = estimate_weights(config, tensor_parallel_size=candidate).total_bytes
        except MemacctError:
            return None  # the model cannot be split this far
        if weights + rest < 0.9 * est.requested_memory:
            return candidate, weights
        candidate *= 2
    return None


def refused_plan(
    config: Mapping[str, Any],
    opts: PlanOptions,
    budget: MemoryBudget,
    spec: KVCacheSpec,
    est: Any,
    refusal: InsufficientMemoryError,
    *,
    startup: Any,
    settings: Any,
    device: Any,
    block_size: int,
    max_len: int,
) -> KVCachePlan:
    """The plan of a start-up the engine refuses: the budget, the verdict, what would fit."""
    auto = opts.max_model_len == -1
    block_bytes = spec.bytes_per_block(block_size)
    kv = budget.kv_cache_bytes
    target = budget.target_allocation
    override = opts.kv_cache_memory_bytes
    if override is not None:
        kv = override
        target = budget.non_kv_cache_memory + kv
    request = spec.request_bytes(max_len, block_size, min(est.max_num_batched_tokens, max_len))
    total = budget.total_memory
    room = kv if target <= total else total - budget.non_kv_cache_memory
    gap = max(1, request - room) if not auto else max(1, block_bytes - room)
    suggestions: list[tuple[int, str]] = []  # (bytes it frees, text)
    oversized = override is not None and target > total
    if oversized:
        # The flag sets the cache's size: it, not the batch or the weights, is what to change.
        gap = target - total
        why = (
            f"the weights and the rest ({gib(budget.non_kv_cache_memory)} per rank) plus the "
            f"{gib(kv)} KV cache asked for exceed the {gib(total)} of the {device.label} by "
            f"{gib(gap)}"
        )
        kv, target = total - budget.non_kv_cache_memory, total
        if kv >= request:
            suggestions.append((gap + 2, f"lower --kv-cache-memory-bytes to at most {gib(kv)}"))
    else:
        why = _why(opts, est, refusal, kv, total, max_len)
        if kv < 0 and not auto:
            # The table's shortfall, said once in the verdict too: what the target lacks for
            # the rest and one request.
            why += (f"; the target is {gib(gap)} short of the rest and one request of "
                    f"{max_len:,} tokens")
        if refusal.estimated_max_model_len is not None and kv > 0 and not (
                est.weights_memory >= est.requested_memory):  # fmt: skip
            best = refusal.estimated_max_model_len
            suggestions.append((gap, f"lower --max-model-len to {best:,} or less"))
        if override is not None and budget.non_kv_cache_memory + request <= total:
            suggestions.append((gap + 2, f"raise --kv-cache-memory-bytes to at least "
                                         f"{gib(request)} (one request of {max_len:,} tokens)"))
        why, more_ranks = _batch_advice(suggestions, why, config, opts, est, spec,
                                        startup=startup, settings=settings, device=device,
                                        block_size=block_size, max_len=max_len, gap=gap)
    if override is None or oversized:
        # A cache of --kv-cache-memory-bytes too small for one request grows by the flag
        # alone; memory freed elsewhere helps only a cache that does not fit the device.
        suggestions += _memory_advice(config, opts, est, spec, device.info, request=request,
                                      max_len=max_len, gap=gap, auto=auto, total=total,
                                      more_ranks=override is not None or more_ranks)
    closing = sorted((s for s in suggestions if s[0] >= gap), key=lambda s: -s[0])
    layout_blocks = max(0, kv) // block_bytes
    per_request = -(-request // block_bytes) or 1
    # What the engine would build of this budget, serving no request: the plan's layout.
    layout = KVLayout(
        engine=est.engine, engine_version=est.version, budget_bytes=max(0, kv),
        block_size=block_size, block_bytes=block_bytes, num_blocks=layout_blocks,
        max_model_len=max_len, blocks_per_request=per_request,
        kv_tokens=layout_blocks * block_size, max_concurrency=0.0,
    )  # fmt: skip
    return KVCachePlan(
        engine=est.engine, engine_version=est.version, target_allocation=target,
        kv_cache_bytes=kv, num_tokens=layout_blocks * block_size,
        kv_cache_used_bytes=layout_blocks * block_bytes,
        max_num_batched_tokens=est.max_num_batched_tokens, max_num_seqs=est.max_num_seqs,
        request_bytes=per_request * block_bytes, layout=layout,
        spec=spec, notes=budget.notes, model=opts.model_name, budget=budget, fits=False,
        verdict=f"does not fit: {why}", suggestions=tuple(text for _, text in closing),
        shortfall_bytes=gap,
    )  # fmt: skip


def _why(opts: PlanOptions, est: Any, refusal: InsufficientMemoryError, kv: int, total: int,
         max_len: int) -> str:
    """Why a start-up whose KV cache is sized by the utilization does not fit."""
    if est.weights_memory >= est.requested_memory:
        return (
            f"the weights alone ({gib(est.weights_memory)} per rank) exceed "
            f"{gib(est.requested_memory)} ({est.gpu_memory_utilization:g} of {gib(total)}) by "
            f"{gib(est.weights_memory - est.requested_memory)}"
        )
    if kv <= 0 or refusal.estimated_max_model_len is None:
        return (
            f"nothing is left for the KV cache: {gib(est.requested_memory)} "
            f"({est.gpu_memory_utilization:g} of {gib(total)}) minus weights "
            f"{gib(est.weights_memory)}, activation peak {gib(est.activation_peak)}, "
            f"non-torch {gib(est.non_allocator_increase)}"
            + (f", CUDA graphs {gib(est.cudagraph_memory)}" if est.cudagraph_charged else "")
            + f" is {gib(kv)}"
        )
    return (
        f"one request of {max_len:,} tokens does not fit in the {gib(kv)} KV cache as "
        f"{opts.engine} counts it (the longest that fits is "
        f"{refusal.estimated_max_model_len:,} tokens)"
    )


def _batch_advice(suggestions: list[tuple[int, str]], why: str, config: Mapping[str, Any],
                  opts: PlanOptions, est: Any, spec: KVCacheSpec, *, startup: Any,
                  settings: Any, device: Any, block_size: int, max_len: int,
                  gap: int) -> tuple[str, bool]:
    """Add a smaller batch to ``suggestions`` where one closes the gap. Returns the reason,
    with the activation peak named where a smaller batch is the remedy, and whether more
    ranks are a remedy too (no smaller batch fits, or the weights alone do not)."""
    batch = None
    # The weights and fixed terms fit but the profile run's activation does not: the remedy
    # is a smaller batch, not more ranks (the sampler's logits are whole on each).
    fixed = est.weights_memory + est.non_allocator_increase
    if fixed < est.requested_memory and est.activation_peak > 0 \
            and opts.kv_cache_memory_bytes is None:
        batch = _fitting_batch(startup, config, est, spec, device=device, settings=settings,
                               engine=opts.engine, block_size=block_size, max_len=max_len)
    if batch is not None and batch != (est.max_num_batched_tokens, est.max_num_seqs):
        tokens, seqs = batch
        why = (
            f"the profile run's activation peak ({gib(est.activation_peak)} for "
            f"{est.max_num_batched_tokens:,} batched tokens and {est.max_num_seqs:,} "
            f"sequences) leaves no room for one request of {max_len:,} tokens: {why}"
        )
        changes = []
        if tokens < est.max_num_batched_tokens:
            changes.append(f"--max-num-batched-tokens to {tokens:,}")
        if seqs < est.max_num_seqs:
            changes.append(f"--max-num-seqs to {seqs:,}")
        suggestions.append((gap + 1, f"lower {' and '.join(changes)} (or less)"))
    return why, batch is None or fixed >= est.requested_memory


def _memory_advice(config: Mapping[str, Any], opts: PlanOptions, est: Any, spec: KVCacheSpec,
                   info: Any, *, request: int, max_len: int, gap: int, auto: bool,
                   total: int, more_ranks: bool) -> list[tuple[int, str]]:
    """The changes that free memory for the KV cache, each with the bytes it frees: more
    ranks, FP8 weights or KV cache where the device runs them, a higher utilization, no
    CUDA graphs. Under ``--kv-cache-memory-bytes`` the cache's size is the flag's, so only
    what shrinks the rest counts (the KV dtype and the utilization do not)."""
    fixed_kv = opts.kv_cache_memory_bytes is not None
    out: list[tuple[int, str]] = []
    fitting = _fitting_tp(config, est, opts.tensor_parallel_size) if more_ranks else None
    if fitting is not None:
        tp, weights = fitting
        out.append((max(est.weights_memory - weights, gap if not fixed_kv else 0), (
            f"raise --tensor-parallel-size to {tp} ({gib(weights)} of weights per rank)"
        )))
    if est.weights.quantization is None and (spec.dtype_bytes or 2) >= 2 and (
        info is not None and info.fp8_weights
    ):
        halved = est.weights_memory // 2
        out.append((halved, (
            f"use an FP8 checkpoint (the {info.label} runs FP8 weights): about "
            f"{gib(est.weights_memory - halved)} of weights per rank instead of "
            f"{gib(est.weights_memory)}"
        )))
    if spec.kv_dtype_bytes > 1 and info is not None and info.fp8_kv_cache and not auto \
            and not fixed_kv:
        frees = request - request * 1 // spec.kv_dtype_bytes
        out.append((frees, (
            f"store the KV cache in FP8 (--kv-cache-dtype "
            f"{FP8_KV_DTYPE.get(opts.engine, 'fp8')}): one request of {max_len:,} "
            f"tokens takes {gib(request // spec.kv_dtype_bytes)} instead of {gib(request)}"
        )))
    if est.gpu_memory_utilization < UTILIZATION_SUGGESTED and not fixed_kv:
        more = int(total * UTILIZATION_SUGGESTED) - est.requested_memory
        out.append((more, (
            f"raise --gpu-memory-utilization to {UTILIZATION_SUGGESTED} ({gib(more)} more)"
        )))
    if not opts.enforce_eager and est.cudagraph_charged:
        out.append((est.cudagraph_memory, (
            f"--enforce-eager saves the {gib(est.cudagraph_memory)} of CUDA graphs"
        )))
    return out
