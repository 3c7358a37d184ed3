"""vLLM's start-up, as it bears on memory: what one rank holds before the KV cache.

vLLM (V1 engine; rules of the release in :data:`VERSION`) sizes the KV cache
of each worker as (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``)::

    kv_cache_bytes = total x gpu_memory_utilization
                     - weights - activation peak - non-torch growth - CUDA-graph estimate

:func:`estimate_startup` computes every term offline, without a device:

* **weights**: :func:`memacct.model.weights.estimate.estimate_weights` (the engine's
  per-rank sharding and quantized layouts);
* **activation peak** of the profile run (``gpu_model_runner.py``,
  ``profile_run``): a dummy forward over ``max_num_batched_tokens`` tokens,
  then the dummy sampler over ``max_num_seqs`` rows of logits with top-k and
  top-p on. The sampler's peak is a number of bytes per (row x vocabulary
  entry) on every rank (the logits are gathered whole under TP), which is why
  it grows with the vocabulary, not the model. How many depends on the
  top-k/top-p implementation the release picks (:data:`SAMPLERS`,
  :func:`default_sampler`): PyTorch's sort, vLLM's Triton kernel or FlashInfer;
* **non-torch growth**: memory outside PyTorch's allocator that appears after
  the engine's own baseline snapshot (NCCL and custom all-reduce buffers
  under TP, FlashInfer's all-reduce fusion workspace), by release, TP and board, as
  named terms: :func:`memacct.engines.vllm.nontorch.non_torch_terms`;
* **CUDA graphs**: the pool of the largest captured batch, charged by
  default as vLLM 0.33 does and zero with ``enforce_eager``.

Defaults follow ``vllm serve`` per device class when the user sets none
(``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``). Sources and
measurements of each term are in ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from memacct.checks import check_batch_budget, check_fraction, check_int
from memacct.engines.base import StartupEstimate, StartupModel, StartupRequest, StartupSettings
from memacct.engines.deployment import Deployment
from memacct.engines.forward import ForwardPass
from memacct.engines.vllm.defaults import (
    GRAPH_BYTES_PER_LAYER_WIDTH,
    batch_defaults,
    capture_sizes,
    full_capture_sizes,
    serving_kv_cache_dtype,
)
from memacct.engines.vllm.multimodal import has_encoder as is_multimodal
from memacct.engines.vllm.nontorch import non_torch_bytes, non_torch_note
from memacct.engines.vllm.releases import (
    SAMPLER_BYTES_PER_LOGIT,
    SAMPLER_FLASHINFER_BYTES_PER_LOGIT,
    SAMPLER_TRITON_BUFFER_BYTES,
    SAMPLER_TRITON_BYTES_PER_LOGIT,
    VERSION,
    check_sampler,
    default_sampler,
    device_class,
    parse_version,
)
from memacct.model.config import ModelConfig
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import estimate_weights, mxfp4_padding
from memacct.trace import trace_peak

__all__ = [
    "CUDAGRAPH_CHARGED_SINCE",
    "STARTUP",
    "BatchDefaults",
    "VllmStartup",
    "with_settings",
]

CUDAGRAPH_CHARGED_SINCE = (0, 21)
"""vLLM charges its CUDA-graph estimate by default since v0.21.0 (its start-up log says so)."""

class BatchDefaults(StartupModel):
    """``defaults``: vLLM's per-device batch defaults (:func:`batch_defaults`), which SGLang's
    chunked-prefill size and running-request cap follow too."""

    def defaults(self, total_memory: int, device_name: str,
                 version: tuple[int, int] | None = None) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine picks on this device."""
        return batch_defaults(total_memory, device_name, version)

    def settings(self, **common: Any) -> StartupSettings:
        """The engine's settings from the common ones (``gpu_memory_utilization`` ``None``:
        vLLM's default, 0.9)."""
        if common.get("gpu_memory_utilization") is None:
            common.pop("gpu_memory_utilization", None)
        return StartupSettings(**common)


