"""The Qwen2-VL / Qwen2.5-VL (and OpenCUA) and Qwen3-VL / Qwen3.5 encoder passes: the largest
dummy item, its patches and the vision block's working set per patch, as vLLM builds them
(the notes of :mod:`memacct.engines.vllm.multimodal` give the sources and the widths)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.items import Item, layer_bytes

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MIN_PIXELS",
    "ENCODER_TP_SINCE",
    "MAX_ASPECT_RATIO",
    "QWEN25_TYPES",
    "attention_widths",
    "encoder_tp",
    "item_tokens",
    "max_frames_per_video",
    "most_features",
    "qwen3_item",
    "qwen_item",
    "smart_resize",
]

DEFAULT_MAX_PIXELS = 12845056
"""Qwen2-VL's and Qwen2.5-VL's image processor ``max_pixels`` (16384 x 28 x 28)."""

QWEN25_TYPES = frozenset({"qwen2_5_vl", "opencua"})
"""Model types whose tower is Qwen2.5-VL's (``opencua.py`` builds ``Qwen2_5_VisionTransformer``)."""

DEFAULT_MIN_PIXELS = 3136
"""The same processors' ``min_pixels`` (4 x 28 x 28)."""

MAX_ASPECT_RATIO = 200
"""``get_image_size_with_most_features``: the widest height x width factorisation."""

def max_frames_per_video(version: tuple[int, int] | None) -> int:
    """``_MAX_FRAMES_PER_VIDEO`` of ``qwen2_vl.py``: 16 in 0.10, 14 from 0.11 (0.33 too)."""
    return 16 if version is not None and version < (0, 11) else 14


def attention_widths(version: tuple[int, int] | None) -> int:
    """Model-dtype widths per patch at the vision attention's peak (module notes)."""
    return 20 if version is not None and version < (0, 12) else 11


