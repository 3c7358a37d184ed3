"""Looped and recurrent-depth models: one cache per (layer, run), as vLLM 0.33 builds them.

Configs are the golden ones (tests/data/golden/models/new/, sources.json names each one's
source); vLLM's own rows for them are in tests/data/golden/vllm-0.33-new-archs.json.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memacct.errors import ConfigError, InvalidInputError
from memacct.model.layers import ShortConvWindow
from memacct.planner import KVCacheSpec

NEW = Path(__file__).parent / "data" / "golden" / "models" / "new"


def config(name: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NEW / f"{name}.json").read_text())
    return {**data, **changes}


def kinds(spec: KVCacheSpec) -> Counter[tuple[str, int | None, int]]:
    return Counter((x.kind, getattr(x, "sliding_window", None), getattr(x, "head_size", 0))
                   for x in spec.layers)


def test_dory_keeps_a_cache_per_recurrent_loop_and_none_in_mlp_blocks() -> None:
    # DoryConfig: odd blocks are MLP-only, i % 8 == 6 full, the rest slide over 1024.
    one = kinds(KVCacheSpec.from_hf_config(config("dory-default")))
    assert one == {("none", None, 0): 36, ("sliding", 1024, 256): 27, ("full", None, 256): 9}
    # 8 input + 56 recurrent (3 loops) + 8 output blocks: the 28 attention blocks of the
    # recurrent part keep 3 caches each.
    looped = KVCacheSpec.from_hf_config(config("dory-looped"))
    attention = [x for x in looped.layers if x.kind != "none"]
    assert len(attention) == 36 + 28 * 2
    shared = KVCacheSpec.from_hf_config(config("dory-looped", recurrent_kv_cache_mode="last_loop"))
    assert len([x for x in shared.layers if x.kind != "none"]) == 36


def test_dory_refuses_what_vllm_refuses() -> None:
    with pytest.raises(InvalidInputError, match="tensor_parallel_size 1"):
        KVCacheSpec.from_hf_config(config("dory-default"), tensor_parallel_size=2)
    with pytest.raises(ConfigError, match="n_recurrent_layers"):
        KVCacheSpec.from_hf_config(config("dory-looped", n_recurrent_layers=50))
    with pytest.raises(ConfigError, match="recurrent_kv_cache_mode"):
        KVCacheSpec.from_hf_config(config("dory-looped", recurrent_kv_cache_mode="every"))


def test_hrm_text_keeps_a_full_cache_per_recurrence_step() -> None:
    # 16 layers per stack, H_cycles 2, L_cycles 3: 16 x 2 x (3 + 1) caches, multi-head.
    spec = KVCacheSpec.from_hf_config(config("hrm-text-default"))
    assert kinds(spec) == {("full", None, 128): 128}
    assert {getattr(x, "kv_heads", 0) for x in spec.layers} == {12}
    fewer = KVCacheSpec.from_hf_config(config("hrm-text-default", H_cycles=1, L_cycles=2))
    assert len(fewer.layers) == 16 * 1 * 3


def test_loopcoder_reads_its_head_size_and_loop_windows() -> None:
    # hidden 4096 / 32 heads = 128, whatever head_dim (96) says; loop 0 slides over the
    # config's sliding_window (no layer_types), loops 1 and 2 over loop_window_size.
    spec = KVCacheSpec.from_hf_config(config("iquest-loopcoder-synthetic"))
    assert kinds(spec) == {("sliding", 4096, 128): 8, ("sliding", 64, 128): 16}
    full = KVCacheSpec.from_hf_config(config("iquest-loopcoder-full-synthetic"))
    assert kinds(full) == {("full", None, 128): 8, ("sliding", 128, 128): 8}


def test_muse_glimmer_derives_its_full_layers_from_the_last_one() -> None:
    raw = config("muse-glimmer-default")
    raw["text_config"] = {k: v for k, v in raw["text_config"].items() if k != "layer_types"}
    spec = KVCacheSpec.from_hf_config(raw)
    full = [x.layer for x in spec.layers if x.kind == "full"]
    assert full == list(range(3, 52, 4)) and len(spec.layers) == 52


def test_flint_is_full_unless_layer_types_slide() -> None:
    base = {"architectures": ["FlintForCausalLM"], "model_type": "flint", "hidden_size": 2048,
            "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
            "head_dim": 128, "vocab_size": 1000, "max_position_embeddings": 8192}
    assert kinds(KVCacheSpec.from_hf_config(base)) == {("full", None, 128): 4}
    hybrid = {**base, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    assert kinds(KVCacheSpec.from_hf_config(hybrid)) == {("sliding", 513, 128): 3,
                                                         ("full", None, 128): 1}


def test_domyn_edge_reads_per_layer_windows_and_head_sizes() -> None:
    spec = KVCacheSpec.from_hf_config(config("domyn-edge-synthetic"))
    assert kinds(spec) == {("sliding", 512, 64): 6, ("full", None, 128): 2}
    mixed = config("domyn-edge-synthetic", per_layer_config={"0": {"head_dim": 32}})
    with pytest.raises(ConfigError, match="more than one head_dim"):
        KVCacheSpec.from_hf_config(mixed)


def test_hy_v4_plans_dense_mla_and_refuses_sparse_layers() -> None:
    spec = KVCacheSpec.from_hf_config(config("hy-v4-default"))
    assert {x.kind for x in spec.layers} == {"mla"} and len(spec.layers) == 34
    sparse = config("hy-v4-default", layer_types=["deepseek_sparse_attention"] * 34)
    with pytest.raises(ConfigError, match="deepseek_sparse_attention"):
        KVCacheSpec.from_hf_config(sparse)


def test_minimax_m3_keeps_a_bf16_indexer_key_beside_its_sparse_layers() -> None:
    spec = KVCacheSpec.from_hf_config(config("minimax-m3-default"))
    indexer = [x for x in spec.layers if x.kind == "mla"]
    # sparse_attention_freq: the first 3 layers dense, 57 sparse; one bf16 key of 128.
    assert [x.layer for x in indexer] == list(range(3, 60))
    assert {x.bytes_per_token for x in indexer} == {256}
    fp8 = KVCacheSpec.from_hf_config(config("minimax-m3-default"), kv_cache_dtype="fp8")
    assert {x.bytes_per_token for x in fp8.layers if x.kind == "mla"} == {256}
    # vLLM groups MLA specs with full attention (one uniform group): 2 GiB at block 16
    # holds 2^31 // (16 x (60 x 2048 + 57 x 256)) blocks, as its own code plans (976).
    from memacct.engines import get_engine
    from memacct.engines.base import KVSettings

    layout = get_engine("vllm").kv.plan(spec, 2 << 30, KVSettings(block_size=16,
                                                                  max_model_len=8192))
    assert layout.num_blocks == (2 << 30) // (16 * (60 * 2048 + 57 * 256)) == 976


def test_inkling_pages_its_conv_state_in_blocks_of_the_kernel() -> None:
    spec = KVCacheSpec.from_hf_config(config("inkling-local"))
    conv = [x for x in spec.layers if isinstance(x, ShortConvWindow)]
    # 16 layers: a conv state each, 4 x (2 x 128 + 2 x 1536 // 4 = 1024) heads, kernel 4,
    # bf16 (the model's dtype, also under an fp8 KV cache).
    assert len(conv) == 16 and {(x.block_tokens, x.head_size, x.bytes_per_token)
                                for x in conv} == {(4, 1024, 4 * 1024 * 2)}
    fp8 = KVCacheSpec.from_hf_config(config("inkling-local"), kv_cache_dtype="fp8")
    assert {x.bytes_per_token for x in fp8.layers if getattr(x, "block_tokens", None)} == {8192}
    with pytest.raises(InvalidInputError, match="at most 4"):
        KVCacheSpec.from_hf_config(config("inkling-local", num_attention_heads=16),
                                   tensor_parallel_size=8)
