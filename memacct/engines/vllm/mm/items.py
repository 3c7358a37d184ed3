"""The largest dummy item of fixed-resolution vision towers, as vLLM 0.33 profiles them.

Read off vLLM 0.33.0's model files (``vllm/model_executor/models/``):

* **LLaVA** with a CLIP tower (``llava.py``, ``LlavaProcessingInfo``): every image is resized
  to the CLIP tower's ``image_size``; ``(image_size / patch_size)^2 + 1`` patches go through
  the tower (``clip.py``, ``CLIPEncoderInfo.get_num_image_tokens``) and the ``default``
  feature strategy drops the class token (``get_num_selected_vision_tokens``): 576 tokens at
  336 px (the whole LLaVA family is read by :mod:`memacct.engines.vllm.mm.llava`);
* **Mistral 3 / Pixtral-HF** (:func:`pixtral_item`);
* **Llama 4** (:func:`llama4_item`);
* **PaliGemma** (``paligemma.py``): ``(image_size / patch_size)^2`` SigLIP patches, as many
  tokens (``siglip.py``, ``SiglipEncoderInfo``);
* **InternVL** (``internvl.py``, ``BaseInternVLProcessingInfo.get_image_size_with_most_features``):
  the largest image is tiled into ``max_dynamic_patch`` tiles (``--mm-processor-kwargs``
  overrides it) plus a thumbnail where ``use_thumbnail``; each tile is ``image_size``
  square, ``(image_size / patch_size)^2 + 1`` InternViT patches, ``(image_size /
  patch_size)^2 x downsample_ratio^2`` tokens (``image_seq_length``). Video is supported
  where the language model's tokenizer carries a video token (``ctx_video_token``: text
  model types qwen2, qwen3, qwen3_moe, gpt_oss; their published tokenizers do): the budget
  sizes a video as ``(max_model_len - one image's tokens) // image_seq_length`` frames
  (``get_num_frames_with_most_features`` with one item per modality) while the profile's
  dummy video (``get_dummy_encoder_profile_inputs``, counts ``{"video": 1}``) has
  ``max_model_len // image_seq_length`` frames, one tile each.

The tower's working set per patch is the encoder layer's (``clip.py``, ``siglip.py``,
``intern_vit.py``): the residual, the first norm's output, the fused ``qkv`` (3 widths), the
attention output and ``out_proj``'s: 7 widths (InternViT 8: the ``ls1`` product); or at the
MLP the residual, the second norm's output and ``fc2``'s (3 widths; InternViT 4 with
``ls2``) with ``fc1``'s output and its activation (2 intermediate widths). The dummy pixel
values (3 x patch^2 values per patch) are in the model dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.engines.deployment import Multimodal

__all__ = ["Item", "fixed_tile_item", "layer_bytes", "llama4_item", "pixtral_item"]

_INTERNVL_TYPES = frozenset({"internvl_chat", "NVLM_D"})
"""InternVL's model type (Skywork-R1V's too) and NVLM-D's, which reuse its image processing
(``skyworkr1v.py``, ``nvlm_d.py``: ``BaseInternVLProcessingInfo``, images only)."""

_VIDEO_TEXT_TYPES = frozenset({"qwen2", "qwen3", "qwen3_moe", "gpt_oss"})
"""``InternVLProcessingInfo.ctx_video_token``'s map: text model types with a video token."""


@dataclass(frozen=True)
class Item:
    """The largest dummy item of the profiled modality and what one patch of it costs."""

    modality: str
    tokens: int  # the budget's tokens per item (get_mm_max_tokens_per_item)
    patches: int  # patches of the profile's dummy item through the tower
    per_patch: int  # bytes at the encoder's peak, the dummy pixel values included
    values: int  # pixel values per patch
    out_hidden: int  # width of one encoder output token
    out_tokens: int = 0  # tokens the dummy item encodes to (0: as ``tokens``)


