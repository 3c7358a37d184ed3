"""The hostile trial of issue 15: one regression test (or more) per finding.

Each test reproduces a finding of the trial as it was reported and checks the
expected behaviour; each failed on the code the trial ran against. The table
in docs/reliability.md ("The hostile trial") names them row by row.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _harness import simulate_engine_start

import memacct
from memacct import (
    BackendError,
    ConfigError,
    InvalidInputError,
    KVCachePlan,
    ProfilingError,
    ProfilingOutOfMemoryError,
    registry,
)
from memacct.cli import main
from memacct.model.sources.local import read_config_file
from memacct.planner import load_model_preset, load_profile, save_profile
from memacct.sim import SimDevice

PluginMaker = Callable[..., Path]
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "memacct"
MODEL = ["--model", "qwen2.5-7b", "--device", "h100-80gb"]


def limit_file_size(limit: int) -> Callable[[], None]:
    """For ``preexec_fn``: writes past ``limit`` bytes fail with EFBIG, like a full disk."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120,
    fsize_limit: int | None = None,
) -> Any:
    """The console script in a fresh process (what a user runs), with a time limit."""
    # A process that cannot write files cannot write coverage data either: measure it not.
    skip = ("MEMACCT_",) if fsize_limit is None else ("MEMACCT_", "COVERAGE_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    extra = dict(env or {})
    if "PYTHONPATH" in extra and base.get("PYTHONPATH"):
        extra["PYTHONPATH"] += os.pathsep + base["PYTHONPATH"]
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=timeout,
        env={**base, **extra}, check=False,
        preexec_fn=None if fsize_limit is None else limit_file_size(fsize_limit),
    )  # fmt: skip


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("memacct: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def profile() -> memacct.ProfileResult:
    config = load_model_preset("qwen2.5-7b")
    return simulate_engine_start(config, device="h100-80gb").result


@pytest.fixture(scope="module")
def plan(profile: memacct.ProfileResult) -> KVCachePlan:
    spec = memacct.KVCacheSpec.from_hf_config(load_model_preset("qwen2.5-7b"))
    return memacct.plan_kv_cache(profile, spec)


# -- row 1: a full disk loses nothing -------------------------------------------------


def test_full_disk_keeps_the_old_profile_and_plan_files(
    tmp_path: Path,
    profile: memacct.ProfileResult,
    plan: KVCachePlan,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old_profile, old_plan = tmp_path / "profile.json", tmp_path / "plan.json"
    save_profile(profile, old_profile)
    plan.save(old_plan)
    before = (old_profile.read_bytes(), old_plan.read_bytes())

    def enospc(*args: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(ConfigError, match="No space left on device.*unchanged"):
        save_profile(profile, old_profile)
    with pytest.raises(ConfigError, match="No space left on device"):
        plan.save(old_plan)
    monkeypatch.undo()
    assert (old_profile.read_bytes(), old_plan.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "profile.json"]


def test_full_disk_while_plotting_is_one_line_and_keeps_the_old_plot(tmp_path: Path) -> None:
    # A file-size limit makes every write past 4 KiB fail (EFBIG) as a full disk would, for
    # every writer in the process, whatever it writes through.
    plot = tmp_path / "old.png"
    plot.write_bytes(b"the previous plot")
    proc = run_cli("plan", *MODEL, "--plot", str(plot), fsize_limit=4096)
    assert proc.returncode == 2
    assert "cannot write plot" in one_line_error(proc.stderr)
    assert plot.read_bytes() == b"the previous plot"
    assert [p.name for p in tmp_path.iterdir()] == ["old.png"]


# -- row 2: concurrent saves on one path ------------------------------------------------


def test_six_threads_saving_one_path_leave_a_valid_file_every_round(
    tmp_path: Path, profile: memacct.ProfileResult, plan: KVCachePlan
) -> None:
    target = tmp_path / "shared.json"
    rounds, threads = 200, 6
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []
    invalid: list[int] = []

    def worker(index: int) -> None:
        for n in range(rounds):
            barrier.wait()
            try:
                if index % 2:
                    save_profile(profile, target)
                else:
                    plan.save(target)
            except BaseException as exc:
                failures.append(exc)
            if barrier.wait() == 0:  # one thread checks the file the round left
                text = target.read_text()
                try:
                    load_profile(target) if '"baseline"' in text[:40] else KVCachePlan.load(target)
                except ConfigError:
                    invalid.append(n)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert failures == []
    assert invalid == []
    assert [p.name for p in tmp_path.iterdir()] == ["shared.json"]  # no temporary file left


# -- row 3: no predictable temporary name ----------------------------------------------


def test_symlink_planted_at_the_old_temporary_name_is_not_followed(
    tmp_path: Path, plan: KVCachePlan
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "plan.json"
    # The name the writers used before: .<name>.<pid>.tmp beside the target.
    planted = tmp_path / f".plan.json.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    plan.save(target)
    assert victim.read_text() == "precious"
    assert planted.is_symlink() and planted.resolve() == victim
    assert KVCachePlan.load(target) == plan


# -- row 4: first-party names cannot be taken ------------------------------------------

IMPOSTOR = """
from memacct import Availability, TorchLikeBackend
from memacct.sim import SimDevice

class Backend(TorchLikeBackend):
    name = "{name}"
    priority = 10**9

    def __init__(self, **options):
        super().__init__(SimDevice(total_bytes=8 * 2**30).api, name="{reported}")

    @classmethod
    def availability(cls):
        return Availability(True, "impostor present")
"""


def infos() -> dict[str, memacct.BackendInfo]:
    return {info.name: info for info in memacct.available_backends()}


@pytest.mark.parametrize("name", ["cuda", "npu", "mindspore", "nvml", "sim"])
def test_third_party_claiming_a_first_party_name_is_refused(
    name: str, make_plugin: PluginMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_plugin("evil-dist", "evil_backend", IMPOSTOR.format(name=name, reported=name),
                {name: "evil_backend:Backend"})  # fmt: skip
    listed = infos()
    refused = listed[f"{name} (evil-dist)"]
    assert not refused.available
    assert f"belongs to {registry.FIRST_PARTY[name]}" in refused.reason
    assert f"MEMACCT_ALLOW_OVERRIDE={name}" in refused.reason
    if name in listed:  # the first-party plugin, where installed, keeps its name
        assert listed[name].distribution == registry.FIRST_PARTY[name]
    with pytest.raises(memacct.BackendUnavailableError):
        memacct.get_backend()  # the impostor's huge priority does not make it the default


def test_explicit_opt_in_lets_a_distribution_take_a_first_party_name(
    make_plugin: PluginMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_plugin("alt-cuda", "alt_cuda", IMPOSTOR.format(name="cuda", reported="cuda"),
                {"cuda": "alt_cuda:Backend"})  # fmt: skip
    monkeypatch.setenv("MEMACCT_ALLOW_OVERRIDE", "cuda")
    listed = infos()
    assert listed["cuda"].distribution == "alt-cuda" and listed["cuda"].available
    if "cuda (memacct-cuda)" in listed:  # memacct-cuda installed: listed as replaced
        assert "replaced by" in listed["cuda (memacct-cuda)"].reason
    assert memacct.get_backend("cuda").name == "cuda"


def test_backend_class_whose_name_is_not_its_entry_point_is_listed_broken(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("liar-dist", "liar_backend", IMPOSTOR.format(name="sim", reported="sim"),
                {"liar": "liar_backend:Backend"})  # fmt: skip
    info = infos()["liar"]
    assert not info.available
    assert "reports name 'sim' but its entry point is named 'liar'" in info.reason


def test_built_backend_whose_name_is_not_its_entry_point_is_a_backend_error(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("liar-dist", "liar_backend", IMPOSTOR.format(name="liar", reported="sim"),
                {"liar": "liar_backend:Backend"})  # fmt: skip
    with pytest.raises(BackendError, match="reports name 'sim'.*must equal its entry point"):
        memacct.get_backend("liar")


def test_install_hints_match_the_entry_points_of_the_first_party_distributions() -> None:
    # The hint table is the entry-point metadata of this repository's distributions.
    import tomllib

    declared: dict[str, str] = {}
    for pyproject in [ROOT / "pyproject.toml", *sorted(ROOT.glob("backends/*/pyproject.toml"))]:
        if "_template" in str(pyproject):
            continue
        project = tomllib.loads(pyproject.read_text())["project"]
        for name in project.get("entry-points", {}).get("memacct.backends", {}):
            declared[name] = project["name"]
    assert declared == registry.FIRST_PARTY


# -- row 5: a plugin that hangs costs at most the time limit: tests/test_reliability_plugins.py
# (with a time limit of a quarter second, and "once however many", issue 23 row 4).


# -- row 6: a plot path that cannot be written ------------------------------------------


@pytest.mark.parametrize("path", ["/proc/self/x.png", "/etc/passwd/x.png", "/sys/x.png"])
def test_plot_to_a_path_that_cannot_be_written_is_one_line_and_exit_2(path: str) -> None:
    proc = run_cli("plan", *MODEL, "--plot", path)
    assert proc.returncode == 2
    assert repr(path) in one_line_error(proc.stderr) or str(Path(path).parent) in proc.stderr


# -- row 7: raw int() of the forward pass's config keys ---------------------------------


def test_deepseek_config_key_of_the_wrong_type_is_a_config_error_naming_it(
    deepseek_key_of_the_wrong_type: tuple[str, object],
) -> None:
    key, value = deepseek_key_of_the_wrong_type
    config = {**load_model_preset("deepseek-v2-lite"), key: value}
    with pytest.raises(ConfigError, match=re.escape(f"{key} must be an integer, got {value!r}")):
        simulate_engine_start(config, device="h100-80gb")


# -- row 8: nesting that would blow the parser's stack ---------------------------------


def test_deeply_nested_json_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nests deeper than 64 levels"):
        read_config_file(path)
    with pytest.raises(ConfigError):
        load_profile(path)


# -- row 9: a plugin module named memacct_<x> ------------------------------------------

PREFIXED = """
from memacct import Availability, TorchLikeBackend
from memacct.sim import SimDevice

class ZzzDriverError(Exception):
    pass

class Backend(TorchLikeBackend):
    name = "zzz"

    def __init__(self, **options):
        super().__init__(SimDevice(total_bytes=8 * 2**30).api)

    def device_count(self):
        raise ZzzDriverError("zzz driver lost the device")

    @classmethod
    def availability(cls):
        return Availability(True, "zzz present")
"""


def test_own_exception_of_a_plugin_named_memacct_x_is_a_backend_error_naming_it(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("memacct-zzz", "memacct_zzz", PREFIXED, {"zzz": "memacct_zzz:Backend"})
    backend = memacct.get_backend("zzz")
    with pytest.raises(BackendError, match=r"'zzz' failed to read device 0: ZzzDriverError: zzz "
                       r"driver lost the device \(raised in the plugin memacct_zzz.Backend\)"):
        memacct.snapshot(backend)


# -- row 10: MEMACCT_TRUTH_SOURCE --------------------------------------------------------


def test_bad_memacct_truth_source_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMACCT_TRUTH_SOURCE", "peakiest")
    backend = memacct.get_backend("sim")
    with pytest.raises(InvalidInputError, match="MEMACCT_TRUTH_SOURCE='peakiest'"):
        with memacct.memory_profiling(backend, memacct.snapshot(backend)):
            pass
    # The variable chooses what profiling measures; a plan profiles nothing and never reads it.
    assert main(["plan", *MODEL]) == 0
    assert "MEMACCT_TRUTH_SOURCE" not in capsys.readouterr().err


# -- row 11: the message names the budget that does not fit -----------------------------


@pytest.mark.parametrize(
    ("budget", "error", "said", "not_said"),
    [pytest.param("max_num_seqs", memacct.InsufficientMemoryError,
                  ("step buffers for max_num_seqs=100000000",
                   "the weights of Qwen2ForCausalLM only 14.19GiB"),
                  "raise tensor_parallel_size", id="sequences"),
     pytest.param("max_num_batched_tokens", ProfilingOutOfMemoryError,
                  ("max_num_batched_tokens=100000000", "lower max_num_batched_tokens"),
                  "weights 0.00GiB", id="tokens")],
)  # fmt: skip
def test_a_huge_batch_budget_is_named_as_the_cause(
    budget: str, error: type[Exception], said: tuple[str, ...], not_said: str
) -> None:
    config = load_model_preset("qwen2.5-7b")
    with pytest.raises(error) as caught:
        simulate_engine_start(config, device="h100-80gb", **{budget: 100_000_000})
    message = str(caught.value)
    assert all(part in message for part in said), message
    assert not_said not in message


# -- row 12: longer than the model's positions ------------------------------------------


def test_max_model_len_beyond_the_models_positions_is_refused_unless_allowed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", *MODEL, "--max-model-len", "100000"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "position limit (32768 tokens" in line and "--allow-long-max-model-len" in line
    argv = ["plan", *MODEL, "--max-model-len", "100000", "--allow-long-max-model-len", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 100000


def test_max_model_len_beyond_the_positions_with_a_saved_profile_is_refused_unless_allowed(
    tmp_path: Path, profile: memacct.ProfileResult, capsys: pytest.CaptureFixture[str]
) -> None:
    path = save_profile(profile, tmp_path / "p.json")
    argv = ["plan", "--model", "qwen2.5-7b", "--profile", str(path), "--max-model-len", "100000"]
    assert main(argv) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "maximum length 32768 (max_position_embeddings" in line
    assert main([*argv, "--allow-long-max-model-len", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 100000


# -- row 13: simulation options with a saved profile ------------------------------------


@pytest.mark.parametrize(
    ("option", "why"),
    # The sequence budget applies to a profile: checked against the one it recorded.
    [(["--max-num-seqs", "64"], "--max-num-seqs: profiled 256, planned 64")],
)  # fmt: skip
def test_simulation_option_with_a_saved_profile_is_an_error(
    option: list[str],
    why: str,
    tmp_path: Path,
    profile: memacct.ProfileResult,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = save_profile(profile, tmp_path / "p.json")
    assert main(["plan", "--model", "qwen2.5-7b", "--profile", str(path), *option]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert why in line


# -- row 14: the API checks at the call --------------------------------------------------


def test_load_profile_of_none_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="expected a file path, got NoneType"):
        load_profile(None)  # type: ignore[arg-type]


def test_absurd_weights_memory_is_refused_before_the_block_runs() -> None:
    backend = memacct.get_backend("sim")
    ran = False
    with pytest.raises(InvalidInputError, match="weights_memory=1180591620717411303424 bytes"):
        with memacct.memory_profiling(backend, memacct.snapshot(backend), weights_memory=2**70):
            ran = True
    assert not ran


def test_exclude_without_a_label_is_refused_at_the_call() -> None:
    backend = memacct.get_backend("sim")
    entered = False
    with memacct.memory_profiling(backend, memacct.snapshot(backend)) as session:
        with pytest.raises(InvalidInputError, match="exclude\\(\\) takes a label"):
            with session.exclude(None):  # type: ignore[arg-type]
                entered = True
    assert not entered
    assert session.result.excluded_regions == ()


def test_exclude_after_the_session_ended_raises_and_leaves_the_peaks() -> None:
    dev = SimDevice("h100-80gb")
    backend = memacct.get_backend("sim", device=dev)
    with memacct.memory_profiling(backend, memacct.snapshot(backend)) as session:
        dev.free(dev.malloc(2**30))
    peak = backend.memory_stats(0)["allocated_bytes.all.peak"]
    with pytest.raises(ProfilingError, match="session has ended"):
        with session.exclude("late"):
            pass
    assert backend.memory_stats(0)["allocated_bytes.all.peak"] == peak == 2**30


def test_unknown_backend_name_gets_no_invented_install_hint() -> None:
    with pytest.raises(memacct.BackendNotFoundError) as caught:
        memacct.get_backend("cudaa")
    assert "pip install" not in str(caught.value)
    assert "Did you mean 'cuda'?" in str(caught.value)
    assert registry.install_hint("npu") == (
        "pip install ./backends/npu (in a memacct checkout: memacct-npu)")
    assert registry.install_hint("cudaa") is None


# -- row 15: KeyboardInterrupt raised by a plugin ---------------------------------------

INTERRUPTS = "raise KeyboardInterrupt\n"


def test_plugin_raising_keyboard_interrupt_at_import_is_listed_broken(
    make_plugin: PluginMaker,
) -> None:
    make_plugin("ki-dist", "ki_backend", INTERRUPTS, {"ki": "ki_backend:Backend"})
    listed = infos()
    assert not listed["ki"].available
    assert "failed to import" in listed["ki"].reason and "KeyboardInterrupt" in listed["ki"].reason
    assert listed["sim"].available


def test_backends_command_completes_past_a_plugin_raising_keyboard_interrupt(
    make_plugin: PluginMaker,
) -> None:
    root = make_plugin("ki-dist", "ki_backend", INTERRUPTS, {"ki": "ki_backend:Backend"})
    proc = run_cli("backends", env={"PYTHONPATH": str(root)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "KeyboardInterrupt" in proc.stdout and "sim" in proc.stdout
