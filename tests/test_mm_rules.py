"""Multimodal files that build a text decoder of their own (memacct/model/mm_rules.py).

Moondream3 and Intern-S2-Mobius are checked row by row against vLLM 0.33's own model code in
the new-architecture golden table (tests/test_engines_golden.py); these tests pin what the
golden generator cannot run: Muse Spark's and Nemotron-Parse 3.5's layers as their model
files build them, and the refusals.
"""

from __future__ import annotations

from typing import Any

import pytest

from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.errors import ConfigError, InvalidInputError
from memacct.model.layers import CrossAttention, FullAttention, GatedDeltaNetState, SlidingWindow
from memacct.planner import KVCacheSpec


def _moondream(**text: Any) -> dict[str, Any]:
    return {"architectures": ["HfMoondream"], "model_type": "moondream3",
            "torch_dtype": "bfloat16", "config": {"text": {
                "dim": 2048, "n_layers": 24, "n_heads": 32, "n_kv_heads": 32,
                "max_context": 4096, **text}}}


def test_moondream3_reads_its_config_text_section_under_its_own_names() -> None:
    """Moondream3Attention: n_kv_heads heads of dim // n_heads in each of n_layers blocks."""
    spec = KVCacheSpec.from_hf_config(_moondream(n_kv_heads=8), tensor_parallel_size=2)
    assert (spec.total_num_layers, spec.num_kv_heads, spec.head_dim) == (24, 4, 64)
    assert spec.bytes_per_token == 24 * 4 * 64 * 2 * 2
    assert spec.position_limit == 4096
    assert all(type(x) is FullAttention for x in spec.layers)


def test_muse_spark_slides_where_layer_types_says() -> None:
    """MuseSpark1xAttention: per_layer_sliding_window = sliding_window on sliding layers."""
    text = {"model_type": "muse_spark_text", "num_hidden_layers": 4, "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "sliding_window": 1024, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    config = {"architectures": ["MuseSparkForConditionalGeneration"], "model_type": "muse_spark",
              "torch_dtype": "bfloat16", "text_config": text}
    layers = KVCacheSpec.from_hf_config(config).layers
    assert [type(x) for x in layers] == [SlidingWindow] * 3 + [FullAttention]
    assert [x.window for x in layers] == [1024, 1024, 1024, None]
    assert layers[0].bytes_per_token == 8 * 128 * 2 * 2


def _parse(**decoder: Any) -> dict[str, Any]:
    return {"architectures": ["RadioMBartPrefixForCausalLM"], "model_type": "nemotron_parse3_5",
            "torch_dtype": "bfloat16", "decoder": {
                "model_type": "mbart", "d_model": 1024, "decoder_layers": 10,
                "decoder_attention_heads": 16, "decoder_ffn_dim": 4096,
                "max_position_embeddings": 9000, **decoder}}


def test_nemotron_parse_3_5_plans_its_mbart_decoders_self_attention() -> None:
    """NemotronParseSelfAttention: self_attention_kv_heads (else all) of d_model // heads."""
    gqa = KVCacheSpec.from_hf_config(_parse(self_attention_kv_heads=4))
    assert (gqa.total_num_layers, gqa.num_kv_heads, gqa.head_dim) == (10, 4, 64)
    assert gqa.bytes_per_token == 10 * 4 * 64 * 2 * 2
    assert KVCacheSpec.from_hf_config(_parse()).num_kv_heads == 16


def test_nemotron_parse_3_5_refuses_pipeline_parallelism() -> None:
    """RadioMBartPrefixForCausalLM is not SupportsPP."""
    with pytest.raises(InvalidInputError, match="pipeline"):
        KVCacheSpec.from_hf_config(_parse(), pipeline_parallel_size=2)


