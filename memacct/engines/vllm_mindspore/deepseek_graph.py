"""The MindFormers DeepSeek-V3 inference graph as vllm-mindspore runs it, one TP rank.

The graph facts the offline plan of ``--engine vllm-mindspore`` charges; vllm-mindspore
runs DeepSeek-V3 only through MindFormers (``model_executor/models/registry.py``).

What vllm-mindspore (May 2025, ``mf_models/deepseek_v3.py``) builds on one tensor-parallel
rank from the model's ``config.json`` and the MindFormers config it runs with (sources and
per-op rules in ``docs/simulator.md``, section "The seed's cases"):

* :func:`deepseek_v3_load`: the parameters (persistent pool) after the PTQ ``ptq``
  conversion (W8A8: every MindFormers linear layer holds int8 weights except the
  ``lkv2kv`` projections and the LM head; norms, the embedding and the router stay in
  the compute dtype): the full (replicated) embedding, per layer the MLA projections
  ``q2l_proj``/``kv2l`` (replicated) and ``l2q_proj``/``lkv2kv_k_nope``/``lkv2kv_v``/``wo``
  (sharded by heads), then either the dense MLP (first ``first_k_dense_replace`` layers)
  or the MoE: router, all routed experts with their intermediate size sharded across
  the ranks (expert parallelism 1), the shared expert; the final norm, the LM head
  (vocabulary sharded), the rotary tables; then the attention masks (common pool).
* :func:`deepseek_v3_prefill_trace`: one prefill of ``num_tokens`` tokens of one
  sequence through ``DeepseekV3Attention`` (MLA, first iteration),
  ``DeepseekV3ParallelMLP`` or ``DeepseekV3MoE`` (``ParallelMoEV2``: router, fused top-k,
  ``MoeInitRoutingV2`` permutation to ``top_k x tokens`` rows, grouped expert MLP,
  ``MoeTokenUnpermute``; shared expert; reduce), each output a new buffer freed after
  its last use; then the final norm and vllm-mindspore's LM head on the last token.

The trace format is :mod:`memacct.engines.vllm_mindspore.qwen2_graph`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.engines.vllm_mindspore.qwen2_graph import config_positive_int, prefill_inputs
from memacct.errors import ConfigError
from memacct.trace import TraceBuilder

__all__ = ["DeepseekV3Graph", "deepseek_v3_load", "deepseek_v3_prefill_trace"]

_FLOAT32 = 4
_INT32 = 4
_INT64 = 8
_INT8 = 1
_FA_SOFTMAX_LANES = 8  # FlashAttentionScore's float32 softmax max/sum per head and token
_PREFILL_MASK = 128


@dataclass(frozen=True)
class DeepseekV3Graph:
    """The sizes one rank's MindFormers DeepSeek-V3 graph derives from.

    Attributes:
        layers: decoder layers.
        dense_layers: leading layers with a dense MLP (``first_k_dense_replace``).
        hidden: hidden size.
        heads: query heads on this rank.
        q_lora_rank: rank of the query latent.
        kv_lora_rank: rank of the KV latent.
        nope_dim: ``qk_nope_head_dim``.
        rope_dim: ``qk_rope_head_dim``.
        v_dim: ``v_head_dim``.
        intermediate: dense MLP hidden size on this rank.
        moe_intermediate: one routed expert's hidden size on this rank.
        shared_intermediate: the shared experts' hidden size on this rank.
        experts: routed experts (all on every rank: expert parallelism 1).
        top_k: experts per token.
        vocab: vocabulary.
        vocab_shard: the LM head's rows on this rank.
        dtype_bytes: bytes of the compute dtype.
        weight_bytes: bytes of a quantized linear weight element (1 for W8A8).
        max_position: rows of the rotary tables.
        mask_side: side of the decode mask (the MindFormers ``seq_length``).
    """

    layers: int
    dense_layers: int
    hidden: int
    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int
    intermediate: int
    moe_intermediate: int
    shared_intermediate: int
    experts: int
    top_k: int
    vocab: int
    vocab_shard: int
    dtype_bytes: int
    weight_bytes: int
    max_position: int
    mask_side: int

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        tensor_parallel_size: int = 16,
        weight_bytes: int = _INT8,
        mask_side: int = 4096,
    ) -> DeepseekV3Graph:
        """Read a DeepSeek-V3 ``config.json``.

        ``mask_side`` is the MindFormers config's ``seq_length`` (4096 in vllm-mindspore's
        ``predict_deepseek_r1_671b_w8a8.yaml``); ``weight_bytes`` 1 for W8A8, 2 for bf16.

        Raises:
            ConfigError: a key is missing or not a positive int, or a sharded size does
                not divide by ``tensor_parallel_size``.
        """

        def need(key: str) -> int:
            return config_positive_int(config, key, "DeepSeek-V3")

        tp = tensor_parallel_size
        heads = need("num_attention_heads")
        inter = need("intermediate_size")
        moe_inter = need("moe_intermediate_size")
        shared = moe_inter * int(config.get("n_shared_experts") or 0)
        vocab = need("vocab_size")
        for name, size in (("num_attention_heads", heads), ("intermediate_size", inter),
                           ("moe_intermediate_size", moe_inter), ("vocab_size", vocab)):
            if size % tp:
                raise ConfigError(
                    f"{name}={size} does not divide by tensor_parallel_size={tp}; "
                    "choose a tensor_parallel_size that divides it"
                )
        return cls(
            layers=need("num_hidden_layers"),
            dense_layers=int(config.get("first_k_dense_replace") or 0),
            hidden=need("hidden_size"),
            heads=heads // tp,
            q_lora_rank=need("q_lora_rank"),
            kv_lora_rank=need("kv_lora_rank"),
            nope_dim=need("qk_nope_head_dim"),
            rope_dim=need("qk_rope_head_dim"),
            v_dim=need("v_head_dim"),
            intermediate=inter // tp,
            moe_intermediate=moe_inter // tp,
            shared_intermediate=shared // tp,
            experts=need("n_routed_experts"),
            top_k=need("num_experts_per_tok"),
            vocab=vocab,
            vocab_shard=vocab // tp,
            dtype_bytes=2,
            weight_bytes=weight_bytes,
            max_position=max(need("max_position_embeddings"), mask_side),
            mask_side=mask_side,
        )

    @property
    def q_head_dim(self) -> int:
        """``qk_nope_head_dim + qk_rope_head_dim``."""
        return self.nope_dim + self.rope_dim

    @property
    def latent_dim(self) -> int:
        """The per-token latent the KV cache keeps: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.rope_dim


