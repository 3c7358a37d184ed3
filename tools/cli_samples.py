"""Regenerate the sample outputs in docs/cli.md from the commands themselves.

A sample is a fenced block right after a marker line::

    <!-- generated: memacct plan --model qwen2.5-7b --device h100-80gb -->
    ```
    $ memacct plan --model qwen2.5-7b --device h100-80gb
    ...what the command prints...
    ```

Run by hand after a change that moves a number (``.venv/bin/python tools/cli_samples.py``);
``tests/test_docs.py`` fails when a sample no longer matches what the command prints.
Lines that differ from run to run (the profiling duration) are normalised.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_MD = ROOT / "docs" / "cli.md"
MARKER = re.compile(r"^<!-- generated: (memacct .+?) -->\n```\n(.*?)^```\n", re.M | re.S)
_DURATION = re.compile(r"^(duration\s+)[0-9.]+( seconds)$", re.M)


def normalise(text: str) -> str:
    """The output with what varies between runs fixed (the duration of a simulated start)."""
    lines = _DURATION.sub(r"\g<1>0.01\g<2>", text).rstrip().splitlines()
    return "".join(line.rstrip() + "\n" for line in lines)


def run(command: str) -> str:
    """What ``command`` prints to stdout, as a pipe sees it, normalised (exit 0, or 1 for a
    plan that does not fit)."""
    argv = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}
    out = subprocess.run(
        [sys.executable, "-m", "memacct", *argv[1:]],
        capture_output=True, text=True, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    if out.returncode not in (0, 1):  # 1: a plan that does not fit, shown as a sample
        raise RuntimeError(f"{command!r} exited {out.returncode}: {out.stderr.strip()}")
    return normalise(out.stdout)


def samples(text: str) -> list[tuple[str, str]]:
    """``(command, block)`` of every generated sample; the block without its ``$`` line."""
    found = []
    for match in MARKER.finditer(text):
        block = match.group(2)
        first, _, rest = block.partition("\n")
        assert first == f"$ {match.group(1)}", f"sample of {match.group(1)!r} starts with {first!r}"
        found.append((match.group(1), rest))
    return found


def main() -> None:
    text = CLI_MD.read_text(encoding="utf-8")

    def render(match: re.Match[str]) -> str:
        command = match.group(1)
        return f"<!-- generated: {command} -->\n```\n$ {command}\n{run(command)}```\n"

    CLI_MD.write_text(MARKER.sub(render, text), encoding="utf-8")
    print(f"regenerated {len(samples(text))} sample(s) in {CLI_MD.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
