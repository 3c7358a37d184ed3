"""The layers stay apart: the paths users run load no simulator, the simulator imports no
engine, and the harness reaches memacct only through its public modules and names."""

from __future__ import annotations

import ast
import json
import re
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


# The import graph. memacct's floors, each importing only the floors below it: the core
# (memacct/*.py) and the simulator (memacct/sim/) < model/ < engines/ < planner/ < explain/
# < cli/ < the package's facade (memacct/__init__.py, whose names load on first use) and
# ``python -m memacct``; above memacct, the harness and the backend plugins; above all,
# tools/. Every import counts: at the top of a module, under TYPE_CHECKING, or inside a
# function. A module importing its own package (``memacct.engines.base`` reading
# ``memacct.engines``) is not an edge: the package is always loaded before its modules.

FLOORS = {"model": 1.0, "engines": 2.0, "planner": 3.0, "explain": 4.0, "cli": 5.0}


def _sources(root: Path) -> dict[str, Path]:
    """Module name -> file, for memacct, the harness, each backend plugin and the tools."""
    packages = [(root / "memacct", "memacct"), (root / "bench" / "memacct_bench", "memacct_bench")]
    packages += [(path, path.name) for path in sorted(root.glob("backends/*/memacct_*"))]
    modules: dict[str, Path] = {}
    for base, name in packages:
        for path in sorted(base.rglob("*.py")):
            parts = [name, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    for path in sorted((root / "tools").glob("*.py")):
        modules[f"tools.{path.stem}"] = path  # the tools import each other by bare name
    return modules


def _named(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules (and maybe-modules: ``from m import name``) an import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's own package upwards
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of :func:`_sources` it imports, anywhere in its code."""
    modules = _sources(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for named in _named(node, name, path.name == "__init__.py"):
                tool = f"tools.{named}"
                target = tool if name.startswith("tools.") and tool in modules else named
                if target in modules and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def _floor(module: str) -> float:
    top, _, rest = module.partition(".")
    if top == "tools":
        return 9.0
    if top != "memacct":
        return 8.0  # the harness and the backend plugins
    if module in ("memacct", "memacct.__main__"):
        return 7.0
    sub = rest.split(".")[0]
    return 0.5 if sub == "sim" else FLOORS.get(sub, 0.0)


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if _floor(b) > _floor(a))  # fmt: skip


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_model_floor_imports_no_engine_and_no_planner() -> None:
    graph = _import_graph()
    assert any(name.startswith("memacct.model.") for name in graph)
    bad = sorted(f"{a} -> {b}" for a, targets in graph.items() if a.startswith("memacct.model")
                 for b in targets if _floor(b) > FLOORS["model"])  # fmt: skip
    assert bad == []


def test_the_engines_never_import_the_planner() -> None:
    graph = _import_graph()
    bad = sorted(f"{a} -> {b}" for a, targets in graph.items() if a.startswith("memacct.engines")
                 for b in targets if _floor(b) > FLOORS["engines"])  # fmt: skip
    assert bad == []


def test_no_import_runs_up_a_floor() -> None:
    assert _upward(_import_graph()) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _circles(_import_graph()) == []


def _runs_at_import(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: not in a function, not under
    ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            typing_only = ast.unparse(node.test).endswith("TYPE_CHECKING")
            todo.extend(node.orelse if typing_only else [*node.body, *node.orelse])
        elif isinstance(node, (ast.Try, ast.With, ast.ClassDef)):
            todo.extend(node.body)
            if isinstance(node, ast.Try):
                todo.extend([*node.orelse, *node.finalbody,
                             *(stmt for handler in node.handlers for stmt in handler.body)])
    return found


def test_the_core_imports_no_floor_when_it_is_imported() -> None:
    floors = tuple(f"memacct.{name}" for name in FLOORS)
    hits = []
    for path in sorted((ROOT / "memacct").glob("*.py")):
        if path.name == "__main__.py":
            continue
        module = "memacct" if path.name == "__init__.py" else f"memacct.{path.stem}"
        for node in _runs_at_import(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _named(node, module, path.name == "__init__.py"):
                if target in floors or target.startswith(tuple(f + "." for f in floors)):
                    hits.append(f"memacct/{path.name}:{node.lineno}: {target}")
    assert hits == []


def test_importing_memacct_loads_no_floor() -> None:
    code = ("import json, sys, memacct\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[:2][-1] in "
            f"{sorted(FLOORS)!r})))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, cwd=ROOT)  # fmt: skip
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_graph_checks_find_a_circle_an_upward_import_and_a_relative_one(
    tmp_path: Path,
) -> None:
    model, planner = tmp_path / "memacct" / "model", tmp_path / "memacct" / "planner"
    for package in (model, planner, tmp_path / "tools"):
        package.mkdir(parents=True)
    (tmp_path / "memacct" / "__init__.py").write_text("")
    (model / "__init__.py").write_text("")
    (planner / "__init__.py").write_text("")
    (model / "a.py").write_text("def f():\n    from memacct.planner.b import g\n")
    (planner / "b.py").write_text("from . import c\n")
    (planner / "c.py").write_text("from memacct.model import a\nfrom memacct.planner.b import x\n")
    (tmp_path / "tools" / "t.py").write_text("from u import y\n")
    (tmp_path / "tools" / "u.py").write_text("import memacct.model.a\n")
    graph = _import_graph(tmp_path)
    assert graph["memacct.planner.b"] == {"memacct.planner.c"}
    assert graph["tools.t"] == {"tools.u"}
    assert _upward(graph) == ["memacct.model.a -> memacct.planner.b"]
    assert _circles(graph) == [["memacct.model.a", "memacct.planner.b", "memacct.planner.c"]]


def _private_imports(root: Path) -> list[str]:
    """``from <public module> import _name`` anywhere in the sources, the tests and the tools:
    a name another module reads is its module's API, and public (a private module, such as
    ``memacct.sim._core``, is its own package's business)."""
    found = []
    dirs = ("memacct", "bench", "backends", "tools", "tests")
    for path in sorted(p for d in dirs for p in (root / d).rglob("*.py")):
        for module, names in _imports(path):
            parts = module.split(".")
            if not parts[0].startswith("memacct") or any(p.startswith("_") for p in parts):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                found.append(f"{path.relative_to(root)}: from {module} import {', '.join(private)}")
    return found


def test_no_module_imports_another_modules_private_name(tmp_path: Path) -> None:
    assert _private_imports(ROOT) == []
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "t.py").write_text(
        "from memacct.model.config import ModelConfig, _hidden\nfrom memacct.sim._core import _ok\n"
    )
    assert _private_imports(tmp_path) == ["tools/t.py: from memacct.model.config import _hidden"]


def test_the_architecture_doc_names_each_module_and_only_paths_that_exist() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert [p for p in re.findall(r"memacct/[\w/]+\.py", doc) if not (ROOT / p).is_file()] == []
    named = set(re.findall(r"`([\w.]+)`", doc))
    globs = ("*.py", "model/**/*.py", "planner/*.py", "engines/*.py", "engines/vllm/*.py")
    files = sorted({p for pattern in globs for p in (ROOT / "memacct").glob(pattern)})
    assert len(files) > 60
    unnamed = [str(p.relative_to(ROOT)) for p in files
               if not p.stem.startswith("_") and p.stem not in named]  # fmt: skip
    assert unnamed == [], "say what each does in docs/architecture.md, 'Each module's one job'"
