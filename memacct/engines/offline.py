"""An engine's start-up planned offline: does a model fit on a device, and for how many requests.

:func:`plan_offline` is what ``memacct plan --model X --device Y`` runs: the
engine's start-up estimated without any device, term by term as the engine
computes it (``engines/<engine>/startup.py``), the KV cache counted by the
engine's own KV-cache manager (``engines/<engine>/kv.py``), and a verdict a
person reads first ("fits: N concurrent requests of L tokens" or "does not
fit: ..." with what to change). It needs no simulator and answers in
milliseconds.

Example::

    >>> from memacct.planner import load_model_preset
    >>> plan = plan_offline(load_model_preset("qwen2.5-7b"), device="h100-80gb")
    >>> plan.fits
    True
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from memacct.checks import FROZEN, check_int, check_optional_int
from memacct.errors import InsufficientMemoryError, InvalidInputError, MemacctError
from memacct.planner.spec import KVCacheSpec
from memacct.units import format_gib

__all__ = ["OfflinePlan", "plan_offline", "position_limit"]


class OfflinePlan(BaseModel):
    """An engine's start-up on a device it has not run on yet, and the KV cache it would get.

    Sizes in bytes. ``fits`` is the verdict; ``verdict`` says it in one line a
    person reads first, ``suggestions`` what to change when it does not fit.
    """

    model_config = FROZEN

    model: str
    engine: str
    engine_version: str
    device: str
    device_label: str
    device_defaulted: bool
    total_memory: int
    gpu_memory_utilization: float
    requested_memory: int
    tensor_parallel_size: int
    kv_cache_dtype: str
    max_num_batched_tokens: int
    max_num_seqs: int
    enforce_eager: bool
    weights_memory: int
    weights_source: str
    quantization: str | None
    activation_peak: int
    non_allocator_increase: int
    cudagraph_memory: int
    cudagraph_charged: bool
    non_kv_cache_memory: int
    kv_cache_bytes: int
    block_size: int
    block_bytes: int
    num_blocks: int
    kv_tokens: int
    max_model_len: int
    request_bytes: int
    max_concurrency: float
    fits: bool
    verdict: str
    suggestions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    sampler: str = ""
    """The dummy sampler's top-k/top-p path charged (vLLM: sort, triton or flashinfer)."""


_FROM_ESTIMATE = (
    "requested_memory",
    "max_num_batched_tokens",
    "max_num_seqs",
    "weights_memory",
    "activation_peak",
    "non_allocator_increase",
    "cudagraph_memory",
    "cudagraph_charged",
    "non_kv_cache_memory",
    "sampler",
)
"""The fields an :class:`OfflinePlan` takes from the engine's start-up estimate as they are."""


def position_limit(config: Mapping[str, Any]) -> int | None:
    """The longest ``max_model_len`` vLLM accepts for a config (its derived max_model_len).

    One owner: :attr:`memacct.planner.config.ModelConfig.position_limit`.
    """
    from memacct.planner.config import ModelConfig

    found = ModelConfig(config, "config.json").position_limit
    return None if found is None else found[0]


def _engine_kv_plan(
    spec: KVCacheSpec, engine: str, kv: int, block_size: int, max_len: int, est: Any
) -> tuple[Any, InsufficientMemoryError | None]:
    """The engine's own KV plan for the budget ``kv``, or why the engine would refuse it."""
    from memacct.planner.plan import plan_kv_cache

    if kv <= 0:
        return None, None
    try:
        plan = plan_kv_cache(
            None,
            spec,
            engine=engine,
            kv_cache_memory_bytes=kv,
            block_size=block_size,
            max_model_len=max_len,
            max_num_batched_tokens=est.max_num_batched_tokens,
            max_num_seqs=est.max_num_seqs,
        )
    except InsufficientMemoryError as exc:
        return None, exc
    return plan, None