def _mobius(layer_types: list[str]) -> dict[str, Any]:
    text = {"model_type": "interns2_mobius_text", "num_hidden_layers": len(layer_types),
            "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2,
            "head_dim": 256, "layer_types": layer_types, "linear_num_key_heads": 16,
            "linear_num_value_heads": 32, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
    return {"architectures": ["InternS2MobiusForConditionalGeneration"],
            "model_type": "interns2_mobius", "torch_dtype": "bfloat16", "text_config": text}


def test_intern_s2_mobius_reads_layer_types_whatever_its_model_type() -> None:
    layers = KVCacheSpec.from_hf_config(_mobius(["linear_attention", "full_attention"])).layers
    assert [type(x) for x in layers] == [GatedDeltaNetState, FullAttention]
    assert layers[1].bytes_per_token == 2 * 256 * 2 * 2


def test_intern_s2_mobius_refuses_a_layer_kind_its_file_does_not_build() -> None:
    with pytest.raises(ConfigError, match="sliding_attention"):
        KVCacheSpec.from_hf_config(_mobius(["linear_attention", "sliding_attention"]))


def _whisper() -> dict[str, Any]:
    return {"architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
            "torch_dtype": "float16", "d_model": 1280, "encoder_layers": 32,
            "num_hidden_layers": 32, "decoder_layers": 4, "encoder_attention_heads": 20,
            "decoder_attention_heads": 20, "max_source_positions": 1500,
            "max_target_positions": 448}


def test_whisper_plans_self_and_cross_attention_in_each_decoder_layer() -> None:
    """WhisperDecoderLayer: Attention and CrossAttention; decoder_layers, not the encoder's."""
    spec = KVCacheSpec.from_hf_config(_whisper(), tensor_parallel_size=2)
    assert [type(x) for x in spec.layers] == [FullAttention, CrossAttention] * 4
    assert spec.layers[1].max_encoder_len == 1500  # type: ignore[attr-defined]
    assert (spec.num_kv_heads, spec.head_dim, spec.position_limit) == (10, 64, 448)


def test_vllm_holds_the_schedulers_encoder_budget_of_cross_attention() -> None:
    """CrossAttentionSpec.max_memory_usage_bytes: cdiv(max_num_encoder_input_tokens, block)
    blocks, max_num_batched_tokens (SchedulerConfig.__post_init__), beside the self
    attention's cdiv(max_model_len, block): 28 + 128 for 448 tokens and a batch of 2048."""
    settings = KVSettings(block_size=16, max_model_len=448, max_num_batched_tokens=2048)
    layout = get_engine("vllm").kv.plan(KVCacheSpec.from_hf_config(_whisper()), 1 << 30,
                                        settings)
    assert layout.blocks_per_request == 28 + 128


def test_nemotron_parse_plans_whisper_modules_in_its_mbart_decoder() -> None:
    """nemotron_parse.py BartDecoderLayer: WhisperAttention and WhisperCrossAttention of
    decoder_attention_heads (all of them KV heads) of d_model // heads; no encoder length
    in the config, so the cross layer holds vLLM's batch budget."""
    config = {"architectures": ["NemotronParseForConditionalGeneration"],
              "model_type": "nemotron_parse", "torch_dtype": "bfloat16",
              "decoder": {"model_type": "mbart", "d_model": 1024, "decoder_layers": 10,
                          "decoder_attention_heads": 16, "max_position_embeddings": 9000}}
    spec = KVCacheSpec.from_hf_config(config)
    assert [type(x) for x in spec.layers] == [FullAttention, CrossAttention] * 10
    assert (spec.num_kv_heads, spec.head_dim) == (16, 64)
    settings = KVSettings(block_size=16, max_model_len=4096, max_num_batched_tokens=8192)
    layout = get_engine("vllm").kv.plan(spec, 1 << 32, settings)
    assert layout.blocks_per_request == 256 + 512


def test_cohere_asr_reads_its_transf_decoder_section() -> None:
    """cohere_asr.py CohereASRDecoder: transf_decoder.config_dict's sizes, not the encoder's."""
    config = {"architectures": ["CohereAsrForConditionalGeneration"], "model_type": "cohere_asr",
              "torch_dtype": "bfloat16", "encoder": {"n_heads": 8, "n_layers": 24},
              "transf_decoder": {"config_dict": {
                  "hidden_size": 1024, "num_layers": 8, "num_attention_heads": 8,
                  "inner_size": 4096, "max_sequence_length": 1024}}}
    spec = KVCacheSpec.from_hf_config(config, tensor_parallel_size=2)
    assert [type(x) for x in spec.layers] == [FullAttention, CrossAttention] * 8
    assert (spec.num_kv_heads, spec.head_dim, spec.position_limit) == (4, 128, 1024)
    with pytest.raises(InvalidInputError, match="pipeline"):
        KVCacheSpec.from_hf_config(config, pipeline_parallel_size=2)


def test_diffusion_gemma_forces_k_eq_v_on_gemma_4s_full_layers() -> None:
    """diffusion_gemma.py:189 sets attention_k_eq_v = True whatever the config says: the
    full layers take num_global_key_value_heads of global_head_dim."""
    text = {"model_type": "diffusion_gemma_text", "num_hidden_layers": 2, "hidden_size": 2816,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
            "global_head_dim": 512, "num_global_key_value_heads": 2,
            "attention_k_eq_v": False, "sliding_window": 1024,
            "layer_types": ["sliding_attention", "full_attention"]}
    config = {"architectures": ["DiffusionGemmaForBlockDiffusion"],
              "model_type": "diffusion_gemma", "torch_dtype": "bfloat16", "text_config": text}
    layers = KVCacheSpec.from_hf_config(config).layers
    assert [type(x) for x in layers] == [SlidingWindow, FullAttention]
    assert layers[0].bytes_per_token == 8 * 256 * 2 * 2
    assert layers[1].bytes_per_token == 2 * 512 * 2 * 2


def test_sglang_refuses_an_encoder_decoder_rather_than_summing_its_cross_layers() -> None:
    # SGLang's token cell would otherwise count Whisper's cross layers per token, a guess.
    spec = KVCacheSpec.from_hf_config(_whisper())
    kv = get_engine("sglang").kv
    with pytest.raises(InvalidInputError, match="encoder-decoder"):
        kv.plan(spec, 1 << 30, KVSettings(block_size=1, max_model_len=448))
    with pytest.raises(InvalidInputError, match="--engine vllm"):
        kv.block(spec, KVSettings(block_size=1, max_model_len=448))


def test_whisper_plans_offline_with_its_decoders_mlp_width() -> None:
    # WhisperConfig names the decoder's MLP width decoder_ffn_dim (whisper.py's
    # WhisperDecoderLayer reads it): the forward pass's shape takes it, the weights come from
    # the meta-device model (its encoder included). It was "no intermediate_size".
    pytest.importorskip("torch", reason="the meta-device path needs torch")
    pytest.importorskip("transformers", reason="the meta-device path needs memacct[hf]")
    from memacct.planner.offline import plan_offline

    cfg = {**_whisper(), "decoder_ffn_dim": 5120, "encoder_ffn_dim": 5120, "d_model": 1280,
           "encoder_layers": 2, "encoder_attention_heads": 20, "vocab_size": 51866,
           "num_mel_bins": 128, "max_target_positions": 448, "torch_dtype": "bfloat16"}
    plan = plan_offline(cfg, device="h100")
    assert plan.kv_cache_bytes > 0
    assert any("not modelled" in n or "upper bound" in n for n in plan.notes)
