"""``make hardware``: hold the simulator against a real GPU or NPU, in one command.

On a machine with a CUDA GPU (torch) or an Ascend NPU (torch_npu) it:

1. runs every hardware-marked test (``-m "cuda or nvml or npu or mindspore"``);
2. profiles a small workload for real through memacct (weights, then a forward pass of
   a tiny transformer-shaped trace of plain tensors) and plans a small model's KV cache;
3. replays the same allocation trace on the simulated device with the matching preset
   (``torch-cuda`` / ``npu``), the same capacity and the same memory outside the
   allocator, profiles and plans there;
4. compares the readings (allocated, reserved, their peaks, segments, the plan) and
   writes a JSON report (``--output``, default ``out/hardware-report.json``).

Without a GPU or NPU it says so and exits 0. The run is bounded (``--test-timeout``)
so that the whole command finishes in under 8 minutes. See docs/hardware.md.

Usage::

    .venv/bin/python tools/hardware.py [--output PATH] [--skip-tests] [--test-timeout S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKERS = "cuda or nvml or npu or mindspore"
STAT_KEYS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "segment.all.current",
    "num_alloc_retries",
)
# A small model to plan for: a Qwen2.5-0.5B-shaped config (public config.json values).
SMALL_MODEL: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "max_position_embeddings": 32768,
    "vocab_size": 151936,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}
MiB = 1024 * 1024


def workload(tokens: int = 2048, layers: int = 4, hidden: int = 896, inter: int = 4864) -> tuple[
    list[int], list[int]
]:
    """``(weights, step)``: weight tensor sizes and one forward step as a trace.

    The step trace is in the simulator's format: ``n >= 0`` allocates ``n`` bytes into
    the next slot, ``n < 0`` frees slot ``~n``. Sizes are bf16 tensors of a small
    transformer: per layer a norm, q/k/v, attention output, MLP gate/up/act/down.
    """
    dt = 2
    weights = [hidden * hidden * dt] * 4 * layers + [hidden * inter * dt] * 3 * layers
    ops: list[int] = []
    slot = 0

    def alloc(n: int) -> int:
        nonlocal slot
        ops.append(n)
        slot += 1
        return slot - 1

    def free(*slots: int) -> None:
        ops.extend(~s for s in slots)

    act = tokens * hidden * dt
    h = alloc(act)
    for _ in range(layers):
        norm = alloc(act)
        q, k, v = alloc(act), alloc(act // 7), alloc(act // 7)
        free(norm)
        attn = alloc(act)
        free(q, k, v)
        out = alloc(act)
        free(attn)
        h2 = alloc(act)
        free(h, out)
        gate, up = alloc(tokens * inter * dt), alloc(tokens * inter * dt)
        a = alloc(tokens * inter * dt)
        free(gate)
        m = alloc(tokens * inter * dt)
        free(a, up)
        down = alloc(act)
        free(m)
        h = alloc(act)
        free(h2, down)
    free(h)
    return weights, ops


@dataclass
class Readings:
    """What one side measured."""

    stats_after_weights: dict[str, int] = field(default_factory=dict)
    stats_at_peak: dict[str, int] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)


def _pick(stats: dict[str, Any]) -> dict[str, int]:
    return {k: int(stats.get(k, 0)) for k in STAT_KEYS}


def run_side(
    backend: Any,
    api: Any,
    alloc: Callable[[int], Any],
    free: Callable[[Any], None],
    weights: Sequence[int],
    step: Sequence[int],
) -> Readings:
    """Load ``weights``, profile ``step`` with memacct, plan the small model; read everything."""
    import memacct

    out = Readings()
    api.empty_cache()
    baseline = memacct.snapshot(backend)
    held = [alloc(n) for n in weights]
    out.stats_after_weights = _pick(api.memory_stats())
    with memacct.memory_profiling(
        backend, baseline, weights_memory=sum(weights), truth_source="auto"
    ) as session:
        slots: list[Any] = []
        for op in step:
            if op >= 0:
                slots.append(alloc(op))
            else:
                free(slots[~op])
                slots[~op] = None
        out.stats_at_peak = _pick(api.memory_stats())
    result = session.result
    spec = memacct.KVCacheSpec.from_hf_config(SMALL_MODEL)
    plan = memacct.plan_kv_cache(result, spec, gpu_memory_utilization=0.9)
    out.plan = {"kv_cache_bytes": plan.kv_cache_bytes, "num_blocks": plan.num_blocks}
    out.profile = {
        "truth_source": str(result.truth_source.value),
        "non_kv_cache_memory": result.non_kv_cache_memory,
        "allocated_peak_increase": result.allocated_peak_increase,
        "reserved_peak_increase": result.reserved_peak_increase,
        "fragmentation": result.fragmentation,
    }
    for h in held:
        free(h)
    return out


def simulate(
    preset: str, total: int, outside: int, weights: Sequence[int], step: Sequence[int]
) -> Readings:
    """The same run on a simulated device: ``total`` bytes, ``outside`` outside the allocator."""
    import memacct
    from memacct.sim import SimDevice

    dev = SimDevice(None, preset, total_bytes=total, name=f"sim-of-{preset}")
    if outside > 0:
        dev.external_malloc(outside)
    backend = memacct.get_backend("sim", device=dev)
    return run_side(backend, dev.api, dev.malloc, dev.free, weights, step)


def compare(real: Readings, sim: Readings) -> dict[str, Any]:
    """Field-by-field differences (simulated minus real) and relative plan error."""
    diff: dict[str, Any] = {}
    for part in ("stats_after_weights", "stats_at_peak"):
        r, s = getattr(real, part), getattr(sim, part)
        diff[part] = {k: s.get(k, 0) - r.get(k, 0) for k in r}
    rk, sk = real.plan.get("kv_cache_bytes", 0), sim.plan.get("kv_cache_bytes", 0)
    diff["plan_kv_cache_bytes"] = sk - rk
    diff["plan_relative_error"] = (sk - rk) / rk if rk else None
    return diff


def detect() -> tuple[str | None, str]:
    """``(kind, reason)``: ``"cuda"``/``"npu"`` with the device name, or ``None`` and why not."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed: no GPU or NPU can be used"
    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name(0)
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():
            return "npu", str(torch.npu.get_device_name(0))
    except ImportError:
        pass
    return None, f"no GPU or NPU found (torch {torch.__version__}: cuda unavailable, no torch_npu)"


