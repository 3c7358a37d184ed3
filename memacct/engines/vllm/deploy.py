"""vLLM's start-up under a :class:`~memacct.engines.deployment.Deployment`: every term it moves.

:func:`estimate_deployment` is what :meth:`VllmStartup.estimate
<memacct.engines.vllm.startup.VllmStartup.estimate>` runs when its settings carry a
deployment other than vLLM's defaults; it is handed that start-up (:class:`StageStartup`)
and imports nothing of :mod:`memacct.engines.vllm.startup`. It plans each pipeline stage's
rank as vLLM 0.33 builds it, then the KV budget every stage can give (vLLM's
``get_kv_cache_configs`` gives every worker the fewest blocks any worker has room for):

* weights: :func:`~memacct.engines.vllm.parallel.rank_weights` (stage layers, experts over
  TP x DP), plus the LoRA stacks (:mod:`~memacct.engines.vllm.lora`) and the drafter
  (:mod:`~memacct.engines.vllm.speculative`), less ``--cpu-offload-gb``;
* activation: the profile run's forward; the sampler only on the last stage (the others
  return hidden states to the next stage); the rejection sampler's pass with any
  speculative method; the multimodal encoder pass (:mod:`~memacct.engines.vllm.multimodal`);
* CUDA graphs: each stage's layers; twice the per-graph buffers with LoRA;
* KV cache: the drafter's layers in the pool; per stage, its own layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from memacct.engines.deployment import Deployment
from memacct.engines.vllm.defaults import (
    GRAPH_BYTES_PER_LAYER_WIDTH,
    capture_sizes,
    full_capture_sizes,
    serving_kv_cache_dtype,
)
from memacct.engines.vllm.lora import LORA_GRAPH_SETS, lora_buffer_bytes
from memacct.engines.vllm.multimodal import encoder_profile, unapplied_notes
from memacct.engines.vllm.parallel import (
    cpu_offload,
    layer_parameters,
    local_experts,
    rank_weights,
    serving_config,
)
from memacct.engines.vllm.speculative import (
    draft_layer_config,
    draft_weight_bytes,
    rejection_sampler_bytes,
    with_draft_layers,
)
from memacct.model.config import ModelConfig
from memacct.model.geometry import pipeline_partition
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import WeightEstimate, mxfp4_padding
from memacct.trace import trace_peak
from memacct.units import format_gib

if TYPE_CHECKING:
    from memacct.engines.base import StartupEstimate, StartupRequest, StartupSettings
    from memacct.engines.forward import ForwardPass

__all__ = ["StageStartup", "deployment_kv_spec", "estimate_deployment"]


class StageStartup(Protocol):
    """What the deployment path asks of vLLM's plain start-up
    (:class:`~memacct.engines.vllm.startup.VllmStartup`): one rank's estimate with the
    default deployment, and the terms it rescales per pipeline stage."""

    def start(self, request: StartupRequest) -> StartupEstimate:
        """One rank's start-up under ``request`` (a plain deployment here)."""
        ...

    def workload(
        self, config: Mapping[str, Any], spec: KVCacheSpec, tokens: int, seqs: int
    ) -> ForwardPass:
        """The profile run's dummy forward pass."""
        ...

    def sampler_peak(
        self, spec: KVCacheSpec, config: Mapping[str, Any], seqs: int,
        version: tuple[int, int] | None = None, sampler: str | None = None,
    ) -> int:  # fmt: skip
        """Bytes the profile run's sampler holds over ``seqs`` rows."""
        ...

    def cudagraph_memory(
        self, config: Mapping[str, Any], spec: KVCacheSpec, seqs: int, tokens: int,
        s: StartupSettings,
    ) -> int:  # fmt: skip
        """The CUDA-graph pool for ``seqs`` sequences."""
        ...


def _keeps_weights(d: Deployment, config: Mapping[str, Any]) -> bool:
    """Whether weights sized elsewhere (a checkpoint) still hold for one rank of ``d``."""
    cfg = ModelConfig(config, "config.json")
    moe = bool(cfg.first_int(("num_experts", "num_local_experts", "n_routed_experts"), 0))
    split = d.pipeline_parallel_size > 1 or (moe and (d.enable_expert_parallel or
                                                      d.data_parallel_size > 1))  # fmt: skip
    return not (split or d.quantization or d.dtype != "auto")


