"""Replaying serving-step shapes through an allocator model (the auto truth source's estimate)."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from _harness import simulate_engine_start, workload_from_config

import memacct
from memacct.errors import InvalidInputError
from memacct.planner import load_model_preset
from memacct.replay import (
    RUN_STEPS,
    RUNS,
    SERVING_ROLES,
    ServingTrace,
    cache_ends_over,
    check_serving_role,
    random_runs,
    replay_need,
    serving_shapes,
    shape_grid,
)
from memacct.sim.allocator import PresetModel


@cache
def small() -> Any:
    return workload_from_config(
        load_model_preset("qwen2.5-7b"), max_num_batched_tokens=1024, max_num_seqs=32
    )


def test_a_workload_is_a_serving_trace() -> None:
    assert isinstance(small(), ServingTrace)


def test_the_shapes_cover_the_budgets_from_the_largest_step_down() -> None:
    shapes = serving_shapes(1024, 32)
    assert shapes[0] == (1024, 32)
    assert (1024, 1) in shapes and (32, 32) in shapes
    assert all(1 <= seqs <= tokens <= 1024 and seqs <= 32 for tokens, seqs in shapes)


def test_the_replay_needs_at_least_the_profiled_steps_allocated_peak() -> None:
    work = small()
    dev = memacct.sim.SimDevice("h100-80gb")
    for n in work.weight_tensors():
        dev.malloc(n, persistent=True)
    before = dev.allocator.allocated
    dev.reset_peak_memory_stats()
    from memacct.trace import replay

    replay(dev, work.step_trace(1024, 32))
    peak = dev.memory_stats()["allocated_bytes.all.peak"] - before
    need = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=2 * 2**30)
    assert need >= peak - 2 * 2**20


def _small_start(**options: Any) -> Any:
    """Qwen2.5-7B's simulated start at 1,024 tokens and 32 sequences, with ``options``."""
    return simulate_engine_start(
        load_model_preset("qwen2.5-7b"), max_num_batched_tokens=1024, max_num_seqs=32, **options
    )


def test_the_simulated_engine_profiles_auto_with_a_replay() -> None:
    start = _small_start()
    assert "replaying the profile" in start.result.truth_source_reason


def test_a_fixed_truth_source_runs_no_replay() -> None:
    start = _small_start(truth_source="reserved")
    assert "replay" not in start.result.truth_source_reason


def test_a_mindspore_pool_replays_with_the_whole_capacity_as_its_budget() -> None:
    # MindSpore's default budget is 15/16 of free memory; replayed with it, a 40 GiB cache
    # would make the activations "need" 1/16 of everything held (about 3 GiB). Its own budget
    # is the plan's allocator limit, so the replay's pool gets the whole capacity.
    work = small()
    need = replay_need(PresetModel("mindspore"), work, kv_cache_bytes=40 * 2**30)
    assert need < replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=40 * 2**30) + 2**30
    assert need < 2**30


def test_the_replay_answers_a_capacity_that_completes_within_its_resolution() -> None:
    work = small()
    coarse = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=8 * 2**30)  # 4 MiB steps
    fine = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=0)  # 2 MiB steps
    assert fine - 2 * 2**20 <= coarse <= fine + 4 * 2**20


def test_cache_ends_spread_over_one_page_and_the_replay_takes_the_worst() -> None:
    assert cache_ends_over(20 * 2**20) == (0, 5 * 2**20, 10 * 2**20, 15 * 2**20)
    assert cache_ends_over(0) == (0,)
    work = small()
    kv = 6 * 2**30
    ends = cache_ends_over(20 * 2**20)
    each = [
        replay_need(PresetModel("torch-cuda-expandable"), work, kv_cache_bytes=kv, cache_ends=(e,))
        for e in ends
    ]
    assert replay_need(
        PresetModel("torch-cuda-expandable"), work, kv_cache_bytes=kv, cache_ends=ends
    ) == max(each)


