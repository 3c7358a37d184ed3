"""Broken plugins, beyond those in test_registry.py: each listed with its reason, none fatal.

Plugins are real path-installed distributions (the ``make_plugin`` fixture),
so ``importlib.metadata`` finds them exactly as it finds pip-installed ones.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import memacct
from memacct import BackendError, BackendUnavailableError, registry

PluginMaker = Callable[..., Path]

GOOD = """
from memacct import Availability, TorchLikeBackend
from memacct.sim import SimDevice

class Backend(TorchLikeBackend):
    name = "{name}"

    def __init__(self, **options):
        super().__init__(SimDevice(total_bytes=8 * 2**30).api)

    @classmethod
    def availability(cls):
        return Availability(True, "present")
"""

SLOW = "import time\ntime.sleep({seconds})\n" + GOOD


def infos() -> dict[str, memacct.BackendInfo]:
    return {info.name: info for info in memacct.available_backends()}


def test_slow_plugin_import_is_logged_and_the_plugin_still_listed(
    make_plugin: PluginMaker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(registry, "SLOW_IMPORT_S", 0.05)
    make_plugin("slow-dist", "slow_backend", SLOW.format(seconds=0.1, name="slow"),
                {"slow": "slow_backend:Backend"})
    with caplog.at_level(logging.WARNING, logger="memacct"):
        listed = infos()
    assert listed["slow"].available
    assert "memacct backend 'slow' took" in caplog.text
    assert "MEMACCT_DISABLED_BACKENDS" in caplog.text


def test_fast_plugin_import_is_not_logged(
    make_plugin: PluginMaker, caplog: pytest.LogCaptureFixture
) -> None:
    make_plugin("fast-dist", "fast_backend", GOOD.format(name="fast"),
                {"fast": "fast_backend:Backend"})
    with caplog.at_level(logging.WARNING, logger="memacct"):
        assert infos()["fast"].available
    assert "took" not in caplog.text


def test_threads_asking_for_a_slow_plugin_at_once_all_get_it(
    make_plugin: PluginMaker,
) -> None:
    # Before the fix, threads that came second saw a half-loaded entry: "not loadable".
    make_plugin("slow-dist", "slow_backend", SLOW.format(seconds=0.3, name="slow"),
                {"slow": "slow_backend:Backend"})
    results: list[str] = []
    barrier = threading.Barrier(4)

    def build() -> None:
        barrier.wait()
        try:
            results.append(memacct.get_backend("slow").name)
        except Exception as exc:  # recorded for the assertion
            results.append(repr(exc))

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["slow"] * 4


def test_entry_point_naming_something_not_callable_is_listed_as_not_a_backend(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("num-dist", "num_backend", "Backend = 42\n", {"num": "num_backend:Backend"})
    info = infos()["num"]
    assert not info.available
    assert "is not a memacct backend: it names a int" in info.reason
    with pytest.raises(BackendUnavailableError, match="not a memacct backend"):
        memacct.get_backend("num")


def test_factory_building_the_wrong_type_is_a_backend_error(make_plugin: PluginMaker) -> None:
    make_plugin(
        "wrong-dist", "wrong_backend",
        "def make(**options):\n    return object()\n",
        {"wrong": "wrong_backend:make"},
    )
    assert infos()["wrong"].available  # a bare factory cannot be checked before it runs
    with pytest.raises(BackendError, match="gave object, which is not a memacct backend"):
        memacct.get_backend("wrong")


def test_entry_point_naming_a_missing_attribute_is_listed_with_the_error(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("typo-dist", "typo_backend", GOOD.format(name="typo"),
                {"typo": "typo_backend:Backnd"})
    info = infos()["typo"]
    assert not info.available and "failed to import" in info.reason and "Backnd" in info.reason


def test_plugin_that_exits_at_import_is_listed_and_does_not_exit(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("exit-dist", "exit_backend", "raise SystemExit('no driver, bye')\n",
                {"exiting": "exit_backend:Backend"})
    info = infos()["exiting"]
    assert not info.available and "SystemExit: no driver, bye" in info.reason
    assert infos()["sim"].available


def test_plugin_whose_availability_exits_is_listed_as_unavailable(
    make_plugin: PluginMaker,
) -> None:
    source = GOOD.format(name="quit").replace(
        'return Availability(True, "present")', "raise SystemExit(3)"
    )
    make_plugin("quit-dist", "quit_backend", source, {"quit": "quit_backend:Backend"})
    assert "availability() raised SystemExit: 3" in infos()["quit"].reason


def test_plugin_with_a_malformed_priority_is_listed_and_never_auto_chosen(
    make_plugin: PluginMaker,
) -> None:
    source = GOOD.format(name="odd") + "\nBackend.priority = 'highest'\n"
    make_plugin("odd-dist", "odd_backend", source, {"odd": "odd_backend:Backend"})
    info = infos()["odd"]
    assert info.available and info.priority == 0
    with pytest.raises(BackendUnavailableError, match="odd: present"):
        memacct.get_backend()


def test_disabling_star_refuses_a_plugin_by_name_but_not_sim(
    make_plugin: PluginMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_plugin("acme-dist", "acme_backend", GOOD.format(name="acme"),
                {"acme": "acme_backend:Backend"})
    monkeypatch.setenv("MEMACCT_DISABLED_BACKENDS", "*")
    with pytest.raises(BackendUnavailableError, match=r"disabled by MEMACCT_DISABLED_BACKENDS=\*"):
        memacct.get_backend("acme")
    assert memacct.get_backend("sim").name == "sim"


def test_disabled_plugin_is_never_imported(
    make_plugin: PluginMaker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Disabling is how a user switches off a plugin whose import hangs or crashes.
    marker = tmp_path / "imported"
    source = f"open({str(marker)!r}, 'w').close()\n" + GOOD.format(name="boom")
    make_plugin("boom-dist", "boom_backend", source, {"boom": "boom_backend:Backend"})
    monkeypatch.setenv("MEMACCT_DISABLED_BACKENDS", "boom")
    assert not infos()["boom"].available
    with pytest.raises(BackendUnavailableError):
        memacct.get_backend("boom")
    assert not marker.exists()


def test_core_sim_comes_through_the_entry_point_group_like_any_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No special case: without the core's own entry point there is no sim backend.
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    registry.refresh()
    assert "sim" not in infos()
    with pytest.raises(memacct.BackendNotFoundError, match="no memacct backend named 'sim'"):
        memacct.get_backend("sim")
    monkeypatch.undo()
    registry.refresh()
    info = infos()["sim"]
    assert info.available and info.distribution == "memacct"


def test_registering_something_not_callable_is_invalid_input() -> None:
    with pytest.raises(memacct.InvalidInputError, match="factory for backend 'x' must be callable"):
        memacct.register_backend("x", 42)  # type: ignore[arg-type]
