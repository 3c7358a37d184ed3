"""A multimodal model's encoder tower and projector, tensor by tensor, from its ``config.json``.

One rule per tower kind, each following the module vLLM 0.33 builds (files under
``vllm/model_executor/models/``):

* **CLIP** (``clip.py``, ``CLIPVisionModel``; LLaVA 1.5): ``class_embedding``, a bias-free
  patch convolution, ``(image_size / patch_size)^2 + 1`` positions, ``pre_layrnorm``;
  per layer ``qkv_proj`` and ``out_proj`` with biases, two LayerNorms, ``fc1`` / ``fc2``
  with biases; ``post_layernorm`` only when every layer is built. LLaVA builds the layers
  up to ``vision_feature_layer`` (``llava.py``, ``_get_num_hidden_layers``: -2 of 24 is
  23 layers, so no ``post_layernorm``); LLaVA-NeXT adds ``image_newline`` (the text width);
* **SigLIP** (``siglip.py``, ``SiglipVisionModel``; Gemma 3, PaliGemma): a biased patch
  convolution, ``(image_size / patch_size)^2`` positions, no pre-norm, the same layer,
  ``post_layernorm`` when every layer is built, no pooling head (``use_head`` defaults to
  False);
* **InternViT** (``intern_vit.py``, ``InternVisionModel``; InternVL 2.5 / 3 / 3.5): a class
  token, a biased patch convolution, ``(image_size / patch_size)^2 + 1`` positions; per
  layer a fused ``qkv`` (bias where ``qkv_bias``), ``proj`` with bias, optional q / k
  RMSNorms of the full width (``qk_normalization``), two norms (LayerNorm weight and bias,
  or RMSNorm weight, by ``norm_type``), the layer scales ``ls1`` / ``ls2``, ``fc1`` / ``fc2``
  with biases; layers up to ``select_layer``; Skywork-R1V (``skyworkr1v.py``) and NVLM-D
  (``nvlm_d.py``, ``mlp1`` through the LLM's ``intermediate_size``, bias-free) build the same;
* **Qwen3-VL ViT** (``qwen3_vl.py``, ``Qwen3_VisionTransformer``; Qwen3.5 / 3.6 build the
  same, ``qwen3_5.py``): a biased Conv3d patch
  embedding (channels x temporal x patch^2), ``num_position_embeddings`` learned
  positions; per block two LayerNorms, ``qkv`` and ``proj`` with biases, ``linear_fc1`` /
  ``linear_fc2`` with biases; the merger (LayerNorm of the width, two biased linears over
  ``spatial_merge_size^2`` x width, out to ``out_hidden_size``) and one more merger per
  ``deepstack_visual_indexes`` entry (its LayerNorm over the merged width);
* **Pixtral** (``pixtral.py``, ``PixtralHFVisionModel``; Mistral 3, Pixtral-HF as LLaVA): a
  bias-free patch convolution, ``ln_pre`` (RMSNorm); per layer RMSNorms ``attention_norm``
  and ``ffn_norm``, bias-free ``qkv_proj`` / ``o_proj`` and a gated bias-free MLP
  (``gate_up_proj`` of 2 x intermediate, ``down_proj``); 2-D rotary positions, no weights;
* **Llama 4 ViT** (``mllama4.py``: :func:`_llama4`);
* **Whisper encoder** (``qwen2_audio.py`` builds transformers' ``Qwen2AudioEncoder``):
  ``conv1`` (mel bins to width, kernel 3) and ``conv2`` (kernel 3) with biases,
  ``max_source_positions`` positions; per layer ``q`` / ``v`` / ``out`` with biases and ``k``
  without, two LayerNorms, ``fc1`` / ``fc2`` with biases; a final LayerNorm.

Projectors: LLaVA's ``linear_1`` / ``linear_2`` (``multimodal_projector_bias``, default
true), PaliGemma's biased ``linear`` to ``projection_dim``, Gemma 3's
``mm_input_projection_weight`` and ``mm_soft_emb_norm`` (``gemma3_mm.py``), InternVL's
``mlp1`` (a LayerNorm of ``width / downsample_ratio^2``, two biased linears), Qwen2-Audio's
biased ``linear``. Qwen2-VL's and Qwen2.5-VL's towers are in
:mod:`memacct.model.weights.inventory` (``_qwen_vl_vision``).

Each :class:`TowerTensor` says whether the engine splits it across tensor-parallel ranks
(the linear layers) or keeps it whole (norms, embeddings, convolutions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.errors import ConfigError

__all__ = ["TOWER_TYPES", "TowerTensor", "tower_kind", "tower_params", "tower_tensors"]


@dataclass(frozen=True)
class TowerTensor:
    """One tensor of the tower or projector: its name, full shape, and whether tensor
    parallelism splits it."""

    name: str
    shape: tuple[int, ...]
    split: bool

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


TOWER_TYPES = {
    "llava": "clip", "llava_next": "clip", "paligemma": "siglip", "gemma3": "siglip",
    "internvl_chat": "internvit", "NVLM_D": "internvit",
    "qwen3_vl": "qwen3_vit", "qwen3_vl_moe": "qwen3_vit", "qwen2_audio": "whisper",
    "qwen3_5": "qwen3_vit", "qwen3_5_moe": "qwen3_vit",
    "mistral3": "pixtral", "llama4": "llama4_vit",
}  # fmt: skip
"""Top-level ``model_type`` -> the tower kind whose rule builds its weights."""

_Out = list[TowerTensor]


def _int(section: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}: the tower's config gives {value!r}; it must be a positive "
                          "integer (set it in config.json's vision or audio section)")
    return value


def _section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: the config has no {key} section; a "
                          f"{config.get('model_type')} model's tower is read from it")
    return value


def _text_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config"):
        section = config.get(key)
        if isinstance(section, Mapping) and section.get("hidden_size"):
            return section
    return config


def _text_hidden(config: Mapping[str, Any]) -> int:
    return _int(_text_section(config), "hidden_size")


def _linear(out: _Out, name: str, rows: int, cols: int, bias: bool = True, *,
            split: str = "column") -> None:  # fmt: skip
    """A linear layer: ``split`` "column" (its rows and bias split across ranks), "row" (its
    columns split, the bias whole) or "none" (a plain ``nn.Linear``, whole on every rank)."""
    out.append(TowerTensor(f"{name}.weight", (rows, cols), split != "none"))
    if bias:
        out.append(TowerTensor(f"{name}.bias", (rows,), split == "column"))


def _norm(out: _Out, name: str, width: int, bias: bool = True) -> None:
    out.append(TowerTensor(f"{name}.weight", (width,), False))
    if bias:
        out.append(TowerTensor(f"{name}.bias", (width,), False))


def _vit_layer(out: _Out, p: str, h: int, inner: int, *, qkv_bias: bool = True,
               norm_bias: bool = True) -> None:  # fmt: skip
    _norm(out, f"{p}.norm1", h, norm_bias)
    _linear(out, f"{p}.attn.qkv", 3 * h, h, qkv_bias)
    _linear(out, f"{p}.attn.proj", h, h, split="row")
    _norm(out, f"{p}.norm2", h, norm_bias)
    _linear(out, f"{p}.mlp.fc1", inner, h)
    _linear(out, f"{p}.mlp.fc2", h, inner, split="row")


def _layers_to(total: int, feature_layer: Any) -> int:
    """Layers built up to a feature layer (``get_layer_index``: a negative index counts from
    the end, -1 is every layer); a list takes its deepest."""
    if isinstance(feature_layer, list) and feature_layer:
        return max(_layers_to(total, f) for f in feature_layer)
    if isinstance(feature_layer, int) and not isinstance(feature_layer, bool):
        return feature_layer + total + 1 if feature_layer < 0 else feature_layer
    return total


def _clip_siglip(out: _Out, v: Mapping[str, Any], layers: int, clip: bool) -> None:
    h, inner = _int(v, "hidden_size"), _int(v, "intermediate_size")
    patch, side = _int(v, "patch_size"), _int(v, "image_size") // _int(v, "patch_size")
    channels = _int(v, "num_channels", 3)
    total = _int(v, "num_hidden_layers")
    e = "vision_tower.embeddings"
    if clip:
        out.append(TowerTensor(f"{e}.class_embedding", (h,), False))
    out.append(TowerTensor(f"{e}.patch_embedding.weight", (h, channels, patch, patch), False))
    if not clip:
        out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding.weight", (side * side + clip, h), False))
    if clip:
        _norm(out, "vision_tower.pre_layrnorm", h)
    for i in range(layers):
        _vit_layer(out, f"vision_tower.encoder.layers.{i}", h, inner)
    if layers == total:
        _norm(out, "vision_tower.post_layernorm", h)


def _pixtral_tower(out: _Out, v: Mapping[str, Any], layers: int) -> None:
    h, inner, patch = _int(v, "hidden_size"), _int(v, "intermediate_size"), _int(v, "patch_size")
    out.append(TowerTensor("vision_tower.patch_conv.weight",
                           (h, _int(v, "num_channels", 3), patch, patch), False))  # fmt: skip
    _norm(out, "vision_tower.ln_pre", h, bias=False)
    for i in range(layers):
        p = f"vision_tower.transformer.layers.{i}"
        _norm(out, f"{p}.attention_norm", h, bias=False)
        _linear(out, f"{p}.attention.qkv_proj", 3 * h, h, False)
        _linear(out, f"{p}.attention.o_proj", h, h, False, split="row")
        _norm(out, f"{p}.ffn_norm", h, bias=False)
        _linear(out, f"{p}.feed_forward.gate_up_proj", 2 * inner, h, False)
        _linear(out, f"{p}.feed_forward.down_proj", h, inner, False, split="row")


def _mistral3(config: Mapping[str, Any]) -> _Out:
    """Mistral 3 (``mistral3.py``): the Pixtral tower, then ``Mistral3MultiModalProjector``:
    an RMSNorm of the width, the patch merger's bias-free ``merging_layer`` over
    ``spatial_merge_size^2`` x width, ``linear_1`` / ``linear_2``
    (``multimodal_projector_bias``, default false)."""
    v = _section(config, "vision_config")
    out: _Out = []
    _pixtral_tower(out, v, _layers_to(_int(v, "num_hidden_layers"),
                                      config.get("vision_feature_layer", -1)))  # fmt: skip
    h, th = _int(v, "hidden_size"), _text_hidden(config)
    merge = _int(config, "spatial_merge_size", 2)
    bias = config.get("multimodal_projector_bias", False) is True
    _norm(out, "multi_modal_projector.norm", h, bias=False)
    _linear(out, "multi_modal_projector.patch_merger.merging_layer", h, h * merge * merge,
            False, split="none")  # fmt: skip
    _linear(out, "multi_modal_projector.linear_1", th, h, bias)
    _linear(out, "multi_modal_projector.linear_2", th, th, bias, split="row")
    return out


def _llava(config: Mapping[str, Any]) -> _Out:
    v = _section(config, "vision_config")
    out: _Out = []
    if v.get("model_type") == "pixtral":
        _pixtral_tower(out, v, _layers_to(_int(v, "num_hidden_layers"),
                                          config.get("vision_feature_layer", -2)))  # fmt: skip
        th = _text_hidden(config)
        bias = config.get("multimodal_projector_bias", True) is not False
        _linear(out, "multi_modal_projector.linear_1", th, _int(v, "hidden_size"), bias)
        _linear(out, "multi_modal_projector.linear_2", th, th, bias, split="row")
        return out
    layers = _layers_to(_int(v, "num_hidden_layers"), config.get("vision_feature_layer", -2))
    _clip_siglip(out, v, layers, clip=True)
    th, bias = _text_hidden(config), config.get("multimodal_projector_bias", True) is not False
    _linear(out, "multi_modal_projector.linear_1", th, _int(v, "hidden_size"), bias)
    _linear(out, "multi_modal_projector.linear_2", th, th, bias, split="row")
    if config.get("model_type") == "llava_next":  # llava_next.py: one learned newline row
        out.append(TowerTensor("image_newline", (th,), False))
    return out


def _siglip_model(config: Mapping[str, Any]) -> _Out:
    v = _section(config, "vision_config")
    out: _Out = []
    _clip_siglip(out, v, _int(v, "num_hidden_layers"), clip=False)
    h = _int(v, "hidden_size")
    if config.get("model_type") == "gemma3":
        out.append(TowerTensor("multi_modal_projector.mm_input_projection_weight",
                               (h, _text_hidden(config)), False))  # fmt: skip
        _norm(out, "multi_modal_projector.mm_soft_emb_norm", h, bias=False)
    else:
        _linear(out, "multi_modal_projector.linear", _int(v, "projection_dim"), h, split="none")
    return out


def _internvl(config: Mapping[str, Any]) -> _Out:
    v = _section(config, "vision_config")
    out: _Out = []
    h, inner = _int(v, "hidden_size"), _int(v, "intermediate_size")
    patch, side = _int(v, "patch_size"), _int(v, "image_size") // _int(v, "patch_size")
    select = config.get("select_layer", -1)
    # InternVL-style models build select_layer + 1 layers for a non-negative index.
    select = select + 1 if isinstance(select, int) and select >= 0 else select
    layers = _layers_to(_int(v, "num_hidden_layers"), select)
    rms = v.get("norm_type", "rms_norm") == "rms_norm"
    e = "vision_model.embeddings"
    out.append(TowerTensor(f"{e}.class_embedding", (1, 1, h), False))
    out.append(TowerTensor(f"{e}.patch_embedding.weight", (h, 3, patch, patch), False))
    out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding", (1, side * side + 1, h), False))
    for i in range(layers):
        p = f"vision_model.encoder.layers.{i}"
        _vit_layer(out, p, h, inner, qkv_bias=v.get("qkv_bias", False) is True,
                   norm_bias=not rms)  # fmt: skip
        if v.get("qk_normalization"):
            _norm(out, f"{p}.attn.q_norm", h, bias=False)
            _norm(out, f"{p}.attn.k_norm", h, bias=False)
        out.append(TowerTensor(f"{p}.ls1", (h,), False))
        out.append(TowerTensor(f"{p}.ls2", (h,), False))
    ratio = config.get("downsample_ratio", 0.5)
    merged = h * int(1 / float(ratio)) ** 2
    th = _text_hidden(config)
    _norm(out, "mlp1.0", merged)
    if config.get("model_type") == "NVLM_D":  # nvlm_d.py: through the LLM's MLP width, no bias
        mid = _int(_text_section(config), "intermediate_size")
        _linear(out, "mlp1.1", mid, merged, False, split="none")
        _linear(out, "mlp1.3", th, mid, False, split="none")
        return out
    _linear(out, "mlp1.1", th, merged, split="none")
    _linear(out, "mlp1.3", th, th, split="none")
    return out


def _merger(out: _Out, p: str, h: int, merged: int, d_model: int, post: bool) -> None:
    _norm(out, f"{p}.norm", merged if post else h)
    _linear(out, f"{p}.linear_fc1", merged, merged)
    _linear(out, f"{p}.linear_fc2", d_model, merged, split="row")


def _qwen3_vl(config: Mapping[str, Any]) -> _Out:
    # Defaults: transformers' Qwen3VLVisionConfig and Qwen3_5VisionConfig (the same sizes).
    v = _section(config, "vision_config")
    out: _Out = []
    h, inner = _int(v, "hidden_size", 1152), _int(v, "intermediate_size", 4304)
    patch, temporal = _int(v, "patch_size", 16), _int(v, "temporal_patch_size", 2)
    out.append(TowerTensor("visual.patch_embed.proj.weight",
                           (h, _int(v, "in_channels", 3), temporal, patch, patch), False))
    out.append(TowerTensor("visual.patch_embed.proj.bias", (h,), False))
    out.append(TowerTensor("visual.pos_embed.weight",
                           (_int(v, "num_position_embeddings", 2304), h), False))  # fmt: skip
    for i in range(_int(v, "depth", 27)):
        _vit_layer(out, f"visual.blocks.{i}", h, inner)
    merged = h * _int(v, "spatial_merge_size", 2) ** 2
    d_model = _int(v, "out_hidden_size", 3584)
    _merger(out, "visual.merger", h, merged, d_model, post=False)
    for i, _ in enumerate(v.get("deepstack_visual_indexes") or ()):
        _merger(out, f"visual.deepstack_merger_list.{i}", h, merged, d_model, post=True)
    return out


def _whisper(config: Mapping[str, Any]) -> _Out:
    a = _section(config, "audio_config")
    out: _Out = []
    h, inner = _int(a, "d_model"), _int(a, "encoder_ffn_dim")
    mels = _int(a, "num_mel_bins")
    out.append(TowerTensor("audio_tower.conv1.weight", (h, mels, 3), False))
    out.append(TowerTensor("audio_tower.conv1.bias", (h,), False))
    out.append(TowerTensor("audio_tower.conv2.weight", (h, h, 3), False))
    out.append(TowerTensor("audio_tower.conv2.bias", (h,), False))
    out.append(TowerTensor("audio_tower.embed_positions.weight",
                           (_int(a, "max_source_positions"), h), False))  # fmt: skip
    for i in range(_int(a, "encoder_layers")):
        p = f"audio_tower.layers.{i}"
        _norm(out, f"{p}.self_attn_layer_norm", h)
        _linear(out, f"{p}.self_attn.q_proj", h, h, split="none")
        _linear(out, f"{p}.self_attn.k_proj", h, h, False, split="none")
        _linear(out, f"{p}.self_attn.v_proj", h, h, split="none")
        _linear(out, f"{p}.self_attn.out_proj", h, h, split="none")
        _norm(out, f"{p}.final_layer_norm", h)
        _linear(out, f"{p}.fc1", inner, h, split="none")
        _linear(out, f"{p}.fc2", h, inner, split="none")
    _norm(out, "audio_tower.layer_norm", h)
    _linear(out, "multi_modal_projector.linear", _text_hidden(config), h, split="none")
    return out


def _llama4(config: Mapping[str, Any]) -> _Out:
    """Llama 4 (``mllama4.py``, ``Llama4VisionModel``): the unfold convolution's bias-free
    ``linear`` (channels x patch^2 to width), ``class_embedding``, ``(image_size /
    patch_size)^2 + 1`` positions, ``layernorm_pre`` / ``layernorm_post``; per layer two
    LayerNorms, ``qkv_proj`` and ``o_proj`` with biases, ``fc1`` / ``fc2`` with biases; the
    pixel-shuffle adapter's ``fc1`` (intermediate_size to ``projector_input_dim``) and
    ``fc2`` (to ``projector_output_dim``, ``multi_modal_projector_bias``); the projector's
    bias-free ``linear_1`` from ``vision_output_dim`` to the text width."""
    v = _section(config, "vision_config")
    out: _Out = []
    h, inner, patch = _int(v, "hidden_size"), _int(v, "intermediate_size"), _int(v, "patch_size")
    side = _int(v, "image_size") // patch
    _linear(out, "vision_model.patch_embedding.linear", h, _int(v, "num_channels", 3) * patch
            * patch, False, split="none")  # fmt: skip
    out.append(TowerTensor("vision_model.class_embedding", (h,), False))
    out.append(TowerTensor("vision_model.positional_embedding_vlm", (side * side + 1, h), False))
    _norm(out, "vision_model.layernorm_pre", h)
    _norm(out, "vision_model.layernorm_post", h)
    for i in range(_int(v, "num_hidden_layers")):
        p = f"vision_model.model.layers.{i}"
        _norm(out, f"{p}.input_layernorm", h)
        _linear(out, f"{p}.self_attn.qkv_proj", 3 * h, h)
        _linear(out, f"{p}.self_attn.o_proj", h, h, split="row")
        _norm(out, f"{p}.post_attention_layernorm", h)
        _linear(out, f"{p}.mlp.fc1", inner, h)
        _linear(out, f"{p}.mlp.fc2", h, inner, split="row")
    bias = v.get("multi_modal_projector_bias", False) is True
    mid, end = _int(v, "projector_input_dim"), _int(v, "projector_output_dim")
    _linear(out, "vision_model.vision_adapter.mlp.fc1", mid, inner, bias)
    _linear(out, "vision_model.vision_adapter.mlp.fc2", end, mid, bias, split="row")
    _linear(out, "multi_modal_projector.linear_1", _text_hidden(config),
            _int(v, "vision_output_dim"), False)  # fmt: skip
    return out


_RULES = {"llama4_vit": _llama4, "clip": _llava, "siglip": _siglip_model, "internvit": _internvl,
          "qwen3_vit": _qwen3_vl, "whisper": _whisper, "pixtral": _mistral3}  # fmt: skip


def tower_kind(config: Mapping[str, Any]) -> str | None:
    """The tower kind whose rule builds this config's encoder (``None``: no rule here)."""
    kind = TOWER_TYPES.get(str(config.get("model_type", "")))
    if kind == "clip":
        vision = config.get("vision_config")
        vtype = vision.get("model_type", "clip_vision_model") if isinstance(vision, Mapping) else ""
        return kind if vtype in ("clip_vision_model", "pixtral") else None
    return kind


def tower_tensors(config: Mapping[str, Any]) -> list[TowerTensor] | None:
    """Every tensor of the tower and its projector, full shapes (``None``: no rule for this
    config's tower; see the module notes).

    Raises:
        ConfigError: a size the rule reads is missing or not a positive integer.
    """
    kind = tower_kind(config)
    return None if kind is None else _RULES[kind](config)


def tower_params(config: Mapping[str, Any]) -> int:
    """The tower's and projector's parameter count (0 without a rule)."""
    return sum(t.numel for t in tower_tensors(config) or ())
