"""The config keys that shape a model's layers, and which of them each rule reads.

A rule (:mod:`memacct.model.arch_rules`) must read every key the engine's model file
reads that changes which layers keep a cache and how large it is: layer kinds, windows,
interleave periods, heads and head sizes, latent ranks, recurrent-state shapes, per-layer
lists. :data:`LAYER_SHAPING` recognises such a key by its name; :func:`rule_reads` is what
a rule reads; :data:`NOT_CACHE_SHAPING` names the keys that look layer-shaping but change
no cache (each with the reason, read in vLLM 0.33's model files). ``tests/test_config_keys.py``
checks every rule against the keys vLLM's model files read
(``tests/data/config_keys/vllm-0.33.json``, written by ``tools/vllm_config_keys.py``), and
a config carrying a layer-shaping key its rule does not read gets a warning naming it
(:func:`memacct.model.arch_rules.unread_geometry_fields`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "COMMON_READS",
    "GDN_KEYS",
    "LAYER_SHAPING",
    "LAYOUT_READS",
    "MAMBA1_KEYS",
    "MAMBA2_KEYS",
    "MODULE_NOT_CACHE_SHAPING",
    "NOT_CACHE_SHAPING",
    "REFUSED_WITH",
    "is_layer_shaping",
    "rule_reads",
]

# A key whose name says it shapes layers or their cache.
LAYER_SHAPING = re.compile(
    r"(layer_types|window|head_dim|kv_heads|key_value_heads|lora_rank|rope_head_dim|interval"
    r"|pattern|every_n|mamba|ssm|conv|state_size|linear_|block_configs|per_layer|kv_shar"
    r"|attn_type|block_type|hybrid|swa_|chunk|no_rope|nope|index_|kda|cla_|use_cla"
    r"|attention_groups|multi_query|kv_n_heads|^n_head|global_attn|full_attn|attn_layer)"
)

# Read by every rule: memacct/model/geometry.py (heads, head size, KV heads and their
# aliases, MLA latent) and the decoder layout's window keys (memacct/model/layouts.py).
COMMON_READS = frozenset({
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_attention_heads", "n_head",
    "n_heads", "hidden_size", "n_embd", "d_model", "num_key_value_heads", "num_kv_heads",
    "n_head_kv", "multi_query_group_num", "multi_query_attention", "multi_query",
    "new_decoder_architecture", "attn_config", "head_dim", "attention_head_dim",
    "kv_lora_rank", "qk_rope_head_dim", "sliding_window", "layer_types", "use_sliding_window",
    "max_window_layers", "sliding_window_pattern", "attention_chunk_size",
    "num_kv_shared_layers", "mamba_ssm_dtype", "mamba_ssm_cache_dtype",
})  # fmt: skip

# memacct/model/states.py, as mamba_utils.py's state shapes read them.
GDN_KEYS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim")
MAMBA2_KEYS = ("mamba_n_heads", "mamba_num_heads", "n_mamba_heads", "num_heads", "mamba_d_head",
               "mamba_head_dim", "mamba_headdim", "mamba_d_state", "ssm_state_size",
               "state_size", "mamba_n_groups", "n_groups", "mamba_ngroups", "mamba_d_conv",
               "conv_kernel", "mamba_expand", "expand", "mamba_d_ssm")
MAMBA1_KEYS = ("mamba_d_state", "state_size", "mamba_d_conv", "conv_kernel", "mamba_expand",
               "intermediate_size")

# Keys each layout reads beyond the common ones (memacct/model/layouts.py).
LAYOUT_READS: dict[str, frozenset[str]] = {
    "llama4": frozenset({"no_rope_layers", "no_rope_layer_interval"}),
    "nemotron_h": frozenset({"hybrid_override_pattern", "layers_block_type", *MAMBA2_KEYS}),
    "jamba": frozenset({"attn_layer_period", "attn_layer_offset", "layers_block_type",
                        *MAMBA1_KEYS}),
    "bamba": frozenset({"attn_layer_indices", *MAMBA2_KEYS}),
    "falcon_h1": frozenset(MAMBA2_KEYS),
    "mimo_v2_flash": frozenset({"hybrid_layer_pattern", "sliding_window_size"}),
    "minimax": frozenset({"attn_type_list"}),
    "zamba2": frozenset({"layers_block_type", *MAMBA2_KEYS}),
    # is_kda_layer / is_linear_attn: KimiLinearConfig's methods over linear_attn_config.
    "kimi_linear": frozenset({"linear_attn_config", "is_kda_layer", "is_linear_attn"}),
    "lfm2": frozenset({"conv_L_cache", "conv_dim"}),
    "gemma4": frozenset({"use_bidirectional_attention"}),
    "sparse_mla": frozenset({"index_topk", "index_head_dim", "index_topk_freq",
                             "index_topk_pattern", "index_skip_topk_offset"}),
    "mamba": frozenset(MAMBA1_KEYS),
    "mamba2": frozenset(MAMBA2_KEYS),
}

# Keys that match LAYER_SHAPING but change no cache, with why (vLLM 0.33's model files).
NOT_CACHE_SHAPING: dict[str, str] = {
    "q_lora_rank": "MLA's query compression: the cache keeps only the KV latent",
    "qk_nope_head_dim": "MLA's query/key part without RoPE: absorbed, not cached",
    "qk_nope_dim": "MLA's query/key part without RoPE (openPangu's name): not cached",
    "mla_use_nope": "MLA's query path",
    "mamba_conv_bias": "a bias of the conv weights, not the conv state",
    "use_conv_bias": "a bias of the conv weights, not the conv state",
    "conv_bias": "a bias of the conv weights, not the conv state",
    "mamba_proj_bias": "biases of the projection weights",
    "mamba_rms_norm": "a norm inside the mixer",
    "mamba_hidden_act": "the mixer's activation",
    "mamba_dt_rank": "the rank of the dt projection (weights), not the state",
    "mamba_chunk_size": "the scan's chunking, not the state",
    "chunk_size": "Mamba-2's scan chunking, not the state",
    "ssm_in_multiplier": "a scaling factor (Falcon-H1)",
    "ssm_out_multiplier": "a scaling factor (Falcon-H1)",
    "ssm_multipliers": "scaling factors (Falcon-H1)",
    "mlp_layer_types": "dense or MoE MLP per layer: no cache",
    "moe_layer_interval": "which layers route to experts: no cache",
    "hidden_size_per_layer_input": "Gemma's per-layer input embeddings (weights)",
    "vocab_size_per_layer_input": "Gemma's per-layer input embeddings (weights)",
    "activation_sparsity_pattern": "Gemma-3n's MLP activation sparsity",
    "activation_situ_linear_beta": "an activation parameter",
    "swa_rope_parameters": "the sliding layers' RoPE, not their cache",
    "swa_rope_theta": "the sliding layers' RoPE, not their cache",
    "swa_attention_sink_enabled": "attention-sink logits, no cached token",
    "add_swa_attention_sink_bias": "attention-sink logits, no cached token",
    "swa_num_attention_heads": "query heads of the sliding layers: not cached",
    "num_attention_heads_per_layer": "query heads per layer (Laguna): not cached",
    "dual_chunk_attention_config": "dual-chunk attention changes the kernel, not the spec",
    "mtp_layer_types": "the multi-token-prediction layer's kind: drafts are not planned",
    "mtp_sliding_windows": "the multi-token-prediction layer's window: drafts are not planned",
    "mtp_mlp_layer_types": "the multi-token-prediction layer's MLP: drafts are not planned",
    "prefix_dense_sliding_window_pattern": "Cohere2MoeConfig derives layer_types from it, "
                                           "which a published config writes",
    "linear_attn_config": "read by the Kimi-Linear rule itself",
    "kda_lower_bound": "Kimi delta attention's gate bound, not its state",
    "kda_safe_gate": "Kimi delta attention's gate, not its state",
    "no_kda_lora": "Kimi delta attention's projection weights, not its state",
    "index_topk": "DeepSeek-V3.2's sparse attention: a rule refuses it (refuse_if)",
}


# Per module: keys whose name looks layer-shaping but that change no cache in that file.
MODULE_NOT_CACHE_SHAPING: dict[str, dict[str, str]] = {
    "nemotron_h": {"block_configs": "nemotron_h.py reads it for the largest expert count "
                                    "of puzzle models (MoE), not for layers' caches"},
    "flint": {"no_rope_layer_indices": "layers without RoPE (flint/model.py builds no rotary "
                                       "embedding there); their Attention is the same"},
    # hy_v4: the index_* keys size the indexer cache of sparse (DSA) layers only, and the
    # rule refuses a config whose layer_types lists one.
    "hy_v4": dict.fromkeys(("index_head_dim", "index_n_heads", "index_skip_topk_offset",
                            "index_topk_freq", "index_topk_pattern"),
                           "sparse (DSA) layers only, which the HY-V4 rule refuses"),
    # minimax_m3: only the ROCm model file (amd/model.py) reads these, for cross-layer index
    # sharing; the CUDA one (nvidia/model.py) that this rule follows does not.
    "minimax_m3": dict.fromkeys(("index_skip_topk_offset", "index_topk_freq", "use_index_cache"),
                                "read by minimax_m3/amd/model.py only (ROCm index sharing)"),
    # inkling: InklingModelConfig properties no CUDA model file reads for its cache (every
    # layer has a conv state, as the rule plans), and a ROCm kernel argument.
    "inkling": {**dict.fromkeys(("conv_layer_ids", "linear_layer_ids", "mamba2_cache_params"),
                                "InklingModelConfig properties (all layers convolve); the "
                                "conv state is InklingConvState's spec"),
                "window_left": "an argument of the ROCm attention kernels (amd/ops/gluon)"},
    "k2_horizon": {"rope_head_dim": "the rotary part of each head (k2_horizon.py folds its "
                                    "channel order into q/k): the cache keeps head_dim"},
    # muse_spark: MuseSpark1xAttention reads these only for a DSpark draft (is_draft:
    # MuseSparkDSparkConfig); the target's windows come from layer_types and sliding_window.
    "muse_spark": dict.fromkeys(("every_n_layers_nope", "global_attn_cfg"),
                                "read for the DSpark draft only (drafts are not planned)"),
    "cohere_asr": {"overlap_chunk_second": "how long audio is cut into chunks "
                                           "(get_speech_to_text_config): no cache"},
    "zamba2": {"hybrid_layer_ids": "which shared block a hybrid layer runs (weights); the "
                                   "hybrid layers are those of layers_block_type"},
}


# Keys that only matter once a rule's refuse_if key is set (the rule refuses first).
REFUSED_WITH: dict[str, frozenset[str]] = {
    "param_sink_number": frozenset({"param_sink_of_head_dim"}),
    "index_topk": frozenset({"index_head_dim", "index_n_heads", "index_skip_topk_offset",
                             "index_topk_freq", "index_topk_pattern"}),
}


def is_layer_shaping(key: str) -> bool:
    """Whether ``key`` names something that shapes layers or their cache."""
    return bool(LAYER_SHAPING.search(key)) and key not in NOT_CACHE_SHAPING


def rule_reads(layout: str, reads: Iterable[str], defaults: Iterable[str] = (),
               refuse_if: str | None = None) -> frozenset[str]:
    """The layer-shaping keys a rule reads (or refuses on): the common ones, its layout's,
    its own ``reads`` and the keys it takes the class defaults of."""
    own = {*reads, *defaults, *([refuse_if] if refuse_if else []),
           *REFUSED_WITH.get(refuse_if or "", ())}
    return COMMON_READS | LAYOUT_READS.get(layout, frozenset()) | own
