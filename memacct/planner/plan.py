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

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memacct._attrs import same_named
from memacct._log import logger
from memacct._version import __version__
from memacct.checks import check_fraction, check_int, check_optional_int, check_type
from memacct.engines import get_engine
from memacct.engines.accepts import check_block_size
from memacct.engines.base import KVBlock, KVLayout, KVSettings
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.io import atomic_write_text, read_text
from memacct.model.config import NO_LENGTH_MAX_MODEL_LEN
from memacct.model.spec import KVCacheSpec
from memacct.models import ProfileResult, load_model_json
from memacct.planner.allocator_fit import allocator_budget, allocator_room
from memacct.planner.budget import MemoryBudget, batch_defaults_for, profile_budget
from memacct.planner.guard import check_profile_matches, unrecorded_notes
from memacct.planner.refusals import (
    LIMIT_FIX,
    allocator_limit_note,
    check_override_fits,
    free_at_start_message,
    limit_binds,
    limit_too_small_message,
    no_memory_message,
    override_over_limit_message,
)
from memacct.planner.result import KVCachePlan, Provenance, fits_verdict
from memacct.units import format_gib

__all__ = [
    "load_profile",
    "make_plan",
    "plan_from_budget",
    "plan_from_profile",
    "plan_kv_cache",
    "save_profile",
]


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
        enable_prefix_caching: vLLM's default; Mamba groups keep 2 state blocks plus checkpoints.
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
    default_tokens, default_seqs = batch_defaults_for(
        chosen, result, estimated, batched, seqs, max_len if max_len > 0 else None
    )
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
    plan = plan_from_profile(result, spec, settings, engine, utilization, kv_override,
                             blocks_override)  # fmt: skip
    trusted = unrecorded_notes(result, spec, max_num_batched_tokens=batched, max_num_seqs=seqs)
    if trusted:
        plan = plan.model_copy(update={"notes": (*plan.notes, *trusted)})
    for warning in result.warnings:
        logger.warning("memacct: the profile behind this plan is doubtful: %s", warning)
    logger.info("%s", plan.report())
    return plan


def plan_from_profile(
    result: ProfileResult,
    spec: KVCacheSpec,
    settings: KVSettings,
    engine: str,
    utilization: float,
    kv_override: int | None,
    blocks_override: int | None,
) -> KVCachePlan:
    """The plan of a measured profile: the target less what the profile measured (or an
    override's cache), within the allocator's limit, with the allocator's rounding and the
    fragmentation allowance kept free, handed to the engine's KV-cache manager.

    Raises:
        InsufficientMemoryError: as :func:`plan_kv_cache` says, naming the numbers and the fix.
    """
    kv_engine = get_engine(engine).kv
    pool = kv_engine.block(spec, settings)
    kv_bytes, target, overrides = _profile_kv_bytes(
        result, spec, pool, utilization, kv_override, blocks_override
    )
    limit_note = ""
    room = allocator_room(result)
    if room is not None and kv_bytes > room:
        if overrides:
            raise InsufficientMemoryError(override_over_limit_message(result, overrides[0],
                                                                       kv_bytes, room))
        limit_note = allocator_limit_note(result, utilization, kv_bytes, room)
        logger.warning("memacct: %s", limit_note)
        kv_bytes = room
        target = result.non_kv_cache_memory + kv_bytes
    budget, reserve = (0, 0) if kv_bytes <= 0 else allocator_budget(kv_bytes, spec, pool, result)
    if budget < pool.block_bytes:
        if limit_note:
            raise InsufficientMemoryError(
                limit_too_small_message(result, room or 0, pool.block_size, pool.block_bytes))
        raise InsufficientMemoryError(
            no_memory_message(result, utilization, target, pool.block_size, pool.block_bytes)
        )
    try:
        layout = kv_engine.plan(spec, budget, settings)
    except InsufficientMemoryError as exc:
        if not limit_note:
            raise
        raise InsufficientMemoryError(
            f"{limit_binds(result)}, and what it leaves does not hold one request: {exc}. "
            f"{LIMIT_FIX}",
            estimated_max_model_len=exc.estimated_max_model_len,
        ) from None
    return make_plan(result, spec, layout, settings, kv_bytes, target, utilization, overrides,
                     reserve, limit_note)  # fmt: skip


def _profile_kv_bytes(
    result: ProfileResult,
    spec: KVCacheSpec,
    pool: KVBlock,
    utilization: float,
    kv_override: int | None,
    blocks_override: int | None,
) -> tuple[int, int, tuple[str, ...]]:
    """The KV budget a profile leaves at ``utilization``, or an override's, with the target
    it makes and the override named; refused where the device cannot hold it."""
    block_bytes = pool.block_bytes
    non_kv = result.non_kv_cache_memory
    if kv_override is None and blocks_override is None:
        target = int(result.after.total * utilization)
        if result.baseline.free < target:
            raise InsufficientMemoryError(free_at_start_message(result, utilization, target))
        kv_bytes = target - non_kv
        if kv_bytes < block_bytes:
            raise InsufficientMemoryError(
                no_memory_message(result, utilization, target, pool.block_size, block_bytes)
            )
        return kv_bytes, target, ()
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
    return kv_bytes, target, overrides


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


_RECORDED_FIELDS = ("backend", "device", "truth_source", "requested_truth_source",
                    "truth_source_reason", "fragmentation")  # fmt: skip
"""The fields of a :class:`ProfileResult` its plan's :class:`Provenance` carries as they are."""


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
            **{name: getattr(result, name) for name in _RECORDED_FIELDS},
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
        **same_named(layout, "engine", "engine_version", "request_bytes"),
        **same_named(settings, "max_num_batched_tokens", "max_num_seqs", "async_scheduling"),
        target_allocation=target,
        kv_cache_bytes=kv_bytes,
        num_tokens=layout.num_blocks * layout.block_size,
        kv_cache_used_bytes=layout.used_bytes,
        layout=layout,
        profile_duration_s=None if result is None else result.duration_s,
        spec=spec,
        provenance=provenance,
        allocator_reserve_bytes=reserve,
        allocator_limit=None if result is None else result.allocator_limit,
        notes=notes,
        model=spec.model_name,
        budget=budget,
        verdict=fits_verdict(layout.max_concurrency, layout.max_model_len, layout.used_bytes,
                             settings.max_num_seqs),
    )


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
