"""Which rule reads an architecture: vLLM 0.33's model registry mapped to memacct's layouts.

A config's ``architectures[0]`` names the class vLLM loads; vLLM's registry
(``vllm/model_executor/models/registry.py``, shipped here as
``vllm_registry.json``) maps it to a model module. :data:`RULES` maps whole
module families to one layout (:mod:`memacct.model.layouts`), with its
status and source; :data:`REFUSED` says why the others are not planned.
Multimodal modules are read through their text part's ``model_type``.
Nothing is guessed: an architecture without a rule is refused
(:func:`resolve_rule`), unless the caller asks for full attention.
``docs/architectures.md`` is generated from these tables
(``tools/architectures_doc.py``).
"""

from __future__ import annotations

import difflib
from dataclasses import replace

from memacct.errors import ConfigError
from memacct.model.config import ModelConfig
from memacct.model.config_keys import GDN_KEYS, MAMBA2_KEYS, rule_reads
from memacct.model.mm_rules import MM_RULES
from memacct.model.mm_text import MM_REFUSED, MM_TEXT, backbone_module
from memacct.model.rule import Rule
from memacct.model.vllm_tables import engine_keys, module_of, registry, removed

__all__ = [
    "ASSUME_FULL_ATTENTION",
    "REFUSED",
    "RULES",
    "Rule",
    "engine_keys",
    "nearest_family",
    "refusal",
    "registry",
    "resolve_rule",
    "rule_keys",
    "status_of",
    "unread_geometry_fields",
]


# A config carrying this key set to true is planned as full attention when its architecture has
# no rule, on every path that reads it (the CLI's --assume-full-attention sets it).
ASSUME_FULL_ATTENTION = "_memacct_assume_full_attention"

_MODELS = "vllm/model_executor/models"
_MAMBA = "vllm/model_executor/layers/mamba/mamba_utils.py"


def _decoder(module: str) -> Rule:
    return Rule("decoder", "exact", f"{_MODELS}/{module}.py; transformers' config class")


# Decoders whose layers vLLM builds as standard attention, MLA where the config has
# kv_lora_rank, sliding windows from sliding_window / layer_types / the pattern keys,
# KV sharing from num_kv_shared_layers (rules in memacct/model/layouts.py).
_DECODER_MODULES = (
    "afmoe", "apertus", "arcee", "arctic", "baichuan", "bailing_moe", "bloom", "chameleon",
    "chatglm",
    "commandr", "dbrx", "deepseek_v2", "dots1", "ernie45", "ernie45_moe", "exaone", "exaone4",
    "fairseq2_llama", "falcon", "flex_olmo", "gemma", "gemma2", "gemma3", "gemma3n", "glm",
    "glm4", "glm4_moe", "gpt_oss", "gpt2", "gpt_bigcode", "gpt_j", "gpt_neox", "granite",
    "granitemoe", "granitemoeshared", "gritlm", "grok1", "internlm2", "internlm2_ve", "jais",
    "jais2", "llama", "mimo", "minicpm", "minicpm3", "minimax_m2", "mistral_large_3",
    "mixtral", "mpt", "nemotron", "olmo", "olmo2", "olmoe", "opt", "orion", "persimmon",
    "phi", "phi3", "phimoe", "qwen", "qwen2", "qwen2_moe", "qwen2_rm", "qwen3", "qwen3_moe",
    "seed_oss", "solar", "stablelm", "starcoder2", "telechat2", "teleflm",
    # 2026 decoders whose attention is vLLM's standard Attention per layer (read in each
    # model file): sliding from layer_types / sliding_window, the rest full.
    "cohere2_moe", "exaone_moe", "laguna", "hy_v3", "hyperclovax", "param2moe", "rnj1",
    # MLA through kv_lora_rank (SarvamMLA, AXK1: DeepSeek-V2's MLA); SarvamMoE is
    # bailing_moe's standard attention.
    "sarvam", "AXK1",
)  # fmt: skip

def _state(layout: str, module: str, config_class: str, *reads: str, note: str = "") -> Rule:
    """A family with recurrent states: its model file, vLLM's state shapes, the config class."""
    return Rule(layout, "partial" if note else "exact",
                f"{_MODELS}/{module}.py, {_MAMBA}; transformers {config_class}",
                frozenset(reads), note)


