"""vLLM's multimodal start-up: the encoder's profile pass and the encoder cache it holds.

vLLM 0.33's profile run (``vllm/v1/worker/gpu_model_runner.py``, ``profile_run``) first
encodes a dummy batch of the modality whose largest item has the most tokens, unless
``--skip-mm-profiling``; the outputs stay in the encoder cache while the text dummy run
follows. The budget (``vllm/multimodal/encoder_budget.py``, ``MultiModalBudget``):

* tokens per item, from the model's processor defaults (:func:`item_tokens`): Qwen2-VL and
  Qwen2.5-VL (``vllm/model_executor/models/qwen2_vl.py``, ``Qwen2VLProcessingInfo``) size
  the largest image by ``max_pixels`` (12,845,056 by default, ``--mm-processor-kwargs``
  overrides it) on the 28-pixel grid of 14-pixel patches merged 2 x 2, and the largest video
  by as many frames of that size as ``max_model_len`` holds (``_get_max_video_frames``,
  at most ``_MAX_FRAMES_PER_VIDEO`` = 600; the budget asks with a count of 1 per modality
  whatever the limit, vllm-project/vllm#38465), two frames per temporal patch; the size form of
  ``--limit-mm-per-prompt`` (``width``, ``height``, ``num_frames``) replaces the largest
  item;
* the encoder budget: ``max(max_num_batched_tokens, largest item)``, and
  ``max(1, min(max_num_seqs x limit, budget // item tokens))`` items per dummy batch.

The encoder's peak (:func:`encoder_profile`) follows the Qwen2.5-VL vision block
(``Qwen2_5_VisionBlock.forward``, ``Qwen2_5_VisionAttention.forward``) per patch: the
residual stream, ``qkv`` (3 widths), the concatenated q/k (2), their float32 copy (4) and
the rotary embedding's float32 output (4; ``apply_rotary_pos_emb_vision`` upcasts): 14
widths in the attention; the MLP holds the residual, its norm and the attention output (3
widths) and the gated ``gate_up`` plus its activation (3 intermediate widths); besides, the
dummy pixel values stay referenced in float32 as the processor made them and in the model
dtype as ``_process_image_input`` / ``_process_video_input`` cast them (``3 x 2 x 14 x 14``
values per patch), and the vision rotary table. Qwen2-VL's MLP is not gated (2
intermediate widths).

Other multimodal families are planned without the encoder pass, and the plan says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.engines.deployment import Multimodal

__all__ = [
    "ATTENTION_WIDTHS",
    "DEFAULT_MAX_PIXELS",
    "MAX_FRAMES_PER_VIDEO",
    "EncoderProfile",
    "encoder_profile",
    "item_tokens",
    "modelled",
]

DEFAULT_MAX_PIXELS = 12845056
"""Qwen2-VL's and Qwen2.5-VL's image processor ``max_pixels`` (16384 x 28 x 28)."""

DEFAULT_MIN_PIXELS = 3136
"""The same processors' ``min_pixels`` (4 x 28 x 28)."""

MAX_FRAMES_PER_VIDEO = 600
"""``_MAX_FRAMES_PER_VIDEO`` in ``vllm/model_executor/models/qwen2_vl.py``."""

ATTENTION_WIDTHS = 14
"""Model-dtype widths per patch alive at the vision attention's peak (module notes)."""

_FAMILIES = ("qwen2_vl", "qwen2_5_vl")


@dataclass(frozen=True)
class EncoderProfile:
    """The encoder's profile pass: its peak, what it leaves in the encoder cache, and a note."""

    peak_bytes: int
    held_bytes: int
    note: str


def modelled(config: Mapping[str, Any]) -> bool:
    """Whether memacct models this config's encoder pass (Qwen2-VL and Qwen2.5-VL)."""
    return str(config.get("model_type", "")) in _FAMILIES and isinstance(
        config.get("vision_config"), Mapping)  # fmt: skip


