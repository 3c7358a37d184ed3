#!/usr/bin/env python3
"""Configs of architectures memacct was not tuned to, for ``golden_vllm.py --grid new``.

Each config is a public one: the defaults of the architecture's transformers config class
(``AutoConfig.for_model(model_type)``, whose docstring names the checkpoint they follow),
with the ``architectures`` entry of its vLLM class, or a published config.json quoted in
full where one was found (``PUBLISHED``), or a published size table applied to the class
defaults (``SIZED``). Written to ``tests/data/golden/models/new/<name>.json`` with
``sources.json`` naming each one's source. Run by hand in the golden venv (transformers
from vLLM's own requirements), never in ``make test``::

    /tmp/vllmenv/bin/python tools/golden_new_archs.py
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "models" / "new"

# name: (transformers model_type, vLLM architecture)
DEFAULTS: dict[str, tuple[str, str]] = {
    "jamba-v0.1": ("jamba", "JambaForCausalLM"),
    "falcon-h1-1.5b-deep": ("falcon_h1", "FalconH1ForCausalLM"),
    "bamba-9b": ("bamba", "BambaForCausalLM"),
    "zamba2-2.7b": ("zamba2", "Zamba2ForCausalLM"),
    "nemotron-3-nano-30b-a3b": ("nemotron_h", "NemotronHForCausalLM"),
    "lfm2-1.2b": ("lfm2", "Lfm2ForCausalLM"),
    "lfm2-8b-a1b": ("lfm2_moe", "Lfm2MoeForCausalLM"),
    "minimax-text-01": ("minimax", "MiniMaxText01ForCausalLM"),
    "kimi-linear-48b-a3b": ("kimi_linear", "KimiLinearForCausalLM"),
    "qwen3-next-default": ("qwen3_next", "Qwen3NextForCausalLM"),
    "mimo-v2-flash": ("mimo_v2_flash", "MiMoV2FlashForCausalLM"),
    "gpt-oss-default": ("gpt_oss", "GptOssForCausalLM"),
    "gemma-2-default": ("gemma2", "Gemma2ForCausalLM"),
    "gemma-3-4b": ("gemma3_text", "Gemma3ForCausalLM"),
    "gemma-3n-e4b-default": ("gemma3n_text", "Gemma3nForCausalLM"),
    "cohere2-default": ("cohere2", "Cohere2ForCausalLM"),
    "llama-4-scout-text": ("llama4_text", "Llama4ForCausalLM"),
    "deepseek-v3-default": ("deepseek_v3", "DeepseekV3ForCausalLM"),
    "glm-4-default": ("glm4", "Glm4ForCausalLM"),
    "glm-4.5": ("glm4_moe", "Glm4MoeForCausalLM"),
    "ernie-4.5-0.3b": ("ernie4_5", "Ernie4_5ForCausalLM"),
    "ernie-4.5-21b-a3b": ("ernie4_5_moe", "Ernie4_5_MoeForCausalLM"),
    "hunyuan-7b": ("hunyuan_v1_dense", "HunYuanDenseV1ForCausalLM"),
    "hunyuan-a13b": ("hunyuan_v1_moe", "HunYuanMoEV1ForCausalLM"),
    "olmo-2-7b": ("olmo2", "Olmo2ForCausalLM"),
    "olmo-3-7b": ("olmo3", "Olmo3ForCausalLM"),
    "exaone-4.0-32b": ("exaone4", "Exaone4ForCausalLM"),
    "smollm3-3b": ("smollm3", "SmolLM3ForCausalLM"),
    "seed-oss-36b": ("seed_oss", "SeedOssForCausalLM"),
    "apertus-8b": ("apertus", "ApertusForCausalLM"),
    "phi-3-mini": ("phi3", "Phi3ForCausalLM"),
    "qwen3-moe-default": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    "minimax-m2": ("minimax_m2", "MiniMaxM2ForCausalLM"),
    "falcon-mamba-default": ("falcon_mamba", "FalconMambaForCausalLM"),
    # vLLM 0.33's 2026 architectures (issue 27).
    "qwen3.5-default": ("qwen3_5_text", "Qwen3_5ForCausalLM"),
    "qwen3.5-moe-default": ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM"),
    "gemma-4-default": ("gemma4_text", "Gemma4ForCausalLM"),
    "glm-4.7-flash-default": ("glm4_moe_lite", "Glm4MoeLiteForCausalLM"),
    "olmo-hybrid-default": ("olmo_hybrid", "OlmoHybridForCausalLM"),
    "exaone-moe-default": ("exaone_moe", "ExaoneMoeForCausalLM"),
    "cohere2-moe-default": ("cohere2_moe", "Cohere2MoeForCausalLM"),
    "laguna-default": ("laguna", "LagunaForCausalLM"),
    "afmoe-default": ("afmoe", "AfmoeForCausalLM"),
    "hy-v3-default": ("hy_v3", "HYV3ForCausalLM"),
    "hyperclovax-default": ("hyperclovax", "HyperCLOVAXForCausalLM"),
    "mamba-default": ("mamba", "MambaForCausalLM"),
    "mamba2-default": ("mamba2", "Mamba2ForCausalLM"),
    "deepseek-v3.2-default": ("deepseek_v32", "DeepseekV32ForCausalLM"),
    "glm-5-default": ("glm_moe_dsa", "GlmMoeDsaForCausalLM"),
    "llama-nvfp4-kv-fp8": ("llama", "LlamaForCausalLM"),
    "axk1-default": ("axk1", "AXK1ForCausalLM"),
    # Looped models: one cache per (layer, run) (memacct/model/loop_layouts.py).
    "hrm-text-default": ("hrm_text", "HrmTextForCausalLM"),
    "muse-glimmer-default": ("muse_glimmer", "MuseGlimmerForCausalLM"),
    "step-3.5-default": ("step3p5", "Step3p5ForCausalLM"),
    # Multimodal wrappers: the text part through its backbone's rule (memacct/model/mm_text.py).
    "gemma-4-mm-default": ("gemma4", "Gemma4ForConditionalGeneration"),
    "lfm2-vl-default": ("lfm2_vl", "Lfm2VlForConditionalGeneration"),
    "gemma-4-unified-default": ("gemma4_unified", "Gemma4UnifiedForConditionalGeneration"),
    "exaone-4.5-default": ("exaone4_5", "Exaone4_5_ForConditionalGeneration"),
    "qwen3-asr-default": ("qwen3_asr", "Qwen3ASRForConditionalGeneration"),
    "glm-ocr-default": ("glm_ocr", "GlmOcrForConditionalGeneration"),
    "minicpm-v-4.6-default": ("minicpmv4_6", "MiniCPMV4_6ForConditionalGeneration"),
    # Intern-S2-Mobius: its config class is remote code; Qwen3.5-MoE's class (the text and
    # vision sections interns2_mobius.py reads) with the two keys of its own (SECTION_FIXES).
    "interns2-mobius-synthetic": ("qwen3_5_moe", "InternS2MobiusForConditionalGeneration"),
    # Encoder-decoders: the decoder's self and cross attention (memacct/model/mm_rules.py).
    "whisper-default": ("whisper", "WhisperForConditionalGeneration"),
    "diffusion-gemma-default": ("diffusion_gemma", "DiffusionGemmaForBlockDiffusion"),
}

# vLLM's own config classes (vllm/transformers_utils/configs/), for architectures transformers
# has no class for: name -> (module, class, vLLM architecture).
VLLM_CLASSES: dict[str, tuple[str, str, str]] = {
    "step-3-text-default": ("vllm.transformers_utils.configs.step3_vl", "Step3TextConfig",
                            "Step3TextForCausalLM"),
    "dory-default": ("vllm.transformers_utils.configs.dory", "DoryConfig", "DoryForCausalLM"),
    "hy-v4-default": ("vllm.transformers_utils.configs.hy_v4", "HYV4Config", "HYV4ForCausalLM"),
    "minimax-m3-default": ("vllm.transformers_utils.configs.minimax_m3", "MiniMaxM3Config",
                           "MiniMaxM3SparseForCausalLM"),
    "inkling-local": ("vllm.models.inkling.configs", "InklingModelConfig", "InklingForCausalLM"),
    "beam-default": ("vllm.transformers_utils.configs.beam", "BeamConfig", "BeamForCausalLM"),
    "dory-looped": ("vllm.transformers_utils.configs.dory", "DoryConfig", "DoryForCausalLM"),
}

# Architectures whose config class is the checkpoint's remote code (no published config here):
# LlamaConfig's defaults with the keys vLLM's model file reads, read by golden_vllm.py
# --generic-configs as a plain PretrainedConfig. name -> (model type, architecture, keys).
_LAYERS8 = {"num_hidden_layers": 8, "max_position_embeddings": 32768}
_MOE = {"num_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 1024,
        "num_shared_experts": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
        "routed_scaling_factor": 1.0, "moe_router_enable_expert_bias": True}
_MLA = {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128}
SYNTHETIC: dict[str, tuple[str, str, dict[str, Any]]] = {
    "step1-synthetic": ("step1", "Step1ForCausalLM", {**_LAYERS8, "num_attention_groups": 4}),
    "param2moe-synthetic": ("param2moe", "Param2MoEForCausalLM", {
        **_LAYERS8, **_MOE, "head_dim": 128, "first_k_dense_replace": 1, "use_qk_norm": True,
        "moe_shared_expert_intermediate_size": 1024, "score_function": "sigmoid",
        "rope_theta": 10000.0}),
    "openpangu-embedded-synthetic": ("openpangu", "PanguEmbeddedForCausalLM", {
        **_LAYERS8, "interleaved_sliding_window": [4096, None], "rope_theta": 10000.0,
        "bias": False, "qkv_bias": False, "sandwich_norm": False}),
    "bailing-v2.5-synthetic": ("bailing_moe_linear", "BailingMoeV2_5ForCausalLM", {
        **_LAYERS8, **_MOE, **_MLA, "layer_group_size": 4, "first_k_dense_replace": 1,
        "moe_shared_expert_intermediate_size": 1024, "score_function": "sigmoid",
        "attention_type": "mla", "router_dtype": "fp32", "use_bias": False,
        "use_qkv_bias": False, "use_linear_silu": False, "linear_silu": False,
        "partial_rotary_factor": 1.0, "rope_theta": 10000.0}),
    "alice-ai-synthetic": ("alice_ai", "AliceAIForCausalLM", {
        **_LAYERS8, **_MOE, "head_dim": 128, "shared_expert_intermediate_size": 1024,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"] +
                       ["linear_attention"] * 3 + ["full_attention"],
        "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "kda_allow_negative_eigenvalues": False, "router_score_function": "sigmoid",
        "router_bias_correction": True, "block_attn_res_block_size": 4}),
    "sarvam-mla-synthetic": ("sarvam", "SarvamMLAForCausalLM", {
        **_LAYERS8, **_MOE, **_MLA, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "moe_shared_expert_intermediate_size": 1024, "score_function": "sigmoid",
        "router_dtype": "fp32", "embedding_dropout": 0.0}),
    # Rnj1 and Step-1: vLLM's fp8 rows agree (24 of 24 each); their bf16 rows fail to build
    # in the emulation ("Chunked attention with lookback requires the Triton backend",
    # "use_alibi_sqrt is not supported by backend FLASH_ATTN"), so the table leaves them out.
    "rnj1-synthetic": ("rnj1", "Rnj1ForCausalLM", {
        **_LAYERS8, "head_dim": 128, "sliding_window": 4096,
        "layer_types": ["chunked_attention", "chunked_attention", "chunked_attention",
                        "full_attention"] * 2,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "query_pre_attn_scalar": 128, "final_logit_softcapping": None,
        "hidden_activation": "gelu_pytorch_tanh"}),
    # head_dim 96 is not hidden_size // num_attention_heads (128): iquest_loopcoder.py uses
    # the latter; sliding_window 4096 with no layer_types: loop 0 slides (CacheConfig's).
    "iquest-loopcoder-synthetic": ("iquest_loopcoder", "IQuestLoopCoderForCausalLM", {
        **_LAYERS8, "loop_num": 3, "loop_window_size": 64, "head_dim": 96, "sliding_window": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    "iquest-loopcoder-full-synthetic": ("iquest_loopcoder", "IQuestLoopCoderForCausalLM", {
        **_LAYERS8, "loop_num": 2, "loop_window_size": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    # Every layer MoE (decoder_sparse_step 1) with MoVA attention but layer 0 (mlp_only_layers):
    # both attention classes of k2_horizon.py build the same standard Attention.
    "k2-horizon-synthetic": ("k2_horizon", "K2HorizonForCausalLM", {
        **_LAYERS8, "head_dim": 128, "rope_head_dim": 64, "num_experts": 16,
        "num_experts_per_tok": 2, "moe_intermediate_size": 1024, "num_shared_experts": 1,
        "decoder_sparse_step": 1, "mlp_only_layers": [0], "mova_num_experts": 4,
        "mova_num_experts_per_tok": 2, "moe_gate_bias": True, "router_score_func": "sigmoid",
        "router_scaling_factor": 1.0, "norm_topk_prob": True, "query_key_norm": True,
        "attention_gate_func": "sigmoid", "layernorm_num_groups": 1,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    # Windows (511, 0): 512 keys; full layers (-1, -1) of head_dim 128 (transformers'
    # heterogeneous per_layer_config overrides), sliding ones of the global 64.
    "domyn-edge-synthetic": ("domyn_edge", "DomynEdgeForCausalLM", {
        **_LAYERS8, "num_key_value_heads": 8,
        "window_sizes": [[511, 0], [511, 0], [511, 0], [-1, -1]] * 2,
        "head_dim": 64, "per_layer_config": {"3": {"head_dim": 128}, "7": {"head_dim": 128}},
        "position_layers": ["rope", "rope", "rope", "nope"] * 2,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    "plamo3-synthetic": ("plamo3", "Plamo3ForCausalLM", {
        **_LAYERS8, "head_dim": 128, "sliding_window": [2048, 2048, 2048, None] * 2,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"] +
                       ["sliding_attention"] * 3 + ["full_attention"],
        "interleaved_sliding_window": [2048, 2048, 2048, None] * 2,
        "sliding_window_pattern": 4, "rope_local_theta": 10000}),
}

# Keys a config states through another (a period instead of the list): left out of the
# class's to_dict so the config carries only the key its checkpoint writes.
DROPS: dict[str, tuple[str, ...]] = {
    # AfmoeConfig derives layer_types from global_attn_every_n_layers (every 4th full).
    "afmoe-default": ("layer_types",),
    # Gemma4TextConfig derives per_layer_config from global_head_dim and layer_types.
    "gemma-4-default": ("per_layer_config",),
}

# Keys a class's defaults leave out that its published checkpoint sets.
FIXES: dict[str, dict[str, Any]] = {
    "glm-4.5": {"head_dim": 128},
    "minimax-m2": {"rotary_dim": 64, "scoring_func": "sigmoid"},
    "hunyuan-7b": {"head_dim": 128},
    "hunyuan-a13b": {"head_dim": 128},
    # Keys vLLM's model file reads that the class leaves out; none shapes the KV cache.
    "afmoe-default": {"score_func": "sigmoid", "route_norm": True, "route_scale": 1.0,
                      "n_group": 1, "topk_group": 1},
    "glm-4.7-flash-default": {"first_k_dense_replace": 1},
    # A ModelOpt NVFP4 checkpoint's quantization_config with an FP8 kv_cache_scheme (the
    # shape vLLM's utils/torch_utils.py get_kv_cache_quant_algo_string reads).
    "llama-nvfp4-kv-fp8": {"torch_dtype": "bfloat16", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False},
        "ignore": ["lm_head"]}},
    "step-3.5-default": {"need_fp32_gate": True, "norm_expert_weight": True,
                         "use_moe_router_bias": True, "rope_theta": 10000.0,
                         "swiglu_limits": [0.0] * 45, "swiglu_limits_shared": [0.0] * 45},
    "hy-v3-default": {"first_k_dense_replace": 1, "expert_hidden_dim": 1536,
                      "route_norm": True},
    # step3_text.py splits a string; Step3TextConfig's default is a tuple of the same layers.
    "step-3-text-default": {"moe_layers_enum": ",".join(str(i) for i in range(4, 60))},
    "lfm2-1.2b": {"block_dim": 2048, "block_ff_dim": 12288, "block_multiple_of": 256,
                  "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True},
}
FIXES["dory-looped"] = {"n_input_layers": 8, "n_recurrent_layers": 56, "n_output_layers": 8,
                        "n_recurrent_loops": 3}
FIXES["inkling-local"] = {"local_layer_ids": [i for i in range(16) if i % 4 != 3],
                          "n_routed_experts": 16, "num_experts_per_tok": 2, "n_shared_experts": 1,
                          "shared_expert_sink": True, "torch_dtype": "bfloat16"}
FIX_SOURCES = {
    "interns2-mobius-synthetic": "synthetic: Intern-S2-Mobius's config class is remote code "
                                 "(no published config here); Qwen3.5-MoE's sections with "
                                 "text_config.num_blocks 4 (interns2_mobius.py's MoE banks)",
    "inkling-local": "local_layer_ids (every layer but each 4th slides), 16 routed experts "
                     "(top 2), one shared expert with its sink, bfloat16 set: the class "
                     "defaults have no local layers and no experts, which inkling's MoE "
                     "asserts; the conv state is bfloat16 only",
    "dory-looped": "8 input, 56 recurrent (3 loops, a cache per loop), 8 output layers set "
                   "(DoryConfig's default is one loop over all 72)",
    "glm-4.5": "head_dim 128 from zai-org/GLM-4.5's config.json (Glm4MoeConfig has no "
               "head_dim default)",
    "minimax-m2": "rotary_dim 64 and scoring_func sigmoid from MiniMaxAI/MiniMax-M2's "
                  "config.json (no class defaults)",
    "hunyuan-7b": "head_dim 128 from tencent/Hunyuan-7B-Instruct's config.json (the class "
                  "default is None)",
    "hunyuan-a13b": "head_dim 128 from tencent/Hunyuan-A13B-Instruct's config.json (the class "
                    "default is None)",
    "afmoe-default": "score_func, route_norm, route_scale, n_group, topk_group set "
                     "(vLLM's afmoe.py reads them, AfmoeConfig has none; the router's, "
                     "not the KV cache's)",
    "glm-4.7-flash-default": "first_k_dense_replace 1 (vLLM's glm4_moe_lite.py reads it, "
                             "Glm4MoeLiteConfig has none; MLP, not KV cache)",
    "hy-v3-default": "first_k_dense_replace 1, expert_hidden_dim 1536 (the class's "
                     "moe_intermediate_size), route_norm true: vLLM's hy_v3.py reads them, "
                     "HYV3Config has none; MLP and router, not KV cache",
    "llama-nvfp4-kv-fp8": "a ModelOpt NVFP4 quantization_config with an FP8 kv_cache_scheme "
                          "(the keys vLLM's get_kv_cache_quant_algo_string reads) on the "
                          "class defaults",
    "step-3.5-default": "need_fp32_gate, norm_expert_weight, use_moe_router_bias, rope_theta, "
                        "swiglu_limits(_shared) set: vLLM's step3p5.py reads them, "
                        "Step3p7TextConfig has none; router and MLP, not KV cache",
    "step-3-text-default": "moe_layers_enum written as the comma-separated string "
                           "step3_text.py parses (the class default is the tuple 4..59)",
    "lfm2-1.2b": "block_* sizes from LiquidAI/LFM2-1.2B's config.json (vLLM's lfm2.py reads "
                 "them; Lfm2Config has none)",
}

# Composite configs: a section the class leaves None (Gemma 4's towers) filled with that
# section class's defaults, keys set or dropped inside a section as the top-level FIXES and
# DROPS do. name -> {section: transformers class}, {section: {key: value}}, {section: keys}.
SECTIONS: dict[str, dict[str, str]] = {
    "gemma-4-mm-default": {"vision_config": "Gemma4VisionConfig",
                           "audio_config": "Gemma4AudioConfig"},
    "gemma-4-unified-default": {"vision_config": "Gemma4UnifiedVisionConfig",
                                "audio_config": "Gemma4UnifiedAudioConfig"},
}
SECTION_FIXES: dict[str, dict[str, dict[str, Any]]] = {
    # LiquidAI/LFM2-VL-1.6B's language model is LFM2-1.2B: its block_* sizes.
    "lfm2-vl-default": {"text_config": FIXES["lfm2-1.2b"]},
    # interns2_mobius.py: num_blocks MoE banks shared round-robin by the layers (MLP, no
    # cache); layer_scale read with getattr (default off).
    "interns2-mobius-synthetic": {"text_config": {"num_blocks": 4}},
}
SECTION_DROPS: dict[str, dict[str, tuple[str, ...]]] = {
    name: {"text_config": ("per_layer_config",)}
    for name in ("gemma-4-mm-default", "gemma-4-unified-default")
}


def fill_sections(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with :data:`SECTIONS`, :data:`SECTION_FIXES` and :data:`SECTION_DROPS`."""
    import transformers

    out = dict(data)
    for section, cls in SECTIONS.get(name, {}).items():
        if out.get(section) is None:
            out[section] = getattr(transformers, cls)().to_dict()
    for section, keys in SECTION_FIXES.get(name, {}).items():
        out[section] = {**out[section], **keys}
    for section, keys in SECTION_DROPS.get(name, {}).items():
        out[section] = {k: v for k, v in out[section].items() if k not in keys}
    for section in ("text_config", "vision_config", "audio_config"):
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items()
                            if k not in ("transformers_version", "id2label", "label2id")}
    return out