RULES: dict[str, Rule] = {
    **{m: _decoder(m) for m in _DECODER_MODULES},
    "qwen3_5": _state("decoder", "qwen3_5", "Qwen3_5TextConfig, Qwen3_5MoeTextConfig",
                      "full_attention_interval", *GDN_KEYS),
    # olmo_hybrid.py: gated delta net where layer_types says linear_attention (the state
    # shape of mamba_utils.gated_delta_net_state_shape), standard attention elsewhere.
    "olmo_hybrid": _state("decoder", "olmo_hybrid", "OlmoHybridConfig", *GDN_KEYS),
    # gemma4.py: per-layer geometry (Gemma4TextConfig.per_layer_config: full layers take
    # global_head_dim and, with attention_k_eq_v, num_global_key_value_heads), windows
    # from layer_types, KV sharing in the last num_kv_shared_layers.
    "gemma4": Rule("gemma4", "exact", f"{_MODELS}/gemma4.py; transformers Gemma4TextConfig",
                   frozenset({"global_head_dim", "num_global_key_value_heads",
                              "attention_k_eq_v", "per_layer_config"}),
                   defaults=(("sliding_window", 512),)),
    # Attention-free: a state in every layer (mamba.py, mamba2.py; FalconMamba is mamba.py).
    # vLLM 0.33 builds their states with mamba_cache_mode "none" (one block a request).
    "mamba": replace(_state("mamba", "mamba", "MambaConfig, FalconMambaConfig"),
                     prefix_caching=False),
    # Mamba2ForCausalLM is not SupportsPP (mamba2.py).
    "mamba2": replace(_state("mamba2", "mamba2", "Mamba2Config"), prefix_caching=False,
                      pipeline_parallel=False),
    # vllm/models/deepseek_v32 (DeepSeek-V3.2, GLM-5's GlmMoeDsa): sparse MLA and an
    # indexer K cache per layer (layouts._sparse_mla, layers.SparseIndexerCache).
    "deepseek_v32": Rule("sparse_mla", "exact", "vllm/models/deepseek_v32/attention.py, "
                         f"{_MODELS}/deepseek_v2.py (Indexer, DeepseekV32IndexerCache); "
                         "transformers DeepseekV32Config, GlmMoeDsaConfig",
                         frozenset({"index_topk", "index_head_dim", "index_topk_freq",
                                    "index_topk_pattern", "index_skip_topk_offset",
                                    "index_n_heads", "v_head_dim"})),
    # longcat_flash.py: two DeepseekV2MLAAttention per decoder layer, config.num_layers
    # layers (LongcatFlashConfig.num_hidden_layers is 2 x num_layers).
    "longcat_flash": Rule("longcat_flash", "exact", f"{_MODELS}/longcat_flash.py (read; "
                          "the golden generator finds no spec in it: not run); "
                          "transformers LongcatFlashConfig", frozenset({"num_layers",
                                                                         "v_head_dim"}),
                          layer_keys=("num_layers",)),
    # nemotron_nas.py (DeciLM, Llama-Nemotron Super/Ultra): per-layer block_configs.
    "nemotron_nas": Rule("block_configs", "exact", f"{_MODELS}/nemotron_nas.py (read, not "
                         "run here: the config class is the checkpoint's remote code)",
                         frozenset({"block_configs"})),
    # openpangu.py: PanguUltraMoE is MLA, PanguEmbedded / PanguProMoEV2 standard attention
    # with interleaved_sliding_window; a config with param_sink_number > 0 runs
    # StaticSinkAttention (sink tokens in the cache), which this rule does not size.
    "openpangu": Rule("openpangu", "exact", f"{_MODELS}/openpangu.py (remote-code configs: "
                      "run on a synthetic PanguEmbedded config; Ultra's MLA read, not run)",
                      frozenset({"interleaved_sliding_window", "v_head_dim"}),
                      refuse_if="param_sink_number"),
    # alice_ai.py: Kimi delta attention where layer_types says linear_attention (its flat
    # linear_* keys adapted to KimiLinearConfig), Qwen3-Next attention elsewhere; no PP
    # (AliceAIForCausalLMConfig.verify_and_update_config).
    "alice_ai": replace(_state("decoder", "alice_ai", "none (remote code; run on a synthetic "
                               "config)", *GDN_KEYS), pipeline_parallel=False),
    "bailing_moe_linear": _state("bailing_linear", "bailing_moe_linear", "none (remote "
                                 "code; run on a synthetic config)", "layer_group_size",
                                 "v_head_dim", "group_norm_size"),
    # BailingMoeV3MLAAttention's getattr defaults: kv_lora_rank 512, qk_rope_head_dim 64.
    "bailing_moe_v3": replace(_state("bailing_v3", "bailing_moe_v3", "none (read, not run: "
                                     "remote-code config)", "layer_group_size",
                                     "short_conv_kernel_size", "v_head_dim"),
                              defaults=(("kv_lora_rank", 512), ("qk_rope_head_dim", 64))),
    # step1.py / step3p5.py: num_attention_groups KV heads; Step-3.5 slides per layer_types.
    "step1": Rule("step", "exact", f"{_MODELS}/step1.py; vLLM's Step1 config (no transformers "
                  "class)", frozenset({"num_attention_groups"})), **MM_RULES,
    # Its per_layer_config gives query heads per layer (_get_num_attention_heads): not cached.
    "step3p5": Rule("step", "exact", f"{_MODELS}/step3p5.py; transformers Step3p7TextConfig "
                    f"(model type step3p5)", frozenset({"num_attention_groups",
                                                        "per_layer_config"})),
    # step3_text.py: Attention(num_kv_heads=1) of head_dim in every layer.
    "step3_text": Rule("step3", "exact", f"{_MODELS}/step3_text.py; vLLM's Step3TextConfig",
                       frozenset({"share_q_dim"})),
    # plamo3.py: per-layer windows (interleaved_sliding_window), full where null.
    "plamo3": Rule("plamo3", "exact", f"{_MODELS}/plamo3.py (remote-code config: run on "
                   f"a synthetic one)", frozenset({"interleaved_sliding_window"})),
    "llama4": Rule("llama4", "exact", f"{_MODELS}/llama4.py; transformers Llama4TextConfig",
                   frozenset({"no_rope_layers", "no_rope_layer_interval",
                              "attention_chunk_size"})),
    "qwen3_next": _state("decoder", "qwen3_next", "Qwen3NextConfig",
                         "full_attention_interval", *GDN_KEYS),
    "granitemoehybrid": _state("decoder", "granitemoehybrid", "GraniteMoeHybridConfig",
                               *MAMBA2_KEYS),
    "nemotron_h": _state("nemotron_h", "nemotron_h", "NemotronHConfig",
                         "hybrid_override_pattern", "layers_block_type", "mamba_num_heads"),
    # transformers' JambaConfig.layers_block_type: attention where i % period == offset.
    "jamba": _state("jamba", "jamba", "JambaConfig", "attn_layer_period"),
    "bamba": _state("bamba", "bamba", "BambaConfig", "attn_layer_indices", "mamba_n_heads"),
    # falcon_h1.py: an attention and a Mamba2 module in every layer.
    "falcon_h1": _state("falcon_h1", "falcon_h1", "FalconH1Config", "mamba_d_ssm",
                        "mamba_n_heads"),
    "mimo_v2_flash": Rule("mimo_v2_flash", "exact",
                          f"{_MODELS}/mimo_v2_flash.py (hybrid_layer_pattern, swa_* geometry)",
                          frozenset({"hybrid_layer_pattern", "swa_head_dim", "v_head_dim",
                                     "swa_v_head_dim", "swa_num_key_value_heads"})),
    # hunyuan_v1.py: standard attention unless cross-layer attention shares KV (use_cla).
    "hunyuan_v1": Rule("decoder", "exact", f"{_MODELS}/hunyuan_v1.py; transformers "
                       f"HunYuanDenseV1Config", frozenset({"cla_share_factor"}),
                       note="", refuse_if="use_cla"),
    "minimax_text_01": _state(
        "minimax", "minimax_text_01", "MiniMaxText01Config (attn_type_list)", "attn_type_list",
        note="lightning-attention states sized (linear_attention_state_shape); the state "
             "blocks a request keeps under prefix caching are not checked against vLLM"),
    # zamba2.py: a Mamba2 mixer in every layer, its own KV cache in each hybrid layer.
    # vLLM 0.33 keeps Mamba prefix caching on for every hybrid (MambaModelConfig in
    # vllm/model_executor/models/config.py sets mamba_cache_mode "align" whenever prefix
    # caching is on; SupportsMambaPrefixCaching no longer gates it).
    "zamba2": Rule("zamba2", "exact", f"{_MODELS}/zamba2.py, {_MAMBA}; transformers "
                   f"Zamba2Config", frozenset({"layers_block_type", "n_mamba_heads"}),
                   pipeline_parallel=False),
    "kimi_linear": _state(
        "kimi_linear", "kimi_linear", "KimiLinearConfig (is_kda_layer)", "linear_attn_config",
        note="KDA states sized by kda_state_shape (conv of q, k, v; fp32 recurrent state); "
             "the model file's call and its prefix-caching support are not checked"),
    # LFM2 keeps its short-convolution states under prefix caching too (vLLM 0.33's
    # MambaModelConfig: mamba_cache_mode "align" whenever prefix caching is on).
    "lfm2": _state("lfm2", "lfm2", "Lfm2Config", "conv_L_cache"),
    "lfm2_moe": _state("lfm2", "lfm2_moe", "Lfm2MoeConfig", "conv_L_cache"),
    # Looped / recurrent-depth models: one cache per (layer, run) (memacct/model/loop_layouts.py);
    # none of these model classes is SupportsPP.
    "dory": Rule("dory", "exact", f"{_MODELS}/dory.py; vLLM's DoryConfig", frozenset({
        "n_input_layers", "n_output_layers", "n_recurrent_layers", "n_recurrent_loops",
        "recurrent_kv_cache_mode"}), pipeline_parallel=False, tensor_parallel=False,
        defaults=(("sliding_window", 1024), ("head_dim", 256), ("num_key_value_heads", 4))),
    "iquest_loopcoder": Rule("loopcoder", "exact", f"{_MODELS}/iquest_loopcoder.py (remote-"
                             "code config: run on a synthetic one)", frozenset({
                                 "loop_num", "loop_window_size"}), pipeline_parallel=False),
    "hrm_text": Rule("hrm_text", "exact", f"{_MODELS}/hrm_text.py; transformers HrmTextConfig",
                     frozenset({"H_cycles", "L_cycles", "num_layers_per_stack"}),
                     pipeline_parallel=False, defaults=(("head_dim", 128),),
                     layer_keys=("num_layers_per_stack", "num_hidden_layers")),
    "muse_glimmer": Rule("muse_glimmer", "partial", f"{_MODELS}/muse_glimmer.py; transformers "
                         "MuseGlimmerTextConfig", defaults=(("sliding_window", 2048),
                                                            ("head_dim", 128)),
                         note="KV cache of its text part; the vision encoder's start-up is "
                              "not modelled"),
    # k2_horizon.py: K2HorizonAttention and K2HorizonMoVAAttention (MoE layers when
    # mova_num_experts > 0) both build Attention(num_key_value_heads, head_dim or hidden //
    # heads); no layer_types, so CacheConfig's sliding_window, if any, applies to all.
    "k2_horizon": Rule("decoder", "exact", f"{_MODELS}/k2_horizon.py (remote-code config: "
                       "run on a synthetic one)"),
    # domyn_edge.py: per-layer windows and head sizes; DomynEdgeForCausalLM is not SupportsPP.
    "domyn_edge": Rule("domyn_edge", "exact", f"{_MODELS}/domyn_edge.py (remote-code config: "
                       "run on a synthetic one; per_layer_config as transformers' heterogeneous "
                       "overrides)", frozenset({"window_sizes", "per_layer_config",
                                                "position_layers"}), pipeline_parallel=False),
    # vllm/models/beam: BeamAttention slides where layer_types says (BeamConfig: all, over
    # 4096), head_dim or hidden // heads; the model clears CacheConfig.sliding_window.
    "beam": Rule("decoder", "exact", "vllm/models/beam/nvidia/{model,attention}.py; vLLM's "
                 "BeamConfig", defaults=(("sliding_window", 4096),)),
    # FlintAttention asserts the FlashInfer backend, which the golden generator cannot build.
    "flint": Rule("flint", "partial", "vllm/models/flint/model.py (read, not run); vLLM's "
                  "FlintConfig", defaults=(("sliding_window", 513),),
                  note="windows and heads read in flint/model.py; no golden rows (it needs "
                       "the FlashInfer backend, absent where vLLM's code ran)"),
    # vllm/models/hy_v4: MLA (kv_lora_rank) in every layer; sparse (DSA, an indexer cache)
    # only where layer_types names a sparse kind, which this rule refuses (_typed).
    "hy_v4": Rule("decoder", "exact", "vllm/models/hy_v4/nvidia/attention.py (HYV4MLAAttention); "
                  "vLLM's HYV4Config", frozenset({"v_head_dim"}), note="dense MLA; refused "
                  "where layer_types lists sparse (DSA) layers"),
    "minimax_m3": Rule("minimax_m3", "exact", "vllm/models/minimax_m3/nvidia/model.py, "
                       "common/indexer.py; vLLM's MiniMaxM3TextConfig",
                       frozenset({"sparse_attention_config"})),
    "inkling": Rule("inkling", "partial", "vllm/models/inkling/nvidia/{model,attention,"
                    "sconv_swa_attn}.py; vLLM's InklingModelConfig", frozenset({
                        "local_layer_ids", "sconv_kernel_size", "conv_kernel_size",
                        "sliding_window_size", "swa_num_key_value_heads", "swa_head_dim"}),
                    note="KV cache as InklingForCausalLM builds it (golden rows); the "
                         "ConditionalGeneration towers' start-up is not modelled"),
    # vLLM 0.33 runs these architectures through its Transformers backend
    # (_TRANSFORMERS_SUPPORTED_MODELS): one attention module per layer.
    "transformers": Rule(
        "transformers", "exact",
        "vllm/model_executor/models/transformers/base.py (_create_attention_instances); "
        "transformers' config class"),
}

