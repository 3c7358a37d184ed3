"""The encoder pass of Qwen2.5-Omni's thinker (vLLM 0.33 ``qwen2_5_omni_thinker.py``).

The thinker takes audio, images and video (``get_supported_mm_limits``), and the profile
encodes a dummy batch of the modality whose largest item has the most tokens
(``Qwen2_5OmniThinkerProcessingInfo.get_mm_max_tokens_per_item``, the first of audio,
image, video on a tie):

* **image and video** are Qwen2.5-VL's (the processing info reuses
  ``Qwen2_5_VLProcessingInfo``; the tower is ``qwen2_5_vl.py``'s
  ``Qwen2_5_VisionTransformer``): the largest image factors ``max_pixels // 28**2`` merged
  tokens (12,845,056 pixels by default, ``--mm-processor-kwargs`` overrides) into the closest
  height x width pair (aspect ratio at most 200; ``get_image_size_with_most_features``), the
  size form's width and height go through ``smart_resize``; the video has as many frames of
  that size as ``max_model_len`` holds (``_get_max_video_frames``), at most 14 from 0.11 (16
  in 0.10), two frames per temporal patch. The vision block's working set per patch in 0.33
  is 11 model-dtype widths at the attention or 3 widths and ``gate_up`` with its activation
  (3 intermediate widths) at the MLP, with ``cos`` / ``sin`` (``head_dim`` values); up to 0.11,
  20 widths and the float32 rotary table (3 x ``head_dim / 2`` floats); full widths on every
  rank, as :mod:`memacct.engines.vllm.multimodal` models Qwen2.5-VL;
* **audio** (``Qwen2AudioProcessingInfo.get_mm_max_tokens_per_item``; the dummy of
  ``get_dummy_mm_data``): the 30 s clip of the published ``WhisperFeatureExtractor``
  (:data:`memacct.engines.vllm.mm.audio.WHISPER_FEATURES`), 3,000 mel frames, 1,500 encoder
  positions, 750 tokens; the processor keeps only the clip's valid frames, so the size form's
  ``length`` shortens the encoder's run (not the budget's 750). The encoder is transformers'
  ``Qwen2_5OmniAudioEncoder`` (``nn.Linear`` layers, whole per rank) on its SDPA path (vLLM
  asks for FlashAttention-2 only where the ``flash_attn`` package is installed, which vLLM's
  wheels do not bring): per position the convolutions (``conv1``'s output and GELU over two
  frames, then the mask product: 4h), the attention (``Qwen2_5OmniAudioAttention.forward``:
  the residual, the norm, q, k, v, the per-chunk outputs, their ``torch.cat`` and
  ``out_proj``: 8h), the MLP (``Qwen2_5OmniAudioEncoderLayer.forward``: the residual with
  ``fc1``'s output and its activation, h + 2i, or the residual, the norm and ``fc1``'s output,
  2h + i), the pooling (2.5h) and ``ln_post`` with ``proj`` (h + ``output_dim`` / 2); the
  last chunk's padding through the convolutions is not counted (at most 99 positions an item,
  under the MLP's peak). The audio encoder is read off transformers 5 (vLLM 0.33 requires
  5.16.1 to 5.20); a release that ran transformers 4 is planned with the same working set,
  not re-read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.audio import WHISPER_FEATURES, conv_output_length, mel_frames
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item
from memacct.engines.vllm.mm.qwen import (
    DEFAULT_MAX_PIXELS,
    DEFAULT_MIN_PIXELS,
    max_frames_per_video,
    most_features,
    smart_resize,
)  # fmt: skip
from memacct.model.towers.omni import thinker_section
from memacct.model.towers.parts import int_key, section_of

__all__ = ["FAMILY", "omni_audio_item", "omni_item", "omni_vision_item"]

def _vision_tokens(vision: Mapping[str, Any], mm: Multimodal, modality: str, seq_len: int,
                   version: tuple[int, int] | None) -> tuple[int, int]:  # fmt: skip
    """(tokens, patches) of the largest image or video (module notes)."""
    patch, merge = int_key(vision, "patch_size", 14), int_key(vision, "spatial_merge_size", 2)
    temporal = int_key(vision, "temporal_patch_size", 2)
    kwargs, size = mm.mm_processor_kwargs, mm.size(modality)
    high = int(kwargs.get("max_pixels", DEFAULT_MAX_PIXELS))
    low = int(kwargs.get("min_pixels", DEFAULT_MIN_PIXELS))
    if "width" in size and "height" in size:
        h, w = smart_resize(size["height"], size["width"], patch * merge, low, high)
    else:
        h, w = most_features(high, patch * merge)
    frame_patches = (h // patch) * (w // patch)
    frame_tokens = frame_patches // (merge * merge)
    if modality == "image":
        return frame_tokens, frame_patches
    frames = size.get("num_frames", 0)
    if not frames:
        frames = 1
        while ((frames + 1 + (frames + 1) % temporal) // temporal) * frame_tokens <= seq_len:
            frames += 1
        frames = max(1, min(frames, max_frames_per_video(version)))
    groups = max(1, (frames + frames % temporal) // temporal)
    return groups * frame_tokens, groups * frame_patches


def omni_vision_item(thinker: Mapping[str, Any], mm: Multimodal, context: ItemContext,
                     modality: str) -> Item:  # fmt: skip
    """The largest image or video through the Qwen2.5-VL tower (module notes)."""
    vision = section_of(thinker, "vision_config")
    tokens, patches = _vision_tokens(vision, mm, modality, context.seq_len, context.version)
    width, inner = int_key(vision, "hidden_size"), int_key(vision, "intermediate_size")
    head_dim = width // int_key(vision, "num_heads")
    old = context.version is not None and context.version < (0, 12)
    per = max((20 if old else 11) * width, 3 * width + 3 * inner) * context.dtype_bytes
    per += 3 * (head_dim // 2) * 4 if old else head_dim * context.dtype_bytes
    patch = int_key(vision, "patch_size", 14)
    values = int_key(vision, "in_channels", vision.get("in_chans", 3)) * int_key(
        vision, "temporal_patch_size", 2) * patch * patch  # fmt: skip
    return Item(modality, tokens, patches, per + values * context.dtype_bytes, values,
                int_key(vision, "out_hidden_size"))  # fmt: skip


def omni_audio_item(thinker: Mapping[str, Any], mm: Multimodal, context: ItemContext) -> Item:
    """The largest audio through Qwen2.5-Omni's audio encoder (module notes)."""
    audio = section_of(thinker, "audio_config")
    h, inner = int_key(audio, "d_model"), int_key(audio, "encoder_ffn_dim")
    out = int_key(audio, "output_dim")
    samples = min(WHISPER_FEATURES["chunk_length"], 30) * WHISPER_FEATURES["sampling_rate"]
    _, tokens = conv_output_length(samples // WHISPER_FEATURES["hop_length"])
    length = mm.size("audio").get("length")
    frames = mel_frames(min(samples, length) if length else samples)
    positions, held = conv_output_length(frames)
    widest = max(8 * h, h + 2 * inner, 2 * h + inner, (5 * h) // 2, h + out // 2)
    values = 2 * int_key(audio, "num_mel_bins")
    return Item("audio", tokens, positions, (widest + values) * context.dtype_bytes, values,
                out, max(1, held))  # fmt: skip


def omni_item(config: Mapping[str, Any], mm: Multimodal, context: ItemContext) -> Item | None:
    """The profile's item: the allowed modality whose largest item has the most tokens."""
    thinker = thinker_section(config)
    items = [omni_audio_item(thinker, mm, context)] if mm.count("audio") > 0 else []
    items += [omni_vision_item(thinker, mm, context, m) for m in ("image", "video")
              if mm.count(m) > 0]  # fmt: skip
    best: Item | None = None
    for item in items:
        if best is None or item.tokens > best.tokens:
            best = item
    return best


FAMILY = EncoderFamily(
    model_types=frozenset({"qwen2_5_omni", "qwen2_5_omni_thinker"}),
    modules={"qwen2_5_omni_thinker": "Qwen2.5-Omni (Qwen2.5-VL's ViT and the audio encoder)"},
    processor_keys=("max_pixels", "min_pixels"),
    item=omni_item,
    towers={"qwen2_5_omni_thinker": ("Qwen2.5-VL's ViT and merger and the Qwen2.5-Omni audio "
                                     "encoder", "towers/omni.py")},
    checked=frozenset({"qwen2_5_omni_thinker"}),
)
"""Qwen2.5-Omni's thinker: encoder pass and towers (:mod:`memacct.model.towers.omni`)."""
