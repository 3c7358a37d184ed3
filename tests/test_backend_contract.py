"""The plugin contract lives on BaseBackend: every optional member declared with its default."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import memacct
from memacct.backend import (
    OPTIONAL_MEMBERS,
    BaseBackend,
    as_base_backend,
    factory_availability,
    factory_priority,
)
from memacct.sim import SimDevice

CORE = Path(memacct.__file__).parent


def test_base_backend_declares_every_optional_member() -> None:
    for member in OPTIONAL_MEMBERS:
        assert member in vars(BaseBackend), member


def test_defaults_of_the_optional_members() -> None:
    backend = memacct.TorchLikeBackend(SimDevice(total_bytes=2**30).api, name="plain")
    assert isinstance(backend, BaseBackend)
    assert backend.process_memory(0) is None
    assert backend.device_identity(0) == ("plain", 0)
    assert isinstance(backend.consistent_reading(0), contextlib.nullcontext)
    assert backend.quirks == memacct.BackendQuirks()
    assert factory_priority(type(backend)) == 0
    assert factory_availability(memacct.TorchLikeBackend).available


def test_a_protocol_only_backend_gets_the_defaults() -> None:
    api = SimDevice(total_bytes=2**30).api

    class ProtocolOnly:  # follows DeviceBackend, does not subclass BaseBackend
        name = "bare"
        default_truth_source = memacct.TruthSource.ALLOCATED_PEAK

        def device_count(self) -> int:
            return 1

        def mem_get_info(self, device: int) -> tuple[int, int]:
            free, total = api.mem_get_info(device)
            return int(free), int(total)

        def memory_stats(self, device: int) -> dict[str, int]:
            return dict(api.memory_stats(device))

        def reset_peak_memory_stats(self, device: int) -> None:
            api.reset_peak_memory_stats(device)

        def empty_cache(self) -> None:
            api.empty_cache()

        def synchronize(self, device: int) -> None:
            pass

    view = as_base_backend(ProtocolOnly())  # type: ignore[arg-type]
    assert view.process_memory(0) is None and view.device_identity(0) == ("bare", 0)
    assert memacct.snapshot(ProtocolOnly()).other_processes is None  # type: ignore[arg-type]


def test_plugins_import_their_helpers_from_the_public_package() -> None:
    assert memacct.with_allocator_settings is memacct.torchlike.with_allocator_settings
    assert memacct.GiB == 2**30
    root = CORE.parent / "backends"
    for source in root.glob("*/memacct_*/*.py"):
        tree = ast.parse(source.read_text())
        private = [
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module in {"memacct.backend", "memacct.units"}
        ]
        assert private == [], f"{source} imports from {private}: import from memacct"


def test_the_core_never_probes_a_plugin_with_getattr() -> None:
    # Only memacct/backend.py, the contract, reads members by name (with BaseBackend's default).
    probes = []
    for source in CORE.rglob("*.py"):
        if source.name == "backend.py" and source.parent == CORE:
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in OPTIONAL_MEMBERS
            ):
                probes.append(f"{source.relative_to(CORE)}:{node.lineno}")
    assert probes == []
