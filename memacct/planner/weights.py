"""The bytes of a model's weights on one tensor-parallel rank, as a serving engine holds them.

Three sources, best first (:func:`estimate_weights` picks):

1. a checkpoint directory: the tensor shapes and dtypes from the safetensors
   headers (only the 8-byte length and the JSON header of each file are read,
   never a tensor), or from ``model.safetensors.index.json`` plus the headers;
2. ``transformers`` (the optional ``memacct[hf]`` extra): the model built on
   the ``meta`` device from its config, no memory and no weights, each
   parameter sized by its role;
3. hand-written per-family formulas from ``config.json`` (dense, MoE, MLA,
   multimodal towers), the fallback without ``transformers``.

Every source applies the same per-rank rules, those of vLLM's layers (see
``docs/engines.md``): the embedding and the LM head are split by vocabulary
(padded to a multiple of 64) across ranks; column- and row-parallel linear
layers and MoE experts are split; norms, routers and the replicated KV heads
(fewer KV heads than ranks) are whole on every rank. Quantized linear layers
are sized by :mod:`memacct.planner.quant`; embeddings, the LM head, norms and
routers stay in the model's dtype.

Example::

    >>> from memacct.planner import load_model_preset
    >>> w = estimate_weights(load_model_preset("llama-3.1-8b"), tensor_parallel_size=2)
    >>> round(w.total_bytes / 2**30, 2)
    7.49
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memacct.checks import check_int
from memacct.errors import ConfigError
from memacct.io import read_json_object
from memacct.planner.checkpoint import (
    TensorTable,
    _checkpoint_files,
    safetensors_weights,
    table_weights,
)
from memacct.planner.config import _Config
from memacct.planner.meta import meta_weights
from memacct.planner.quant import parse_quantization
from memacct.planner.weight_rules import (
    VOCAB_PADDING,
    WeightEstimate,
    _ceil_div,
    _int,
    _need,
    _padded_vocab,
    _rotary_bytes,
    _text,
    dtype_bytes,
)

__all__ = [
    "VOCAB_PADDING",
    "WeightEstimate",
    "dtype_bytes",
    "estimate_weights",
    "formula_weights",
    "meta_weights",
    "mxfp4_padding",
    "safetensors_weights",
]

Source = Literal["auto", "checkpoint", "transformers", "formula"]


# ---------------------------------------------------------------- hand-written formulas


@dataclass
class _Acc:
    by_role: dict[str, int] = field(default_factory=dict)

    def add(self, role: str, nbytes: int) -> None:
        self.by_role[role] = self.by_role.get(role, 0) + int(nbytes)


def _moe_layers(cfg: _Config, layers: int, experts: int) -> set[int]:
    if not experts:
        return set()
    first_dense = _int(cfg, "first_k_dense_replace", default=0) or 0
    step = _int(cfg, "decoder_sparse_step", "interleave_moe_layer_step", default=1) or 1
    mlp_only = cfg.get("mlp_only_layers") or []
    only = {int(i) for i in mlp_only if isinstance(i, int)}
    return {i for i in range(layers) if i >= first_dense and (i + 1) % step == 0 and i not in only}


def _refuse_state_layers(cfg: _Config) -> None:
    # Mamba and linear-attention layers (Granite 4.0-H, Qwen3-Next, Nemotron-H, Jamba) carry
    # projections, convolutions and gates the formulas do not model: the meta-device count
    # or the checkpoint's headers size them (both exact), never a guess.
    kinds = {str(kind) for kind in cfg.get("layer_types") or () if isinstance(kind, str)}
    keys = [key for key in cfg.written_keys() if key.startswith(("mamba_", "linear_", "ssm_"))]
    if kinds & {"mamba", "linear_attention"} or keys:
        raise ConfigError(
            f"{cfg.get('model_type', 'this model')} has Mamba or linear-attention layers, "
            f"which memacct's per-family formulas do not size: install memacct[hf] "
            f"(transformers) or give the checkpoint directory"
        )


def formula_weights(
    config: Mapping[str, Any],
    *,
    tensor_parallel_size: int = 1,
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> WeightEstimate:
    """Weights of one rank from per-family formulas over ``config.json``.

    Args:
        config: the model's ``config.json``.
        tensor_parallel_size: ranks the layers are split across.
        mxfp4_pad: (intermediate, hidden) alignment the engine's MXFP4 MoE
            kernel pads expert matrices to (see :func:`mxfp4_padding`).

    Raises:
        ConfigError: a size the formulas need is missing.
        UnknownQuantizationError: the quantization method is not known.
    """
    tp = check_int("tensor_parallel_size", tensor_parallel_size)
    cfg = _text(config)
    _refuse_state_layers(cfg)
    quant = parse_quantization(config)
    dt = dtype_bytes(config)
    h = _need(cfg, "hidden_size", "hidden_size", "d_model", "n_embd")
    layers = _need(cfg, "num_hidden_layers", "num_hidden_layers", "num_layers", "n_layer")
    heads = _need(cfg, "num_attention_heads", "num_attention_heads", "n_head")
    kv_heads = _int(cfg, "num_key_value_heads", default=heads) or heads
    head_dim = _int(cfg, "head_dim", default=h // heads) or h // heads
    vocab = _need(cfg, "vocab_size", "vocab_size")
    model_type = str(cfg.get("model_type", ""))
    experts = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0
    intermediate = (
        _int(cfg, "intermediate_size", "intermediate_size_mlp", "ffn_dim", default=0) or 0
    )
    dense_i = _int(cfg, "intermediate_size_mlp", default=intermediate) or intermediate
    moe_i = _int(cfg, "moe_intermediate_size", default=intermediate) or intermediate
    if not experts and not dense_i:
        raise ConfigError(
            "intermediate_size: the config has no MLP width; add it to config.json or give the "
            "checkpoint directory"
        )
    acc = _Acc()
    pv = _padded_vocab(vocab, tp)
    acc.add("embedding", pv * h * dt)
    # transformers' default when config.json omits it (Gemma 2 and 3 do) is tied.
    if not cfg.get("tie_word_embeddings", True):
        acc.add("lm_head", pv * h * dt)

    def linear(module: str, out_f: int, in_f: int, role: str) -> None:
        if quant is not None and not quant.experts_only and not quant.skips(module):
            acc.add(role, quant.linear_bytes(out_f, in_f))
        else:
            acc.add(role, out_f * in_f * dt)

    kv_rank = max(1, kv_heads // tp)
    h_rank = max(1, heads // tp)
    mla = cfg.get("kv_lora_rank") is not None
    qkv_bias = model_type.startswith("qwen2") or bool(cfg.get("attention_bias", False))
    o_bias = bool(cfg.get("attention_bias", False)) and not model_type.startswith("qwen2")
    norms = 4 if model_type.startswith(("gemma2", "gemma3")) else 2
    moe = _moe_layers(cfg, layers, experts)
    shared_i = (_int(cfg, "shared_expert_intermediate_size", default=0) or 0) or (
        (_int(cfg, "n_shared_experts", default=0) or 0) * moe_i
    )
    if model_type.startswith("llama4"):
        shared_i = intermediate  # Llama 4's MoE layers add one shared expert of the same width
    for i in range(layers):
        p = f"model.layers.{i}"
        acc.add("norms", norms * h * dt)
        if mla:
            rank = _need(cfg, "kv_lora_rank", "kv_lora_rank")
            rope = _int(cfg, "qk_rope_head_dim", default=64) or 64
            nope = _int(cfg, "qk_nope_head_dim", default=128) or 128
            v_dim = _int(cfg, "v_head_dim", default=nope) or nope
            q_rank = _int(cfg, "q_lora_rank", default=0) or 0
            if q_rank:
                linear(f"{p}.self_attn.q_a_proj", q_rank, h, "attention")
                acc.add("norms", q_rank * dt)
                linear(f"{p}.self_attn.q_b_proj", h_rank * (nope + rope), q_rank, "attention")
            else:
                linear(f"{p}.self_attn.q_proj", h_rank * (nope + rope), h, "attention")
            linear(f"{p}.self_attn.kv_a_proj_with_mqa", rank + rope, h, "attention")
            acc.add("norms", rank * dt)
            linear(f"{p}.self_attn.kv_b_proj", h_rank * (nope + v_dim), rank, "attention")
            linear(f"{p}.self_attn.o_proj", h, h_rank * v_dim, "attention")
        else:
            qkv_out = (h_rank + 2 * kv_rank) * head_dim
            linear(f"{p}.self_attn.q_proj", qkv_out, h, "attention")
            linear(f"{p}.self_attn.o_proj", h, h_rank * head_dim, "attention")
            if qkv_bias:
                acc.add("attention", qkv_out * dt)
            if o_bias:
                acc.add("attention", h * dt)
            if model_type.startswith("qwen3") or model_type in ("olmo2", "gemma3", "gemma3_text"):
                acc.add("norms", 2 * head_dim * dt)  # q_norm and k_norm
            if model_type == "gpt_oss":
                acc.add("attention", h_rank * dt)  # attention sinks
        if i in moe:
            acc.add("router", experts * h * dt)
            if model_type == "gpt_oss":
                acc.add("router", experts * dt)  # router bias
            im = _ceil_div(moe_i, tp)
            if quant is not None and (quant.experts_only or not quant.skips(f"{p}.mlp.experts")):
                acc.add(
                    "experts",
                    quant.experts_bytes(
                        experts, 2 * im, h, mxfp4_pad=(2 * mxfp4_pad[0], mxfp4_pad[1])
                    ),
                )
                acc.add(
                    "experts",
                    quant.experts_bytes(experts, h, im, mxfp4_pad=(mxfp4_pad[1], mxfp4_pad[0])),
                )
                if quant.method == "mxfp4":
                    im_p = _ceil_div(im, mxfp4_pad[0]) * mxfp4_pad[0]
                    h_p = _ceil_div(h, mxfp4_pad[1]) * mxfp4_pad[1]
                    acc.add("experts", experts * (2 * im_p + h_p) * 2)  # bf16 expert biases
            else:
                acc.add("experts", experts * 3 * im * h * dt)
            if shared_i:
                si = _ceil_div(shared_i, tp)
                linear(f"{p}.mlp.shared_experts.gate_up_proj", 2 * si, h, "mlp")
                linear(f"{p}.mlp.shared_experts.down_proj", h, si, "mlp")
                if cfg.get("shared_expert_intermediate_size"):
                    acc.add("router", h * dt)  # shared_expert_gate
        else:
            di = _ceil_div(dense_i, tp)
            linear(f"{p}.mlp.gate_up_proj", 2 * di, h, "mlp")
            linear(f"{p}.mlp.down_proj", h, di, "mlp")
    acc.add("norms", h * dt)
    acc.add("buffers", _rotary_bytes(config))
    vision = config.get("vision_config")
    if isinstance(vision, Mapping):
        acc.add("vision", _vision_bytes(vision, h, tp, dt))
    return WeightEstimate(
        sum(acc.by_role.values()), acc.by_role, "formula", quant.label if quant else None, tp
    )


def _vision_bytes(vision: Mapping[str, Any], text_hidden: int, tp: int, dt: int) -> int:
    """A ViT tower plus its projector: attention (4 h^2), MLP (2 h i), norms, patch embedding."""
    vision_cfg = _Config(vision, "vision_config")
    vh = _int(vision_cfg, "hidden_size", "embed_dim", "width", default=0) or 0
    depth = _int(vision_cfg, "num_hidden_layers", "depth", "num_layers", default=0) or 0
    vi = _int(vision_cfg, "intermediate_size", "mlp_dim", default=4 * vh) or 4 * vh
    patch = _int(vision_cfg, "patch_size", default=14) or 14
    channels = _int(vision_cfg, "num_channels", "in_channels", default=3) or 3
    if not vh or not depth:
        return 0
    per_layer = _ceil_div(4 * vh * vh + 2 * vh * vi, tp) + 4 * vh  # linears split, norms whole
    tower = depth * per_layer + channels * patch * patch * vh
    projector = _ceil_div(vh * text_hidden + text_hidden * text_hidden, tp)
    return (tower + projector) * dt


def mxfp4_padding(device_class: str) -> tuple[int, int]:
    """The (intermediate, hidden) alignment vLLM's MXFP4 MoE kernels pad expert weights to.

    ``hopper``: vLLM 0.11's Triton path on H100/H200 holds the expert intermediate
    dimension padded to 256 (measured from its "Model loading took" figures for gpt-oss-20b
    and -120b, docs/accuracy.md); ``blackwell``: FlashInfer pads both to 256; ``marlin``
    (GPUs without native FP4 support in older releases, Ampere/Ada): intermediate to 128,
    hidden to 256 (``vllm/model_executor/layers/quantization/mxfp4.py``).
    """
    return {"hopper": (256, 1), "blackwell": (256, 256), "marlin": (128, 256)}.get(
        device_class, (64, 1)
    )


def estimate_weights(
    model: Mapping[str, Any] | str | os.PathLike[str] | TensorTable,
    *,
    tensor_parallel_size: int = 1,
    source: Source = "auto",
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> WeightEstimate:
    """Weights of one rank, from the best source available (see the module docstring).

    Args:
        model: a ``config.json`` dict, a checkpoint directory, or a checkpoint's tensor
            table (:class:`~memacct.planner.checkpoint.TensorTable`: safetensors headers
            read from the Hub, a GGUF file's tensors).
        tensor_parallel_size: ranks the model is split across.
        source: ``auto`` (checkpoint, else formulas), or one source by name.
            ``transformers`` is used only when asked: it is slower to import
            (about 2 s) and the formulas agree with it on every preset (tests).
        mxfp4_pad: MXFP4 expert padding (:func:`mxfp4_padding`).

    Raises:
        ConfigError: the source cannot be read, or lacks a size it needs.
        UnknownQuantizationError: the checkpoint's quantization method is unknown.
    """
    if isinstance(model, TensorTable) and source in ("auto", "checkpoint"):
        return table_weights(model, tensor_parallel_size=tensor_parallel_size)
    if isinstance(model, TensorTable):
        model = model.config
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if path.is_dir() and source in ("auto", "checkpoint") and _checkpoint_files(path):
            return safetensors_weights(path, tensor_parallel_size=tensor_parallel_size)
        cfg_path = path / "config.json" if path.is_dir() else path
        config: Mapping[str, Any] = read_json_object(cfg_path, "config.json")
    else:
        config = model
    if source == "checkpoint":
        raise ConfigError("source='checkpoint' needs a checkpoint directory with safetensors files")
    if source == "transformers":
        return meta_weights(config, tensor_parallel_size=tensor_parallel_size)
    try:
        return formula_weights(
            config, tensor_parallel_size=tensor_parallel_size, mxfp4_pad=mxfp4_pad
        )
    except ConfigError as formula_error:
        if source == "formula":
            raise
        # A size the formulas need is missing from config.json (Gemma 3 leaves its
        # vocabulary to transformers' defaults): the meta-device model knows it.
        try:
            return meta_weights(config, tensor_parallel_size=tensor_parallel_size)
        except ConfigError:
            raise formula_error from None
