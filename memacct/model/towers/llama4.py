"""The Llama 4 ViT (``mllama4.py``, ``Llama4VisionModel``), its pixel-shuffle adapter and
projector (:func:`_llama4`).
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


def _llama4(config: Mapping[str, Any]) -> Out:
    """Llama 4 (``mllama4.py``, ``Llama4VisionModel``): the unfold convolution's bias-free
    ``linear`` (channels x patch^2 to width), ``class_embedding``, ``(image_size /
    patch_size)^2 + 1`` positions, ``layernorm_pre`` / ``layernorm_post``; per layer two
    LayerNorms, ``qkv_proj`` and ``o_proj`` with biases, ``fc1`` / ``fc2`` with biases; the
    pixel-shuffle adapter's ``fc1`` (intermediate_size to ``projector_input_dim``) and
    ``fc2`` (to ``projector_output_dim``, ``multi_modal_projector_bias``); the projector's
    bias-free ``linear_1`` from ``vision_output_dim`` to the text width."""
    v = section_of(config, "vision_config")
    out: Out = []
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch = int_key(v, "patch_size")
    side = int_key(v, "image_size") // patch
    linear(out, "vision_model.patch_embedding.linear", h, int_key(v, "num_channels", 3) * patch
            * patch, False, split="none")  # fmt: skip
    out.append(TowerTensor("vision_model.class_embedding", (h,), False))
    out.append(TowerTensor("vision_model.positional_embedding_vlm", (side * side + 1, h), False))
    norm(out, "vision_model.layernorm_pre", h)
    norm(out, "vision_model.layernorm_post", h)
    for i in range(int_key(v, "num_hidden_layers")):
        p = f"vision_model.model.layers.{i}"
        norm(out, f"{p}.input_layernorm", h)
        linear(out, f"{p}.self_attn.qkv_proj", 3 * h, h)
        linear(out, f"{p}.self_attn.o_proj", h, h, split="row")
        norm(out, f"{p}.post_attention_layernorm", h)
        linear(out, f"{p}.mlp.fc1", inner, h)
        linear(out, f"{p}.mlp.fc2", h, inner, split="row")
    bias = v.get("multi_modal_projector_bias", False) is True
    mid, end = int_key(v, "projector_input_dim"), int_key(v, "projector_output_dim")
    linear(out, "vision_model.vision_adapter.mlp.fc1", mid, inner, bias)
    linear(out, "vision_model.vision_adapter.mlp.fc2", end, mid, bias, split="row")
    linear(out, "multi_modal_projector.linear_1", text_hidden(config),
            int_key(v, "vision_output_dim"), False)  # fmt: skip
    return out


TYPES: dict[str, str] = {
    "llama4": "llama4_vit",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "llama4_vit": _llama4,
}
"""Tower kind -> the rule that lists its tensors."""