# Under MLA the cache keeps the latent; v_head_dim sizes the attention's output only.
for _mla in ("deepseek_v2", "minicpm3", "kimi_linear", "sarvam", "AXK1"):
    RULES[_mla] = replace(RULES[_mla], reads=RULES[_mla].reads | {"v_head_dim"})
# deepseek_v2.py builds DeepSeek-V3.2's sparse attention and its indexer cache when the
# config has index_topk (is_v32): not sized by this rule.
RULES["deepseek_v2"] = replace(RULES["deepseek_v2"], refuse_if="index_topk")
# exaone_moe.py: a sliding layer's window is sliding_windows[i] when the list is written.
RULES["exaone_moe"] = replace(RULES["exaone_moe"], reads=frozenset({"sliding_windows"}))
# glm4_moe_lite.py: DeepSeek-V2's MLA (kv_lora_rank); with index_topk it is the sparse
# V3.2 attention and its indexer cache, which this rule does not size.
RULES["glm4_moe_lite"] = replace(RULES["deepseek_v2"], source=f"{_MODELS}/glm4_moe_lite.py "
                                 f"(DeepseekV2MLAAttention); transformers Glm4MoeLiteConfig",
                                 refuse_if="index_topk")
# transformers AfmoeConfig: sliding_window defaults to 1024.
RULES["afmoe"] = replace(RULES["afmoe"], reads=frozenset({"global_attn_every_n_layers"}),
                         defaults=(("sliding_window", 1024),))