def deepseek_v3_load(graph: DeepseekV3Graph) -> tuple[list[int], list[int]]:
    """``(parameters, masks)``: bytes of one rank's persistent parameters and of the masks.

    The PTQ deploy-mode auxiliary parameters (per-channel dequantisation scales and
    offsets) are not listed: their layout lives in mindspore_gs, not read (bound in
    docs/simulator.md).
    """
    g = graph
    dt, wb, h = g.dtype_bytes, g.weight_bytes, g.hidden
    nh = g.heads
    params = [g.vocab * h * dt]  # tok_embeddings: VocabEmbedding, replicated (vocab_emb_dp off)
    for layer in range(g.layers):
        params += [h * dt]  # attention_norm
        params += [h * g.q_lora_rank * wb]  # q2l_proj (Linear, replicated)
        params += [h * g.latent_dim * wb]  # kv2l (Linear, replicated)
        params += [g.q_lora_rank * dt]  # lq_norm
        params += [g.q_lora_rank * nh * g.q_head_dim * wb]  # l2q_proj (column parallel)
        params += [g.kv_lora_rank * dt]  # lkv_norm
        params += [g.kv_lora_rank * nh * g.nope_dim * dt]  # lkv2kv_k_nope (not quantized)
        params += [g.kv_lora_rank * nh * g.v_dim * dt]  # lkv2kv_v (not quantized)
        params += [nh * g.v_dim * h * wb]  # wo (row parallel)
        params += [h * dt]  # ffn_norm
        if layer < g.dense_layers:
            params += [h * 2 * g.intermediate * wb, g.intermediate * h * wb]  # w_gate_hidden, w2
        else:
            params += [h * g.experts * dt, g.experts * _FLOAT32]  # router dense, score bias
            params += [g.experts * h * 2 * g.moe_intermediate * wb]  # routed w_gate_hidden
            params += [g.experts * g.moe_intermediate * h * wb]  # routed w2
            params += [h * 2 * g.shared_intermediate * wb, g.shared_intermediate * h * wb]
    params.append(h * dt)  # norm_out
    params.append(g.vocab_shard * h * dt)  # lm_head (column parallel, not quantized)
    params += [g.max_position * g.rope_dim * dt] * 2  # FreqsMgr cos/sin (rotary_dtype)
    params.append(g.rope_dim * g.rope_dim * dt)  # swap mask
    masks = [_PREFILL_MASK * _PREFILL_MASK * dt, g.mask_side * g.mask_side * dt, dt]
    return params, masks


