"""pytest plugin: one marker per memacct backend, and the ``memacct_backend`` fixture.

Installed with memacct (entry point ``pytest11``), so a downstream project can
write::

    @pytest.mark.cuda
    def test_profile_on_gpu(memacct_backend): ...

The test runs when the backend is available and is skipped with the
backend's own reason (missing package, no driver, no device) when it is not.
Markers are registered for every installed backend and for the well-known
names, so ``--strict-markers`` passes even where a plugin is not installed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memacct.backend import DeviceBackend
from memacct.errors import BackendUnavailableError
from memacct.plugin import FIRST_PARTY, install_hint

# Marked even when their plugin is not installed: a test suite stays portable.
KNOWN_BACKENDS = tuple(FIRST_PARTY)

_availability: dict[str, tuple[bool, str]] = {}


def _backend_names() -> list[str]:
    from memacct.registry import backend_names

    return sorted(set(KNOWN_BACKENDS) | set(backend_names()))


def _marker_backend(item: pytest.Item) -> str | None:
    names = set(_backend_names())
    for mark in item.iter_markers():
        if mark.name in names:
            return mark.name
    return None


def _available(name: str) -> tuple[bool, str]:
    if name not in _availability:
        from memacct.registry import available_backends

        infos = {info.name: info for info in available_backends()}
        info = infos.get(name)
        if info is None:
            _availability[name] = (
                False,
                f"memacct backend {name!r} is not installed"
                + (f" ({install_hint(name)})" if install_hint(name) else ""),
            )
        else:
            _availability[name] = (info.available, info.reason)
    return _availability[name]


def pytest_configure(config: pytest.Config) -> None:
    for name in _backend_names():
        config.addinivalue_line(
            "markers",
            f"{name}: needs the memacct backend {name!r}; skipped with its reason where it "
            "is not available",
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    name = _marker_backend(item)
    if name is None:
        return
    ok, reason = _available(name)
    if not ok:
        pytest.skip(f"memacct backend {name!r} not available: {reason}")


@pytest.fixture
def memacct_backend(request: pytest.FixtureRequest) -> Iterator[DeviceBackend]:
    """The backend named by the test's marker (``sim`` when unmarked), freshly built."""
    from memacct.registry import get_backend

    name = _marker_backend(request.node) or "sim"
    try:
        backend = get_backend(name)
    except BackendUnavailableError as exc:
        # Listed available from what can be told without its framework; building it found
        # otherwise (no GPU for torch.cuda, CANN missing): a skip with that reason too.
        pytest.skip(str(exc))
    yield backend


@pytest.fixture
def device_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Path]:
    """``device_files("nvidia0", ...)``: a ``/dev`` for ``memacct.plugin`` (Linux) holding these.

    For tests of a backend's ``availability()``: what the drivers would have created.
    Returns the folder; called again, it adds files.
    """
    from memacct import plugin

    folder = tmp_path / "dev"
    folder.mkdir()
    monkeypatch.setattr(plugin, "DEVICE_DIR", str(folder))
    monkeypatch.setattr(sys, "platform", "linux")

    def make(*names: str) -> Path:
        for name in names:
            (folder / name).touch()
        return folder

    return make