# longcat_flash_ngram.py builds longcat_flash.py's FlashModel (n-gram embeddings aside).
RULES["longcat_flash_ngram"] = replace(RULES["longcat_flash"], source=f"{_MODELS}/"
                                       "longcat_flash_ngram.py (FlashModel of longcat_flash.py)")
# Gemma3nForCausalLM does not declare SupportsPP in vLLM 0.33 (gemma3n.py).
RULES["gemma3n"] = replace(RULES["gemma3n"], pipeline_parallel=False)
# Modules vLLM 0.33 renamed or moved, read by the rule of the module they came from.
RULES["mistral"] = replace(RULES["llama"], source=f"{_MODELS}/mistral.py; transformers' config "
                                                  f"class")
RULES["mimo_v2"] = replace(RULES["mimo_v2_flash"], source=f"{_MODELS}/mimo_v2.py "
                           f"(hybrid_layer_pattern, swa_* geometry)")
RULES["kimi_k3"] = replace(RULES["kimi_linear"], source=RULES["kimi_linear"].source.replace(
    f"{_MODELS}/kimi_linear.py", "vllm/models/kimi_k3"))

_ENCODER_ONLY = "an encoder-only pooling model: it keeps no KV cache"
_DRAFT = "a speculative-decoding draft: plan the target model (drafts are not modelled)"
REFUSED: dict[str, str] = {
    **dict.fromkeys(("bert", "bert_with_rope", "modernbert", "roberta", "clip", "siglip",
                     "terratorch", "jina_vl"), _ENCODER_ONLY),
    **dict.fromkeys(("mimo_mtp", "llama_eagle", "llama4_eagle", "minicpm_eagle",
                     "llama_eagle3", "mistral_large_3_eagle", "deepseek_eagle", "deepseek_mtp",
                     "ernie_mtp", "longcat_flash_mtp", "glm4_moe_mtp", "medusa",
                     "openpangu_mtp", "qwen3_next_mtp"), _DRAFT),
    "plamo2": "Mamba layers with Plamo2's own state: no rule yet",
    "ouro": "layers run total_ut_steps times, each with its own cache: no rule yet",
    "hunyuan_vision": "HunYuan's text part: no rule yet",
    "voxtral_streaming": "streaming audio model: no rule yet",
    # Read in vLLM 0.33 (vllm/models/<module>), not sized: caches kinds memacct has no spec of.
    **dict.fromkeys(("deepseek_v4", "deepseek_v41"), "compressed sparse MLA (tokens_per_state "
                    "latents, compressor and SWA caches of their own block size): no rule yet"),
    "glm5next": "a kpool-compressed indexer, a circular tail buffer and KDA states: no rule yet",
    "qwen4_exp": "QSA circular buffers, MLA and Mamba states: no rule yet",
    "step5": "8-token summary states and a circular tail ring beside its attention: no rule yet",
    **MM_REFUSED,
}
# Multimodal modules whose text part is a text_config (or the top level) of a model type
# with a rule of its own: planned through that rule, the encoder's start-up left out. The
# value reads a flat config (text keys at the top level, the multimodal model_type).
_MULTIMODAL: dict[str, str] = {
    **dict.fromkeys((
        "aria", "aya_vision", "blip2", "cohere2_vision", "deepseek_vl2", "ernie45_vl",
        "gemma3_mm", "gemma3n_mm", "glm4v", "glm4_1v", "granite_speech", "interns1",
        "idefics3", "smolvlm", "keye", "keye_vl1_5", "kimi_vl", "lightonocr", "mllama4",
        "llava", "llava_next", "llava_next_video", "llava_onevision", "mistral3", "opencua",
        "paligemma", "pixtral", "qwen2_audio", "qwen3_vl", "qwen3_vl_moe", "tarsier",
        "ultravox", "voxtral", "fuyu",
    ), "llama"),
    "qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2", "minicpmv": "qwen2", "minicpmo": "qwen2",
    "phi3v": "phi3", "phi4mm": "phi3", "qwen_vl": "qwen", "molmo": "llama",
    "minimax_vl_01": "minimax_text_01", "step3_vl": "step3_text",
    # The text part in llm_config / language_config / thinker_config.text_config: read
    # by its model type only (no flat fallback, "").
    **dict.fromkeys((
        "internvl", "h2ovl", "nvlm_d", "skyworkr1v", "nemotron_vl", "ovis", "ovis2_5",
        "bagel", "deepseek_ocr", "isaac", "rvl", "bee", "kimi_audio", "midashenglm",
        "glmasr", "audioflamingo3", "nano_nemotron_vl", "dots_ocr", "paddleocr_vl",
        "hyperclovax_vision", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "kimi_k25",
        # hyperclovax_vision_v2.py builds its text_config's registered model.
        "hyperclovax_vision_v2",
    ), ""),
}  # fmt: skip
_MULTIMODAL_NOTE = ("KV cache from the text part's rule; the encoder's start-up is the "
                    "engine's (memacct/engines/vllm/multimodal.py: Qwen2-VL and Qwen2.5-VL)")

