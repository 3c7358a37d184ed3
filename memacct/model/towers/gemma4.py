"""Gemma 4's vision and audio towers and its encoder-free Unified variant, tensor by tensor.

vLLM 0.33 (``vllm/model_executor/models/gemma4_mm.py``, ``Gemma4ForConditionalGeneration.__init__``)
builds transformers' own towers (``AutoModel.from_config``, transformers 5.16-5.20
``models/gemma4/modeling_gemma4.py``) and swaps every ``nn.Linear`` for a
``ReplicatedLinear`` (``recursive_replace_linear`` with "replicate",
``models/transformers/utils.py``): no tensor of either tower is split by tensor parallelism.

* **Vision** (``Gemma4VisionModel``): ``patch_embedder.input_proj`` (bias-free, ``3 x
  patch_size^2`` inputs) and the ``(2, position_embedding_size, hidden)`` position table;
  per layer ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` (``Gemma4ClippableLinear``:
  one bias-free ``linear``), ``q_norm`` and ``k_norm`` of ``head_dim`` (``v_norm`` has no
  weight), four RMSNorms of the width and the gated MLP (``gate_proj``, ``up_proj``,
  ``down_proj``); ``std_bias`` / ``std_scale`` where ``standardize``. The pooler has no
  weights. ``embed_vision`` (``Gemma4MultimodalEmbedder``): a bias-free projection from
  the width to the text width (its norm has no weight).
* **Audio** (``Gemma4AudioModel``, where the config has ``audio_config``): two bias-free 3 x 3
  subsampling convolutions with bias-free LayerNorms, ``input_proj_linear`` from
  ``subsampling_conv_channels[0] // 4 x [1]``; per conformer layer two feed-forwards (4 x
  width, two RMSNorms each), the attention (``q``/``k``/``v``/``post``,
  ``relative_k_proj``, ``per_dim_scale`` of head_dim), the light convolution
  (``linear_start`` 2 x width, a depthwise conv of ``conv_kernel_size``, ``linear_end``,
  two RMSNorms) and three RMSNorms; ``output_proj`` (biased) to ``output_proj_dims``;
  ``embed_audio`` projects ``output_proj_dims`` to the text width.
* **Unified** (``gemma4_unified.py``, ``Gemma4UnifiedVisionEmbedder``): no tower;
  ``patch_ln1`` over ``(patch_size x pooling_kernel_size)^2 x 3`` raw values, the biased
  ``patch_dense`` (``ColumnParallelLinear``: split) to ``mm_embed_dim``, ``patch_ln2``,
  the ``(mm_posemb_size, 2, mm_embed_dim)`` table and ``pos_norm`` (LayerNorms with
  biases); ``embed_vision`` from ``output_proj_dims`` and ``embed_audio`` from
  ``audio_embed_dim`` to the text width.

The clippable linears' four scalar buffers (``use_clipped_linears``) are not listed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers.parts import (
    Out,
    TowerTensor,
    int_key,
    linear,
    norm,
    section_of,
    text_hidden,
)

__all__ = ["RULES", "TYPES"]


def _vision(out: Out, v: Mapping[str, Any], th: int) -> None:
    h, inner = int_key(v, "hidden_size", 768), int_key(v, "intermediate_size", 3072)
    heads = int_key(v, "num_attention_heads", 12)
    kv = int_key(v, "num_key_value_heads", heads)
    hd = int_key(v, "head_dim", h // heads)
    patch = int_key(v, "patch_size", 16)
    e = "vision_tower.patch_embedder"
    linear(out, f"{e}.input_proj", h, 3 * patch * patch, False, split="none")
    table = (2, int_key(v, "position_embedding_size", 10240), h)
    out.append(TowerTensor(f"{e}.position_embedding_table", table, False))
    for i in range(int_key(v, "num_hidden_layers", 16)):
        p = f"vision_tower.encoder.layers.{i}"
        for name, rows, cols in (("q_proj", heads * hd, h), ("k_proj", kv * hd, h),
                                 ("v_proj", kv * hd, h), ("o_proj", h, heads * hd)):
            linear(out, f"{p}.self_attn.{name}.linear", rows, cols, False, split="none")
        norm(out, f"{p}.self_attn.q_norm", hd, bias=False)
        norm(out, f"{p}.self_attn.k_norm", hd, bias=False)
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            norm(out, f"{p}.{name}", h, bias=False)
        linear(out, f"{p}.mlp.gate_proj.linear", inner, h, False, split="none")
        linear(out, f"{p}.mlp.up_proj.linear", inner, h, False, split="none")
        linear(out, f"{p}.mlp.down_proj.linear", h, inner, False, split="none")
    if v.get("standardize") is True:
        out.append(TowerTensor("vision_tower.std_bias", (h,), False))
        out.append(TowerTensor("vision_tower.std_scale", (h,), False))
    linear(out, "embed_vision.embedding_projection", th, h, False, split="none")


def _audio_layer(out: Out, p: str, h: int, heads: int, kernel: int) -> None:
    for ff in ("feed_forward1", "feed_forward2"):
        linear(out, f"{p}.{ff}.ffw_layer_1.linear", 4 * h, h, False, split="none")
        linear(out, f"{p}.{ff}.ffw_layer_2.linear", h, 4 * h, False, split="none")
        norm(out, f"{p}.{ff}.pre_layer_norm", h, bias=False)
        norm(out, f"{p}.{ff}.post_layer_norm", h, bias=False)
    hd = h // heads
    for name in ("q_proj", "k_proj", "v_proj"):
        linear(out, f"{p}.self_attn.{name}.linear", heads * hd, h, False, split="none")
    linear(out, f"{p}.self_attn.post.linear", h, h, False, split="none")
    linear(out, f"{p}.self_attn.relative_k_proj", heads * hd, h, False, split="none")
    out.append(TowerTensor(f"{p}.self_attn.per_dim_scale", (hd,), False))
    c = f"{p}.lconv1d"
    linear(out, f"{c}.linear_start.linear", 2 * h, h, False, split="none")
    linear(out, f"{c}.linear_end.linear", h, h, False, split="none")
    out.append(TowerTensor(f"{c}.depthwise_conv1d.weight", (h, 1, kernel), False))
    norm(out, f"{c}.pre_layer_norm", h, bias=False)
    norm(out, f"{c}.conv_norm", h, bias=False)
    for name in ("norm_pre_attn", "norm_post_attn", "norm_out"):
        norm(out, f"{p}.{name}", h, bias=False)


def _audio(out: Out, a: Mapping[str, Any], th: int) -> None:
    h, heads = int_key(a, "hidden_size", 1024), int_key(a, "num_attention_heads", 8)
    channels = a.get("subsampling_conv_channels", (128, 32))
    c0, c1 = (int(c) for c in channels) if isinstance(channels, (list, tuple)) else (128, 32)
    s = "audio_tower.subsample_conv_projection"
    out.append(TowerTensor(f"{s}.layer0.conv.weight", (c0, 1, 3, 3), False))
    norm(out, f"{s}.layer0.norm", c0, bias=False)
    out.append(TowerTensor(f"{s}.layer1.conv.weight", (c1, c0, 3, 3), False))
    norm(out, f"{s}.layer1.norm", c1, bias=False)
    linear(out, f"{s}.input_proj_linear", h, (c0 // 4) * c1, False, split="none")
    kernel = int_key(a, "conv_kernel_size", 5)
    for i in range(int_key(a, "num_hidden_layers", 12)):
        _audio_layer(out, f"audio_tower.layers.{i}", h, heads, kernel)
    width = int_key(a, "output_proj_dims", 1536)
    linear(out, "audio_tower.output_proj", width, h, split="none")
    linear(out, "embed_audio.embedding_projection", th, width, False, split="none")


def _gemma4(config: Mapping[str, Any]) -> Out:
    out: Out = []
    th = text_hidden(config)
    _vision(out, section_of(config, "vision_config"), th)
    audio = config.get("audio_config")
    if isinstance(audio, Mapping):
        _audio(out, audio, th)
    return out


def _unified(config: Mapping[str, Any]) -> Out:
    v = section_of(config, "vision_config")
    th = text_hidden(config)
    side = int_key(v, "patch_size", 16) * int_key(v, "pooling_kernel_size", 3)
    raw, dim = side * side * 3, int_key(v, "mm_embed_dim", 3840)
    e = "vision_embedder"
    out: Out = []
    norm(out, f"{e}.patch_ln1", raw)
    linear(out, f"{e}.patch_dense", dim, raw)
    norm(out, f"{e}.patch_ln2", dim)
    out.append(TowerTensor(f"{e}.pos_embedding", (int_key(v, "mm_posemb_size", 1120), 2, dim),
                           False))  # fmt: skip
    norm(out, f"{e}.pos_norm", dim)
    linear(out, "embed_vision.embedding_projection", th, int_key(v, "output_proj_dims", dim),
           False, split="none")  # fmt: skip
    audio = config.get("audio_config")
    if isinstance(audio, Mapping):
        linear(out, "embed_audio.embedding_projection", th,
               int_key(audio, "audio_embed_dim", 640), False, split="none")  # fmt: skip
    return out


TYPES: dict[str, str] = {"gemma4": "gemma4", "gemma4_unified": "gemma4_unified"}
"""Top-level ``model_type`` -> the tower kind this module builds."""

RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    "gemma4": _gemma4, "gemma4_unified": _unified,
}
"""Tower kind -> the rule that lists its tensors."""
