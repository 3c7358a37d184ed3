"""The planner's warnings over a benchmark run: each kind once on stderr, each plan its own."""

from __future__ import annotations

import logging

import pytest
from memacct_bench.bench import run_benchmark
from memacct_bench.notes import PlanNotes, captured_warnings, note_kind
from test_scenario import small_qwen

_NOTE = "binds before gpu_memory_utilization"


def test_a_run_prints_the_pool_budget_note_once_however_many_plans_carry_it(
    capfd: pytest.CaptureFixture[str],
) -> None:
    scenarios = [small_qwen("mindspore", name=f"ms-{seed}", seed=seed) for seed in range(3)]
    rows = run_benchmark(scenarios, ["reserved", "auto"])
    assert len(rows) == 6 and not any(r.refused for r in rows)
    err = capfd.readouterr().err
    assert err.count(_NOTE) == 1
    assert "and on 5 more plans" in err


def test_notes_of_the_same_kind_differ_only_in_figures_and_asides() -> None:
    first = "the budget of 22.02GiB (23645388800 bytes, on sim:0) binds: 14.46GiB held"
    other = "the budget of 9.5GiB (10200547328 bytes, on ascend-910b-64gb) binds: 1.2GiB held"
    assert note_kind(first) == note_kind(other)
    assert note_kind(first) != note_kind("the profile behind this plan is doubtful: 3 GiB")


def test_a_collected_run_prints_nothing_until_it_is_emitted(
    capfd: pytest.CaptureFixture[str],
) -> None:
    notes = PlanNotes()
    with captured_warnings() as caught:
        logging.getLogger("memacct").warning("memacct: %s", "a note of 1 GiB")
        logging.getLogger("memacct").warning("memacct: %s", "a note of 2 GiB")
    notes.add(caught)
    assert capfd.readouterr().err == ""
    notes.emit()
    assert capfd.readouterr().err.splitlines() == [
        "memacct: a note of 1 GiB (and on 1 more plan, each with its figures in its notes)"
    ]
