"""The Qwen2 inference graph as vllm-mindspore runs it, as device allocations.

The graph facts the offline plan of ``--engine vllm-mindspore`` charges (the harness's
simulated start replays the same graph). vllm-mindspore runs Qwen2 through its native
model by default and through MindFormers with ``vLLM_MODEL_BACKEND=MindFormers``
(``model_executor/models/registry.py`` at f2b96744 and v0.3.0); both build the
``max_model_len`` squared decode mask in the model's constructor (``models/qwen2.py`` /
``models/model_base.py`` and ``mf_models/mf_model_base.py``), and both hold three
``tokens x intermediate`` buffers at the MLP's peak (the native model's merged
``gate_up_proj`` plus ``SiluAndMul``'s output; MindFormers' ``w3`` output, SiLU and mul).
What vllm-mindspore (May 2025, ``mf_models/qwen2.py``) builds on the device, op by op,
from the model's ``config.json`` (the sources and the per-op rules are listed in
``docs/simulator.md``, section "The seed's cases"):

* :func:`qwen2_load`: the parameters (persistent pool), in load order: embedding, per
  layer the attention norm, ``wq``/``wk``/``wv`` with their biases (``qkv_concat`` is off
  for Qwen), ``wo``, the FFN norm, ``w1``/``w3``/``w2``; the final norm and the LM head;
  the rotary tables; then the model's attention masks (common pool): the 128 x 128
  prefill mask and the ``max_model_len`` x ``max_model_len`` decode mask, which is made
  by a multiplication on the device (its int8-to-dtype input is transient).
* :func:`qwen2_prefill_trace`: one prefill of ``num_tokens`` tokens of one sequence: the
  model inputs, the rotary slices, the embedding, per layer RMSNorm -> ``wq``/``wk``/``wv``
  (matmul, then bias add) -> rotary embedding of q and k (new outputs) -> FlashAttention
  (output plus its float32 softmax max/sum) -> ``wo`` -> residual add -> RMSNorm ->
  ``w1``, ``w3`` -> SiLU -> mul -> ``w2`` -> residual add, each tensor freed after its
  last use; the final norm, the gather of the last token, the LM head and the float32 cast.

A trace is a ``list[int]``: ``n >= 0`` allocates ``n`` bytes into the next slot, ``n < 0``
frees slot ``~n`` (the format :func:`memacct.trace.replay` runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.errors import ConfigError
from memacct.model.config import DTYPE_BYTES, ModelConfig
from memacct.trace import TraceBuilder

__all__ = [
    "Qwen2Graph",
    "qwen2_load",
    "qwen2_prefill_trace",
]

def config_positive_int(config: Mapping[str, Any], key: str, model: str) -> int:
    """``config[key]`` where it is a positive int, else a ConfigError naming key and value;
    read as every key is (:meth:`memacct.model.config.ModelConfig.find`)."""
    found = ModelConfig.of(config).find((key,))
    value = None if found is None else found[1]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"the {model} config needs a positive int {key!r}, got {value!r}; "
            "give the model's config.json"
        )
    return value


# The dtypes the graph runs in, sized by the one table.
_DTYPE_BYTES = {name: DTYPE_BYTES[name] for name in ("bfloat16", "float16", "float32")}
_FLOAT32 = 4
_INT32 = 4
# FlashAttentionScore's softmax max and sum outputs keep 8 float32 values per head and token.
_FA_SOFTMAX_LANES = 8
# The prefill mask is a fixed 128 x 128 tile.
_PREFILL_MASK = 128


@dataclass(frozen=True)
class Qwen2Graph:
    """The sizes one rank's MindFormers Qwen2 graph derives from.

    Attributes:
        layers: decoder layers.
        hidden: hidden size.
        heads: query heads on this rank.
        kv_heads: KV heads on this rank.
        head_dim: head size.
        intermediate: MLP hidden size on this rank.
        vocab: vocabulary (the LM head's output width, gathered on every rank).
        dtype_bytes: bytes of the compute dtype.
        tie_word_embeddings: the LM head shares the embedding.
        max_model_len: the decode mask's side (MindFormers' ``seq_length``).
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    dtype_bytes: int
    tie_word_embeddings: bool
    max_model_len: int

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
    ) -> Qwen2Graph:
        """Read a Qwen2 ``config.json``.

        Raises:
            ConfigError: a key the graph needs is missing or not a positive int, or the
                heads do not divide by ``tensor_parallel_size``.
        """

        def need(key: str) -> int:
            return config_positive_int(config, key, "Qwen2")

        tp = tensor_parallel_size
        heads = need("num_attention_heads")
        kv_heads = int(config.get("num_key_value_heads") or heads)
        if heads % tp or kv_heads % tp:
            raise ConfigError(
                f"{heads} query / {kv_heads} KV heads do not divide by tensor_parallel_size="
                f"{tp}; choose a tensor_parallel_size that divides both"
            )
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        if dtype not in _DTYPE_BYTES:
            raise ConfigError(f"unsupported dtype {dtype!r}; use one of {sorted(_DTYPE_BYTES)}")
        hidden = need("hidden_size")
        return cls(
            layers=need("num_hidden_layers"),
            hidden=hidden,
            heads=heads // tp,
            kv_heads=kv_heads // tp,
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=need("intermediate_size") // tp,
            vocab=need("vocab_size"),
            dtype_bytes=_DTYPE_BYTES[dtype],
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            max_model_len=max_model_len or need("max_position_embeddings"),
        )

    @property
    def q_bytes_per_token(self) -> int:
        """Bytes of one token's query (and attention output) on this rank."""
        return self.heads * self.head_dim * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of one token's key (or value) on this rank."""
        return self.kv_heads * self.head_dim * self.dtype_bytes


