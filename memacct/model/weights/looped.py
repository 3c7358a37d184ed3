"""Weights of looped models: the physical layers their vLLM 0.33 model files build.

A looped model runs its layers several times, so ``num_hidden_layers`` is not the number of
layers holding weights:

- HRM-Text (``vllm/model_executor/models/hrm_text.py``): two stacks (``L_module``,
  ``H_module``) of ``num_layers_per_stack`` layers each, whatever ``num_hidden_layers`` says
  (the transformers class default, 128, is never read). A layer is a fused
  ``gqkv_proj`` (gate, q, k, v: four times ``heads x head_dim``, MHA), ``o_proj`` and a gated
  MLP; its norms, each stack's ``final_norm``, have no weight (``RMSNorm(has_weight=False)``);
  the model adds ``z_L_init`` (``hidden_size``).
- Dory (``vllm/model_executor/models/dory.py``): ``num_hidden_layers`` physical layers, each
  one sublayer: attention (``qkv_proj``, ``g_proj`` of q size, ``o_proj``, the ``sqk`` and
  ``s_gate`` scales of q size, ``attn_alpha``) where ``layer_types`` is not ``"mlp"``, else a
  gated MLP (``gate_up_proj``, ``down_proj``, ``suv_gate`` and ``suv_up`` of the MLP width,
  ``mlp_alpha``); no norm weights (``justnorm``); the LM head carries a ``logit_scale`` of
  ``vocab_size``. TP 1 only (the model refuses others).
"""

from __future__ import annotations

from typing import Protocol

from memacct.model.config import ModelConfig
from memacct.model.weights.rules import ceil_div, int_of, padded_vocab_per_rank, required_int

__all__ = ["LOOPED_TYPES", "TensorSink", "looped_layers"]


class TensorSink(Protocol):
    """What the layers here are added to (the weight inventory's list of tensors)."""

    def add(self, name: str, role: str, shape: tuple[int, ...], nbytes: int | None = None) -> None:
        """One tensor; ``nbytes`` default: its elements in the model's dtype."""

    def linear(
        self, module: str, out_f: int, in_f: int, role: str, name: str | None = None
    ) -> None:
        """A linear layer's weight on this rank, quantized as the checkpoint says."""

LOOPED_TYPES = frozenset({"hrm_text", "dory"})
"""Model types whose physical layers :func:`looped_layers` builds."""


def _hrm_text(inv: TensorSink, cfg: ModelConfig, h: int, tp: int) -> None:
    per_stack = required_int(cfg, "num_layers_per_stack", "num_layers_per_stack")
    heads = required_int(cfg, "num_attention_heads", "num_attention_heads")
    head_dim = int_of(cfg, "head_dim", default=h // heads) or h // heads
    width = ceil_div(heads * head_dim, tp)
    mlp = ceil_div(required_int(cfg, "intermediate_size", "intermediate_size"), tp)
    for stack in ("L_module", "H_module"):
        for i in range(per_stack):
            p = f"model.{stack}.layers.{i}"
            inv.linear(f"{p}.self_attn.gqkv_proj", 4 * width, h, "attention")
            inv.linear(f"{p}.self_attn.o_proj", h, width, "attention")
            inv.linear(f"{p}.mlp.gate_up_proj", 2 * mlp, h, "mlp")
            inv.linear(f"{p}.mlp.down_proj", h, mlp, "mlp")
    inv.add("model.z_L_init", "embedding", (h,))  # the L stack's initial state


def _dory(inv: TensorSink, cfg: ModelConfig, h: int) -> None:
    layers = required_int(cfg, "num_hidden_layers", "num_hidden_layers")
    kinds = cfg.get("layer_types") or []
    heads = required_int(cfg, "num_attention_heads", "num_attention_heads")
    kv_heads = int_of(cfg, "num_key_value_heads", default=heads) or heads
    head_dim = required_int(cfg, "head_dim", "head_dim")
    q, kv = heads * head_dim, kv_heads * head_dim
    ffn = required_int(cfg, "intermediate_size", "intermediate_size")
    for i in range(layers):
        p = f"backbone.layers.{i}"
        if i < len(kinds) and kinds[i] == "mlp":
            inv.linear(f"{p}.mixer.gate_up_proj", 2 * ffn, h, "mlp")
            inv.linear(f"{p}.mixer.down_proj", h, ffn, "mlp")
            inv.add(f"{p}.mixer.suv", "mlp", (2, ffn))
            inv.add(f"{p}.mlp_alpha", "mlp", (h,))
        else:
            inv.linear(f"{p}.mixer.qkv_proj", q + 2 * kv, h, "attention")
            inv.linear(f"{p}.mixer.g_proj", q, h, "attention")
            inv.linear(f"{p}.mixer.o_proj", h, q, "attention")
            inv.add(f"{p}.mixer.sqk_s_gate", "attention", (2, q))
            inv.add(f"{p}.attn_alpha", "attention", (h,))
    inv.add("lm_head.logit_scale", "lm_head",
            (required_int(cfg, "vocab_size", "vocab_size"),))


def looped_layers(inv: TensorSink, cfg: ModelConfig, h: int, tp: int) -> None:
    """The embedding, untied LM head and physical layers of a looped model
    (``model_type`` in :data:`LOOPED_TYPES`), in the model file's terms."""
    vocab = required_int(cfg, "vocab_size", "vocab_size")
    pv = padded_vocab_per_rank(vocab, tp)
    inv.add("model.embed_tokens.weight", "embedding", (pv, h))
    # HRM-Text ties the head to the embedding where the config says so (transformers'
    # default: tied); Dory's ParallelLMHead is always a tensor of its own.
    if cfg.get("model_type") == "dory" or not cfg.get("tie_word_embeddings", True):
        inv.add("lm_head.weight", "lm_head", (pv, h))
    if cfg.get("model_type") == "hrm_text":
        _hrm_text(inv, cfg, h, tp)
    else:
        _dory(inv, cfg, h)
