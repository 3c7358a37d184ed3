"""An engine's start-up planned offline: does a model fit on a device, and for how many requests.

:func:`plan_offline` is what ``memacct plan --model X --device Y`` runs: the
engine's start-up estimated without any device, term by term as the engine
computes it (``engines/<engine>/startup.py``), turned into the plan's non-KV
budget (:class:`~memacct.planner.budget.MemoryBudget`) and handed to the one
planner, :func:`memacct.plan_kv_cache`, like a measured profile. The result is
a :class:`~memacct.planner.result.KVCachePlan` whose verdict a person reads
first ("fits: N concurrent requests of L tokens" or "does not fit: ..." with
what to change, :mod:`memacct.planner.advice`). It needs no simulator and
answers in milliseconds.

Example::

    >>> from memacct.planner import load_model_preset
    >>> plan = plan_offline(load_model_preset("qwen2.5-7b"), device="h100-80gb")
    >>> plan.fits
    True
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from memacct.engines.base import StartupModel, StartupRequest
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.model.config import ModelConfig
from memacct.model.spec import KVCacheSpec
from memacct.planner.budget import MemoryBudget
from memacct.planner.options import PlanOptions
from memacct.planner.result import KVCachePlan
from memacct.units import format_gib

if TYPE_CHECKING:
    from memacct.engines.base import StartupEstimate

__all__ = [
    "CapacityRow",
    "OfflineDevice",
    "PlanT",
    "default_device",
    "plan_capacity",
    "plan_offline",
    "position_limit",
    "resolve_offline_device",
    "smallest_serving",
    "with_source_notes",
]

def position_limit(config: Mapping[str, Any] | ModelConfig) -> int | None:
    """The longest ``max_model_len`` vLLM accepts for a config (its derived max_model_len).

    One owner: :attr:`memacct.model.config.ModelConfig.position_limit`.
    """
    found = ModelConfig.of(config).position_limit
    return None if found is None else found[0]


@dataclass(frozen=True)
class OfflineDevice:
    """The device an offline plan is made for."""

    total: int
    name: str
    label: str
    info: Any = None
    """Its :class:`memacct.devices.DeviceInfo`; ``None`` for a device given by its size."""
    note: str = ""


def default_device(engine: str) -> str:
    """The device preset an offline plan with neither ``device`` nor ``device_memory`` is
    made for: the engine's own (:attr:`memacct.engines.base.Engine.default_device`), for a
    single plan and every row of a capacity plan alike."""
    from memacct.engines import get_engine

    return get_engine(engine).default_device


def resolve_offline_device(options: PlanOptions) -> OfflineDevice:
    """The device of ``options``: a preset, a size, or the engine's reference device (noted).

    Raises:
        InvalidInputError: an unknown device, or one the engine does not run on.
    """
    from memacct.devices import DEVICE_INFO, memory_notes, resolve_device
    from memacct.engines.accepts import ENGINE_VENDORS, UNPLANNED_VENDORS

    vendors = ENGINE_VENDORS.get(options.engine)
    if options.device_memory is not None:
        size = options.device_memory
        return OfflineDevice(size, "custom", f"a device of {format_gib(size)}")
    if options.device is not None:
        info = resolve_device(options.device)
        if vendors is not None and info.vendor not in vendors:
            runs_on = [e for e, v in ENGINE_VENDORS.items() if info.vendor in v]
            unplanned = UNPLANNED_VENDORS.get((options.engine, info.vendor))
            verb = "is not planned by memacct on" if unplanned else "does not run on"
            why = f" ({unplanned})" if unplanned else ""
            raise InvalidInputError(
                f"--engine {options.engine} {verb} the {info.label} ({info.name}, an "
                f"{info.vendor} device){why}: plan it with --engine "
                f"{' or '.join(runs_on) or '...'}, or give one of its devices "
                f"({', '.join(vendors)})"
            )
        notes = memory_notes(info, options.engine, options.gpu_memory_utilization)
        return OfflineDevice(info.total_bytes, info.name, info.label, info, "; ".join(notes))
    info = DEVICE_INFO[default_device(options.engine)]
    note = (
        f"no device given: planned for an {info.label} ({info.name}, "
        f"{format_gib(info.total_bytes)}); pass --device or --device-memory"
    )
    return OfflineDevice(info.total_bytes, info.name, info.label, info, note)


def _check_kv_dtype(options: PlanOptions, device: OfflineDevice, kv_dtype: str) -> None:
    if device.info is not None and kv_dtype.startswith("fp8") and not device.info.fp8_kv_cache:
        raise InvalidInputError(
            f"--kv-cache-dtype {options.kv_cache_dtype}: {options.engine} has no FP8 KV cache "
            f"on the {device.info.label}; drop it (or give --kv-cache-dtype auto)"
        )


PlanT = TypeVar("PlanT", bound=KVCachePlan)


def with_source_notes(plan: PlanT, notes: tuple[str, ...]) -> PlanT:
    """``plan`` with what reading its model assumed (:attr:`ModelSource.notes
    <memacct.model.sources.resolve.ModelSource.notes>`: a preset for an unreachable Hub id, a
    GGUF file's config) first among its notes, so the JSON, the table and the report say it too."""
    fresh = tuple(note for note in notes if note not in plan.notes)
    return plan.model_copy(update={"notes": (*fresh, *plan.notes)}) if fresh else plan


def plan_offline(
    config: Mapping[str, Any] | str | os.PathLike[str],
    options: PlanOptions | None = None,
    *,
    revision: str | None = None,
    **kwargs: Any,
) -> KVCachePlan:
    """Plan an engine's KV cache offline: does the model fit on the device, and how many requests.

    Args:
        config: the model's ``config.json``, or a model's name as ``memacct plan --model``
            takes it (a preset, a config or checkpoint path, a ``.gguf`` file, a Hub id:
            :func:`memacct.model.sources.resolve.resolve_model`); a checkpoint's tensor table, when
            read, gives the weights.
        revision: the Hub revision of a Hub id.
        options: the plan's options (:class:`memacct.planner.options.PlanOptions`); keywords
            replace single fields (``plan_offline(config, device="l4", max_num_seqs=64)``).
            With neither ``device`` nor ``device_memory``: the engine's reference device
            (an H100 80GB for the GPU engines), said in the notes.

    Returns:
        The plan; ``fits`` False (with the verdict and the suggestions, most effective
        first) where the engine would refuse to start.

    Raises:
        InvalidInputError: an option out of range, an unknown device or engine, a release
            or setting the engine or device does not take, or ``max_model_len`` beyond the
            model's position limit (as the engine refuses it).
        ConfigError: the config lacks a size the estimate needs.
        UnknownQuantizationError: the checkpoint's quantization is not one memacct can size.
    """
    source_notes: tuple[str, ...] = ()
    if not isinstance(config, Mapping):
        from memacct.model.sources.resolve import resolve_model

        source = resolve_model(config, revision)
        source_notes = source.notes
        config = source.config
        if source.table is not None:
            kwargs.setdefault("checkpoint", source.table)
        if not isinstance(options, PlanOptions) or options.model_name == "model":
            kwargs.setdefault("model_name", source.name)
    elif revision is not None:
        raise InvalidInputError(
            f"revision {revision!r} applies to a model named by its Hub id: give the id "
            "(plan_offline('org/name', revision=...)) instead of a config dict"
        )
    opts = PlanOptions.from_kwargs(options, **kwargs)
    if not source_notes:
        return _plan_offline(config, opts)

    return with_source_notes(_plan_offline(config, opts), source_notes)


def _plan_offline(config: Mapping[str, Any], opts: PlanOptions) -> KVCachePlan:
    """:func:`plan_offline` of a config already read."""
    from memacct.engines import get_engine
    from memacct.engines.deployment import serve_deployment
    from memacct.engines.vllm.defaults import serving_kv_cache_dtype
    from memacct.engines.vllm.releases import check_sampler
    from memacct.model.weights.estimate import estimate_weights
    from memacct.planner.capability import check_loadable
    from memacct.planner.plan import plan_kv_cache

    chosen = get_engine(opts.engine)
    startup = chosen.startup
    block_size = opts.block_size or chosen.kv.default_block_size
    sampler = check_sampler(opts.sampler)
    if sampler is not None and opts.engine != "vllm":
        raise InvalidInputError(
            f"--sampler {sampler} chooses among vLLM's CUDA top-k/top-p paths; {opts.engine} "
            "samples its own way (drop --sampler, or plan with --engine vllm)"
        )
    deployment = serve_deployment(opts)
    device = resolve_offline_device(opts)
    # The plan's one reading of the model: the spec, the start-up, the weights and the
    # forward pass all take it (and the spec) instead of reading config.json again. Its
    # source is the name KVCacheSpec.from_hf_config gives a config dict, for its messages.
    model = ModelConfig(config, "the model config")
    kv_dtype = serving_kv_cache_dtype(model, opts.kv_cache_dtype)
    _check_kv_dtype(opts, device, kv_dtype)
    check_loadable(device.info, opts.engine, config.get("quantization_config"),
                   deployment.quantization if deployment is not None else None,
                   "gguf" if getattr(opts.checkpoint, "origin", "") == "gguf" else None)
    tp = opts.tensor_parallel_size
    spec = KVCacheSpec.from_hf_config(model, kv_cache_dtype=kv_dtype, tensor_parallel_size=tp)
    profiled_len, max_len, length_notes = _lengths(model, opts)
    weights = None
    if opts.checkpoint is not None:
        weights = estimate_weights(opts.checkpoint, tensor_parallel_size=tp)
    settings = startup.settings(
        tensor_parallel_size=tp,
        gpu_memory_utilization=opts.gpu_memory_utilization,
        max_model_len=profiled_len,
        max_num_batched_tokens=opts.max_num_batched_tokens,
        max_num_seqs=opts.max_num_seqs,
        enforce_eager=opts.enforce_eager,
        kv_cache_dtype=kv_dtype,
        block_size=block_size,
        engine_version=opts.engine_version,
        sampler=sampler,
        flashinfer_sampler_env=opts.flashinfer_sampler_env,
        mxfp4_layout=device.info.mxfp4_layout if device.info is not None else "marlin",
        **({"deployment": deployment} if deployment is not None else {}),
    )
    request = StartupRequest(config, device.total, device.name, settings, weights, model, spec)
    est = startup.start(request)
    if opts.enforce_eager and not est.cudagraph_memory:
        _refuse_if_idle_eager(startup, request, est, opts.engine)
    spec = est.kv_spec or spec  # a drafter's layers, a pipeline stage's
    budget = MemoryBudget.from_estimate(
        est, device=device.name, device_label=device.label, enforce_eager=opts.enforce_eager,
        notes=(*((device.note,) if device.note else ()), *length_notes),
    )  # fmt: skip
    try:
        plan = plan_kv_cache(
            budget, spec, engine=opts.engine, kv_cache_memory_bytes=opts.kv_cache_memory_bytes,
            block_size=block_size, max_model_len=max_len,
            max_num_batched_tokens=est.max_num_batched_tokens, max_num_seqs=est.max_num_seqs,
            engine_options=opts.engine_options(),
        )  # fmt: skip
    except InsufficientMemoryError as refusal:
        from memacct.planner.advice import refused_plan

        return refused_plan(
            config, opts, budget, spec, est, refusal, startup=startup, settings=settings,
            device=device, block_size=block_size, max_len=profiled_len,
        )  # fmt: skip
    # The release followed is the start-up's (its KV-cache manager's rules are the newest).
    plan = plan.model_copy(update={"model": opts.model_name, "engine_version": est.version})
    # A layout guessed for an architecture without a rule is the plan's first caveat.
    return with_source_notes(plan, tuple(n for n in spec.notes if _GUESS in n))


def _lengths(model: ModelConfig, opts: PlanOptions) -> tuple[int, int, tuple[str, ...]]:
    """The length the start-up profiles, the plan's ``max_model_len`` (``-1``: an auto-fit)
    and a note when the config gave none (vLLM's default, ``ModelConfig.default_max_model_len``).

    Raises:
        InvalidInputError: ``max_model_len`` beyond the position limit, not allowed.
    """
    found = model.position_limit
    limit = None if found is None else found[0]
    asked = opts.max_model_len
    too_long = asked is not None and limit is not None and asked > limit
    if too_long and not opts.allow_long_max_model_len:
        raise InvalidInputError(
            f"max_model_len {asked} is beyond {opts.model_name}'s position limit ({limit} "
            f"tokens, from its config.json): {opts.engine} refuses it at start; the largest "
            f"max_model_len it accepts is {limit} (or allow it explicitly: "
            "--allow-long-max-model-len, vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    profiled_len = asked if asked is not None and asked > 0 else model.default_max_model_len
    notes: tuple[str, ...] = ()
    if limit is None and asked is None:
        notes = (f"the config gives none of vLLM's length keys: max_model_len "
                 f"{profiled_len}, the length vLLM assumes then (pass --max-model-len)",)
    return profiled_len, asked if asked is not None else profiled_len, notes


_GUESS = "because assume_full_attention was given"
"""The words of :func:`memacct.model.arch_rules.resolve_rule`'s note on a guessed layout."""


def _refuse_if_idle_eager(startup: StartupModel, request: StartupRequest,
                          est: StartupEstimate, engine: str) -> None:
    """Refuse ``--enforce-eager`` where the engine's start-up, as modelled, is the same
    without it (no graph memory, no other term moved): an option that does nothing."""
    from dataclasses import replace

    assert request.settings is not None
    graphs = startup.start(
        replace(request, settings=replace(request.settings, enforce_eager=False))
    )
    terms = ("requested_memory", "activation_peak", "non_allocator_increase",
             "cudagraph_memory", "weights_memory")  # fmt: skip
    if all(getattr(graphs, t, None) == getattr(est, t, None) for t in terms):
        raise InvalidInputError(
            f"--enforce-eager changes nothing in {engine}'s start-up as memacct models it (no "
            "graph memory is charged without it either): drop it"
        )


@dataclass(frozen=True)
class CapacityRow:
    """One configuration of a capacity plan: a device and a tensor-parallel degree.

    ``plan`` is ``None`` where the configuration is refused before any plan (a degree
    the model's heads do not divide, an engine that does not run on the device);
    ``refusal`` then says why.
    """

    device: str
    tensor_parallel_size: int
    plan: KVCachePlan | None
    refusal: str = ""

    @property
    def concurrency(self) -> float:
        """Requests of ``max_model_len`` served at once (0 where it does not fit)."""
        return self.plan.max_concurrency if self.plan is not None and self.plan.fits else 0.0


def plan_capacity(
    config: Mapping[str, Any],
    devices: str | Sequence[str],
    tensor_parallel_sizes: int | str | Sequence[int],
    options: PlanOptions | None = None,
    **kwargs: Any,
) -> list[CapacityRow]:
    """Plan every device x tensor-parallel degree: does the model fit, with how much KV cache
    and for how many requests. ``devices`` and ``tensor_parallel_sizes`` are sequences or
    the CLI's comma lists (``"h100,l4"``, ``"1,2"``); ``options`` (or keywords) as for
    :func:`plan_offline`; its ``device`` and ``tensor_parallel_size`` are replaced per row.

    Raises:
        InvalidInputError: an unknown device, or options wrong on every row alike.
    """
    from memacct.devices import resolve_device
    from memacct.planner.options import capacity_lists

    devices, tensor_parallel_sizes = capacity_lists(devices, tensor_parallel_sizes)
    opts = PlanOptions.from_kwargs(options, **kwargs)
    rows = []
    for device in devices:
        name = resolve_device(device).name
        for tp in tensor_parallel_sizes:
            one = PlanOptions.from_kwargs(opts, device=name, tensor_parallel_size=tp)
            try:
                rows.append(CapacityRow(name, tp, plan_offline(config, one)))
            except InvalidInputError as exc:
                rows.append(CapacityRow(name, tp, None, str(exc)))
    return rows


def smallest_serving(rows: list[CapacityRow], min_concurrency: float) -> CapacityRow | None:
    """The configuration with the fewest devices (then the least memory on each) whose plan
    serves ``min_concurrency`` requests of its ``max_model_len`` at once; ``None``: none does."""
    if isinstance(min_concurrency, bool) or not isinstance(min_concurrency, (int, float)) or not (
        math.isfinite(min_concurrency) and min_concurrency > 0
    ):
        raise InvalidInputError(
            f"min_concurrency must be a positive number of requests, got {min_concurrency!r}: "
            "give e.g. 8"
        )
    serving = [row for row in rows if row.concurrency >= min_concurrency]
    if not serving:
        return None

    def size(row: CapacityRow) -> tuple[int, int]:
        assert row.plan is not None and row.plan.total_memory is not None
        return row.tensor_parallel_size, row.plan.total_memory

    return min(serving, key=size)