# Published config.json files, quoted (the keys that are not tokenizer ids).
PUBLISHED: dict[str, tuple[str, dict[str, Any]]] = {
    "jamba-1.5-mini": (
        "https://huggingface.co/ai21labs/AI21-Jamba-1.5-Mini/blob/main/config.json "
        "(quoted in full in a public test helper found by the code search)",
        {"architectures": ["JambaForCausalLM"], "attention_dropout": 0.0,
         "attn_layer_offset": 4, "attn_layer_period": 8, "expert_layer_offset": 1,
         "expert_layer_period": 2, "hidden_act": "silu", "hidden_size": 4096,
         "initializer_range": 0.02, "intermediate_size": 14336, "mamba_conv_bias": True,
         "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256, "mamba_expand": 2,
         "mamba_proj_bias": False, "max_position_embeddings": 262144, "model_type": "jamba",
         "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2,
         "num_hidden_layers": 32, "num_key_value_heads": 8, "num_logits_to_keep": 1,
         "output_router_logits": False, "rms_norm_eps": 1e-06,
         "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False,
         "torch_dtype": "bfloat16", "use_cache": True, "use_mamba_kernels": False,
         "vocab_size": 65536}),
}

_FALCON_H1_TABLE = ("transformers' FalconH1 model doc size table (docs v5.0.0rc1 "
                    "model_doc/falcon_h1.md) on FalconH1Config defaults")
