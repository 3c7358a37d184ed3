"""Gemma 4's encoder pass, as vLLM 0.33 profiles it (``vllm/model_executor/models/gemma4_mm.py``,
``gemma4_unified.py``; the image processing of transformers 5.16-5.20 ``models/gemma4``).

**Tokens per item** (``Gemma4ProcessingInfo.get_mm_max_tokens_per_item``): an image
``vision_config.default_output_length`` (the Unified variant's ``num_soft_tokens``,
``Gemma4UnifiedProcessingInfo``), 280 where the config names none (the image processor's
``max_soft_tokens``), or ``--mm-processor-kwargs`` ``max_soft_tokens`` when it is one of 70,
140, 280, 560, 1120; an audio ``audio_seq_length`` (750, ``Gemma4Processor``) where the
config has ``audio_config``; a video ``num_frames x (70 + 2 + 6)``, 32 frames unless the size
form of ``--limit-mm-per-prompt`` asks fewer. The profile encodes the modality with the most
(``encoder_budget.py``, ``get_modality_with_max_tokens``): a 2,496-token video while videos
are allowed.

**The dummy items** (``Gemma4DummyInputsBuilder.get_dummy_mm_data``): images and video frames
are 224 x 224 (the image processor sets no ``size``), at least 2 frames; each frame goes
through the image processor at 70 soft tokens (``Gemma4MultiModalProcessor``), an image at
the image budget. The processor resizes to at most ``max_soft_tokens x k^2`` patches (``k`` the
``pooling_kernel_size``) and pads every item to that many (``pad_along_first_dim``), so the
tower encodes ``max_soft_tokens x k^2`` patches per item, 630 per frame; a 224-pixel item
encodes to ``_compute_num_soft_tokens`` tokens (64 per frame at 70, 256 at 280). The dummy
audio is ``fft_length`` samples (512 at 16 kHz, ``_dummy_audio_num_samples``): one encoder
frame; the Unified variant's is ``audio_seq_length x audio_ms_per_token`` (750 frames of
``audio_embed_dim`` raw samples).

**The working set per patch** of the tower (``Gemma4VisionEncoderLayer``, transformers' code
run as is, every linear replicated: tensor parallelism splits nothing): at the MLP, as
``act(gate) * up`` is formed, the layer's input (the encoder loop still holds it), the
residual after the attention, ``pre_feedforward_layernorm``'s output, three intermediate
widths and the rotary ``cos`` / ``sin`` (a head_dim each); at the attention the input, the
normed input, q, k, v, the attention output and ``o_proj``'s (``3 x hidden + 2 x q + 2 x
kv``) with the same rotary tables. The padded items carry a boolean attention mask
(``create_bidirectional_mask``, one byte per patch pair), which CUDA's SDPA turns into an
additive mask in the model dtype while it runs (2 bytes per pair; a copy padded for the
kernel's alignment is not modelled). transformers' encoder run on the CPU peaks at the MLP
exactly so (``tools/golden_gemma4_items.py``, ``layer_peak``). The Unified embedder
(``Gemma4UnifiedVisionEmbedder.forward``) holds per merged patch the raw values and either
``patch_ln1``'s output and ``patch_dense``'s (``2 x patch_dim + mm_embed_dim``) or, at
``pos_norm``, ``patch_ln2``'s output, the two looked-up position rows, their sum and the
norm's output (``patch_dim + 5 x mm_embed_dim``), as vLLM's embedder run on the CPU peaks
(``unified_peak``); the projection after it holds less on CUDA, where ``RMSNorm`` is a fused
kernel (vLLM's own chunking estimate, ``_vision_chunk``, charges ``2 x patch_dim + 4 x
mm_embed_dim``).

Not modelled: vLLM encodes the batch in chunks sized by the device's memory
(``_encoder_chunk``: at most a tenth of it); the budget here does not see the device, so the
peak is the whole batch's, an upper bound where a chunk holds fewer items.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item

__all__ = ["FAMILY", "budgets", "gemma4_item", "soft_tokens"]

SUPPORTED_SOFT_TOKENS = (70, 140, 280, 560, 1120)
"""``_SUPPORTED_SOFT_TOKENS`` of ``gemma4_mm.py``."""

VIDEO_SOFT_TOKENS, VIDEO_FRAMES, FRAME_EXTRA = 70, 32, 2 + 6
"""``_VIDEO_MAX_SOFT_TOKENS``, ``_VIDEO_MAX_FRAMES`` and a frame's boi, eoi and timestamp."""