def _smart_resize(height: int, width: int, factor: int, min_pixels: int,
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


def _vision(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def item_tokens(
    config: Mapping[str, Any], mm: Multimodal, modality: str, max_model_len: int
) -> tuple[int, int]:
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
        h, w = _smart_resize(size["height"], size["width"], factor, min_pixels, max_pixels)
    else:
        side = max(factor, math.floor(math.sqrt(max_pixels) / factor) * factor)
        h = w = side
    frame_patches = (h // patch) * (w // patch)
    frame_tokens = frame_patches // (merge * merge)
    if modality == "image":
        return frame_tokens, frame_patches
    if "num_frames" in size:
        frames = size["num_frames"]
    else:
        frames = 0
        while ((frames + 1 + (frames + 1) % temporal) // temporal) * frame_tokens <= max_model_len:
            frames += 1
        # The budget sizes one item with a count of 1 per modality whatever the limit
        # (encoder_budget.py, get_mm_max_toks_per_item; vllm-project/vllm#38465).
        frames = max(1, min(frames, MAX_FRAMES_PER_VIDEO))
    groups = max(1, (frames + frames % temporal) // temporal)
    return groups * frame_tokens, groups * frame_patches


def encoder_profile(
    config: Mapping[str, Any], mm: Multimodal, *, max_num_batched_tokens: int,
    max_num_seqs: int, max_model_len: int | None, dtype_bytes: int,
) -> EncoderProfile | None:  # fmt: skip
    """The encoder pass of the profile run (``None``: the model has no encoder memacct models,
    or ``--skip-mm-profiling``). See the module notes."""
    if not modelled(config):
        return None
    if mm.skip_mm_profiling:
        return EncoderProfile(0, 0, "--skip-mm-profiling: no encoder pass in the profile run "
                                    "(an image or video at serving time may run out of memory)")
    seq_len = max_model_len or int(config.get("max_position_embeddings") or 32768)
    items = {m: item_tokens(config, mm, m, seq_len) for m in ("image", "video")
             if mm.count(m) > 0}  # fmt: skip
    if not items:
        return EncoderProfile(0, 0, "--limit-mm-per-prompt allows no image or video: no "
                                    "encoder pass")  # fmt: skip
    modality = max(items, key=lambda m: items[m][0])
    tokens, patches = items[modality]
    budget = max(max_num_batched_tokens, tokens)
    count = max(1, min(max_num_seqs * mm.count(modality), budget // tokens))
    vision = _vision(config)
    qwen25 = str(config.get("model_type")) == "qwen2_5_vl"
    width = int(vision.get("hidden_size" if qwen25 else "embed_dim", 1280))
    heads = int(vision.get("num_heads", 16))
    if qwen25:
        mlp = 3 * width + 3 * int(vision.get("intermediate_size", 3420))
    else:
        mlp = 3 * width + 2 * width * int(vision.get("mlp_ratio", 4))
    per_patch = max(ATTENTION_WIDTHS * width, mlp) * dtype_bytes
    patch = int(vision.get("patch_size", 14))
    values = int(vision.get("in_channels", vision.get("in_chans", 3))) * int(
        vision.get("temporal_patch_size", 2)) * patch * patch  # fmt: skip
    per_patch += values * (4 + dtype_bytes)  # the pixel values: float32 and the cast copy
    per_patch += (width // heads // 2) * 4  # the vision rotary table (float32)
    out_hidden = int(vision.get("out_hidden_size", vision.get("hidden_size", width)))
    held = count * tokens * out_hidden * dtype_bytes
    peak = count * patches * per_patch + held
    note = (f"multimodal profile: {count} dummy {modality}(s) of {tokens:,} tokens "
            f"({patches:,} patches) through the vision encoder, {peak / 2**30:.2f} GiB at its "
            "peak; --limit-mm-per-prompt, --mm-processor-kwargs max_pixels or "
            "--skip-mm-profiling change it")  # fmt: skip
    return EncoderProfile(peak, held, note)