def smart_resize(height: int, width: int, factor: int, min_pixels: int,
                  max_pixels: int) -> tuple[int, int]:  # fmt: skip
    """Qwen2-VL's ``smart_resize``: both sides to multiples of ``factor``, the area kept
    within ``[min_pixels, max_pixels]``."""
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def most_features(max_pixels: int, unit: int) -> tuple[int, int]:
    """``get_image_size_with_most_features``: (height, width) of the largest image."""
    for n in range(max(1, max_pixels // (unit * unit)), 0, -1):
        d = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
        if (n // d) / d <= MAX_ASPECT_RATIO:
            return unit * d, unit * (n // d)
    return unit, unit


def _vision(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def item_tokens(
    config: Mapping[str, Any], mm: Multimodal, modality: str, max_model_len: int,
    version: tuple[int, int] | None = None,
) -> tuple[int, int]:  # fmt: skip
    """(tokens, patches) of the largest dummy item of ``modality`` (see the module notes)."""
    vision = _vision(config)
    patch = int(vision.get("patch_size", 14))
    merge = int(vision.get("spatial_merge_size", 2))
    temporal = int(vision.get("temporal_patch_size", 2))
    factor = patch * merge
    kwargs = mm.mm_processor_kwargs
    max_pixels = int(kwargs.get("max_pixels", DEFAULT_MAX_PIXELS))
    min_pixels = int(kwargs.get("min_pixels", DEFAULT_MIN_PIXELS))
    size = mm.size(modality)
    if "width" in size and "height" in size:
        h, w = smart_resize(size["height"], size["width"], factor, min_pixels, max_pixels)
    else:
        h, w = most_features(max_pixels, factor)
    frame_patches = (h // patch) * (w // patch)
    frame_tokens = frame_patches // (merge * merge)
    if modality == "image":
        return frame_tokens, frame_patches
    if "num_frames" in size:
        frames = size["num_frames"]
    else:
        frames = 1
        while ((frames + 1 + (frames + 1) % temporal) // temporal) * frame_tokens <= max_model_len:
            frames += 1
        # The budget sizes one item with a count of 1 per modality whatever the limit
        # (encoder_budget.py, get_mm_max_toks_per_item; vllm-project/vllm#38465).
        frames = max(1, min(frames, max_frames_per_video(version)))
    groups = max(1, (frames + frames % temporal) // temporal)
    return groups * frame_tokens, groups * frame_patches


ENCODER_TP_SINCE = (0, 33)
"""The first release whose Qwen2/2.5-VL and Gemma 3 encoder passes are read with the vision
linears split across tensor-parallel ranks: 0.33.0's ``Qwen2_5_VisionAttention`` builds
``qkv`` as a ``QKVParallelLinear`` and ``proj`` row-parallel, ``Qwen2_5_VisionMLP``
``gate_up_proj`` as a ``MergedColumnParallelLinear`` (``qwen2_5_vl.py``; ``qwen2_vl.py``
``Qwen2VisionAttention`` / ``Qwen2VisionMLP`` column-parallel ``qkv`` and ``fc1``;
``siglip.py`` ``SiglipAttention.qkv_proj``, ``SiglipMLP.fc1``), each ``disable_tp`` only
under ``mm_encoder_tp_mode`` "data" (the default is "weights", ``vllm/config/multimodal.py``).
Older releases keep the full widths here, as before."""


def encoder_tp(version: tuple[int, int] | None, tp: int) -> int:
    """Ranks the vision linears' activations split over (1 before :data:`ENCODER_TP_SINCE`)."""
    return tp if version is None or version >= ENCODER_TP_SINCE else 1


def _per_patch_bytes(config: Mapping[str, Any], version: tuple[int, int] | None,
                     dtype_bytes: int, tp: int = 1) -> int:  # fmt: skip
    """The vision block's peak working set per patch on one rank, the dummy pixel values
    included: of 0.33's 11 attention widths the ``qkv`` (3), the contiguous and rotated q/k
    pairs (4) and the attention output (1) are column-parallel, split by ``tp``; the MLP's
    ``gate_up`` and activation (Qwen2-VL: ``fc1`` and activation) too (:func:`layer_bytes`)."""
    vision = _vision(config)
    qwen25 = str(config.get("model_type")) in QWEN25_TYPES
    width = int(vision.get("hidden_size" if qwen25 else "embed_dim", 1280))
    head_dim = width // int(vision.get("num_heads", 16))
    if qwen25:
        inner, inner_widths = int(vision.get("intermediate_size", 3420)), 3
    else:
        inner, inner_widths = width * int(vision.get("mlp_ratio", 4)), 2
    widths = attention_widths(version)
    if widths == attention_widths((0, 11)):
        per_patch = max(widths * width, 3 * width + inner_widths * inner) * dtype_bytes
        per_patch += 3 * (head_dim // 2) * 4  # float32 rotary table, cos and sin
    else:
        per_patch = layer_bytes(width, inner, widths, 3, inner_widths, split=8,
                                tp=encoder_tp(version, tp)) * dtype_bytes  # fmt: skip
        per_patch += head_dim * dtype_bytes  # cos and sin in the model dtype
    patch = int(vision.get("patch_size", 14))
    values = int(vision.get("in_channels", vision.get("in_chans", 3))) * int(
        vision.get("temporal_patch_size", 2)) * patch * patch  # fmt: skip
    return per_patch + values * dtype_bytes


def qwen_item(config: Mapping[str, Any], mm: Multimodal, seq_len: int,
              version: tuple[int, int] | None, dtype_bytes: int,
              tp: int = 1, modalities: tuple[str, ...] = ("image", "video")) -> Item | None:
    """Qwen2-VL and Qwen2.5-VL (and the models that reuse their processing and tower, such
    as OpenCUA, whose ``get_supported_mm_limits`` lists images only: ``modalities``): the
    largest of the allowed items (:func:`item_tokens`)."""
    items = {m: item_tokens(config, mm, m, seq_len, version) for m in modalities
             if mm.count(m) > 0}  # fmt: skip
    if not items:
        return None
    modality = max(items, key=lambda m: (items[m][0], m))
    vision = _vision(config)
    patch = int(vision.get("patch_size", 14))
    values = int(vision.get("in_channels", vision.get("in_chans", 3))) * int(
        vision.get("temporal_patch_size", 2)) * patch * patch  # fmt: skip
    out_hidden = int(vision.get("out_hidden_size", vision.get("hidden_size", 1280)))
    per_patch = _per_patch_bytes(config, version, dtype_bytes, tp)
    return Item(modality, *items[modality], per_patch, values, out_hidden)


QWEN3_IMAGE_PIXELS = (65536, 16777216)
"""Qwen3-VL's published ``preprocessor_config.json`` ``size``: (``shortest_edge``,
``longest_edge``) in pixels; ``--mm-processor-kwargs`` ``min_pixels`` / ``max_pixels``
replace them (``Qwen2VLProcessingInfo._get_vision_size``)."""


def qwen3_item(config: Mapping[str, Any], mm: Multimodal, dtype_bytes: int,
                tp: int = 1) -> Item | None:  # fmt: skip
    """Qwen3-VL (vLLM 0.33 ``qwen3_vl.py``): the largest image of ``longest_edge`` pixels
    factored as Qwen2-VL's (``get_image_size_with_most_features``, unit ``patch_size x
    spatial_merge_size`` = 32); a video's budget item is two frames at ``longest_edge //
    temporal_patch_size`` of the video processor (25,165,824 // 2), fewer tokens than the
    image, so an image is profiled while images are allowed. Per patch: the vision block of
    0.33 (11 attention widths, or 3 widths and ``linear_fc1``'s output and activation, 2
    intermediate widths), ``cos`` / ``sin`` (head_dim values), and the deepstack features
    held from their blocks on (``deepstack_visual_indexes`` x ``out_hidden_size`` per merged
    token); each output token is ``out_hidden_size x (1 + deepstack)`` wide."""
    if mm.count("image") <= 0:
        return None
    vision = _vision(config)
    patch, merge = int(vision.get("patch_size", 16)), int(vision.get("spatial_merge_size", 2))
    kwargs, size = mm.mm_processor_kwargs, mm.size("image")
    min_pixels = int(kwargs.get("min_pixels", QWEN3_IMAGE_PIXELS[0]))
    max_pixels = int(kwargs.get("max_pixels", QWEN3_IMAGE_PIXELS[1]))
    if "width" in size and "height" in size:
        h, w = smart_resize(size["height"], size["width"], patch * merge, min_pixels,
                             max_pixels)  # fmt: skip
    else:
        h, w = most_features(max_pixels, patch * merge)
    patches = (h // patch) * (w // patch)
    width = int(vision.get("hidden_size", 1152))
    inner = int(vision.get("intermediate_size", 4304))
    head_dim = width // int(vision.get("num_heads", 16))
    deep = len(vision.get("deepstack_visual_indexes") or ())
    out = int(vision.get("out_hidden_size", 3584))  # Qwen3VLVisionConfig default
    values = int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 2)) * (
        patch * patch)  # fmt: skip
    per = layer_bytes(width, inner, 11, split=8, tp=tp) + head_dim + values + deep * out // (
        merge * merge)  # fmt: skip
    return Item("image", patches // (merge * merge), patches, per * dtype_bytes, values,
                out * (1 + deep))  # fmt: skip
