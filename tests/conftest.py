"""Shared fixtures of the core tests."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import _hypothesis_profiles  # noqa: F401  (registers and loads the hypothesis profile)
import pytest

from memacct import registry


@pytest.fixture(autouse=True, scope="session")
def _memacct_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """memacct's user cache (meta-device parameter lists, Hub tensor tables) in a temporary
    directory for the session: the tests never read or write the user's own cache."""
    saved = os.environ.get("MEMACCT_CACHE_DIR")
    os.environ["MEMACCT_CACHE_DIR"] = str(tmp_path_factory.mktemp("memacct-cache"))
    yield
    if saved is None:
        os.environ.pop("MEMACCT_CACHE_DIR", None)
    else:
        os.environ["MEMACCT_CACHE_DIR"] = saved


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test discovers backends afresh and leaves no registration behind."""
    monkeypatch.delenv("MEMACCT_BACKEND", raising=False)
    monkeypatch.delenv("MEMACCT_DISABLED_BACKENDS", raising=False)
    monkeypatch.delenv("MEMACCT_TRUTH_SOURCE", raising=False)
    registry.refresh()
    saved = dict(registry._explicit)
    yield
    registry._explicit.clear()
    registry._explicit.update(saved)
    registry.refresh()


PluginMaker = Callable[..., Path]


@pytest.fixture
def make_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PluginMaker:
    """Install a real (path-based) distribution with a ``memacct.backends`` entry point.

    ``make_plugin("acme", "acme_backend", source, entry_points={"acme": "acme_backend:Backend"})``
    writes ``acme_backend.py`` and ``acme-0.1.dist-info`` on a fresh ``sys.path`` entry,
    exactly what pip leaves behind, so ``importlib.metadata`` finds it for real.
    """

    def make(
        dist: str, module: str, source: str, entry_points: dict[str, str], version: str = "0.1"
    ) -> Path:
        root = tmp_path / f"site-{dist}"
        root.mkdir()
        (root / f"{module}.py").write_text(textwrap.dedent(source))
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        eps = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text(f"[memacct.backends]\n{eps}\n")
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()
        monkeypatch.delitem(sys.modules, module, raising=False)
        registry.refresh()
        return root

    return make
