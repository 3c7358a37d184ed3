"""The Qwen2-VL, Qwen2.5-VL and Qwen3-VL ViTs and their mergers (Qwen2-VL, Qwen2.5-VL,
OpenCUA; Qwen3-VL dense and MoE, Qwen3.5 / 3.6), checked against vLLM 0.33's own classes
(tools/golden_towers.py). The plans read these rules first (``tower_tensors``), so
``_qwen_vl_vision`` of :mod:`memacct.model.weights.inventory` no longer sizes Qwen2/2.5-VL.

* **Qwen2-VL ViT** (``qwen2_vl.py``, ``Qwen2VisionTransformer``): a bias-free Conv3d patch
embedding of ``embed_dim``; per block two LayerNorms with biases, ``qkv`` (column-parallel)
and ``proj`` (row-parallel) with biases, ``fc1`` / ``fc2`` of ``mlp_ratio`` x ``embed_dim``
with biases; the merger: the LayerNorm ``ln_q`` and two biased linears over
``spatial_merge_size^2`` x ``embed_dim``, out to the vision section's ``hidden_size``.

* **Qwen2.5-VL ViT** (``qwen2_5_vl.py``, ``Qwen2_5_VisionTransformer``; OpenCUA builds the
same, ``opencua.py``): a bias-free Conv3d patch embedding (channels x temporal x patch^2),
no learned positions; per block two RMSNorms (weight only), ``qkv`` (``QKVParallelLinear``)
and ``proj`` (row-parallel) with biases, the gated ``gate_up_proj`` (2 x intermediate) and
``down_proj`` with biases; the merger: the RMSNorm ``ln_q`` of the width and two biased
linears over ``spatial_merge_size^2`` x width, out to ``out_hidden_size``.

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

__all__ = ["RULES", "TYPES", "qwen25_vision"]


def _merger(out: Out, p: str, h: int, merged: int, d_model: int, post: bool) -> None:
    norm(out, f"{p}.norm", merged if post else h)
    linear(out, f"{p}.linear_fc1", merged, merged)
    linear(out, f"{p}.linear_fc2", d_model, merged, split="row")


def _qwen2_vl(config: Mapping[str, Any]) -> Out:
    # Defaults: transformers' Qwen2VLVisionConfig (embed_dim 1280, depth 32, mlp_ratio 4).
    v = section_of(config, "vision_config")
    out: Out = []
    h = int_key(v, "embed_dim", 1280)
    inner = int(h * float(v.get("mlp_ratio", 4)))
    patch, temporal = int_key(v, "patch_size", 14), int_key(v, "temporal_patch_size", 2)
    channels = int_key(v, "in_channels", v.get("in_chans", 3))
    out.append(TowerTensor("visual.patch_embed.proj.weight",
                           (h, channels, temporal, patch, patch), False))  # fmt: skip
    for i in range(int_key(v, "depth", 32)):
        vit_layer(out, f"visual.blocks.{i}", h, inner)
    merged = h * int_key(v, "spatial_merge_size", 2) ** 2
    norm(out, "visual.merger.ln_q", h)
    linear(out, "visual.merger.mlp.0", merged, merged)
    linear(out, "visual.merger.mlp.2", int_key(v, "hidden_size", 3584), merged, split="row")
    return out


def qwen25_vision(out: Out, v: Mapping[str, Any], prefix: str = "visual") -> None:
    """Qwen2.5-VL's ViT and merger, tensor by tensor (``qwen2_5_vl.py``; Qwen2.5-Omni's
    thinker builds the same under its own prefix). Defaults: the published towers' sizes
    (1280 wide, 32 blocks, 3420 MLP); the out width defaults to the vision width."""
    h, inner = int_key(v, "hidden_size", 1280), int_key(v, "intermediate_size", 3420)
    patch, temporal = int_key(v, "patch_size", 14), int_key(v, "temporal_patch_size", 2)
    channels = int_key(v, "in_channels", v.get("in_chans", 3))
    out.append(TowerTensor(f"{prefix}.patch_embed.proj.weight",
                           (h, channels, temporal, patch, patch), False))  # fmt: skip
    for i in range(int_key(v, "depth", 32)):
        p = f"{prefix}.blocks.{i}"
        norm(out, f"{p}.norm1", h, bias=False)
        norm(out, f"{p}.norm2", h, bias=False)
        linear(out, f"{p}.attn.qkv", 3 * h, h)
        linear(out, f"{p}.attn.proj", h, h, split="row")
        linear(out, f"{p}.mlp.gate_up_proj", 2 * inner, h)
        linear(out, f"{p}.mlp.down_proj", h, inner, split="row")
    merged = h * int_key(v, "spatial_merge_size", 2) ** 2
    norm(out, f"{prefix}.merger.ln_q", h, bias=False)
    linear(out, f"{prefix}.merger.mlp.0", merged, merged)
    linear(out, f"{prefix}.merger.mlp.2", int_key(v, "out_hidden_size", h), merged,
           split="row")  # fmt: skip


def _qwen25_vl(config: Mapping[str, Any]) -> Out:
    out: Out = []
    qwen25_vision(out, section_of(config, "vision_config"))
    return out


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
    "qwen2_vl": "qwen2_vit", "qwen2_5_vl": "qwen25_vit", "opencua": "qwen25_vit",
    "qwen3_vl": "qwen3_vit", "qwen3_vl_moe": "qwen3_vit", "qwen3_5": "qwen3_vit",
    "qwen3_5_moe": "qwen3_vit",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "qwen2_vit": _qwen2_vl, "qwen25_vit": _qwen25_vl, "qwen3_vit": _qwen3_vl,
}
"""Tower kind -> the rule that lists its tensors."""
