"""The Whisper-style audio encoder and Qwen2-Audio's biased ``linear`` projector:

* **Whisper encoder** (``qwen2_audio.py`` builds transformers' ``Qwen2AudioEncoder``):
``conv1`` (mel bins to width, kernel 3) and ``conv2`` (kernel 3) with biases,
``max_source_positions`` positions; per layer ``q`` / ``v`` / ``out`` with biases and ``k``
without, two LayerNorms, ``fc1`` / ``fc2`` with biases; a final LayerNorm.
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

__all__ = ["RULES", "TYPES"]


def _whisper(config: Mapping[str, Any]) -> Out:
    a = section_of(config, "audio_config")
    out: Out = []
    h, inner = int_key(a, "d_model"), int_key(a, "encoder_ffn_dim")
    mels = int_key(a, "num_mel_bins")
    out.append(TowerTensor("audio_tower.conv1.weight", (h, mels, 3), False))
    out.append(TowerTensor("audio_tower.conv1.bias", (h,), False))
    out.append(TowerTensor("audio_tower.conv2.weight", (h, h, 3), False))
    out.append(TowerTensor("audio_tower.conv2.bias", (h,), False))
    out.append(TowerTensor("audio_tower.embed_positions.weight",
                           (int_key(a, "max_source_positions"), h), False))  # fmt: skip
    for i in range(int_key(a, "encoder_layers")):
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
    linear(out, "multi_modal_projector.linear", text_hidden(config), h, split="none")
    return out


TYPES: dict[str, str] = {
    "qwen2_audio": "whisper",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "whisper": _whisper,
}
"""Tower kind -> the rule that lists its tensors."""
