"""Bad input from a user, an engine or a backend: a MemacctError naming the value, never a plan.

Each case here is one row of docs/reliability.md. Cases that other test files
already prove (config.json values in test_planner_spec.py, plan arguments in
test_planner_plan.py) are pointed at from that table rather than repeated.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from _fakes import OneDeviceModule
from _sim import simulated_start

import memacct
from memacct import (
    BackendError,
    ConfigError,
    InvalidInputError,
    MemorySnapshot,
    ProfileResult,
    TorchLikeBackend,
)
from memacct.models import MAX_BYTES, load_model_json
from memacct.planner import KVCacheSpec, load_profile, plan_kv_cache, save_profile
from memacct.units import GiB, MiB


def sim_profile() -> ProfileResult:
    return simulated_start(8 * GiB, GiB, weights_memory=8 * GiB)[1]


def edited(result: ProfileResult, path: tuple[str, ...], value: Any) -> str:
    data = result.model_dump(mode="json")
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(data)


# --- snapshots -------------------------------------------------------------------------------


def test_device_index_out_of_range_through_get_backend_sim_is_invalid_input() -> None:
    backend = memacct.get_backend("sim")
    with pytest.raises(InvalidInputError, match=r"device 3 is out of range for backend 'sim'"):
        memacct.snapshot(backend, device=3)


@pytest.mark.parametrize("device", [-1, True, "0", 0.0, None])
def test_device_that_is_not_an_index_is_invalid_input_naming_it(device: Any) -> None:
    backend = memacct.get_backend("sim")
    with pytest.raises(InvalidInputError, match=f"got {device!r}"):
        memacct.snapshot(backend, device=device)


def test_sim_backend_given_an_index_for_its_device_option_says_what_it_takes() -> None:
    with pytest.raises(InvalidInputError, match="device must be a memacct.sim.SimDevice, got 1"):
        memacct.get_backend("sim", device=1)


def test_subtracting_snapshots_of_different_backends_is_refused() -> None:
    sim = memacct.snapshot(memacct.get_backend("sim"))
    other = sim.model_copy(update={"backend": "cuda"})
    with pytest.raises(InvalidInputError, match="cuda:0.*sim:0"):
        sim - other


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_snapshot_json_with_nan_or_infinite_timestamp_is_a_config_error(bad: float) -> None:
    data = memacct.snapshot(memacct.get_backend("sim")).model_dump(mode="json")
    data["timestamp"] = bad
    with pytest.raises(ConfigError, match=f"timestamp must be finite, got {bad}"):
        load_model_json(MemorySnapshot, json.dumps(data), "snap.json")


# --- a backend or driver that reports nonsense -------------------------------------------------


class FakeModule(OneDeviceModule):
    """A torch.cuda-shaped module whose readings a test sets."""

    def __init__(self, free: Any = 10 * GiB, total: Any = 80 * GiB) -> None:
        self.free, self.total = free, total
        self.stats: dict[str, Any] = {
            "allocated_bytes.all.current": 0,
            "allocated_bytes.all.peak": 0,
            "reserved_bytes.all.current": 0,
            "reserved_bytes.all.peak": 0,
        }
        self.error: BaseException | None = None

    def mem_get_info(self, device: int) -> tuple[Any, Any]:
        if self.error is not None:
            raise self.error
        return self.free, self.total

    def memory_stats(self, device: int) -> Mapping[str, Any]:
        return self.stats


class RawBackend(TorchLikeBackend):
    """Passes readings through unconverted, as a third-party backend might."""

    name = "raw"

    def mem_get_info(self, device: int) -> tuple[int, int]:
        return self.module.mem_get_info(device)  # type: ignore[no-any-return]

    def memory_stats(self, device: int) -> Mapping[str, int]:
        return self.module.memory_stats(device)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("free", "total", "message"),
    [
        (90 * GiB, 80 * GiB, "free=96636764160 and total=85899345920"),
        (-1, 80 * GiB, r"free memory \(mem_get_info\) = -1"),
        (0, 0, "free=0 and total=0"),
        (math.nan, 80 * GiB, r"free memory \(mem_get_info\) = nan"),
        (10 * GiB, math.inf, r"total memory \(mem_get_info\) = inf"),
        ("10", 80 * GiB, r"free memory \(mem_get_info\) = '10'"),
        (0, 2 * MAX_BYTES, "total=2305843009213693952"),
    ],
)
def test_impossible_device_readings_are_a_backend_error_naming_them(
    free: Any, total: Any, message: str
) -> None:
    backend = RawBackend(FakeModule(free=free, total=total))
    with pytest.raises(BackendError, match=message):
        memacct.snapshot(backend)


def test_allocator_stats_with_allocated_above_reserved_are_a_backend_error() -> None:
    module = FakeModule()
    module.stats["allocated_bytes.all.current"] = 2 * GiB
    module.stats["reserved_bytes.all.current"] = GiB
    with pytest.raises(BackendError, match="2147483648 bytes allocated but only 1073741824"):
        memacct.snapshot(RawBackend(module))


def test_non_numeric_allocator_stat_is_a_backend_error_naming_the_key() -> None:
    module = FakeModule()
    module.stats["reserved_bytes.all.current"] = "lots"
    with pytest.raises(BackendError, match="reserved_bytes.all.current = 'lots'"):
        memacct.snapshot(RawBackend(module))


def test_driver_exception_while_reading_is_a_backend_error_with_its_text() -> None:
    module = FakeModule()
    module.error = RuntimeError("CUDA error: unspecified launch failure")
    with pytest.raises(BackendError, match="'raw' failed to read device 0: RuntimeError: CUDA"):
        memacct.snapshot(RawBackend(module))


# --- profiling arguments ---------------------------------------------------------------------


@pytest.mark.parametrize("weights", [-1, 1.5, math.nan, math.inf, True, "1GiB"])
def test_weights_memory_that_is_not_bytes_is_invalid_input_naming_it(weights: Any) -> None:
    backend = memacct.get_backend("sim")
    baseline = memacct.snapshot(backend)
    with pytest.raises(InvalidInputError, match=f"got {weights!r}"):
        with memacct.memory_profiling(backend, baseline, weights_memory=weights):
            pass


def test_unknown_truth_source_argument_is_invalid_input_naming_it() -> None:
    backend = memacct.get_backend("sim")
    baseline = memacct.snapshot(backend)
    with pytest.raises(InvalidInputError, match="'peakiest'.*allocated_peak"):
        with memacct.memory_profiling(backend, baseline, truth_source="peakiest"):
            pass


def test_unknown_truth_source_in_environment_is_invalid_input_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMACCT_TRUTH_SOURCE", "nan")
    backend = memacct.get_backend("sim")
    baseline = memacct.snapshot(backend)
    with pytest.raises(InvalidInputError, match="'nan'"):
        with memacct.memory_profiling(backend, baseline):
            pass


def test_profiling_a_device_other_than_the_baselines_is_refused() -> None:
    backend = memacct.get_backend("sim")
    baseline = memacct.snapshot(backend)
    with pytest.raises(InvalidInputError, match="taken on sim:0 but profiling runs on sim:1"):
        with memacct.memory_profiling(backend, baseline, device=1):
            pass


# --- profile JSON ----------------------------------------------------------------------------


def test_profile_whose_used_is_not_reserved_plus_non_allocator_is_a_config_error(
    tmp_path: Path,
) -> None:
    result = sim_profile()
    path = tmp_path / "profile.json"
    path.write_text(edited(result, ("after", "non_allocator"), result.after.non_allocator + 1))
    with pytest.raises(ConfigError, match="after: Value error, non_allocator"):
        load_profile(path)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [pytest.param(("activation_peak",), -5, r"activation_peak: .* than or equal to 0 \(got -5\)",
                  id="a-negative-size-naming-field-and-value"),
     pytest.param(("weights_memory",), 10**400,
                  "weights_memory: Input should be less than or equal to",
                  id="an-absurd-size-refused-before-any-arithmetic"),
     pytest.param(("before", "device"), 1, "one backend and device",
                  id="snapshots-from-different-devices"),
     pytest.param(("kv_cache_fudge",), 1, "kv_cache_fudge: Extra inputs are not permitted",
                  id="an-unknown-field-named"),
     pytest.param(("format_version",), 2, "format_version 2 is not supported.*profile again",
                  id="a-later-format-saying-to-profile-again")],
)  # fmt: skip
def test_an_edited_profile_is_a_config_error_saying_what_is_wrong(
    tmp_path: Path, field: tuple[str, ...], value: Any, match: str
) -> None:
    path = tmp_path / "profile.json"
    path.write_text(edited(sim_profile(), field, value))
    with pytest.raises(ConfigError, match=match):
        load_profile(path)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_profile_with_nan_or_infinite_float_is_a_config_error(tmp_path: Path, bad: str) -> None:
    text = sim_profile().model_dump_json()
    path = tmp_path / "profile.json"
    path.write_text(text.replace('"fragmentation":', f'"fragmentation":{bad},"x":', 1))
    with pytest.raises(ConfigError, match="fragmentation"):
        load_profile(path)


def test_profile_that_is_not_json_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_bytes(b"\x80\x04\x95pickle-ish")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_profile(path)


def test_saved_profile_of_a_real_session_loads_back_equal(tmp_path: Path) -> None:
    result = sim_profile()
    assert load_profile(save_profile(result, tmp_path / "p.json")) == result


# --- huge files ------------------------------------------------------------------------------


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as fh:
        fh.truncate(size)
    return path


@pytest.mark.parametrize("loader", ["profile", "config", "plan"])
def test_huge_file_is_refused_by_size_without_reading_it_all(tmp_path: Path, loader: str) -> None:
    path = sparse(tmp_path / "big.json", 4 * GiB)  # sparse: takes no disk
    loaders: dict[str, Callable[[Path], object]] = {
        "profile": load_profile,
        "config": KVCacheSpec.from_hf_config,
        "plan": memacct.KVCachePlan.load,
    }
    load = loaders[loader]
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"larger than 16\.00 MiB \(16777216 bytes\)"):
            load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * MiB  # read at most the limit, never the 4 GiB


# --- planning arguments not covered in test_planner_plan.py -----------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["block_size", "max_model_len", "max_num_batched_tokens"])
def test_nan_and_infinity_as_a_length_are_invalid_input(name: str, value: float) -> None:
    spec = KVCacheSpec.from_preset("llama-3.1-8b")
    kwargs: dict[str, Any] = {"max_model_len": 4096, name: value}
    message = rf"{name} must be an integer, got {value} \(float\)"
    with pytest.raises(InvalidInputError, match=message):
        plan_kv_cache(sim_profile(), spec, **kwargs)


def test_plan_file_with_absurd_numbers_that_add_up_is_a_config_error(tmp_path: Path) -> None:
    plan = plan_kv_cache(sim_profile(), KVCacheSpec.from_preset("llama-3.1-8b"), max_model_len=4096)
    data = plan.model_dump(mode="json")
    huge = 10**400
    data.update(total_memory=4 * huge, target_allocation=2 * huge)
    data["budget"].update(total_memory=4 * huge, target_allocation=2 * huge)  # their owner
    data["kv_cache_bytes"] = 2 * huge - data["non_kv_cache_memory"]
    reserve = data.get("allocator_reserve_bytes", 0)
    data["num_blocks"] = (data["kv_cache_bytes"] - reserve) // data["block_bytes"]
    data["num_tokens"] = data["num_blocks"] * data["block_size"]
    data["kv_cache_used_bytes"] = data["num_blocks"] * data["block_bytes"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="numbers are too large to be real"):
        memacct.KVCachePlan.load(path)


@pytest.mark.parametrize("case", ["huge config", "absurd profile", "profile from a later version"])
def test_cli_turns_a_bad_file_into_one_line_and_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memacct.cli import main

    config = sparse(tmp_path / "config.json", 64 * MiB)
    profile = tmp_path / "profile.json"
    argv = ["plan", "--model", "qwen2.5-7b", "--profile", str(profile)]
    if case == "huge config":
        argv = ["plan", "--model", str(config)]
    elif case == "absurd profile":
        profile.write_text(edited(sim_profile(), ("after", "total"), 10**400))
    else:
        profile.write_text(edited(sim_profile(), ("format_version",), 9))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("memacct: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("call", ["snapshot", "memory_profiling"])
def test_backend_name_where_a_backend_belongs_says_how_to_get_one(call: str) -> None:
    baseline = memacct.snapshot(memacct.get_backend("sim"))
    with pytest.raises(InvalidInputError, match=r"got the name 'sim': pass memacct.get_backend"):
        if call == "snapshot":
            memacct.snapshot("sim")  # type: ignore[arg-type]
        else:
            with memacct.memory_profiling("sim", baseline):  # type: ignore[arg-type]
                pass


def test_object_that_is_not_a_backend_is_a_backend_error_naming_what_it_lacks() -> None:
    with pytest.raises(BackendError, match="object, which is not a memacct backend: missing"):
        memacct.snapshot(object())  # type: ignore[arg-type]


def test_baseline_that_is_not_a_snapshot_is_invalid_input() -> None:
    backend = memacct.get_backend("sim")
    with pytest.raises(InvalidInputError, match="baseline must be the MemorySnapshot.*got dict"):
        with memacct.memory_profiling(backend, {"free": 1}):  # type: ignore[arg-type]
            pass


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("after", "allocated_peak"), 0, "a peak is below its current value"),
        (("baseline", "total"), 100 * GiB, "disagree on the device's total memory"),
    ],
)
def test_profile_with_impossible_snapshot_numbers_is_a_config_error(
    tmp_path: Path, path: tuple[str, ...], value: int, message: str
) -> None:
    data = json.loads(edited(sim_profile(), path, value))
    snap = data[path[0]]
    snap["used"] = snap["total"] - snap["free"]
    snap["non_allocator"] = snap["used"] - snap["reserved"] - (snap["other_processes"] or 0)
    file = tmp_path / "profile.json"
    file.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message):
        load_profile(file)


def test_snapshot_whose_free_exceeds_total_is_a_config_error() -> None:
    data = memacct.snapshot(memacct.get_backend("sim")).model_dump(mode="json")
    data.update(free=data["total"] + 1, used=0, allocated=0, allocated_peak=0, reserved=0,
                reserved_peak=0, non_allocator=0, other_processes=0)
    with pytest.raises(ConfigError, match=r"free \(\d+\) exceeds total"):
        load_model_json(MemorySnapshot, json.dumps(data), "snap.json")


def test_whole_float_readings_from_a_backend_are_taken_as_bytes() -> None:
    snap = memacct.snapshot(RawBackend(FakeModule(free=float(10 * GiB), total=float(80 * GiB))))
    assert (snap.free, snap.total) == (10 * GiB, 80 * GiB)
