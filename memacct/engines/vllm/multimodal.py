"""vLLM's multimodal start-up: the encoder's profile pass and the encoder cache it holds.

vLLM's profile run (``vllm/v1/worker/gpu_model_runner.py``, ``profile_run``; 0.11.0 and
0.33.0 alike) first encodes a dummy batch of the modality whose largest item has the most
tokens, unless ``--skip-mm-profiling``; the outputs stay in the encoder cache, and the dummy
inputs stay referenced (``batched_dummy_mm_inputs``), while the text dummy run follows. The
budget (``vllm/multimodal/encoder_budget.py``, ``MultiModalBudget``; ``v1/worker/utils.py``
in 0.11):

* tokens per item, from the model's processor defaults (:func:`item_tokens`): Qwen2-VL and
  Qwen2.5-VL (``vllm/model_executor/models/qwen2_vl.py``, ``Qwen2VLProcessingInfo``) size
  the largest image by ``max_pixels`` (12,845,056 by default, ``--mm-processor-kwargs``
  overrides it): ``get_image_size_with_most_features`` factors ``max_pixels // 28**2``
  merged tokens into the closest height x width pair (aspect ratio at most 200); the
  largest video has as many frames of that size as ``max_model_len`` holds
  (``_get_max_video_frames``), at most ``_MAX_FRAMES_PER_VIDEO`` (14 in 0.11 and 0.33, 16 in
  0.10), two frames per temporal patch; the size form of ``--limit-mm-per-prompt``
  (``width``, ``height``, ``num_frames``) replaces the largest item;
* the encoder budget ``max(max_num_batched_tokens, largest item)``
  (``compute_mm_encoder_budget``); items per batch ``max(1, min(budget // item,
  max_num_seqs x per_prompt))``, ``per_prompt = max(1, min(limit, max_model_len // item))``
  (``MultiModalBudget._get_max_items``).

The dummy pixel values are in the model dtype (``InputProcessingContext._postprocess_output``
casts the processor's floats to ``model_config.dtype``; 0.11 ``multimodal/processing.py``,
0.33 ``multimodal/processing/context.py``), ``3 x 2 x 14 x 14`` values per patch.

The encoder's peak (:func:`encoder_profile`) is the Qwen2/2.5-VL vision block's working set
per patch, in model-dtype widths of the vision ``hidden_size`` (``embed_dim``), as the
release's ``Qwen2_5_VisionAttention.forward`` allocates it (:func:`attention_widths`):

* up to 0.11 (0.11.0 ``qwen2_5_vl.py``): the block input and ``norm1`` (2), ``qkv`` (3),
  the ``.contiguous()`` q, k, v (3), ``torch.cat([q, k])`` (2), and in
  ``apply_rotary_pos_emb_vision`` (``qwen2_vl.py``) its float32 copy ``t.float()`` (4),
  the float32 rotary output (4) and ``.type_as(t)`` (2): 20 widths; the float32 rotary
  table, its ``cos`` and ``sin`` (3 x head_dim / 2 floats). The xFormers / FlashAttention
  varlen kernels are linear in the patches (head size 80 is not in 0.11's FlashAttention
  list, so an A100 runs xFormers' ``memory_efficient_attention_forward``);
* 0.12 on (read off 0.33.0): the block input and ``norm1`` (2), ``qkv`` (3), the
  contiguous q/k pair (2), ``ApplyRotaryEmb``'s model-dtype output (2), the FlashAttention
  output (``flash_attn_maxseqlen_wrapper``, ``out=``) and ``proj`` (2): 11 widths; the MLP
  at ``down_proj`` holds the fused-norm input and residual plus ``down_proj``'s output (3
  widths) and ``gate_up`` plus the activation (3 intermediate widths; Qwen2-VL's ungated
  MLP 2); the rotary ``cos`` / ``sin`` (head_dim values in the model dtype). From 0.33
  (:data:`ENCODER_TP_SINCE`) the column-parallel ones (``qkv``, the q/k pairs, the attention
  output: 8 of the 11; ``gate_up`` and the activation) hold ``1 / tp`` of their width.

Gemma 3 (read off 0.33.0 ``gemma3_mm.py`` and ``siglip.py``): 256 tokens per image
(``mm_tokens_per_image``), 64 x 64 SigLIP patches each, the SigLIP layer's working set
(:func:`_gemma3_item`).

Qwen3-VL and Qwen3.5 (:func:`.mm.qwen.qwen3_item`); LLaVA (CLIP or Pixtral tower), LLaVA-NeXT,
PaliGemma, InternVL, Skywork-R1V, NVLM-D, Mistral 3 and Llama 4
(:mod:`memacct.engines.vllm.mm.items`); for these the column-parallel activations (``qkv``,
the attention output, the MLP's intermediate) are split across tensor-parallel ranks
(``layer_bytes``), and for Qwen2/2.5-VL and Gemma 3 from 0.33 on (older releases keep
their full widths on every rank, as memacct read them before 0.33's code was checked).
The families of :data:`PLUGGED_FAMILIES` live in modules of their own: OpenCUA
(:mod:`.mm.opencua`: Qwen2.5-VL's tower and processing, images only), H2OVL, Eagle2.5-VL and
Qianfan-OCR (:mod:`.mm.internvl_tiled`, InternVL's tiles), GLM-4V (:mod:`.mm.glm4v`).
Other multimodal families are planned without the encoder pass, and the plan says so
(:func:`unmodelled_note`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm import (
    audio,
    cohere2_vision,
    eagle2_5_vl,
    flamingo,
    gemma4,
    glm4v,
    glmasr,
    idefics,
    internvl_tiled,
    llava,
    minicpm,
    omni,
    opencua,
    pixtral,
    qianfan_ocr,
)  # fmt: skip
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, fixed_tile_item, layer_bytes, llama4_item
from memacct.engines.vllm.mm.qwen import (
    DEFAULT_MAX_PIXELS,
    attention_widths,
    encoder_tp,
    item_tokens,
    max_frames_per_video,
    qwen3_item,
    qwen_item,
)
from memacct.engines.vllm.mm.qwen3_video import BUDGET_ROWS_HELD, video_tokens

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "PLUGGED_FAMILIES",
    "EncoderProfile",
    "attention_widths",
    "encoder_profile",
    "has_encoder",
    "item_tokens",
    "max_frames_per_video",
    "modelled",
    "unapplied_notes",
    "unmodelled_note",
]

_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "gemma3", "qwen3_vl", "qwen3_vl_moe", "paligemma",
             "internvl_chat", "mistral3", "llama4", "qwen3_5", "qwen3_5_moe", "NVLM_D")
"""Model types of the built-in families (the LLaVA family and the others are plugged:
:data:`PLUGGED_FAMILIES`)."""

MODELLED_MODULES = {
    "qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL", "gemma3_mm": "Gemma 3",
    "qwen3_vl": "Qwen3-VL", "qwen3_vl_moe": "Qwen3-VL",
    "paligemma": "PaliGemma", "internvl": "InternVL (InternViT tower)",
    "mistral3": "Mistral 3 (Pixtral tower)", "mllama4": "Llama 4",
    "qwen3_5": "Qwen3.5 (Qwen3-VL's tower)",
    "skyworkr1v": "Skywork-R1V (InternVL's tiles)", "nvlm_d": "NVLM-D (InternVL's tiles)",
}  # fmt: skip
"""vLLM modules whose encoder pass is modelled here (their tower weights are in
:mod:`memacct.model.towers` or :mod:`memacct.model.weights.inventory`)."""

PLUGGED_FAMILIES: tuple[EncoderFamily, ...] = (
    llava.FAMILY, idefics.FAMILY, pixtral.FAMILY, cohere2_vision.FAMILY, gemma4.FAMILY,
    minicpm.FAMILY, audio.FAMILY, flamingo.FAMILY, omni.FAMILY, glmasr.FAMILY, opencua.FAMILY,
    internvl_tiled.FAMILY, glm4v.FAMILY, eagle2_5_vl.FAMILY, qianfan_ocr.FAMILY,
)
"""Families modelled in modules of their own (:mod:`memacct.engines.vllm.mm.family`)."""

MODELLED_MODULES.update({m: label for fam in PLUGGED_FAMILIES for m, label in fam.modules.items()})


def _plugged(config: Mapping[str, Any]) -> EncoderFamily | None:
    """The family module that models this config's encoder pass, if one does."""
    kind = str(config.get("model_type", ""))
    for fam in PLUGGED_FAMILIES:
        if kind in fam.model_types and fam.accepts(config):
            return fam
    return None