def deployment_kv_spec(
    config: Mapping[str, Any], d: Deployment, *, kv_cache_dtype: str, tensor_parallel_size: int
) -> KVCacheSpec:
    """The KV-cache spec vLLM builds for ``d``: the stage needing the most cache per token,
    with the drafter's layers in the pool."""
    spec = KVCacheSpec.from_hf_config(
        dict(config), kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=d.pipeline_parallel_size,
    )  # fmt: skip
    if d.speculative is not None:
        draft = draft_layer_config(config, d.speculative)
        if draft is not None:
            extra = KVCacheSpec.from_hf_config(
                dict(draft), kv_cache_dtype=kv_cache_dtype,
                tensor_parallel_size=tensor_parallel_size,
            )  # fmt: skip
            spec = with_draft_layers(spec, extra)
    return spec


def _stage_weights(
    config: Mapping[str, Any], d: Deployment, s: StartupSettings, stage: int, layers: int,
    pad: tuple[int, int], given: WeightEstimate | None, notes: list[str],
) -> WeightEstimate:  # fmt: skip
    tp = s.tensor_parallel_size
    w = given if given is not None else rank_weights(
        config, d, tensor_parallel_size=tp, stage=stage, mxfp4_pad=pad)  # fmt: skip
    roles = dict(w.by_role)
    if d.lora is not None:
        cfg = ModelConfig(config, "config.json")
        experts = cfg.first_int(("num_experts", "num_local_experts", "n_routed_experts"), 0) or 0
        ranks = tp * d.data_parallel_size
        ep = d.enable_expert_parallel and experts
        roles["lora"] = lora_buffer_bytes(
            config, d.lora, tensor_parallel_size=tp, num_layers=layers,
            local_experts=local_experts(experts, ranks) if ep else None,
            expert_shards=1 if ep else ranks,
        )  # fmt: skip
    if d.speculative is not None and d.speculative.on_device:
        roles["draft"] = draft_weight_bytes(config, d.speculative, tensor_parallel_size=tp,
                                            mxfp4_pad=pad)  # fmt: skip
    w = replace(w, by_role=roles, total_bytes=sum(roles.values()))
    params = layer_parameters(config, tp)
    w, moved = cpu_offload(w, d, params, layers)
    if moved and stage == 0:
        exact = "whole parameters, as vLLM moves them" if params else (
            "vLLM may move up to one parameter more")  # fmt: skip
        notes.append(f"--cpu-offload-gb {d.cpu_offload_gb:g}: {format_gib(moved)} of layer "
                     f"weights held in host memory ({exact})")
    return w


def estimate_deployment(startup: StageStartup, request: StartupRequest) -> StartupEstimate:
    """One rank's start-up under ``request.settings.deployment`` (the binding pipeline
    stage's rank).

    Raises:
        InvalidInputError: a combination vLLM refuses, or one memacct does not plan.
    """
    from memacct.engines.vllm.releases import device_class

    config, device_name, weights = request.config, request.device_name, request.weights
    settings = request.settings
    assert settings is not None
    d = settings.deployment
    assert d is not None
    cfg = serving_config(config, d)
    plain = replace(settings, deployment=Deployment())
    tp, pp = settings.tensor_parallel_size, d.pipeline_parallel_size
    pad = mxfp4_padding(settings.mxfp4_layout or device_class(device_name))
    notes: list[str] = []
    given = weights if weights is not None and _keeps_weights(d, config) else None
    if weights is not None and given is None:
        notes.append("weights: the per-rank split of this deployment sized from the config's "
                     "formulas, not the checkpoint's total")  # fmt: skip
    kv_dtype = serving_kv_cache_dtype(cfg, settings.kv_cache_dtype)
    spec = deployment_kv_spec(cfg, d, kv_cache_dtype=kv_dtype, tensor_parallel_size=tp)
    total_layers = ModelConfig(cfg, "config.json").first_int(("num_hidden_layers",), 0) or 1
    parts = pipeline_partition(total_layers, pp) if pp > 1 else (total_layers,)
    best: StartupEstimate | None = None
    for stage, layers in enumerate(parts):
        w = _stage_weights(cfg, d, plain, stage, layers, pad, given, notes)
        # The plan's reading of the model and its spec hold for the served config only when
        # the deployment leaves it as it is (hf_overrides, a drafter's layers change it).
        same = cfg is config
        est = startup.start(replace(request, config=cfg, settings=plain, weights=w,
                                    model=request.model if same else None,
                                    spec=request.spec if same else None))  # fmt: skip
        est = _adjust(startup, cfg, est, spec, plain, d, first=stage == 0,
                      last=stage == pp - 1, layer_share=layers / total_layers)  # fmt: skip
        # Every stage gets the blocks of the one with the least room; memacct sizes blocks
        # by the largest stage's (the spec's), so the least room decides.
        if best is None or est.kv_cache_bytes < best.kv_cache_bytes:
            best = est
    assert best is not None
    if pp > 1:
        notes.append(f"pipeline parallel: layers per stage {parts}; the stage with the least "
                     "room for the KV cache sets every stage's blocks (vLLM gives all workers "
                     "the fewest blocks any has)")  # fmt: skip
    return replace(best, kv_spec=spec, notes=(*best.notes, *notes, *_notes(d)))


