"""SGLang 0.5.23's token pool (rules and sources: docs/engines.md)."""

from __future__ import annotations

import pytest

import memacct
from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.engines.sglang.kv import max_running_requests, sglang_partition
from memacct.errors import InsufficientMemoryError
from memacct.planner import KVCacheSpec
from memacct.units import GiB

SGLANG = get_engine("sglang").kv


def settings(length: int = 8192, page: int = 1) -> KVSettings:
    return KVSettings(max_model_len=length, block_size=page)


def test_plain_pool_is_budget_over_cell_floored_to_the_page() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    budget = 10 * GiB + 12345
    assert SGLANG.plan(llama, budget, settings()).kv_tokens == budget // llama.bytes_per_token
    paged = SGLANG.plan(llama, budget, settings(page=64))
    assert paged.kv_tokens == budget // llama.bytes_per_token // 64 * 64
    assert paged.num_blocks == paged.kv_tokens // 64


def test_gemma2_gets_a_plain_pool_with_every_layer_at_full_size() -> None:
    gemma = KVCacheSpec.from_preset("gemma-2-9b")
    layout = SGLANG.plan(gemma, 20 * GiB, settings())
    assert layout.kv_tokens == 20 * GiB // gemma.bytes_per_token
    assert [g.kind for g in layout.groups] == ["full_pool"]


def test_gpt_oss_splits_full_and_sliding_pools_at_a_ratio_of_0_8() -> None:
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    per_layer = 2 * 8 * 64 * 2
    cell = 12 * per_layer + 0.8 * 12 * per_layer
    layout = SGLANG.plan(gpt, 20 * GiB, settings())
    assert layout.kv_tokens == int(20 * GiB // cell)
    assert [g.kind for g in layout.groups] == ["full_pool", "swa_pool"]


def test_a_sliding_pool_smaller_than_a_window_is_refused() -> None:
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    with pytest.raises(InsufficientMemoryError, match="cannot hold one request"):
        SGLANG.plan(gpt, 120 * 2 * 8 * 64 * 2 * 24, settings())


def test_a_pool_smaller_than_one_request_is_only_warned_about() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    layout = SGLANG.plan(llama, 1 * GiB, settings(131072))
    assert layout.kv_tokens < 131072
    assert any("only warns" in note for note in layout.notes)


def test_pipeline_extra_layers_go_to_the_last_stages() -> None:
    assert sglang_partition(61, 4) == (15, 15, 15, 16)
    assert sglang_partition(10, 4) == (2, 2, 3, 3)
    deepseek = KVCacheSpec.from_preset("deepseek-v3", pipeline_parallel_size=4)
    layout = SGLANG.plan(deepseek, 20 * GiB, settings())
    assert layout.kv_tokens == 20 * GiB // (16 * 576 * 2)


def test_max_running_requests_default() -> None:
    assert max_running_requests(1_000_000, 8192) == 4096
    assert max_running_requests(100_000, 131072) == 2048
    assert max_running_requests(3000, 8192) == 1500


def test_mamba_state_slots_take_their_share_first_and_only_full_layers_count() -> None:
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    state = sum(x.state_bytes or 0 for x in qwen.layers)
    budget = 20 * GiB
    slots = int((budget * 0.9 / 1.9 - state) // state)
    rest = budget - (slots + 1) * state
    layout = SGLANG.plan(qwen, budget, settings())
    assert abs(layout.kv_tokens - rest // qwen.bytes_per_token) <= 1
    assert qwen.bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert f"max_running_requests={slots // 3}" in layout.notes[0]


def test_a_budget_below_one_mamba_slot_is_refused() -> None:
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    with pytest.raises(InsufficientMemoryError, match="state pool"):
        SGLANG.plan(qwen, 1 << 20, settings())


def test_plan_kv_cache_dispatches_to_sglang_with_its_default_page() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    p = memacct.plan_kv_cache(None, llama, engine="sglang", kv_cache_memory_bytes=20 * GiB,
                              max_model_len=8192)
    assert (p.engine, p.block_size, p.kv_tokens) == ("sglang", 1, 20 * GiB // (128 * 1024))
    assert p.report().splitlines()[-2].startswith("KV Cache is allocated. #tokens: ")
