"""An inference engine's start on the simulated device, profiled with memacct as an engine would.

:func:`simulate_engine_start` runs, on a fresh :class:`~memacct.sim.SimDevice`,
the start-up of one rank of an engine such as vLLM, in the engine's order:

1. other processes' memory (a co-tenant) is already on the device;
2. ``baseline = memacct.snapshot(backend)``: the engine's start, before its
   device context exists;
3. this process's context outside the allocator (driver context, NCCL/HCCL
   buffers, library workspaces): ``external_malloc(context_bytes)``;
4. the weights, tensor by tensor, and the engine's persistent input buffers
   (``malloc(..., persistent=True)``);
5. ``memacct.memory_profiling(...)`` around one dummy forward pass of
   ``max_num_batched_tokens`` tokens with sampling for ``max_num_seqs`` rows.

It is the first half of :func:`memacct_bench.scenario.run_scenario` (the benchmark). The
same start-up estimated without any device (what ``memacct plan --model X --device Y``
runs) is :func:`memacct.planner.offline.plan_offline`, in the core.

Example::

    >>> from memacct.planner import load_model_preset, plan_kv_cache
    >>> start = simulate_engine_start(load_model_preset("qwen2.5-7b"), device="h100-80gb")
    >>> plan = plan_kv_cache(start.result, start.spec, gpu_memory_utilization=0.9)
    >>> plan.num_blocks > 0
    True
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memacct.checks import check_int
from memacct.devices import DEVICE_INFO, check_device
from memacct.errors import InsufficientMemoryError, ProfilingOutOfMemoryError
from memacct.measure import snapshot
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import mxfp4_padding
from memacct.models import ProfileResult
from memacct.profiling import memory_profiling
from memacct.replay import check_serving_role
from memacct.sim import SimDevice, SimOutOfMemory
from memacct.sim.backend import SimBackend
from memacct.units import MiB, format_gib
from memacct_bench.workload import TransformerWorkload, replay

__all__ = [
    "DEFAULT_CONTEXT_BYTES",
    "EngineStart",
    "WeightsTerms",
    "make_device",
    "mxfp4_pad_for",
    "simulate_engine_start",
]

DEFAULT_CONTEXT_BYTES = 512 * MiB
"""This process's memory outside the allocator: a CUDA context with cuBLAS workspaces."""


@dataclass(frozen=True)
class WeightsTerms:
    """The profile's ``weights_memory`` of a simulated start, term by term (bytes).

    The offline plan (:func:`memacct.planner.offline.plan_offline`) charges ``parameters``
    alone as its ``weights_memory``: the same inventory, to the byte. The simulated start
    measures what the allocator gained between the baseline and the profile, which also
    holds the two other terms, named here so that the two figures are compared term by term:

    Attributes:
        parameters: the model's weight inventory on this rank
            (:meth:`~memacct_bench.workload.TransformerWorkload.parameter_tensors`).
        step_buffers: the model runner's persistent step buffers (input ids, positions,
            slot mapping, block table, sampling parameters:
            :meth:`~memacct_bench.workload.TransformerWorkload.step_buffer_tensors`).
            vLLM 0.33 allocates them in ``GPUModelRunner.__init__``, outside the
            ``load_model`` window it charges as weights, and no term of its profile counts
            them; memacct's profile charges them with the weights (its baseline precedes them).
        allocator_rounding: what the allocator holds beyond the bytes requested for both, as
            the profile's truth source counts it: under ``allocated_peak`` the allocated
            blocks' rounding (a large block's unsplit remainder under 1 MiB, torch's
            ``kSmallSize``), under ``reserved`` also the free rest of the segments
            (``reserved_bytes - requested_bytes``, read from the allocator's statistics).
    """

    parameters: int
    step_buffers: int
    allocator_rounding: int

    @property
    def total(self) -> int:
        """The three terms together: the profile's ``weights_memory``."""
        return self.parameters + self.step_buffers + self.allocator_rounding


