"""Running the installed ``memacct`` command in a child process, for the CLI tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "memacct"
"""The ``memacct`` script of this environment."""


def watch_lines(*args: str, count: int = 3) -> tuple[list[str], str, int]:
    """Run ``memacct <args>`` (a ``--watch`` command), read ``count`` lines, interrupt it.

    The environment is this one without ``MEMACCT_*`` variables. Returns the lines, the
    standard error and the exit status after the interrupt (SIGINT, as Ctrl-C sends).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}
    proc = subprocess.Popen(
        [str(BIN), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(count)]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return lines, err, proc.returncode
