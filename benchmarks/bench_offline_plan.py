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

from memacct.engines.offline import plan_offline  # noqa: E402
from memacct.planner import load_model_preset  # noqa: E402

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
