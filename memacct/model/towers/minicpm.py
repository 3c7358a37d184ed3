"""MiniCPM-V's and MiniCPM-o's vision tower and resampler (and MiniCPM-o's audio tower),
tensor by tensor, as vLLM 0.33 builds them (``vllm/model_executor/models/minicpmv.py``:
``MiniCPMV2_5``, ``MiniCPMV2_6``, ``MiniCPMV4_0``, each ``init_vision_module`` and
``init_resampler``):

* **the tower** (``idefics2_vision_model.py``, ``Idefics2VisionTransformer`` over the config's
  SigLIP ``vision_config``): a biased patch convolution, ``(image_size / patch_size)^2``
  position embeddings; per layer ``layer_norm1``, ``qkv_proj`` and ``out_proj`` with biases,
  ``layer_norm2``, ``fc1`` / ``fc2`` with biases (column- and row-parallel: split across
  tensor-parallel ranks); ``post_layernorm``. ``drop_vision_last_layer`` drops the last
  layer.
* **the resampler** (``Resampler2_5``, ``vllm/model_executor/layers/resampler.py``
  ``BaseResampler``): ``query_num`` learned queries of the text width ``hidden_size``,
  ``kv_proj`` (bias-free, replicated) from the tower width where the two differ, an
  ``nn.MultiheadAttention`` of the text width (packed ``in_proj`` and ``out_proj``, biased),
  ``ln_q``, ``ln_kv``, ``ln_post`` and the square ``proj``; kept whole on every rank. Its
  2-D sin-cos table is a buffer rebuilt at start-up, not a weight.

The version is the config's ``version`` (``get_version_by_config``: none means 2.5 unless
``hidden_size`` 2304 with 64 queries, 2.0); 4.5 builds the same tensors (``MiniCPMV4_5``,
``Resampler4_5``); 2.0 (a timm tower) has no rule here (no tensor is listed); MiniCPM-o 2.6
and 4.5 add the audio tower (:func:`_minicpmo`). The resamplers' sin-cos tables
(``pos_embed``, 4.5's ``temporal_pos_embed``) are buffers, cast to the model dtype with the
resampler, and not listed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers.parts import Out, TowerTensor, int_key, linear, norm, section_of

__all__ = ["RULES", "TOWER_VERSIONS", "TYPES", "version_of"]

OMNI_VERSIONS = frozenset({(2, 6), (4, 5)})
"""MiniCPM-o's versions (``minicpmo.py``, ``_MINICPMO_SUPPORT_VERSION``): 2.6's vision part is
MiniCPM-V 2.6's, 4.5's MiniCPM-V 4.5's."""

TOWER_VERSIONS = frozenset({(2, 5), (2, 6), (4, 0), (4, 5)})
"""The MiniCPM-V versions whose tower (Idefics2 and ``Resampler2_5``, or ``Resampler4_5``:
the same weights and a temporal sin-cos buffer) is built here; any other lists no tensor."""


def version_of(config: Mapping[str, Any]) -> tuple[int, ...]:
    """``get_version_by_config``: the config's ``version`` as a tuple of integers (MiniCPM-o
    without one is 2.6, ``MiniCPMO.__new__``)."""
    value = config.get("version")
    if value is None and config.get("model_type") == "minicpmo":
        return (2, 6)
    if value is None:
        return (2, 0) if config.get("hidden_size") == 2304 and config.get(
            "query_num") == 64 else (2, 5)  # fmt: skip
    try:
        return tuple(int(x) for x in str(value).split("."))
    except ValueError:
        return ()


