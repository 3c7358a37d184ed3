"""The InternViT tower and InternVL's ``mlp1`` (InternVL 2.5 / 3 / 3.5, Skywork-R1V, NVLM-D):

* **InternViT** (``intern_vit.py``, ``InternVisionModel``; InternVL 2.5 / 3 / 3.5): a class
token, a biased patch convolution, ``(image_size / patch_size)^2 + 1`` positions; per
layer a fused ``qkv`` (bias where ``qkv_bias``), ``proj`` with bias, optional q / k
RMSNorms of the full width (``qk_normalization``), two norms (LayerNorm weight and bias,
or RMSNorm weight, by ``norm_type``), the layer scales ``ls1`` / ``ls2``, ``fc1`` / ``fc2``
with biases; layers up to ``select_layer``; Skywork-R1V (``skyworkr1v.py``) and NVLM-D
(``nvlm_d.py``, ``mlp1`` through the LLM's ``intermediate_size``, bias-free) build the same.

H2OVL (``h2ovl.py``, ``H2OVLChatModel._init_vision_model``) and Qianfan-OCR
(``qianfan_ocr.py``, an ``InternVLChatModel`` over an HF-format vision section) build the
same InternViT and ``mlp1``. Eagle2.5-VL (``eagle2_5_vl.py``, ``_init_vision_model`` /
``_init_mlp1``) builds SigLIP (``SiglipVisionModel``: a biased patch convolution,
``(image_size / patch_size)^2`` positions, per layer two LayerNorms, biased ``qkv_proj`` /
``out_proj`` / ``fc1`` / ``fc2``; ``post_layernorm`` only when every layer is built, no
head) up to ``select_layer``, and the same ``mlp1``.

``mlp1``: a LayerNorm of ``width / downsample_ratio^2``, two biased linears.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers.parts import (
    Out,
    TowerTensor,
    int_key,
    layers_to,
    linear,
    norm,
    section_of,
    text_hidden,
    text_section,
    vit_layer,
)

__all__ = ["RULES", "TYPES"]


def _layers(config: Mapping[str, Any], v: Mapping[str, Any]) -> int:
    select = config.get("select_layer", -1)
    # InternVL-style models build select_layer + 1 layers for a non-negative index.
    select = select + 1 if isinstance(select, int) and select >= 0 else select
    return layers_to(int_key(v, "num_hidden_layers"), select)


def _mlp1(out: Out, config: Mapping[str, Any], h: int) -> None:
    ratio = config.get("downsample_ratio", 0.5)
    merged = h * int(1 / float(ratio)) ** 2
    th = text_hidden(config)
    norm(out, "mlp1.0", merged)
    if config.get("model_type") == "NVLM_D":  # nvlm_d.py: through the LLM's MLP width, no bias
        mid = int_key(text_section(config), "intermediate_size")
        linear(out, "mlp1.1", mid, merged, False, split="none")
        linear(out, "mlp1.3", th, mid, False, split="none")
        return
    linear(out, "mlp1.1", th, merged, split="none")
    linear(out, "mlp1.3", th, th, split="none")


def _eagle(config: Mapping[str, Any]) -> Out:
    v = section_of(config, "vision_config")
    out: Out = []
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch, side = int_key(v, "patch_size"), int_key(v, "image_size") // int_key(v, "patch_size")
    e = "vision_model.embeddings"
    out.append(TowerTensor(f"{e}.patch_embedding.weight",
                           (h, int_key(v, "num_channels", 3), patch, patch), False))  # fmt: skip
    out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding.weight", (side * side, h), False))
    layers = _layers(config, v)
    for i in range(layers):
        vit_layer(out, f"vision_model.encoder.layers.{i}", h, inner)
    if layers == int_key(v, "num_hidden_layers"):
        norm(out, "vision_model.post_layernorm", h)
    _mlp1(out, config, h)
    return out


def _hf_format(v: Mapping[str, Any]) -> Mapping[str, Any]:
    """Qianfan-OCR's HF-format vision section read as InternViT (``qianfan_ocr.py``,
    ``_add_intern_vit_fields``; defaults of transformers' ``QianfanOCRVisionConfig``)."""
    first = {k: v[k][0] for k in ("image_size", "patch_size") if isinstance(v.get(k), list)}
    return {"image_size": 448, "patch_size": 14, "norm_type": "layer_norm", **v, **first,
            "qkv_bias": v.get("qkv_bias", v.get("attention_bias", True)),
            "qk_normalization": v.get("qk_normalization", v.get("use_qk_norm", False))}


def _internvl(config: Mapping[str, Any]) -> Out:
    v = section_of(config, "vision_config")
    if config.get("model_type") == "qianfan_ocr":
        v = _hf_format(v)
    out: Out = []
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch, side = int_key(v, "patch_size"), int_key(v, "image_size") // int_key(v, "patch_size")
    layers = _layers(config, v)
    rms = v.get("norm_type", "rms_norm") == "rms_norm"
    e = "vision_model.embeddings"
    out.append(TowerTensor(f"{e}.class_embedding", (1, 1, h), False))
    out.append(TowerTensor(f"{e}.patch_embedding.weight", (h, 3, patch, patch), False))
    out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding", (1, side * side + 1, h), False))
    for i in range(layers):
        p = f"vision_model.encoder.layers.{i}"
        vit_layer(out, p, h, inner, qkv_bias=v.get("qkv_bias", False) is True,
                   norm_bias=not rms)  # fmt: skip
        if v.get("qk_normalization"):
            norm(out, f"{p}.attn.q_norm", h, bias=False)
            norm(out, f"{p}.attn.k_norm", h, bias=False)
        out.append(TowerTensor(f"{p}.ls1", (h,), False))
        out.append(TowerTensor(f"{p}.ls2", (h,), False))
    _mlp1(out, config, h)
    return out


TYPES: dict[str, str] = {
    "internvl_chat": "internvit", "NVLM_D": "internvit", "h2ovl_chat": "internvit",
    "eagle_2_5_vl": "eagle_siglip", "qianfan_ocr": "internvit",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "internvit": _internvl, "eagle_siglip": _eagle,
}
"""Tower kind -> the rule that lists its tensors."""
