"""Layouts of the text models that multimodal model files of vLLM 0.33 build of their own.

Intern-S2-Mobius (``vllm/model_executor/models/interns2_mobius.py``,
``InternS2MobiusDecoderLayer.__init__``) builds a Qwen3.5 gated delta net
(``QwenGatedDeltaNetAttention``) where ``layer_types[i]`` is ``linear_attention`` and
Qwen3-Next's attention (``Qwen3NextAttention``) where it is ``full_attention``, and raises
on any other kind; it reads the list by position, whatever the text config's model type
(a remote-code class), so this layout does not go through the model-type table of
:mod:`memacct.model.layouts`. The states are sized by ``states._gdn`` (vLLM's
``mamba_utils.gated_delta_net_state_shape``).

Whisper (``whisper.py``, ``WhisperDecoderLayer.__init__``; Nemotron-Parse's MBart decoder,
``nemotron_parse.py`` ``BartDecoderLayer``, builds the same Whisper modules; Cohere's ASR
decoder, ``cohere_asr.py`` ``CohereASRDecoderLayer``, its own of the same shape) is an
encoder-decoder: each of
``decoder_layers`` decoder layers holds its self attention (``Attention``, a
``FullAttentionSpec``) and its cross attention over the encoder's output
(``CrossAttention``, a ``CrossAttentionSpec``, ``vllm/model_executor/layers/attention/
cross_attention.py``); the encoder's layers keep no cache (``MMEncoderAttention``). The
cross layer is sized here by ``max_source_positions`` (the encoder's frames); vLLM 0.33's
manager holds ``max_num_encoder_input_tokens`` of it per request, which the engine applies
(:func:`memacct.engines.vllm.kv.layer_pages`).
"""

from __future__ import annotations

from collections.abc import Callable

from memacct.errors import ConfigError
from memacct.model.config import MAX_POSITIONS, ModelConfig

__all__ = ["MM_LAYOUTS"]

Kind = tuple[str, int | None]

_MOBIUS_KINDS: dict[str, Kind] = {"linear_attention": ("gdn", None),
                                  "full_attention": ("full", None)}


def _mobius(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Intern-S2-Mobius: a gated delta net or full attention per ``layer_types[i]``."""
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != n:
        raise ConfigError(
            f"{cfg.source}: layer_types must list one type per layer ({n}): "
            f"interns2_mobius.py builds each layer from it; fix layer_types"
        )
    bad = sorted({str(t) for t in types} - set(_MOBIUS_KINDS))
    if bad:
        raise ConfigError(
            f"{cfg.source}: layer_types lists {', '.join(bad)}, which interns2_mobius.py "
            f"refuses (it builds linear_attention and full_attention only): fix layer_types"
        )
    return [[_MOBIUS_KINDS[str(t)]] for t in types]


def _encoder_decoder(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Self attention and cross attention over the encoder's ``max_source_positions``
    frames (Whisper); a config that states no encoder length (an image or Conformer
    encoder) gets 0 there, the engine's budget being what vLLM holds."""
    frames = cfg.integer(("max_source_positions",), MAX_POSITIONS)
    if frames is None:
        cfg.notes.append(
            f"{cfg.source} states no encoder length: the cross attention holds what the "
            f"engine's scheduler lets the encoder emit (vLLM: max_num_batched_tokens)")
    return [[("full", None), ("cross", frames or 0)] for _ in range(n)]


MM_LAYOUTS: dict[str, Callable[[ModelConfig, int], list[list[Kind]]]] = {
    "mobius": _mobius,
    "encoder_decoder": _encoder_decoder,
}
"""Layout name -> the layout (merged into :data:`memacct.model.layouts.LAYOUTS`)."""
