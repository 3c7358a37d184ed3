"""docs/reliability.md and the tests agree: every test it names exists, and every test of the
test_reliability_* files is named there, so the table cannot drift from what is proven."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
REFERENCE = re.compile(r"`((?:(?:backends|bench)/[\w/]+/)?test_\w+\.py)::(test_\w+)`")


@functools.cache
def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def references() -> list[tuple[str, str]]:
    return REFERENCE.findall(DOC.read_text(encoding="utf-8"))


def resolve(file: str) -> Path:
    return ROOT / file if file.startswith(("backends/", "bench/")) else ROOT / "tests" / file


def test_the_table_names_tests() -> None:
    assert len(references()) > 100


def test_every_test_the_table_names_exists() -> None:
    missing = [f"{file}::{name}" for file, name in references()
               if not resolve(file).is_file() or name not in functions_in(resolve(file))]
    assert missing == []


def test_every_reliability_test_is_in_the_table() -> None:
    named = {(file, name) for file, name in references()}
    unnamed = [
        f"{path.name}::{name}"
        for path in sorted((ROOT / "tests").glob("test_reliability_*.py"))
        if path.name != Path(__file__).name
        for name in sorted(functions_in(path))
        if (path.name, name) not in named
    ]
    assert unnamed == []
