"""vLLM's LoRA buffers: the adapter slots ``--enable-lora`` preallocates on every rank.

vLLM (``vllm/lora/model_manager.py``, ``LoRAModelManager._create_lora_modules``) wraps every
``LinearBase`` and ``FusedMoE`` module of the model (``vllm/lora/utils.py``,
``get_supported_lora_modules``) and each wrapper's ``create_lora_weights`` allocates, in the
LoRA dtype, zeroed stacks for ``max_loras`` adapters of rank ``max_lora_rank``:

* a linear layer of ``n`` packed slices (``qkv_proj``: 3, ``gate_up_proj``: 2, others 1;
  ``vllm/lora/layers/column_parallel_linear.py``, ``MergedColumnParallelLinearWithLoRA``
  and ``MergedQKVParallelLinearWithLoRA``): per slice an A stack ``max_loras x 1 x rank x
  input`` and a B stack ``max_loras x 1 x output_slice x rank``, with the rank's input and
  output sizes (column-parallel: the whole input, the rank's share of each output slice;
  row-parallel: the rank's share of the input, the whole output;
  ``vllm/lora/layers/base_linear.py``, ``BaseLinearLayerWithLoRA.create_lora_weights``).
  ``--fully-sharded-loras`` splits the column layers' rank and the row layers' output;
* fused MoE experts (``vllm/lora/layers/fused_moe.py``, ``FusedMoEWithLoRA``): per local
  expert, gate and up A ``rank x hidden`` and B ``intermediate_per_rank x rank``, down A
  ``rank x intermediate_per_rank`` and B ``hidden x rank``.

The embedding and the LM head get no stacks: vLLM 0.33's text models declare no
``embedding_modules`` (the extra-vocabulary slots are gone). ``--max-cpu-loras`` caches
adapters in host memory and costs the device nothing. The stacks are made while the model
loads, so vLLM's "Model loading took" figure includes them (memacct adds them to the
weights as the ``lora`` role).

With LoRA on, vLLM captures the CUDA graphs once with and once without adapters
(``cudagraph_specialize_lora``, on by default, ``vllm/config/compilation.py``;
``vllm/lora/utils.py``, ``get_captured_lora_counts``): :data:`LORA_GRAPH_SETS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import LoraSettings
from memacct.model.config import ModelConfig
from memacct.model.weights.estimate import dtype_bytes

__all__ = ["LORA_GRAPH_SETS", "lora_buffer_bytes"]

LORA_GRAPH_SETS = 2
"""Sets of CUDA graphs vLLM captures with LoRA on (without adapters, and for
``max_loras + 1`` active adapters), against one without LoRA."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _int(cfg: ModelConfig, *keys: str) -> int:
    return cfg.first_int(keys, 0) or 0


def lora_buffer_bytes(
    config: Mapping[str, Any], lora: LoraSettings, *, tensor_parallel_size: int,
    local_experts: int | None = None, expert_shards: int | None = None,
    num_layers: int | None = None,
) -> int:  # fmt: skip
    """Bytes of the adapter stacks on one rank (see the module notes).

    Args:
        config: the model's ``config.json``.
        lora: the LoRA settings.
        tensor_parallel_size: ranks each layer is split across.
        local_experts: experts on this rank (``None``: all of them; fewer with EP).
        expert_shards: ranks each expert's intermediate size is split across (``None``:
            ``tensor_parallel_size``; 1 with EP, TP x DP with DP and no EP).
        num_layers: decoder layers on this rank (``None``: all; fewer on a pipeline stage).
    """
    cfg = ModelConfig(config, "config.json")
    tp, r, n = tensor_parallel_size, lora.max_lora_rank, lora.max_loras
    # fully sharded: the column layers' A rank and the row layers' B output are split.
    r_col = _ceil(r, tp) if lora.fully_sharded_loras else r
    h = _int(cfg, "hidden_size", "d_model", "n_embd")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv = _int(cfg, "num_key_value_heads") or heads
    hd = _int(cfg, "head_dim") or (h // heads if heads else 0)
    layers = num_layers if num_layers is not None else _int(cfg, "num_hidden_layers", "num_layers")
    dense_i = _int(cfg, "intermediate_size", "ffn_dim")
    experts = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    moe_i = _int(cfg, "moe_intermediate_size") or dense_i
    first_dense = _int(cfg, "first_k_dense_replace")
    shared_i = _int(cfg, "shared_expert_intermediate_size") or _int(cfg, "n_shared_experts") * moe_i

    def column(slices: int, input_size: int, outputs: int) -> int:
        # ``slices`` A stacks of the whole input; B stacks of ``outputs`` rows in all.
        return slices * n * r_col * input_size + n * outputs * r

    def row(input_per_rank: int, output: int) -> int:
        out = _ceil(output, tp) if lora.fully_sharded_loras else output
        return n * r * (input_per_rank + out)

    h_rank = _ceil(heads, tp) * hd
    kv_rank = max(1, kv // tp) * hd
    if cfg.get("kv_lora_rank") is not None:
        q_rank = _int(cfg, "q_lora_rank")
        latent = _int(cfg, "kv_lora_rank")
        rope = _int(cfg, "qk_rope_head_dim") or 64
        nope = _int(cfg, "qk_nope_head_dim") or 128
        v = _int(cfg, "v_head_dim") or nope
        per_head = _ceil(heads, tp)
        if q_rank:  # fused_qkv_a_proj (2 slices, replicated), then q_b_proj
            attn = 2 * n * r * h + n * (q_rank + latent + rope) * r
            attn += column(1, q_rank, per_head * (nope + rope))
        else:  # q_proj, and kv_a_proj_with_mqa (replicated)
            attn = column(1, h, per_head * (nope + rope)) + n * r * (h + latent + rope)
        attn += column(1, latent, per_head * (nope + v)) + row(per_head * v, h)
    else:
        attn = column(3, h, h_rank + 2 * kv_rank) + row(h_rank, h)

    def mlp(width: int) -> int:
        return column(2, h, 2 * _ceil(width, tp)) + row(_ceil(width, tp), h)

    total = 0
    step = max(1, _int(cfg, "decoder_sparse_step") or 1)
    for i in range(layers):
        total += attn
        moe = experts and i >= first_dense and (i + 1) % step == 0
        if moe:
            local = local_experts if local_experts is not None else experts
            im = _ceil(moe_i, expert_shards or tp)
            total += local * n * r * (2 * (h + im) + (im + h))  # w13 (2 slices) and w2
            total += n * r * (h + experts)  # the router gate (replicated)
            if shared_i:
                total += mlp(shared_i)
        elif dense_i:
            total += mlp(dense_i)
    elem = lora.dtype_bytes(dtype_bytes(config))
    return total * elem
