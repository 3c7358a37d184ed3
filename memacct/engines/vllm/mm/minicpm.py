"""MiniCPM-V 2.6 and 4.0's and MiniCPM-o 2.6's encoder pass, as vLLM 0.33 profiles it
(``vllm/model_executor/models/minicpmv.py``; the slicing is the checkpoint's image processor,
``image_processing_minicpmv.py``, ``MiniCPMVImageProcessor``).

**Tokens per item** (``MiniCPMVProcessingInfo``): the largest image is ``image_size`` wide
and ``image_size x max_slice_num`` high (``get_image_size_with_most_features``: 448 x 4,032);
the processor slices it into the grid of at most ``max_slice_nums`` slices closest to its
aspect ratio (``get_sliced_grid``: 1 x 9) and each slice and the source image give
``image_feature_size`` (``query_num``) tokens: ``(cols x rows + 1) x query_num``, 640. A
video frame is one ``image_size`` square slice (``get_video_max_slice_num`` 1): ``query_num``
tokens; the budget's video (``get_supported_mm_limits``) has
``min((max_model_len - one image's tokens) // frame tokens, 16)`` frames
(``get_num_frames_with_most_features`` with one item per modality, ``_MAX_FRAMES_PER_VIDEO``)
while the profile's dummy video (counts ``{"video": 1}``) has ``min(max_model_len // frame
tokens, 16)``. The slicing reads ``slice_config`` (``max_slice_nums`` 9, ``scale_resolution``
448, ``patch_size`` 14; ``--mm-processor-kwargs`` ``max_slice_nums`` replaces the first, as
``_merge_mm_kwargs`` passes it to the image processor). MiniCPM-o (``minicpmo.py``) adds
audio, which the budget never profiles (:func:`budgets`), and subtracts an audio's tokens
from the budget's video frames (``MiniCPMOProcessingInfo.get_num_frames_with_most_features``).

**The patches**: the source image is resized to about ``scale_resolution^2`` pixels
(``find_best_resize``: 154 x 1,344, 1,056 patches) and each slice to ``scale_resolution``
square (``get_refine_size``: 1,024 patches); ``get_vision_hidden_states`` pads every slice of
the batch to the longest (``all_pixel_values``), so the tower and the resampler see ``slices x
longest`` patches.

**The working set per patch**: the Idefics2 layer (``idefics2_vision_model.py``) holds what a
SigLIP layer does (:func:`memacct.engines.vllm.mm.items.layer_bytes`, column-parallel outputs
split by tensor parallelism); then ``Resampler2_5.forward`` (all replicated) peaks in
``nn.MultiheadAttention``'s explicit product (``need_weights`` on: ``baddbmm``) holding the
tower's output, six text widths (the sin-cos positions, ``ln_kv``'s output, their sum, the
projected keys and values, and the contiguous copy of the permuted input the value
projection takes), the scores (``heads x query_num``, ``heads = hidden_size // 128``), the
key-padding mask per head and three copies of the queries per slice: vLLM's resampler run
on the CPU peaks within 2% above this (``tools/golden_minicpmv_resampler.py``; the rest is
index tensors). The padded pixel copy is held beside the dummy pixels throughout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, layer_bytes
from memacct.model.towers.minicpm import version_of

__all__ = ["FAMILY", "budgets", "image_slices", "minicpmv_item", "resampler_elements",
           "sliced_grid"]

MAX_FRAMES_PER_VIDEO = 16
"""``_MAX_FRAMES_PER_VIDEO`` of ``minicpmv.py``."""

PASS_VERSIONS = frozenset({(2, 6), (4, 0)})
"""The versions whose encoder pass is modelled here: 2.6's image processor was run
(``tools/golden_minicpmv_items.py``) and 4.0 shares its code; 2.5's processor (another
``get_sliced_grid``) was not, nor 4.5's temporal video."""

OMNI_PASS_VERSIONS = frozenset({(2, 6)})
"""MiniCPM-o's versions whose encoder pass is modelled (2.6: MiniCPM-V 2.6's vision part)."""