_ENCODER_KEYS = ("vision_config", "audio_config", "vision_tower", "mm_vision_tower", "visual",
                 "speech_config")  # fmt: skip


@dataclass(frozen=True)
class EncoderProfile:
    """The encoder's profile pass: its peak, what it leaves held during the text dummy run,
    and a note."""

    peak_bytes: int
    held_bytes: int
    note: str


def modelled(config: Mapping[str, Any]) -> bool:
    """Whether memacct models this config's encoder pass (a plugged family's, or one of
    :data:`_FAMILIES`; Mistral 3 with a Pixtral tower only)."""
    if _plugged(config) is not None:
        return True
    kind = str(config.get("model_type", ""))
    vision = config.get("vision_config")
    if kind not in _FAMILIES or not isinstance(vision, Mapping):
        return False
    return kind != "mistral3" or vision.get("model_type", "pixtral") == "pixtral"


_PROCESSOR_KEYS = {
    "qwen2_vl": ("max_pixels", "min_pixels"), "qwen2_5_vl": ("max_pixels", "min_pixels"),
    "gemma3": ("do_pan_and_scan", "pan_and_scan_max_num_crops"),
    "qwen3_vl": ("max_pixels", "min_pixels"), "qwen3_vl_moe": ("max_pixels", "min_pixels"),
    "paligemma": (), "internvl_chat": ("max_dynamic_patch", "use_thumbnail"),
    "mistral3": (), "llama4": ("max_patches",),
    "qwen3_5": ("max_pixels", "min_pixels"), "qwen3_5_moe": ("max_pixels", "min_pixels"),
    "NVLM_D": ("max_dynamic_patch", "use_thumbnail"),
}  # fmt: skip
"""The ``--mm-processor-kwargs`` keys the encoder pass of each modelled family reads."""


