"""The command line through its real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memacct import BackendInfo, MemorySnapshot, __version__
from memacct.cli import main

BIN = Path(sys.executable).parent / "memacct"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed console script, as a user would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_version_through_console_script() -> None:
    out = run("--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"memacct {__version__}")


def test_python_dash_m_works_the_same() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memacct", "--version"], capture_output=True, text=True, check=False
    )
    assert (out.returncode, out.stdout.strip()) == (0, f"memacct {__version__}")


def test_backends_json_lists_sim_available(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends", "--json"]) == 0
    infos = [BackendInfo.model_validate(item) for item in json.loads(capsys.readouterr().out)]
    by_name = {info.name: info for info in infos}
    assert by_name["sim"].available
    assert by_name["sim"].distribution == "memacct"


def test_backends_table_shows_each_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "sim" in out and "simulated device" in out


def test_snapshot_json_is_a_valid_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim", "--json"]) == 0
    snap = MemorySnapshot.model_validate_json(capsys.readouterr().out)
    assert snap.backend == "sim" and snap.free == snap.total


def test_snapshot_table_in_gib(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim"]) == 0
    out = capsys.readouterr().out
    assert "79.19" in out and "other processes" in out


def test_unknown_backend_is_one_line_and_exit_2() -> None:
    out = run("snapshot", "--backend", "nope")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "no memacct backend named 'nope'" in out.stderr
    assert "Traceback" not in out.stderr


def test_device_out_of_range_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim", "--device", "3"]) == 2
    assert "device 3 is out of range" in capsys.readouterr().err


def test_non_positive_watch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--watch", "0"]) == 2
    assert "--watch must be a positive number" in capsys.readouterr().err


def test_unknown_command_is_a_usage_error() -> None:
    assert main(["nosuch"]) == 2
