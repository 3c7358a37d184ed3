"""The scenario generator and the utilization-aware oracle."""

from __future__ import annotations

import pytest
from memacct_bench.bench import run_benchmark, summarize
from memacct_bench.generator import MIXES, generate_scenario, generate_scenarios
from memacct_bench.scenario import Scenario, ScenarioSetup, find_oracle

from memacct.cli import main


def test_a_generated_scenario_depends_on_its_seed_and_index_alone() -> None:
    assert generate_scenario(3, 5) == generate_scenarios(6, 3)[5]
    assert generate_scenario(3, 5) != generate_scenario(4, 5)


def test_the_generator_draws_every_family_allocator_mix_and_utilization_range() -> None:
    scenarios = generate_scenarios(60, 11)
    assert {s.allocator for s in scenarios} == {
        "torch-cuda", "torch-cuda-expandable", "npu", "mindspore"}
    descriptions = " ".join(s.description for s in scenarios)
    for family in ("full", "sliding", "moe", "mla"):
        assert family in descriptions
    for mix in MIXES:
        assert mix in descriptions
    assert any(s.other_process_bytes for s in scenarios)
    assert all(0.85 <= s.gpu_memory_utilization <= 1.0 for s in scenarios)


def _at(scenario: Scenario, utilization: float) -> Scenario:
    return Scenario.from_dict({**scenario.model_dump(), "gpu_memory_utilization": utilization})


def test_the_oracle_is_measured_on_the_memory_the_utilization_grants() -> None:
    scenario = _at(generate_scenario(0, 21), 1.0)
    full = find_oracle(scenario, _setup=ScenarioSetup(scenario))
    lower = _at(scenario, 0.9)
    capped = find_oracle(lower, _setup=ScenarioSetup(lower))
    cut = scenario.total_bytes - lower.budget_bytes
    assert capped.kv_bytes < full.kv_bytes
    assert full.kv_bytes - capped.kv_bytes == pytest.approx(cut, rel=0.02)


def test_below_full_utilization_the_truth_sources_are_not_all_scored_about_u() -> None:
    # The seed's oracle ignored the utilization: every truth source scored about u.
    rows = run_benchmark([_at(generate_scenario(0, 21), 0.9)], ["reserved", "auto"])
    assert all(r.efficiency > 0.95 for r in rows)


def test_memacct_bench_generated_runs_and_summarizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--generated", "2", "--seed", "5", "--jobs", "1", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"gen-5-0"' in out and '"gen-5-1"' in out


def test_the_summary_counts_how_often_auto_trails_the_best_safe_fixed_source() -> None:
    rows = run_benchmark([generate_scenario(0, 21)])
    auto = next(s for s in summarize(rows) if s.truth_source == "auto")
    assert 0.0 <= auto.within_margin_share <= 1.0
