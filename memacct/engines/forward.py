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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from memacct.errors import ConfigError, InvalidInputError
from memacct.planner.spec import KVCacheSpec

__all__ = [
    "Allocator",
    "TransformerShape",
    "TransformerWorkload",
    "replay",
]

# vLLM pads the vocabulary of its (parallel) embedding and LM head to a multiple of this.
VOCAB_PADDING = 64
# Bytes of the index and sampling-parameter dtypes engines keep on the device.
INT32 = 4
INT64 = 8
FLOAT32 = 4
# Cap on max_model_len used to size the engine's persistent block table when the config
# allows longer contexts than an engine would serve by default.
_DEFAULT_MAX_MODEL_LEN = 32768
# Row alignment of the fused-MoE kernel's token sorting (vLLM's moe_align_block_size).
_MOE_BLOCK_M = 64


class Allocator(Protocol):
    """What :func:`replay` needs: a caching allocator's ``malloc`` and ``free``."""

    def malloc(self, size: int, *, persistent: bool = False) -> int:
        """Allocate ``size`` bytes; return a pointer."""
        ...

    def free(self, ptr: int) -> None:
        """Free a pointer ``malloc`` returned."""
        ...


def replay(allocator: Allocator, trace: Sequence[int]) -> None:
    """Run a step trace on ``allocator`` (a :class:`~memacct.sim.SimDevice` or a bare allocator).

    Raises whatever the allocator raises (``SimOutOfMemory`` when the device
    is full); the allocations made before the failure are left live, as they
    would be in a process that crashed.
    """
    malloc = allocator.malloc
    free = allocator.free
    ptrs: list[int] = []
    push = ptrs.append
    for op in trace:
        if op >= 0:
            push(malloc(op))
        else:
            free(ptrs[~op])


class _Trace:
    """Builds a step trace: :meth:`alloc` returns a slot, :meth:`free` frees it."""

    __slots__ = ("live", "ops", "slots")

    def __init__(self) -> None:
        self.ops: list[int] = []
        self.slots = 0
        self.live: set[int] = set()

    def alloc(self, nbytes: int) -> int:
        slot = self.slots
        self.slots += 1
        self.ops.append(max(1, int(nbytes)))
        self.live.add(slot)
        return slot

    def free(self, *slots: int) -> None:
        for slot in slots:
            self.live.remove(slot)
            self.ops.append(~slot)


