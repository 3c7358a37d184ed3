"""The emitted command lines, as vLLM 0.33's and SGLang 0.5.23's own parsers read them
(tools/emit_check.py, run in the golden environment): the committed results cover the whole
grid, every command parses into the values planned, and today's emitter writes exactly the
commands that were checked (else rerun the tool)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._tools import load_tool

emit_check = load_tool("emit_check.py", "emit_check")

_PARSE_RESULTS = ("parsed", "mismatches", "error")


def _table(engine: str) -> dict[str, Any]:
    path: Path = emit_check.OUT[engine]
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _key(case: dict[str, Any]) -> str:
    return json.dumps([case["model"], case["device"], case["tensor_parallel_size"],
                       case["settings"]], sort_keys=True)  # fmt: skip


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_emitted_command_parses_into_the_planned_values(engine: str) -> None:
    table = _table(engine)
    emitted = [case for case in table["cases"] if "command" in case]
    failed = [case["command"] for case in emitted
              if not case.get("parsed") or case.get("mismatches")]  # fmt: skip
    assert emitted and not failed, failed[:3]
    summary = table["summary"]
    assert summary["emitted"] == summary["parsed"] == summary["agree"] == len(emitted)
    # Every setting the grid asks for reached a parsed command at least once.
    asked = {key for case in emitted for key in case["settings"]}
    wanted = {key for settings in (emit_check.SETTINGS if engine == "vllm"
                                   else emit_check.SGLANG_SETTINGS) for key in settings}
    assert asked == wanted


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_results_are_the_grid_and_todays_emitter_writes_them(engine: str) -> None:
    recorded = {_key(case): case for case in _table(engine)["cases"]}
    today = {_key(case): case for case in emit_check.emit_grid(engine)}
    assert list(recorded) == list(today), "the grid changed: rerun tools/emit_check.py"
    for key, case in today.items():
        was = {name: value for name, value in recorded[key].items()
               if name not in _PARSE_RESULTS}  # fmt: skip
        if "refused" in case:  # a plan that does not fit: still none, whatever the wording
            assert "refused" in was, key
            continue
        assert case == was, f"{key}: rerun tools/emit_check.py"
