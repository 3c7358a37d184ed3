"""A profile records its pipeline layout and the guard refuses a plan of another (issue 23, row 3).

The simulated engine start recorded its tensor-parallel layout but not its pipeline one,
so ``plan_kv_cache(result, spec with pipeline_parallel_size=2)`` planned twice the blocks
of the profiled layout, with no error.
"""

from __future__ import annotations

import pytest

import memacct
from memacct.planner import load_model_preset
from memacct.planner.guard import ProfileMismatchError


def _start() -> memacct.ProfileResult:
    start = pytest.importorskip(
        "memacct_bench.start", reason="the evaluation harness (bench/) is not installed"
    )
    return start.simulate_engine_start(  # type: ignore[no-any-return]
        load_model_preset("qwen2.5-7b"), max_num_batched_tokens=1024, max_num_seqs=32,
        truth_source="reserved",
    ).result  # fmt: skip


def test_the_simulated_engine_start_records_its_pipeline_layout() -> None:
    profiled = _start().profiled
    assert (profiled.pipeline_parallel_size, profiled.pipeline_parallel_rank) == (1, 0)


def test_a_plan_for_another_pipeline_size_is_refused_unless_allowed() -> None:
    result = _start()
    one = memacct.KVCacheSpec.from_preset("qwen2.5-7b")
    two = memacct.KVCacheSpec.from_preset("qwen2.5-7b", pipeline_parallel_size=2)
    with pytest.raises(ProfileMismatchError, match="pipeline_parallel_size: profiled 1, planned 2"):
        memacct.plan_kv_cache(result, two, max_num_batched_tokens=1024, max_num_seqs=32)
    same = memacct.plan_kv_cache(result, one, max_num_batched_tokens=1024, max_num_seqs=32)
    forced = memacct.plan_kv_cache(
        result, two, max_num_batched_tokens=1024, max_num_seqs=32, allow_mismatch=True
    )
    assert forced.num_blocks > same.num_blocks  # half the layers per rank: what was refused


def test_a_profile_that_records_its_pipeline_rank_refuses_another_size() -> None:
    from _sim import simulated_start

    setup = {"pipeline_parallel_size": 2, "pipeline_parallel_rank": 1}
    _, result = simulated_start(15 * 2**30, 2**30, profiled=setup)
    spec = memacct.KVCacheSpec.from_preset("qwen2.5-7b")
    with pytest.raises(ProfileMismatchError, match="pipeline_parallel_size: profiled 2, planned 1"):
        memacct.plan_kv_cache(result, spec)
