"""A Ctrl-C while the command line starts (its imports) is quiet, exit 130, as one during a
command is; importing memacct itself imports nothing but its version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "memacct"

# A fresh interpreter in which importing ``name`` is interrupted, as a Ctrl-C would, and then
# the installed ``memacct`` script runs.
_INTERRUPTED_IMPORT = """
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r}:
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["memacct", "plan", "--model", "qwen2.5-7b", "--device", "h100"]
runpy.run_path({script!r}, run_name="__main__")
"""


@pytest.mark.parametrize("name", ["click", "memacct.cli.flags", "memacct.model.spec",
                                  "memacct.cli.plan"])
def test_ctrl_c_while_importing_is_quiet(name: str) -> None:
    code = _INTERRUPTED_IMPORT.format(name=name, script=str(BIN))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (130, "")


def test_importing_memacct_imports_only_its_version() -> None:
    code = ("import sys; import memacct; "
            "print(sorted(m for m in sys.modules if m.startswith('memacct')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert proc.stdout.strip() == "['memacct', 'memacct._version']"
    # The names are all there on first use.
    code = ("import memacct; print(memacct.get_backend.__module__, memacct.MemacctError.__name__,"
            " memacct.errors.__name__, hasattr(memacct, 'nosuch'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert proc.stdout.split() == ["memacct.registry", "MemacctError", "memacct.errors", "False"]
