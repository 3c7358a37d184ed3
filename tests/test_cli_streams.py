"""A standard output the command line cannot write to ends in one line on stderr, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memacct.cli import main

BIN = Path(sys.executable).parent / "memacct"
PLAN = ["plan", "--model", "qwen2.5-7b", "--device", "h100"]


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}
    return subprocess.run([str(BIN), *args], stderr=subprocess.PIPE, text=True, env=env,
                          timeout=120, check=False, **kwargs)  # type: ignore[call-overload]


def _one_line(proc: subprocess.CompletedProcess[str], words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memacct: error:") and words in lines[0]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", [PLAN, [*PLAN, "--json"], ["backends", "--json"]])
def test_a_full_output_is_one_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        _one_line(_run(args, stdout=full), "cannot write to standard output")


def test_a_closed_output_is_one_line() -> None:
    # stdout=None would inherit; close descriptor 1 in the child instead (as `>&-` does).
    proc = _run(PLAN, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    _one_line(proc, "standard output is closed")


def test_stdout_is_given_back_after_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    before = sys.stdout
    assert main(PLAN) == 0
    assert sys.stdout is before and "fits:" in capsys.readouterr().out


def test_a_reader_that_leaves_early_ends_the_command_quietly() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}
    # A capacity table on many devices, so that the output outlasts the pipe's buffer.
    args = [*PLAN[:3], "--device", "h100,a100,l4,t4,a10g,l40s,h200,b200",
            "--tensor-parallel-size", "1,2,4,8", "--json"]
    with subprocess.Popen([str(BIN), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert code in (0, 141) and "Traceback" not in err and "error" not in err, err
