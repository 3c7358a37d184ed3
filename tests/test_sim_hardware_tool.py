"""``make hardware`` (tools/hardware.py): its simulator path, and its no-device exit."""

from __future__ import annotations

from pathlib import Path

import pytest
from _tools import load_tool

import memacct
from memacct.sim import SimDevice

ROOT = Path(__file__).resolve().parent.parent


hw = load_tool("hardware.py", "memacct_hardware_tool")


def test_without_a_device_it_says_so_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(hw, "detect", lambda: (None, "no GPU or NPU found (test)"))
    out = tmp_path / "report.json"
    assert hw.main(["--output", str(out)]) == 0
    assert "no GPU or NPU found" in capsys.readouterr().out
    assert not out.exists()


def test_detect_reports_why_on_this_machine() -> None:
    kind, reason = hw.detect()
    assert kind in (None, "cuda", "npu")
    assert reason


def test_the_workload_trace_frees_everything_it_allocates() -> None:
    weights, step = hw.workload()
    allocs = sum(1 for op in step if op >= 0)
    frees = {~op for op in step if op < 0}
    assert frees == set(range(allocs))
    assert all(w > 0 for w in weights)


def test_the_simulated_side_profiles_and_plans() -> None:
    weights, step = hw.workload()
    sim = hw.simulate("torch-cuda", 24 * 2**30, 300 * 2**20, weights, step)
    # Unsplit remainders (<= 1 MiB per block in the large pool) count as allocated.
    extra = sim.stats_after_weights["allocated_bytes.all.current"] - sum(weights)
    assert 0 <= extra <= len(weights) * 2**20
    assert sim.stats_at_peak["reserved_bytes.all.peak"] >= sim.stats_at_peak[
        "allocated_bytes.all.peak"] > sum(weights)
    assert sim.plan["num_blocks"] > 0
    assert sim.profile["truth_source"] in ("allocated_peak", "reserved")


def test_a_real_run_equal_to_the_simulator_compares_to_zero() -> None:
    # The real side through the same code path, on a simulated "device": the comparison
    # of two identical runs is all zeros, so any difference on hardware is the model's.
    weights, step = hw.workload()
    total, outside = 24 * 2**30, 300 * 2**20
    dev = SimDevice(None, "torch-cuda", total_bytes=total)
    dev.external_malloc(outside)
    real = hw.run_side(memacct.get_backend("sim", device=dev), dev.api, dev.malloc, dev.free,
                       weights, step)
    sim = hw.simulate("torch-cuda", total, outside, weights, step)
    diff = hw.compare(real, sim)
    assert all(v == 0 for v in diff["stats_at_peak"].values())
    assert diff["plan_kv_cache_bytes"] == 0 and diff["plan_relative_error"] == 0


def test_the_report_is_written_through_memacct_io(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    weights, step = hw.workload()

    def fake_real_run(kind: str) -> tuple[object, int, int]:
        return hw.simulate("torch-cuda", 24 * 2**30, 0, weights, step), 24 * 2**30, 0

    monkeypatch.setattr(hw, "detect", lambda: ("cuda", "Simulated GPU"))
    monkeypatch.setattr(hw, "real_run", fake_real_run)
    out = tmp_path / "report.json"
    assert hw.main(["--output", str(out), "--skip-tests"]) == 0
    report = memacct.io.loads_json_object(out.read_text(), "report")
    assert report["device"] == {"kind": "cuda", "name": "Simulated GPU"}
    assert report["difference"]["plan_kv_cache_bytes"] == 0
    assert report["tests"] == {"skipped": True}