# Published size tables applied to a class's defaults: name -> (base, source, overrides).
SIZED: dict[str, tuple[str, str, dict[str, Any]]] = {
    "whisper-large-v3-turbo": ("whisper", "openai/whisper-large-v3-turbo's sizes (d_model "
                               "1280, 32 encoder and 4 decoder layers of 20 heads, 128 mel "
                               "bins, vocabulary 51866), as public code quotes them "
                               "(ooples/AiDotNet WhisperLargeV3TurboOptions), float16; "
                               "num_hidden_layers 32 as WhisperConfig writes it (the "
                               "encoder's)", {
        "d_model": 1280, "encoder_layers": 32, "decoder_layers": 4,
        "encoder_attention_heads": 20, "decoder_attention_heads": 20, "encoder_ffn_dim": 5120,
        "decoder_ffn_dim": 5120, "num_mel_bins": 128, "vocab_size": 51866,
        "num_hidden_layers": 32, "torch_dtype": "float16"}),
    "falcon-h1-0.5b": ("falcon_h1", _FALCON_H1_TABLE, {
        "num_hidden_layers": 36, "hidden_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 2, "mamba_n_heads": 24, "head_dim": 64, "mamba_d_head": 64,
        "mamba_d_ssm": 1536, "mamba_d_state": 128, "max_position_embeddings": 16384}),
    "falcon-h1-7b": ("falcon_h1", _FALCON_H1_TABLE, {
        "num_hidden_layers": 44, "hidden_size": 3072, "num_attention_heads": 12,
        "num_key_value_heads": 2, "mamba_n_heads": 24, "head_dim": 128, "mamba_d_head": 128,
        "mamba_d_ssm": 3072, "mamba_d_state": 256, "max_position_embeddings": 262144}),
}


