"""One plan pipeline: a non-KV budget (a profile's or an engine's start-up estimate), the
engine's KV-cache manager on what it leaves, one :class:`KVCachePlan`.

:func:`memacct.plan_kv_cache` (:mod:`memacct.planner.plan`) checks its arguments and
keeps the allocator's share of a profile free; this module builds the budget, the plan,
and the refusals that name the numbers and the fix.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from memacct._version import __version__
from memacct.engines import get_engine
from memacct.engines.base import Engine, KVLayout, KVSettings
from memacct.errors import InsufficientMemoryError
from memacct.model.spec import KVCacheSpec
from memacct.models import ProfileResult
from memacct.planner.result import KVCachePlan, MemoryBudget, Provenance, fits_verdict
from memacct.units import format_gib

__all__ = [
    "batch_defaults_for",
    "check_override_fits",
    "co_tenants",
    "device_of",
    "free_at_start_message",
    "make_plan",
    "no_memory_message",
    "plan_from_budget",
    "profile_budget",
]

logger = logging.getLogger("memacct")


def batch_defaults_for(
    engine: Engine, result: ProfileResult | None, budget: MemoryBudget | None,
    max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
) -> tuple[int, int]:
    """The batch a plan assumes: the one given, else what the budget or the profile
    recorded, else the engine's own rule (:meth:`StartupModel.batch`, the one the offline
    start-up follows) for the profiled device, or for
    :data:`memacct.devices.REFERENCE_DEVICE` when there is none."""
    from memacct.devices import DEVICE_INFO, REFERENCE_DEVICE

    startup = engine.startup if engine.startup is not None else get_engine("vllm").startup
    if budget is not None:
        tokens, seqs = budget.max_num_batched_tokens, budget.max_num_seqs
        total, name = budget.total_memory, budget.device
    elif result is not None:
        tokens, seqs = result.profiled.max_num_batched_tokens, result.profiled.max_num_seqs
        total, name = result.after.total, ""
    else:
        tokens = seqs = None
        reference = DEVICE_INFO[REFERENCE_DEVICE]
        total, name = reference.total_bytes, reference.name
    batch: tuple[int, int] = startup.batch(
        total, name, max_num_batched_tokens or tokens, max_num_seqs or seqs
    )
    return batch


def plan_from_budget(
    budget: MemoryBudget,
    spec: KVCacheSpec,
    settings: KVSettings,
    engine: str,
    kv_override: int | None,
    blocks_override: int | None,
) -> KVCachePlan:
    """The plan of an engine's start-up estimate: the target less the non-KV terms, or an
    override's cache on top of them, handed to the engine's KV-cache manager.

    Raises:
        InsufficientMemoryError: nothing is left for one block, the override's cache and
            the rest exceed the device, or one request does not fit as the engine counts it.
    """
    kv_engine = get_engine(engine).kv
    non_kv = budget.non_kv_cache_memory
    block = kv_engine.block(spec, settings)
    overrides: tuple[str, ...] = ()
    if kv_override is not None or blocks_override is not None:
        kv_bytes = kv_override if kv_override is not None else (
            (blocks_override or 0) * block.block_bytes)
        name = "kv_cache_memory_bytes" if kv_override is not None else "num_gpu_blocks_override"
        overrides = (f"{name}={kv_override if kv_override is not None else blocks_override}",)
        target = non_kv + kv_bytes
        if target > budget.total_memory:
            raise InsufficientMemoryError(
                f"{overrides[0]} asks for {format_gib(kv_bytes)} of KV cache, but "
                f"{budget.device_label or budget.device} has {format_gib(budget.total_memory)} "
                f"in all and the model needs {format_gib(non_kv)} besides the cache: "
                f"{format_gib(target - budget.total_memory)} too much"
            )
    else:
        kv_bytes, target = budget.kv_cache_bytes, budget.target_allocation
    if kv_bytes < block.block_bytes:
        raise InsufficientMemoryError(
            f"nothing is left for the KV cache: {format_gib(target)} less "
            f"{format_gib(non_kv)} besides the cache is {format_gib(kv_bytes)}, less than one "
            f"block of {block.block_size} tokens ({block.block_bytes} bytes)"
        )
    layout = kv_engine.plan(spec, kv_bytes, settings)
    plan = make_plan(None, spec, layout, settings, kv_bytes, target,
                      budget.gpu_memory_utilization, overrides, 0, budget=budget)
    logger.info("%s", plan.report())
    return plan


_MEASURED_TERMS = ("weights_memory", "activation_peak", "non_allocator_increase",
                   "cudagraph_memory", "retained_memory")  # fmt: skip
"""The terms of a :class:`ProfileResult` its :class:`MemoryBudget` carries under the same names."""

_RECORDED_FIELDS = ("backend", "device", "truth_source", "requested_truth_source",
                    "truth_source_reason", "fragmentation")  # fmt: skip
"""The fields of a :class:`ProfileResult` its plan's :class:`Provenance` carries as they are."""


def _copied(result: ProfileResult, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(result, name) for name in names}


def profile_budget(result: ProfileResult, target: int, utilization: float) -> MemoryBudget:
    return MemoryBudget(
        source="profile",
        total_memory=result.after.total,
        gpu_memory_utilization=utilization,
        target_allocation=target,
        **_copied(result, _MEASURED_TERMS),
        cudagraph_estimate=result.cudagraph_memory,
        weights_source=str(result.weights_source),
        max_num_batched_tokens=result.profiled.max_num_batched_tokens,
        max_num_seqs=result.profiled.max_num_seqs,
        device=device_of(result),
        device_label=device_of(result),
    )


