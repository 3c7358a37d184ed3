"""The Qwen3-VL ViT and its mergers (Qwen3-VL dense and MoE, Qwen3.5 / 3.6). Qwen2-VL's and
Qwen2.5-VL's towers are in :mod:`memacct.model.weights.inventory` (``_qwen_vl_vision``).

* **Qwen3-VL ViT** (``qwen3_vl.py``, ``Qwen3_VisionTransformer``; Qwen3.5 / 3.6 build the
same, ``qwen3_5.py``): a biased Conv3d patch
embedding (channels x temporal x patch^2), ``num_position_embeddings`` learned
positions; per block two LayerNorms, ``qkv`` and ``proj`` with biases, ``linear_fc1`` /
``linear_fc2`` with biases; the merger (LayerNorm of the width, two biased linears over
``spatial_merge_size^2`` x width, out to ``out_hidden_size``) and one more merger per
``deepstack_visual_indexes`` entry (its LayerNorm over the merged width).
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
    vit_layer,
)

__all__ = ["RULES", "TYPES"]


def _merger(out: Out, p: str, h: int, merged: int, d_model: int, post: bool) -> None:
    norm(out, f"{p}.norm", merged if post else h)
    linear(out, f"{p}.linear_fc1", merged, merged)
    linear(out, f"{p}.linear_fc2", d_model, merged, split="row")


def _qwen3_vl(config: Mapping[str, Any]) -> Out:
    # Defaults: transformers' Qwen3VLVisionConfig and Qwen3_5VisionConfig (the same sizes).
    v = section_of(config, "vision_config")
    out: Out = []
    h, inner = int_key(v, "hidden_size", 1152), int_key(v, "intermediate_size", 4304)
    patch, temporal = int_key(v, "patch_size", 16), int_key(v, "temporal_patch_size", 2)
    out.append(TowerTensor("visual.patch_embed.proj.weight",
                           (h, int_key(v, "in_channels", 3), temporal, patch, patch), False))
    out.append(TowerTensor("visual.patch_embed.proj.bias", (h,), False))
    out.append(TowerTensor("visual.pos_embed.weight",
                           (int_key(v, "num_position_embeddings", 2304), h), False))  # fmt: skip
    for i in range(int_key(v, "depth", 27)):
        vit_layer(out, f"visual.blocks.{i}", h, inner)
    merged = h * int_key(v, "spatial_merge_size", 2) ** 2
    d_model = int_key(v, "out_hidden_size", 3584)
    _merger(out, "visual.merger", h, merged, d_model, post=False)
    for i, _ in enumerate(v.get("deepstack_visual_indexes") or ()):
        _merger(out, f"visual.deepstack_merger_list.{i}", h, merged, d_model, post=True)
    return out


TYPES: dict[str, str] = {
    "qwen3_vl": "qwen3_vit", "qwen3_vl_moe": "qwen3_vit", "qwen3_5": "qwen3_vit",
    "qwen3_5_moe": "qwen3_vit",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "qwen3_vit": _qwen3_vl,
}
"""Tower kind -> the rule that lists its tensors."""