DUMMY_SIDE = 224
"""The dummy image's and frame's side (``size.get("width", 224)``)."""

AUDIO_TOKENS, AUDIO_MS_PER_TOKEN, SAMPLE_RATE = 750, 40, 16000
"""``Gemma4Processor``'s ``audio_seq_length`` and ``audio_ms_per_token``; the feature
extractor's sampling rate."""


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return int(value) if ok else default


def _section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key)
    return value if isinstance(value, Mapping) else {}


def soft_tokens(width: int, height: int, patch: int, kernel: int, max_soft: int) -> int:
    """``Gemma4ProcessingInfo._compute_num_soft_tokens``: the tokens an image of this size
    encodes to at a budget of ``max_soft`` tokens."""
    unit = patch * kernel
    scale = math.sqrt(max_soft * kernel * kernel / ((height / patch) * (width / patch)))
    th = max(unit, math.floor(height * scale / unit) * unit)
    tw = max(unit, math.floor(width * scale / unit) * unit)
    return min((th // patch) * (tw // patch) // (kernel * kernel), max_soft)


def _image_budget(config: Mapping[str, Any], mm: Multimodal) -> int:
    vision = _section(config, "vision_config")
    key = "num_soft_tokens" if config.get("model_type") == "gemma4_unified" else (
        "default_output_length")  # fmt: skip
    tokens = _int(vision, key, 280)
    kwargs = mm.mm_processor_kwargs
    nested = kwargs.get("images_kwargs")
    value = kwargs.get("max_soft_tokens")
    if value is None and isinstance(nested, Mapping):
        value = nested.get("max_soft_tokens")
    return value if isinstance(value, int) and value in SUPPORTED_SOFT_TOKENS else tokens


def budgets(config: Mapping[str, Any], mm: Multimodal) -> dict[str, int]:
    """Tokens per item of each allowed modality (``get_mm_max_tokens_per_item``)."""
    out: dict[str, int] = {}
    if mm.count("image") > 0:
        out["image"] = _image_budget(config, mm)
    if mm.count("audio") > 0 and isinstance(config.get("audio_config"), Mapping):
        out["audio"] = AUDIO_TOKENS
    if mm.count("video") > 0:
        frames = min(VIDEO_FRAMES, mm.size("video").get("num_frames", VIDEO_FRAMES))
        out["video"] = frames * (VIDEO_SOFT_TOKENS + FRAME_EXTRA)
    return out


def _tower_per_patch(vision: Mapping[str, Any], per_item: int, dtype_bytes: int) -> int:
    """Bytes per patch at the vision layer's peak, the pixel values and mask included."""
    h, inner = _int(vision, "hidden_size", 768), _int(vision, "intermediate_size", 3072)
    heads = _int(vision, "num_attention_heads", 12)
    kv = _int(vision, "num_key_value_heads", heads)
    hd = _int(vision, "head_dim", h // heads)
    attention = (3 * h + 2 * heads * hd + 2 * kv * hd + 2 * hd) * dtype_bytes + 3 * per_item
    mlp = (3 * h + 3 * inner + 2 * hd) * dtype_bytes + per_item
    values = 3 * _int(vision, "patch_size", 16) ** 2
    return max(attention, mlp) + values * dtype_bytes


def _visual(config: Mapping[str, Any], mm: Multimodal, modality: str, tokens: int,
            dtype_bytes: int) -> Item:  # fmt: skip
    vision = _section(config, "vision_config")
    patch, kernel = _int(vision, "patch_size", 16), _int(vision, "pooling_kernel_size", 3)
    size = mm.size(modality)
    width = min(DUMMY_SIDE, size.get("width", DUMMY_SIDE))
    height = min(DUMMY_SIDE, size.get("height", DUMMY_SIDE))
    if modality == "video":
        frames = max(2, min(VIDEO_FRAMES, size.get("num_frames", VIDEO_FRAMES)))
        max_soft = VIDEO_SOFT_TOKENS
    else:
        frames, max_soft = 1, _image_budget(config, mm)
    out_tokens = frames * soft_tokens(width, height, patch, kernel, max_soft)
    text = _int(_section(config, "text_config"), "hidden_size", 2304)
    if config.get("model_type") == "gemma4_unified":
        raw = 3 * (patch * kernel) ** 2
        dim = _int(vision, "mm_embed_dim", 3840)
        per = max(2 * raw + dim, raw + 5 * dim) * dtype_bytes
        return Item(modality, tokens, frames * max_soft, per, raw, text, out_tokens)
    per_item = max_soft * kernel * kernel
    per = _tower_per_patch(vision, per_item, dtype_bytes)
    return Item(modality, tokens, frames * per_item, per, 3 * patch * patch, text, out_tokens)


def _audio_frames(samples: int) -> int:
    """``Gemma4ProcessingInfo._compute_audio_num_tokens``: mel frames of 20 ms every 10 ms,
    then two stride-2 convolutions."""
    frame, hop = SAMPLE_RATE * 20 // 1000, SAMPLE_RATE * 10 // 1000
    t = (samples + frame // 2 - (frame + 1)) // hop + 1
    for _ in range(2):
        t = (t - 1) // 2 + 1
    return max(1, min(t, AUDIO_TOKENS))


def _audio(config: Mapping[str, Any], dtype_bytes: int) -> Item:
    """The dummy audio: the tower's conformer layer per output frame (the residual, the
    normed input, ``ffw_layer_1``'s output and its activation: 2 + 8 widths), or the
    Unified variant's raw frames through ``embed_audio`` (the frame, its float32 norm and
    the projection)."""
    audio = _section(config, "audio_config")
    text = _int(_section(config, "text_config"), "hidden_size", 2304)
    if config.get("model_type") == "gemma4_unified":
        width = _int(audio, "audio_embed_dim", 640)
        per = (3 * width + text) * dtype_bytes
        return Item("audio", AUDIO_TOKENS, AUDIO_TOKENS, per, width, text, AUDIO_TOKENS)
    frame = SAMPLE_RATE * 20 // 1000
    fft = 2 ** math.ceil(math.log2(frame))
    frames = _audio_frames(fft)
    h = _int(audio, "hidden_size", 1024)
    return Item("audio", AUDIO_TOKENS, frames, 10 * h * dtype_bytes, 0, text, frames)


def gemma4_item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    """The profile's largest dummy item (``None``: no modality allowed). See the module notes."""
    tokens_per_item = budgets(config, mm)
    if not tokens_per_item:
        return None
    modality, tokens = max(tokens_per_item.items(), key=lambda kv: (kv[1], kv[0]))
    if modality == "audio":
        return _audio(config, ctx.dtype_bytes)
    return _visual(config, mm, modality, tokens, ctx.dtype_bytes)


def _has_vision(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get("vision_config"), Mapping)


FAMILY = EncoderFamily(
    model_types=frozenset({"gemma4", "gemma4_unified"}),
    modules={"gemma4_mm": "Gemma 4", "gemma4_unified": "Gemma 4 Unified"},
    processor_keys=("max_soft_tokens", "images_kwargs"),
    item=gemma4_item,
    towers={
        "gemma4_mm": ("Gemma 4's vision tower, the audio tower where audio_config, and their "
                      "projections", "towers/gemma4.py"),
        "gemma4_unified": ("Gemma 4 Unified's patch embedder and projections",
                           "towers/gemma4.py"),
    },
    checked=frozenset({"gemma4_mm", "gemma4_unified"}),
    accepts=_has_vision,
)
"""Gemma 4 and Gemma 4 Unified (``multimodal.PLUGGED_FAMILIES``)."""
