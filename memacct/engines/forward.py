"""A dummy forward pass's allocations on one rank of an engine serving a transformer.

:class:`ForwardPass` turns a model's ``config.json`` (read through the
planner's :class:`~memacct.model.spec.KVCacheSpec`) into the allocation trace
of one engine step, with the sizes and lifetimes of a real forward pass (see
``docs/workload.md``): :meth:`~ForwardPass.step_trace` is one forward pass over
``num_tokens`` tokens of ``num_seqs`` sequences, then sampling of ``num_seqs``
rows of the vocabulary in float32: embeddings, per-layer temporaries (QKV,
attention output, MLP intermediate, the residual stream), logits and sampler
buffers; everything a step allocates is freed by its end.
:meth:`~ForwardPass.forward_trace` is the forward pass alone (what a CUDA graph
captures).

The engines' offline start-up estimates take the peaks of these traces
(:func:`memacct.trace.trace_peak`); no device is involved. A trace is a
flat ``list[int]`` (:mod:`memacct.trace`); traces are cached per step
shape because a replay runs them many times.

Example::

    >>> from memacct.trace import trace_peak
    >>> from memacct.planner import load_model_preset
    >>> work = ForwardPass.from_config(
    ...     load_model_preset("qwen2.5-7b"), max_num_batched_tokens=8192, max_num_seqs=256)
    >>> 0 < trace_peak(work.step_trace(8192, 256)) < 8 * 2**30
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from memacct.checks import check_int
from memacct.errors import InvalidInputError
from memacct.model.config import ModelConfig
from memacct.model.shape import TransformerShape
from memacct.model.spec import KVCacheSpec
from memacct.trace import TraceBuilder

__all__ = ["FLOAT32", "INT32", "INT64", "ForwardPass", "TransformerShape"]

# Bytes of the index and sampling-parameter dtypes engines keep on the device.
INT32 = 4
INT64 = 8
FLOAT32 = 4
# Row alignment of the fused-MoE kernel's token sorting (vLLM's moe_align_block_size).
_MOE_BLOCK_M = 64

_Pass = TypeVar("_Pass", bound="ForwardPass")


class ForwardPass:
    """The allocation traces of one rank's engine steps (forward pass and sampling).

    Args:
        spec: the model's KV-cache spec on this rank.
        config: the model's ``config.json`` as a dict, or its reading (for the sizes the
            spec omits).
        max_num_batched_tokens: the engine's token budget per step (no step exceeds it).
        max_num_seqs: the engine's sequence budget per step.
    """

    def __init__(
        self,
        spec: KVCacheSpec,
        config: Mapping[str, Any] | ModelConfig,
        *,
        max_num_batched_tokens: int,
        max_num_seqs: int,
    ) -> None:
        for name, value in (
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
        ):
            check_int(name, value)
        self.spec = spec
        self.shape = TransformerShape.from_spec(spec, config)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self._steps: dict[tuple[int, int], list[int]] = {}

    @classmethod
    def from_config(
        cls: type[_Pass],
        config: Mapping[str, Any],
        *,
        tensor_parallel_size: int = 1,
        kv_cache_dtype: str = "auto",
        **kwargs: Any,
    ) -> _Pass:
        """Build from a ``config.json`` dict; ``kwargs`` as for the constructor."""
        spec = KVCacheSpec.from_hf_config(
            dict(config), kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size
        )
        return cls(spec, config, **kwargs)

    # ---------------------------------------------------------------- steps

    def step_trace(self, num_tokens: int, num_seqs: int) -> list[int]:
        """The allocation trace of one engine step (cached; do not modify the list).

        A forward pass over ``num_tokens`` tokens of ``num_seqs`` sequences
        (each sequence contributes at least one token), then sampling one
        token for each of the ``num_seqs`` sequences. Every slot the trace
        allocates is freed by its end.

        Raises:
            InvalidInputError: non-positive counts, more sequences than
                tokens, or a step beyond the engine's budgets.
        """
        key = (num_tokens, num_seqs)
        trace = self._steps.get(key)
        if trace is None:
            self._check_step(num_tokens, num_seqs)
            trace = self._build_step(num_tokens, num_seqs)
            self._steps[key] = trace
        return trace

    def _check_step(self, num_tokens: int, num_seqs: int) -> None:
        for name, value in (("num_tokens", num_tokens), ("num_seqs", num_seqs)):
            check_int(name, value)
        if num_seqs > num_tokens:
            raise InvalidInputError(
                f"a step of {num_tokens} tokens cannot serve {num_seqs} sequences: every "
                "sequence contributes at least one token"
            )
        if num_tokens > self.max_num_batched_tokens or num_seqs > self.max_num_seqs:
            raise InvalidInputError(
                f"step ({num_tokens} tokens, {num_seqs} sequences) exceeds the engine's budgets "
                f"(max_num_batched_tokens {self.max_num_batched_tokens}, max_num_seqs "
                f"{self.max_num_seqs}): an engine never schedules it"
            )

    def forward_trace(self, num_tokens: int, num_seqs: int) -> list[int]:
        """The allocation trace of the model's forward pass alone, without sampling.

        What a CUDA graph of a batch of ``num_tokens`` captures (vLLM captures
        the model, never the sampler). Not cached.

        Raises:
            InvalidInputError: as :meth:`step_trace`.
        """
        self._check_step(num_tokens, num_seqs)
        return self._build_step(num_tokens, num_seqs, sample=False)

    def _build_step(self, num_tokens: int, num_seqs: int, *, sample: bool = True) -> list[int]:
        s = self.shape
        t = num_tokens
        dt = s.dtype_bytes
        h = s.hidden_size
        tr = TraceBuilder()
        # Per-step metadata the scheduler hands over (the rest lives in persistent buffers).
        logits_indices = tr.alloc(num_seqs * INT64)
        attn_meta = tr.alloc((num_seqs + 1) * INT32)  # cu_seqlens_k of the attention kernel
        hidden = tr.alloc(t * h * dt)  # embedding lookup
        residual: int | None = None
        prefill = num_tokens > num_seqs
        for layer in range(s.num_layers):
            if residual is None:
                # Layer 0: the embedding output becomes the residual stream; RMSNorm writes anew.
                residual = hidden
                hidden = tr.alloc(t * h * dt)
            # Other layers: fused add + RMSNorm works in place on (hidden, residual).
            attn = self._attention(tr, hidden, t, prefill)
            tr.free(hidden)
            hidden = attn
            hidden = self._mlp(tr, hidden, t, layer)
        # Final norm is fused and in place; then the residual stream is gone.
        assert residual is not None
        tr.free(residual)
        if sample:
            self._sample(tr, hidden, num_seqs)
        else:
            tr.free(hidden)
        tr.free(logits_indices, attn_meta)
        assert not tr.live, "a step trace must free everything it allocates"
        return tr.ops

    def _all_reduce(self, tr: TraceBuilder, out: int, t: int) -> int:
        """Tensor-parallel all-reduce: the custom all-reduce returns a new tensor."""
        if self.shape.tensor_parallel_size == 1:
            return out
        reduced = tr.alloc(t * self.shape.hidden_size * self.shape.dtype_bytes)
        tr.free(out)
        return reduced

    def _attention(self, tr: TraceBuilder, hidden: int, t: int, prefill: bool) -> int:
        """Self-attention of one layer; returns the slot of its output (caller frees ``hidden``)."""
        s = self.shape
        dt = s.dtype_bytes
        if s.attention == "mla":
            return self._mla(tr, t, prefill)
        qkv = tr.alloc(t * (s.num_heads + 2 * s.num_kv_heads) * s.head_dim * dt)
        # Rotary embedding rotates q and k in place; the kernel writes the new keys and
        # values into the KV cache and the attention output into a fresh tensor.
        attn_out = tr.alloc(t * s.num_heads * s.v_head_dim * dt)
        tr.free(qkv)
        out = tr.alloc(t * s.hidden_size * dt)  # o_proj
        tr.free(attn_out)
        return self._all_reduce(tr, out, t)

    def _mla(self, tr: TraceBuilder, t: int, prefill: bool) -> int:
        """Multi-head latent attention (DeepSeek) as vLLM runs it."""
        s = self.shape
        dt = s.dtype_bytes
        nope = s.head_dim - s.qk_rope_head_dim
        if s.q_lora_rank:
            q_a = tr.alloc(t * s.q_lora_rank * dt)
            q_a_normed = tr.alloc(t * s.q_lora_rank * dt)
            tr.free(q_a)
            q = tr.alloc(t * s.num_heads * s.head_dim * dt)
            tr.free(q_a_normed)
        else:
            q = tr.alloc(t * s.num_heads * s.head_dim * dt)
        kv_a = tr.alloc(t * (s.kv_lora_rank + s.qk_rope_head_dim) * dt)
        kv_c_normed = tr.alloc(t * s.kv_lora_rank * dt)
        if prefill:
            # Prefill decompresses the latent into per-head keys and values.
            kv = tr.alloc(t * s.num_heads * (nope + s.v_head_dim) * dt)
            k = tr.alloc(t * s.num_heads * s.head_dim * dt)
            attn_out = tr.alloc(t * s.num_heads * s.v_head_dim * dt)
            tr.free(kv, k)
        else:
            # Decode absorbs W_UK into the query and attends over the latent.
            ql_nope = tr.alloc(t * s.num_heads * s.kv_lora_rank * dt)
            q_cat = tr.alloc(t * s.num_heads * (s.kv_lora_rank + s.qk_rope_head_dim) * dt)
            tr.free(ql_nope)
            latent_out = tr.alloc(t * s.num_heads * s.kv_lora_rank * dt)
            tr.free(q_cat)
            attn_out = tr.alloc(t * s.num_heads * s.v_head_dim * dt)  # W_UV applied
            tr.free(latent_out)
        tr.free(q, kv_a, kv_c_normed)
        out = tr.alloc(t * s.hidden_size * dt)  # o_proj
        tr.free(attn_out)
        return self._all_reduce(tr, out, t)

    def _dense_mlp(self, tr: TraceBuilder, t: int, intermediate: int) -> int:
        dt = self.shape.dtype_bytes
        gate_up = tr.alloc(t * 2 * intermediate * dt)
        act = tr.alloc(t * intermediate * dt)  # SiLU-and-mul
        tr.free(gate_up)
        down = tr.alloc(t * self.shape.hidden_size * dt)
        tr.free(act)
        return down

    def _mlp(self, tr: TraceBuilder, hidden: int, t: int, layer: int) -> int:
        """The MLP of one layer; frees ``hidden`` (its input) and returns its output's slot."""
        s = self.shape
        dt = s.dtype_bytes
        h = s.hidden_size
        if not s.num_experts or layer < s.dense_layers:
            out = self._dense_mlp(tr, t, s.intermediate_size)
            tr.free(hidden)
            return self._all_reduce(tr, out, t)
        k = s.experts_per_token
        i = s.moe_intermediate_size
        router_logits = tr.alloc(t * s.num_experts * dt)
        topk_weights = tr.alloc(t * k * FLOAT32)
        topk_ids = tr.alloc(t * k * INT32)
        tr.free(router_logits)
        shared = (
            self._dense_mlp(tr, t, s.shared_intermediate_size)
            if s.shared_intermediate_size
            else None
        )
        # fused_experts: tokens sorted by expert (padded per expert to the kernel's block).
        padded = t * k + s.num_experts * (_MOE_BLOCK_M - 1)
        sorted_ids = tr.alloc(padded * INT32)
        expert_ids = tr.alloc(-(-padded // _MOE_BLOCK_M) * INT32)
        cache13 = tr.alloc(t * k * max(2 * i, h) * dt)  # intermediate caches 1 and 3 share it
        cache2 = tr.alloc(t * k * i * dt)
        out = tr.alloc(t * h * dt)  # sum over the top-k experts
        tr.free(cache2, cache13, sorted_ids, expert_ids, topk_weights, topk_ids)
        if shared is not None:
            tr.free(shared)  # added into ``out`` in place
        tr.free(hidden)
        return self._all_reduce(tr, out, t)

    def _sample(self, tr: TraceBuilder, hidden: int, num_seqs: int) -> None:
        """Logits of the last token of each sequence and sampling; frees ``hidden``."""
        s = self.shape
        selected = tr.alloc(num_seqs * s.hidden_size * s.dtype_bytes)  # hidden[logits_indices]
        tr.free(hidden)
        logits = tr.alloc(num_seqs * s.vocab_size * s.dtype_bytes)  # LM head (gathered if TP)
        tr.free(selected)
        logits32 = tr.alloc(num_seqs * s.vocab_size * FLOAT32)  # the sampler works in float32
        tr.free(logits)
        probs = tr.alloc(num_seqs * s.vocab_size * FLOAT32)  # softmax after temperature
        noise = tr.alloc(num_seqs * s.vocab_size * FLOAT32)  # exponential draws (Gumbel trick)
        sampled = tr.alloc(num_seqs * INT64)
        tr.free(noise, probs, logits32, sampled)
