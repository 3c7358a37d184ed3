"""The accounting stays pure, the core branches on no backend's name, one owner per constant.

Issue 20: the accounting ran the simulator (it imported the replay, which built
``memacct.sim`` allocators) and the replay picked MindSpore's presets by name. The replay
now runs through the backend's declared ``allocator_model`` (implemented by
``memacct.sim``), from the profiling session, and hands the accounting a number.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "memacct"
SOURCES = [CORE, *sorted(ROOT.glob("backends/*/memacct_*")), ROOT / "bench" / "memacct_bench"]


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_importing_the_accounting_loads_no_simulator_module() -> None:
    code = (
        "import sys, memacct.accounting, memacct.truth, memacct.replay\n"
        "print(sorted(m for m in sys.modules if m.startswith('memacct.sim')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_accounting_and_the_replay_import_no_simulator_even_lazily() -> None:
    # The accounting is handed the replay's need; the replay drives the backend's model
    # through the AllocatorModel protocol. Neither names the simulator, not even in a
    # function body.
    for name, banned in (("accounting", ("memacct.replay", "memacct.sim")),
                         ("replay", ("memacct.sim",)), ("truth", ("memacct.sim",))):  # fmt: skip
        imported = _imports(CORE / f"{name}.py")
        hits = sorted(m for m in imported if m.startswith(banned))
        assert not hits, f"memacct/{name}.py imports {hits}"


# A backend's or an allocator preset's name compared in code: `name.startswith("mindspore")`,
# `alloc == "npu"`, `in ("cuda", ...)`. The simulator (memacct/sim/) owns its presets' names.
_NAMES = r"(?:mindspore|cuda|npu|nvml|ascend|torch-cuda)[\w-]*"
_BRANCH = re.compile(
    rf"""(?:startswith|endswith)\(\s*["']{_NAMES}["']"""
    rf"""|[=!]=\s*["']{_NAMES}["']|\bin\s*[(\[{{]\s*["']{_NAMES}["']"""
)


def test_the_core_has_no_backend_name_branch() -> None:
    hits = []
    for path in sorted(CORE.rglob("*.py")):
        if CORE / "sim" in path.parents:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _BRANCH.search(line.split("#", 1)[0]):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "backend-name branches in the core:\n" + "\n".join(hits)


def test_the_branch_pattern_finds_the_branch_it_is_for() -> None:
    for line in ('if self.name.startswith("mindspore"):', 'budget = x if alloc == "npu" else 0',
                 'elif name in ("torch-cuda", "npu"):'):  # fmt: skip
        assert _BRANCH.search(line), line
    assert not _BRANCH.search('if engine == "sglang":')


# torch's kLargeBuffer (20 MiB): one definition, memacct.backend.LARGE_BUFFER_BYTES.
_TWENTY_MIB = re.compile(
    r"^\s*[A-Za-z_]\w*\s*(?::[^=]+)?=\s*"
    r"(?:20\s*\*\s*(?:MiB|1024\s*\*\s*1024|2\s*\*\*\s*20|\(?1\s*<<\s*20\)?)|20\s*<<\s*20|20971520)"
    r"\s*(?:#.*)?$"
)


def test_the_20_mib_allocator_constant_is_defined_once() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for source in SOURCES
        for path in sorted(source.rglob("*.py"))
        for line in path.read_text().splitlines()
        if _TWENTY_MIB.match(line)
    ]
    assert found == ["memacct/backend.py: LARGE_BUFFER_BYTES = 20 * 1024 * 1024"], found
    for line in ("LARGE_BUFFER = 20 * MiB", "X: int = 20 << 20", "Y = 20971520  # bytes"):
        assert _TWENTY_MIB.match(line), line