@dataclass
class EngineStart:
    """A simulated engine right after profiling, ready to plan and allocate its KV cache.

    Attributes:
        device: the simulated device, holding the weights and the context.
        backend: the ``sim`` backend over ``device``.
        spec: the model's KV-cache geometry on this rank.
        result: the profile memacct measured.
        workload: the model's allocation traces (weights, steps, KV cache).
        weights: pointers of the weight tensors and persistent buffers (kept live).
        weights_terms: ``result.weights_memory`` term by term (:class:`WeightsTerms`).
    """

    device: SimDevice
    backend: SimBackend
    spec: KVCacheSpec
    result: ProfileResult
    workload: TransformerWorkload
    weights: list[int] = field(default_factory=list, repr=False)
    weights_terms: WeightsTerms | None = None


def make_device(device: str | Mapping[str, Any] | int, allocator: str) -> SimDevice:
    """A fresh simulated device from a preset name, ``{"total_bytes": N}`` or a byte count.

    Raises:
        InvalidInputError: an unknown preset or allocator, or a bad capacity.
    """
    preset, total, name = check_device(device)
    return SimDevice(preset, allocator, total_bytes=total, name=name)


def mxfp4_pad_for(device: str | Mapping[str, Any] | int) -> tuple[int, int]:
    """The MXFP4 expert padding vLLM's kernels use on ``device``, as the offline plan takes it.

    A device preset's :attr:`~memacct.devices.DeviceInfo.mxfp4_layout` through
    :func:`memacct.model.weights.estimate.mxfp4_padding`; a custom capacity (no GPU generation
    known) keeps ``estimate_weights``'s default.
    """
    preset, _total, _name = check_device(device)
    info = DEVICE_INFO.get(preset) if preset is not None else None
    return (256, 1) if info is None else mxfp4_padding(info.mxfp4_layout)


def _stage(progress: bool, message: str) -> None:
    if progress:
        print(f"memacct: {message}", file=sys.stderr, flush=True)


