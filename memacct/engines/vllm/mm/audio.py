"""The encoder pass of Whisper-style audio encoders, as vLLM 0.33 profiles them.

**Qwen2-Audio** (``vllm/model_executor/models/qwen2_audio.py``):

* tokens per item (``Qwen2AudioProcessingInfo.get_mm_max_tokens_per_item``): the feature
  extractor's ``min(chunk_length, 30)`` seconds at ``sampling_rate`` make ``audio_len //
  hop_length`` mel frames, 3,000 for the published ``WhisperFeatureExtractor``
  (``preprocessor_config.json`` of Qwen/Qwen2-Audio-7B-Instruct: ``chunk_length`` 30,
  ``sampling_rate`` 16,000, ``hop_length`` 160, ``feature_size`` 128); the two convolutions
  halve them to 1,500 encoder positions and the average pooler halves those again
  (``_get_feat_extract_output_lengths``: ``(n - 1) // 2 + 1``, then ``(m - 2) // 2 + 1``):
  750 tokens;
* the dummy item (``Qwen2AudioDummyInputsBuilder.get_dummy_mm_data``): ``chunk_length x
  sampling_rate`` samples of silence, shortened by the size form's ``length``
  (``_get_dummy_audios``); the processor pads every clip to the full 3,000 frames
  (``Qwen2AudioProcessor``, ``padding="max_length"``), so the encoder always runs 1,500
  positions, while the encoder cache holds the tokens of the clip's own length (the
  ``feature_attention_mask`` frames, ``_process_audio_input``);
* the input features are ``num_mel_bins x 3000`` values per item (two mel frames per
  encoder position), cast to the model dtype.

The encoder is transformers' ``Qwen2AudioEncoder`` (``nn.Linear`` layers, whole on every
rank; SDPA attention, the memory-efficient kernel under the padding mask, linear in the
positions). Its working set per encoder position, in model-dtype elements of the width
``d_model`` (h) and ``encoder_ffn_dim`` (i), as transformers 5's ``modeling_qwen2_audio.py``
allocates it (the layer input is the residual):

* the convolutions (``Qwen2AudioEncoder.forward``): ``conv1``'s output over two frames and
  its GELU (4h), then the GELU of ``conv1`` with ``conv2``'s output and its GELU (4h);
* the attention (``Qwen2AudioAttention.forward``, ``sdpa_attention_forward``): the residual,
  ``self_attn_layer_norm``, the contiguous q, k and v, the attention output and its
  contiguous transpose, or ``out_proj``'s output (7h);
* the MLP (``Qwen2AudioEncoderLayer.forward``): the residual, ``final_layer_norm``,
  ``fc1``'s output and its GELU (2h + 2i);
* the tail: the pooled and normed output (h / 2 per position) with the projector's output
  and its masked copy (2 x text hidden / 2 per position).

The peak is the largest of these plus the input features (2 x ``num_mel_bins``). The
transformers encoders are read off transformers 5 (vLLM 0.33 requires 5.16.1 to 5.20); a
release that ran transformers 4 is planned with the same working set, not re-read.

Audio Flamingo 3 runs the same encoder over 30-second windows (:mod:`.flamingo`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item
from memacct.model.towers.parts import section_of, text_hidden
from memacct.model.towers.whisper import whisper_sizes

__all__ = ["FAMILY", "WHISPER_FEATURES", "conv_output_length", "mel_frames",
           "per_position", "qwen2_audio_item", "whisper_layer_elements", "window_frames"]

WHISPER_FEATURES = {"chunk_length": 30, "sampling_rate": 16000, "hop_length": 160}
"""The published ``WhisperFeatureExtractor`` settings of the Whisper-style checkpoints
(Qwen/Qwen2-Audio-7B-Instruct's ``preprocessor_config.json``; transformers' defaults)."""


def conv_output_length(frames: int) -> tuple[int, int]:
    """(encoder positions, pooled tokens) of ``frames`` mel frames: the stride-2 ``conv2``
    and the stride-2 average pooler (``qwen2_audio.py``, ``_get_feat_extract_output_lengths``)."""
    positions = (frames - 1) // 2 + 1
    return positions, (positions - 2) // 2 + 1


def whisper_layer_elements(width: int, inner: int, out_width: int, tail: int = 2) -> int:
    """Model-dtype elements per encoder position at the encoder's peak (module notes): the
    convolutions (4h), the attention (7h), the MLP (2h + 2i) and the tail (h / 2 and
    ``tail`` text-width tensors per pooled token, a pooled token every two positions)."""
    return max(4 * width, 7 * width, 2 * width + 2 * inner, (width + tail * out_width) // 2)


def mel_frames(samples: int) -> int:
    """Valid mel frames of a clip: the feature extractor's mask, one frame per hop."""
    return -(-samples // WHISPER_FEATURES["hop_length"])


def window_frames(mm: Multimodal, max_len: float) -> list[int]:
    """The valid mel frames of each 30 s window of the largest dummy clip of a windowing
    processor (``AudioFlamingo3Processor._process_audio``, ``GlmAsrProcessor._process_audio``):
    ``max_len`` seconds of silence, shortened by the size form's ``length``, cut into
    ``ceil(samples / window)`` windows, at most ``max_len // chunk_length``; each window is
    padded to the full chunk, its mask counts one frame per hop of its own samples."""
    rate, chunk = WHISPER_FEATURES["sampling_rate"], WHISPER_FEATURES["chunk_length"]
    samples = int(max_len * rate)
    length = mm.size("audio").get("length")
    samples = min(samples, length) if length else samples
    window = rate * chunk
    windows = min(max(1, -(-samples // window)), max(1, int(max_len // chunk)))
    kept = min(samples, windows * window)
    return [mel_frames(min(window, kept - i * window)) for i in range(windows)]


def per_position(config: Mapping[str, Any], context: ItemContext, tail: int) -> tuple[int, int]:
    """(bytes per encoder position at the peak, input-feature values per position)."""
    sizes = whisper_sizes(section_of(config, "audio_config"))
    values = 2 * sizes["num_mel_bins"]  # two mel frames per position (conv2's stride)
    widest = whisper_layer_elements(sizes["d_model"], sizes["encoder_ffn_dim"],
                                    text_hidden(config), tail)  # fmt: skip
    return (widest + values) * context.dtype_bytes, values


def qwen2_audio_item(config: Mapping[str, Any], mm: Multimodal,
                     context: ItemContext) -> Item | None:  # fmt: skip
    """Qwen2-Audio's largest dummy audio (``None``: no audio allowed); see the module notes."""
    if mm.count("audio") <= 0:
        return None
    samples = min(WHISPER_FEATURES["chunk_length"], 30) * WHISPER_FEATURES["sampling_rate"]
    positions, tokens = conv_output_length(samples // WHISPER_FEATURES["hop_length"])
    length = mm.size("audio").get("length")
    _, held = conv_output_length(mel_frames(min(samples, length) if length else samples))
    per, values = per_position(config, context, 2)
    return Item("audio", tokens, positions, per, values, text_hidden(config), max(1, held))


FAMILY = EncoderFamily(
    model_types=frozenset({"qwen2_audio"}),
    modules={"qwen2_audio": "Qwen2-Audio (Whisper-style encoder)"},
    processor_keys=(),
    item=qwen2_audio_item,
    towers={"qwen2_audio": ("the Whisper-style encoder and the linear projector",
                            "towers/whisper.py")},
    checked=frozenset({"qwen2_audio"}),
)
"""Qwen2-Audio's encoder pass and tower (:mod:`memacct.model.towers.whisper`)."""
