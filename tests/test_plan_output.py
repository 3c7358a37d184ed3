"""The printed plan: one line per fact as a pipe receives it (never folded, no trailing
spaces), each figure in the engine's own terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_plan_caveats import UNKNOWN

from memacct.cli import main

PLAN = ["plan", "--model", "qwen2.5-7b", "--device", "h100"]


def _out(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(argv) in (0, 1)
    return capsys.readouterr().out.splitlines()


def test_text_lines_are_whole_and_untrimmed_by_the_table_width(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(UNKNOWN))
    lines = _out(["plan", "--model", str(config), "--device", "h100",
                  "--assume-full-attention"], capsys)  # fmt: skip
    guess = next(line for line in lines if "has no memacct rule" in line)
    assert len(guess) > 160 and guess.endswith("the figures are a guess")
    text = [line for line in lines if not line.startswith(("┏", "┃", "┡", "│", "└"))]
    assert all(line == line.rstrip() for line in text[1:] if line.strip())


def test_sglang_terms_are_sglangs(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _out([*PLAN, "--engine", "sglang"], capsys)
    assert any("target_allocation (mem_fraction_static 0." in line for line in lines)
    assert not any("gpu_memory_utilization" in line for line in lines)
    plan_line = next(line for line in lines if line.startswith("plan:"))
    assert "token slots" in plan_line and "blocks of 1 tokens" not in plan_line


def test_a_cache_set_by_its_size_names_no_utilization(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _out([*PLAN, "--kv-cache-memory-bytes", "20GiB"], capsys)
    label = "target_allocation (the rest + --kv-cache-memory-bytes)"
    assert any(label in line for line in lines)
    assert not any("gpu_memory_utilization 0.9" in line for line in lines)


def test_capacity_json_says_nothing_it_was_not_asked(capsys: pytest.CaptureFixture[str]) -> None:
    rows = json.loads("\n".join(_out([*PLAN[:3], "--device", "h100,l4", "--json"], capsys)))
    assert [(r["refusal"], r["serves_min_concurrency"]) for r in rows] == [(None, None)] * 2
    rows = json.loads("\n".join(_out([*PLAN[:3], "--device", "h100,l4", "--json",
                                      "--min-concurrency", "2"], capsys)))  # fmt: skip
    assert sorted(r["serves_min_concurrency"] for r in rows) == [False, True]


def test_a_capacity_table_keeps_each_devices_memory_caveats(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN[:3], "--device", "dgx-spark,h100", "--tensor-parallel-size", "1,2"]) == 0
    err = capsys.readouterr().err
    assert "note: gb10-128gb: unified memory:" in err
    assert "note: h100-80gb:" not in err
