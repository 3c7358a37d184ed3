"""Security: no pickles, no evaluation of input, bounded reads, entry points the only code loaded.

The source checks walk the syntax tree of every module of the package and of
the backend plugins (not a text grep, so a docstring saying "nothing is
unpickled" does not count and an aliased import does).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import memacct
from memacct import BackendNotFoundError, ConfigError, registry
from memacct.planner import KVCacheSpec, load_model_preset, load_profile, save_profile
from memacct.sim import SimDevice
from memacct.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "memacct"
PLUGINS = sorted(p for p in (ROOT / "backends").glob("*/memacct_*") if p.is_dir())

# Modules that turn bytes into live objects (or run code while doing so).
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve",
                  "joblib", "jsonpickle", "yaml"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__", "breakpoint"}
UNSAFE_LOADERS = {("torch", "load"), ("numpy", "load"), ("np", "load"), ("yaml", "load"),
                  ("yaml", "unsafe_load"), ("pickle", "loads"), ("pickle", "load")}
# No builtin dynamic import in the core: the simulator is an entry point like any backend.
ALLOWED_BUILTIN_CALLS: set[tuple[str, str]] = set()


def sources() -> Iterator[tuple[str, ast.Module]]:
    for folder in (CORE, *PLUGINS):
        for path in sorted(folder.rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"))


def test_the_source_walk_covers_the_core_and_every_plugin() -> None:
    names = {name for name, _ in sources()}
    assert "memacct/registry.py" in names and "memacct/model/spec.py" in names
    assert {p.name for p in PLUGINS} >= {"memacct_cuda", "memacct_nvml"}


def test_no_module_imports_a_deserializer_that_runs_code() -> None:
    found = []
    for name, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            found += [f"{name}:{node.lineno} imports {m}" for m in mods
                      if m.split(".")[0] in UNSAFE_MODULES]
    assert found == []


def calls() -> Iterator[tuple[str, ast.Call]]:
    """Every call in the scanned sources, with its module's path."""
    for name, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                yield name, node


def test_no_module_calls_eval_exec_or_compile() -> None:
    found = [f"{name}:{call.lineno} calls {call.func.id}()" for name, call in calls()
             if isinstance(call.func, ast.Name) and call.func.id in UNSAFE_BUILTINS
             and (name, call.func.id) not in ALLOWED_BUILTIN_CALLS]  # fmt: skip
    assert found == []


def test_no_module_calls_a_loader_that_unpickles() -> None:
    found = [f"{name}:{call.lineno} calls {call.func.value.id}.{call.func.attr}"
             for name, call in calls()
             if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
             and (call.func.value.id, call.func.attr) in UNSAFE_LOADERS]  # fmt: skip
    assert found == []


def test_the_core_loads_code_only_through_the_entry_point_group() -> None:
    # Every dynamic import in memacct/ is an entry point (memacct.backends in the registry,
    # memacct.cli in the CLI), an engine module named in the constant ENGINE_MODULES, or a
    # module of the package's constant tables of lazily imported names.
    found = []
    for name, call in calls():
        func = call.func
        called = (func.attr if isinstance(func, ast.Attribute)
                  else func.id if isinstance(func, ast.Name) else "")  # fmt: skip
        if name.startswith("memacct/") and called in {"import_module", "__import__",
                                                       "entry_points"}:  # fmt: skip
            found.append(f"{name}:{called}")
    assert sorted(found) == [
        "memacct/__init__.py:import_module",
        "memacct/cli/group.py:entry_points",
        "memacct/engines/__init__.py:import_module",
        "memacct/registry.py:entry_points",
    ]


def test_an_attribute_name_of_the_package_never_names_a_module_to_import() -> None:
    code = (
        "import sys, memacct\n"
        "for name in ('json', 'os', 'accounting_x', '_version_x', 'sim.device'):\n"
        "    try:\n"
        "        getattr(memacct, name)\n"
        "    except AttributeError:\n"
        "        pass\n"
        "    else:\n"
        "        print('imported', name)\n"
        "assert memacct.errors.MemacctError is memacct.MemacctError\n"
        "print(sorted(m for m in sys.modules if m.startswith('memacct.sim')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.split() == ["[]"]


def test_backend_name_from_the_environment_is_never_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMACCT_BACKEND", "os:system")
    with pytest.raises(BackendNotFoundError, match="no memacct backend named 'os:system'"):
        memacct.get_backend()
    with pytest.raises(BackendNotFoundError):
        memacct.get_backend("json")


def test_entry_points_of_other_groups_are_not_loaded(
    make_plugin: Callable[..., Path], tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    root = make_plugin("other-dist", "other_mod", f"open({str(marker)!r}, 'w').close()\n", {})
    info = next(root.glob("*.dist-info"))
    (info / "entry_points.txt").write_text("[memacct.plugins]\nother = other_mod:Backend\n")
    registry.refresh()
    assert "other" not in {i.name for i in memacct.available_backends()}
    assert not marker.exists()


def test_config_naming_custom_code_does_not_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hugging Face configs may point at remote modeling code (auto_map, trust_remote_code);
    # memacct reads numbers only.
    marker = tmp_path / "ran"
    (tmp_path / "evil_modeling.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_model_preset("llama-3.1-8b")
    config["auto_map"] = {"AutoConfig": "evil_modeling.Config",
                          "AutoModelForCausalLM": "evil_modeling.Model"}
    config["trust_remote_code"] = True
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert KVCacheSpec.from_hf_config(path).bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert not marker.exists() and "evil_modeling" not in sys.modules


def test_profile_json_with_object_tags_is_refused(tmp_path: Path) -> None:
    dev = SimDevice()
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    with memacct.memory_profiling(backend, baseline, weights_memory=0) as session:
        pass
    path = save_profile(session.result, tmp_path / "p.json")
    data = json.loads(path.read_text())
    data["py/object"] = "os.system"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="py/object: Extra inputs are not permitted"):
        load_profile(path)


def test_oversized_quantization_sidecar_is_refused_by_size(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(load_model_preset("llama-3.1-8b")))
    with (tmp_path / "hf_quant_config.json").open("wb") as fh:
        fh.truncate(GiB)
    with pytest.raises(ConfigError, match="hf_quant_config.json .* is larger than"):
        KVCacheSpec.from_hf_config(tmp_path)


def test_read_limit_is_16_mib() -> None:
    from memacct.io import MAX_FILE_BYTES

    assert 16 * MiB == MAX_FILE_BYTES