def class_defaults(model_type: str) -> tuple[dict[str, Any], str]:
    from transformers import AutoConfig, __version__

    config = AutoConfig.for_model(model_type)
    match = re.search(r"\[([\w.\-]+/[\w.\-]+)\]", type(config).__doc__ or "")
    follows = f", which follow {match.group(1)}" if match else ""
    data = config.to_dict()
    # transformers 5 derives some counts (Nemotron-H's layers, from its pattern): written.
    if "num_hidden_layers" not in data and hasattr(config, "num_hidden_layers"):
        data["num_hidden_layers"] = config.num_hidden_layers
    for key in ("transformers_version", "_name_or_path", "id2label", "label2id"):
        data.pop(key, None)
    return data, f"transformers {__version__} {type(config).__name__} defaults{follows}"


def vllm_class_defaults(module: str, cls: str) -> tuple[dict[str, Any], str]:
    """The defaults of one of vLLM's config classes (vLLM's source on ``sys.path``)."""
    import importlib
    import sys

    sys.path.insert(0, "/tmp/vllm033/src")
    config = getattr(importlib.import_module(module), cls)()
    data = config.to_dict()
    for key in ("transformers_version", "_name_or_path", "id2label", "label2id"):
        data.pop(key, None)
    path = module.replace(".", "/") + ".py"
    return data, f"vLLM 0.33 {cls} defaults ({path})"


