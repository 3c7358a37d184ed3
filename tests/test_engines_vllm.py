"""vLLM 0.33's KV-cache manager, one rule per test (rules and sources: docs/engines.md)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import memacct
from memacct.engines import get_engine
from memacct.engines.base import Engine, KVLayout, KVManager, KVSettings
from memacct.engines.vllm.kv import in_flight_tokens
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.planner import KVCacheSpec
from memacct.planner.allocator_fit import kv_cache_reservation
from memacct.units import GiB

VLLM = get_engine("vllm").kv


def spec(name: str, **kwargs: Any) -> KVCacheSpec:
    return KVCacheSpec.from_preset(name, **kwargs)


def plan(name: str, budget: int = 20 * GiB, *, spec_kwargs: dict[str, Any] | None = None,
         **settings: Any) -> KVLayout:
    settings.setdefault("max_model_len", 8192)
    return VLLM.plan(spec(name, **(spec_kwargs or {})), budget, KVSettings(**settings))


def test_every_engine_is_data_behind_the_kv_manager_protocol() -> None:
    for name in ("vllm", "vllm-ascend", "sglang"):
        engine = get_engine(name)
        assert isinstance(engine, Engine) and isinstance(engine.kv, KVManager)
    assert get_engine("vllm-ascend").kv.plan.__func__ is VLLM.plan.__func__  # type: ignore[attr-defined]
    with pytest.raises(InvalidInputError, match="engine 'tgi' is not known"):
        get_engine("tgi")


@pytest.mark.parametrize(
    ("model", "group_size", "num_groups"),
    [("gemma-2-9b", 21, 2), ("gemma-3-12b", 8, 6), ("gpt-oss-20b", 12, 2),
     ("llama-4-scout", 12, 4), ("llama-3.1-8b", 32, 1)],
)
def test_groups_have_the_smallest_per_type_layer_count(
    model: str, group_size: int, num_groups: int
) -> None:
    groups = plan(model).groups
    assert len(groups) == num_groups
    assert {len(g.layers) for g in groups} == {group_size}


def test_a_type_is_split_by_striding() -> None:
    sliding = [g.layers for g in plan("gemma-3-12b").groups if g.kind == "sliding"]
    layers = [i for i in range(48) if (i + 1) % 6]
    assert sliding == [tuple(layers[i::5]) for i in range(5)]


def test_one_block_spans_every_layer_of_the_widest_group() -> None:
    layout = plan("gemma-3-12b")
    page = 16 * 2 * 8 * 256 * 2
    assert layout.block_bytes == 8 * page
    assert layout.num_blocks == 20 * GiB // (8 * page)


def test_sliding_window_holds_window_minus_one_plus_in_flight_plus_a_block() -> None:
    groups = plan("gpt-oss-20b", max_model_len=32768).groups
    sliding = next(g for g in groups if g.kind == "sliding")
    assert sliding.blocks_per_request == math.ceil((128 - 1 + 2 * 8192) / 16) + 1


def test_the_extra_sliding_block_is_not_capped_at_the_full_count() -> None:
    assert plan("mistral-7b", max_model_len=4096).blocks_per_request == 257


def test_chunked_local_attention_gets_chunk_plus_in_flight_and_no_extra_block() -> None:
    chunked = next(g for g in plan("llama-4-scout", max_model_len=65536).groups
                   if g.kind == "chunked")
    assert chunked.blocks_per_request == (8192 + 2 * 8192) // 16


def test_cohere2_slides_over_its_window_plus_one() -> None:
    sliding = next(g for g in plan("cohere2-7b").groups if g.kind == "sliding")
    assert sliding.window == 4097


@pytest.mark.parametrize(("async_scheduling", "pp", "expected"),
                         [(True, 1, 2), (False, 1, 1), (True, 4, 5), (False, 2, 2)])
def test_batches_in_flight(async_scheduling: bool, pp: int, expected: int) -> None:
    settings = KVSettings(max_model_len=8192, max_num_batched_tokens=1000,
                          async_scheduling=async_scheduling)
    assert in_flight_tokens(settings, pp) == expected * 1000


def test_the_null_block_is_held_back_before_the_fit_check() -> None:
    llama = spec("llama-3.1-8b")
    block = 16 * llama.bytes_per_token
    settings = KVSettings(max_model_len=8192)
    assert VLLM.plan(llama, 513 * block, settings).num_blocks == 513
    with pytest.raises(InsufficientMemoryError) as info:
        VLLM.plan(llama, 513 * block - 1, settings)
    assert info.value.estimated_max_model_len == 511 * 16


def test_the_estimate_is_the_longest_length_that_fits_after_the_null_block() -> None:
    gemma = spec("gemma-2-9b")
    with pytest.raises(InsufficientMemoryError) as info:
        VLLM.plan(gemma, 2 * GiB, KVSettings(max_model_len=8192))
    estimate = info.value.estimated_max_model_len
    assert estimate is not None and 0 < estimate < 8192
    VLLM.plan(gemma, 2 * GiB, KVSettings(max_model_len=estimate))
    with pytest.raises(InsufficientMemoryError):
        VLLM.plan(gemma, 2 * GiB, KVSettings(max_model_len=estimate + 1))


def test_tokens_are_concurrency_times_length_for_hybrids() -> None:
    layout = plan("gemma-3-12b")
    assert layout.max_concurrency == layout.num_blocks / layout.blocks_per_request
    assert layout.kv_tokens == int(layout.max_concurrency * 8192)
    assert layout.kv_tokens != layout.num_blocks * 16


def test_pipeline_stages_pad_to_their_widest_group_and_the_pool_is_their_minimum() -> None:
    layout = plan("gemma-2-9b", spec_kwargs={"pipeline_parallel_size": 2})
    assert len(layout.stage_blocks) == 2
    assert layout.num_blocks == min(layout.stage_blocks)
    # 42 layers: stages of 21; 11 sliding + 10 full on one, 10 + 11 on the other.
    page = 16 * 2 * 8 * 256 * 2
    assert layout.block_bytes == 11 * page


def test_mamba_hybrid_raises_the_block_size_so_a_page_holds_the_state() -> None:
    layout = plan("qwen3-next-80b-a3b")
    attention = 2 * 2 * 256 * 2  # bytes per token per attention layer
    state = spec("qwen3-next-80b-a3b").layers[0].state_bytes
    assert state is not None and layout.block_size % 64 == 0
    assert layout.block_size * attention >= state > (layout.block_size - 64) * attention
    assert {g.page_bytes for g in layout.groups} == {layout.block_size * attention}


def test_mamba_groups_keep_three_blocks_with_prefix_caching_and_one_without() -> None:
    on = [g.blocks_per_request for g in plan("granite-4.0-h-small").groups if g.kind == "mamba"]
    off = [g.blocks_per_request for g in plan("granite-4.0-h-small",
                                             enable_prefix_caching=False).groups
           if g.kind == "mamba"]
    assert set(on) == {3} and set(off) == {1} and len(on) == 9


def test_mamba2_groups_are_replicated_up_to_the_tp_size() -> None:
    granite = spec("granite-4.0-h-small", tensor_parallel_size=8)
    conv_dim = 2 * 4096 + 2 * 8 * 128  # 1 group replicated to 8
    expected = conv_dim // 8 * 3 * 2 + 128 // 8 * 64 * 128 * 2
    assert granite.layers[0].state_bytes == expected


def test_fp8_kv_does_not_shrink_the_state() -> None:
    auto = spec("qwen3-next-80b-a3b").layers[0].state_bytes
    assert spec("qwen3-next-80b-a3b", kv_cache_dtype="fp8").layers[0].state_bytes == auto


def test_kv_sharing_layers_keep_no_cache() -> None:
    layout = plan("gemma-3n-e4b")
    assert sum(len(g.layers) for g in layout.groups) == 20
    assert max(i for g in layout.groups for i in g.layers) < 20


def test_auto_fit_takes_the_longest_length_that_fits() -> None:
    layout = plan("llama-3.1-70b", 10 * GiB, max_model_len=-1, derived_max_model_len=131072)
    block = 16 * spec("llama-3.1-70b").bytes_per_token
    assert layout.max_model_len == (10 * GiB // block - 1) * 16
    assert plan("llama-3.1-8b", 60 * GiB, max_model_len=-1,
                derived_max_model_len=131072).max_model_len == 131072


def test_kv_cache_memory_bytes_plans_without_a_profile() -> None:
    p = memacct.plan_kv_cache(None, spec("gpt-oss-20b"), kv_cache_memory_bytes=20 * GiB,
                              max_model_len=8192)
    layout = plan("gpt-oss-20b")
    assert (p.num_blocks, p.kv_tokens, p.max_concurrency) == (
        layout.num_blocks, layout.kv_tokens, layout.max_concurrency)
    assert p.report().splitlines()[-3:] == VLLM.log_lines(layout)
    assert p.provenance is None and p.total_memory is None


def test_a_plan_needs_a_profile_or_a_budget() -> None:
    with pytest.raises(InvalidInputError, match="pass kv_cache_memory_bytes"):
        memacct.plan_kv_cache(None, spec("llama-3.1-8b"))


def test_the_log_lines_are_vllm_033s() -> None:
    lines = VLLM.log_lines(plan("llama-3.1-8b"))
    assert lines == [
        "Available KV cache memory: 20.00 GiB",
        "GPU KV cache size: 163,840 tokens",
        "Maximum concurrency for 8,192 tokens per request: 20.00x",
    ]


def test_max_num_seqs_does_not_enter_the_plan() -> None:
    assert plan("gemma-2-9b", max_num_seqs=1) == plan("gemma-2-9b", max_num_seqs=4096)


def test_fp8_ds_mla_is_656_bytes_per_token_per_layer() -> None:
    deepseek = spec("deepseek-v3", kv_cache_dtype="fp8_ds_mla")
    assert deepseek.bytes_per_token == 61 * 656
    with pytest.raises(InvalidInputError, match="not an MLA model"):
        spec("llama-3.1-8b", kv_cache_dtype="fp8_ds_mla")


def test_llama_70b_tp2_at_full_length_on_exactly_its_blocks_is_refused_like_vllm() -> None:
    # The case: memacct used to admit it; vLLM holds the null block back and refuses.
    llama = spec("llama-3.1-70b", tensor_parallel_size=2)
    budget = 131072 // 16 * 16 * llama.bytes_per_token
    with pytest.raises(InsufficientMemoryError) as info:
        VLLM.plan(llama, budget, KVSettings(max_model_len=131072))
    assert info.value.estimated_max_model_len == 131056


def test_a_hybrid_plan_from_a_profile_keeps_the_fragmentation_allowance_free() -> None:
    from _harness import simulate_engine_start

    from memacct.planner import load_model_preset

    start = simulate_engine_start(load_model_preset("gemma-3-12b"), device="h100-80gb",
                                  allocator="torch-cuda", truth_source="auto")
    result = start.result.model_copy(update={"fragmentation_allowance": 3 * GiB})
    gemma = spec("gemma-3-12b")
    p = memacct.plan_kv_cache(result, gemma, max_model_len=8192)
    # The allowance, and each of the engine's shared tensors rounded by the allocator, stay
    # free: the most blocks whose rounded tensors fit beside the allowance.
    pages = VLLM.plan(gemma, 1 << 40, KVSettings(max_model_len=8192)).tensor_pages
    assert len(pages) == 8 and sum(pages) == p.block_bytes
    room = p.kv_cache_bytes - 3 * GiB
    granularity, rounding = result.growth_granularity_bytes, result.growth_rounding
    assert kv_cache_reservation(gemma, p.num_blocks, 16, granularity, rounding, pages) <= room
    assert kv_cache_reservation(gemma, p.num_blocks + 1, 16, granularity, rounding, pages) > room
    assert p.allocator_reserve_bytes >= 3 * GiB
    assert p.kv_cache_used_bytes + p.allocator_reserve_bytes <= p.kv_cache_bytes


def test_the_manager_asks_each_layer_spec_and_only_groups_and_sums() -> None:
    # A layer class answers its own blocks per request: the manager has no rule of its own.
    import dataclasses

    from memacct.model.layers import FullAttention

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class TwiceFull(FullAttention):
        def blocks_per_request(self, max_model_len: int, in_flight: int, block_size: int,
                               prefix_caching: bool = True) -> int:
            return 2 * super().blocks_per_request(max_model_len, in_flight, block_size)

    base = spec("llama-3.1-8b")
    doubled = base.model_copy(update={"layers": tuple(
        TwiceFull(**{f.name: getattr(x, f.name) for f in dataclasses.fields(x)})
        for x in base.layers)})
    one = plan("llama-3.1-8b", 20 * GiB, max_model_len=8192)
    two = VLLM.plan(doubled, 20 * GiB, KVSettings(max_model_len=8192))
    assert two.blocks_per_request == 2 * one.blocks_per_request
    assert two.num_blocks == one.num_blocks
