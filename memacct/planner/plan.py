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
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memacct.checks import check_fraction, check_int, check_optional_int, check_type
from memacct.engines import get_engine
from memacct.engines.base import KVBlock, KVSettings, check_block_size
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.io import atomic_write_text, read_text
from memacct.model.config import NO_LENGTH_MAX_MODEL_LEN
from memacct.model.spec import KVCacheSpec
from memacct.models import ProfileResult, load_model_json
from memacct.planner.guard import check_profile_matches, unrecorded_notes
from memacct.planner.pipeline import (
    batch_defaults_for,
    check_override_fits,
    free_at_start_message,
    make_plan,
    no_memory_message,
    plan_from_budget,
)
from memacct.planner.pipeline import device_of as _device
from memacct.planner.result import (
    PLAN_FORMAT_VERSION,
    Agreement,
    KVCachePlan,
    MemoryBudget,
    Provenance,
)
from memacct.units import format_gib

__all__ = [
    "PLAN_FORMAT_VERSION",
    "Agreement",
    "KVCachePlan",
    "MemoryBudget",
    "Provenance",
    "kv_cache_reservation",
    "load_profile",
    "plan_kv_cache",
    "save_profile",
]

logger = logging.getLogger("memacct")


def save_profile(result: ProfileResult, path: str | os.PathLike[str]) -> Path:
    """Write a profile as JSON, for planning later (``memacct plan --profile``); returns the path.

    Raises:
        InvalidInputError: ``result`` is not a :class:`~memacct.ProfileResult`.
        ConfigError: the file cannot be written.
    """
    if not isinstance(result, ProfileResult):
        raise InvalidInputError(f"save_profile takes a ProfileResult, got {type(result).__name__}")
    check_type("path", path, (str, os.PathLike), "a file path")
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
    result: ProfileResult | MemoryBudget | None,
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
    engine_options: Mapping[str, float | int | str] | None = None,
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
        result: the profile of this rank; or the non-KV budget of an engine's
            start-up estimated offline (:class:`MemoryBudget`, what
            :func:`memacct.planner.offline.plan_offline` passes); or ``None`` when
            ``kv_cache_memory_bytes`` gives the budget.
        spec: the model's KV-cache geometry on this rank; with
            ``pipeline_parallel_size > 1`` the plan is the whole pipeline's.
        gpu_memory_utilization: fraction of the device's total memory this
            instance may hold, in (0, 1].
        block_size: tokens per KV-cache block (SGLang: its page size);
            ``None``: the engine's default (vLLM 16, SGLang 1).
        max_model_len: longest request, tokens; ``None``: vLLM's default, the spec's
            ``position_limit`` (2048 for a config without a length key,
            :attr:`memacct.model.config.ModelConfig.default_max_model_len`); ``-1``: the
            longest that fits (vLLM's auto-fit).
        engine: ``"vllm"``, ``"vllm-ascend"`` or ``"sglang"``.
        kv_cache_memory_bytes: KV-cache budget of each rank in bytes.
        num_gpu_blocks_override: block count, overriding the utilization.
        max_num_batched_tokens: tokens one scheduler step may process
            (``None``: what the profile or budget recorded, else the engine's
            default for the device, :meth:`StartupModel.defaults`; without a
            device, for :data:`memacct.devices.REFERENCE_DEVICE`).
        max_num_seqs: sequences one step may hold (recorded; vLLM's KV plan
            does not depend on it); ``None`` as ``max_num_batched_tokens``.
        async_scheduling: whether the scheduler runs a step ahead (vLLM's
            default): sliding-window layers then hold one more batch.
        enable_prefix_caching: vLLM's default; Mamba groups keep 3 state blocks.
        engine_options: the engine's own options, named as its flags are (SGLang:
            ``swa_full_tokens_ratio``, ``mamba_ssm_dtype``, ``max_running_requests``;
            ``docs/engines.md``); an engine without such an option refuses it.
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
    estimated = result if isinstance(result, MemoryBudget) else None
    if estimated is not None:
        result = None
    if result is not None and not isinstance(result, ProfileResult):
        raise InvalidInputError(
            f"plan_kv_cache takes a ProfileResult or a MemoryBudget, got {type(result).__name__}"
        )
    if not isinstance(spec, KVCacheSpec):
        raise InvalidInputError(f"plan_kv_cache takes a KVCacheSpec, got {type(spec).__name__}")
    for flag, value in (("allow_mismatch", allow_mismatch), ("async_scheduling", async_scheduling),
                        ("enable_prefix_caching", enable_prefix_caching)):  # fmt: skip
        check_type(flag, value, bool, "True or False")  # "no" is truthy: never read as a bool
    check_profile_matches(
        result, spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        allow_mismatch=allow_mismatch,
    )
    chosen = get_engine(engine)
    kv_engine = chosen.kv
    utilization = check_fraction(
        "gpu_memory_utilization", gpu_memory_utilization, what=_UTILIZATION_MEANS
    )
    block = check_int(
        "block_size", block_size if block_size is not None else kv_engine.default_block_size
    )
    if block_size is not None:
        check_block_size(engine, block)
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
    if result is None and estimated is None and kv_override is None:
        raise InvalidInputError(
            "plan_kv_cache needs a profile (result) or the KV-cache budget: pass "
            "kv_cache_memory_bytes"
        )
    default_tokens, default_seqs = batch_defaults_for(chosen, result, estimated, batched, seqs)
    settings = KVSettings(
        block_size=block,
        max_model_len=max_len,
        derived_max_model_len=spec.position_limit,
        max_num_batched_tokens=batched or default_tokens,
        max_num_seqs=seqs or default_seqs,
        async_scheduling=bool(async_scheduling),
        enable_prefix_caching=bool(enable_prefix_caching),
        engine_options=_engine_options(kv_engine, engine, engine_options),
    )
    if estimated is not None:
        return plan_from_budget(estimated, spec, settings, engine, kv_override, blocks_override)
    if result is None:
        assert kv_override is not None
        layout = kv_engine.plan(spec, kv_override, settings)
        plan = make_plan(None, spec, layout, settings, kv_override, None, None, (), 0)
        logger.info("%s", plan.report())
        return plan

    pool = kv_engine.block(spec, settings)
    block_bytes = pool.block_bytes
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    overrides: tuple[str, ...] = ()
    if kv_override is None and blocks_override is None:
        target = int(total * utilization)
        if result.baseline.free < target:
            raise InsufficientMemoryError(free_at_start_message(result, utilization, target))
        kv_bytes = target - non_kv
        if kv_bytes < block_bytes:
            raise InsufficientMemoryError(
                no_memory_message(result, utilization, target, pool.block_size, block_bytes)
            )
    else:
        if kv_override is not None:
            overrides = (f"kv_cache_memory_bytes={kv_override}",)
            kv_bytes = kv_override
            if kv_bytes < block_bytes:
                raise InsufficientMemoryError(
                    f"kv_cache_memory_bytes={kv_override} is less than one block of "
                    f"{pool.block_size} tokens ({block_bytes} bytes at {spec.bytes_per_token} "
                    f"bytes per token): give at least {block_bytes} bytes"
                )
        else:
            assert blocks_override is not None
            overrides = (f"num_gpu_blocks_override={blocks_override}",)
            kv_bytes = blocks_override * block_bytes
        target = non_kv + kv_bytes
        check_override_fits(result, overrides[0], kv_bytes, target)
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
    budget, reserve = (0, 0) if kv_bytes <= 0 else _allocator_budget(kv_bytes, spec, pool, result)
    if budget < block_bytes:
        if limit_note:
            raise InsufficientMemoryError(
                _limit_too_small_message(result, room or 0, pool.block_size, block_bytes))
        raise InsufficientMemoryError(
            no_memory_message(result, utilization, target, pool.block_size, block_bytes)
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
    plan = make_plan(result, spec, layout, settings, kv_bytes, target, utilization, overrides,
                      reserve, limit_note)
    trusted = unrecorded_notes(result, spec, max_num_batched_tokens=batched, max_num_seqs=seqs)
    if trusted:
        plan = plan.model_copy(update={"notes": (*plan.notes, *trusted)})
    for warning in result.warnings:
        logger.warning("memacct: the profile behind this plan is doubtful: %s", warning)
    logger.info("%s", plan.report())
    return plan


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
    kv_bytes: int, spec: KVCacheSpec, block: KVBlock, result: ProfileResult
) -> tuple[int, int]:
    """The budget handed to the engine, and the bytes kept back for the allocator.

    The profile's fragmentation allowance is kept free. Where the engine's
    tensors on this rank are known (``block.tensor_pages``, or one block per
    layer: one group, one stage), the allocator's rounding of each tensor is
    kept free too.
    """
    if not (result.fragmentation_allowance or result.growth_granularity_bytes):
        return kv_bytes, 0
    pages = block.tensor_pages
    single = bool(pages) or (
        spec.pipeline_parallel_size <= 1
        and block.block_bytes == spec.bytes_per_block(block.block_size)
    )
    if single:
        blocks, _ = _fit_blocks(kv_bytes, spec, block.block_size, result, pages)
        budget = blocks * block.block_bytes
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


def _engine_options(
    kv_engine: Any, engine: str, options: Mapping[str, float | int | str] | None
) -> dict[str, float | int | str]:
    """``options`` if ``engine`` has them (its manager's ``options``), else refused."""
    if options is not None and not isinstance(options, Mapping):
        raise InvalidInputError(
            f"engine_options must be a mapping of option name to value, got {options!r} "
            f"({type(options).__name__})"
        )
    given = dict(options or {})
    accepted = tuple(getattr(kv_engine, "options", ()))
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise InvalidInputError(
            f"engine option(s) {', '.join(unknown)} are not {engine} options memacct models: "
            + (f"give {', '.join(accepted)}" if accepted else f"{engine} takes none")
        )
    return given


def _resolve_max_model_len(value: object, spec: KVCacheSpec) -> int:
    if value == -1 and not isinstance(value, bool):
        return -1
    if value is not None:
        return check_int("max_model_len", value)
    # vLLM's default max_model_len is the config's derived length, else its 2048: the owner
    # is ModelConfig.default_max_model_len, whose position limit the spec carries.
    return spec.position_limit or NO_LENGTH_MAX_MODEL_LEN