def run_tests(timeout: int) -> dict[str, Any]:
    """Run every hardware-marked test; return the exit code and the summary line."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-m", MARKERS,
           "backends", "tests"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "summary": f"timed out after {timeout} s", "command": cmd}
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return {"returncode": proc.returncode, "summary": lines[-1] if lines else "", "command": cmd}


def real_run(kind: str) -> tuple[Readings, int, int]:
    """Run the workload on the real device; return readings, total and non-allocator bytes."""
    import torch

    import memacct

    mod = torch.cuda if kind == "cuda" else torch.npu  # type: ignore[attr-defined]
    device = torch.device(kind, 0)
    mod.empty_cache()
    free_b, total = mod.mem_get_info()
    outside = (total - free_b) - mod.memory_reserved()
    backend = memacct.get_backend(kind)
    weights, step = workload()

    def alloc(n: int) -> Any:
        return torch.empty(n, dtype=torch.uint8, device=device)

    def free(t: Any) -> None:
        del t

    readings = run_side(backend, mod, alloc, free, weights, step)
    return readings, int(total), int(max(0, outside))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--output", default="out/hardware-report.json")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the marked tests")
    parser.add_argument("--test-timeout", type=int, default=300)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from memacct.io import atomic_write_text

    kind, reason = detect()
    if kind is None:
        print(f"memacct hardware: {reason}; nothing to measure (exit 0).")
        return 0
    start = time.monotonic()
    report: dict[str, Any] = {"device": {"kind": kind, "name": reason}}
    report["tests"] = {"skipped": True} if args.skip_tests else run_tests(args.test_timeout)
    real, total, outside = real_run(kind)
    weights, step = workload()
    preset = "torch-cuda" if kind == "cuda" else "npu"
    sim = simulate(preset, total, outside, weights, step)
    report["total_bytes"] = total
    report["non_allocator_bytes_at_start"] = outside
    report["real"] = real.__dict__
    report["simulated"] = {"preset": preset, **sim.__dict__}
    report["difference"] = compare(real, sim)
    report["duration_s"] = round(time.monotonic() - start, 1)
    atomic_write_text(args.output, json.dumps(report, indent=2, sort_keys=True) + "\n",
                      "hardware report")
    print(f"memacct hardware: {kind} {reason}; report written to {args.output}")
    print(json.dumps(report["difference"], indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