# Checkpoints whose text model sits in a section of its own (memacct/model/config.py
# NESTED_TEXT_SECTIONS): that section written with a vLLM config class's __init__ defaults
# (the checkpoint's own key names). name -> (model type, architecture, path, module, class,
# keys set over the defaults).
NESTED: dict[str, tuple[str, str, tuple[str, ...], str, str, dict[str, Any]]] = {
    "moondream3-default": ("moondream3", "HfMoondream", ("config", "text"),
                           "vllm.transformers_utils.configs.moondream3", "Moondream3TextConfig",
                           {}),
    "moondream3-gqa": ("moondream3", "Moondream3ForCausalLM", ("config", "text"),
                       "vllm.transformers_utils.configs.moondream3", "Moondream3TextConfig",
                       {"n_kv_heads": 8, "max_context": 32768}),
}


def init_defaults(module: str, cls: str) -> dict[str, Any]:
    """The ``__init__`` defaults of one of vLLM's config classes (``None`` ones left out)."""
    import importlib
    import inspect
    import sys

    sys.path.insert(0, "/tmp/vllm033/src")
    params = inspect.signature(getattr(importlib.import_module(module), cls).__init__).parameters
    return {k: p.default for k, p in params.items()
            if p.default is not inspect.Parameter.empty and p.default is not None}