def deepseek_v3_prefill_trace(graph: DeepseekV3Graph, num_tokens: int) -> list[int]:
    """One prefill of ``num_tokens`` tokens of one sequence on one rank (see the module)."""
    g = graph
    t = num_tokens
    dt = g.dtype_bytes
    ops = _PrefillOps(g, t)
    builder = ops.builder
    alloc, free = builder.alloc, builder.free
    act = t * g.hidden * dt
    inputs, cos, sin = prefill_inputs(builder, t, g.rope_dim * dt)  # cos/sin: freqs_mgr.prefill
    x = alloc(act)  # tok_embeddings
    for layer in range(g.layers):
        norm = ops.rms_norm(g.hidden)  # attention_norm
        attn = ops.attention(norm)
        h = alloc(act)  # residual add
        free(x, attn)
        ffn_in = ops.rms_norm(g.hidden)  # ffn_norm
        dense = layer < g.dense_layers
        ffn_out = ops.mlp(ffn_in, t, g.intermediate) if dense else ops.moe(ffn_in)
        x = alloc(act)  # residual add
        free(h, ffn_out)
    final = ops.rms_norm(g.hidden)  # norm_out: the hidden states vllm-mindspore gets back
    free(x)
    last = alloc(g.hidden * dt)  # gather of the last token
    free(final)
    local = alloc(g.vocab_shard * dt)  # lm_head on this rank's rows
    free(last)
    logits_all = alloc(g.vocab * dt)  # gathered output
    free(local)
    logits32_all = alloc(g.vocab * _FLOAT32)
    free(logits_all, logits32_all, cos, sin, *inputs)
    return builder.ops