def unapplied_notes(config: Mapping[str, Any], mm: Multimodal) -> tuple[str, ...]:
    """One note per multimodal setting that changes nothing in the plan: any on a text-only
    model (vLLM builds its ``MultiModalConfig``, which holds them, only for a model that
    supports multimodal inputs: ``vllm/config/model.py``), and a ``--mm-processor-kwargs``
    key the modelled processor does not read (a misspelt ``max_pixel``)."""
    given = [flag for flag, on in (("--limit-mm-per-prompt", mm.limit_mm_per_prompt),
                                   ("--mm-processor-kwargs", mm.mm_processor_kwargs),
                                   ("--skip-mm-profiling", mm.skip_mm_profiling)) if on]
    if not has_encoder(config):
        if not given:
            return ()
        kind = config.get("model_type") or "this model"
        return (f"{' and '.join(given)} not applied: {kind} is a text-only model (no vision "
                "or audio tower), whose vLLM start-up reads no multimodal setting",)
    fam = _plugged(config)
    keys = (fam.processor_keys if fam is not None else
            _PROCESSOR_KEYS.get(str(config.get("model_type", ""))) if modelled(config) else None)
    if keys is None:
        return ()
    notes = []
    for key in mm.mm_processor_kwargs:
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            reads = ", ".join(keys) or "none of them"
            notes.append(f"--mm-processor-kwargs {key} not applied: the {config['model_type']} "
                         f"processor's encoder pass reads {reads}{hint}")
    return tuple(notes)


