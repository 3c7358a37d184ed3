"""The weights one vLLM rank holds under a deployment: online quantization, expert, data and
pipeline parallelism, CPU offload (:class:`~memacct.engines.deployment.Deployment`).

Each term is a small function over the model's weight inventory
(:func:`memacct.model.weights.estimate.weight_tensors`: every tensor of a rank with its role and
name, from a checkpoint's tensor table or the per-family formulas); the rules and their
vLLM 0.33 sources are in docs/engines.md ("Deployment settings"):

* :func:`serving_config`: ``--quantization fp8`` on an unquantized checkpoint adds vLLM's
  ``Fp8Config`` (``vllm/model_executor/layers/quantization/fp8.py``: ``Fp8LinearMethod``
  and ``Fp8MoEMethod`` quantize linear layers and experts to FP8 while loading; embeddings,
  the LM head and norms are not ``LinearBase`` layers and stay in the model dtype);
* :func:`rank_weights`: each pipeline stage's layers (``vllm/distributed/utils.py``,
  ``get_pp_indices``), the embedding on the first stage and the LM head and final norm on
  the last (``PPMissingLayer`` elsewhere; a tied LM head brings the embedding to the last
  stage too); MoE experts split over TP x DP ranks (``vllm/model_executor/layers/fused_moe/
  config.py``, ``FusedMoEParallelConfig.make``: without EP as TP slices of every expert,
  with ``--enable-expert-parallel`` as whole experts, ``determine_expert_map``);
* :func:`cpu_offload`: ``--cpu-offload-gb`` moves decoder-layer parameters to host memory
  until that many bytes are moved (``maybe_offload_to_cpu``, called by ``make_layers``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from memacct.engines.deployment import QUANTIZATIONS, Deployment
from memacct.errors import InvalidInputError
from memacct.model.config import ModelConfig
from memacct.model.geometry import pipeline_partition
from memacct.model.weights.estimate import (
    WeightEstimate,
    dtype_bytes,
    estimate_weights,
    weight_tensors,
)

__all__ = [
    "LAYER_ROLES",
    "cpu_offload",
    "layer_parameters",
    "local_experts",
    "rank_weights",
    "serving_config",
    "with_layers",
]

LAYER_ROLES = ("attention", "mlp", "experts", "router", "norms")
"""The roles of :class:`WeightEstimate` that belong to decoder layers (the rest: embedding,
LM head, rotary buffers and the vision tower)."""


def _text_section(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy of ``config`` and the section holding the language model's sizes (the copy
    itself, or its ``text_config``)."""
    copy = dict(config)
    text = copy.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" in text:
        section = dict(text)
        copy["text_config"] = section
        return copy, section
    return copy, copy


