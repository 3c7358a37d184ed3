"""Profiles know what they profiled; mismatched and tampered profiles are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _harness import simulate_engine_start

import memacct
from memacct import ConfigError
from memacct.planner import load_model_preset, load_profile, plan_kv_cache
from memacct.planner.guard import ProfileMismatchError


@pytest.fixture(scope="module")
def qwen_profile() -> memacct.ProfileResult:
    return simulate_engine_start(
        load_model_preset("qwen2.5-7b"), device="h100-80gb", max_num_batched_tokens=2048,
        max_num_seqs=64,
    ).result


def spec(name: str = "qwen2.5-7b", **kw: Any) -> memacct.KVCacheSpec:
    return memacct.KVCacheSpec.from_hf_config(load_model_preset(name), **kw)


def test_the_profile_records_what_it_profiled(qwen_profile: memacct.ProfileResult) -> None:
    recorded = qwen_profile.profiled
    assert recorded.architecture == "qwen2"
    assert recorded.tensor_parallel_size == 1
    assert recorded.max_num_batched_tokens == 2048
    assert recorded.max_num_seqs == 64
    assert recorded.dtype == spec().dtype


def test_another_architecture_is_refused_naming_both(qwen_profile: memacct.ProfileResult) -> None:
    other = next(n for n in memacct.model_presets() if spec(n).model_type != "qwen2")
    with pytest.raises(ProfileMismatchError, match=r"architecture: profiled qwen2, planned \w+"):
        plan_kv_cache(qwen_profile, spec(other), max_num_batched_tokens=2048)


def test_another_tensor_parallel_size_is_refused(qwen_profile: memacct.ProfileResult) -> None:
    with pytest.raises(ProfileMismatchError, match="tensor_parallel_size: profiled 1, planned 2"):
        plan_kv_cache(qwen_profile, spec(tensor_parallel_size=2), max_num_batched_tokens=2048)


def test_a_larger_batch_budget_than_profiled_is_refused(
    qwen_profile: memacct.ProfileResult,
) -> None:
    with pytest.raises(ProfileMismatchError, match="max_num_batched_tokens: profiled 2048"):
        plan_kv_cache(qwen_profile, spec(), max_num_batched_tokens=8192)


def test_allow_mismatch_plans_anyway(qwen_profile: memacct.ProfileResult) -> None:
    plan = plan_kv_cache(
        qwen_profile, spec(tensor_parallel_size=2), max_num_batched_tokens=2048,
        allow_mismatch=True,
    )
    assert plan.num_blocks > 0


def test_the_matching_spec_plans(qwen_profile: memacct.ProfileResult) -> None:
    assert plan_kv_cache(qwen_profile, spec(), max_num_batched_tokens=2048).num_blocks > 0


def test_a_profile_that_recorded_nothing_is_not_checked(
    qwen_profile: memacct.ProfileResult,
) -> None:
    old = qwen_profile.model_copy(update={"profiled": memacct.ProfiledSetup()})
    assert plan_kv_cache(old, spec(tensor_parallel_size=2)).num_blocks > 0


def test_the_cli_refuses_a_mismatch_in_one_line_and_allows_it_with_the_flag(
    qwen_profile: memacct.ProfileResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memacct.cli import main

    path = qwen_profile.save(tmp_path / "p.json")
    args = ["plan", "--profile", str(path), "--model", "qwen2.5-7b",
            "--max-num-batched-tokens", "2048", "--tensor-parallel-size", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--tensor-parallel-size: profiled 1, planned 2" in err  # the CLI's flag
    assert "pass --allow-mismatch to plan anyway" in err
    assert len(err.strip().splitlines()) == 1
    assert main([*args, "--allow-mismatch", "--json"]) == 0


# --- tampered profiles ---------------------------------------------------------------------------


def tampered(profile: memacct.ProfileResult, tmp_path: Path, **changes: Any) -> Path:
    data = json.loads(profile.model_dump_json())
    data.update(changes)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(data))
    return path


def test_a_saved_profile_loads_back_equal(
    qwen_profile: memacct.ProfileResult, tmp_path: Path
) -> None:
    path = qwen_profile.save(tmp_path / "p.json")
    assert memacct.ProfileResult.load(path) == qwen_profile
    assert load_profile(path) == qwen_profile


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"non_allocator_increase": -1}, "non_allocator_increase"),
        ({"activation_peak": 1}, "below the allocated_peak increase|must equal"),
        ({"reserved_peak_increase": 0}, "above the reserved peak|below|must equal"),
    ],
)
def test_a_tampered_profile_is_refused_in_one_line(
    qwen_profile: memacct.ProfileResult, tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_profile(tampered(qwen_profile, tmp_path, **change))
    assert "\n" not in str(info.value)


def test_a_tampered_profile_whose_sums_still_add_up_is_refused(
    qwen_profile: memacct.ProfileResult, tmp_path: Path
) -> None:
    # The activation peak cut to 1 byte, non_kv_cache_memory fixed to match: still refused.
    cut = qwen_profile.activation_peak - 1
    path = tampered(
        qwen_profile, tmp_path, activation_peak=1,
        non_kv_cache_memory=qwen_profile.non_kv_cache_memory - cut,
    )
    with pytest.raises(ConfigError, match=r"activation_peak \(1\) .* is below the \w+ increase"):
        load_profile(path)


def test_weights_of_zero_that_were_measured_are_refused_even_when_the_sums_add_up(
    qwen_profile: memacct.ProfileResult, tmp_path: Path
) -> None:
    path = tampered(
        qwen_profile, tmp_path, weights_memory=0,
        non_kv_cache_memory=qwen_profile.non_kv_cache_memory - qwen_profile.weights_memory,
    )
    with pytest.raises(ConfigError, match="weights_memory is 0 but weights_source says"):
        load_profile(path)


def test_weights_declared_as_given_zero_load(
    qwen_profile: memacct.ProfileResult, tmp_path: Path
) -> None:
    path = tampered(
        qwen_profile, tmp_path, weights_memory=0, weights_source="given",
        non_kv_cache_memory=qwen_profile.non_kv_cache_memory - qwen_profile.weights_memory,
    )
    assert load_profile(path).weights_memory == 0
