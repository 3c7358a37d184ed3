"""Allocation traces of a transformer served by an inference engine, for the simulated device.

A :class:`TransformerWorkload` turns a model's ``config.json`` (read through
the planner's :class:`~memacct.planner.spec.KVCacheSpec`) into the device
allocations an engine such as vLLM makes on one rank, with the sizes and
lifetimes of a real forward pass (see ``docs/workload.md``):

* :meth:`~TransformerWorkload.weight_tensors`: every parameter tensor of the
  model, layer by layer, at its real size, plus the engine's persistent input
  buffers (allocated once, never freed);
* :meth:`~TransformerWorkload.step_trace`: one forward pass over
  ``num_tokens`` tokens of ``num_seqs`` sequences, then sampling of
  ``num_seqs`` rows of the vocabulary in float32: embeddings, per-layer
  temporaries (QKV, attention output, MLP intermediate, the residual stream),
  logits and sampler buffers. Everything a step allocates is freed by its end;
* :meth:`~TransformerWorkload.kv_cache_tensors`: the KV cache as one tensor per
  layer (keys and values together) for a number of blocks.

A step trace is a flat ``list[int]``: an op ``n >= 0`` allocates ``n`` bytes
into the next slot (slots are numbered in allocation order), an op ``n < 0``
frees slot ``~n``. :func:`replay` runs a trace on an allocator; traces are
cached per step shape because a benchmark replays them thousands of times.

Example::

    >>> from memacct.planner import load_model_preset
    >>> from memacct.sim import SimDevice
    >>> work = TransformerWorkload.from_config(load_model_preset("qwen2.5-7b"))
    >>> dev = SimDevice("h100-80gb")
    >>> weights = [dev.malloc(n, persistent=True) for n in work.weight_tensors()]
    >>> before = dev.allocator.allocated
    >>> replay(dev, work.step_trace(8192, 256))     # one profiling-sized forward + sampling
    >>> dev.allocator.allocated == before           # the step freed all it took
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.checks import check_int
from memacct.engines.shape import TransformerShape
from memacct.engines.trace import Allocator, TraceBuilder, replay
from memacct.errors import InvalidInputError
from memacct.planner.spec import KVCacheSpec

__all__ = [
    "Allocator",
    "TransformerShape",
    "TransformerWorkload",
    "replay",
]

# Bytes of the index and sampling-parameter dtypes engines keep on the device.
INT32 = 4
INT64 = 8
FLOAT32 = 4
# Cap on max_model_len used to size the engine's persistent block table when the config
# allows longer contexts than an engine would serve by default.
_DEFAULT_MAX_MODEL_LEN = 32768
# Row alignment of the fused-MoE kernel's token sorting (vLLM's moe_align_block_size).
_MOE_BLOCK_M = 64


class TransformerWorkload:
    """The allocations of one rank of an engine serving a transformer.

    Args:
        spec: the model's KV-cache spec on this rank.
        config: the model's ``config.json`` as a dict (for the sizes the spec omits).
        max_num_batched_tokens: the engine's token budget per step (sizes its
            persistent input buffers).
        max_num_seqs: the engine's sequence budget per step.
        block_size: tokens per KV-cache block.
        max_model_len: longest request (sizes the persistent block table);
            defaults to the config's ``max_position_embeddings`` capped at 32768.
    """

    def __init__(
        self,
        spec: KVCacheSpec,
        config: Mapping[str, Any],
        *,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 256,
        block_size: int = 16,
        max_model_len: int | None = None,
    ) -> None:
        for name, value in (
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
            ("block_size", block_size),
        ):
            check_int(name, value)
        self.spec = spec
        self.shape = TransformerShape.from_spec(spec, config)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.max_model_len = max_model_len or min(
            spec.max_position_embeddings or _DEFAULT_MAX_MODEL_LEN, _DEFAULT_MAX_MODEL_LEN
        )
        self._steps: dict[tuple[int, int], list[int]] = {}
        self._kv_pages: list[int] | None = None

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        tensor_parallel_size: int = 1,
        kv_cache_dtype: str = "auto",
        **kwargs: Any,
    ) -> TransformerWorkload:
        """Build the workload of a ``config.json`` dict; ``kwargs`` as for the constructor."""
        spec = KVCacheSpec.from_hf_config(
            dict(config), kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size
        )
        return cls(spec, config, **kwargs)

    # ---------------------------------------------------------------- weights

    def weight_tensors(self) -> list[int]:
        """Bytes of every tensor the engine holds from load to exit, in load order.

        The parameters (:meth:`parameter_tensors`), then the engine's
        persistent input buffers sized for ``max_num_batched_tokens`` and
        ``max_num_seqs``.
        """
        return self.parameter_tensors() + self._persistent_buffers()

    def parameter_tensors(self) -> list[int]:
        """Bytes of each parameter tensor on this rank, layer by layer.

        Real sizes: one rank's shard of each tensor-parallel linear layer; the
        embedding and the LM head split by vocabulary as vLLM's vocabulary-parallel
        layers split them (``docs/engines.md``). :mod:`memacct.planner.weights`
        sizes the same parameters (and quantized layouts) for offline plans.
        """
        s = self.shape
        dt = s.dtype_bytes
        h = s.hidden_size
        vocab_rank = -(-s.vocab_size // s.tensor_parallel_size)
        out = [vocab_rank * h * dt]  # token embedding
        for layer in range(s.num_layers):
            out.extend([h * dt] * (s.norms_per_layer // 2))  # input norm(s)
            out.extend(self._attention_weights())
            out.extend([h * dt] * (s.norms_per_layer - s.norms_per_layer // 2))
            out.extend(self._mlp_weights(layer))
        out.append(h * dt)  # final norm
        if not s.tie_word_embeddings:
            out.append(vocab_rank * h * dt)  # LM head
        return out

    def _attention_weights(self) -> list[int]:
        s = self.shape
        h = s.hidden_size
        dt = s.dtype_bytes
        wt = s.linear_weight_bytes
        if s.attention == "mla":
            latent = s.kv_lora_rank + s.qk_rope_head_dim
            out: list[int] = []
            if s.q_lora_rank:
                out += [s.q_lora_rank * h * wt, s.q_lora_rank * dt]  # q_a_proj, q_a_layernorm
                out.append(s.num_heads * s.head_dim * s.q_lora_rank * wt)  # q_b_proj
            else:
                out.append(s.num_heads * s.head_dim * h * wt)  # q_proj
            out += [
                latent * h * wt,  # kv_a_proj_with_mqa (replicated)
                s.kv_lora_rank * dt,  # kv_a_layernorm
                s.num_heads
                * (s.head_dim - s.qk_rope_head_dim + s.v_head_dim)
                * s.kv_lora_rank
                * wt,  # kv_b_proj
                h * s.num_heads * s.v_head_dim * wt,  # o_proj
            ]
            return out
        qkv_out = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim
        out = [qkv_out * h * wt]
        if s.qkv_bias:
            out.append(qkv_out * dt)
        out.append(h * s.num_heads * s.head_dim * wt)
        return out

    def _mlp_weights(self, layer: int) -> list[int]:
        s = self.shape
        h = s.hidden_size
        wt = s.linear_weight_bytes
        if not s.num_experts or layer < s.dense_layers:
            return [2 * s.intermediate_size * h * wt, h * s.intermediate_size * wt]
        i = s.moe_intermediate_size
        out = [
            s.num_experts * h * s.dtype_bytes,  # router gate (unquantised)
            s.num_experts * 2 * i * h * wt,  # w13 of all experts, one fused tensor
            s.num_experts * h * i * wt,  # w2 of all experts
        ]
        if s.shared_intermediate_size:
            out += [2 * s.shared_intermediate_size * h * wt, h * s.shared_intermediate_size * wt]
        return out

    def _persistent_buffers(self) -> list[int]:
        """vLLM's model runner keeps its step inputs in buffers sized for the budgets."""
        t = self.max_num_batched_tokens
        n = self.max_num_seqs
        blocks_per_seq = -(-self.max_model_len // self.block_size)
        return [
            t * INT32,  # input_ids
            t * INT64,  # positions
            t * INT64,  # slot_mapping
            (n + 1) * INT32,  # query_start_loc
            n * INT32,  # seq_lens
            n * blocks_per_seq * INT32,  # block_table
            n * FLOAT32,  # temperature
            n * FLOAT32,  # top_p
            n * INT32,  # top_k
        ]

    # ---------------------------------------------------------------- KV cache

    def kv_cache_tensors(self, num_blocks: int) -> list[int]:
        """Bytes of each KV-cache tensor for ``num_blocks`` blocks, as vLLM lays them out.

        A model with one KV-cache group gets one tensor per layer holding that
        layer's keys and values for every block; a hybrid (sliding-window and
        full attention, linear-attention state) gets one tensor per layer of
        its widest group, shared by a layer of every group
        (:func:`memacct.engines.vllm.kv.kv_tensor_pages`). The allocator rounds
        each one.
        """
        check_int("num_blocks", num_blocks, low=0)
        return [num_blocks * page for page in self.kv_tensor_pages]

    @property
    def kv_tensor_pages(self) -> list[int]:
        """Bytes per block of each KV-cache tensor (see :meth:`kv_cache_tensors`)."""
        if self._kv_pages is None:
            # Imported here: the engine's KV rules import the planner, which imports this module.
            from memacct.engines.base import KVSettings
            from memacct.engines.vllm.kv import kv_tensor_pages

            settings = KVSettings(block_size=self.block_size, max_model_len=self.max_model_len)
            self._kv_pages = kv_tensor_pages(self.spec, settings)
        return self._kv_pages

    @property
    def kv_block_bytes(self) -> int:
        """Bytes of one KV-cache block on this rank (all tensors' pages)."""
        return sum(self.kv_tensor_pages)

    def kv_cache_bytes(self, num_blocks: int) -> int:
        """Bytes of the whole KV cache for ``num_blocks`` blocks (before allocator rounding)."""
        return sum(self.kv_cache_tensors(num_blocks))

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
