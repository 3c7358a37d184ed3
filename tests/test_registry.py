"""Finding backends through entry points, with real path-installed distributions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memacct
from memacct import (
    Availability,
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    TorchLikeBackend,
)
from memacct.sim import SimDevice
from memacct.testing import fresh_python

PluginMaker = Callable[..., Path]

GOOD = """
from memacct import Availability, TorchLikeBackend
from memacct.sim import SimDevice

class Backend(TorchLikeBackend):
    name = "acme"
    priority = 50

    def __init__(self, **options):
        super().__init__(SimDevice(total_bytes=8 * 2**30).api)

    @classmethod
    def availability(cls):
        return Availability(True, "acme device present")
"""


def infos() -> dict[str, memacct.BackendInfo]:
    return {info.name: info for info in memacct.available_backends()}


def test_core_registers_sim_through_the_entry_point_group() -> None:
    info = infos()["sim"]
    assert info.available
    assert info.distribution == "memacct"
    assert info.version == memacct.__version__


def test_installed_plugin_is_listed_with_its_distribution(make_plugin: PluginMaker) -> None:
    make_plugin("acme-memacct", "acme_backend", GOOD, {"acme": "acme_backend:Backend"}, "1.2")
    info = infos()["acme"]
    assert (info.available, info.reason, info.distribution, info.version) == (
        True,
        "acme device present",
        "acme-memacct",
        "1.2",
    )


def test_get_backend_without_name_prefers_available_real_device(make_plugin: PluginMaker) -> None:
    make_plugin("acme-memacct", "acme_backend", GOOD, {"acme": "acme_backend:Backend"})
    assert memacct.get_backend().name == "acme"


def test_get_backend_without_name_never_falls_back_to_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMACCT_DISABLED_BACKENDS", "*")
    monkeypatch.delenv("MEMACCT_BACKEND", raising=False)
    with pytest.raises(memacct.BackendUnavailableError, match="never measures a simulated device"):
        memacct.get_backend()


def test_memacct_backend_sim_is_the_explicit_way_to_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMACCT_DISABLED_BACKENDS", "*")
    monkeypatch.setenv("MEMACCT_BACKEND", "sim")
    assert memacct.get_backend().name == "sim"


def test_memacct_backend_env_chooses(
    monkeypatch: pytest.MonkeyPatch, make_plugin: PluginMaker
) -> None:
    make_plugin("acme-memacct", "acme_backend", GOOD, {"acme": "acme_backend:Backend"})
    monkeypatch.setenv("MEMACCT_BACKEND", "sim")
    assert memacct.get_backend().name == "sim"


def test_plugin_that_fails_to_import_is_listed_with_the_error(make_plugin: PluginMaker) -> None:
    make_plugin(
        "broken",
        "broken_backend",
        "import no_such_framework_xyz\n",
        {"broken": "broken_backend:Backend"},
    )
    info = infos()["broken"]
    assert not info.available
    assert "failed to import" in info.reason and "no_such_framework_xyz" in info.reason
    assert infos()["sim"].available


def test_plugin_whose_availability_raises_is_listed_with_the_error(
    make_plugin: PluginMaker,
) -> None:
    make_plugin(
        "raising",
        "raising_backend",
        """
        class Backend:
            @classmethod
            def availability(cls):
                raise RuntimeError("driver exploded")
    """,
        {"raising": "raising_backend:Backend"},
    )
    info = infos()["raising"]
    assert not info.available and "RuntimeError: driver exploded" in info.reason


def test_plugin_whose_factory_raises_gives_a_backend_error(make_plugin: PluginMaker) -> None:
    make_plugin(
        "ctor",
        "ctor_backend",
        GOOD.replace("super().__init__(", "raise OSError('no device node'); super().__init__(")
        .replace('name = "acme"', 'name = "ctor"'),
        {"ctor": "ctor_backend:Backend"},
    )
    with pytest.raises(BackendError, match="'ctor' failed to start.*OSError: no device node"):
        memacct.get_backend("ctor")
    assert memacct.get_backend("sim").name == "sim"


def test_plugin_missing_a_protocol_method_is_rejected_at_load(make_plugin: PluginMaker) -> None:
    make_plugin(
        "partial",
        "partial_backend",
        """
        from memacct import Availability
        class Backend:
            name = "partial"
            default_truth_source = "allocated_peak"
            def device_count(self): return 1
            def mem_get_info(self, device): return (1, 2)
            @classmethod
            def availability(cls): return Availability(True, "fine")
    """,
        {"partial": "partial_backend:Backend"},
    )
    info = infos()["partial"]
    assert not info.available
    assert "not a memacct backend" in info.reason
    assert "memory_stats" in info.reason and "empty_cache" in info.reason
    with pytest.raises(BackendError, match="missing memory_stats, reset_peak_memory_stats"):
        memacct.get_backend("partial")


def test_plugin_returning_a_non_availability_is_unavailable(make_plugin: PluginMaker) -> None:
    make_plugin(
        "odd",
        "odd_backend",
        """
        class Backend:
            @classmethod
            def availability(cls): return "yes"
    """,
        {"odd": "odd_backend:Backend"},
    )
    assert "not memacct.Availability" in infos()["odd"].reason


def test_two_plugins_claiming_one_name_keep_one_and_list_the_other(
    make_plugin: PluginMaker, caplog: pytest.LogCaptureFixture
) -> None:
    make_plugin("aaa-dist", "aaa_backend", GOOD, {"acme": "aaa_backend:Backend"})
    make_plugin("zzz-dist", "zzz_backend", GOOD, {"acme": "zzz_backend:Backend"})
    with caplog.at_level(logging.WARNING, logger="memacct"):
        listed = infos()
    assert listed["acme"].distribution == "aaa-dist" and listed["acme"].available
    dup = listed["acme (zzz-dist)"]
    assert not dup.available and "also claimed by aaa-dist" in dup.reason
    assert "claimed twice" in caplog.text


def test_disabled_backend_is_listed_and_refused(
    monkeypatch: pytest.MonkeyPatch, make_plugin: PluginMaker
) -> None:
    make_plugin("acme-memacct", "acme_backend", GOOD, {"acme": "acme_backend:Backend"})
    monkeypatch.setenv("MEMACCT_DISABLED_BACKENDS", "acme, other")
    assert "disabled by MEMACCT_DISABLED_BACKENDS" in infos()["acme"].reason
    with pytest.raises(BackendUnavailableError, match="disabled"):
        memacct.get_backend("acme")


def test_disabling_star_keeps_the_core_sim(
    monkeypatch: pytest.MonkeyPatch, make_plugin: PluginMaker
) -> None:
    make_plugin("acme-memacct", "acme_backend", GOOD, {"acme": "acme_backend:Backend"})
    monkeypatch.setenv("MEMACCT_DISABLED_BACKENDS", "*")
    listed = infos()
    assert not listed["acme"].available and listed["sim"].available


def test_unknown_backend_names_the_registered_ones() -> None:
    with pytest.raises(BackendNotFoundError, match="'nope'.*sim"):
        memacct.get_backend("nope")


def test_register_backend_adds_a_factory() -> None:
    def factory(**options: Any) -> TorchLikeBackend:
        return TorchLikeBackend(SimDevice(total_bytes=2**30).api, name="mine")

    memacct.register_backend("mine", factory)
    assert memacct.get_backend("mine").name == "mine"
    assert infos()["mine"].available


def test_register_backend_with_unavailable_factory_gives_its_reason() -> None:
    class Missing(TorchLikeBackend):
        @classmethod
        def availability(cls) -> Availability:
            return Availability(False, "needs the frobnicator driver")

    memacct.register_backend("missing", Missing)
    with pytest.raises(BackendUnavailableError, match="frobnicator"):
        memacct.get_backend("missing")


def test_register_backend_rejects_a_bad_name() -> None:
    with pytest.raises(memacct.InvalidInputError, match="'two words'"):
        memacct.register_backend("two words", TorchLikeBackend)


def test_registry_is_safe_from_threads(make_plugin: PluginMaker) -> None:
    from concurrent.futures import ThreadPoolExecutor

    make_plugin("acme-memacct", "acme_backend", GOOD, {"acme": "acme_backend:Backend"})
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda _: sorted(i.name for i in memacct.available_backends()), range(32))
        )
    assert all(r == results[0] for r in results) and "acme" in results[0]


def test_import_memacct_imports_no_framework() -> None:
    code = (
        "import sys, memacct, memacct.sim, memacct.planner\n"
        "print(' '.join(m for m in ('torch', 'mindspore', 'pynvml', 'torch_npu', 'pytest')"
        " if m in sys.modules))"
    )
    assert fresh_python(code) == [""]


def test_no_device_names_the_first_party_plugins_not_installed_with_their_pip_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the core-only install (pip install memacct) says: which plugin to install.
    import importlib.metadata

    from memacct import registry

    installed = importlib.metadata.entry_points(group="memacct.backends")
    sim_only = [ep for ep in installed if ep.name == "sim" and ep.dist is not None]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: sim_only)
    registry.refresh()
    with pytest.raises(BackendUnavailableError) as caught:
        memacct.get_backend()
    for name, dist in [("cuda", "memacct-cuda"), ("npu", "memacct-npu"),
                       ("mindspore", "memacct-mindspore"), ("nvml", "memacct-nvml")]:  # fmt: skip
        hint = f"pip install ./backends/{name} (in a memacct checkout: {dist})"
        assert f"{name}: not installed ({hint}: " in str(caught.value)
    assert "sim:" not in str(caught.value)
