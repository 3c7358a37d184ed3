"""`make demo` installs what the demo needs and nothing more (issue 23, row 13)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The demo's command, run with every framework and optional extra made unimportable: if the
# demo needed one of them, a framework-free environment (`.venv-demo`) could not run it.
_HIDDEN = ("torch", "torch_npu", "mindspore", "pynvml", "transformers", "huggingface_hub", "gguf")
_RUN_WITHOUT_FRAMEWORKS = f"""
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {_HIDDEN!r}:
            raise ImportError("hidden by the test: " + name)
        return None
sys.meta_path.insert(0, _Hide())
from memacct.cli import main
sys.argv = ["memacct", *sys.argv[1:]]
main()
"""


def _recipe(target: str) -> tuple[str, str]:
    """The prerequisites and the recipe lines of one Makefile target."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", text, re.M)
    assert match is not None, f"the Makefile has no {target!r} target"
    return match.group(1), match.group(2)


def test_demo_does_not_install_the_test_frameworks() -> None:
    prerequisites, _ = _recipe("demo")
    assert "install" not in prerequisites.split(), "demo must not pull the full dev install"
    _, stamp_recipe = _recipe("$(DEMO_STAMP)")
    assert "DEV_FRAMEWORKS" not in stamp_recipe and "[dev]" not in stamp_recipe
    assert '".[plot]"' in stamp_recipe
    assert "$(DEMO_STAMP)" in prerequisites


def test_the_demo_command_runs_without_any_framework(tmp_path: Path) -> None:
    _, recipe = _recipe("demo")
    line = next(ln for ln in recipe.splitlines() if "memacct plan" in ln)
    args = line.split("memacct plan", 1)[1].split()
    args = [str(tmp_path / "plan.png") if a.endswith(".png") else a for a in args]
    done = subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT_FRAMEWORKS, "plan", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "fits" in done.stdout
    assert (tmp_path / "plan.png").stat().st_size > 0
