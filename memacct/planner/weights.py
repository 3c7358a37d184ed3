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
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memacct.errors import ConfigError, InvalidInputError
from memacct.io import loads_json_object, read_json_object, read_prefix
from memacct.planner.config import _MODEL_TYPE_DEFAULTS
from memacct.planner.quant import QuantScheme, parse_quantization

__all__ = [
    "VOCAB_PADDING",
    "WeightEstimate",
    "dtype_bytes",
    "estimate_weights",
    "formula_weights",
    "meta_weights",
    "safetensors_weights",
]

VOCAB_PADDING = 64
"""vLLM pads the vocabulary of its embedding and LM head to a multiple of this."""

_MAX_HEADER = 100 * 2**20  # safetensors caps its JSON header at 100 MB

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "f32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "f16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "f8_e4m3": 1,
    "f8_e5m2": 1,
    "int8": 1,
    "i8": 1,
    "uint8": 1,
    "u8": 1,
    "bool": 1,
    "int16": 2,
    "i16": 2,
    "int32": 4,
    "i32": 4,
    "int64": 8,
    "i64": 8,
    "f64": 8,
    "float64": 8,
}

Source = Literal["auto", "checkpoint", "transformers", "formula"]


@dataclass(frozen=True)
class WeightEstimate:
    """The weights of one rank.

    Attributes:
        total_bytes: bytes of every parameter and quantization tensor on this rank.
        by_role: the same split by role (``embedding``, ``lm_head``, ``attention``,
            ``mlp``, ``experts``, ``router``, ``norms``, ``vision``).
        source: ``checkpoint``, ``transformers`` or ``formula``.
        quantization: the quantization scheme's label, or ``None``.
        tensor_parallel_size: ranks the weights are split across.
    """

    total_bytes: int
    by_role: Mapping[str, int] = field(default_factory=dict)
    source: str = "formula"
    quantization: str | None = None
    tensor_parallel_size: int = 1


def dtype_bytes(config: Mapping[str, Any]) -> int:
    """Bytes per element of the unquantized weights as vLLM serves them with ``--dtype auto``.

    vLLM serves a float32 checkpoint, or one that names no dtype (gpt-oss),
    in bfloat16 (float16 where bfloat16 is not supported): 2 bytes either way.
    """
    text = config.get("text_config")
    merged = {**config, **text} if isinstance(text, Mapping) else config
    name = merged.get("torch_dtype") or merged.get("dtype") or "bfloat16"
    size = _DTYPE_BYTES.get(str(name).lower().removeprefix("torch."), 2)
    return 2 if size == 4 else size


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _padded_vocab(vocab: int, tp: int) -> int:
    padded = _ceil_div(vocab, VOCAB_PADDING) * VOCAB_PADDING
    return _ceil_div(padded, tp)


def _check_tp(tp: object) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InvalidInputError(f"tensor_parallel_size must be a positive integer, got {tp!r}")
    return tp


# ---------------------------------------------------------------- role of a parameter

_COLUMN = re.compile(
    r"(q_proj|k_proj|v_proj|qkv_proj|query_key_value|gate_proj|up_proj|gate_up_proj|w1|w3|"
    r"c_attn|fc1|q_b_proj|kv_b_proj|in_proj|wq|wk|wv|linear_fc1|q_a_proj|kv_a_proj_with_mqa)"
)
_ROW = re.compile(r"(o_proj|down_proj|w2|c_proj|fc2|out_proj|dense|wo|linear_fc2)")


def _role(name: str) -> str:
    low = name.lower()
    if any(k in low for k in ("vision", "visual", "image", "mm_projector", "multi_modal")):
        return "vision"
    if (
        "embed_tokens" in low
        or "wte" in low
        or "word_embeddings" in low
        or low.endswith("tok_embeddings.weight")
    ):
        return "embedding"
    if low.startswith("lm_head") or ".lm_head" in low or low.endswith("output.weight"):
        return "lm_head"
    if "norm" in low or "ln_" in low or "layernorm" in low:
        return "norms"
    if "experts" in low:
        return "experts"
    if re.search(r"\.(router|gate)\.(weight|bias)$", low) or "shared_expert_gate" in low:
        return "router"
    if "attn" in low or "attention" in low:
        return "attention"
    return "mlp"