def has_encoder(config: Mapping[str, Any]) -> bool:
    """Whether the config carries a vision or audio tower (a key of :data:`_ENCODER_KEYS`),
    or its architecture is in vLLM 0.33's multimodal registry table."""
    if any(config.get(key) is not None for key in _ENCODER_KEYS):
        return True
    from memacct.model.arch_rules import registry

    archs = config.get("architectures") or []
    table = registry().get("multimodal", {})
    return any(isinstance(a, str) and a in table for a in archs)


def unmodelled_note(config: Mapping[str, Any]) -> str:
    """The plan note of a multimodal model whose encoder pass memacct does not model."""
    archs = config.get("architectures") or [config.get("model_type") or "this model"]
    name = str(archs[0])
    return (f"multimodal: the encoder's start-up profile pass of {name} is not modelled, so "
            "the KV figure is an upper bound (vLLM encodes the largest dummy items first); "
            "pass --skip-mm-profiling or --limit-mm-per-prompt '{\"image\": 0, \"video\": 0, "
            "\"audio\": 0}' as vLLM allows, or plan with --profile")  # fmt: skip


def _vision(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def _gemma3_item(config: Mapping[str, Any], mm: Multimodal, dtype_bytes: int,
                 tp: int = 1) -> Item | None:  # fmt: skip
    """Gemma 3 (vLLM 0.33 ``gemma3_mm.py``): ``mm_tokens_per_image`` (256) per crop, one crop
    unless ``do_pan_and_scan`` (then ``pan_and_scan_max_num_crops`` + 1, 4 + 1 by default:
    ``Gemma3ProcessingInfo.get_num_image_tokens``, ``get_image_size_with_most_features``);
    each crop ``(image_size / patch_size)**2`` SigLIP patches. The SigLIP layer
    (``siglip.py``, ``SiglipEncoderLayer``, ``SiglipAttention``, ``SiglipMLP``) holds per
    patch the residual, ``layer_norm1``, ``qkv_proj`` (3), the attention output and
    ``out_proj``: 7 widths; or the residual, ``layer_norm2`` and ``fc2``'s output (3 widths)
    with ``fc1``'s output and its activation (2 intermediate widths); ``qkv_proj``, the
    attention output and ``fc1`` are column-parallel (split by ``tp``, :func:`layer_bytes`)."""
    if mm.count("image") <= 0:
        return None
    vision = _vision(config)
    width = int(vision.get("hidden_size", 1152))
    inner = int(vision.get("intermediate_size", 4304))
    patch = int(vision.get("patch_size", 14))
    side = int(vision.get("image_size", 896)) // patch
    kwargs = mm.mm_processor_kwargs
    crops = 1 + (int(kwargs.get("pan_and_scan_max_num_crops", 4))
                 if kwargs.get("do_pan_and_scan") else 0)  # fmt: skip
    tokens = crops * int(config.get("mm_tokens_per_image", 256))
    values = int(vision.get("num_channels", 3)) * patch * patch
    per_patch = (layer_bytes(width, inner, tp=tp) + values) * dtype_bytes
    text = config.get("text_config")
    out_hidden = int((text if isinstance(text, Mapping) else config).get("hidden_size", width))
    return Item("image", tokens, crops * side * side, per_patch, values, out_hidden)


def encoder_profile(
    config: Mapping[str, Any], mm: Multimodal, *, max_num_batched_tokens: int,
    max_num_seqs: int, max_model_len: int | None, dtype_bytes: int,
    version: tuple[int, int] | None = None, tensor_parallel_size: int = 1,
) -> EncoderProfile | None:  # fmt: skip
    """The encoder pass of the profile run (``None``: the model has no encoder). A
    multimodal model memacct does not model gets a zero pass and :func:`unmodelled_note`.
    See the module notes."""
    if mm.skip_mm_profiling and has_encoder(config):
        return EncoderProfile(
            0,
            0,
            "--skip-mm-profiling: no encoder pass in the profile run "
            "(an image or video at serving time may run out of memory)",
        )
    if not modelled(config):
        if not has_encoder(config):
            return None
        listed = sorted(mm.limit_mm_per_prompt)
        if listed and all(mm.count(m) == 0 for m in listed):
            note = (f"--limit-mm-per-prompt allows no {', '.join(listed)} item: no encoder "
                    "pass for those (a modality not listed would still be profiled, not "
                    "modelled)")  # fmt: skip
            return EncoderProfile(0, 0, note)
        return EncoderProfile(0, 0, unmodelled_note(config))
    text = config.get("text_config")
    positions = (text if isinstance(text, Mapping) else config).get("max_position_embeddings")
    seq_len = max_model_len or int(positions or 32768)
    kind = str(config.get("model_type"))
    fam = _plugged(config)
    if fam is not None:
        context = ItemContext(seq_len, dtype_bytes, tensor_parallel_size, version)
        item = fam.item(config, mm, context)
    elif kind == "gemma3":
        item = _gemma3_item(config, mm, dtype_bytes, encoder_tp(version, tensor_parallel_size))
    elif kind in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        item = qwen3_item(config, mm, dtype_bytes, tensor_parallel_size)
        if item is not None and version in BUDGET_ROWS_HELD and mm.count("video") > 0:
            # 0.11 and 0.12 profile the video (mm/qwen3_video.py)
            vision = _vision(config)
            patch, merge = int(vision.get("patch_size", 16)), int(vision.get("spatial_merge_size",
                                                                             2))
            tokens, soft = video_tokens(math.isqrt(item.patches) * patch, seq_len, patch, merge)
            item = replace(item, modality="video", tokens=tokens, patches=soft * merge * merge,
                           out_tokens=soft)  # fmt: skip
    elif kind == "llama4":
        item = llama4_item(config, mm, dtype_bytes, tensor_parallel_size)
    elif kind in ("paligemma", "internvl_chat", "mistral3", "NVLM_D"):
        item = fixed_tile_item(config, mm, seq_len, dtype_bytes, tensor_parallel_size)
    else:
        item = qwen_item(config, mm, seq_len, version, dtype_bytes, tensor_parallel_size)
    if item is None:
        return EncoderProfile(0, 0, "--limit-mm-per-prompt allows no image or video: no "
                                    "encoder pass")  # fmt: skip
    budget = max(max_num_batched_tokens, item.tokens)
    limit = mm.count(item.modality)
    if fam is not None:
        limit = min(limit, fam.max_per_prompt.get(item.modality, limit))
    per_prompt = max(1, min(limit, seq_len // item.tokens))
    count = max(1, min(budget // item.tokens, max_num_seqs * per_prompt))
    rows = item.out_tokens or item.tokens
    rows = max(rows, budget) if version in BUDGET_ROWS_HELD else rows  # widened to the budget
    outputs = count * rows * item.out_hidden * dtype_bytes
    pixels = count * item.patches * item.values * dtype_bytes
    peak = count * item.patches * item.per_patch
    tower = "audio" if item.modality == "audio" else "vision"
    note = (f"multimodal profile: {count} dummy {item.modality}(s) of {item.tokens:,} tokens "
            f"({item.patches:,} patches) through the {tower} encoder, {peak / 2**30:.2f} GiB at "
            "its peak; --limit-mm-per-prompt, --mm-processor-kwargs or --skip-mm-profiling "
            "change it")  # fmt: skip
    return EncoderProfile(peak, outputs + pixels, note)
