"""Planning the KV cache: from a profile (or a budget) and a spec to the engine's numbers.

:func:`plan_kv_cache` works out the KV-cache budget of one rank (vLLM's
arithmetic: ``int(total x gpu_memory_utilization) - non_kv_cache_memory``, or
``kv_cache_memory_bytes`` given directly) and hands it to the engine's
KV-cache manager (:mod:`memacct.engines`), which turns it into the engine's
own block count, tokens, concurrency and KV-cache groups, or refuses exactly
when the engine would, with its estimate of the longest length that fits.
memacct adds what engines leave out: the plan records where its numbers came
from (:class:`Provenance`), keeps the profile's fragmentation allowance free,
and every refusal names the numbers and the fix.

Plans and profiles serialize to JSON and load back losslessly, so an engine
can save its profile and a planner can work from it later, off the device.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from memacct._version import __version__
from memacct.checks import check_fraction, check_int, check_optional_int
from memacct.engines import get_engine
from memacct.engines.base import KVLayout, KVSettings
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.io import atomic_write_text, read_text
from memacct.models import ProfileResult, load_model_json
from memacct.planner.guard import check_profile_matches
from memacct.planner.kvplan import PLAN_FORMAT_VERSION, Agreement, KVCachePlan, Provenance
from memacct.planner.spec import KVCacheSpec
from memacct.units import format_gib

__all__ = [
    "PLAN_FORMAT_VERSION",
    "Agreement",
    "KVCachePlan",
    "Provenance",
    "kv_cache_reservation",
    "load_profile",
    "plan_kv_cache",
    "save_profile",
]

logger = logging.getLogger("memacct")

# vllm serve's defaults on H100-class devices (docs/engines.md); SGLang pages one token.
_DEFAULT_BATCHED_TOKENS = 8192
_DEFAULT_NUM_SEQS = 1024


def save_profile(result: ProfileResult, path: str | os.PathLike[str]) -> Path:
    """Write a profile as JSON, for planning later (``memacct plan --profile``); returns the path.

    Raises:
        InvalidInputError: ``result`` is not a :class:`~memacct.ProfileResult`.
        ConfigError: the file cannot be written.
    """
    if not isinstance(result, ProfileResult):
        raise InvalidInputError(f"save_profile takes a ProfileResult, got {type(result).__name__}")
    return atomic_write_text(Path(path), result.model_dump_json(indent=2) + "\n", "profile")


def load_profile(path: str | os.PathLike[str]) -> ProfileResult:
    """Read a profile written by :func:`save_profile`.

    Raises:
        ConfigError: missing, over 16 MiB, not JSON, or numbers that do not add up.
    """
    result: ProfileResult = load_model_json(
        ProfileResult, read_text(path, "profile"), str(path)
    )
    return result


def plan_kv_cache(
    result: ProfileResult | None,
    spec: KVCacheSpec,
    gpu_memory_utilization: float = 0.9,
    block_size: int | None = None,
    max_model_len: int | None = None,
    *,
    engine: str = "vllm",
    kv_cache_memory_bytes: int | None = None,
    num_gpu_blocks_override: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    async_scheduling: bool = True,
    enable_prefix_caching: bool = True,
    allow_mismatch: bool = False,
) -> KVCachePlan:
    """Plan the KV cache of one rank as ``engine`` would size it (contract).

    The budget is ``int(total x gpu_memory_utilization) - non_kv_cache_memory``
    (vLLM's arithmetic). Either override replaces ``gpu_memory_utilization``
    (with a WARNING on logger ``memacct``): ``kv_cache_memory_bytes`` sets the
    budget in bytes, ``num_gpu_blocks_override`` the block count. An override
    is refused when the instance would then need more than the device's free
    memory at the start of the profile, just as the utilization is. The
    engine's KV-cache manager turns the budget into blocks, tokens and
    concurrency (see ``docs/engines.md``). The report goes to logger
    ``memacct`` at INFO.

    Args:
        result: the profile of this rank, or ``None`` when
            ``kv_cache_memory_bytes`` gives the budget.
        spec: the model's KV-cache geometry on this rank; with
            ``pipeline_parallel_size > 1`` the plan is the whole pipeline's.
        gpu_memory_utilization: fraction of the device's total memory this
            instance may hold, in (0, 1].
        block_size: tokens per KV-cache block (SGLang: its page size);
            ``None``: the engine's default (vLLM 16, SGLang 1).
        max_model_len: longest request, tokens; ``None``: the config's
            ``max_position_embeddings``; ``-1``: the longest that fits (vLLM's auto-fit).
        engine: ``"vllm"``, ``"vllm-ascend"`` or ``"sglang"``.
        kv_cache_memory_bytes: KV-cache budget of each rank in bytes.
        num_gpu_blocks_override: block count, overriding the utilization.
        max_num_batched_tokens: tokens one scheduler step may process
            (``None``: 8192, ``vllm serve``'s default on H100-class devices).
        max_num_seqs: sequences one step may hold (recorded; vLLM's KV plan
            does not depend on it).
        async_scheduling: whether the scheduler runs a step ahead (vLLM's
            default): sliding-window layers then hold one more batch.
        enable_prefix_caching: vLLM's default; Mamba groups keep 3 state blocks.
        allow_mismatch: plan even when the profile recorded another model, layout
            or batch budget than ``spec`` (see :mod:`memacct.planner.guard`).

    Raises:
        InvalidInputError: an argument is out of range, both overrides are
            given, or neither a profile nor ``kv_cache_memory_bytes``.
        InsufficientMemoryError: free memory at start is below the target
            (co-tenants named with their bytes where known); no memory is left
            for even one block; or one request of ``max_model_len`` does not
            fit as the engine counts it (``.estimated_max_model_len`` is the
            engine's estimate of the longest length that does).
    """
    if result is not None and not isinstance(result, ProfileResult):
        raise InvalidInputError(f"plan_kv_cache takes a ProfileResult, got {type(result).__name__}")
    if not isinstance(spec, KVCacheSpec):
        raise InvalidInputError(f"plan_kv_cache takes a KVCacheSpec, got {type(spec).__name__}")
    check_profile_matches(
        result, spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        allow_mismatch=allow_mismatch,
    )
    kv_engine = get_engine(engine).kv
    utilization = check_fraction(
        "gpu_memory_utilization", gpu_memory_utilization, what=_UTILIZATION_MEANS
    )
    block = check_int(
        "block_size", block_size if block_size is not None else kv_engine.default_block_size
    )
    max_len = _resolve_max_model_len(max_model_len, spec)
    batched = check_optional_int("max_num_batched_tokens", max_num_batched_tokens)
    seqs = check_optional_int("max_num_seqs", max_num_seqs)
    kv_override = check_optional_int("kv_cache_memory_bytes", kv_cache_memory_bytes)
    blocks_override = check_optional_int("num_gpu_blocks_override", num_gpu_blocks_override)
    if kv_override is not None and blocks_override is not None:
        raise InvalidInputError(
            f"give kv_cache_memory_bytes ({kv_override}) or num_gpu_blocks_override "
            f"({blocks_override}), not both: each replaces gpu_memory_utilization"
        )
    if result is None and kv_override is None:
        raise InvalidInputError(
            "plan_kv_cache needs a profile (result) or the KV-cache budget: pass "
            "kv_cache_memory_bytes"
        )
    settings = KVSettings(
        block_size=block,
        max_model_len=max_len,
        derived_max_model_len=spec.position_limit,
        max_num_batched_tokens=batched or _DEFAULT_BATCHED_TOKENS,
        max_num_seqs=seqs or _DEFAULT_NUM_SEQS,
        async_scheduling=bool(async_scheduling),
        enable_prefix_caching=bool(enable_prefix_caching),
    )
    if result is None:
        assert kv_override is not None
        layout = kv_engine.plan(spec, kv_override, settings)
        plan = _make_plan(None, spec, layout, settings, kv_override, None, None, (), 0)
        logger.info("%s", plan.report())
        return plan

    # The engine's block bytes, from a budget no request can exceed.
    probe = kv_engine.plan(spec, 1 << 62, settings)
    block_bytes = probe.block_bytes
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    overrides: tuple[str, ...] = ()
    if kv_override is None and blocks_override is None:
        target = int(total * utilization)
        if result.baseline.free < target:
            raise InsufficientMemoryError(_free_at_start_message(result, utilization, target))
        kv_bytes = target - non_kv
        if kv_bytes < block_bytes:
            raise InsufficientMemoryError(
                _no_memory_message(result, utilization, target, probe.block_size, block_bytes)
            )
    else:
        if kv_override is not None:
            overrides = (f"kv_cache_memory_bytes={kv_override}",)
            kv_bytes = kv_override
            if kv_bytes < block_bytes:
                raise InsufficientMemoryError(
                    f"kv_cache_memory_bytes={kv_override} is less than one block of "
                    f"{probe.block_size} tokens ({block_bytes} bytes at {spec.bytes_per_token} "
                    f"bytes per token): give at least {block_bytes} bytes"
                )
        else:
            assert blocks_override is not None
            overrides = (f"num_gpu_blocks_override={blocks_override}",)
            kv_bytes = blocks_override * block_bytes
        target = non_kv + kv_bytes
        _check_override_fits(result, overrides[0], kv_bytes, target)
        logger.warning(
            "%s overrides gpu_memory_utilization=%s: the KV cache gets %s (%d blocks)",
            overrides[0], utilization, format_gib(kv_bytes), kv_bytes // block_bytes,
        )
    limit_note = ""
    room = _allocator_room(result)
    if room is not None and kv_bytes > room:
        if overrides:
            raise InsufficientMemoryError(_override_over_limit_message(result, overrides[0],
                                                                       kv_bytes, room))
        limit_note = _limit_note(result, utilization, kv_bytes, room)
        logger.warning("memacct: %s", limit_note)
        kv_bytes = room
        target = non_kv + kv_bytes
    budget, reserve = (0, 0) if kv_bytes <= 0 else _allocator_budget(kv_bytes, spec, probe, result)
    if budget < block_bytes:
        if limit_note:
            raise InsufficientMemoryError(
                _limit_too_small_message(result, room or 0, probe.block_size, block_bytes))
        raise InsufficientMemoryError(
            _no_memory_message(result, utilization, target, probe.block_size, block_bytes)
        )
    try:
        layout = kv_engine.plan(spec, budget, settings)
    except InsufficientMemoryError as exc:
        if not limit_note:
            raise
        raise InsufficientMemoryError(
            f"{_limit_binds(result)}, and what it leaves does not hold one request: {exc}. "
            f"{_LIMIT_FIX}",
            estimated_max_model_len=exc.estimated_max_model_len,
        ) from None
    plan = _make_plan(result, spec, layout, settings, kv_bytes, target, utilization, overrides,
                      reserve, limit_note)
    for warning in result.warnings:
        logger.warning("memacct: the profile behind this plan is doubtful: %s", warning)
    logger.info("%s", plan.report())
    return plan


def _make_plan(
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
) -> KVCachePlan:
    provenance = None
    if result is not None:
        baseline = result.baseline
        provenance = Provenance(
            backend=result.backend,
            device=result.device,
            truth_source=result.truth_source,
            requested_truth_source=result.requested_truth_source,
            truth_source_reason=result.truth_source_reason,
            fragmentation=result.fragmentation,
            allocator_settings=dict(result.allocator_settings),
            free_at_start=baseline.free,
            other_processes_at_baseline=baseline.other_processes,
            memacct_version=__version__,
            created_at=time.time(),
            overrides=overrides,
            profile_warnings=result.warnings,
        )
    return KVCachePlan(
        engine=layout.engine,
        engine_version=layout.engine_version,
        total_memory=None if result is None else result.after.total,
        gpu_memory_utilization=utilization,
        target_allocation=target,
        non_kv_cache_memory=0 if result is None else result.non_kv_cache_memory,
        weights_memory=0 if result is None else result.weights_memory,
        activation_peak=0 if result is None else result.activation_peak,
        non_allocator_increase=0 if result is None else result.non_allocator_increase,
        cudagraph_memory=0 if result is None else result.cudagraph_memory,
        retained_memory=0 if result is None else result.retained_memory,
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
        groups=layout.groups,
        stage_blocks=layout.stage_blocks,
        engine_notes=layout.notes,
        profile_duration_s=None if result is None else result.duration_s,
        spec=spec,
        provenance=provenance,
        allocator_reserve_bytes=reserve,
        allocator_limit=None if result is None else result.allocator_limit,
        notes=(limit_note,) if limit_note else (),
    )


_LIMIT_FIX = (
    "Raise the allocator's limit (MindSpore: max_device_memory / mindspore.runtime.set_memory"
    "(max_size=...); torch: torch.cuda.set_per_process_memory_fraction, torch_npu: "
    "torch.npu.set_per_process_memory_fraction), or reduce the model's memory (quantize it, "
    "shard it, lower max_num_batched_tokens)"
)


def allocator_held(result: ProfileResult) -> int:
    """Bytes the allocator holds while serving, before its KV cache, as the profile charges them.

    What it held after the profile (weights, graph pools, retained memory; at
    least the baseline's reservation plus the charged terms), the activation
    peak on top, and the fragmentation allowance. The allowance's idle space
    inside the weights' segments (``weights_idle_memory``) is part of what the
    allocator held after the profile, so it counts once, there. Memory outside
    the allocator (``non_allocator_increase``) is not the allocator's.
    """
    idle = result.weights_idle_memory
    charged = (
        result.baseline.reserved + result.weights_memory + result.cudagraph_memory
        + result.retained_memory + idle
    )
    return (
        max(result.after.reserved, charged) + result.activation_peak
        + result.fragmentation_allowance - idle
    )


def _allocator_room(result: ProfileResult) -> int | None:
    """The largest KV budget the profile's allocator limit allows, ``None`` without a limit.

    The budget still has the fragmentation allowance kept free inside it (by
    :func:`_allocator_budget`), so the room is the limit less what the
    allocator holds besides the KV cache and that allowance.
    """
    if result.allocator_limit is None:
        return None
    return result.allocator_limit - allocator_held(result) + result.fragmentation_allowance


def _limit_binds(result: ProfileResult) -> str:
    limit = result.allocator_limit or 0
    return (
        f"the allocator's pool budget of {format_gib(limit)} ({limit} bytes, the most "
        f"the allocator on {_device(result)} may reserve) binds before "
        f"gpu_memory_utilization"
    )


def _limit_note(result: ProfileResult, utilization: float, kv_bytes: int, room: int) -> str:
    held = allocator_held(result)
    return (
        f"{_limit_binds(result)}: the allocator holds {format_gib(held)} besides the KV cache "
        f"(weights, activation peak, graph and retained memory, fragmentation allowance), so the "
        f"KV cache gets {format_gib(room)} ({room} bytes) instead of the {format_gib(kv_bytes)} "
        f"that gpu_memory_utilization={utilization} leaves"
    )


def _limit_too_small_message(
    result: ProfileResult, room: int, block_size: int, block_bytes: int
) -> str:
    held = allocator_held(result)
    return (
        f"No room for the KV cache within the allocator's limit on {_device(result)}: "
        f"{_limit_binds(result)}; the allocator holds {format_gib(held)} ({held} bytes: weights "
        f"{result.weights_memory} + activation peak {result.activation_peak} + fragmentation "
        f"allowance {result.fragmentation_allowance}, graph and retained memory), leaving "
        f"{max(0, room - result.fragmentation_allowance)} bytes, less than one block of "
        f"{block_size} tokens ({block_bytes} bytes) as the allocator rounds it. {_LIMIT_FIX}; "
        f"a lower gpu_memory_utilization does not help here"
    )


def _override_over_limit_message(
    result: ProfileResult, override: str, kv_bytes: int, room: int
) -> str:
    return (
        f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache, but "
        f"{_limit_binds(result)} and leaves at most {max(0, room)} bytes for it beside what the "
        f"allocator already holds ({allocator_held(result)} bytes). Lower the override to at most "
        f"{max(0, room)} bytes, or raise the allocator's limit"
    )


def _allocator_budget(
    kv_bytes: int, spec: KVCacheSpec, probe: KVLayout, result: ProfileResult
) -> tuple[int, int]:
    """The budget handed to the engine, and the bytes kept back for the allocator.

    The profile's fragmentation allowance is kept free. Where the engine's
    tensors on this rank are known (``probe.tensor_pages``, or one block per
    layer: one group, one stage), the allocator's rounding of each tensor is
    kept free too.
    """
    if not (result.fragmentation_allowance or result.growth_granularity_bytes):
        return kv_bytes, 0
    pages = probe.tensor_pages
    single = bool(pages) or (
        len(probe.stage_blocks) <= 1
        and probe.block_bytes == spec.bytes_per_block(probe.block_size)
    )
    if single:
        blocks, _ = _fit_blocks(kv_bytes, spec, probe.block_size, result, pages)
        budget = blocks * probe.block_bytes
    else:
        budget = max(0, kv_bytes - result.fragmentation_allowance)
    return budget, kv_bytes - budget


# Allocators pad a request (torch_npu and MindSpore by 32 bytes) and round it to 512 bytes
# before rounding it to their growth granularity; one minimum block covers both.
_REQUEST_PADDING = 512


def kv_cache_reservation(
    spec: KVCacheSpec,
    num_blocks: int,
    block_size: int,
    granularity: int,
    rounding: str,
    tensor_pages: Sequence[int] = (),
) -> int:
    """Bytes an allocator reserves for a KV cache allocated one tensor per layer.

    Each layer's tensor holds ``num_blocks x block_size`` tokens. ``rounding``
    says how the allocator rounds a large tensor to ``granularity`` (see
    :class:`memacct.BackendQuirks`): ``multiple`` rounds each tensor up to a
    multiple; ``packed`` packs the tensors one after another and rounds their
    sum; ``doubling`` gives each a block of the granularity doubled until it
    fits, and equal tensors that fit together share a block. ``granularity``
    0 means unknown: no rounding. ``tensor_pages`` (the engine's tensors'
    bytes per block, :attr:`memacct.engines.base.KVLayout.tensor_pages`)
    replaces the one-tensor-per-layer layout where the engine's is known.
    """
    tokens = num_blocks * block_size
    if tensor_pages:
        counts = Counter(tensor_pages)
        if granularity <= 0 or num_blocks == 0:
            return num_blocks * sum(tensor_pages)
        sizes = [(count, num_blocks * page + _REQUEST_PADDING) for page, count in counts.items()]
    elif granularity <= 0 or tokens == 0:
        return tokens * spec.bytes_per_token
    else:
        sizes = [
            (group.num_layers, tokens * group.bytes_per_token_per_layer + _REQUEST_PADDING)
            for group in spec.layer_groups
        ]
    if rounding == "packed":
        return -(-sum(count * size for count, size in sizes) // granularity) * granularity
    if rounding == "doubling":
        total = 0
        for count, size in sizes:
            block = granularity
            while block < size:
                block *= 2
            total += -(-count // (block // size)) * block
        return total
    return sum(count * (-(-size // granularity) * granularity) for count, size in sizes)


def _fit_blocks(
    kv_bytes: int,
    spec: KVCacheSpec,
    block_size: int,
    result: ProfileResult,
    tensor_pages: Sequence[int] = (),
) -> tuple[int, int]:
    """The most blocks whose per-layer tensors, as the allocator rounds them, fit the budget.

    The profile's fragmentation allowance is kept free first. Returns the
    block count and the bytes of the budget left to the allocator.
    """
    block_bytes = sum(tensor_pages) if tensor_pages else spec.bytes_per_block(block_size)
    budget = kv_bytes - result.fragmentation_allowance
    granularity = result.growth_granularity_bytes
    rounding = result.growth_rounding
    low, high = 0, max(0, budget) // block_bytes
    # The reservation only grows with the block count, so bisect.
    while low < high:
        mid = (low + high + 1) // 2
        reserved = kv_cache_reservation(spec, mid, block_size, granularity, rounding, tensor_pages)
        if reserved <= budget:
            low = mid
        else:
            high = mid - 1
    if low == 0:
        return 0, 0
    rounding_bytes = kv_cache_reservation(
        spec, low, block_size, granularity, rounding, tensor_pages)
    return low, result.fragmentation_allowance + rounding_bytes - low * block_bytes


_UTILIZATION_MEANS = (
    ": it is the fraction of the device's total memory this instance may hold "
    "(vLLM's default is 0.9)"
)


def _resolve_max_model_len(value: object, spec: KVCacheSpec) -> int:
    if value == -1 and not isinstance(value, bool):
        return -1
    if value is not None:
        return check_int("max_model_len", value)
    if spec.position_limit is None:
        raise InvalidInputError(
            f"the config of {spec.model_name} gives no max_position_embeddings: "
            f"pass max_model_len"
        )
    # vLLM's default max_model_len is the config's derived length (ModelConfig.position_limit).
    return spec.position_limit


def _device(result: ProfileResult) -> str:
    return f"{result.backend}:{result.device}"


def _co_tenants(result: ProfileResult) -> str:
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


def _free_at_start_message(result: ProfileResult, utilization: float, target: int) -> str:
    free = result.baseline.free
    total = result.after.total
    most = math.floor(free / total * 1000) / 1000
    fix = "free memory on the device (stop or shrink the other processes)"
    if most > 0:
        fix = f"decrease gpu_memory_utilization to at most {most}, or {fix}"
    return (
        f"Free memory on device {_device(result)} at start ({format_gib(free)}, {free} bytes) "
        f"is less than desired memory utilization {utilization} ({format_gib(target)}, "
        f"{target} bytes of {format_gib(total)}); {_co_tenants(result)}: {fix}"
    )


def _no_memory_message(
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
        f"No available memory for the cache blocks on {_device(result)}: the target allocation "
        f"is {format_gib(target)} ({target} bytes = {utilization} x {total}) and the model "
        f"needs {format_gib(non_kv)} ({non_kv} bytes) besides the cache (weights "
        f"{result.weights_memory} + activation peak {result.activation_peak} + non-allocator "
        f"increase {result.non_allocator_increase}), leaving {target - non_kv} bytes, less than "
        f"one block of {block_size} tokens ({block_bytes} bytes). {fix} reduce the model's "
        f"memory (quantize it, shard it with tensor or pipeline parallelism, or lower "
        f"max_num_batched_tokens)"
    )


def _check_override_fits(result: ProfileResult, override: str, kv_bytes: int, target: int) -> None:
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    if target > total:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache, but "
            f"{_device(result)} has {total} bytes in all and the model needs {non_kv} besides "
            f"the cache, so at most {total - non_kv} bytes can ever hold it: lower the override"
        )
    free = result.baseline.free
    if target > free:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache; with "
            f"{non_kv} bytes of non-KV memory this instance needs {target} bytes, more than "
            f"the {free} bytes ({format_gib(free)}) free on {_device(result)} at start; "
            f"{_co_tenants(result)}. Lower the override to at most {free - non_kv} bytes, or "
            f"free memory on the device"
        )