# Text model types that name no vLLM module of the same name.
_TEXT_TYPES = {
    "mistral": "llama", "cohere": "commandr", "cohere2": "commandr", "gemma3_text": "gemma3",
    "gemma3n_text": "gemma3n", "llama4_text": "llama4", "deepseek_v3": "deepseek_v2",
    "glm_moe_dsa": "deepseek_v32", "kimi_k2": "deepseek_v2", "qwen2_vl_text": "qwen2",
    "qwen2_5_vl_text": "qwen2", "qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe",
    "RefinedWeb": "falcon", "RefinedWebModel": "falcon", "falcon_mamba": "mamba",
    "aria_text": "llama", "internlm3": "llama", "granite_speech": "granite", "starcoder": "gpt2",
    "glm4v_text": "glm4", "glm4v_moe_text": "glm4_moe", "ernie4_5": "ernie45",
    "ernie4_5_moe": "ernie45_moe", "phi4mm": "phi3", "phi3_v": "phi3",
    "minimax": "minimax_text_01", "minimax_m1": "minimax_text_01",
    "qwen2_5_omni_text": "qwen2", "qwen2_5_omni_thinker": "qwen2",
    "qwen3_omni_moe_text": "qwen3_moe", "qwen3_omni_moe_thinker": "qwen3_moe",
    "qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5", "qwen3_5_moe": "qwen3_5",
    "gemma4_text": "gemma4", "muse_glimmer_text": "muse_glimmer", "minimax_m3_text": "minimax_m3",
}  # fmt: skip


