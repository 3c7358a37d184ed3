"""The Idefics3 vision transformer and its pixel-shuffle connector (Idefics3, SmolVLM), as
vLLM 0.33 builds them (files under ``vllm/model_executor/models/``):

* **tower** (``idefics2_vision_model.py``, ``Idefics2VisionTransformer``, imported by
  ``idefics3.py`` as ``Idefics3VisionTransformer``): a biased patch convolution
  (``Conv2dLayer``), ``(image_size / patch_size)^2`` learned positions, every layer
  (``Idefics2EncoderLayer``: ``layer_norm1``, biased ``qkv_proj`` and ``out_proj``,
  ``layer_norm2``, biased ``fc1`` / ``fc2``) and ``post_layernorm`` (``require_post_norm``
  defaults to True; Idefics3 builds the whole tower, no feature layer);
* **connector** (``idefics3.py``, ``Idefics3Connector`` / ``Idefics3SimpleMLP``): the pixel
  shuffle has no weights; ``modality_projection.proj`` is a bias-free ``ReplicatedLinear``
  of ``hidden_size x scale_factor^2`` to the text width, whole on every rank.

SmolVLM (``smolvlm.py``) subclasses Idefics3's model unchanged.
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


def _idefics3(config: Mapping[str, Any]) -> Out:
    v = section_of(config, "vision_config")
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch, side = int_key(v, "patch_size"), int_key(v, "image_size") // int_key(v, "patch_size")
    out: Out = []
    e = "model.vision_model.embeddings"
    out.append(TowerTensor(f"{e}.patch_embedding.weight",
                           (h, int_key(v, "num_channels", 3), patch, patch), False))  # fmt: skip
    out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding.weight", (side * side, h), False))
    for i in range(int_key(v, "num_hidden_layers")):
        p = f"model.vision_model.encoder.layers.{i}"
        norm(out, f"{p}.layer_norm1", h)
        linear(out, f"{p}.self_attn.qkv_proj", 3 * h, h)
        linear(out, f"{p}.self_attn.out_proj", h, h, split="row")
        norm(out, f"{p}.layer_norm2", h)
        linear(out, f"{p}.mlp.fc1", inner, h)
        linear(out, f"{p}.mlp.fc2", h, inner, split="row")
    norm(out, "model.vision_model.post_layernorm", h)
    scale = int_key(config, "scale_factor", 2)
    linear(out, "model.connector.modality_projection.proj", text_hidden(config),
           h * scale * scale, False, split="none")  # fmt: skip
    return out


TYPES: dict[str, str] = {"idefics3": "idefics3", "smolvlm": "idefics3"}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {"idefics3": _idefics3}
"""Tower kind -> the rule that lists its tensors."""