def nested_configs() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """:data:`NESTED`'s configs and their sources."""
    configs: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    for name, (model_type, arch, path, module, cls, keys) in NESTED.items():
        section: dict[str, Any] = {**init_defaults(module, cls), **keys}
        for part in reversed(path):
            section = {part: section}
        configs[name] = {"architectures": [arch], "model_type": model_type,
                         "torch_dtype": "bfloat16", **section}
        sources[name] = (f"vLLM 0.33 {cls}.__init__ defaults ({module.replace('.', '/')}.py) "
                         f"written under {'.'.join(path)}, bfloat16"
                         + (f"; set over them: {keys}" if keys else ""))
    return configs, sources


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    sources: dict[str, str] = {}
    configs: dict[str, dict[str, Any]] = {}
    for name, (model_type, arch) in DEFAULTS.items():
        try:
            data, source = class_defaults(model_type)
        except (KeyError, ValueError) as exc:
            print(f"{name}: {model_type} unknown to this transformers ({exc}); skipped")
            continue
        data = {k: v for k, v in data.items() if k not in DROPS.get(name, ())}
        data = fill_sections(name, data)
        configs[name] = {**data, **FIXES.get(name, {}), "architectures": [arch]}
        sources[name] = source + (f"; {FIX_SOURCES[name]}" if name in FIX_SOURCES else "")
        if name in SECTIONS or name in SECTION_FIXES:
            sources[name] += (f"; sections {SECTIONS.get(name) or ''}"
                              f"{SECTION_FIXES.get(name) or ''} filled")
        if name in DROPS:
            sources[name] += f"; {', '.join(DROPS[name])} left to the class to derive"
    for name, (module, cls, arch) in VLLM_CLASSES.items():
        data, source = vllm_class_defaults(module, cls)
        configs[name] = {**data, **FIXES.get(name, {}), "architectures": [arch]}
        sources[name] = source + (f"; {FIX_SOURCES[name]}" if name in FIX_SOURCES else "")
    for name, (model_type, arch, keys) in SYNTHETIC.items():
        data, defaults = class_defaults("llama")
        configs[name] = {**data, **keys, "model_type": model_type, "architectures": [arch]}
        sources[name] = (f"synthetic: {defaults} with the keys vLLM's {model_type}.py reads "
                         f"(its config class is remote code; no published config here)")
    for name, (base, source, overrides) in SIZED.items():
        data, defaults = class_defaults(base)
        arch = next(a for m, a in DEFAULTS.values() if m == base)
        configs[name] = {**data, **overrides, "architectures": [arch]}
        sources[name] = f"{source} ({defaults})"
    for name, (source, data) in PUBLISHED.items():
        configs[name] = data
        sources[name] = source
    nested, nested_sources = nested_configs()
    configs.update(nested)
    sources.update(nested_sources)
    for name, data in configs.items():
        # A class default that is not a finite number (Mamba-2's time_step_limit upper
        # bound, inf) is left to the class: plain JSON cannot carry it.
        finite = {k: v for k, v in data.items() if _finite(v)}
        (OUT / f"{name}.json").write_text(json.dumps(finite, indent=1, sort_keys=True) + "\n")
    (OUT / "sources.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(configs)} configs to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
