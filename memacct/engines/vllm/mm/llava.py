"""The LLaVA family's encoder pass: LLaVA, LLaVA-NeXT, LLaVA-OneVision and LLaVA-NeXT-Video
with a CLIP, SigLIP or (LLaVA only) Pixtral tower, as vLLM 0.33 profiles them.

Read off vLLM 0.33.0's model files (``vllm/model_executor/models/``); every figure below is
derived by hand from them (the token counts of the tests were also produced by running the
processing-info methods named here in vLLM 0.33's code, see ``tests/test_mm_llava.py``):

* **patches and tokens of one tile**: CLIP (``clip.py``, ``CLIPEncoderInfo``) puts
  ``(image_size / patch_size)^2 + 1`` patches through the tower (the class token), SigLIP
  (``siglip.py``, ``SiglipEncoderInfo``) ``(image_size / patch_size)^2``; the
  ``vision_feature_select_strategy`` keeps them all ("full") or drops the first
  ("default", ``vision.py``, ``get_num_selected_vision_tokens``; SigLIP's first patch too);
* **LLaVA** (``llava.py``, ``BaseLlavaProcessingInfo``): one tile of ``image_size``
  (``get_image_size_with_most_features``); a Pixtral tower is Pixtral-HF's image
  (``mm.items.pixtral_item``);
* **LLaVA-NeXT** (``llava_next.py``, ``LlavaNextProcessingInfo``): the
  ``image_grid_pinpoints`` entry (height, width) whose image has the most tokens
  (``get_image_size_with_most_features``); an image's tokens are the base tile's, the
  unpadded features of its best grid (``get_anyres_image_grid_shape``: transformers'
  ``select_best_resolution``, the most effective then the least wasted pixels) and one
  newline per feature row (``get_num_image_tokens``, ``_get_num_unpadded_features``); the
  image processor sends ``rows x cols`` tiles and the resized base through the tower;
* **LLaVA-OneVision** (``llava_onevision.py``, ``LlavaOnevisionProcessingInfo``): the
  largest image is fixed at 1153 x 944 pixels; the unpadded features are scaled down to
  about nine tiles' worth where they exceed 1.1 x that (``anyres_max_9``,
  ``_get_num_unpadded_features``); a video frame is pooled to ``ceil(grid /
  spatial_pool_stride)^2`` tokens (``_get_num_frame_tokens``), a video holds as many frames
  as ``max_model_len`` takes, at most ``_MAX_FRAMES_PER_VIDEO`` (16), plus one newline
  (``get_num_video_tokens``, ``get_num_frames_with_most_features``);
* **LLaVA-NeXT-Video** (``llava_next_video.py``, ``LlavaNextVideoProcessingInfo``): videos
  only, frames of ``image_size`` pooled the same way, as many as ``max_model_len`` takes
  (no cap, no newline).

The profile encodes the modality with the most tokens per item (``encoder_budget.py``,
``get_modality_with_max_tokens``, a tie to the later name). The tower's working set per
patch is the CLIP / SigLIP layer's (``mm.items.layer_bytes``: 7 widths at the attention, or 3
widths and 2 intermediate at the MLP) plus the dummy pixel values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, layer_bytes, pixtral_item

__all__ = ["FAMILY", "anyres_tokens", "best_grid", "llava_item"]

_TOWERS = {
    "llava": ("clip_vision_model", "siglip_vision_model", "pixtral"),
    "llava_next": ("clip_vision_model", "siglip_vision_model"),
    "llava_onevision": ("clip_vision_model", "siglip_vision_model"),
    "llava_next_video": ("clip_vision_model", "siglip_vision_model"),
}
"""Model type -> the vision sections its rule reads (``init_vision_tower_for_llava``)."""

ONEVISION_IMAGE = (944, 1153)
"""``LlavaOnevisionProcessingInfo.get_image_size_with_most_features``: (height, width)."""

ONEVISION_MAX_FRAMES = 16
"""``llava_onevision.py``'s ``_MAX_FRAMES_PER_VIDEO``."""


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _vision(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def _accepts(config: Mapping[str, Any]) -> bool:
    vision = config.get("vision_config")
    kinds = _TOWERS.get(str(config.get("model_type", "")), ())
    return isinstance(vision, Mapping) and vision.get("model_type", "clip_vision_model") in kinds


def best_grid(height: int, width: int, pinpoints: list[list[int]],
              tile: int) -> tuple[int, int]:  # fmt: skip
    """(rows, cols) of ``tile``-sized tiles of the pinpoint transformers'
    ``select_best_resolution`` picks for an image of ``height`` x ``width``."""
    best, most, least = (tile, tile), 0, math.inf
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = pin_w * pin_h - effective
        if effective > most or (effective == most and wasted < least):
            best, most, least = (pin_h, pin_w), effective, wasted
    return best[0] // tile, best[1] // tile


def anyres_tokens(config: Mapping[str, Any], height: int, width: int, base: int,
                  max9: bool) -> tuple[int, int]:  # fmt: skip
    """(tokens, tiles through the tower) of an image of ``height`` x ``width``: the base
    tile's ``base`` tokens, the unpadded features of its grid and their newlines (LLaVA-NeXT's
    ``get_num_image_tokens``; ``max9``: LLaVA-OneVision's reduction to about nine tiles)."""
    vision = _vision(config)
    tile = _int(vision, "image_size", 336)
    grid = tile // _int(vision, "patch_size", 14)
    pins = config.get("image_grid_pinpoints") or [[tile, tile]]
    rows, cols = best_grid(height, width, [[int(p[0]), int(p[1])] for p in pins], tile)
    cur_h, cur_w = grid * rows, grid * cols
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= 2 * ((cur_h - new_h) // 2)
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= 2 * ((cur_w - new_w) // 2)
    unpadded, newlines = cur_h * cur_w, cur_h
    ratio = math.sqrt(cur_h * cur_w / (9 * grid * grid))
    if max9 and ratio > 1.1:
        unpadded, newlines = int(cur_h // ratio) * int(cur_w // ratio), int(cur_h // ratio)
    return unpadded + newlines + base, rows * cols + 1


def _frames(seq_len: int, per_frame: int, extra: int, cap: int | None) -> int:
    """``get_num_frames_with_most_features`` with one video: the most frames whose tokens
    fit ``seq_len`` (``_get_max_video_frames``), at most ``cap``, at least one."""
    frames = max(0, (seq_len - extra) // per_frame)
    return max(1, min(frames, cap) if cap is not None else frames)


def llava_item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    """The profile's largest dummy item of a LLaVA-family config (module notes; ``None``: no
    image or video allowed)."""
    kind = str(config.get("model_type", ""))
    vision = _vision(config)
    out_hidden = _int(config.get("text_config") or {}, "hidden_size", 4096)
    if vision.get("model_type") == "pixtral":
        if mm.count("image") <= 0:
            return None
        return pixtral_item(config, vision, ctx.dtype_bytes, out_hidden,
                            ctx.tensor_parallel_size)  # fmt: skip
    width = _int(vision, "hidden_size", 1024)
    inner = _int(vision, "intermediate_size", 4 * width)
    patch = _int(vision, "patch_size", 14)
    grid = _int(vision, "image_size", 336) // patch
    cls = 1 if vision.get("model_type", "clip_vision_model") == "clip_vision_model" else 0
    tile_patches = grid * grid + cls
    drop = 1 if config.get("vision_feature_select_strategy", "default") == "default" else 0
    base = tile_patches - drop
    values = _int(vision, "num_channels", 3) * patch * patch
    per = (layer_bytes(width, inner, tp=ctx.tensor_parallel_size) + values) * ctx.dtype_bytes
    items: dict[str, Item] = {}
    if mm.count("image") > 0 and kind == "llava":
        items["image"] = Item("image", base, tile_patches, per, values, out_hidden)
    elif mm.count("image") > 0 and kind in ("llava_next", "llava_onevision"):
        if kind == "llava_onevision":
            sizes = [ONEVISION_IMAGE]
        else:
            sizes = [(int(p[0]), int(p[1])) for p in config.get("image_grid_pinpoints") or []]
        best = max((anyres_tokens(config, h, w, base, kind == "llava_onevision")
                    for h, w in sizes or [(grid * patch, grid * patch)]),
                   key=lambda t: t[0])  # fmt: skip
        items["image"] = Item("image", best[0], best[1] * tile_patches, per, values, out_hidden)
    if mm.count("video") > 0 and kind in ("llava_onevision", "llava_next_video"):
        stride = _int(config, "spatial_pool_stride", 2)
        per_frame = math.ceil(grid / stride) ** 2
        newline = 1 if kind == "llava_onevision" else 0
        cap = ONEVISION_MAX_FRAMES if kind == "llava_onevision" else None
        frames = _frames(ctx.seq_len, per_frame, newline, cap)
        items["video"] = Item("video", frames * per_frame + newline, frames * tile_patches, per,
                              values, out_hidden)  # fmt: skip
    if not items:
        return None
    return max(items.values(), key=lambda i: (i.tokens, i.modality))


_LLAVA_TOWER = "towers/clip.py"

FAMILY = EncoderFamily(
    model_types=frozenset(_TOWERS),
    modules={
        "llava": "LLaVA (CLIP, SigLIP or Pixtral tower)",
        "llava_next": "LLaVA-NeXT (CLIP or SigLIP tower, anyres)",
        "llava_onevision": "LLaVA-OneVision (SigLIP tower, anyres_max_9, video)",
        "llava_next_video": "LLaVA-NeXT-Video (pooled video frames)",
    },
    processor_keys=(),
    item=llava_item,
    towers={
        "llava": ("CLIP, SigLIP or Pixtral up to vision_feature_layer and the two-layer "
                  "projector", _LLAVA_TOWER),
        "llava_next": ("CLIP or SigLIP up to vision_feature_layer, the projector and "
                       "image_newline", _LLAVA_TOWER),
        "llava_onevision": ("SigLIP up to vision_feature_layer, the projector and "
                            "image_newline", _LLAVA_TOWER),
        "llava_next_video": ("CLIP or SigLIP up to vision_feature_layer and the projector "
                             "(the pooler has no weights)", _LLAVA_TOWER),
    },
    checked=frozenset({"llava", "llava_next", "llava_onevision", "llava_next_video"}),
    accepts=_accepts,
)
"""The LLaVA family's encoder pass and towers (``multimodal.PLUGGED_FAMILIES``)."""