def _fitting_batch(
    startup: Any,
    config: Mapping[str, Any],
    est: Any,
    spec: KVCacheSpec,
    *,
    total: int,
    device_name: str,
    settings: Any,
    engine: str,
    block_size: int,
    max_len: int,
) -> tuple[int, int] | None:
    """The largest (max_num_batched_tokens, max_num_seqs), halving from the planned ones, whose
    profile run leaves room for one request of ``max_len`` tokens; None when even the
    smallest batch does not (the weights, not the activation, are what does not fit).

    The batch is halved where the activation comes from: the tokens while the forward
    pass over them is the larger part of the peak, the sequences while the sampler is.
    The token budget never drops below the sequence budget (vLLM requires it).
    """
    from dataclasses import replace

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
        est = startup.estimate(
            config, total_memory=total, device_name=device_name, settings=trial,
            weights=est.weights,
        )  # fmt: skip
        sampler_part = startup.sampler_peak(spec, config, seqs, None, est.sampler or None)
        plan, _refusal = _engine_kv_plan(spec, engine, est.kv_cache_bytes, block_size, max_len, est)
        if plan is not None:
            return tokens, seqs
    return None


def _fitting_tp(config: Mapping[str, Any], est: Any, tp: int) -> int:
    """The smallest power-of-two multiple of ``tp`` whose weights leave room for the rest."""
    from memacct.planner.weights import estimate_weights

    rest = est.activation_peak + est.non_allocator_increase
    candidate = tp * 2
    while candidate < 64:
        try:
            w = estimate_weights(config, tensor_parallel_size=candidate).total_bytes
        except MemacctError:
            return candidate
        if w + rest < 0.9 * est.requested_memory:
            return candidate
        candidate *= 2
    return candidate


