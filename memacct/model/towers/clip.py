"""The CLIP, SigLIP and Pixtral towers (the LLaVA family, PaliGemma, Gemma 3, Mistral 3),
following the modules vLLM 0.33 builds (files under ``vllm/model_executor/models/``):

* **CLIP** (``clip.py``, ``CLIPVisionModel``; LLaVA 1.5): ``class_embedding``, a bias-free
patch convolution, ``(image_size / patch_size)^2 + 1`` positions, ``pre_layrnorm``;
per layer ``qkv_proj`` and ``out_proj`` with biases, two LayerNorms, ``fc1`` / ``fc2``
with biases; ``post_layernorm`` only when every layer is built and the model asks for it.
* **SigLIP** (``siglip.py``, ``SiglipVisionModel``; Gemma 3, PaliGemma, LLaVA-OneVision,
Command A Vision): a
biased patch convolution, ``(image_size / patch_size)^2`` positions, no pre-norm, the same
layer, ``post_layernorm`` when every layer is built (``require_post_norm`` None), no pooling
head (``use_head`` defaults to False).
* **Pixtral** (``pixtral.py``, ``PixtralHFVisionModel``; Mistral 3, LightOnOCR, Pixtral-HF as
LLaVA; ``VisionTransformer`` for Mistral-format Pixtral, :func:`_pixtral_mistral`): a
bias-free patch convolution, ``ln_pre`` (RMSNorm); per layer RMSNorms ``attention_norm``
and ``ffn_norm``, bias-free ``qkv_proj`` / ``o_proj`` and a gated bias-free MLP
(``gate_up_proj`` of 2 x intermediate, ``down_proj``); 2-D rotary positions, no weights.

The LLaVA family (``llava.py``, ``llava_next.py``, ``llava_onevision.py``,
``llava_next_video.py``) builds its tower with ``init_vision_tower_for_llava``: CLIP, SigLIP
or Pixtral by the vision section's type, only the layers up to ``vision_feature_layer``
(``_get_num_hidden_layers``: -2 of 24 is 23 layers) and never ``post_layernorm`` (each
model passes ``require_post_norm=False``); LLaVA-NeXT and LLaVA-OneVision add
``image_newline`` (the text width), LLaVA-NeXT-Video none (its pooler has no weights).

Projectors: LLaVA's ``linear_1`` / ``linear_2`` (``multimodal_projector_bias``, default
true), PaliGemma's biased ``linear`` to ``projection_dim``, Gemma 3's
``mm_input_projection_weight`` and ``mm_soft_emb_norm`` (``gemma3_mm.py``), Command A
Vision's SwiGLU projector after a pixel shuffle (``cohere2_vision.py``).
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
    vit_layer,
)

__all__ = ["RULES", "TYPES"]


def _clip_siglip(out: Out, v: Mapping[str, Any], layers: int, clip: bool,
                 post_norm: bool = True) -> None:  # fmt: skip
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch, side = int_key(v, "patch_size"), int_key(v, "image_size") // int_key(v, "patch_size")
    channels = int_key(v, "num_channels", 3)
    total = int_key(v, "num_hidden_layers")
    e = "vision_tower.embeddings"
    if clip:
        out.append(TowerTensor(f"{e}.class_embedding", (h,), False))
    out.append(TowerTensor(f"{e}.patch_embedding.weight", (h, channels, patch, patch), False))
    if not clip:
        out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding.weight", (side * side + clip, h), False))
    if clip:
        norm(out, "vision_tower.pre_layrnorm", h)
    for i in range(layers):
        vit_layer(out, f"vision_tower.encoder.layers.{i}", h, inner)
    if post_norm and layers == total:
        norm(out, "vision_tower.post_layernorm", h)


def _pixtral_tower(out: Out, v: Mapping[str, Any], layers: int,
                   prefix: str = "vision_tower") -> None:  # fmt: skip
    h, inner = int_key(v, "hidden_size"), int_key(v, "intermediate_size")
    patch = int_key(v, "patch_size")
    out.append(TowerTensor(f"{prefix}.patch_conv.weight",
                           (h, int_key(v, "num_channels", 3), patch, patch), False))  # fmt: skip
    norm(out, f"{prefix}.ln_pre", h, bias=False)
    for i in range(layers):
        p = f"{prefix}.transformer.layers.{i}"
        norm(out, f"{p}.attention_norm", h, bias=False)
        linear(out, f"{p}.attention.qkv_proj", 3 * h, h, False)
        linear(out, f"{p}.attention.o_proj", h, h, False, split="row")
        norm(out, f"{p}.ffn_norm", h, bias=False)
        linear(out, f"{p}.feed_forward.gate_up_proj", 2 * inner, h, False)
        linear(out, f"{p}.feed_forward.down_proj", h, inner, False, split="row")


def _mistral3(config: Mapping[str, Any]) -> Out:
    """Mistral 3 (``mistral3.py``): the Pixtral tower, then ``Mistral3MultiModalProjector``:
    an RMSNorm of the width, the patch merger's bias-free ``merging_layer`` over
    ``spatial_merge_size^2`` x width, ``linear_1`` / ``linear_2``
    (``multimodal_projector_bias``, default false)."""
    v = section_of(config, "vision_config")
    out: Out = []
    _pixtral_tower(out, v, layers_to(int_key(v, "num_hidden_layers"),
                                      config.get("vision_feature_layer", -1)))  # fmt: skip
    h, th = int_key(v, "hidden_size"), text_hidden(config)
    merge = int_key(config, "spatial_merge_size", 2)
    bias = config.get("multimodal_projector_bias", False) is True
    norm(out, "multi_modal_projector.norm", h, bias=False)
    linear(out, "multi_modal_projector.patch_merger.merging_layer", h, h * merge * merge,
            False, split="none")  # fmt: skip
    linear(out, "multi_modal_projector.linear_1", th, h, bias)
    linear(out, "multi_modal_projector.linear_2", th, th, bias, split="row")
    return out


_LLAVA_TOWERS = ("clip_vision_model", "siglip_vision_model", "pixtral")
"""The vision sections ``init_vision_tower_for_llava`` builds (``llava.py``)."""

_NEWLINE_TYPES = ("llava_next", "llava_onevision")
"""The LLaVA models holding one learned ``image_newline`` row of the text width."""


def _pixtral_mistral(config: Mapping[str, Any]) -> Out:
    """Pixtral in Mistral's format (``pixtral.py``, ``PixtralForConditionalGeneration``; vLLM
    remaps ``params.json`` to ``model_type`` "pixtral" with its ``vision_encoder`` as
    ``vision_config``, ``transformers_utils/configs/mistral.py``,
    ``_remap_mistral_vision_args``): ``VisionTransformer`` (Pixtral's layers, every one), an
    RMSNorm ``pre_mm_projector_norm`` where ``add_pre_mm_projector_layer_norm``, the bias-free
    ``patch_merger.merging_layer`` where ``mm_projector_id`` is "patch_merge", and
    ``vision_language_adapter``'s ``w_in`` / ``w_out`` (``adapter_bias``, default true); the
    merger and adapter are ``ReplicatedLinear``, whole on every rank."""
    v = section_of(config, "vision_config")
    out: Out = []
    _pixtral_tower(out, v, int_key(v, "num_hidden_layers"), "vision_encoder")
    h, th = int_key(v, "hidden_size"), text_hidden(config)
    if v.get("add_pre_mm_projector_layer_norm") is True:
        norm(out, "pre_mm_projector_norm", h, bias=False)
    if v.get("mm_projector_id") == "patch_merge":
        merge = int_key(v, "spatial_merge_size", 1)
        linear(out, "patch_merger.merging_layer", h, h * merge * merge, False, split="none")
    bias = v.get("adapter_bias", True) is not False
    linear(out, "vision_language_adapter.w_in", th, h, bias, split="none")
    linear(out, "vision_language_adapter.w_out", th, th, bias, split="none")
    return out


def _llava(config: Mapping[str, Any]) -> Out:
    v = section_of(config, "vision_config")
    out: Out = []
    vtype = v.get("model_type", "clip_vision_model")
    layers = layers_to(int_key(v, "num_hidden_layers"), config.get("vision_feature_layer", -2))
    if vtype == "pixtral":
        _pixtral_tower(out, v, layers)
    else:
        _clip_siglip(out, v, layers, clip=vtype == "clip_vision_model", post_norm=False)
    th, bias = text_hidden(config), config.get("multimodal_projector_bias", True) is not False
    linear(out, "multi_modal_projector.linear_1", th, int_key(v, "hidden_size"), bias)
    linear(out, "multi_modal_projector.linear_2", th, th, bias, split="row")
    if config.get("model_type") in _NEWLINE_TYPES:
        out.append(TowerTensor("image_newline", (th,), False))
    return out


def _siglip_model(config: Mapping[str, Any]) -> Out:
    v = section_of(config, "vision_config")
    out: Out = []
    _clip_siglip(out, v, int_key(v, "num_hidden_layers"), clip=False)
    h = int_key(v, "hidden_size")
    if config.get("model_type") == "gemma3":
        out.append(TowerTensor("multi_modal_projector.mm_input_projection_weight",
                               (h, text_hidden(config)), False))  # fmt: skip
        norm(out, "multi_modal_projector.mm_soft_emb_norm", h, bias=False)
    elif config.get("model_type") == "cohere2_vision":
        # cohere2_vision.py, Cohere2VisionMultiModalProjector: the pixel shuffle has no
        # weights; linear_1 is a biased MergedColumnParallelLinear of two halves of
        # alignment_intermediate_size (SwiGLU), linear_2 a biased RowParallelLinear.
        shuffled = h * int_key(config, "downsample_factor", 2) ** 2
        align = int_key(config, "alignment_intermediate_size", 36864)
        linear(out, "multi_modal_projector.linear_1", align, shuffled)
        linear(out, "multi_modal_projector.linear_2", text_hidden(config), align // 2,
               split="row")  # fmt: skip
    else:
        linear(out, "multi_modal_projector.linear", int_key(v, "projection_dim"), h, split="none")
    return out


TYPES: dict[str, str] = {
    "llava": "clip", "llava_next": "clip", "llava_onevision": "clip", "llava_next_video": "clip",
    "paligemma": "siglip", "gemma3": "siglip", "mistral3": "pixtral", "pixtral": "pixtral_mistral",
    "cohere2_vision": "siglip",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "clip": _llava, "siglip": _siglip_model, "pixtral": _mistral3,
    "pixtral_mistral": _pixtral_mistral,
}
"""Tower kind -> the rule that lists its tensors."""
