"""Loading a script of ``tools/`` (not a package) as a module, for the tests that check it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(script: str, name: str) -> ModuleType:
    """``tools/<script>`` executed as the module ``name`` (registered in ``sys.modules``, so
    its dataclasses resolve their annotations)."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
