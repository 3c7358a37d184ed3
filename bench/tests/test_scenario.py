"""Scenarios, the oracle, the simulated engine start and the benchmark."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from memacct_bench import scenario as scenario_module
from memacct_bench import simulate_engine_start
from memacct_bench.bench import load_scenarios, render_markdown, run_benchmark, summarize
from memacct_bench.scenario import (
    Scenario,
    ScenarioOutcome,
    ScenarioSetup,
    find_oracle,
    run_scenario,
    run_scenarios,
    start_engine,
)

from memacct.cli import main
from memacct.errors import ConfigError
from memacct.models import TruthSource
from memacct.planner import load_model_preset
from memacct.units import GiB, MiB

ISSUE_EXAMPLE: dict[str, Any] = {
    "name": "qwen7b-mindspore-mixed", "device": "ascend-910b-64gb", "allocator": "mindspore",
    "model": "qwen2.5-7b", "max_num_batched_tokens": 8192, "max_num_seqs": 256, "block_size": 16,
    "gpu_memory_utilization": 1.0, "other_process_bytes": 0, "context_bytes": 536870912,
    "serving": [{"num_tokens": 8192, "num_seqs": 1}, {"num_tokens": 256, "num_seqs": 256}],
    "seed": 0,
}

# Two layers, 4 heads of 64: a whole scenario replays in about a millisecond.
TINY_MODEL: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 2048,
    "torch_dtype": "bfloat16", "max_position_embeddings": 1024, "tie_word_embeddings": False,
}


def tiny(allocator: str = "torch-cuda", **overrides: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": f"tiny-{allocator}", "device": {"total_bytes": 40 * MiB}, "allocator": allocator,
        "model": TINY_MODEL, "max_num_batched_tokens": 256, "max_num_seqs": 16,
        "context_bytes": 0, "block_size": 32,
        "serving": [{"num_tokens": [1, 256], "num_seqs": [1, 16], "repeat": 6}],
    }
    data.update(overrides)
    return Scenario.from_dict(data)


def small_qwen(allocator: str = "torch-cuda", **overrides: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": f"qwen-{allocator}", "device": {"total_bytes": 24 * GiB}, "allocator": allocator,
        "model": "qwen2.5-7b", "max_num_batched_tokens": 2048, "max_num_seqs": 64,
        "serving": [{"num_tokens": 2048, "num_seqs": [1, 4], "repeat": 3},
                    {"num_tokens": 64, "num_seqs": 64, "repeat": 3}],
    }
    data.update(overrides)
    return Scenario.from_dict(data)


# --- loading ------------------------------------------------------------------------------------


def test_the_issues_example_loads_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(ISSUE_EXAMPLE))
    scenario = Scenario.load(path)
    assert (scenario.name, scenario.allocator, scenario.total_bytes) == (
        "qwen7b-mindspore-mixed", "mindspore", 65_452_113_920)
    assert scenario.steps() == [(8192, 1), (256, 256)]


@pytest.mark.parametrize(
    ("field", "value"),
    [("allocator", "tpu"), ("device", "h900"), ("model", "gpt-5"), ("gpu_memory_utilization", 1.5),
     ("serving", []), ("max_num_seqs", 0), ("device", {"total_bytes": -1})],
)
def test_a_bad_field_is_a_config_error_naming_it(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        Scenario.from_dict({**ISSUE_EXAMPLE, field: value})


def test_a_missing_field_is_a_config_error_naming_it() -> None:
    data = dict(ISSUE_EXAMPLE)
    del data["allocator"]
    with pytest.raises(ConfigError, match="allocator"):
        Scenario.from_dict(data)


def test_a_co_tenant_needs_a_utilization_that_leaves_it_room() -> None:
    with pytest.raises(ConfigError, match=r"gpu_memory_utilization.*at most 0\.836"):
        Scenario.from_dict({**ISSUE_EXAMPLE, "other_process_bytes": 10 * GiB})


def test_a_step_beyond_the_budgets_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"serving\[0\]"):
        Scenario.from_dict({**ISSUE_EXAMPLE, "serving": [{"num_tokens": 9000, "num_seqs": 1}]})


def test_a_decode_only_scenario_is_a_decode_instance_unless_it_says_otherwise() -> None:
    decode = {**ISSUE_EXAMPLE, "serving": [{"num_tokens": 64, "num_seqs": 64},
                                           {"num_tokens": 7, "num_seqs": 7}]}
    assert Scenario.from_dict(decode).role == "decode"
    assert Scenario.from_dict({**decode, "serving_role": "mixed"}).role == "mixed"
    assert Scenario.from_dict(ISSUE_EXAMPLE).role == "mixed"
    assert Scenario.from_dict({**ISSUE_EXAMPLE, "serving_role": "prefill"}).role == "prefill"


def test_a_decode_role_with_a_prefill_step_is_a_config_error_naming_the_step() -> None:
    with pytest.raises(ConfigError, match=r"serving_role 'decode' but a serving step has 8192"):
        Scenario.from_dict({**ISSUE_EXAMPLE, "serving_role": "decode"})
    with pytest.raises(ConfigError, match="serving_role"):
        Scenario.from_dict({**ISSUE_EXAMPLE, "serving_role": "both"})


def test_the_engine_start_records_the_scenarios_role() -> None:
    decode = tiny(serving=[{"num_tokens": 16, "num_seqs": 16}, {"num_tokens": 5, "num_seqs": 5}])
    assert decode.role == "decode"
    assert start_engine(decode, "auto").result.profiled.serving_role == "decode"
    assert start_engine(tiny(), "auto").result.profiled.serving_role == "mixed"


def test_a_file_that_is_not_json_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Scenario.load(path)


def test_ranges_are_drawn_from_the_seed_reproducibly() -> None:
    mixed = {**ISSUE_EXAMPLE, "serving": [{"num_tokens": [1, 8192], "num_seqs": [1, 256],
                                           "repeat": 20}]}
    first = Scenario.from_dict(mixed).steps()
    assert first == Scenario.from_dict(mixed).steps()
    assert first != Scenario.from_dict({**mixed, "seed": 1}).steps()
    assert all(1 <= seqs <= tokens for tokens, seqs in first)


def test_the_model_may_be_a_config_object() -> None:
    scenario = Scenario.from_dict({**ISSUE_EXAMPLE, "model": load_model_preset("qwen2.5-7b")})
    assert scenario.model_config_dict()["hidden_size"] == 3584


# --- the engine start and the oracle -------------------------------------------------------------


def test_engine_start_leaves_the_device_as_the_oracles_replays_do() -> None:
    scenario = small_qwen()
    start = simulate_engine_start(
        scenario.model_config_dict(), device=scenario.device, allocator=scenario.allocator,
        max_num_batched_tokens=2048, max_num_seqs=64,
    )
    replayed = ScenarioSetup(scenario).boot()

    def state(stats: dict[str, int]) -> dict[str, int]:  # peaks differ: profiling resets them
        return {k: v for k, v in stats.items() if not k.endswith(".peak") and "max_" not in k}

    assert state(start.device.memory_stats()) == state(replayed.memory_stats())
    assert start.device.free_bytes == replayed.free_bytes


def test_engine_start_profiles_weights_and_the_context() -> None:
    start = simulate_engine_start(load_model_preset("qwen2.5-7b"), truth_source="reserved")
    result = start.result
    assert result.non_allocator_increase == 512 * MiB
    assert result.weights_memory >= 7_615_616_512 * 2
    assert result.truth_source is TruthSource.RESERVED


@pytest.mark.parametrize("allocator", ["torch-cuda", "torch-cuda-expandable"])
def test_the_oracles_bisection_finds_the_largest_cache_that_completes_by_brute_force(
    allocator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scenario_module, "EXHAUSTIVE_BLOCKS", 0)  # bisect, do not scan
    scenario = tiny(allocator)
    setup = ScenarioSetup(scenario)
    completes = [n for n in range(setup.max_blocks() + 1) if setup.completes(n)]
    oracle = find_oracle(scenario)
    assert oracle.num_blocks == max(completes)
    assert oracle.replays < 20


def test_a_small_search_space_is_scanned_whole_even_where_completion_is_not_monotone() -> None:
    scenario = tiny("npu")  # one more block can complete where one fewer does not
    setup = ScenarioSetup(scenario)
    completes = [setup.completes(n) for n in range(setup.max_blocks() + 1)]
    assert not all(a >= b for a, b in itertools.pairwise(completes))
    assert find_oracle(scenario).num_blocks == max(n for n, ok in enumerate(completes) if ok)


def test_the_oracle_is_never_below_a_cache_known_to_complete() -> None:
    scenario = tiny()
    oracle = find_oracle(scenario)
    assert find_oracle(scenario, {oracle.num_blocks - 5: True}).num_blocks == oracle.num_blocks


def test_one_block_more_than_the_oracle_runs_out_of_memory() -> None:
    scenario = tiny()
    setup = ScenarioSetup(scenario)
    oracle = find_oracle(scenario, _setup=setup)
    assert setup.serve(setup.boot(), oracle.num_blocks + 1) is not None


# --- outcomes ------------------------------------------------------------------------------------


def test_run_scenario_reports_planned_and_oracle_bytes_and_their_ratio() -> None:
    outcome = run_scenario(small_qwen(), "reserved")
    assert isinstance(outcome, ScenarioOutcome)
    assert outcome.planned_kv_bytes == outcome.planned_num_blocks * outcome.block_bytes
    assert outcome.oracle_kv_bytes == outcome.oracle_num_blocks * outcome.block_bytes
    assert outcome.efficiency == pytest.approx(outcome.planned_kv_bytes / outcome.oracle_kv_bytes)


def test_the_allocated_peak_runs_out_of_memory_where_auto_does_not() -> None:
    allocated, auto = run_scenarios(small_qwen(), ["allocated_peak", "auto"])
    assert allocated.oom and allocated.oom_at is not None
    assert not auto.oom and auto.efficiency > 0.95


def test_a_plan_that_completes_is_never_above_the_oracle() -> None:
    for outcome in run_scenarios(small_qwen("npu", device={"total_bytes": 20 * GiB}),
                                 ["reserved", "auto"]):
        assert outcome.oom or outcome.efficiency <= 1.0


# --- the benchmark -------------------------------------------------------------------------------


def test_the_shipped_scenarios_cover_every_allocator_three_models_and_two_mixes() -> None:
    scenarios = load_scenarios()
    assert len(scenarios) >= 24
    assert {s.allocator for s in scenarios} == {
        "torch-cuda", "torch-cuda-expandable", "npu", "mindspore"}
    assert len({s.model_name for s in scenarios}) >= 3
    assert len({s.name.rsplit("-", 1)[1] for s in scenarios}) >= 2
    assert all(s.gpu_memory_utilization == 1.0 for s in scenarios)


def test_the_benchmark_gives_one_row_per_scenario_and_truth_source() -> None:
    rows = run_benchmark([tiny(), tiny("npu")], ["allocated_peak", "reserved", "auto"])
    assert [(r.scenario, r.truth_source) for r in rows] == [
        (s, p) for s in ("tiny-torch-cuda", "tiny-npu")
        for p in ("allocated_peak", "reserved", "auto")]


def test_the_summary_counts_ooms_and_efficiencies_per_truth_source() -> None:
    rows = run_benchmark([small_qwen()], ["allocated_peak", "auto"])
    summary = {s.truth_source: s for s in summarize(rows)}
    assert summary["allocated_peak"].ooms == 1 and summary["auto"].ooms == 0
    assert summary["auto"].efficiency_min == rows[1].efficiency


def test_the_markdown_report_has_the_table_the_summary_and_the_time() -> None:
    rows = run_benchmark([tiny()], ["allocated_peak", "reserved", "auto"])
    text = render_markdown(rows, duration_s=12.3)
    assert "| scenario | u | truth source | planned GiB | oracle GiB | efficiency | OOM |" in text
    assert "## Summary per truth source" in text and "Full run: 12 s" in text


def test_memacct_bench_prints_json_for_a_directory_of_scenarios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tiny.json").write_text(tiny().model_dump_json())
    output = tmp_path / "results.md"
    assert main(["bench", "--scenarios", str(tmp_path), "--json", "--output", str(output)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["truth_source"] for r in data["rows"]] == ["allocated_peak", "reserved", "auto"]
    assert "tiny-torch-cuda" in output.read_text()


def test_memacct_bench_on_a_missing_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--scenarios", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_below_full_utilization_the_oracle_sees_the_pool_the_engine_sizes() -> None:
    # MindSpore sizes its pool at its first request (free x 15/16): the oracle's replays must
    # start from the device the engine started on, then hold both to the utilization.
    scenario = small_qwen("mindspore", device="ascend-910b-64gb", gpu_memory_utilization=0.8)
    engine = start_engine(scenario, "reserved").device.allocator
    oracle = ScenarioSetup(scenario).boot().allocator
    assert engine.budget_bytes is not None
    assert oracle.budget_bytes == engine.budget_bytes