def status_of(module: str, table: str = "text") -> tuple[str, str, str]:
    """``(status, rule or reason, source)`` of a vLLM module in a registry ``table``, for
    the generated doc (a multimodal architecture planned by a text rule is partial)."""
    if table == "multimodal" and module in RULES and module not in REFUSED:
        return "partial", _MULTIMODAL_NOTE, RULES[module].source
    if module in REFUSED:
        return "refused", REFUSED[module], ""
    if module in _MULTIMODAL:
        return "partial", _MULTIMODAL_NOTE, f"{_MODELS}/{module}.py (text part: its model type)"
    if module in MM_TEXT:
        return "partial", _MULTIMODAL_NOTE, MM_TEXT[module].source
    rule = RULES.get(module)
    if rule is None:
        return "refused", "no rule", ""
    what = rule.note or rule.layout
    if rule.refuse_if:
        what += f"; refused when {rule.refuse_if} is set"
    return rule.status, what, rule.source


def _text_module(model_type: str | None) -> str | None:
    if model_type is None:
        return None
    module = _TEXT_TYPES.get(model_type, model_type)
    return module if module in RULES or module in REFUSED else None


def nearest_family(module: str | None) -> str | None:
    """The supported module whose name is closest to ``module`` (a hint), else ``None``."""
    if not module:
        return None
    close = difflib.get_close_matches(module, sorted(RULES), n=1, cutoff=0.6)
    return close[0] if close else None


