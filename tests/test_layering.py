"""The layers stay apart: the paths users run load no simulator, the simulator imports no
engine, and the harness reaches memacct only through its public modules and names."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "memacct" / "sim"
HARNESS = ROOT / "bench" / "memacct_bench"

_LOADED = """
import json, sys
{code}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[:2] == ["memacct", "sim"])))
"""


def _sim_modules_after(code: str) -> list[str]:
    """The ``memacct.sim`` modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", _LOADED.format(code=code)],
        capture_output=True, text=True, timeout=120, check=True, cwd=ROOT,
    )  # fmt: skip
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("module", ["memacct", "memacct.accounting", "memacct.planner.offline"])
def test_importing_the_core_loads_no_simulator(module: str) -> None:
    assert _sim_modules_after(f"import {module}") == []


def test_an_offline_plan_on_the_command_line_loads_no_simulator() -> None:
    code = (
        "import contextlib, io\n"
        "from memacct.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plan', '--model', 'qwen2.5-7b', '--device', 'h100']) == 0\n"
    )
    assert _sim_modules_after(code) == []


def _imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Each import of ``path``: the module and the names taken from it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, tuple(alias.name for alias in node.names)))
    return found


def test_no_module_of_the_simulator_imports_an_engine() -> None:
    files = sorted(SIM.rglob("*.py"))
    assert files
    upward = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in files
        for module, _ in _imports(path)
        if module == "memacct.engines" or module.startswith("memacct.engines.")
    ]
    assert upward == []


def test_the_harness_imports_only_public_memacct_modules_and_names() -> None:
    files = sorted(HARNESS.rglob("*.py"))
    assert len(files) > 5
    private = []
    for path in files:
        for module, names in _imports(path):
            parts = module.split(".")
            if parts[0] != "memacct":
                continue
            bad = [p for p in parts if p.startswith("_")] + [n for n in names if n.startswith("_")]
            if bad:
                private.append(f"{path.relative_to(ROOT)}: from {module} import {', '.join(names)}")
    assert private == []


def test_the_simulated_engine_start_lives_in_the_harness() -> None:
    assert not (ROOT / "memacct" / "engines" / "start.py").exists()
    assert not (SIM / "traces").exists()
    assert (HARNESS / "start.py").is_file() and (HARNESS / "workload.py").is_file()


def test_each_framework_graph_is_written_once() -> None:
    # The MindFormers graphs the offline vllm-mindspore plan charges are the core's; the
    # harness replays those, never a copy of its own.
    core = ROOT / "memacct" / "engines" / "vllm_mindspore"
    for graph in ("Qwen2Graph", "DeepseekV3Graph"):
        defined = [
            str(path.relative_to(ROOT))
            for path in sorted([*HARNESS.rglob("*.py"), *core.rglob("*.py")])
            if f"class {graph}" in path.read_text(encoding="utf-8")
        ]
        assert len(defined) == 1, (graph, defined)
