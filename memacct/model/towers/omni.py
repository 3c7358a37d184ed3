"""Qwen2.5-Omni's thinker towers (vLLM 0.33 ``qwen2_5_omni_thinker.py``,
``Qwen2_5OmniThinkerForConditionalGeneration``), read from ``thinker_config`` (or the top
level of a thinker-only config):

* **vision** (``visual``: ``qwen2_5_vl.py``'s ``Qwen2_5_VisionTransformer``): the Conv3d
  patch embedding (channels x ``temporal_patch_size`` x patch^2, no bias); per block two
  RMSNorms, ``attn.qkv`` (column-parallel) and ``attn.proj`` (row-parallel) with biases,
  the gated ``mlp.gate_up_proj`` (2 x ``intermediate_size``, column) and ``mlp.down_proj``
  (row) with biases; the merger's ``ln_q`` RMSNorm and two biased linears over
  ``spatial_merge_size^2 x hidden_size``, out to ``out_hidden_size``;
* **audio** (``audio_tower``: transformers' ``Qwen2_5OmniAudioEncoder``, ``nn`` layers
  whole on every rank): the Whisper-style ``conv1`` / ``conv2`` and layers (``k_proj``
  without bias), ``ln_post``, ``proj`` (``d_model`` to ``output_dim``) and the two-row
  ``audio_bos_eos_token`` embedding; its sinusoidal positions are a buffer, no parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers.parts import Out, TowerTensor, int_key, linear, norm, section_of
from memacct.model.towers.qwen import qwen25_vision

__all__ = ["RULES", "TYPES", "thinker_section"]


def thinker_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The thinker's config: ``thinker_config`` where the checkpoint nests it."""
    thinker = config.get("thinker_config")
    return thinker if isinstance(thinker, Mapping) else config


def omni_audio(out: Out, audio: Mapping[str, Any], prefix: str = "audio_tower") -> None:
    """Qwen2.5-Omni's audio encoder, tensor by tensor (module notes)."""
    h, inner = int_key(audio, "d_model"), int_key(audio, "encoder_ffn_dim")
    out.append(TowerTensor(f"{prefix}.conv1.weight", (h, int_key(audio, "num_mel_bins"), 3),
                           False))  # fmt: skip
    out.append(TowerTensor(f"{prefix}.conv1.bias", (h,), False))
    out.append(TowerTensor(f"{prefix}.conv2.weight", (h, h, 3), False))
    out.append(TowerTensor(f"{prefix}.conv2.bias", (h,), False))
    for i in range(int_key(audio, "encoder_layers")):
        p = f"{prefix}.layers.{i}"
        norm(out, f"{p}.self_attn_layer_norm", h)
        linear(out, f"{p}.self_attn.q_proj", h, h, split="none")
        linear(out, f"{p}.self_attn.k_proj", h, h, False, split="none")
        linear(out, f"{p}.self_attn.v_proj", h, h, split="none")
        linear(out, f"{p}.self_attn.out_proj", h, h, split="none")
        norm(out, f"{p}.final_layer_norm", h)
        linear(out, f"{p}.fc1", inner, h, split="none")
        linear(out, f"{p}.fc2", h, inner, split="none")
    norm(out, f"{prefix}.ln_post", h)
    dim = int_key(audio, "output_dim")
    linear(out, f"{prefix}.proj", dim, h, split="none")
    out.append(TowerTensor(f"{prefix}.audio_bos_eos_token.weight", (2, dim), False))


def _qwen25_omni(config: Mapping[str, Any]) -> Out:
    thinker = thinker_section(config)
    out: Out = []
    omni_audio(out, section_of(thinker, "audio_config"))
    qwen25_vision(out, section_of(thinker, "vision_config"))
    return out


TYPES: dict[str, str] = {
    "qwen2_5_omni": "qwen2_5_omni",
    "qwen2_5_omni_thinker": "qwen2_5_omni",
}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "qwen2_5_omni": _qwen25_omni,
}
"""Tower kind -> the rule that lists its tensors."""
