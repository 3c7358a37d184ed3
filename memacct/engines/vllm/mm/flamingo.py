"""The encoder pass of Audio Flamingo 3 (vLLM 0.33 ``audioflamingo3.py``).

It runs the same encoder (``AudioFlamingo3Encoder``
subclasses ``Qwen2AudioEncoder``) over 30-second windows:

* no ``get_mm_max_tokens_per_item``: the budget processes the dummy item
  (``encoder_budget.get_mm_max_toks_per_item``), ``max_audio_len`` seconds of silence
  (``AudioFlamingo3DummyInputsBuilder.get_dummy_mm_data``; 600 by the processor's default,
  ``--mm-processor-kwargs max_audio_len`` overrides it, the size form's ``length`` shortens
  it); ``AudioFlamingo3Processor._process_audio`` cuts it into ``ceil(samples / 480,000)``
  windows (at most ``max_audio_len // 30``), each padded to 3,000 frames, and the item's
  tokens are the pooled length of all its valid frames together (``_get_audio_token_length``;
  vLLM's ``_count_audio_tokens_from_mask``): 20 windows, 30,000 encoder positions, 15,000
  tokens;
* the tail (``AudioFlamingo3MultiModalProjector``, ``_group_audio_embeddings``): the normed
  output (h / 2) with three text-width tensors per pooled token (the projector's output,
  its masked copy and the windows' ``torch.cat``; ``linear_1`` and its activation before);
* ``get_supported_mm_limits`` allows one audio per prompt.

The encoder's working set per position is the Whisper-style layer's (:mod:`.audio`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.audio import (
    WHISPER_FEATURES,
    conv_output_length,
    per_position,
    window_frames,
)
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item
from memacct.model.towers.parts import text_hidden

__all__ = ["FAMILY", "FLAMINGO_MAX_AUDIO_LEN", "flamingo_item"]

FLAMINGO_MAX_AUDIO_LEN = 600
"""``AudioFlamingo3Processor``'s ``max_audio_len`` default, in seconds."""


def flamingo_item(config: Mapping[str, Any], mm: Multimodal,
                  context: ItemContext) -> Item | None:  # fmt: skip
    """Audio Flamingo 3's largest dummy audio (``None``: no audio allowed): its 30-second
    windows through the encoder; see the module notes."""
    if mm.count("audio") <= 0:
        return None
    max_len = float(mm.mm_processor_kwargs.get("max_audio_len", FLAMINGO_MAX_AUDIO_LEN))
    frames = window_frames(mm, max_len)
    tokens = conv_output_length(sum(frames))[1]
    chunk = WHISPER_FEATURES["chunk_length"] * WHISPER_FEATURES["sampling_rate"]
    positions = len(frames) * conv_output_length(chunk // WHISPER_FEATURES["hop_length"])[0]
    per, values = per_position(config, context, 3)
    return Item("audio", max(1, tokens), positions, per, values, text_hidden(config))


FAMILY = EncoderFamily(
    model_types=frozenset({"audioflamingo3"}),
    modules={"audioflamingo3": "Audio Flamingo 3 (Whisper-style encoder, 30 s windows)"},
    processor_keys=("max_audio_len",),
    item=flamingo_item,
    towers={"audioflamingo3": ("the Whisper-style encoder and the two-layer projector",
                               "towers/whisper.py")},
    checked=frozenset({"audioflamingo3"}),
)
"""Audio Flamingo 3's encoder pass and tower (:mod:`memacct.model.towers.whisper`)."""