@dataclass(frozen=True)
class TransformerShape:
    """One rank's view of a decoder-only transformer: what its tensors' sizes derive from.

    Attributes:
        num_layers: decoder layers on this rank.
        hidden_size: width of the residual stream.
        num_heads: query heads on this rank.
        num_kv_heads: KV heads on this rank (MHA/GQA/MQA).
        head_dim: query/key head size (MLA: ``qk_nope_head_dim + qk_rope_head_dim``).
        v_head_dim: value head size.
        dtype_bytes: bytes per element of activations and unquantised weights.
        linear_weight_bytes: bytes per element of the linear layers' weights
            (1 for FP8 checkpoints).
        intermediate_size: dense MLP hidden size on this rank.
        vocab_size: vocabulary, padded as the engine pads it.
        tie_word_embeddings: the LM head shares the embedding matrix.
        attention: ``"mha"`` or ``"mla"``.
        kv_lora_rank: MLA latent rank (0 for MHA).
        qk_rope_head_dim: MLA rotary key part (0 for MHA).
        q_lora_rank: MLA query low-rank projection (0: none).
        num_experts: routed experts (0: dense model).
        experts_per_token: experts each token is routed to.
        moe_intermediate_size: one expert's hidden size on this rank.
        shared_intermediate_size: hidden size of the always-active shared
            experts on this rank (0: none).
        dense_layers: how many of the first layers have a dense MLP in a MoE model.
        norms_per_layer: RMSNorm weight vectors per layer (2, Gemma 2/3: 4).
        qkv_bias: the QKV projection has a bias (Qwen2, ``attention_bias``).
        tensor_parallel_size: ranks the layers are split across.
        kv_bytes_per_token_per_layer: KV-cache bytes per token of each layer on this rank.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    dtype_bytes: int
    linear_weight_bytes: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention: Literal["mha", "mla"]
    kv_lora_rank: int
    qk_rope_head_dim: int
    q_lora_rank: int
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_intermediate_size: int
    dense_layers: int
    norms_per_layer: int
    qkv_bias: bool
    tensor_parallel_size: int
    kv_bytes_per_token_per_layer: tuple[int, ...] = field(repr=False)

    @classmethod
    def from_spec(cls, spec: KVCacheSpec, config: Mapping[str, Any]) -> TransformerShape:
        """Derive the shape from the planner's spec and the raw config (for what the spec omits).

        Raises:
            ConfigError: the config lacks what the forward pass needs
                (``intermediate_size``, ``vocab_size``) or its dtype.
        """
        text = config.get("text_config")
        cfg: Mapping[str, Any] = {**config, **text} if isinstance(text, Mapping) else config
        tp = spec.tensor_parallel_size
        if spec.vocab_size is None:
            raise ConfigError(f"{spec.model_name}: the config has no vocab_size; add it")
        if spec.intermediate_size is None and spec.num_experts is None:
            raise ConfigError(f"{spec.model_name}: the config has no intermediate_size; add it")
        dtype_bytes = spec.dtype_bytes or spec.kv_dtype_bytes
        quant = cfg.get("quantization_config")
        fp8_weights = isinstance(quant, Mapping) and str(quant.get("quant_method", "")) == "fp8"
        vocab = -(-spec.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
        heads = spec.num_attention_heads // tp
        if spec.attention == "mla":
            nope = int(cfg.get("qk_nope_head_dim") or 128)
            rope = spec.qk_rope_head_dim or 0
            head_dim = nope + rope
            v_head_dim = int(cfg.get("v_head_dim") or nope)
            kv_heads = 1
        else:
            head_dim = v_head_dim = spec.head_dim
            kv_heads = spec.num_kv_heads
        experts = spec.num_experts or 0
        moe_i = spec.moe_intermediate_size or spec.intermediate_size or 0
        dense_i = spec.intermediate_size or moe_i
        dense_layers = 0
        if experts:
            dense_layers = int(cfg.get("first_k_dense_replace") or 0)
        per_layer_kv: list[int] = []
        for group in spec.layer_groups:
            per_layer_kv.extend([group.bytes_per_token_per_layer] * group.num_layers)
        model_type = spec.model_type or ""
        return cls(
            num_layers=spec.num_layers,
            hidden_size=spec.hidden_size,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            v_head_dim=v_head_dim,
            dtype_bytes=dtype_bytes,
            linear_weight_bytes=1 if fp8_weights else dtype_bytes,
            intermediate_size=max(1, dense_i // tp),
            vocab_size=vocab,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
            attention=spec.attention,
            kv_lora_rank=spec.kv_lora_rank or 0,
            qk_rope_head_dim=spec.qk_rope_head_dim or 0,
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            num_experts=experts,
            experts_per_token=spec.experts_per_token or (1 if experts else 0),
            moe_intermediate_size=max(1, moe_i // tp) if experts else 0,
            shared_intermediate_size=(spec.num_shared_experts or 0) * moe_i // tp,
            dense_layers=min(dense_layers, spec.num_layers),
            norms_per_layer=4 if model_type.startswith("gemma") else 2,
            # Qwen2's attention always has QKV biases; other models say so in the config.
            qkv_bias=model_type.startswith("qwen2") or bool(cfg.get("attention_bias", False)),
            tensor_parallel_size=tp,
            kv_bytes_per_token_per_layer=tuple(per_layer_kv),
        )


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
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
        self.spec = spec
        self.shape = TransformerShape.from_spec(spec, config)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.max_model_len = max_model_len or min(
            spec.max_position_embeddings or _DEFAULT_MAX_MODEL_LEN, _DEFAULT_MAX_MODEL_LEN
        )
        self._steps: dict[tuple[int, int], list[int]] = {}

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
        """Bytes of the KV-cache tensor of each layer for ``num_blocks`` blocks.

        One tensor per layer holds that layer's keys and values for every
        block (``num_blocks x block_size x per-layer bytes per token``), as
        vLLM allocates it; the allocator rounds each one.
        """
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 0:
            raise InvalidInputError(f"num_blocks must be a non-negative int, got {num_blocks!r}")
        tokens = num_blocks * self.block_size
        return [tokens * per_layer for per_layer in self.shape.kv_bytes_per_token_per_layer]

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
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
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
        tr = _Trace()
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

    def _all_reduce(self, tr: _Trace, out: int, t: int) -> int:
        """Tensor-parallel all-reduce: the custom all-reduce returns a new tensor."""
        if self.shape.tensor_parallel_size == 1:
            return out
        reduced = tr.alloc(t * self.shape.hidden_size * self.shape.dtype_bytes)
        tr.free(out)
        return reduced

    def _attention(self, tr: _Trace, hidden: int, t: int, prefill: bool) -> int:
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

    def _mla(self, tr: _Trace, t: int, prefill: bool) -> int:
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

    def _dense_mlp(self, tr: _Trace, t: int, intermediate: int) -> int:
        dt = self.shape.dtype_bytes
        gate_up = tr.alloc(t * 2 * intermediate * dt)
        act = tr.alloc(t * intermediate * dt)  # SiLU-and-mul
        tr.free(gate_up)
        down = tr.alloc(t * self.shape.hidden_size * dt)
        tr.free(act)
        return down

    def _mlp(self, tr: _Trace, hidden: int, t: int, layer: int) -> int:
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

    def _sample(self, tr: _Trace, hidden: int, num_seqs: int) -> None:
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
