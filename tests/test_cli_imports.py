"""What a preset plan on the command line imports: the command it runs and what that command
uses, nothing else (issue 29 row 26: the command's time was nearly all importing).

Each check runs the command in a fresh interpreter and reads ``sys.modules``; it names the
modules the preset path must not load, so an eager import that comes back fails here (the
time itself is measured by ``benchmarks/bench_cli_startup.py``, not asserted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_LOADED = """
import contextlib, io, json, sys
from memacct.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main({argv!r})
print(json.dumps([code, sorted(sys.modules)]))
"""

PLAN = ["plan", "--model", "qwen2.5-7b", "--device", "h100"]

# The other subcommands and what only they use; the frameworks and plotting.
NOT_ON_THE_PLAN_PATH = (
    "memacct.cli.backends", "memacct.cli.capacity", "memacct.cli.explain",
    "memacct.cli.snapshot", "memacct.explain", "memacct.planner.emit", "memacct.registry",
    "memacct.sim", "matplotlib", "numpy", "torch", "transformers", "huggingface_hub",
    "rich.live", "rich.progress",
)  # fmt: skip


def _loaded(argv: list[str]) -> tuple[int, set[str]]:
    """The exit code of ``memacct <argv>`` and the modules its interpreter then holds."""
    out = subprocess.run([sys.executable, "-c", _LOADED.format(argv=argv)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    code, modules = json.loads(out.stdout.strip().splitlines()[-1])
    return int(code), set(modules)


def _heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_a_preset_plan_imports_only_the_plan_command() -> None:
    code, modules = _loaded(PLAN)
    assert code == 0
    assert _heavy(modules, NOT_ON_THE_PLAN_PATH) == []
    # Its table on a pipe is rich's text without rich (memacct.cli.table).
    assert "memacct.cli.plan" in modules and _heavy(modules, ("rich",)) == []


def test_a_table_rich_lays_out_still_imports_it() -> None:
    code, modules = _loaded(["backends"])  # its cells are markup (coloured yes / no)
    assert code == 0 and "rich.table" in modules


def test_a_json_plan_imports_no_rich() -> None:
    code, modules = _loaded([*PLAN, "--json"])
    assert code == 0
    assert _heavy(modules, ("rich", *NOT_ON_THE_PLAN_PATH)) == []


@pytest.mark.parametrize("argv", [["--version"], ["plan", "--model", "list"]])
def test_commands_that_plan_nothing_import_no_table(argv: list[str]) -> None:
    code, modules = _loaded(argv)
    assert code == 0
    assert _heavy(modules, ("rich", *NOT_ON_THE_PLAN_PATH)) == []


def test_the_version_imports_no_pydantic_and_no_subcommand() -> None:
    code, modules = _loaded(["--version"])
    assert code == 0
    assert _heavy(modules, ("pydantic", "memacct.cli.plan", "memacct.planner")) == []


def test_help_still_lists_every_core_command(capsys: pytest.CaptureFixture[str]) -> None:
    from memacct.cli import main
    from memacct.cli.group import CORE_COMMANDS

    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in CORE_COMMANDS)