def _adjust(
    startup: StageStartup, cfg: Mapping[str, Any], est: StartupEstimate, spec: KVCacheSpec,
    s: StartupSettings, d: Deployment, *, first: bool, last: bool, layer_share: float,
) -> StartupEstimate:  # fmt: skip
    """The activation and graph terms of one stage's rank under ``d``."""
    from memacct.engines.vllm.releases import parse_version

    tokens, seqs = est.max_num_batched_tokens, est.max_num_seqs
    rows = min(seqs, tokens)
    work = startup.workload(cfg, spec, tokens, seqs)
    forward = trace_peak(work.step_trace(tokens, rows))
    dt = spec.dtype_bytes or 2
    activation = est.activation_peak
    if not last:
        activation = forward  # no logits, no sampler: hidden states go to the next stage
    elif d.speculative is not None:
        version = parse_version(est.version)
        sampler = tokens * spec.hidden_size * dt + startup.sampler_peak(
            spec, cfg, rows, version, est.sampler or None) + rejection_sampler_bytes(
            rows, int(spec.vocab_size or 0), dt)  # fmt: skip
        activation = max(forward, sampler)
    # The encoder runs on the first pipeline stage, which embeds the inputs.
    mm = None if not first else encoder_profile(
        cfg, d.multimodal, max_num_batched_tokens=tokens, max_num_seqs=seqs,
        max_model_len=s.max_model_len, dtype_bytes=dt, version=parse_version(est.version),
        tensor_parallel_size=s.tensor_parallel_size)  # fmt: skip
    notes = [*est.notes, *unapplied_notes(cfg, d.multimodal)]
    if mm is not None:
        activation = max(mm.peak_bytes, activation + mm.held_bytes)
        notes.append(mm.note)
    graphs = est.cudagraph_memory
    if graphs:
        batch = seqs
        if d.speculative is not None:
            # A decode step carries 1 + k tokens per request: vLLM sizes the captured graphs
            # up to max_num_seqs x (1 + k) x 2 (at most 512; vllm/config/vllm.py,
            # _set_cudagraph_sizes), as for that many sequences.
            batch = seqs * (1 + d.speculative.num_speculative_tokens)
            graphs = startup.cudagraph_memory(cfg, spec, batch, tokens, s)
        count = len(capture_sizes(batch)) + len(full_capture_sizes(batch))
        per_graphs = GRAPH_BYTES_PER_LAYER_WIDTH * spec.num_layers * spec.hidden_size * count
        sets = LORA_GRAPH_SETS if d.lora is not None else 1
        graphs = graphs - per_graphs + int(per_graphs * layer_share * sets)
    return replace(est, activation_peak=activation, cudagraph_memory=graphs, notes=tuple(notes))


def _notes(d: Deployment) -> list[str]:
    out: list[str] = []
    if d.quantization:
        out.append(f"--quantization {d.quantization}: linear layers and experts quantized while "
                   "loading; embeddings, LM head and norms stay in the model dtype")  # fmt: skip
    if d.lora is not None:
        out.append(f"LoRA: {d.lora.max_loras} adapter slot(s) of rank {d.lora.max_lora_rank} "
                   "on every wrapped layer; --max-cpu-loras holds adapters in host memory")
    if d.speculative is not None:
        where = "on the device" if d.speculative.on_device else "on the CPU (no weights)"
        out.append(f"speculative {d.speculative.method}, {d.speculative.num_speculative_tokens} "
                   f"token(s): drafter {where}; the profile run adds the rejection sampler")
    if d.data_parallel_size > 1 or d.enable_expert_parallel:
        how = "whole experts (EP)" if d.enable_expert_parallel else "TP slices of each expert"
        out.append(f"data parallel {d.data_parallel_size}: attention and KV cache per replica; "
                   f"MoE experts over TP x DP ranks as {how}; the all-to-all backends' buffers "
                   "(DeepEP, pplx) are not charged")  # fmt: skip
    return out