def refusal(source: str, name: str, module: str | None, reason: str) -> str:
    """The one-line refusal of an architecture without a rule (under 300 characters for a
    short source): the architecture, its vLLM module, the nearest family, the override."""
    near = nearest_family(module)
    hint = f"; nearest supported: {near}" if near and near != module else ""
    reason = reason if len(reason) <= 90 else reason[:87] + "..."
    return (f"{source}: {name} (vLLM module {module or 'unknown'}) is refused: {reason}"
            f"{hint}. --assume-full-attention plans it as full attention; supported: "
            f"docs/architectures.md")


def resolve_rule(cfg: ModelConfig, *, assume_full_attention: bool = False) -> Rule:
    """The rule that reads ``cfg``, or a refusal naming the architecture.

    A config that names neither an architecture nor a model type is read as a
    standard decoder, with a note. ``assume_full_attention`` (or the config key
    :data:`ASSUME_FULL_ATTENTION` set to true) plans an architecture without a
    rule as full attention on every layer, with a note.

    Raises:
        ConfigError: no rule reads the architecture; the message names it, lists
            the supported modules and the override.
    """
    assume_full_attention = assume_full_attention or cfg.root.get(ASSUME_FULL_ATTENTION) is True
    arch = cfg.architecture
    module = module_of(arch) if arch else None
    if module is None and arch is None:
        module = _text_module(cfg.model_type)
        if module is None and cfg.model_type is None:
            cfg.notes.append(
                f"{cfg.source} names no architecture or model_type: read as a standard decoder"
            )
            return RULES["llama"]
    multimodal = module in _MULTIMODAL or module in MM_TEXT
    if module in MM_TEXT:  # the text class its model file builds (memacct/model/mm_text.py)
        module = backbone_module(module, cfg.text.get("architectures"),
                                 _text_module(cfg.model_type)) or module
    elif multimodal and module is not None:
        # The text part: text_config's model type, or the flat config's own decoder.
        flat = not cfg.text
        module = _text_module(cfg.model_type) or (_MULTIMODAL[module] if flat else None) or None
    rule = RULES.get(module or "")
    reason = REFUSED.get(module or "", "no rule")
    if arch is not None and module_of(arch) is None:
        reason = ("not in the vLLM model registry memacct holds "
                  "(memacct/model/vllm_registry.json)")
        if arch in removed():
            reason = (f"vLLM removed it (the last version that ran it is {removed()[arch]}; "
                      f"vLLM 0.33 refuses it)")
    if rule is None:
        name = arch or cfg.model_type
        if assume_full_attention:
            cfg.notes.append(
                f"{name} has no memacct rule ({reason}): planned as full attention on every "
                f"layer because assume_full_attention was given; the figures are a guess"
            )
            return Rule("full", "partial", "assume_full_attention")
        raise ConfigError(refusal(cfg.source, str(name), module, reason))
    if rule.refuse_if is not None and cfg.get(rule.refuse_if):
        if assume_full_attention:
            cfg.notes.append(
                f"{arch or cfg.model_type} sets {rule.refuse_if}, which memacct's rule does not "
                f"model: planned as full attention because assume_full_attention was given"
            )
            return Rule("full", "partial", "assume_full_attention")
        raise ConfigError(
            f"{cfg.source}: architecture {arch or cfg.model_type!r} with {rule.refuse_if} set is "
            f"refused: memacct's rule for it does not model {rule.refuse_if}. Pass "
            f"assume_full_attention=True (memacct plan --assume-full-attention) to plan it as "
            f"full attention on every layer"
        )
    if multimodal or (arch is not None and arch in registry().get("multimodal", {})):
        cfg.notes.append(f"{arch}: the KV cache of its text part ({cfg.model_type or 'flat'})")
    if rule.defaults:
        cfg.defaults = {**dict(rule.defaults), **cfg.defaults}
    return rule