def layer_bytes(width: int, inner: int, attention: int = 7, mlp: int = 3,
                inner_widths: int = 2, *, split: int = 4, tp: int = 1) -> int:  # fmt: skip
    """Elements per patch at a ViT layer's peak on one rank (the module notes): of the
    ``attention`` widths, ``split`` come out of column-parallel layers (``qkv``, its rotary
    copies, the attention output) and hold ``width / tp`` each; the MLP's intermediate
    widths hold ``inner / tp``; the residual, norms and row-parallel outputs are whole
    (vLLM splits a tower's linear layers by default, ``mm_encoder_tp_mode`` "weights")."""
    attn = (attention - split) * width + split * -(-width // tp)
    return max(attn, mlp * width + inner_widths * -(-inner // tp))


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config"):
        section = config.get(key)
        if isinstance(section, Mapping):
            return section
    return config


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def pixtral_item(config: Mapping[str, Any], vision: Mapping[str, Any], dtype_bytes: int,
                  out_hidden: int, tp: int) -> Item:  # fmt: skip
    """Mistral 3 and Pixtral-HF (``pixtral.py``, ``PixtralHFEncoderInfo``): the largest image
    is ``image_size`` square; ``ceil(image_size / (patch_size x spatial_merge_size))^2``
    tokens (the row breaks carry no embedding), ``(image_size / patch_size)^2`` patches. The
    layer (``PixtralHFTransformerBlock``) holds the residual, ``attention_norm``, ``qkv_proj``
    (3), the rotary q and k (2), the attention output and ``o_proj`` (9 widths); or the
    residual, ``ffn_norm`` and ``down_proj`` (3) with ``gate_up_proj`` and its activation (3
    intermediate widths)."""
    width = _int(vision, "hidden_size", 1024)
    inner = _int(vision, "intermediate_size", 4 * width)
    patch = _int(vision, "patch_size", 16)
    size = _int(vision, "image_size", 1024)
    merge = _int(config, "spatial_merge_size", 1) if config.get("model_type") == "mistral3" else 1
    side = (size - 1) // (patch * merge) + 1
    patches = (size // patch) ** 2
    values = _int(vision, "num_channels", 3) * patch * patch
    per = (layer_bytes(width, inner, 9, 3, 3, split=6, tp=tp) + values) * dtype_bytes
    return Item("image", side * side, patches, per, values, out_hidden)


def llama4_item(config: Mapping[str, Any], mm: Multimodal, dtype_bytes: int,
                tp: int = 1) -> Item | None:  # fmt: skip
    """Llama 4 (``mllama4.py``, ``Mllama4ProcessingInfo``): the largest image is
    ``max_patches`` (16) tiles of ``image_size`` in a 16:1 column
    (``get_image_size_with_most_features``), and the image processor adds a global tile
    where there is more than one: 17 chunks of ``(image_size / patch_size)^2 + 1`` patches,
    each ``(image_size / patch_size)^2 x pixel_shuffle_ratio^2`` tokens
    (``get_patch_per_chunk``). The layer (``Llama4VisionEncoderLayer``) holds the residual,
    ``input_layernorm``, ``qkv_proj`` (3), the rotary q and k (2), the attention output and
    ``o_proj`` (9 widths); or 3 widths with ``fc1``'s output and its GELU (2 intermediate)."""
    if mm.count("image") <= 0:
        return None
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    width = _int(vision, "hidden_size", 1408)
    inner = _int(vision, "intermediate_size", 5632)
    patch = _int(vision, "patch_size", 14)
    side = _int(vision, "image_size", 336) // patch
    ratio = float(vision.get("pixel_shuffle_ratio", 0.5))
    tiles = int(mm.mm_processor_kwargs.get("max_patches", 16))
    chunks = tiles + (1 if tiles > 1 else 0)
    per_chunk = side * side // round(1 / (ratio * ratio))
    values = _int(vision, "num_channels", 3) * patch * patch
    per = (layer_bytes(width, inner, 9, split=6, tp=tp) + values) * dtype_bytes
    return Item("image", chunks * per_chunk, chunks * (side * side + 1), per, values,
                _int(_text(config), "hidden_size", width))  # fmt: skip


def fixed_tile_item(config: Mapping[str, Any], mm: Multimodal, seq_len: int,
                    dtype_bytes: int, tp: int = 1) -> Item | None:  # fmt: skip
    """The largest item of PaliGemma (SigLIP), Mistral 3 (Pixtral) or InternVL (InternViT)
    tiles (``None``: no image or video allowed); the LLaVA family is
    :mod:`memacct.engines.vllm.mm.llava`'s."""
    kind = str(config.get("model_type", ""))
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    width = _int(vision, "hidden_size", 1024)
    inner = _int(vision, "intermediate_size", 4 * width)
    patch = _int(vision, "patch_size", 14)
    side = _int(vision, "image_size", 336) // patch
    values = 3 * patch * patch
    out_hidden = _int(_text(config), "hidden_size", width)
    if kind not in _INTERNVL_TYPES:
        if mm.count("image") <= 0:
            return None
        if vision.get("model_type") == "pixtral" or kind == "mistral3":
            return pixtral_item(config, vision, dtype_bytes, out_hidden, tp)
        per = (layer_bytes(width, inner, tp=tp) + values) * dtype_bytes
        return Item("image", side * side, side * side, per, values, out_hidden)
    ratio = float(config.get("downsample_ratio", 0.5))
    tile_tokens = int(side * side * ratio * ratio)
    kwargs = mm.mm_processor_kwargs
    tiles = int(kwargs.get("max_dynamic_patch", _int(config, "max_dynamic_patch", 12)))
    thumb = kwargs.get("use_thumbnail", config.get("use_thumbnail", True)) is True
    tiles += 1 if thumb and tiles != 1 else 0
    per = (layer_bytes(width, inner, 8, 4, tp=tp) + values) * dtype_bytes
    tile_patches = side * side + 1
    image = Item("image", tiles * tile_tokens, tiles * tile_patches, per, values, out_hidden)
    # Skywork-R1V's config says internvl_chat too (vLLM's SkyworkR1VChatConfig): its
    # architecture tells it apart, and its processing is images only.
    archs = config.get("architectures") or ["InternVLChatModel"]
    video_ok = kind == "internvl_chat" and "SkyworkR1VChatModel" not in archs and str(
        _text(config).get("model_type", "")) in _VIDEO_TEXT_TYPES  # fmt: skip
    if not video_ok or mm.count("video") <= 0:
        return image if mm.count("image") > 0 else None
    with_image = image.tokens if mm.count("image") > 0 else 0
    budget_frames = max(1, (seq_len - with_image) // tile_tokens)
    frames = max(1, seq_len // tile_tokens)
    video = Item("video", budget_frames * tile_tokens, frames * tile_patches, per, values,
                 out_hidden, frames * tile_tokens)  # fmt: skip
    if mm.count("image") <= 0 or video.tokens > image.tokens:
        return video
    return image