def plan_offline(
    config: Mapping[str, Any],
    *,
    model_name: str = "model",
    engine: str = "vllm",
    device: str | None = None,
    device_memory: int | None = None,
    gpu_memory_utilization: float | None = None,
    tensor_parallel_size: int = 1,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    enforce_eager: bool = False,
    kv_cache_dtype: str = "auto",
    block_size: int | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    engine_version: str | None = None,
    allow_long_max_model_len: bool = False,
    sampler: str | None = None,
    flashinfer_sampler_env: bool | None = None,
) -> OfflinePlan:
    """Plan an engine's KV cache offline: does the model fit on the device, and how many requests.

    Args:
        config: the model's ``config.json``.
        model_name: the model's name, for messages.
        engine: ``vllm``, ``vllm-ascend`` or ``sglang``.
        device: a device preset or alias (:func:`memacct.devices.resolve_device`);
            with neither this nor ``device_memory``, an H100 80GB (said in the notes).
        device_memory: the device's total memory in bytes, for any other device.
        gpu_memory_utilization: the engine's utilization (SGLang: ``mem_fraction_static``);
            ``None``: the engine's default (vLLM 0.9; SGLang its own fraction for the GPU).
        tensor_parallel_size: ranks the model is split across.
        max_model_len: longest request; default the model's position limit.
        allow_long_max_model_len: accept a ``max_model_len`` beyond the position limit,
            as vLLM does with ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``.
        max_num_batched_tokens: the engine's token budget (default: the engine's, per device).
        max_num_seqs: the engine's sequence budget (default: the engine's, per device).
        enforce_eager: no CUDA graphs.
        kv_cache_dtype: as for :meth:`KVCacheSpec.from_hf_config`.
        block_size: tokens per KV-cache block; ``None``: the engine's default.
        checkpoint: a checkpoint directory: weights from its safetensors headers.
        engine_version: the engine release to follow (``0.11.0``): the sampler's path and
            whether CUDA graphs are charged changed between vLLM releases; default the
            newest memacct models.
        sampler: vLLM's top-k/top-p path for the dummy sampler run (``sort``, ``triton``,
            ``flashinfer``); ``None`` or ``auto``: the release's default
            (:func:`memacct.engines.vllm.startup.default_sampler`).
        flashinfer_sampler_env: ``VLLM_USE_FLASHINFER_SAMPLER`` as the engine would see it
            (``None``: unset); it decides the default path when ``sampler`` is not given.

    Raises:
        InvalidInputError: an argument out of range, an unknown device or engine, or
            ``max_model_len`` beyond the model's position limit (as the engine refuses it).
        ConfigError: the config lacks a size the estimate needs.
        UnknownQuantizationError: the checkpoint's quantization is not one memacct can size.
    """
    from memacct.devices import DEVICE_INFO, resolve_device
    from memacct.engines import get_engine
    from memacct.engines.vllm.startup import StartupSettings, _kv_dtype, check_sampler
    from memacct.planner.weights import estimate_weights, mxfp4_padding

    chosen = get_engine(engine)
    startup = chosen.startup
    if block_size is None:
        block_size = chosen.kv.default_block_size
    defaulted = device is None and device_memory is None
    notes: list[str] = []
    if device_memory is not None:
        if device is not None:
            raise InvalidInputError("give --device or --device-memory, not both")
        total, dev_name, label = device_memory, "custom", f"a device of {format_gib(device_memory)}"
    else:
        info = resolve_device(device or "h100-80gb") if device else DEVICE_INFO["h100-80gb"]
        total, dev_name, label = info.total_bytes, info.name, info.label
        if defaulted:
            notes.append(
                f"no device given: planned for an {info.label} ({info.name}, "
                f"{format_gib(info.total_bytes)}); pass --device or --device-memory"
            )
    check_int("tensor_parallel_size", tensor_parallel_size)
    check_int("block_size", block_size)
    check_optional_int("max_num_batched_tokens", max_num_batched_tokens)
    check_optional_int("max_num_seqs", max_num_seqs)
    check_optional_int("max_model_len", max_model_len)
    if engine_version is not None:
        from memacct.engines.vllm.startup import parse_version

        if parse_version(engine_version) is None:
            raise InvalidInputError(
                f"engine version {engine_version!r} is not a release number: give e.g. 0.11.0"
            )
    sampler = check_sampler(sampler)
    if sampler is not None and engine != "vllm":
        raise InvalidInputError(
            f"--sampler {sampler} chooses among vLLM's CUDA top-k/top-p paths; {engine} samples "
            "its own way (drop --sampler, or plan with --engine vllm)"
        )
    kv_dtype = _kv_dtype(config, kv_cache_dtype)
    spec = KVCacheSpec.from_hf_config(
        dict(config), kv_cache_dtype=kv_dtype, tensor_parallel_size=tensor_parallel_size
    )
    limit = position_limit(config)
    too_long = max_model_len is not None and limit is not None and max_model_len > limit
    if too_long and not allow_long_max_model_len:
        raise InvalidInputError(
            f"max_model_len {max_model_len} is beyond {model_name}'s position limit ({limit} "
            f"tokens, from its config.json): {engine} refuses it at start; the largest "
            f"max_model_len it accepts is {limit} (or allow it explicitly: "
            "--allow-long-max-model-len, vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    max_len = max_model_len or limit or 32768
    weights = None
    layout = (
        "hopper"
        if "h100" in dev_name or "h200" in dev_name
        else ("blackwell" if "b200" in dev_name or "5090" in dev_name else "marlin")
    )
    if checkpoint is not None:
        weights = estimate_weights(checkpoint, tensor_parallel_size=tensor_parallel_size)
    elif engine != "sglang":
        weights = estimate_weights(
            config, tensor_parallel_size=tensor_parallel_size, mxfp4_pad=mxfp4_padding(layout)
        )
    settings_type = StartupSettings
    extra: dict[str, Any] = {}
    if engine == "sglang":
        from memacct.engines.sglang.startup import SglangSettings

        # SGLang's one budget knob: --gpu-memory-utilization stands for mem_fraction_static.
        settings_type = SglangSettings
        extra["mem_fraction_static"] = gpu_memory_utilization
    utilization = 0.9 if gpu_memory_utilization is None else gpu_memory_utilization
    settings = settings_type(
        **extra,
        tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=utilization,
        max_model_len=max_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        enforce_eager=enforce_eager,
        kv_cache_dtype=kv_dtype,
        block_size=block_size,
        engine_version=engine_version,
        sampler=sampler,
        flashinfer_sampler_env=flashinfer_sampler_env,
    )
    est = startup.estimate(
        config, total_memory=total, device_name=dev_name, settings=settings, weights=weights
    )
    notes.extend(est.notes)
    kv = est.kv_cache_bytes
    kv_plan, refusal = _engine_kv_plan(spec, engine, kv, block_size, max_len, est)
    if kv_plan is not None:
        block_size = kv_plan.block_size
        block_bytes = kv_plan.block_bytes
        num_blocks = kv_plan.num_blocks
        kv_tokens = kv_plan.kv_tokens
        used = kv_plan.kv_cache_used_bytes
        request = kv_plan.request_bytes
        concurrency = kv_plan.max_concurrency
    else:
        block_bytes = spec.bytes_per_block(block_size)
        num_blocks = max(0, kv) // block_bytes
        kv_tokens = num_blocks * block_size
        used = num_blocks * block_bytes
        request = spec.request_bytes(max_len, block_size, min(est.max_num_batched_tokens, max_len))
        concurrency = 0.0
    fits = kv_plan is not None
    suggestions: list[str] = []
    gib = format_gib
    if fits:
        count = int(concurrency)
        verdict = (
            f"fits: {count} concurrent request{'' if count == 1 else 's'} of {max_len:,} tokens "
            f"(KV cache {gib(used)})"
        )
    else:
        if est.weights_memory >= est.requested_memory:
            why = (
                f"the weights alone ({gib(est.weights_memory)} per rank) exceed "
                f"{gib(est.requested_memory)} ({est.gpu_memory_utilization:g} of {gib(total)})"
            )
        elif kv <= 0 or refusal is None or refusal.estimated_max_model_len is None:
            why = (
                f"nothing is left for the KV cache: {gib(est.requested_memory)} "
                f"({est.gpu_memory_utilization:g} of {gib(total)}) minus weights "
                f"{gib(est.weights_memory)}, activation peak {gib(est.activation_peak)}, "
                f"non-torch {gib(est.non_allocator_increase)}"
                + (f", CUDA graphs {gib(est.cudagraph_memory)}" if est.cudagraph_charged else "")
                + f" is {gib(kv)}"
            )
        else:
            best = refusal.estimated_max_model_len
            why = (
                f"one request of {max_len:,} tokens does not fit in the {gib(kv)} KV cache as "
                f"{engine} counts it (the longest that fits is {best:,} tokens)"
            )
            suggestions.append(f"lower --max-model-len to {best:,} or less")
        batch = None
        # The weights and fixed terms fit but the profile run's activation does not: the
        # remedy is a smaller batch, not more ranks (the sampler's logits are whole on each).
        fixed = est.weights_memory + est.non_allocator_increase
        if fixed < est.requested_memory and hasattr(startup, "sampler_peak"):
            batch = _fitting_batch(
                startup, config, est, spec, total=total, device_name=dev_name,
                settings=settings, engine=engine, block_size=block_size, max_len=max_len,
            )  # fmt: skip
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
            suggestions.insert(0, f"lower {' and '.join(changes)} (or less)")
        verdict = f"does not fit: {why}"
        if batch is None or fixed >= est.requested_memory:
            suggestions.append(
                f"raise --tensor-parallel-size to {_fitting_tp(config, est, tensor_parallel_size)}"
            )
        if est.weights.quantization is None:
            suggestions.append("use a quantized checkpoint (FP8 halves the weights of bf16)")
        if spec.kv_dtype_bytes > 1:
            suggestions.append("store the KV cache in FP8 (--kv-cache-dtype fp8)")
        if est.gpu_memory_utilization < 0.95:
            suggestions.append("raise --gpu-memory-utilization (e.g. 0.95)")
        if not enforce_eager and est.cudagraph_charged:
            suggestions.append("--enforce-eager saves the CUDA-graph memory")
    return OfflinePlan(
        model=model_name,
        engine=est.engine,
        engine_version=est.version,
        device=dev_name,
        device_label=label,
        device_defaulted=defaulted,
        total_memory=total,
        gpu_memory_utilization=est.gpu_memory_utilization,
        **{name: getattr(est, name) for name in _FROM_ESTIMATE},
        tensor_parallel_size=tensor_parallel_size,
        kv_cache_dtype=spec.kv_dtype,
        enforce_eager=enforce_eager,
        weights_source=est.weights.source,
        quantization=est.weights.quantization,
        kv_cache_bytes=kv,
        block_size=block_size,
        block_bytes=block_bytes,
        num_blocks=num_blocks,
        kv_tokens=kv_tokens,
        max_model_len=max_len,
        request_bytes=request,
        max_concurrency=concurrency,
        fits=fits,
        verdict=verdict,
        suggestions=tuple(suggestions),
        notes=tuple(notes),
    )