def _tower(out: Out, config: Mapping[str, Any], v: Mapping[str, Any]) -> int:
    h, inner = int_key(v, "hidden_size", 1152), int_key(v, "intermediate_size", 4304)
    patch, channels = int_key(v, "patch_size", 14), int_key(v, "num_channels", 3)
    side = int_key(v, "image_size", 980) // patch
    e = "vpm.embeddings"
    out.append(TowerTensor(f"{e}.patch_embedding.weight", (h, channels, patch, patch), False))
    out.append(TowerTensor(f"{e}.patch_embedding.bias", (h,), False))
    out.append(TowerTensor(f"{e}.position_embedding.weight", (side * side, h), False))
    layers = int_key(v, "num_hidden_layers", 27) - (config.get("drop_vision_last_layer") is True)
    for i in range(layers):
        p = f"vpm.encoder.layers.{i}"
        norm(out, f"{p}.layer_norm1", h)
        linear(out, f"{p}.self_attn.qkv_proj", 3 * h, h)
        linear(out, f"{p}.self_attn.out_proj", h, h, split="row")
        norm(out, f"{p}.layer_norm2", h)
        linear(out, f"{p}.mlp.fc1", inner, h)
        linear(out, f"{p}.mlp.fc2", h, inner, split="row")
    norm(out, "vpm.post_layernorm", h)
    return h


def _minicpmv(config: Mapping[str, Any]) -> Out:
    out: Out = []
    if version_of(config)[:2] not in TOWER_VERSIONS:
        return out
    vision = _tower(out, config, section_of(config, "vision_config"))
    dim, queries = int_key(config, "hidden_size"), int_key(config, "query_num", 64)
    r = "resampler"
    out.append(TowerTensor(f"{r}.query", (queries, dim), False))
    if vision != dim:
        linear(out, f"{r}.kv_proj", dim, vision, False, split="none")
    out.append(TowerTensor(f"{r}.attn.in_proj_weight", (3 * dim, dim), False))
    out.append(TowerTensor(f"{r}.attn.in_proj_bias", (3 * dim,), False))
    linear(out, f"{r}.attn.out_proj", dim, dim, split="none")
    for name in ("ln_q", "ln_kv", "ln_post"):
        norm(out, f"{r}.{name}", dim)
    out.append(TowerTensor(f"{r}.proj", (dim, dim), False))
    return out


def _apm(out: Out, a: Mapping[str, Any], dim: int) -> None:
    """MiniCPM-o's audio tower (``MiniCPMWhisperEncoder``: transformers' ``WhisperEncoder``
    with its own layers, the same tensors) and ``audio_projection_layer``."""
    h, inner = int_key(a, "d_model", 1024), int_key(a, "encoder_ffn_dim", 4096)
    out.append(TowerTensor("apm.conv1.weight", (h, int_key(a, "num_mel_bins", 80), 3), False))
    out.append(TowerTensor("apm.conv1.bias", (h,), False))
    out.append(TowerTensor("apm.conv2.weight", (h, h, 3), False))
    out.append(TowerTensor("apm.conv2.bias", (h,), False))
    positions = int_key(a, "max_source_positions", 1500)
    out.append(TowerTensor("apm.embed_positions.weight", (positions, h), False))
    for i in range(int_key(a, "encoder_layers", 24)):
        p = f"apm.layers.{i}"
        norm(out, f"{p}.self_attn_layer_norm", h)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(out, f"{p}.self_attn.{name}", h, h, name != "k_proj", split="none")
        norm(out, f"{p}.final_layer_norm", h)
        linear(out, f"{p}.fc1", inner, h, split="none")
        linear(out, f"{p}.fc2", h, inner, split="none")
    norm(out, "apm.layer_norm", h)
    linear(out, "audio_projection_layer.linear1", dim, inner // 4, split="none")
    linear(out, "audio_projection_layer.linear2", dim, dim, split="none")


def _minicpmo(config: Mapping[str, Any]) -> Out:
    """MiniCPM-o (``minicpmo.py``, ``MiniCPMOBaseModel.init_audio_module``): the MiniCPM-V
    tower of its version, the Whisper encoder ``apm`` and ``audio_projection_layer``
    (``encoder_ffn_dim // 4`` to the text width, then square; the average pooling has no
    weights); the TTS head is not loaded (``hf_to_vllm_mapper``)."""
    if version_of(config)[:2] not in OMNI_VERSIONS:
        return []
    out = _minicpmv(config)
    audio = config.get("audio_config")
    if isinstance(audio, Mapping):
        _apm(out, audio, int_key(config, "hidden_size"))
    return out


TYPES: dict[str, str] = {"minicpmv": "minicpmv", "minicpmo": "minicpmo"}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "minicpmv": _minicpmv, "minicpmo": _minicpmo,
}
"""Tower kind -> the rule that lists its tensors."""
