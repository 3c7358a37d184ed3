"""The emitted command lines, as vLLM 0.33's and SGLang 0.5.23's own parsers read them
(tools/emit_check.py, run in the golden environment): the committed results cover the whole
grid, every command parses into the values planned, and today's emitter writes exactly the
commands that were checked (else rerun the tool). The emitter's release gates are what each
vLLM release's argument code registers (tools/emit_releases.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._tools import load_tool

emit_check = load_tool("emit_check.py", "emit_check")
emit_check_releases = load_tool("emit_releases.py", "emit_releases")

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


def _first(releases: dict[str, Any], present: Any) -> tuple[int, ...] | None:
    """The first release read from which ``present(release)`` holds in every later one
    (``None``: in all of them)."""
    order = sorted(releases, key=emit_check_releases.version_key)
    missing = [name for name in order if not present(releases[name])]
    if not missing:
        return None
    last = order.index(missing[-1])
    assert last + 1 < len(order), "not even the newest release read has it"
    return tuple(emit_check_releases.version_key(order[last + 1]))


def test_the_release_gates_are_what_each_releases_parser_registers() -> None:
    from memacct.planner.emit import FLAG_SINCE, KV_CACHE_DTYPE_SINCE, LIMIT_MM_JSON_SINCE

    table = json.loads(emit_check_releases.OUT.read_text())["releases"]
    first = {flag: _first(table, lambda r, flag=flag: r["flags"][flag])
             for flag in emit_check_releases.FLAGS}  # fmt: skip
    assert {flag: since for flag, since in first.items() if since is not None} == FLAG_SINCE
    from memacct.engines.accepts import KV_CACHE_DTYPES

    dtypes = {name: _first(table, lambda r, name=name: name in r["kv_cache_dtypes"])
              for name in KV_CACHE_DTYPES["vllm"]}  # fmt: skip
    assert {name: since for name, since in dtypes.items() if since is not None} == (
        KV_CACHE_DTYPE_SINCE)
    assert _first(table, lambda r: r["limit_mm_per_prompt"] == "json") == LIMIT_MM_JSON_SINCE
    # The releases read span those memacct models.
    assert min(table, key=emit_check_releases.version_key) == "0.8.0" and "0.33.0" in table


def test_the_grid_writes_no_flag_the_release_table_does_not_track() -> None:
    flags = {word for case in _table("vllm")["cases"] if "command" in case
             for word in case["command"].split() if word.startswith("--")}  # fmt: skip
    assert flags <= set(emit_check_releases.FLAGS), flags - set(emit_check_releases.FLAGS)