def qwen2_load(graph: Qwen2Graph) -> tuple[list[int], list[int]]:
    """``(parameters, masks)``: bytes of the persistent parameters and of the masks kept.

    The decode mask's transient input (the int8 triangle cast to the compute dtype) is
    not listed: it is freed before the profile starts.
    """
    g = graph
    dt = g.dtype_bytes
    h = g.hidden
    q = g.heads * g.head_dim
    kv = g.kv_heads * g.head_dim
    params = [g.vocab * h * dt]
    for _ in range(g.layers):
        params += [h * dt]  # attention_norm
        params += [q * h * dt, q * dt, kv * h * dt, kv * dt, kv * h * dt, kv * dt]  # wq wk wv
        params += [h * q * dt]  # wo
        params += [h * dt]  # ffn_norm
        params += [g.intermediate * h * dt] * 3  # w1, w3, w2
    params.append(h * dt)  # norm_out
    if not g.tie_word_embeddings:
        params.append(g.vocab * h * dt)  # lm_head
    params += [g.max_model_len * g.head_dim * _FLOAT32] * 2  # rotary cos/sin tables
    masks = [_PREFILL_MASK * _PREFILL_MASK * dt, g.max_model_len * g.max_model_len * dt, dt]
    return params, masks


def prefill_inputs(
    builder: TraceBuilder, num_tokens: int, rotary_bytes_per_token: int
) -> tuple[list[int], int, int]:
    """A prefill's model inputs and its rotary ``cos``/``sin`` slices, allocated in that order.

    Returns ``(inputs, cos, sin)``; the model frees them after the LM head. Shared by the
    Qwen2 and DeepSeek-V3 graphs, which prepare their inputs alike.
    """
    alloc, t = builder.alloc, num_tokens
    inputs = [alloc(t * _INT32) for _ in range(3)]  # input_ids, positions, slot_mapping
    inputs.append(alloc(-(-t // 16) * _INT32))  # block_tables
    inputs += [alloc(_INT32), alloc(_INT32)]  # batch_valid_length, q_seq_lens
    cos, sin = alloc(t * rotary_bytes_per_token), alloc(t * rotary_bytes_per_token)
    return inputs, cos, sin


def qwen2_prefill_trace(graph: Qwen2Graph, num_tokens: int) -> list[int]:
    """One prefill of ``num_tokens`` tokens of one sequence, through the LM head (see module)."""
    g = graph
    t = num_tokens
    dt = g.dtype_bytes
    builder = TraceBuilder()
    alloc, free = builder.alloc, builder.free

    act = t * g.hidden * dt
    q = t * g.q_bytes_per_token
    kv = t * g.kv_bytes_per_token
    inter = t * g.intermediate * dt
    inputs, cos, sin = prefill_inputs(builder, t, g.head_dim * dt)
    h = alloc(act)  # tok_embeddings
    for _ in range(g.layers):
        norm, rstd = alloc(act), alloc(t * _FLOAT32)
        free(rstd)
        projected = []
        for size in (q, kv, kv):
            mm = alloc(size)
            biased = alloc(size)
            free(mm)
            projected.append(biased)
        free(norm)
        wq, wk, wv = projected
        rq, rk = alloc(q), alloc(kv)  # rotary embedding outputs
        free(wq, wk)
        sm_max = alloc(g.heads * t * _FA_SOFTMAX_LANES * _FLOAT32)
        sm_sum = alloc(g.heads * t * _FA_SOFTMAX_LANES * _FLOAT32)
        attn = alloc(q)
        free(sm_max, sm_sum, rq, rk, wv)
        out = alloc(act)  # wo
        free(attn)
        h2 = alloc(act)  # residual add
        free(h, out)
        norm2, rstd2 = alloc(act), alloc(t * _FLOAT32)
        free(rstd2)
        gate = alloc(inter)  # w1
        up = alloc(inter)  # w3
        free(norm2)
        act_out = alloc(inter)  # SiLU
        free(gate)
        prod = alloc(inter)  # mul
        free(act_out, up)
        down = alloc(act)  # w2
        free(prod)
        h = alloc(act)  # residual add
        free(h2, down)
    final, rstd3 = alloc(act), alloc(t * _FLOAT32)
    free(rstd3, h)
    last = alloc(g.hidden * dt)  # gather of the last token
    free(final)
    logits = alloc(g.vocab * dt)
    free(last)
    logits32 = alloc(g.vocab * _FLOAT32)
    free(logits, logits32, cos, sin, *inputs)
    return builder.ops