def simulate_engine_start(
    config: Mapping[str, Any],
    *,
    device: str | Mapping[str, Any] | int = "h100-80gb",
    allocator: str = "torch-cuda",
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    tensor_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
    truth_source: str = "auto",
    context_bytes: int = DEFAULT_CONTEXT_BYTES,
    other_process_bytes: int = 0,
    progress: bool = False,
    block_size: int = 16,
    max_model_len: int | None = None,
    serving_role: str = "mixed",
) -> EngineStart:
    """Start one rank of an engine on a simulated device and profile it with memacct.

    Args:
        config: the model's ``config.json`` as a dict.
        device: a device preset (``h100-80gb``, ``ascend-910b-64gb``, ...),
            ``{"total_bytes": N}`` or a byte count.
        allocator: the allocator preset (``torch-cuda``, ``mindspore``, ...).
        max_num_batched_tokens: tokens of the dummy forward pass.
        max_num_seqs: rows the dummy sampler samples.
        tensor_parallel_size: this rank's share of each layer (weights and
            activations divided by it; embeddings replicated).
        kv_cache_dtype: as for :meth:`KVCacheSpec.from_hf_config`.
        truth_source: ``auto``, ``allocated_peak`` or ``reserved``.
        context_bytes: this process's memory outside the allocator.
        other_process_bytes: memory another process holds before the start.
        progress: print each stage on stderr.
        block_size: tokens per KV-cache block (sizes the persistent block table).
        max_model_len: longest request (sizes the persistent block table).
        serving_role: ``mixed``, ``prefill`` or ``decode`` (a disaggregated instance):
            the steps ``auto``'s replay covers (:data:`memacct.replay.SERVING_ROLES`).

    Raises:
        InvalidInputError: a bad device, allocator or size.
        ConfigError: the config cannot be read as a transformer.
        ProfilingOutOfMemoryError: the dummy forward does not fit.
        SimOutOfMemory: the context or the weights do not fit.
    """
    for name, value in (
        ("context_bytes", context_bytes),
        ("other_process_bytes", other_process_bytes),
    ):
        check_int(name, value, low=0)
    spec = KVCacheSpec.from_hf_config(
        dict(config), kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size
    )
    workload = TransformerWorkload(
        spec,
        config,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        max_model_len=max_model_len,
        mxfp4_pad=mxfp4_pad_for(device),
    )
    dev = make_device(device, allocator)
    backend = SimBackend(dev)
    if other_process_bytes:
        dev.other_process_malloc(other_process_bytes)
    baseline = snapshot(backend)
    if context_bytes:
        dev.external_malloc(context_bytes)
    _stage(progress, f"loading {spec.model_name} weights on {dev.name} ({allocator})")
    tensors = workload.weight_tensors()
    allocator_obj = dev.allocator
    try:
        weights = [allocator_obj.malloc(n, persistent=True) for n in tensors]
    except SimOutOfMemory:
        params = sum(workload.parameter_tensors())
        buffers = sum(tensors) - params
        if buffers > params:
            # The step buffers, not the model, are what does not fit: name the budgets.
            raise InsufficientMemoryError(
                f"the engine's step buffers for max_num_seqs={max_num_seqs} and "
                f"max_num_batched_tokens={max_num_batched_tokens} need {format_gib(buffers)} "
                f"(the weights of {spec.model_name} only {format_gib(params)}) and do not fit on "
                f"{dev.name} ({format_gib(dev.total)} total): lower max_num_seqs and "
                "max_num_batched_tokens"
            ) from None
        raise InsufficientMemoryError(
            f"the weights of {spec.model_name} ({format_gib(sum(tensors))} on this rank with "
            f"tensor_parallel_size={tensor_parallel_size}) do not fit on {dev.name} "
            f"({format_gib(dev.total)} total, {format_gib(context_bytes)} taken by the context, "
            f"{format_gib(other_process_bytes)} by other processes): raise "
            "tensor_parallel_size or choose a device with more memory"
        ) from None
    _stage(
        progress,
        f"profiling a forward pass of {max_num_batched_tokens} tokens, "
        f"sampling {max_num_seqs} rows",
    )
    # The profile charges weights as the truth source measures them (allocated or
    # reserved growth since the baseline), as vLLM and vllm-mindspore do.
    profiled = {
        "architecture": spec.model_type, "model_name": spec.model_name, "dtype": spec.dtype,
        "tensor_parallel_size": tensor_parallel_size, "tensor_parallel_rank": 0,
        # One rank holding every layer: no pipeline (issue 23 row 3: the guard compares it).
        "pipeline_parallel_size": 1, "pipeline_parallel_rank": 0,
        "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs,
        "serving_role": check_serving_role(serving_role),
    }  # fmt: skip
    # Every sequence contributes a token, so a step never has more sequences than tokens.
    num_seqs = min(max_num_seqs, max_num_batched_tokens)
    try:
        with memory_profiling(
            backend, baseline, truth_source=truth_source, profiled=profiled,
            serving_trace=workload,
        ) as session:  # fmt: skip
            replay(allocator_obj, workload.step_trace(max_num_batched_tokens, num_seqs))
    except ProfilingOutOfMemoryError as exc:
        raise ProfilingOutOfMemoryError(
            f"the dummy step of max_num_batched_tokens={max_num_batched_tokens} tokens and "
            f"{num_seqs} sequences (max_num_seqs={max_num_seqs}) does not fit on {dev.name} "
            f"({format_gib(dev.total)} total) beside the weights and step buffers "
            f"({format_gib(sum(tensors))}): lower max_num_batched_tokens or max_num_seqs"
        ) from exc
    result = session.result
    terms = _weights_terms(workload, result)
    _stage(
        progress,
        f"profiled: non-KV memory {format_gib(result.non_kv_cache_memory)} ({result.truth_source})",
    )
    return EngineStart(dev, backend, spec, result, workload, weights, terms)


def _weights_terms(workload: TransformerWorkload, result: ProfileResult) -> WeightsTerms:
    """``result.weights_memory`` split into the inventory, the step buffers and the rounding.

    After the profile (which frees everything it allocated and empties the cache) the
    allocator holds the weights and buffers only, so the measured figure beyond the bytes
    requested for them is the allocator's rounding (as the truth source counts it).
    """
    parameters = sum(workload.parameter_tensors())
    buffers = sum(workload.step_buffer_tensors())
    return WeightsTerms(parameters, buffers, result.weights_memory - parameters - buffers)