def _shard_elems(name: str, shape: tuple[int, ...], tp: int, num_kv_heads: int | None) -> int:
    """Elements of this rank's shard of a checkpoint tensor called ``name``."""
    elems = 1
    for d in shape:
        elems *= d
    if tp == 1 or not shape:
        return elems
    role = _role(name)
    if role in ("embedding", "lm_head"):
        rows = shape[0]
        return _padded_vocab(rows, tp) * (elems // rows)
    if role in ("norms", "router"):
        return elems
    low = name.lower()
    kv_replicated = num_kv_heads is not None and 0 < num_kv_heads < tp
    if role == "attention" and kv_replicated and re.search(r"(k_proj|v_proj)", low):
        assert num_kv_heads is not None
        return elems // num_kv_heads  # each rank holds one whole, replicated KV head
    if low.endswith(".bias") and _ROW.search(low):
        return elems  # a row-parallel layer's bias is added once, whole on every rank
    if role == "experts" or _COLUMN.search(low) or _ROW.search(low) or role == "vision":
        return _ceil_div(elems, tp)
    return elems


# ---------------------------------------------------------------- checkpoint headers


def _header(path: Path) -> dict[str, Any]:
    (length,) = struct.unpack("<Q", read_prefix(path, "safetensors file", 0, 8))
    if length <= 0 or length > _MAX_HEADER:
        raise ConfigError(
            f"safetensors file {str(path)!r} declares a {length}-byte header: "
            "not a safetensors file"
        )
    text = read_prefix(path, "safetensors file", 8, length).decode("utf-8", errors="replace")
    return loads_json_object(text, f"safetensors header of {path.name}")


def _checkpoint_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        data = read_json_object(index, "model.safetensors.index.json")
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, Mapping) or not weight_map:
            raise ConfigError(f"{index} has no weight_map: the checkpoint index is damaged")
        names = sorted({str(v) for v in weight_map.values()})
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def safetensors_weights(
    directory: str | os.PathLike[str], *, tensor_parallel_size: int = 1
) -> WeightEstimate:
    """Weights of one rank from a checkpoint directory's safetensors headers (no tensor is read).

    Raises:
        ConfigError: no ``config.json`` or no safetensors file, or a damaged header.
    """
    tp = _check_tp(tensor_parallel_size)
    root = Path(directory)
    config = read_json_object(root / "config.json", "config.json")
    files = _checkpoint_files(root)
    if not files:
        raise ConfigError(
            f"{str(root)!r} holds no *.safetensors file: give a checkpoint directory in "
            "safetensors format, or the config.json alone for an estimate from the architecture"
        )
    kv = _num_kv_heads(config)
    dt = dtype_bytes(config)
    tied = bool(_text(config).get("tie_word_embeddings", True))
    by_role: dict[str, int] = {}
    for path in files:
        for name, entry in _header(path).items():
            if name == "__metadata__" or not isinstance(entry, Mapping):
                continue
            shape = tuple(int(d) for d in entry.get("shape", ()))
            size = _DTYPE_BYTES.get(str(entry.get("dtype", "")).lower(), 2)
            # The engine casts unquantized float tensors to the serving dtype.
            if (
                size == 4
                and str(entry.get("dtype", "")).upper() == "F32"
                and not name.endswith("scale")
            ):
                size = dt
            role = _role(name)
            if role == "lm_head" and tied:
                continue
            by_role[role] = by_role.get(role, 0) + _shard_elems(name, shape, tp, kv) * size
    by_role["buffers"] = by_role.get("buffers", 0) + _rotary_bytes(config)
    quant = parse_quantization(config)
    return WeightEstimate(
        sum(by_role.values()), by_role, "checkpoint", quant.label if quant else None, tp
    )


# ---------------------------------------------------------------- transformers on the meta device