# Fields that change a layer's geometry; a config carrying one its rule does not read is
# warned about by name (a rule reads the common ones and its own ``reads``).
_GEOMETRY_FIELDS = frozenset({
    "global_head_dim", "num_global_key_value_heads", "v_head_dim", "swa_head_dim",
    "swa_num_key_value_heads", "swa_v_head_dim", "hybrid_layer_pattern", "use_cla",
    "cla_share_factor", "attention_k_eq_v", "attn_type_list", "full_attn_idxs",
    "hybrid_override_pattern", "attn_layer_period", "attn_layer_indices", "layers_block_type",
    "linear_num_key_heads", "mamba_n_heads", "mamba_num_heads", "mamba_d_ssm", "conv_L_cache",
    "no_rope_layers", "attention_chunk_size", "block_configs",
    "sliding_window_layers", "swa_layers", "global_attn_layers", "cross_attention_layers",
    "num_kv_layers", "total_ut_steps", "kv_lora_rank_per_layer", "full_attention_interval",
    "global_attn_every_n_layers", "sliding_windows", "index_topk",
})  # fmt: skip
_MLA_FIELDS = frozenset({"v_head_dim"})


def rule_keys(rule: Rule) -> frozenset[str]:
    """Every layer-shaping config key ``rule`` reads (or refuses on), common ones included."""
    return rule_reads(rule.layout, rule.reads, [k for k, _ in rule.defaults], rule.refuse_if)


def unread_geometry_fields(cfg: ModelConfig, rule: Rule, mla: bool) -> list[str]:
    """Layer-shaping fields written in ``cfg`` that ``rule`` does not read: the named ones
    and those the architecture's vLLM model file reads (:func:`engine_keys`)."""
    read = rule_keys(rule) | (_MLA_FIELDS if mla else frozenset())
    module = module_of(cfg.architecture) if cfg.architecture else None
    shaping = _GEOMETRY_FIELDS | engine_keys(module or "")
    return sorted(
        key for key in cfg.written_keys()
        if key in shaping and key not in read and cfg.get(key) not in (None, False, [], 0)
    )
