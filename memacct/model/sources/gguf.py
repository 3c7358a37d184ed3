"""A GGUF file's metadata and tensor table, read as an engine reads it, mapped to a config.

vLLM serves a ``.gguf`` file by reading its metadata into a transformers
config (transformers' ``GGUF_CONFIG_MAPPING``, ``transformers/integrations/ggml.py``)
and keeping its quantized tensors as the file stores them. memacct reads the
same two things with the ``gguf`` package (the ``memacct[gguf]`` extra,
imported here only): the ``{arch}.*`` keys become the ``config.json`` keys the
planner reads, and each tensor's bytes in the file become its weight bytes.
Tensor data is never read (the reader maps the file; only the header is touched).

Architectures without a mapping here are refused, naming them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError
from memacct.model.sources.checkpoint import TensorInfo, TensorTable

__all__ = ["GGUF_ARCHITECTURES", "read_gguf"]

# GGUF architecture -> (transformers model_type, the architecture class its config names);
# the GGUF names are those of llama.cpp's LLM_ARCH_NAMES.
GGUF_ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llama": ("llama", "LlamaForCausalLM"),
    "mistral": ("mistral", "MistralForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "qwen2moe": ("qwen2_moe", "Qwen2MoeForCausalLM"),
    "qwen3moe": ("qwen3_moe", "Qwen3MoeForCausalLM"),
}
"""The GGUF architectures memacct maps to a config; any other is refused."""

# {arch}.<key> -> config.json key (the keys of transformers' GGUF_CONFIG_MAPPING).
_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.sliding_window": "sliding_window",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
}

# GGUF tensor names (llama.cpp's LLM_TENSOR_NAMES) -> the Hugging Face names the weight roles
# (embedding, attention, experts, ...) are read from.
_TOP = {
    "token_embd": "model.embed_tokens",
    "output": "lm_head",
    "output_norm": "model.norm",
}
_BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_norm": "input_layernorm",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+?)\.(weight|bias)$")


def _hf_name(name: str) -> str:
    match = _BLOCK_NAME.fullmatch(name)
    if match:
        layer, part, suffix = match.groups()
        return f"model.layers.{layer}.{_BLOCK.get(part, part)}.{suffix}"
    stem, _, suffix = name.rpartition(".")
    return f"{_TOP.get(stem, stem)}.{suffix}" if stem else name


def _value(field: Any) -> Any:
    value = field.contents()
    return value.item() if hasattr(value, "item") else value


def read_gguf(path: str | os.PathLike[str]) -> TensorTable:
    """The config and tensor table of a GGUF file (no tensor data read).

    Raises:
        ConfigError: ``gguf`` is not installed, the file is not GGUF, or its architecture
            is not one memacct maps (the message lists those it does).
    """
    p = Path(path)
    try:
        from gguf import GGUFReader
    except ImportError:
        from memacct.plugin import extra_hint

        raise ConfigError(
            f"reading {str(p)!r} needs the gguf package: {extra_hint('gguf')}"
        ) from None
    if not p.is_file():
        raise ConfigError(f"GGUF file {str(p)!r} does not exist: check the path")
    try:
        reader = GGUFReader(p, "r")
    except Exception as exc:  # the reader raises ValueError, struct and numpy errors alike
        raise ConfigError(
            f"{str(p)!r} is not a readable GGUF file ({type(exc).__name__}: {str(exc)[:160]}): "
            "check that it is the right file"
        ) from None
    fields = reader.fields
    arch_field = fields.get("general.architecture")
    arch = str(_value(arch_field)) if arch_field is not None else ""
    if arch not in GGUF_ARCHITECTURES:
        raise ConfigError(
            f"{p.name} is a GGUF file of architecture {arch or 'unknown'!r}, which memacct does "
            f"not map to a config: supported are {', '.join(sorted(GGUF_ARCHITECTURES))}; "
            "give the model's config.json instead"
        )
    model_type, architecture = GGUF_ARCHITECTURES[arch]
    config: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [architecture],
        # The engine computes in 16 bits over the dequantized blocks: a bfloat16 KV cache.
        "torch_dtype": "bfloat16",
    }
    name_field = fields.get("general.name")
    if name_field is not None:
        config["_name_or_path"] = str(_value(name_field))
    for key, target in _KEYS.items():
        field = fields.get(f"{arch}.{key}")
        if field is not None:
            config[target] = _value(field)
    tensors: dict[str, TensorInfo] = {}
    for tensor in reader.tensors:
        # GGUF lists dimensions innermost first; torch's order is the reverse.
        shape = tuple(int(d) for d in reversed(list(tensor.shape)))
        tensors[_hf_name(tensor.name)] = TensorInfo(
            tensor.tensor_type.name, shape, int(tensor.n_bytes)
        )
    embed = tensors.get("model.embed_tokens.weight")
    if "vocab_size" not in config and embed is not None and embed.shape:
        config["vocab_size"] = embed.shape[0]
    config["tie_word_embeddings"] = "lm_head.weight" not in tensors
    if "num_key_value_heads" not in config and "num_attention_heads" in config:
        config["num_key_value_heads"] = config["num_attention_heads"]
    return TensorTable(config, tensors, origin="gguf")
