"""GLM-4V's EVA2-CLIP tower and its GLU projector (vLLM 0.33 ``glm4v.py``, ``EVA2CLIPModel``;
GLM-4V-9B, a ``chatglm`` config with a ``vision_config`` section):

* ``patch_embedding``: a biased patch convolution, a class embedding, ``num_positions``
  learned positions;
* per layer (``EVA2CLIPTransformerLayer``): ``input_layernorm`` / ``post_attention_layernorm``
  (LayerNorms with biases, applied after the attention and the MLP), a biased
  ``query_key_value`` (``QKVParallelLinear``) and ``dense`` (row-parallel), ``fc1`` /
  ``fc2`` with biases;
* ``conv``: a biased 2 x 2 convolution from the vision width to the text width;
  ``linear_proj`` (``EVA2CLIPGLU``): a bias-free replicated ``linear_proj`` of the text
  width, a LayerNorm, the bias-free gated ``merged_proj`` (2 x ``ffn_hidden_size``) and
  ``dense_4h_to_h``; the ``boi`` / ``eoi`` embeddings.

A ``chatglm`` config without a vision section (ChatGLM, GLM-4 text) has no tower: no tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers.parts import Out, TowerTensor, int_key, linear, norm

__all__ = ["RULES", "TYPES"]


def _glm4v(config: Mapping[str, Any]) -> Out:
    v = config.get("vision_config")
    out: Out = []
    if not isinstance(v, Mapping):
        return out
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch, th = int_key(v, "patch_size"), int_key(config, "hidden_size")
    e = "vision.patch_embedding"
    out.append(TowerTensor(f"{e}.proj.weight", (h, int_key(v, "in_channels", 3), patch, patch),
                           False))  # fmt: skip
    out.append(TowerTensor(f"{e}.proj.bias", (h,), False))
    out.append(TowerTensor(f"{e}.cls_embedding", (1, h), False))
    out.append(TowerTensor(f"{e}.position_embedding.weight", (int_key(v, "num_positions"), h),
                           False))  # fmt: skip
    for i in range(int_key(v, "num_hidden_layers")):
        p = f"vision.transformer.layers.{i}"
        norm(out, f"{p}.input_layernorm", h)
        linear(out, f"{p}.attention.query_key_value", 3 * h, h)
        linear(out, f"{p}.attention.dense", h, h, split="row")
        norm(out, f"{p}.post_attention_layernorm", h)
        linear(out, f"{p}.mlp.fc1", inner, h)
        linear(out, f"{p}.mlp.fc2", h, inner, split="row")
    out.append(TowerTensor("vision.conv.weight", (th, h, 2, 2), False))
    out.append(TowerTensor("vision.conv.bias", (th,), False))
    ffn = int_key(config, "ffn_hidden_size")
    linear(out, "vision.linear_proj.linear_proj", th, th, False, split="none")
    norm(out, "vision.linear_proj.norm1", th)
    linear(out, "vision.linear_proj.merged_proj", 2 * ffn, th, False)
    linear(out, "vision.linear_proj.dense_4h_to_h", th, ffn, False, split="row")
    out.append(TowerTensor("vision.boi", (1, 1, th), False))
    out.append(TowerTensor("vision.eoi", (1, 1, th), False))
    return out


TYPES: dict[str, str] = {"chatglm": "eva2clip"}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {"eva2clip": _glm4v}
"""Tower kind -> the rule that lists its tensors."""
