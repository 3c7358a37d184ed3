"""Benchmark: how long ``memacct plan --model X --device Y`` takes to answer, offline.

Three figures per model: the plan alone in a warm process (``plan_offline``),
and the whole command in a fresh interpreter (imports included), the median of
``--runs`` runs, as wall time and as the CPU time the command used (user + system,
which does not depend on how busy the machine is). The target is under 1 s for the
command.

Run from the repository root::

    .venv/bin/python benchmarks/bench_offline_plan.py [--runs N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memacct.planner import load_model_preset  # noqa: E402
from memacct.planner.offline import plan_capacity, plan_offline  # noqa: E402

CASES = (
    ("qwen2.5-7b", "h100-80gb"),
    ("llama-3.1-70b", "h100-80gb"),
    ("gpt-oss-20b", "l4-24gb"),
    ("deepseek-v3", "h200-141gb"),
)


def main() -> int:
    """Print one line per model and the slowest command time."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    memacct = Path(sys.executable).with_name("memacct")
    slowest = slowest_cpu = 0.0
    for model, device in CASES:
        config = load_model_preset(model)
        start = time.perf_counter()
        plan_offline(config, model_name=model, device=device)
        warm = time.perf_counter() - start
        times, cpu = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(
                [str(memacct), "plan", "--model", model, "--device", device, "--json"],
                check=False, capture_output=True,
            )  # fmt: skip
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        median = statistics.median(times)
        median_cpu = statistics.median(cpu)
        slowest = max(slowest, median)
        slowest_cpu = max(slowest_cpu, median_cpu)
        print(f"{model} on {device}: plan {1000 * warm:.0f} ms in process, "
              f"command {1000 * median:.0f} ms wall / {1000 * median_cpu:.0f} ms CPU "
              f"(median of {args.runs})")  # fmt: skip
    print(f"slowest command: {1000 * slowest:.0f} ms wall, {1000 * slowest_cpu:.0f} ms CPU "
          "(target < 1000 ms)")  # fmt: skip
    capacity(memacct, args.runs)
    return 0


CAPACITY = ("llama-3.1-70b", ("h100-80gb", "a100-80gb", "l4-24gb", "t4-16gb"), (1, 2, 4, 8))
"""The capacity plan timed: one model over 4 devices x 4 tensor-parallel degrees."""


def capacity(memacct: Path, runs: int) -> None:
    """Time the capacity plan in process and as a command (target < 2 s for 4 x 4)."""
    model, devices, degrees = CAPACITY
    start = time.perf_counter()
    plan_capacity(load_model_preset(model), devices, degrees, model_name=model)
    warm = time.perf_counter() - start
    argv = [str(memacct), "plan", "--model", model, "--device", ",".join(devices),
            "--tensor-parallel-size", ",".join(map(str, degrees)), "--json"]  # fmt: skip
    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=False, capture_output=True)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    print(f"capacity plan {model} on {len(devices)} devices x {len(degrees)} degrees: "
          f"{1000 * warm:.0f} ms in process, command {1000 * statistics.median(times):.0f} ms "
          f"wall / {1000 * statistics.median(cpu):.0f} ms CPU (median of {runs}; target < 2000 "
          "ms)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
