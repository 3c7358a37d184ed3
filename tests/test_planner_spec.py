"""KVCacheSpec: bytes per token per rank, read from real config.json files.

The fixtures are the shipped presets (memacct/model/configs), each the
model's published config.json. Expected values are written as the arithmetic
that gives them: ``2 (K and V) x layers x KV heads per rank x head_dim x
dtype bytes`` for standard attention, ``layers x (kv_lora_rank +
qk_rope_head_dim) x dtype bytes`` for MLA.

Values reproduced from memory of the public files and less certain than the
rest: the ModelOpt ``quantization_config`` layout of llama-3.1-8b-fp8 (its
``producer.version`` in particular), the absence of ``torch_dtype`` in
gpt-oss-20b, and Gemma 3's sparse ``text_config`` (no ``head_dim``); the keys
these tests rely on are cross-checked against transformers' defaults.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from memacct.errors import ConfigError, InvalidInputError
from memacct.planner import (
    KVCacheSpec,
    LayerGroup,
    load_model_preset,
    model_presets,
    pipeline_partition,
)
from memacct.units import MiB

MLA = 512 + 64  # DeepSeek's kv_lora_rank + qk_rope_head_dim


def spec_of(preset: str, **kwargs: Any) -> KVCacheSpec:
    return KVCacheSpec.from_hf_config(load_model_preset(preset), **kwargs)


def tiny(**overrides: Any) -> dict[str, Any]:
    """A minimal Llama-like config: 4 layers, 8 heads of 64, bfloat16."""
    config: dict[str, Any] = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "hidden_size": 512,
        "torch_dtype": "bfloat16",
    }
    config.update(overrides)
    return {k: v for k, v in config.items() if v is not ...}


FIXTURES = [
    ("llama-3.1-8b", {}, 2 * 32 * 8 * 128 * 2),
    ("llama-3.1-8b", {"tensor_parallel_size": 2}, 2 * 32 * 4 * 128 * 2),
    ("llama-3.1-8b", {"tensor_parallel_size": 8}, 2 * 32 * 1 * 128 * 2),
    ("llama-3.1-8b", {"tensor_parallel_size": 16}, 2 * 32 * 1 * 128 * 2),  # 8 heads replicated
    ("llama-3.1-8b", {"pipeline_parallel_size": 2}, 2 * 16 * 8 * 128 * 2),
    ("llama-3.1-8b", {"pipeline_parallel_size": 3}, 2 * 11 * 8 * 128 * 2),  # 11 + 11 + 10
    ("llama-3.1-8b", {"tensor_parallel_size": 2, "pipeline_parallel_size": 4}, 2 * 8 * 4 * 128 * 2),
    ("llama-3.1-70b", {}, 2 * 80 * 8 * 128 * 2),
    ("llama-3.1-70b", {"tensor_parallel_size": 8}, 2 * 80 * 1 * 128 * 2),
    ("llama-3.1-70b", {"tensor_parallel_size": 4, "pipeline_parallel_size": 3},
     2 * 27 * 2 * 128 * 2),  # 80 layers: 26 + 27 + 27
    ("llama-3.1-8b-fp8", {}, 2 * 32 * 8 * 128 * 1),
    ("llama-3.1-8b-fp8", {"kv_cache_dtype": "bfloat16"}, 2 * 32 * 8 * 128 * 2),
    ("llama-4-scout", {}, 2 * 48 * 8 * 128 * 2),
    ("llama-4-scout", {"tensor_parallel_size": 8}, 2 * 48 * 1 * 128 * 2),
    ("qwen2.5-7b", {}, 2 * 28 * 4 * 128 * 2),
    ("qwen2.5-7b", {"tensor_parallel_size": 4}, 2 * 28 * 1 * 128 * 2),
    ("qwen2.5-7b", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, 2 * 14 * 2 * 128 * 2),
    ("qwen3-8b", {}, 2 * 36 * 8 * 128 * 2),
    ("qwen3-8b", {"pipeline_parallel_size": 5}, 2 * 8 * 8 * 128 * 2),  # 7 + 7 + 7 + 8 + 7
    ("qwen3-30b-a3b", {}, 2 * 48 * 4 * 128 * 2),
    ("qwen3-30b-a3b", {"tensor_parallel_size": 4}, 2 * 48 * 1 * 128 * 2),
    ("mistral-7b", {}, 2 * 32 * 8 * 128 * 2),
    ("mixtral-8x7b", {}, 2 * 32 * 8 * 128 * 2),
    ("mixtral-8x7b", {"tensor_parallel_size": 8}, 2 * 32 * 1 * 128 * 2),
    ("gemma-2-9b", {}, 2 * 42 * 8 * 256 * 2),
    ("gemma-2-9b", {"tensor_parallel_size": 2}, 2 * 42 * 4 * 256 * 2),
    ("gemma-2-9b", {"pipeline_parallel_size": 4}, 2 * 11 * 8 * 256 * 2),  # 10 + 11 + 11 + 10
    ("gemma-3-12b", {}, 2 * 48 * 8 * 256 * 2),
    ("gemma-3-12b", {"tensor_parallel_size": 4}, 2 * 48 * 2 * 256 * 2),
    ("gpt-oss-20b", {"kv_cache_dtype": "bfloat16"}, 2 * 24 * 8 * 64 * 2),
    ("gpt-oss-20b", {"kv_cache_dtype": "bfloat16", "tensor_parallel_size": 4},
     2 * 24 * 2 * 64 * 2),
    ("deepseek-v3", {}, 61 * MLA * 2),
    ("deepseek-v3", {"tensor_parallel_size": 8}, 61 * MLA * 2),  # the latent is replicated
    ("deepseek-v3", {"pipeline_parallel_size": 4}, 16 * MLA * 2),  # 15 + 15 + 16 + 15
    ("deepseek-v3", {"kv_cache_dtype": "fp8"}, 61 * MLA * 1),
    ("deepseek-v2-lite", {}, 27 * MLA * 2),
    ("deepseek-v2-lite", {"tensor_parallel_size": 2}, 27 * MLA * 2),
    ("cohere2-7b", {}, 2 * 32 * 8 * 128 * 2),
    ("gemma-3n-e4b", {}, 2 * 20 * 2 * 256 * 2),  # 15 of 35 layers share earlier layers' KV
    ("qwen3-next-80b-a3b", {}, 2 * 12 * 2 * 256 * 2),  # 12 full-attention layers, 36 GDN
    ("granite-4.0-h-small", {}, 2 * 4 * 8 * 128 * 2),  # 4 attention layers, 36 Mamba2
]


@pytest.mark.parametrize(
    ("preset", "kwargs", "expected"),
    FIXTURES,
    ids=[f"{p}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}"
         for p, kw, _ in FIXTURES],
)
def test_fixture_bytes_per_token_matches_hand_checked_value(
    preset: str, kwargs: dict[str, Any], expected: int
) -> None:
    assert spec_of(preset, **kwargs).bytes_per_token == expected


def test_deepseek_v3_matches_the_fields_published_figure() -> None:
    assert spec_of("deepseek-v3").bytes_per_token == 70272


def test_fixtures_cover_every_preset() -> None:
    assert {preset for preset, _, _ in FIXTURES} == set(model_presets())


@pytest.mark.parametrize(
    ("kv_cache_dtype", "dtype_bytes"),
    [
        ("auto", 2), ("bfloat16", 2), ("bf16", 2), ("float16", 2), ("fp16", 2), ("half", 2),
        ("float32", 4), ("fp32", 4), ("float", 4), ("fp8", 1), ("fp8_e4m3", 1),
        ("fp8_e5m2", 1), ("fp8_inc", 1), ("int8", 1), ("FP8_E5M2", 1), ("torch.float16", 2),
    ],
)
def test_kv_cache_dtype_sets_bytes_per_element(kv_cache_dtype: str, dtype_bytes: int) -> None:
    spec = spec_of("llama-3.1-8b", kv_cache_dtype=kv_cache_dtype)
    assert spec.bytes_per_token == 2 * 32 * 8 * 128 * dtype_bytes


@pytest.mark.parametrize("kv_cache_dtype", ["fp4", "float64", "", 8, None])
def test_unknown_kv_cache_dtype_is_invalid_input_naming_it(kv_cache_dtype: Any) -> None:
    with pytest.raises(InvalidInputError, match="kv_cache_dtype"):
        spec_of("llama-3.1-8b", kv_cache_dtype=kv_cache_dtype)


# --- the simulated-serving fields -------------------------------------------------------


def test_dense_model_exposes_its_dimensions() -> None:
    spec = spec_of("llama-3.1-8b")
    assert (spec.hidden_size, spec.intermediate_size, spec.vocab_size) == (4096, 14336, 128256)
    assert (spec.num_attention_heads, spec.total_num_kv_heads, spec.head_dim) == (32, 8, 128)
    assert (spec.dtype, spec.dtype_bytes, spec.max_position_embeddings) == ("bfloat16", 2, 131072)
    assert spec.num_experts is None and spec.experts_per_token is None


def test_num_kv_heads_is_per_rank() -> None:
    spec = spec_of("llama-3.1-70b", tensor_parallel_size=4)
    assert (spec.num_kv_heads, spec.total_num_kv_heads) == (8 // 4, 8)


@pytest.mark.parametrize(
    ("preset", "experts", "per_token", "expert_size", "shared"),
    [
        ("mixtral-8x7b", 8, 2, 14336, None),  # experts use intermediate_size
        ("qwen3-30b-a3b", 128, 8, 768, None),
        ("deepseek-v3", 256, 8, 2048, 1),
        ("deepseek-v2-lite", 64, 6, 1408, 2),
        ("llama-4-scout", 16, 1, 8192, None),
        ("gpt-oss-20b", 32, 4, 2880, None),
    ],
)
def test_moe_models_expose_their_experts(
    preset: str, experts: int, per_token: int, expert_size: int, shared: int | None
) -> None:
    spec = spec_of(preset, kv_cache_dtype="bfloat16")
    assert spec.num_experts == experts
    assert spec.experts_per_token == per_token
    assert spec.moe_intermediate_size == expert_size
    assert spec.num_shared_experts == shared


# --- multimodal nesting and sparse configs ---------------------------------------------


def test_multimodal_config_is_read_from_text_config() -> None:
    spec = spec_of("gemma-3-12b")
    assert spec.model_type == "gemma3_text"
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads) == (48, 3840, 16)


def test_dtype_of_a_multimodal_model_comes_from_the_top_level() -> None:
    assert spec_of("gemma-3-12b").dtype == "bfloat16"


def test_gemma3_head_dim_is_transformers_default_not_hidden_over_heads() -> None:
    spec = spec_of("gemma-3-12b")
    assert 3840 // 16 == 240
    assert spec.head_dim == 256
    assert any(note.startswith("head_dim=256") for note in spec.notes)


def test_llama4_text_config_gives_its_dimensions() -> None:
    spec = spec_of("llama-4-scout")
    assert (spec.num_layers, spec.hidden_size, spec.head_dim, spec.vocab_size) == (
        48, 5120, 128, 202048)


# --- sliding windows and hybrid models ---------------------------------------------------


def windows(spec: KVCacheSpec) -> list[tuple[int, int | None]]:
    return [(g.num_layers, g.sliding_window) for g in spec.layer_groups]


def test_mistral_slides_every_layer() -> None:
    assert windows(spec_of("mistral-7b")) == [(32, 4096)]


def test_gemma2_alternates_sliding_and_full_layers() -> None:
    assert windows(spec_of("gemma-2-9b")) == [(21, None), (21, 4096)]


def test_gemma3_has_one_full_layer_in_six() -> None:
    assert windows(spec_of("gemma-3-12b")) == [(48 // 6, None), (48 - 48 // 6, 1024)]


def test_layer_types_decide_each_layer() -> None:
    spec = spec_of("gpt-oss-20b", kv_cache_dtype="bfloat16")
    assert windows(spec) == [(12, None), (12, 128)]


def test_use_sliding_window_false_ignores_sliding_window() -> None:
    spec = spec_of("qwen2.5-7b")
    assert windows(spec) == [(28, None)]
    assert any("use_sliding_window is false" in note for note in spec.notes)


def test_qwen2_slides_layers_from_max_window_layers_when_enabled() -> None:
    config = load_model_preset("qwen2.5-7b")
    config.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    assert windows(KVCacheSpec.from_hf_config(config)) == [(20, None), (28 - 20, 4096)]


def test_sliding_window_pattern_marks_every_nth_layer_full() -> None:
    config = load_model_preset("mistral-7b") | {"sliding_window_pattern": 4}
    assert windows(KVCacheSpec.from_hf_config(config)) == [(32 // 4, None), (32 - 32 // 4, 4096)]


def test_null_sliding_window_means_full_attention() -> None:
    assert windows(spec_of("mixtral-8x7b")) == [(32, None)]


def test_llama4_rope_layers_are_chunked_and_every_fourth_is_global() -> None:
    spec = spec_of("llama-4-scout")
    assert windows(spec) == [(48, None)]  # per-token cost: chunked layers cost as full ones
    kinds = [(layer.kind, layer.chunk) for layer in spec.layers]
    assert kinds == ([("chunked", 8192)] * 3 + [("full", None)]) * 12


def test_chunked_attention_in_layer_types_needs_a_chunk_size() -> None:
    config = tiny(layer_types=["chunked_attention", "full_attention"] * 2)
    assert [x.kind for x in KVCacheSpec.from_hf_config(config).layers] == ["full"] * 4
    chunked = KVCacheSpec.from_hf_config(config | {"attention_chunk_size": 1024})
    assert [x.kind for x in chunked.layers] == ["chunked", "full"] * 2


def test_layer_types_of_wrong_length_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"layer_types .*\(4\), got 3"):
        KVCacheSpec.from_hf_config(tiny(layer_types=["full_attention"] * 3))


def test_unknown_layer_type_is_config_error_naming_it() -> None:
    config = tiny(layer_types=["full_attention", "linear_attention"] * 2)
    with pytest.raises(ConfigError, match=r"layer_types\[1\] = 'linear_attention'"):
        KVCacheSpec.from_hf_config(config)


def test_sliding_layer_without_a_window_is_config_error() -> None:
    config = tiny(layer_types=["sliding_attention", "full_attention"] * 2)
    with pytest.raises(ConfigError, match="sliding_window is not set"):
        KVCacheSpec.from_hf_config(config)


def test_pipeline_stage_with_more_full_layers_decides_among_equal_stages() -> None:
    spec = spec_of("gemma-2-9b", pipeline_parallel_size=4)
    assert spec.pipeline_layers == (10, 11, 11, 10)
    # stage 1 holds layers 10..20 (6 sliding), stage 2 layers 21..31 (6 full): stage 2 decides.
    assert spec.pipeline_stage == 2
    assert windows(spec) == [(6, None), (5, 4096)]


# --- MLA and checkpoint KV dtypes ----------------------------------------------------------


def test_mla_stores_one_latent_per_layer() -> None:
    spec = spec_of("deepseek-v3")
    assert spec.attention == "mla"
    assert (spec.num_kv_heads, spec.head_dim) == (1, 512 + 64)
    assert (spec.kv_lora_rank, spec.qk_rope_head_dim) == (512, 64)


def test_mla_latent_is_replicated_on_every_tp_rank() -> None:
    assert spec_of("deepseek-v3", tensor_parallel_size=8).bytes_per_token == (
        spec_of("deepseek-v3").bytes_per_token)


def test_mla_tp_must_divide_the_attention_heads() -> None:
    with pytest.raises(InvalidInputError, match=r"tensor_parallel_size 3 .* 16 attention heads"):
        spec_of("deepseek-v2-lite", tensor_parallel_size=3)


def test_deepseek_mtp_layer_is_noted_not_counted() -> None:
    spec = spec_of("deepseek-v3")
    assert spec.num_layers == 61
    assert any("multi-token-prediction" in note for note in spec.notes)


def test_fp8_weight_quantization_leaves_the_kv_cache_in_model_dtype() -> None:
    assert spec_of("deepseek-v3").kv_dtype == "bfloat16"


def test_modelopt_fp8_kv_scheme_makes_auto_fp8() -> None:
    spec = spec_of("llama-3.1-8b-fp8")
    assert (spec.kv_dtype, spec.kv_dtype_bytes) == ("fp8_e4m3", 1)
    assert any("FP8 KV cache" in note for note in spec.notes)


def test_explicit_kv_dtype_wins_over_the_checkpoint_scheme() -> None:
    assert spec_of("llama-3.1-8b-fp8", kv_cache_dtype="float16").kv_dtype == "float16"


def test_modelopt_sidecar_beside_config_declares_fp8_kv(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(load_model_preset("llama-3.1-8b")))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.19.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
    }))
    assert KVCacheSpec.from_hf_config(tmp_path).kv_dtype == "fp8_e4m3"


def test_unknown_modelopt_kv_scheme_falls_back_to_model_dtype() -> None:
    config = tiny(quantization_config={"quant_method": "modelopt", "kv_cache_quant_algo": "NVFP4"})
    spec = KVCacheSpec.from_hf_config(config)
    assert spec.kv_dtype == "bfloat16"
    assert any("'NVFP4'" in note for note in spec.notes)


def test_auto_without_a_config_dtype_is_bfloat16_as_vllm_runs_it() -> None:
    spec = spec_of("gpt-oss-20b")
    assert spec.kv_dtype == "bfloat16"
    assert any("no torch_dtype or dtype" in note for note in spec.notes)


def test_newer_dtype_key_is_read_when_torch_dtype_is_absent() -> None:
    spec = KVCacheSpec.from_hf_config(tiny(torch_dtype=..., dtype="float16"))
    assert (spec.dtype, spec.bytes_per_token) == ("float16", 2 * 4 * 8 * 64 * 2)


def test_float32_checkpoint_gets_a_bfloat16_cache_as_engines_run_it() -> None:
    spec = KVCacheSpec.from_hf_config(tiny(torch_dtype="float32"))
    assert (spec.dtype, spec.kv_dtype, spec.bytes_per_token) == (
        "bfloat16", "bfloat16", 2 * 4 * 8 * 64 * 2)
    explicit = KVCacheSpec.from_hf_config(tiny(torch_dtype="float32"), kv_cache_dtype="float32")
    assert explicit.bytes_per_token == 2 * 4 * 8 * 64 * 4


@pytest.mark.parametrize("dtype", ["float64", "int4", 16, "bf"])
def test_unknown_model_dtype_is_config_error_naming_it(dtype: Any) -> None:
    with pytest.raises(ConfigError, match=rf"torch_dtype = {dtype!r}"):
        KVCacheSpec.from_hf_config(tiny(torch_dtype=dtype))


# --- KV-head and head-size fallbacks ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "kv_heads"),
    [
        ({"num_key_value_heads": 2}, 2),
        ({"num_kv_heads": 2}, 2),
        ({"n_head_kv": 2}, 2),
        ({"multi_query_group_num": 2, "multi_query_attention": True}, 2),
        ({"multi_query_group_num": 2, "multi_query_attention": False}, 8),
        ({"multi_query": True}, 1),
        ({"num_key_value_heads": None}, 8),
        ({}, 8),
    ],
    ids=["num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num",
         "multi_query_group_num-off", "multi_query", "null", "absent-is-mha"],
)
def test_kv_heads_fall_back_through_the_known_keys(
    overrides: dict[str, Any], kv_heads: int
) -> None:
    spec = KVCacheSpec.from_hf_config(tiny(**overrides))
    assert spec.total_num_kv_heads == kv_heads
    assert spec.bytes_per_token == 2 * 4 * kv_heads * 64 * 2


def test_head_dim_falls_back_to_hidden_size_over_heads() -> None:
    assert KVCacheSpec.from_hf_config(tiny()).head_dim == 512 // 8


def test_null_head_dim_falls_back_to_hidden_size_over_heads() -> None:
    assert KVCacheSpec.from_hf_config(tiny(head_dim=None)).head_dim == 512 // 8


def test_explicit_head_dim_wins_over_hidden_size_over_heads() -> None:
    assert KVCacheSpec.from_hf_config(tiny(head_dim=128)).head_dim == 128


def test_gpt2_style_keys_are_understood() -> None:
    config = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024,
              "torch_dtype": "float32"}
    spec = KVCacheSpec.from_hf_config(config)
    assert spec.bytes_per_token == 2 * 12 * 12 * 64 * 2
    assert spec.max_position_embeddings == 1024


def test_multi_query_attention_is_replicated_when_tp_exceeds_it() -> None:
    spec = KVCacheSpec.from_hf_config(tiny(num_key_value_heads=1), tensor_parallel_size=4)
    assert (spec.num_kv_heads, spec.bytes_per_token) == (1, 2 * 4 * 1 * 64 * 2)
    assert any("replicated" in note for note in spec.notes)


# --- parallelism errors ------------------------------------------------------------------------


def test_tp_not_dividing_the_attention_heads_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match=r"tensor_parallel_size 8 .* 28 attention heads"):
        spec_of("qwen2.5-7b", tensor_parallel_size=8)


def test_tp_not_dividing_the_kv_heads_is_invalid_input() -> None:
    config = tiny(num_attention_heads=48, hidden_size=48 * 64, num_key_value_heads=12)
    with pytest.raises(InvalidInputError, match=r"tensor_parallel_size 8 .* 12 KV heads"):
        KVCacheSpec.from_hf_config(config, tensor_parallel_size=8)


def test_tp_above_kv_heads_must_be_a_multiple_of_them() -> None:
    config = tiny(num_attention_heads=24, hidden_size=24 * 64, num_key_value_heads=4)
    with pytest.raises(InvalidInputError, match="multiple of 4"):
        KVCacheSpec.from_hf_config(config, tensor_parallel_size=6)


def test_more_stages_than_layers_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="pipeline_parallel_size 5 exceeds the model's 4"):
        KVCacheSpec.from_hf_config(tiny(), pipeline_parallel_size=5)


@pytest.mark.parametrize("size", [0, -1, True, 2.0, "2", 1 << 20])
@pytest.mark.parametrize("name", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_bad_parallel_size_is_invalid_input_naming_it(name: str, size: Any) -> None:
    with pytest.raises(InvalidInputError, match=name):
        KVCacheSpec.from_hf_config(tiny(), **{name: size})


@pytest.mark.parametrize(
    ("layers", "stages", "expected"),
    [(61, 4, (15, 15, 16, 15)), (32, 3, (11, 11, 10)), (7, 4, (2, 2, 2, 1)), (80, 1, (80,))],
)
def test_pipeline_partition_gives_the_remainder_to_the_stages_before_the_last(
    layers: int, stages: int, expected: tuple[int, ...]
) -> None:
    assert pipeline_partition(layers, stages) == expected


# --- bad config input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_hidden_layers": ...}, "has no num_hidden_layers"),
        ({"hidden_size": ...}, "has no hidden_size"),
        ({"num_attention_heads": ...}, "has no num_attention_heads"),
        ({"num_hidden_layers": "32"}, r"num_hidden_layers must be an integer, got '32'"),
        ({"num_hidden_layers": True}, "num_hidden_layers must be an integer, got True"),
        ({"num_hidden_layers": 4.5}, "num_hidden_layers must be an integer, got 4.5"),
        ({"num_hidden_layers": math.nan}, "num_hidden_layers must be an integer, got nan"),
        ({"num_hidden_layers": 0}, "num_hidden_layers = 0 must be at least 1"),
        ({"num_hidden_layers": -4}, "num_hidden_layers = -4 must be at least 1"),
        ({"num_hidden_layers": 1e30}, r"num_hidden_layers = 1e\+30 is not plausible"),
        ({"num_attention_heads": [8]}, "num_attention_heads must be an integer"),
        ({"head_dim": 0}, "head_dim = 0 must be at least 1"),
        ({"hidden_size": 500}, "hidden_size 500 is not a multiple of num_attention_heads 8"),
        ({"num_key_value_heads": 16}, "num_key_value_heads = 16 exceeds num_attention_heads = 8"),
        ({"sliding_window": "4k"}, "sliding_window must be an integer"),
        ({"text_config": [1, 2]}, "text_config must be a JSON object"),
        ({"num_local_experts": 4, "num_experts_per_tok": 8}, "8 experts per token exceeds the 4"),
        ({"vocab_size": -1}, "vocab_size = -1 must be at least 1"),
    ],
)
def test_bad_config_value_is_config_error_naming_the_key(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        KVCacheSpec.from_hf_config(tiny(**overrides))


def test_float_that_is_a_whole_number_is_accepted() -> None:
    assert KVCacheSpec.from_hf_config(tiny(num_hidden_layers=4.0)).num_layers == 4


def test_missing_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        KVCacheSpec.from_hf_config(tmp_path / "nope.json")


def test_preset_name_given_to_from_hf_config_reads_the_preset() -> None:
    # issue 21: every place a model is named accepts a preset (it used to be refused).
    assert KVCacheSpec.from_hf_config("llama-3.1-8b") == KVCacheSpec.from_preset("llama-3.1-8b")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param(b'{"num_hidden_layers": 4,\n oops}', "not valid JSON.*line 2", id="not-json"),
        pytest.param(b'{"num_hidden_layers": NaN}', "NaN is not valid JSON", id="nan-constant"),
        pytest.param(b"[1, 2, 3]", "must hold a JSON object", id="not-an-object"),
        pytest.param(b"\x89PNG\r\n\x1a\n\xff\xfe", "not UTF-8", id="not-utf8"),
        pytest.param(b" " * (16 * MiB + 1), r"16\.00 MiB \(16777216 bytes\)", id="over-16-mib"),
    ],
)
def test_unreadable_config_file_is_config_error_naming_why(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        KVCacheSpec.from_hf_config(path)


def test_directory_without_config_json_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no config.json"):
        KVCacheSpec.from_hf_config(tmp_path)


def test_model_directory_is_read_and_names_the_model(tmp_path: Path) -> None:
    model_dir = tmp_path / "Qwen2.5-7B-Instruct"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(load_model_preset("qwen2.5-7b")))
    spec = KVCacheSpec.from_hf_config(model_dir)
    assert (spec.model_name, spec.bytes_per_token) == ("Qwen2.5-7B-Instruct", 2 * 28 * 4 * 128 * 2)


def test_config_of_another_type_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="config.json path or a dict"):
        KVCacheSpec.from_hf_config(42)  # type: ignore[arg-type]


# --- request_bytes ----------------------------------------------------------------------------


def test_full_attention_request_takes_whole_blocks() -> None:
    spec = spec_of("llama-3.1-8b")
    assert spec.request_bytes(17, block_size=16) == 2 * 16 * (2 * 32 * 8 * 128 * 2)


def test_window_layers_hold_the_window_and_one_chunk() -> None:
    spec = spec_of("mistral-7b")
    blocks = math.ceil((4096 - 1 + 8192) / 16) + 1
    assert spec.request_bytes(32768, 16, max_num_batched_tokens=8192) == (
        blocks * 16 * spec.bytes_per_token)


def test_window_layers_never_hold_more_than_the_request() -> None:
    spec = spec_of("mistral-7b")
    assert spec.request_bytes(100, 16, max_num_batched_tokens=8192) == (
        math.ceil(100 / 16) * 16 * spec.bytes_per_token)


def test_without_chunked_prefill_window_layers_hold_every_token() -> None:
    spec = spec_of("mistral-7b")
    assert spec.request_bytes(32768, 16) == 32768 * spec.bytes_per_token


def test_hybrid_request_adds_full_and_window_layers() -> None:
    spec = spec_of("gemma-3-12b")
    per_layer = 2 * 8 * 256 * 2
    full = 8 * per_layer * 131072
    window = 40 * per_layer * (math.ceil((1024 - 1 + 2048) / 16) + 1) * 16
    assert spec.request_bytes(131072, 16, max_num_batched_tokens=2048) == full + window


@pytest.mark.parametrize(
    "kwargs",
    [{"num_tokens": 0}, {"num_tokens": -1}, {"block_size": 0},
     {"max_num_batched_tokens": 0}, {"num_tokens": 1.5}],
)
def test_request_bytes_rejects_non_positive_arguments(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"num_tokens": 16, "block_size": 16} | kwargs
    with pytest.raises(InvalidInputError, match=next(iter(kwargs))):
        spec_of("llama-3.1-8b").request_bytes(**args)


# --- model and presets -------------------------------------------------------------------------


def test_spec_round_trips_through_json() -> None:
    spec = spec_of("gemma-2-9b", pipeline_parallel_size=4)
    assert KVCacheSpec.model_validate_json(spec.model_dump_json()) == spec


def test_spec_with_inconsistent_bytes_per_token_is_rejected() -> None:
    data = spec_of("llama-3.1-8b").model_dump()
    data["bytes_per_token"] += 1
    with pytest.raises(ValidationError, match="bytes_per_token"):
        KVCacheSpec.model_validate(data)


def test_layer_group_bytes_per_token_covers_its_layers() -> None:
    assert LayerGroup(num_layers=3, bytes_per_token_per_layer=10).bytes_per_token == 30


def test_at_least_ten_presets_ship() -> None:
    assert len(model_presets()) >= 10


def test_unknown_preset_is_config_error_listing_the_names() -> None:
    with pytest.raises(ConfigError, match=r"unknown model preset 'llama-9'.*llama-3\.1-8b"):
        load_model_preset("llama-9")


def test_preset_names_are_case_insensitive() -> None:
    assert load_model_preset("Llama-3.1-8B") == load_model_preset("llama-3.1-8b")


def test_each_load_returns_a_fresh_dict() -> None:
    load_model_preset("llama-3.1-8b")["num_hidden_layers"] = 1
    assert load_model_preset("llama-3.1-8b")["num_hidden_layers"] == 32


def test_from_preset_names_the_spec_after_the_preset() -> None:
    assert KVCacheSpec.from_preset("qwen3-8b").model_name == "qwen3-8b"


# --- per-layer kinds: hybrids, state sizes, KV sharing ------------------------------------------


def test_qwen3_next_has_gdn_state_layers_and_every_fourth_full() -> None:
    spec = spec_of("qwen3-next-80b-a3b", tensor_parallel_size=2)
    assert [x.kind for x in spec.layers] == (["mamba"] * 3 + ["full"]) * 12
    conv = (2 * 16 * 128 + 32 * 128) // 2 * 3
    recurrent = 32 // 2 * 128 * 128
    assert spec.layers[0].state_bytes == (conv + recurrent) * 2
    assert spec.layers[0].state_kind == "gdn"


def test_granite_h_mamba_layers_count_in_the_pipeline_split() -> None:
    spec = spec_of("granite-4.0-h-small", pipeline_parallel_size=2)
    assert spec.pipeline_layers == (20, 20)
    assert [i for i, x in enumerate(spec.layers) if x.kind == "full"] == [5, 15, 25, 35]
    assert spec.num_layers == 20 and sum(g.num_layers for g in spec.layer_groups) == 2


def test_gemma_3n_shared_layers_read_the_last_layer_of_their_kind() -> None:
    spec = spec_of("gemma-3n-e4b")
    shared = {i: x.shares_kv_with for i, x in enumerate(spec.layers) if x.shares_kv_with}
    assert sorted(shared) == list(range(20, 35))
    assert {shared[i] for i in shared if spec.layers[i].kind == "sliding"} == {18}
    assert {shared[i] for i in shared if spec.layers[i].kind == "full"} == {19}
    assert any("share the KV cache" in note for note in spec.notes)


def test_cohere2_sliding_layers_see_their_window_plus_one() -> None:
    assert windows(spec_of("cohere2-7b")) == [(8, None), (24, 4097)]


def nemotron_h(pattern: str, ssm_state_size: int, n_groups: int) -> dict[str, Any]:
    """A small Nemotron-H config: ``pattern`` (M Mamba, * attention, - MLP, E MoE) per layer."""
    return {
        "model_type": "nemotron_h", "num_hidden_layers": len(pattern),
        "hybrid_override_pattern": pattern,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 512,
        "mamba_num_heads": 16, "mamba_head_dim": 64, "ssm_state_size": ssm_state_size,
        "n_groups": n_groups, "conv_kernel": 4, "expand": 2, "torch_dtype": "bfloat16",
    }  # fmt: skip


def test_nemotron_h_pattern_gives_mamba_attention_and_cacheless_layers() -> None:
    config = nemotron_h("M-M*-E", ssm_state_size=128, n_groups=2)
    spec = KVCacheSpec.from_hf_config(config)
    assert [x.kind for x in spec.layers] == ["mamba", "none", "mamba", "full", "none", "none"]
    # The SSM state is float32 unless the config names a dtype (vLLM 0.33's
    # NemotronHForCausalLMConfig); the conv state keeps the model dtype.
    assert spec.layers[0].state_bytes == (1024 + 2 * 2 * 128) * 3 * 2 + 16 * 64 * 128 * 4
    bf16 = KVCacheSpec.from_hf_config(config | {"mamba_ssm_cache_dtype": "bfloat16"})
    assert bf16.layers[0].state_bytes == (1024 + 2 * 2 * 128) * 3 * 2 + 16 * 64 * 128 * 2
    assert spec.bytes_per_token == 2 * 2 * 64 * 2
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        KVCacheSpec.from_hf_config(config | {"hybrid_override_pattern": "M*"})


def test_a_pipeline_stage_without_kv_layers_cannot_be_planned_for_vllm() -> None:
    from memacct.engines import get_engine
    from memacct.engines.base import KVSettings

    config = nemotron_h("*MM-", ssm_state_size=16, n_groups=1)
    spec = KVCacheSpec.from_hf_config(config, pipeline_parallel_size=4)
    assert spec.pipeline_stage == 0
    with pytest.raises(InvalidInputError, match="holds no KV-cache layer"):
        get_engine("vllm").kv.plan(spec, 2**30, KVSettings(max_model_len=4096))


def test_the_spec_keeps_one_record_of_its_layers() -> None:
    # layer_groups is a summary of layers, never a second stored copy (issue 20).
    assert "layer_groups" not in KVCacheSpec.model_fields
    spec = spec_of("gemma-3-12b", pipeline_parallel_size=2)
    stage = spec.stage_layers()
    assert sum(g.num_layers for g in spec.layer_groups) == sum(x.bytes_per_token > 0
                                                               for x in stage)
    assert spec.bytes_per_token == sum(g.bytes_per_token for g in spec.layer_groups)
    again = KVCacheSpec.model_validate_json(spec.model_dump_json())
    assert [type(x) for x in again.layers] == [type(x) for x in spec.layers]