class _PrefillOps:
    """The allocations of a prefill's blocks, in MindSpore's DeepseekV3 graph order, for
    ``t`` tokens on one rank; each block frees what it consumed and returns its output."""

    def __init__(self, graph: DeepseekV3Graph, num_tokens: int) -> None:
        self.g = graph
        self.t = num_tokens
        self.dt = graph.dtype_bytes
        self.builder = TraceBuilder()

    def rms_norm(self, width: int) -> int:
        alloc, free = self.builder.alloc, self.builder.free
        t, dt = self.t, self.dt
        out, rstd = alloc(t * width * dt), alloc(t * _FLOAT32)
        free(rstd)
        return out

    def mlp(self, x: int, rows: int, inter: int) -> int:
        """``w_gate_hidden`` (ffn_concat) -> split -> SiLU -> mul -> ``w2``; frees ``x``."""
        alloc, free = self.builder.alloc, self.builder.free
        dt = self.dt
        gate_hidden = alloc(rows * 2 * inter * dt)
        free(x)
        gate, hidden = alloc(rows * inter * dt), alloc(rows * inter * dt)
        free(gate_hidden)
        act = alloc(rows * inter * dt)
        free(gate)
        prod = alloc(rows * inter * dt)
        free(hidden, act)
        out = alloc(rows * self.g.hidden * dt)
        free(prod)
        return out

    def attention(self, norm: int) -> int:
        """Multi-head latent attention of the normed input ``norm`` (freed) up to ``wo``."""
        g, t, dt, nh = self.g, self.t, self.dt, self.g.heads
        alloc, free = self.builder.alloc, self.builder.free
        act = t * g.hidden * dt
        # DeepseekV3Attention, q_lora_rank > 0, qkv_concat off
        q_lat = alloc(t * g.q_lora_rank * dt)  # q2l_proj
        norm_q = self.rms_norm(g.q_lora_rank)  # lq_norm
        free(q_lat)
        q = alloc(t * nh * g.q_head_dim * dt)  # l2q_proj
        free(norm_q)
        latent_all = alloc(t * g.latent_dim * dt)  # kv2l
        free(norm)
        latent_kv, k_pe = alloc(t * g.kv_lora_rank * dt), alloc(t * g.rope_dim * dt)  # split
        free(latent_all)
        q_nope, q_pe = alloc(t * nh * g.nope_dim * dt), alloc(t * nh * g.rope_dim * dt)  # split
        free(q)
        i_kv = self.rms_norm(g.kv_lora_rank)  # lkv_norm
        free(latent_kv)
        q_pe2, k_pe2 = alloc(t * nh * g.rope_dim * dt), alloc(t * g.rope_dim * dt)  # rotary
        free(q_pe, k_pe)
        cache_in = alloc(t * g.latent_dim * dt)  # kpe_concat; reshape_and_cache writes in place
        free(cache_in)
        k_nope = alloc(t * nh * g.nope_dim * dt)  # lkv2kv_k_nope
        v = alloc(t * nh * g.v_dim * dt)  # lkv2kv_v
        free(i_kv)
        query = alloc(t * nh * g.q_head_dim * dt)  # pe_concat(q_nope, q_pe)
        free(q_nope, q_pe2)
        k_pe_tiled = alloc(t * nh * g.rope_dim * dt)  # tile_kv
        free(k_pe2)
        key = alloc(t * nh * g.q_head_dim * dt)  # pe_concat(k_nope, k_pe)
        free(k_nope)
        value = alloc(t * nh * (g.v_dim + g.rope_dim) * dt)  # pe_concat(v, k_pe)
        free(v, k_pe_tiled)
        sm_max = alloc(nh * t * _FA_SOFTMAX_LANES * _FLOAT32)
        sm_sum = alloc(nh * t * _FA_SOFTMAX_LANES * _FLOAT32)
        context = alloc(t * nh * g.q_head_dim * dt)  # FlashAttention output
        free(sm_max, sm_sum, query, key, value)
        sliced = alloc(t * nh * g.v_dim * dt)  # dim_slice_4d to v_head_dim
        free(context)
        attn = alloc(act)  # wo
        free(sliced)
        return attn

    def moe(self, ffn_in: int) -> int:
        """The routed experts and the shared expert of ``ffn_in`` (freed), summed and reduced."""
        g, t, dt = self.g, self.t, self.dt
        alloc, free = self.builder.alloc, self.builder.free
        act = t * g.hidden * dt
        logits = alloc(t * g.experts * dt)  # router dense
        logits32 = alloc(t * g.experts * _FLOAT32)  # cast to float32
        free(logits)
        weight32, index = alloc(t * g.top_k * _FLOAT32), alloc(t * g.top_k * _INT32)
        free(logits32)  # fused_add_topk_div
        weight = alloc(t * g.top_k * dt)  # astype(compute dtype)
        free(weight32)
        rows = g.top_k * t
        sorted_x = alloc(rows * g.hidden * dt)  # MoeInitRoutingV2
        unsort = alloc(rows * _INT32)
        group_list = alloc(g.experts * _INT64)
        before_capacity = alloc(g.experts * _INT64)
        free(index, before_capacity)
        group_list64 = alloc(g.experts * _INT64)  # cast to int64
        free(group_list)
        expert_out = self.mlp(sorted_x, rows, g.moe_intermediate)
        routed = alloc(act)  # MoeTokenUnpermute
        free(expert_out, unsort, weight, group_list64)
        shared = self.mlp(ffn_in, t, g.shared_intermediate)
        summed = alloc(act)  # add
        free(routed, shared)
        ffn_out = alloc(act)  # reduce_from_mp_region
        free(summed)
        return ffn_out
