"""The per-rank rules every weight source applies, and what a weight estimate is.

vLLM's layers (``docs/engines.md``): the embedding and the LM head are split
by vocabulary (padded to a multiple of :data:`VOCAB_PADDING`) across ranks;
column- and row-parallel linear layers and MoE experts are split; norms,
routers and replicated KV heads (fewer KV heads than ranks) are whole on every
rank. Used by :mod:`memacct.model.sources.checkpoint`, :mod:`memacct.model.weights.meta`
and the formulas in :mod:`memacct.model.weights.estimate`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memacct.errors import ConfigError
from memacct.model.config import DTYPE_BYTES, ModelConfig

__all__ = ["VOCAB_PADDING", "WeightEstimate", "WeightTensor", "dtype_bytes", "rotary_tensor"]

VOCAB_PADDING = 64
"""vLLM pads the vocabulary of its embedding and LM head to a multiple of this."""



@dataclass(frozen=True)
class WeightTensor:
    """One weight tensor of one tensor-parallel rank, as the serving engine holds it.

    Attributes:
        name: the parameter's name (the checkpoint's, the model's, or the formulas' own).
        role: ``embedding``, ``lm_head``, ``attention``, ``mlp``, ``experts``, ``router``,
            ``norms``, ``vision`` or ``buffers`` (the rotary cos/sin cache).
        shape: its shape (this rank's where a source knows it; a checkpoint's tensor keeps
            the checkpoint's shape, ``nbytes`` is this rank's share of it).
        nbytes: bytes on this rank, quantization tensors (scales, zero points) included.
    """

    name: str
    role: str
    shape: tuple[int, ...]
    nbytes: int


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

    @classmethod
    def of(
        cls,
        tensors: Iterable[WeightTensor],
        source: str,
        quantization: str | None,
        tensor_parallel_size: int,
    ) -> WeightEstimate:
        """The estimate a weight inventory sums to: every tensor's bytes, and by role."""
        by_role: dict[str, int] = {}
        for tensor in tensors:
            by_role[tensor.role] = by_role.get(tensor.role, 0) + tensor.nbytes
        return cls(sum(by_role.values()), by_role, source, quantization, tensor_parallel_size)


def dtype_bytes(config: Mapping[str, Any] | ModelConfig) -> int:
    """Bytes per element of the unquantized weights as vLLM serves them with ``--dtype auto``.

    vLLM serves a float32 checkpoint, or one that names no dtype (gpt-oss),
    in bfloat16 (float16 where bfloat16 is not supported): 2 bytes either way.
    """
    cfg = text_section(config)
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    size = DTYPE_BYTES.get(str(name).lower().removeprefix("torch."), 2)
    return 2 if size == 4 else size


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def padded_vocab_per_rank(vocab: int, tp: int) -> int:
    padded = ceil_div(vocab, VOCAB_PADDING) * VOCAB_PADDING
    return ceil_div(padded, tp)


COLUMN_PARALLEL = re.compile(
    r"(q_proj|k_proj|v_proj|qkv_proj|query_key_value|gate_proj|up_proj|gate_up_proj|w1|w3|"
    r"c_attn|fc1|q_b_proj|kv_b_proj|in_proj|wq|wk|wv|linear_fc1|q_a_proj|kv_a_proj_with_mqa)"
)
_ROW = re.compile(r"(o_proj|down_proj|w2|c_proj|fc2|out_proj|dense|wo|linear_fc2)")


def tensor_role(name: str) -> str:
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


def shard_elements(name: str, shape: tuple[int, ...], tp: int, num_kv_heads: int | None) -> int:
    """Elements of this rank's shard of a checkpoint tensor called ``name``."""
    elems = 1
    for d in shape:
        elems *= d
    if tp == 1 or not shape:
        return elems
    role = tensor_role(name)
    if role in ("embedding", "lm_head"):
        rows = shape[0]
        return padded_vocab_per_rank(rows, tp) * (elems // rows)
    if role in ("norms", "router"):
        return elems
    low = name.lower()
    kv_replicated = num_kv_heads is not None and 0 < num_kv_heads < tp
    if role == "attention" and kv_replicated and re.search(r"(k_proj|v_proj)", low):
        assert num_kv_heads is not None
        return elems // num_kv_heads  # each rank holds one whole, replicated KV head
    if low.endswith(".bias") and _ROW.search(low):
        return elems  # a row-parallel layer's bias is added once, whole on every rank
    if role == "experts" or COLUMN_PARALLEL.search(low) or _ROW.search(low) or role == "vision":
        return ceil_div(elems, tp)
    return elems


def text_section(config: Mapping[str, Any] | ModelConfig) -> ModelConfig:
    """The config through the planner's one reader (:class:`~memacct.model.config.ModelConfig`):
    the language model's section first, then the top level, then the defaults transformers
    fills in for its model type (Gemma 3's published config.json carries no vocab_size).
    A reading already made is used as it is."""
    return ModelConfig.of(config, "config.json")


def int_of(cfg: ModelConfig, *keys: str, default: int | None = None) -> int | None:
    return cfg.first_int(keys, default)


def required_int(cfg: ModelConfig, name: str, *keys: str) -> int:
    value = cfg.first_int(keys)
    if value is None or value <= 0:
        raise ConfigError(
            f"{name}: the config has none of {', '.join(keys)}; memacct cannot size the weights "
            "without it: add it to config.json or give the checkpoint directory"
        )
    return value


def config_kv_heads(config: Mapping[str, Any]) -> int | None:
    cfg = text_section(config)
    return int_of(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num") or int_of(
        cfg, "num_attention_heads"
    )


def rotary_tensor(config: Mapping[str, Any] | ModelConfig) -> WeightTensor:
    """The rotary embedding's cos/sin cache: one per model, max positions x rotary dimension
    in the model dtype (vLLM's ``get_rope`` keeps it as a buffer loaded with the weights).

    A ``linear`` rope scaling holds ``max_positions x factor`` rows
    (``LinearScalingRotaryEmbedding._compute_cos_sin_cache``,
    ``model_executor/layers/rotary_embedding/linear_scaling_rope.py``, vLLM 0.19 and 0.33);
    Gemma 3 builds one rope per layer type (``Gemma3Attention.__init__``, ``gemma3.py``:
    ``get_rope(..., rope_parameters[layer_type])``), the sliding layers' unscaled one besides.
    """
    cfg = text_section(config)
    gemma3 = str(cfg.get("model_type", "")).startswith("gemma3")
    rows = cfg.linear_rope_factor + (1 if gemma3 else 0)
    heads = int_of(cfg, "num_attention_heads", default=0) or 0
    hidden = int_of(cfg, "hidden_size", default=0) or 0
    if cfg.get("kv_lora_rank") is not None:
        rotary = int_of(cfg, "qk_rope_head_dim", default=64) or 64
    else:
        rotary = int_of(cfg, "head_dim", default=hidden // heads if heads else 0) or 0
    factor = cfg.get("partial_rotary_factor")
    if isinstance(factor, (int, float)) and 0 < factor < 1:
        rotary = int(rotary * factor)
    positions = int(rows * (int_of(cfg, "max_position_embeddings", default=0) or 0))
    nbytes = positions * rotary * dtype_bytes(config)
    return WeightTensor("rotary_emb.cos_sin_cache", "buffers", (positions, rotary), nbytes)


def _rotary_bytes(config: Mapping[str, Any]) -> int:
    """The bytes of :func:`rotary_tensor`."""
    return rotary_tensor(config).nbytes