def serving_config(config: Mapping[str, Any], deployment: Deployment) -> Mapping[str, Any]:
    """The config as vLLM serves it under ``--quantization`` and ``--dtype``.

    ``--quantization fp8`` on a checkpoint without ``quantization_config``: vLLM's online
    FP8 (per-tensor weight scales, dynamic activation scales). On a checkpoint that carries
    its own: the same method is accepted, another is refused as vLLM refuses it
    (``ModelConfig._verify_quantization``).
    """
    if deployment.quantization is None and deployment.dtype == "auto":
        return config
    copy, section = _text_section(config)
    if deployment.quantization is not None:
        asked = deployment.quantization.lower()
        own = copy.get("quantization_config") or section.get("quantization_config")
        if isinstance(own, Mapping):
            method = str(own.get("quant_method", "")).lower()
            if _method_family(method) != _method_family(asked):
                raise InvalidInputError(
                    f"--quantization {deployment.quantization}: the checkpoint is already "
                    f"quantized with {method or 'an unnamed method'}; vLLM refuses the "
                    f"mismatch: drop --quantization (or give --quantization {method})"
                )
        elif asked in QUANTIZATIONS:
            copy["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                           "online": True}  # fmt: skip
        else:
            raise InvalidInputError(
                f"--quantization {deployment.quantization}: the checkpoint is not quantized, "
                f"and memacct sizes online quantization for {', '.join(QUANTIZATIONS)} only: "
                "give --quantization fp8, or a checkpoint quantized with that method"
            )
    if deployment.dtype != "auto":
        name = "float16" if deployment.dtype == "half" else deployment.dtype
        section["torch_dtype"] = name
        section.pop("dtype", None)
    return copy


def _method_family(method: str) -> str:
    """A quantization method without vLLM's kernel suffixes (``awq_marlin`` is ``awq``,
    ``modelopt_fp4`` is ``modelopt``, ``compressed_tensors`` is ``compressed-tensors``)."""
    name = method.lower().replace("_", "-")
    for suffix in ("-marlin", "-fp4", "-fp8"):
        name = name.removesuffix(suffix)
    return name


def with_layers(config: Mapping[str, Any], num_layers: int) -> dict[str, Any]:
    """A copy of ``config`` with its first ``num_layers`` decoder layers only."""
    copy, section = _text_section(config)
    section["num_hidden_layers"] = num_layers
    for key in ("layer_types", "layers_block_type"):
        kinds = section.get(key)
        if isinstance(kinds, list):
            section[key] = kinds[:num_layers]
    return copy


def local_experts(num_experts: int, ep_size: int) -> int:
    """Experts on the fullest rank: vLLM's ``determine_expert_map`` gives ``E // ep`` to each
    rank and one more to the first ``E % ep``."""
    return num_experts // ep_size + (1 if num_experts % ep_size else 0)


def _num_experts(config: Mapping[str, Any]) -> int:
    cfg = ModelConfig(config, "config.json")
    return cfg.first_int(("num_experts", "num_local_experts", "n_routed_experts"), 0) or 0


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def _layer_of(name: str) -> int | None:
    """The decoder layer a tensor of the inventory belongs to (``None``: none)."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def _in_stage(name: str, start: int, end: int) -> bool:
    layer = _layer_of(name)
    return layer is not None and start <= layer < end


def rank_weights(
    model: Any,
    deployment: Deployment,
    *,
    tensor_parallel_size: int,
    stage: int = 0,
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> WeightEstimate:
    """The weights of one rank of pipeline stage ``stage``, summed from the weight inventory
    (:func:`memacct.model.weights.estimate.weight_tensors`: a checkpoint's tensor table, else the
    formulas; see the module notes).

    Args:
        model: a ``config.json`` dict, a checkpoint directory or a tensor table.
        deployment: the pipeline, data and expert parallelism to split by.
        tensor_parallel_size: ranks each layer is split across.
        stage: the pipeline stage (0 first).
        mxfp4_pad: MXFP4 expert padding.

    Raises:
        InvalidInputError: more pipeline stages than layers.
        ConfigError: a size the weights need is missing.
    """
    tp, pp = tensor_parallel_size, deployment.pipeline_parallel_size
    tensors = weight_tensors(model, tensor_parallel_size=tp, mxfp4_pad=mxfp4_pad)
    indices = [i for t in tensors if t.role != "vision" and (i := _layer_of(t.name)) is not None]
    layers = max(indices) + 1 if indices else 1
    parts = pipeline_partition(layers, pp) if pp > 1 else (layers,)
    start = sum(parts[:stage])
    end = start + parts[stage]
    first, last = stage == 0, stage == pp - 1
    tied = not any(t.role == "lm_head" for t in tensors)
    roles: dict[str, int] = {}
    for t in tensors:
        layer = None if t.role == "vision" else _layer_of(t.name)
        if t.role == "vision":
            keep = True  # the vision tower (its own layers): every stage builds it
        elif layer is not None:
            keep = start <= layer < end
        elif t.role == "embedding":
            keep = first or (last and tied)
        elif t.role in ("lm_head", "norms"):
            keep = last  # the LM head and the final norm
        else:
            keep = True  # the rotary table and a vision tower: every stage builds them
        if keep:
            roles[t.role] = roles.get(t.role, 0) + t.nbytes
    experts = sum(1 for t in tensors if t.role == "experts")
    if experts and (deployment.data_parallel_size > 1 or deployment.enable_expert_parallel):
        roles["experts"] = _expert_bytes(model, deployment, tp, start, end, mxfp4_pad)
    clean = {k: v for k, v in roles.items() if v}
    whole = estimate_weights(model, tensor_parallel_size=tp, mxfp4_pad=mxfp4_pad)
    return replace(whole, total_bytes=sum(clean.values()), by_role=clean)


def _expert_bytes(model: Any, deployment: Deployment, tp: int, start: int, end: int,
                  pad: tuple[int, int]) -> int:  # fmt: skip
    """This rank's expert weights of layers ``[start, end)`` with the experts over TP x DP
    ranks: TP slices of each (the MoE layer's TP is TP x DP), or whole experts with EP."""
    ranks = tp * deployment.data_parallel_size
    ep = deployment.enable_expert_parallel
    tensors = weight_tensors(model, tensor_parallel_size=1 if ep else ranks, mxfp4_pad=pad)
    chosen = [t for t in tensors if t.role == "experts" and _in_stage(t.name, start, end)]
    if not ep:
        return sum(t.nbytes for t in chosen)
    # Whole experts: the fused tensors hold every expert (their first dimension); a checkpoint
    # lists one tensor per expert (``experts.<i>.``).
    per_expert = [t for t in chosen if _EXPERT.search(t.name)]
    count = 1 + max((int(m.group(1)) for t in per_expert if (m := _EXPERT.search(t.name))),
                    default=-1)  # fmt: skip
    total = 0
    for t in chosen:
        experts = count if _EXPERT.search(t.name) else (t.shape[0] if t.shape else 1)
        total += t.nbytes * local_experts(experts, ranks) // experts
    return total


def layer_parameters(config: Mapping[str, Any], tensor_parallel_size: int) -> list[int] | None:
    """One decoder layer's parameters on a rank, bytes, in vLLM's registration order
    (``self_attn.qkv_proj`` weight and bias, ``o_proj``, ``mlp.gate_up_proj``, ``down_proj``,
    the two norms); ``None`` where memacct does not list them (MoE, MLA, quantized)."""
    from memacct.model.weights.quant import parse_quantization

    cfg = ModelConfig(config, "config.json")
    if (parse_quantization(config) is not None or cfg.get("kv_lora_rank") is not None
            or _num_experts(config)):  # fmt: skip
        return None
    h = cfg.first_int(("hidden_size",), 0) or 0
    heads = cfg.first_int(("num_attention_heads",), 0) or 0
    inter = cfg.first_int(("intermediate_size",), 0) or 0
    if not (h and heads and inter):
        return None
    tp, dt = tensor_parallel_size, dtype_bytes(config)
    kv = cfg.first_int(("num_key_value_heads",), heads) or heads
    hd = cfg.first_int(("head_dim",), h // heads) or h // heads
    q_rank, kv_rank = -(-heads // tp) * hd, max(1, kv // tp) * hd
    qkv = q_rank + 2 * kv_rank
    bias = str(cfg.get("model_type", "")).startswith("qwen2") or bool(cfg.get("attention_bias"))
    i_rank = -(-inter // tp)
    sizes = [qkv * h, *([qkv] if bias else []), h * q_rank, 2 * i_rank * h, h * i_rank, h, h]
    return [n * dt for n in sizes]


def cpu_offload(
    weights: WeightEstimate, deployment: Deployment, parameters: list[int] | None = None,
    num_layers: int = 0,
) -> tuple[WeightEstimate, int]:  # fmt: skip
    """``weights`` less what ``--cpu-offload-gb`` keeps in host memory, and that amount.

    vLLM (``maybe_offload_to_cpu``) walks each decoder layer's parameters in order and moves
    one more while the moved bytes are below the setting, so it moves the shortest run of
    whole parameters that reaches it; never the embedding or the LM head; at most all the
    rank's layers. With ``parameters`` (:func:`layer_parameters`) memacct walks the same
    run; without, it charges exactly the setting (vLLM may move up to one parameter more).
    """
    want = deployment.cpu_offload_bytes
    if want <= 0:
        return weights, 0
    layer_bytes = sum(weights.by_role.get(role, 0) for role in LAYER_ROLES)
    moved = min(want, layer_bytes)
    if parameters and num_layers:
        moved = 0
        for size in parameters * num_layers:
            if moved >= want:
                break
            moved += size
    roles = dict(weights.by_role)
    roles["cpu_offload"] = -moved
    return replace(weights, total_bytes=weights.total_bytes - moved, by_role=roles), moved
