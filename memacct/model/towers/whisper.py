"""The Whisper-style audio encoder and its projectors:

* **Whisper encoder** (``qwen2_audio.py`` builds transformers' ``Qwen2AudioEncoder``;
``audioflamingo3.py``'s ``AudioFlamingo3Encoder`` subclasses it, adding only a
parameter-free pooler): ``conv1`` (mel bins to width, kernel 3) and ``conv2`` (kernel 3)
with biases, ``max_source_positions`` positions; per layer ``q`` / ``v`` / ``out`` with
biases and ``k`` without, two LayerNorms, ``fc1`` / ``fc2`` with biases; a final LayerNorm.
The sizes are read under Whisper's names (``d_model``, ``encoder_layers``,
``encoder_ffn_dim``) or the ones ``AudioFlamingo3EncoderConfig`` maps them to
(``hidden_size``, ``num_hidden_layers``, ``intermediate_size``);
* **GLM-ASR's encoder** (``glmasr.py``, ``GlmAsrEncoder``, vLLM's parallel layers): the same
two convolutions (``conv1`` of stride 1); per layer the fused ``qkv_proj`` (biased, K's bias
included: ``load_weights`` fakes it) column-parallel over ``num_key_value_heads``,
``o_proj`` (row, biased), ``input_layernorm`` and ``post_attention_layernorm``, ``fc1``
(column) and ``fc2`` (row) with biases; a final ``norm``; rotary positions, no position
table. Its projector (``GlmAsrMultiModalProjector``): ``linear_1`` from the audio
``intermediate_size`` (four positions stacked) to twice the text width (column, biased) and
``linear_2`` back to the text width (row, biased);
* **projectors**: Qwen2-Audio's biased ``linear`` (``Qwen2AudioMultiModalProjector``);
Audio Flamingo 3's ``linear_1`` (encoder width to text width) and ``linear_2`` (text width),
biased where ``projector_bias`` (default true; ``AudioFlamingo3MultiModalProjector``), plain
``nn.Linear`` layers, whole on every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers.parts import (
    Out,
    TowerTensor,
    int_key,
    linear,
    norm,
    section_of,
    text_hidden,
)

__all__ = ["RULES", "TYPES", "whisper_sizes"]

_NAMES = {"d_model": "hidden_size", "encoder_layers": "num_hidden_layers",
          "encoder_ffn_dim": "intermediate_size"}  # fmt: skip
"""Whisper's size keys -> the names ``AudioFlamingo3EncoderConfig.attribute_map`` gives them."""


def whisper_sizes(audio: Mapping[str, Any]) -> dict[str, int]:
    """``d_model``, ``encoder_layers``, ``encoder_ffn_dim``, ``num_mel_bins`` and
    ``max_source_positions`` of a Whisper-style ``audio_config``, under either spelling.

    Raises:
        ConfigError: a size is missing or not a positive integer.
    """
    sizes = {}
    for key in ("d_model", "encoder_layers", "encoder_ffn_dim", "num_mel_bins",
                "max_source_positions"):  # fmt: skip
        alias = _NAMES.get(key, key)
        sizes[key] = int_key(audio, alias if key not in audio and alias in audio else key)
    return sizes


def _encoder(a: Mapping[str, Any]) -> Out:
    out: Out = []
    sizes = whisper_sizes(a)
    h, inner = sizes["d_model"], sizes["encoder_ffn_dim"]
    mels = sizes["num_mel_bins"]
    out.append(TowerTensor("audio_tower.conv1.weight", (h, mels, 3), False))
    out.append(TowerTensor("audio_tower.conv1.bias", (h,), False))
    out.append(TowerTensor("audio_tower.conv2.weight", (h, h, 3), False))
    out.append(TowerTensor("audio_tower.conv2.bias", (h,), False))
    out.append(TowerTensor("audio_tower.embed_positions.weight",
                           (sizes["max_source_positions"], h), False))  # fmt: skip
    for i in range(sizes["encoder_layers"]):
        p = f"audio_tower.layers.{i}"
        norm(out, f"{p}.self_attn_layer_norm", h)
        linear(out, f"{p}.self_attn.q_proj", h, h, split="none")
        linear(out, f"{p}.self_attn.k_proj", h, h, False, split="none")
        linear(out, f"{p}.self_attn.v_proj", h, h, split="none")
        linear(out, f"{p}.self_attn.out_proj", h, h, split="none")
        norm(out, f"{p}.final_layer_norm", h)
        linear(out, f"{p}.fc1", inner, h, split="none")
        linear(out, f"{p}.fc2", h, inner, split="none")
    norm(out, "audio_tower.layer_norm", h)
    return out


def _whisper(config: Mapping[str, Any]) -> Out:
    out = _encoder(section_of(config, "audio_config"))
    h = whisper_sizes(section_of(config, "audio_config"))["d_model"]
    linear(out, "multi_modal_projector.linear", text_hidden(config), h, split="none")
    return out


def _flamingo(config: Mapping[str, Any]) -> Out:
    out = _encoder(section_of(config, "audio_config"))
    h = whisper_sizes(section_of(config, "audio_config"))["d_model"]
    text, bias = text_hidden(config), config.get("projector_bias", True) is not False
    linear(out, "multi_modal_projector.linear_1", text, h, bias, split="none")
    linear(out, "multi_modal_projector.linear_2", text, text, bias, split="none")
    return out


def _glmasr(config: Mapping[str, Any]) -> Out:
    a = section_of(config, "audio_config")
    h, inner = int_key(a, "hidden_size"), int_key(a, "intermediate_size")
    heads = int_key(a, "num_attention_heads")
    kv, head_dim = int_key(a, "num_key_value_heads", heads), h // heads
    out: Out = []
    out.append(TowerTensor("audio_tower.conv1.weight", (h, int_key(a, "num_mel_bins"), 3), False))
    out.append(TowerTensor("audio_tower.conv1.bias", (h,), False))
    out.append(TowerTensor("audio_tower.conv2.weight", (h, h, 3), False))
    out.append(TowerTensor("audio_tower.conv2.bias", (h,), False))
    for i in range(int_key(a, "num_hidden_layers")):
        p = f"audio_tower.layers.{i}"
        norm(out, f"{p}.input_layernorm", h)
        linear(out, f"{p}.self_attn.qkv_proj", (heads + 2 * kv) * head_dim, h)
        linear(out, f"{p}.self_attn.o_proj", h, h, split="row")
        norm(out, f"{p}.post_attention_layernorm", h)
        linear(out, f"{p}.mlp.fc1", inner, h)
        linear(out, f"{p}.mlp.fc2", h, inner, split="row")
    norm(out, "audio_tower.norm", h)
    text = text_hidden(config)
    linear(out, "multi_modal_projector.linear_1", 2 * text, inner)
    linear(out, "multi_modal_projector.linear_2", text, 2 * text, split="row")
    return out


TYPES: dict[str, str] = {
    "qwen2_audio": "whisper",
    "audioflamingo3": "whisper_flamingo",
    "glmasr": "glmasr",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "whisper": _whisper,
    "whisper_flamingo": _flamingo,
    "glmasr": _glmasr,
}
"""Tower kind -> the rule that lists its tensors."""