def make_plan(
    result: ProfileResult | None,
    spec: KVCacheSpec,
    layout: KVLayout,
    settings: KVSettings,
    kv_bytes: int,
    target: int | None,
    utilization: float | None,
    overrides: tuple[str, ...],
    reserve: int,
    limit_note: str = "",
    *,
    budget: MemoryBudget | None = None,
) -> KVCachePlan:
    provenance = None
    if result is not None:
        assert target is not None and utilization is not None
        budget = profile_budget(result, target, utilization)
        baseline = result.baseline
        provenance = Provenance(
            **_copied(result, _RECORDED_FIELDS),
            allocator_settings=dict(result.allocator_settings),
            free_at_start=baseline.free,
            other_processes_at_baseline=baseline.other_processes,
            memacct_version=__version__,
            created_at=time.time(),
            overrides=overrides,
            profile_warnings=result.warnings,
        )
    notes: tuple[str, ...] = (limit_note,) if limit_note else ()
    if budget is not None and budget.source == "estimate":
        notes = budget.notes
    return KVCachePlan(
        engine=layout.engine,
        engine_version=layout.engine_version,
        total_memory=None if budget is None else budget.total_memory,
        gpu_memory_utilization=utilization,
        target_allocation=target,
        non_kv_cache_memory=0 if budget is None else budget.non_kv_cache_memory,
        weights_memory=0 if budget is None else budget.weights_memory,
        activation_peak=0 if budget is None else budget.activation_peak,
        non_allocator_increase=0 if budget is None else budget.non_allocator_increase,
        cudagraph_memory=0 if budget is None else budget.cudagraph_memory,
        retained_memory=0 if budget is None else budget.retained_memory,
        kv_cache_bytes=kv_bytes,
        block_size=layout.block_size,
        block_bytes=layout.block_bytes,
        num_blocks=layout.num_blocks,
        num_tokens=layout.num_blocks * layout.block_size,
        kv_tokens=layout.kv_tokens,
        kv_cache_used_bytes=layout.used_bytes,
        max_model_len=layout.max_model_len,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        async_scheduling=settings.async_scheduling,
        blocks_per_request=layout.blocks_per_request,
        request_bytes=layout.request_bytes,
        max_concurrency=layout.max_concurrency,
        max_running_requests=layout.max_running_requests,
        groups=layout.groups,
        stage_blocks=layout.stage_blocks,
        engine_notes=layout.notes,
        profile_duration_s=None if result is None else result.duration_s,
        spec=spec,
        provenance=provenance,
        allocator_reserve_bytes=reserve,
        allocator_limit=None if result is None else result.allocator_limit,
        notes=notes,
        model=spec.model_name,
        budget=budget,
        verdict=fits_verdict(layout.max_concurrency, layout.max_model_len, layout.used_bytes),
    )


def device_of(result: ProfileResult) -> str:
    return f"{result.backend}:{result.device}"


def co_tenants(result: ProfileResult) -> str:
    baseline = result.baseline
    if baseline.other_processes is not None:
        held = baseline.other_processes
        own = baseline.reserved + baseline.non_allocator
        return (
            f"other processes hold {format_gib(held)} ({held} bytes) and this process "
            f"held {format_gib(own)} ({own} bytes) at start"
        )
    return (
        f"{format_gib(baseline.used)} ({baseline.used} bytes) was in use at start; the "
        f"{result.backend} backend cannot attribute it to processes, so other processes' "
        f"share could not be determined"
    )


def free_at_start_message(result: ProfileResult, utilization: float, target: int) -> str:
    free = result.baseline.free
    total = result.after.total
    most = math.floor(free / total * 1000) / 1000
    fix = "free memory on the device (stop or shrink the other processes)"
    if most > 0:
        fix = f"decrease gpu_memory_utilization to at most {most}, or {fix}"
    return (
        f"Free memory on device {device_of(result)} at start ({format_gib(free)}, {free} bytes) "
        f"is less than desired memory utilization {utilization} ({format_gib(target)}, "
        f"{target} bytes of {format_gib(total)}); {co_tenants(result)}: {fix}"
    )


def no_memory_message(
    result: ProfileResult, utilization: float, target: int, block_size: int, block_bytes: int
) -> str:
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    need = non_kv + block_bytes
    suggestion = math.ceil(need / total * 1000) / 1000
    if int(total * suggestion) < need:
        suggestion = round(suggestion + 0.001, 3)
    fix = (
        f"Increase gpu_memory_utilization to at least {suggestion}, or"
        if suggestion <= 1.0
        else "The model does not fit this device at any utilization:"
    )
    return (
        f"No available memory for the cache blocks on {device_of(result)}: the target allocation "
        f"is {format_gib(target)} ({target} bytes = {utilization} x {total}) and the model "
        f"needs {format_gib(non_kv)} ({non_kv} bytes) besides the cache (weights "
        f"{result.weights_memory} + activation peak {result.activation_peak} + non-allocator "
        f"increase {result.non_allocator_increase}), leaving {target - non_kv} bytes, less than "
        f"one block of {block_size} tokens ({block_bytes} bytes). {fix} reduce the model's "
        f"memory (quantize it, shard it with tensor or pipeline parallelism, or lower "
        f"max_num_batched_tokens)"
    )


def check_override_fits(result: ProfileResult, override: str, kv_bytes: int, target: int) -> None:
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    if target > total:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache, but "
            f"{device_of(result)} has {total} bytes in all and the model needs {non_kv} besides "
            f"the cache, so at most {total - non_kv} bytes can ever hold it: lower the override"
        )
    free = result.baseline.free
    if target > free:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache; with "
            f"{non_kv} bytes of non-KV memory this instance needs {target} bytes, more than "
            f"the {free} bytes ({format_gib(free)}) free on {device_of(result)} at start; "
            f"{co_tenants(result)}. Lower the override to at most {free - non_kv} bytes, or "
            f"free memory on the device"
        )
