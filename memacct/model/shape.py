"""One rank's shape of a decoder-only transformer, from the planner's spec and the config.

:class:`TransformerShape` holds the sizes the forward pass's activations derive
from (:mod:`memacct.engines.forward`): heads and KV heads on this rank, MLA
dimensions, expert counts and widths, the vocabulary padded as vLLM pads it.
The weights are the planner's inventory (:func:`memacct.model.weights.estimate.weight_tensors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from memacct._attrs import same_named
from memacct.errors import ConfigError
from memacct.model.config import ModelConfig, config_int
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.rules import VOCAB_PADDING

__all__ = ["TransformerShape"]


@dataclass(frozen=True)
class TransformerShape:
    """One rank's view of a decoder-only transformer: what its activations' sizes derive from.

    Attributes:
        num_layers: decoder layers on this rank.
        hidden_size: width of the residual stream.
        num_heads: query heads on this rank.
        num_kv_heads: KV heads on this rank (MHA/GQA/MQA).
        head_dim: query/key head size (MLA: ``qk_nope_head_dim + qk_rope_head_dim``).
        v_head_dim: value head size.
        dtype_bytes: bytes per element of activations and unquantised weights.
        intermediate_size: dense MLP hidden size on this rank.
        vocab_size: vocabulary, padded as the engine pads it.
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
    intermediate_size: int
    vocab_size: int
    attention: Literal["mha", "mla"]
    kv_lora_rank: int
    qk_rope_head_dim: int
    q_lora_rank: int
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_intermediate_size: int
    dense_layers: int
    tensor_parallel_size: int
    kv_bytes_per_token_per_layer: tuple[int, ...] = field(repr=False)

    @classmethod
    def from_spec(
        cls, spec: KVCacheSpec, config: Mapping[str, Any] | ModelConfig
    ) -> TransformerShape:
        """Derive the shape from the planner's spec and the raw config (for what the spec omits).

        Raises:
            ConfigError: the config lacks what the forward pass needs
                (``intermediate_size``, ``vocab_size``) or its dtype.
        """
        cfg = ModelConfig.of(config, "config.json")
        tp = spec.tensor_parallel_size
        if spec.vocab_size is None:
            raise ConfigError(f"{spec.model_name}: the config has no vocab_size; add it")
        if spec.intermediate_size is None and spec.num_experts is None:
            raise ConfigError(f"{spec.model_name}: the config has no intermediate_size; add it")
        dtype_bytes = spec.dtype_bytes or spec.kv_dtype_bytes
        vocab = -(-spec.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
        heads = spec.num_attention_heads // tp
        if spec.attention == "mla":
            nope = config_int(cfg, "qk_nope_head_dim", 128, source=spec.model_name)
            rope = spec.qk_rope_head_dim or 0
            head_dim = nope + rope
            v_head_dim = config_int(cfg, "v_head_dim", nope, source=spec.model_name)
            kv_heads = 1
        else:
            head_dim = v_head_dim = spec.head_dim
            kv_heads = spec.num_kv_heads
        experts = spec.num_experts or 0
        moe_i = spec.moe_intermediate_size or spec.intermediate_size or 0
        dense_i = spec.intermediate_size or moe_i
        dense_layers = 0
        if experts:
            dense_layers = config_int(cfg, "first_k_dense_replace", 0, source=spec.model_name)
        per_layer_kv: list[int] = []
        for group in spec.layer_groups:
            per_layer_kv.extend([group.bytes_per_token_per_layer] * group.num_layers)
        return cls(
            **same_named(spec, "num_layers", "hidden_size", "attention", "tensor_parallel_size"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            v_head_dim=v_head_dim,
            dtype_bytes=dtype_bytes,
            intermediate_size=max(1, dense_i // tp),
            vocab_size=vocab,
            kv_lora_rank=spec.kv_lora_rank or 0,
            qk_rope_head_dim=spec.qk_rope_head_dim or 0,
            q_lora_rank=config_int(cfg, "q_lora_rank", 0, source=spec.model_name),
            num_experts=experts,
            experts_per_token=spec.experts_per_token or (1 if experts else 0),
            moe_intermediate_size=max(1, moe_i // tp) if experts else 0,
            shared_intermediate_size=(spec.num_shared_experts or 0) * moe_i // tp,
            dense_layers=min(dense_layers, spec.num_layers),
            kv_bytes_per_token_per_layer=tuple(per_layer_kv),
        )
