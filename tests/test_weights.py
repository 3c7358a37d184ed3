"""Weights on one rank: quantization layouts, tensor-parallel sharding, checkpoint headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from memacct.errors import ConfigError
from memacct.model.weights.estimate import (
    estimate_weights,
    formula_weights,
    meta_weights,
    safetensors_weights,
    weight_tensors,
)
from memacct.model.weights.quant import UnknownQuantizationError, parse_quantization
from memacct.planner import load_model_preset, model_presets

GIB = 2**30


def _llama(**changes: Any) -> dict[str, Any]:
    config = load_model_preset("llama-3.1-8b")
    config.update(changes)
    return config


def test_llama_weights_match_vllms_model_loading_figure() -> None:
    # "Model loading took 14.9889 GiB" (vllm-project/vllm#17122): parameters plus the
    # rotary cos/sin cache of 131072 positions.
    w = formula_weights(load_model_preset("llama-3.1-8b"))
    assert w.total_bytes / GIB == pytest.approx(14.9889, abs=0.001)


def test_tensor_parallelism_splits_embedding_and_lm_head_by_vocabulary() -> None:
    one = formula_weights(load_model_preset("llama-3.1-8b"))
    two = formula_weights(load_model_preset("llama-3.1-8b"), tensor_parallel_size=2)
    assert two.by_role["embedding"] * 2 == one.by_role["embedding"]
    assert two.by_role["lm_head"] * 2 == one.by_role["lm_head"]
    assert two.by_role["norms"] == one.by_role["norms"]  # replicated


def test_vocabulary_is_padded_to_64_before_splitting() -> None:
    w = formula_weights(_llama(vocab_size=128257, tie_word_embeddings=True))
    assert w.by_role["embedding"] == (128256 + 64) * 4096 * 2


def test_kv_heads_fewer_than_ranks_are_replicated() -> None:
    eight = formula_weights(_llama(), tensor_parallel_size=8).by_role["attention"]
    sixteen = formula_weights(_llama(), tensor_parallel_size=16).by_role["attention"]
    # q and o halve; k and v stay one head each once there are more ranks than KV heads.
    assert sixteen > eight / 2


@pytest.mark.parametrize(
    ("quant", "label"),
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8 (block 128x128)"),
        ({"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]}, "fbgemm"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "modelopt fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "nvfp4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "awq int4"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "gptq int8"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "nf4"),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8"),
    ],
)
def test_every_common_quantization_is_recognised(quant: dict[str, Any], label: str) -> None:
    scheme = parse_quantization({"quantization_config": quant})
    assert scheme is not None and label in scheme.label


def test_awq_int4_layout_counts_packed_weights_scales_and_zeros() -> None:
    scheme = parse_quantization(
        {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    )
    assert scheme is not None
    out_f, in_f = 4096, 4096
    groups = (in_f // 128) * out_f
    assert scheme.linear_bytes(out_f, in_f) == out_f * in_f // 2 + groups * 2 + groups // 2


def test_unknown_quantization_is_an_error_never_bf16() -> None:
    with pytest.raises(UnknownQuantizationError, match="'hqq' is not one memacct can size"):
        formula_weights(_llama(quantization_config={"quant_method": "hqq"}))


def test_quantized_linear_layers_shrink_but_embeddings_stay_in_dtype() -> None:
    fp8 = formula_weights(_llama(quantization_config={"quant_method": "fp8"}))
    bf16 = formula_weights(_llama())
    assert fp8.by_role["embedding"] == bf16.by_role["embedding"]
    assert fp8.by_role["mlp"] < 0.51 * bf16.by_role["mlp"]


def test_ignored_modules_stay_unquantized() -> None:
    quant = {"quant_method": "fp8", "ignored_layers": ["model.layers.*.mlp.gate_up_proj"]}
    some = formula_weights(_llama(quantization_config=quant))
    allq = formula_weights(_llama(quantization_config={"quant_method": "fp8"}))
    assert some.by_role["mlp"] > allq.by_role["mlp"]


def test_mxfp4_quantizes_experts_only_with_the_kernels_padding() -> None:
    config = load_model_preset("gpt-oss-20b")
    plain = formula_weights(config, mxfp4_pad=(1, 1))
    padded = formula_weights(config, mxfp4_pad=(256, 1))
    assert plain.quantization == "mxfp4 (experts)"
    assert plain.by_role["attention"] == padded.by_role["attention"]
    # 2880 -> 3072 on the intermediate dimension of every expert.
    assert padded.by_role["experts"] / plain.by_role["experts"] == pytest.approx(3072 / 2880, 1e-3)


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
              for name, (dtype, shape) in tensors.items()}  # fmt: skip
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body)


def _tiny_checkpoint(root: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 1, "intermediate_size": 128,
              "vocab_size": 1000, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16"}  # fmt: skip
    (root / "config.json").write_text(json.dumps(config))
    _write_safetensors(root / "model-00001-of-00002.safetensors", {
        "model.embed_tokens.weight": ("BF16", [1000, 64]),
        "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),
        "model.layers.0.self_attn.k_proj.weight": ("BF16", [32, 64]),
        "model.layers.0.input_layernorm.weight": ("BF16", [64]),
    })  # fmt: skip
    _write_safetensors(root / "model-00002-of-00002.safetensors", {
        "model.layers.0.mlp.down_proj.weight": ("BF16", [64, 128]),
        "lm_head.weight": ("BF16", [1000, 64]),
    })  # fmt: skip
    index = {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                            "model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))


def test_checkpoint_headers_give_the_weights_without_reading_tensors(tmp_path: Path) -> None:
    _tiny_checkpoint(tmp_path)
    w = safetensors_weights(tmp_path)
    assert w.source == "checkpoint"
    assert w.total_bytes == 2 * (1000 * 64 * 2 + 64 * 64 + 32 * 64 + 64 + 64 * 128)
    assert estimate_weights(tmp_path).total_bytes == w.total_bytes


def test_checkpoint_headers_are_sharded_like_the_engine(tmp_path: Path) -> None:
    _tiny_checkpoint(tmp_path)
    w = safetensors_weights(tmp_path, tensor_parallel_size=2)
    vocab = 1024 // 2  # 1000 padded to 1024, split in two
    assert w.by_role["embedding"] == vocab * 64 * 2
    assert w.by_role["norms"] == 64 * 2
    assert w.by_role["mlp"] == 64 * 128


def test_a_damaged_header_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_llama()))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 2**60))
    with pytest.raises(ConfigError, match="not a safetensors file"):
        safetensors_weights(tmp_path)


def test_meta_device_and_formulas_agree_on_every_preset() -> None:
    pytest.importorskip("torch", reason="the meta-device path needs torch")
    pytest.importorskip("transformers", reason="the meta-device path needs memacct[hf]")
    for name in model_presets():
        config = load_model_preset(name)
        try:
            formula = formula_weights(config, mxfp4_pad=(1, 1))
        except ConfigError:
            continue  # a size only transformers' defaults know (gemma-3's vocabulary)
        meta = meta_weights(config)
        text = formula.total_bytes - formula.by_role.get("buffers", 0)
        text -= formula.by_role.get("vision", 0) - meta.by_role.get("vision", 0)
        assert text == pytest.approx(meta.total_bytes, rel=0.005), name


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_estimate_is_the_sum_of_the_weight_inventory_for_every_preset(tp: int) -> None:
    for name in model_presets():
        config = load_model_preset(name)
        try:
            estimate = estimate_weights(config, tensor_parallel_size=tp, source="formula")
        except ConfigError:
            continue  # sized by the meta device or a checkpoint (tests/test_inventory in bench)
        tensors = weight_tensors(config, tensor_parallel_size=tp, source="formula")
        assert sum(t.nbytes for t in tensors) == estimate.total_bytes, (name, tp)
        by_role: dict[str, int] = {}
        for t in tensors:
            by_role[t.role] = by_role.get(t.role, 0) + t.nbytes
        assert by_role == dict(estimate.by_role), (name, tp)
        assert all(t.nbytes >= 0 and t.shape for t in tensors), (name, tp)


def test_a_checkpoints_inventory_is_its_header_tensors_sharded(tmp_path: Path) -> None:
    _tiny_checkpoint(tmp_path)
    tensors = weight_tensors(tmp_path, tensor_parallel_size=2)
    estimate = estimate_weights(tmp_path, tensor_parallel_size=2)
    assert sum(t.nbytes for t in tensors) == estimate.total_bytes
    assert {t.name for t in tensors} >= {"model.embed_tokens.weight", "rotary_emb.cos_sin_cache"}
    assert [t.role for t in tensors].count("buffers") == 1


def test_the_inventory_sizes_mxfp4_experts_as_the_estimate_does() -> None:
    config = load_model_preset("gpt-oss-20b")
    tensors = weight_tensors(config)
    experts = [t for t in tensors if t.role == "experts"]
    # w13, w2 and their two bf16 biases per MoE layer, far below the bf16 experts' bytes.
    assert len(experts) == 4 * config["num_hidden_layers"]
    assert sum(t.nbytes for t in tensors) == estimate_weights(config).total_bytes
    assert sum(t.nbytes for t in tensors) < 15 * 2**30


def _ct(weights: dict[str, Any]) -> dict[str, Any]:
    return {"quantization_config": {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("weights", "label", "bytes_per_weight"),
    [
        ({"num_bits": 8, "type": "float", "strategy": "channel"}, "fp8 (channel)", 1.0),
        ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
         "fp8 (block)", 1.0),
        ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
         "nvfp4", 0.5),
        ({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
          "symmetric": False}, "int4 (group 128)", 0.5),
        ({"num_bits": 8, "type": "int", "strategy": "channel"}, "int8 (channel)", 1.0),
    ],
)  # fmt: skip
def test_compressed_tensors_schemes(
    weights: dict[str, Any], label: str, bytes_per_weight: float
) -> None:
    scheme = parse_quantization(_ct(weights))
    assert scheme is not None and label in scheme.label
    size = scheme.linear_bytes(4096, 4096)
    # Scales add at most one FP8 byte per 16 weights (NVFP4): 12.5% of a 4-bit weight.
    assert bytes_per_weight * 4096 * 4096 <= size <= 1.13 * bytes_per_weight * 4096 * 4096


def test_compressed_tensors_without_groups_and_unknown_modelopt_are_errors() -> None:
    with pytest.raises(UnknownQuantizationError, match="no config_groups"):
        parse_quantization({"quantization_config": {"quant_method": "compressed-tensors"}})
    with pytest.raises(UnknownQuantizationError, match="quant_algo 'W4A8'"):
        parse_quantization(
            {"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8"}}
        )


def test_mla_and_fp8_block_checkpoints_are_sized() -> None:
    w = formula_weights(load_model_preset("deepseek-v3"), tensor_parallel_size=8)
    # 671B parameters, mostly FP8 experts, over 8 ranks: about 78 GiB per rank.
    assert 75 * GIB < w.total_bytes < 82 * GIB
    assert w.quantization is not None and "block" in w.quantization


def test_multimodal_towers_are_counted() -> None:
    w = formula_weights(load_model_preset("llama-4-scout"))
    assert w.by_role["vision"] > 0.5 * GIB