def test_a_decode_instance_replays_one_token_per_sequence() -> None:
    shapes = serving_shapes(1024, 32, "decode")
    assert shapes and all(tokens == seqs for tokens, seqs in shapes)
    assert max(seqs for _, seqs in shapes) == 32 and min(seqs for _, seqs in shapes) >= 1
    assert shape_grid(1024, 32, "decode") == [(n, n) for n in (4, 8, 12, 16, 20, 24, 28, 32)]


def test_a_prefill_instance_replays_the_mixed_shapes() -> None:
    assert serving_shapes(1024, 32, "prefill") == serving_shapes(1024, 32, "mixed")
    assert shape_grid(1024, 32, "prefill") == shape_grid(1024, 32)


def test_the_pair_grid_covers_each_eighth_of_the_budget_with_one_and_all_sequences() -> None:
    grid = shape_grid(1024, 32)
    assert {t for t, _ in grid} == {128 * i for i in range(1, 9)}
    assert {(1024, 1), (1024, 32), (128, 1), (128, 32)} <= set(grid) and len(grid) == 16


@pytest.mark.parametrize("role", ["Decode", "", "generate"])
def test_an_unknown_serving_role_is_refused_naming_the_choices(role: str) -> None:
    with pytest.raises(InvalidInputError, match="mixed, prefill, decode"):
        check_serving_role(role)
    with pytest.raises(InvalidInputError, match=repr(role)):
        serving_shapes(1024, 32, role)
    assert SERVING_ROLES == ("mixed", "prefill", "decode")


def test_every_pair_of_the_grid_needs_at_least_the_ladder_and_any_one_pair() -> None:
    # On a caching allocator a step strands what the segments the step before it cut leave:
    # the pair replay never needs less than the ladder, nor than any pair of grid shapes.
    work = small()
    kv = 4 * 2**30
    ladder = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=kv)
    pairs = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=kv, pairs=True)
    assert pairs >= ladder
    import memacct.replay as replay_module

    grid = shape_grid(1024, 32)
    original = replay_module.serving_shapes
    try:
        for first, second in [(grid[0], grid[-1]), (grid[5], grid[-1]), (grid[-2], grid[3])]:
            replay_module.serving_shapes = lambda *_a, f=first, s=second: [f, s]  # type: ignore[assignment]
            one = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=kv)
            assert pairs >= one - 2 * 2**20, (first, second)
    finally:
        replay_module.serving_shapes = original


def test_a_decode_instance_needs_no_more_than_a_mixed_one() -> None:
    work = small()
    kv = 4 * 2**30
    decode = replay_need(
        PresetModel("torch-cuda"), work, kv_cache_bytes=kv, role="decode", pairs=True
    )
    mixed = replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=kv, pairs=True)
    assert 0 < decode < mixed


def test_the_simulated_engine_records_its_serving_role() -> None:
    start = _small_start(serving_role="decode")
    assert start.result.profiled.serving_role == "decode"
    assert "of a decode instance" in start.result.truth_source_reason
    with pytest.raises(InvalidInputError, match="serving_role"):
        _small_start(serving_role="both")


def test_the_random_sequences_are_reproducible_and_within_the_budgets() -> None:
    runs = random_runs(1024, 32)
    assert runs == random_runs(1024, 32)
    assert len(runs) == RUNS and all(len(run) == RUN_STEPS for run in runs)
    steps = [step for run in runs for step in run]
    assert all(1 <= seqs <= min(32, tokens) and tokens <= 1024 for tokens, seqs in steps)
    assert len(set(steps)) > RUN_STEPS  # varied, not one shape repeated
    decode = [step for run in random_runs(1024, 32, "decode") for step in run]
    assert all(tokens == seqs <= 32 for tokens, seqs in decode)


def test_random_sequences_never_lower_the_need_and_a_floor_is_kept_exactly() -> None:
    work = small()

    def need(**options: Any) -> int:
        return replay_need(PresetModel("torch-cuda"), work, kv_cache_bytes=4 * 2**30,
                           pairs=True, **options)  # fmt: skip

    pairs = need()
    both = need(sequences=True)
    assert both >= pairs
    # A floor above the need is the answer; one below it changes nothing.
    assert need(sequences=True, floor=both + 64 * 2**20) == both + 64 * 2**20
    assert need(sequences=True, floor=both // 2) == both