VIDEO_VERSIONS = frozenset({(2, 6), (4, 0), (4, 5)})
"""The versions that take videos (``get_supported_mm_limits``)."""


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return int(value) if ok else default


def sliced_grid(width: int, height: int, max_slices: int, scale: int) -> tuple[int, int] | None:
    """``get_sliced_grid``: (cols, rows) of the slices, ``None`` for no slicing."""
    log_ratio = math.log(width / height)
    multiple = min(math.ceil(width * height / (scale * scale)), max_slices)
    if multiple <= 1:
        return None
    best, error = (1, 1), math.inf
    for n in (multiple - 1, multiple, multiple + 1):
        if n == 1 or n > max_slices:
            continue
        for m in range(1, n + 1):
            if n % m == 0 and abs(log_ratio - math.log(m / (n // m))) < error:
                best, error = (m, n // m), abs(log_ratio - math.log(m / (n // m)))
    return best


def _divide(length: float, unit: int) -> int:
    return max(round(length / unit) * unit, unit)


def _best_resize(width: float, height: float, scale: int, patch: int,
                 upscale: bool) -> tuple[int, int]:  # fmt: skip
    """``find_best_resize``: both sides multiples of ``patch``, about ``scale^2`` pixels."""
    if width * height > scale * scale or upscale:
        ratio = width / height
        height = int(scale / math.sqrt(ratio))
        width = int(height * ratio)
    return _divide(width, patch), _divide(height, patch)


def image_slices(width: int, height: int, max_slices: int, scale: int,
                 patch: int) -> list[int]:  # fmt: skip
    """Patches of each slice the processor cuts an image into, the source image first
    (``slice_image``, ``get_refine_size``)."""
    grid = sliced_grid(width, height, max_slices, scale)
    if grid is None:
        w, h = _best_resize(width, height, scale, patch, True)
        return [(w // patch) * (h // patch)]
    w, h = _best_resize(width, height, scale, patch, False)
    cols, rows = grid
    cell = _best_resize(_divide(width, cols) / cols, _divide(height, rows) / rows, scale, patch,
                        True)  # fmt: skip
    return [(w // patch) * (h // patch)] + [(cell[0] // patch) * (cell[1] // patch)] * (
        cols * rows)  # fmt: skip


def _slicing(config: Mapping[str, Any], mm: Multimodal) -> tuple[int, int, int]:
    sc = config.get("slice_config")
    sc = sc if isinstance(sc, Mapping) else {}
    max_slices = _int(mm.mm_processor_kwargs, "max_slice_nums", _int(sc, "max_slice_nums", 9))
    return max_slices, _int(sc, "scale_resolution", 448), _int(sc, "patch_size", 14)


def audio_tokens(config: Mapping[str, Any]) -> int:
    """MiniCPM-o's tokens per audio (``MiniCPMOProcessingInfo.get_max_audio_tokens``): 30
    chunks of 100 filter-bank frames, halved by the convolution and pooled by
    ``audio_pool_step``."""
    pool = _int(config, "audio_pool_step", 2)
    return 30 * ((((100 - 1) // 2 + 1) - pool) // pool + 1)


def budgets(config: Mapping[str, Any], mm: Multimodal, seq_len: int) -> dict[str, int]:
    """Tokens per item of each allowed modality (``get_mm_max_tokens_per_item``, one item per
    modality). MiniCPM-o's audio has no entry there (``MiniCPMOProcessingInfo`` keeps the
    base method), so the budget never profiles it; its tokens only shorten the video."""
    side, queries = _int(config, "image_size", 448), _int(config, "query_num", 64)
    max_slices, scale, _ = _slicing(config, mm)
    grid = sliced_grid(side, side * _int(config, "max_slice_num", 9), max_slices, scale)
    image = ((grid[0] * grid[1] if grid else 0) + 1) * queries
    out: dict[str, int] = {}
    if mm.count("image") > 0:
        out["image"] = image
    if mm.count("video") > 0 and version_of(config)[:2] in VIDEO_VERSIONS:
        free = seq_len - (image if "image" in out else 0)
        if config.get("model_type") == "minicpmo" and mm.count("audio") > 0:
            free -= audio_tokens(config)
        out["video"] = max(1, min(free // queries, MAX_FRAMES_PER_VIDEO)) * queries
    return out


def resampler_elements(dim: int, width: int, queries: int, longest: int) -> int:
    """Model-dtype elements per patch at ``Resampler2_5.forward``'s peak (the module notes):
    the tower's output, six text widths, the scores of ``dim // 128`` heads x ``queries``
    and the per-head mask, and three copies of the queries per slice of ``longest``
    patches (vLLM's own resampler, measured: ``tools/golden_minicpmv_resampler.py``)."""
    heads = max(1, dim // 128)
    return width + 6 * dim + heads * queries + heads + -(-3 * queries * dim // longest)


def _per_patch(config: Mapping[str, Any], values: int, longest: int, dtype_bytes: int,
               tp: int) -> int:  # fmt: skip
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    width = _int(vision, "hidden_size", 1152)
    tower = layer_bytes(width, _int(vision, "intermediate_size", 4304), tp=tp)
    dim, queries = _int(config, "hidden_size", 3584), _int(config, "query_num", 64)
    resampler = resampler_elements(dim, width, queries, longest)
    return (max(tower, resampler) + 2 * values) * dtype_bytes


def minicpmv_item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    """The profile's largest dummy item (``None``: no image or video allowed)."""
    tokens_per_item = budgets(config, mm, ctx.seq_len)
    if not tokens_per_item:
        return None
    modality, tokens = max(tokens_per_item.items(), key=lambda kv: (kv[1], kv[0]))
    side, queries = _int(config, "image_size", 448), _int(config, "query_num", 64)
    max_slices, scale, patch = _slicing(config, mm)
    size = mm.size(modality)
    if modality == "video":
        frames = max(1, min(ctx.seq_len // queries, MAX_FRAMES_PER_VIDEO,
                            size.get("num_frames", MAX_FRAMES_PER_VIDEO)))  # fmt: skip
        width, height, max_slices = side, side, 1
    else:
        frames, width, height = 1, side, side * _int(config, "max_slice_num", 9)
    width, height = min(width, size.get("width", width)), min(height, size.get("height", height))
    slices = image_slices(width, height, max_slices, scale, patch)
    patches = frames * len(slices) * max(slices)
    values = 3 * patch * patch
    per = _per_patch(config, values, max(slices), ctx.dtype_bytes, ctx.tensor_parallel_size)
    out_tokens = frames * len(slices) * queries
    return Item(modality, tokens, patches, per, values, _int(config, "hidden_size", 3584),
                out_tokens)  # fmt: skip


def _accepts(config: Mapping[str, Any]) -> bool:
    versions = OMNI_PASS_VERSIONS if config.get("model_type") == "minicpmo" else PASS_VERSIONS
    return isinstance(config.get("vision_config"), Mapping) and (
        version_of(config)[:2] in versions)  # fmt: skip


FAMILY = EncoderFamily(
    model_types=frozenset({"minicpmv", "minicpmo"}),
    modules={"minicpmv": "MiniCPM-V 2.6 / 4.0",
             "minicpmo": "MiniCPM-o 2.6"},
    processor_keys=("max_slice_nums",),
    item=minicpmv_item,
    towers={"minicpmv": ("Idefics2 (SigLIP) tower and the resampler (versions 2.5 to 4.5; the "
                         "encoder pass of 2.0, 2.5 and 4.5 is not modelled)",
                         "towers/minicpm.py"),
            "minicpmo": ("MiniCPM-V's tower and resampler, the Whisper encoder and the audio "
                         "projection (versions 2.6 and 4.5; the budget never profiles "
                         "audio; 4.5's encoder pass is not modelled)", "towers/minicpm.py")},
    checked=frozenset({"minicpmv", "minicpmo"}),
    accepts=_accepts,
)
"""MiniCPM-V and MiniCPM-o (``multimodal.PLUGGED_FAMILIES``)."""
