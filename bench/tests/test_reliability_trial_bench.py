"""The hostile trial of issue 15, the rows that go through the evaluation harness.

See tests/test_reliability_trial.py for the others and docs/reliability.md for the table.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from memacct_bench.bench import load_scenarios
from memacct_bench.scenario import Scenario, start_engine

from memacct.errors import ConfigError
from memacct.planner import load_model_preset

SCENARIOS = Path(__file__).resolve().parent.parent / "memacct_bench" / "scenarios"


def small_scenario() -> dict[str, object]:
    data: dict[str, object] = json.loads((SCENARIOS / "dsv2lite-cuda-decode.json").read_text())
    data["serving"] = [{"num_tokens": 256, "num_seqs": 256}]
    return data


def test_scenario_with_a_deepseek_key_of_the_wrong_type_is_a_config_error(
    deepseek_key_of_the_wrong_type: tuple[str, object],
) -> None:
    key, value = deepseek_key_of_the_wrong_type
    data = {**small_scenario(), "model": {**load_model_preset("deepseek-v2-lite"), key: value}}
    scenario = Scenario.from_dict(data, source="scenario s.json")
    with pytest.raises(ConfigError, match=re.escape(f"{key} must be an integer, got {value!r}")):
        start_engine(scenario, "auto")


def test_scenario_directory_with_deeply_nested_json_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nests deeper than 64 levels"):
        load_scenarios(tmp_path)


def test_bench_output_on_a_full_disk_is_one_line_and_keeps_the_old_report(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "s.json").write_text(json.dumps(small_scenario()))
    report = tmp_path / "results.md"
    report.write_text("the previous report\n")

    def full_disk() -> None:  # writes past 1 KiB fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    # The full disk would fail coverage's own data file too: that process is not measured.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMACCT_", "COVERAGE_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "memacct", "bench", "--scenarios", str(scenarios),
         "--output", str(report)],
        capture_output=True, text=True, timeout=300, env=env, preexec_fn=full_disk, check=False,
    )  # fmt: skip
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert err.splitlines() == [err] and err.startswith("memacct: error: cannot write")
    assert report.read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.md", "scenarios"]
