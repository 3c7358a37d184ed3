"""Every Python example in the README and docs/ runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text())


@pytest.mark.parametrize(
    "path", [p for p in DOCS if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_examples_run(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The blocks of one file run in order in one namespace, in a scratch directory."""
    monkeypatch.chdir(tmp_path)
    # As printed: no MEMACCT_BACKEND or other memacct setting from the caller's environment.
    for name in [n for n in os.environ if n.startswith("MEMACCT_")]:
        monkeypatch.delenv(name)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for number, block in enumerate(python_blocks(path), start=1):
        code = compile(block, f"{path.name} (python block {number})", "exec")
        exec(code, namespace)


def test_readme_example_prints_the_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(python_blocks(ROOT / "README.md")[0], "README.md", "exec"), {})
    assert "Memory profiling results:" in capsys.readouterr().out


def _cli_samples() -> object:
    from _tools import load_tool

    return load_tool("cli_samples.py", "cli_samples")


def test_cli_md_samples_are_what_the_commands_print() -> None:
    """docs/cli.md's sample outputs are generated (tools/cli_samples.py) and still true."""
    tool: Any = _cli_samples()
    found = tool.samples((ROOT / "docs" / "cli.md").read_text())
    assert [command for command, _ in found] == [
        "memacct snapshot --demo",
        "memacct plan --model qwen2.5-7b --device h100-80gb",
        "memacct plan --model llama-3.1-70b --device h100",
        "memacct plan --model llama-3.1-70b --device h100,a100-80gb,l4 --tensor-parallel-size "
        "2,4,8 --min-concurrency 4",
        "memacct plan --model llama-3.1-70b --device h100 -tp 4 --max-model-len 32k "
        "--enable-lora --max-lora-rank 64 --emit vllm",
        "memacct plan --model qwen2.5-7b --device h100 --engine sglang --mem-fraction-static "
        "0.85 --context-length 32Ki --emit sglang",
        "memacct plan --model llama-3.1-70b --device h100 --tensor-parallel-size 4 "
        "--cpu-offload-gb 8 --emit k8s",
    ]
    for command, block in found:
        assert tool.normalise(block) == tool.run(command), (
            f"docs/cli.md's sample of {command!r} is stale: run tools/cli_samples.py"
        )


# How to run each row of docs/cli.md's error table (the row's first column -> argv, env).
CLI_ERROR_ROWS: dict[str, tuple[list[str], dict[str, str]]] = {
    "--model missing.json": (["plan", "--model", "missing.json"], {}),
    "--model bad.json": (["plan", "--model", "bad.json"], {}),
    "--model nosuch": (["plan", "--model", "nosuch"], {}),
    "--device h999": (["plan", "--model", "qwen2.5-7b", "--device", "h999"], {}),
    "--gpu-memory-utilization 0": (
        ["plan", "--model", "qwen2.5-7b", "--gpu-memory-utilization", "0"], {}),
    "--block-size 0": (["plan", "--model", "qwen2.5-7b", "--block-size", "0"], {}),
    "--backend nope": (["snapshot", "--backend", "nope"], {}),
    "--backend cudaa": (["snapshot", "--backend", "cudaa"], {}),
    "--max-model-len 100000": (
        ["plan", "--model", "qwen2.5-7b", "--device", "h100", "--max-model-len", "100000"], {}),
    "--engine sglang --engine-version 0.4.0": (
        ["plan", "--model", "qwen2.5-7b", "--engine", "sglang", "--engine-version", "0.4.0"], {}),
    "--engine vllm-ascend --device h100": (
        ["plan", "--model", "qwen2.5-7b", "--engine", "vllm-ascend", "--device", "h100"], {}),
    "--plot /etc/passwd/x.png": (
        ["plan", "--model", "qwen2.5-7b", "--plot", "/etc/passwd/x.png"], {}),
    "--block-size x": (["plan", "--model", "qwen2.5-7b", "--block-size", "x"], {}),
    "snapshot --watch 0.01": (["snapshot", "--watch", "0.01"], {}),
    "--backend cuda": (["snapshot", "--backend", "cuda"], {}),
}  # fmt: skip
def _cuda_plugin_with_cpu_torch() -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version("memacct-cuda")
        return importlib.metadata.version("torch").endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


ERROR_ROW = re.compile(r"^\| `([^`]+)`[^|]*\| 2 \| `(.+)` \|$", re.M)


def test_cli_md_error_table_is_what_the_commands_print(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memacct.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{bad")
    (tmp_path / "p.json").write_text("{}")
    rows = ERROR_ROW.findall((ROOT / "docs" / "cli.md").read_text())
    assert len(rows) >= 10
    for cell, message in rows:
        argv, env = CLI_ERROR_ROWS[cell]
        if cell == "--backend cuda" and not _cuda_plugin_with_cpu_torch():
            continue  # the row shows memacct-cuda beside a CPU-only torch, not this machine
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        assert main(argv) == 2, cell
        for key in env:
            monkeypatch.delenv(key)
        err = capsys.readouterr().err
        expected = message.split("...")[0].rstrip()
        assert err.startswith("memacct: error: " + expected), (cell, err)