def meta_weights(config: Mapping[str, Any], *, tensor_parallel_size: int = 1) -> WeightEstimate:
    """Weights of one rank from the model built by ``transformers`` on the ``meta`` device.

    Needs the ``memacct[hf]`` extra (``transformers`` and ``torch``), imported here, never at
    import time. Quantized linear layers are sized from their shapes by the checkpoint's
    quantization scheme.

    Raises:
        ConfigError: ``transformers`` is missing or does not know the architecture.
    """
    tp = _check_tp(tensor_parallel_size)
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ConfigError(
            f"sizing from the architecture needs transformers ({exc.name} is missing): "
            "pip install 'memacct[hf]'"
        ) from None
    cfg_dict = {k: v for k, v in config.items() if k != "quantization_config"}
    model_type = cfg_dict.get("model_type")
    try:
        hf_config = transformers.AutoConfig.for_model(
            str(model_type), **{k: v for k, v in cfg_dict.items() if k != "model_type"}
        )
        causal_lm: Any = transformers.AutoModelForCausalLM
        any_model: Any = transformers.AutoModel
        with torch.device("meta"):
            try:
                model = causal_lm.from_config(hf_config)
            except ValueError:
                model = any_model.from_config(hf_config)
    except Exception as exc:  # transformers raises many kinds for an unknown architecture
        raise ConfigError(
            f"transformers cannot build model_type {model_type!r} ({type(exc).__name__}: {exc}); "
            "memacct falls back to its own formulas"
        ) from None
    quant = parse_quantization(config)
    dt = dtype_bytes(config)
    kv = _num_kv_heads(config)
    by_role: dict[str, int] = {}
    for name, param in model.named_parameters():
        shape = tuple(int(d) for d in param.shape)
        role = _role(name)
        elems = _shard_elems(name, shape, tp, kv)
        nbytes = elems * dt
        module = name.rsplit(".", 1)[0]
        fused_expert = role == "experts" and len(shape) == 3
        if quant is not None and (name.endswith("weight") or fused_expert) and not quant.skips(
            module
        ):
            if role == "experts" and len(shape) == 3:
                nbytes = _quantized_experts(quant, name, shape, tp)
            elif role in ("attention", "mlp") and len(shape) == 2 and not quant.experts_only:
                out_f, in_f = shape
                if _COLUMN.search(name.lower()):
                    out_f = _ceil_div(out_f, tp)
                else:
                    in_f = _ceil_div(in_f, tp)
                nbytes = quant.linear_bytes(out_f, in_f)
        by_role[role] = by_role.get(role, 0) + nbytes
    if getattr(model.config, "tie_word_embeddings", False):
        by_role.pop("lm_head", None)
    return WeightEstimate(
        sum(by_role.values()), by_role, "transformers", quant.label if quant else None, tp
    )


def _quantized_experts(quant: QuantScheme, name: str, shape: tuple[int, ...], tp: int) -> int:
    experts, a, b = shape
    # transformers keeps fused experts as (experts, in, out); tensor parallelism splits the
    # intermediate dimension, the larger one of gate_up and the smaller one of down.
    inter_first = "down" in name
    out_f, in_f = (b, a)
    if inter_first:
        in_f = _ceil_div(in_f, tp)
    else:
        out_f = _ceil_div(out_f, tp)
    return quant.experts_bytes(experts, out_f, in_f, mxfp4_pad=(1, 1))


# ---------------------------------------------------------------- hand-written formulas


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # The language model's section, over the defaults transformers fills in for its model type
    # (Gemma 3's published config.json carries no vocab_size, for one).
    text = config.get("text_config")
    merged: Mapping[str, Any] = {**config, **text} if isinstance(text, Mapping) else config
    defaults = _MODEL_TYPE_DEFAULTS.get(str(merged.get("model_type", "")), {})
    return {**defaults, **merged} if defaults else merged