class VllmStartup(BatchDefaults):
    """vLLM's start-up model (V1 engine).

    Attributes:
        name: the engine's name.
        version: the vLLM release whose rules this follows.
        sampler_bytes_per_logit: bytes per logit of the dummy sampler besides the
            model-dtype logits, where :attr:`cuda_sampler` is off.
        non_torch: (one GPU, tensor parallel) non-torch growth where fixed; ``None``:
            vLLM's rules per release and TP (:func:`non_torch_bytes`).
    """

    name = "vllm"
    version = VERSION
    sampler_bytes_per_logit = SAMPLER_BYTES_PER_LOGIT
    non_torch: tuple[int, int] | None = None
    graphs = True
    cuda_sampler = True
    """Whether the dummy sampler takes vLLM's CUDA top-k/top-p paths (:data:`SAMPLERS`);
    otherwise it holds :attr:`sampler_bytes_per_logit` per logit."""

    def default_seqs(self, seqs: int, tokens: int) -> int:
        """``vllm serve`` clamps a defaulted ``max_num_seqs`` to ``max_num_batched_tokens``
        (``vllm/engine/arg_utils.py``,
        ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``:
        ``max_num_seqs = min(max_num_seqs, max_num_batched_tokens)`` when not given); each
        unset one takes the device's default (:func:`batch_defaults`)."""
        return min(seqs, tokens)

    def start(self, request: StartupRequest) -> StartupEstimate:
        """vLLM's start-up of one rank (see :meth:`StartupModel.estimate`)."""
        config, total_memory = request.config, request.total_memory
        device_name = request.device_name
        s = request.settings or StartupSettings()
        check_fraction("gpu_memory_utilization", s.gpu_memory_utilization)
        check_int("total_memory", total_memory)
        # A deployment other than the defaults, or a multimodal model's encoder pass (an
        # explicit default Deployment() is the plain start-up the deployment path builds on).
        d = s.deployment
        if (d is not None and not d.is_default) or (d is None and is_multimodal(config)):
            from memacct.engines.vllm.deploy import estimate_deployment

            s = s if d is not None else replace(s, deployment=Deployment())
            return estimate_deployment(self, replace(request, settings=s))
        notes: list[str] = []
        tokens, seqs = self.batch(total_memory, device_name, s.max_num_batched_tokens,
                                  s.max_num_seqs, parse_version(s.engine_version))  # fmt: skip
        check_batch_budget(tokens, seqs)
        defaulted = [
            f"{name} {value}"
            for name, value, given in (
                ("max_num_batched_tokens", tokens, s.max_num_batched_tokens),
                ("max_num_seqs", seqs, s.max_num_seqs),
            )
            if given is None
        ]
        if defaulted:
            notes.append(f"{self.name} defaults on this device: {', '.join(defaulted)}")
        layout = s.mxfp4_layout or device_class(device_name)
        # The plan's reading of the model when it passed one (read once per plan).
        model = request.model or ModelConfig(config, "config.json")
        weights = request.weights
        if weights is None:
            weights = estimate_weights(
                model, tensor_parallel_size=s.tensor_parallel_size, mxfp4_pad=mxfp4_padding(layout)
            )
        spec = request.spec or KVCacheSpec.from_hf_config(
            dict(config),
            kv_cache_dtype=serving_kv_cache_dtype(model, s.kv_cache_dtype),
            tensor_parallel_size=s.tensor_parallel_size,
        )
        version = parse_version(s.engine_version) or parse_version(self.version)
        sampler = check_sampler(s.sampler) or default_sampler(
            version, flashinfer_env=s.flashinfer_sampler_env, device_name=device_name,
            release=s.engine_version,
        )
        if s.sampler is None and self.cuda_sampler:
            note = self.sampler_note(sampler, version, s.flashinfer_sampler_env, s.engine_version)
            notes.append(f"dummy sampler: {note}")
        activation = self.activation_peak(model, spec, tokens, seqs, s, version, sampler)
        tp = s.tensor_parallel_size
        if self.non_torch is None:
            non_torch = non_torch_bytes(version, tp, device_name)
            if tp > 1:
                notes.append(non_torch_note(version, tp, device_name))
        else:
            non_torch = self.non_torch[0] if tp == 1 else self.non_torch[1]
        graphs = (
            0
            if (s.enforce_eager or not self.graphs)
            else self.cudagraph_memory(model, spec, seqs, tokens, s)
        )
        charge = s.charge_cudagraphs
        if charge is None:
            charge = version is None or version >= CUDAGRAPH_CHARGED_SINCE
        charged = charge and graphs > 0
        return StartupEstimate(
            engine=self.name,
            version=s.engine_version or self.version,
            total_memory=total_memory,
            gpu_memory_utilization=s.gpu_memory_utilization,
            activation_peak=activation,
            non_allocator_increase=non_torch,
            cudagraph_memory=graphs,
            cudagraph_charged=charged,
            max_num_batched_tokens=tokens,
            max_num_seqs=seqs,
            weights=weights,
            notes=tuple(notes),
            sampler=sampler if self.cuda_sampler else "native",
        )

    def workload(
        self, config: Mapping[str, Any] | ModelConfig, spec: KVCacheSpec, tokens: int, seqs: int
    ) -> ForwardPass:
        """The dummy forward pass over ``tokens`` tokens in at most ``seqs`` sequences."""
        return ForwardPass(spec, config, max_num_batched_tokens=tokens, max_num_seqs=seqs)

    def sampler_note(
        self, sampler: str, version: tuple[int, int] | None, flashinfer_env: bool | None = None,
        release: str | None = None,
    ) -> str:
        """One line saying which top-k/top-p path is charged, why, and how to change it
        (:func:`memacct.engines.vllm.releases.sampler_note`)."""
        from memacct.engines.vllm import releases

        version = version or parse_version(self.version)
        assert version is not None
        return releases.sampler_note(sampler, version, flashinfer_env, release)

    def sampler_cost(
        self, seqs: int, version: tuple[int, int] | None, sampler: str | None
    ) -> tuple[int, int]:
        """Bytes per logit and fixed bytes the dummy sampler holds over ``seqs`` rows.

        The model-dtype logits ``compute_logits`` returns stay referenced by the dummy run,
        so every path holds them (:meth:`StartupModel.sampler_peak`) plus its own bytes per
        logit: :data:`SAMPLER_BYTES_PER_LOGIT` (sort), :data:`SAMPLER_TRITON_BYTES_PER_LOGIT`
        and the kernel's buffers (Triton, 8 rows or more; fewer rows take the sort) or
        :data:`SAMPLER_FLASHINFER_BYTES_PER_LOGIT` (FlashInfer); without
        :attr:`cuda_sampler`, :attr:`sampler_bytes_per_logit`. ``sampler`` ``None``: the
        release's default.
        """
        if not self.cuda_sampler:
            return self.sampler_bytes_per_logit, 0
        version = version or parse_version(self.version)
        sampler = sampler or default_sampler(version)
        if sampler == "flashinfer":
            return SAMPLER_FLASHINFER_BYTES_PER_LOGIT, 0
        if sampler == "triton" and seqs >= 8:
            return SAMPLER_TRITON_BYTES_PER_LOGIT, SAMPLER_TRITON_BUFFER_BYTES
        return SAMPLER_BYTES_PER_LOGIT, 0

    def activation_peak(
        self,
        config: Mapping[str, Any] | ModelConfig,
        spec: KVCacheSpec,
        tokens: int,
        seqs: int,
        s: StartupSettings,
        version: tuple[int, int] | None = None,
        sampler: str | None = None,
    ) -> int:
        """The profile run's peak: the larger of the forward pass and the sampler after it."""
        work = self.workload(config, spec, tokens, seqs)
        forward = trace_peak(work.step_trace(tokens, min(seqs, tokens)))
        hidden = tokens * spec.hidden_size * (spec.dtype_bytes or 2)
        # The dummy run has one request per token at most: min(max_num_seqs, tokens) rows.
        rows = min(seqs, tokens)
        return max(forward, hidden + self.sampler_peak(spec, config, rows, version, sampler))

    def cudagraph_memory(
        self,
        config: Mapping[str, Any] | ModelConfig,
        spec: KVCacheSpec,
        seqs: int,
        tokens: int,
        s: StartupSettings,
    ) -> int:
        """The graph pool: the forward of the largest captured batch, plus each graph's overhead.

        Graphs are captured largest first into one shared pool, so the pool
        holds the activations of the largest batch; each graph, piecewise or
        full, adds its own small buffers. vLLM charges its own estimate of this
        by default since v0.21 ("CUDA graph memory profiling is enabled (default
        since v0.21.0)" in its start-up log).
        """
        sizes = capture_sizes(seqs)
        graphs = len(sizes) + len(full_capture_sizes(seqs))
        largest = min(max(sizes), tokens)
        work = self.workload(config, spec, max(tokens, largest), max(seqs, largest))
        pool = trace_peak(work.forward_trace(largest, largest))
        per_graph = GRAPH_BYTES_PER_LAYER_WIDTH * spec.num_layers * spec.hidden_size
        return pool + graphs * per_graph


STARTUP = VllmStartup()
"""vLLM's start-up model, for ``Engine(startup=...)``."""


def with_settings(settings: StartupSettings, **changes: Any) -> StartupSettings:
    """A copy of ``settings`` with ``changes`` applied."""
    return replace(settings, **changes)
