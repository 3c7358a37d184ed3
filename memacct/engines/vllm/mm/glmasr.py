"""The encoder pass of GLM-ASR (vLLM 0.33 ``glmasr.py``, ``GlmAsrForConditionalGeneration``).

* the item: no ``get_mm_max_tokens_per_item``, so the budget processes the dummy
  (``encoder_budget.get_mm_max_toks_per_item``): ``max_audio_len`` seconds of silence
  (``GlmAsrDummyInputsBuilder.get_dummy_mm_data``; 655 by default,
  ``glmasr_utils.DEFAULT_MAX_AUDIO_LEN_S`` and ``GlmAsrProcessor``; ``--mm-processor-kwargs
  max_audio_len`` overrides it, the size form's ``length`` shortens it) in 30 s windows as
  Audio Flamingo 3's (:func:`memacct.engines.vllm.mm.audio.window_frames`): 21 windows of
  3,000 frames, 1,500 encoder positions each (``conv2`` of stride 2);
* tokens (``GlmAsrMultiModalProcessor._get_prompt_updates``,
  ``glmasr_utils._get_audio_output_lengths_from_mask``): per window, the frames through the
  two convolutions, then ``(n - 4) // 4 + 1`` (``merge_factor`` 4), summed: 375 a full
  window, 7,875 the item;
* the encoder (``GlmAsrEncoder``, vLLM's parallel layers, split across tensor-parallel
  ranks: ``mm_encoder_tp_mode`` "weights") holds per position, in model-dtype elements of
  the width h and ``intermediate_size`` i: the convolutions (``conv1``'s output over two
  frames and its GELU, then ``conv2``'s input, output and GELU: 4h); the attention
  (``GlmAsrEncoderAttention.forward``): the residual, ``input_layernorm``, the fused ``qkv``
  (split), the FlashAttention output (``flash_attn_maxseqlen_wrapper``'s ``out``, split) and
  ``o_proj``'s; the MLP (``GlmAsrEncoderMLP``; the layer keeps the norm's output while it
  runs): the residual, the norm, ``fc1``'s output and its activation (split), or the
  activation with ``fc2``'s output; the tail: the final ``norm`` and the projector's
  tensors per stacked token (``linear_1`` and its activation, 2 x text width, split;
  ``linear_2``, the masked copy and the windows' ``torch.cat``, text width each); plus the
  input features (2 x ``num_mel_bins``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.audio import WHISPER_FEATURES, window_frames
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item
from memacct.model.towers.parts import int_key, section_of, text_hidden

__all__ = ["FAMILY", "GLMASR_MAX_AUDIO_LEN", "glmasr_item", "glmasr_tokens"]

GLMASR_MAX_AUDIO_LEN = 655
"""``glmasr_utils.DEFAULT_MAX_AUDIO_LEN_S`` (``GlmAsrProcessor``'s ``max_audio_len``), s."""

_MERGE = 4
"""``glmasr_utils.DEFAULT_MERGE_FACTOR``: encoder positions stacked into one token."""


def glmasr_tokens(frames: int) -> tuple[int, int]:
    """(encoder positions, tokens) of one window's ``frames`` valid mel frames: ``conv1``
    (kernel 3, padding 1, stride 1), ``conv2`` (stride 2), then the merge."""
    positions = (frames - 1) // 2 + 1
    return positions, (positions - _MERGE) // _MERGE + 1


def _per_position(config: Mapping[str, Any], tp: int) -> int:
    """Model-dtype elements per encoder position at the peak (module notes)."""
    audio = section_of(config, "audio_config")
    h, inner = int_key(audio, "hidden_size"), int_key(audio, "intermediate_size")
    heads = int_key(audio, "num_attention_heads")
    kv = max(1, int_key(audio, "num_key_value_heads", heads) // tp)
    head_dim, text = h // heads, text_hidden(config)
    qkv = (-(-heads // tp) + 2 * kv) * head_dim
    attn = 3 * h + qkv + -(-heads // tp) * head_dim
    split_inner = -(-inner // tp)
    mlp = max(2 * h + 2 * split_inner, 3 * h + split_inner)
    wide = -(-2 * text // tp)
    tail = h + max(2 * wide, wide + text, 3 * text) // _MERGE
    return max(4 * h, attn, mlp, 2 * h, tail) + 2 * int_key(audio, "num_mel_bins")


def glmasr_item(config: Mapping[str, Any], mm: Multimodal,
                context: ItemContext) -> Item | None:  # fmt: skip
    """GLM-ASR's largest dummy audio (``None``: no audio allowed); see the module notes."""
    if mm.count("audio") <= 0:
        return None
    max_len = float(mm.mm_processor_kwargs.get("max_audio_len", GLMASR_MAX_AUDIO_LEN))
    frames = window_frames(mm, max_len)
    tokens = sum(max(0, glmasr_tokens(f)[1]) for f in frames)
    full = WHISPER_FEATURES["chunk_length"] * WHISPER_FEATURES["sampling_rate"]
    positions = len(frames) * glmasr_tokens(full // WHISPER_FEATURES["hop_length"])[0]
    values = 2 * int_key(section_of(config, "audio_config"), "num_mel_bins")
    per = _per_position(config, context.tensor_parallel_size) * context.dtype_bytes
    return Item("audio", max(1, tokens), positions, per, values, text_hidden(config))


FAMILY = EncoderFamily(
    model_types=frozenset({"glmasr"}),
    modules={"glmasr": "GLM-ASR (rotary Whisper-style encoder, 30 s windows)"},
    processor_keys=("max_audio_len",),
    item=glmasr_item,
    towers={"glmasr": ("the GLM-ASR encoder and the two-layer projector",
                       "towers/whisper.py")},
    checked=frozenset({"glmasr"}),
)
"""GLM-ASR's encoder pass and tower (:mod:`memacct.model.towers.whisper`)."""