def _int(cfg: Mapping[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def _need(cfg: Mapping[str, Any], name: str, *keys: str) -> int:
    value = _int(cfg, *keys)
    if value is None or value <= 0:
        raise ConfigError(
            f"{name}: the config has none of {', '.join(keys)}; memacct cannot size the weights "
            "without it: add it to config.json or give the checkpoint directory"
        )
    return value


def _num_kv_heads(config: Mapping[str, Any]) -> int | None:
    cfg = _text(config)
    return _int(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num") or _int(
        cfg, "num_attention_heads"
    )


@dataclass
class _Acc:
    by_role: dict[str, int] = field(default_factory=dict)

    def add(self, role: str, nbytes: int) -> None:
        self.by_role[role] = self.by_role.get(role, 0) + int(nbytes)


def _moe_layers(cfg: Mapping[str, Any], layers: int, experts: int) -> set[int]:
    if not experts:
        return set()
    first_dense = _int(cfg, "first_k_dense_replace", default=0) or 0
    step = _int(cfg, "decoder_sparse_step", "interleave_moe_layer_step", default=1) or 1
    mlp_only = cfg.get("mlp_only_layers") or []
    only = {int(i) for i in mlp_only if isinstance(i, int)}
    return {i for i in range(layers) if i >= first_dense and (i + 1) % step == 0 and i not in only}


def _refuse_state_layers(cfg: Mapping[str, Any]) -> None:
    # Mamba and linear-attention layers (Granite 4.0-H, Qwen3-Next, Nemotron-H, Jamba) carry
    # projections, convolutions and gates the formulas do not model: the meta-device count
    # or the checkpoint's headers size them (both exact), never a guess.
    kinds = {str(kind) for kind in cfg.get("layer_types") or () if isinstance(kind, str)}
    keys = [key for key in cfg if key.startswith(("mamba_", "linear_", "ssm_"))]
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
    tp = _check_tp(tensor_parallel_size)
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


def _rotary_bytes(config: Mapping[str, Any]) -> int:
    """The rotary embedding's cos/sin cache: one per model, max positions x rotary dimension
    in the model dtype (vLLM's ``get_rope`` keeps it as a buffer loaded with the weights)."""
    cfg = _text(config)
    heads = _int(cfg, "num_attention_heads", default=0) or 0
    hidden = _int(cfg, "hidden_size", default=0) or 0
    if cfg.get("kv_lora_rank") is not None:
        rotary = _int(cfg, "qk_rope_head_dim", default=64) or 64
    else:
        rotary = _int(cfg, "head_dim", default=hidden // heads if heads else 0) or 0
    factor = cfg.get("partial_rotary_factor")
    if isinstance(factor, (int, float)) and 0 < factor < 1:
        rotary = int(rotary * factor)
    positions = _int(cfg, "max_position_embeddings", default=0) or 0
    return positions * rotary * dtype_bytes(config)


def _vision_bytes(vision: Mapping[str, Any], text_hidden: int, tp: int, dt: int) -> int:
    """A ViT tower plus its projector: attention (4 h^2), MLP (2 h i), norms, patch embedding."""
    vh = _int(vision, "hidden_size", "embed_dim", "width", default=0) or 0
    depth = _int(vision, "num_hidden_layers", "depth", "num_layers", default=0) or 0
    vi = _int(vision, "intermediate_size", "mlp_dim", default=4 * vh) or 4 * vh
    patch = _int(vision, "patch_size", default=14) or 14
    channels = _int(vision, "num_channels", "in_channels", default=3) or 3
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
    model: Mapping[str, Any] | str | os.PathLike[str],
    *,
    tensor_parallel_size: int = 1,
    source: Source = "auto",
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> WeightEstimate:
    """Weights of one rank, from the best source available (see the module docstring).

    Args:
        model: a ``config.json`` dict, or a checkpoint directory.
        tensor_parallel_size: ranks the model is split across.
        source: ``auto`` (checkpoint, else formulas), or one source by name.
            ``transformers`` is used only when asked: it is slower to import
            (about 2 s) and the formulas agree with it on every preset (tests).
        mxfp4_pad: MXFP4 expert padding (:func:`mxfp4_padding`).

    Raises:
        ConfigError: the source cannot be read, or lacks a size it needs.
        UnknownQuantizationError: the checkpoint's quantization method is unknown.
    """
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
