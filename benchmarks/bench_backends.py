"""Benchmark: how long ``memacct backends`` takes, as a user runs it (a fresh process).

No plugin imports its framework to answer ``availability()`` (it reads package
metadata, the import system and device files); the registry probes them all at
once, each in a daemon thread under ``registry.TIME_LIMIT_S``. This measures
the whole command, and then each plugin's share alone.

Run from the repository root::

    .venv/bin/python benchmarks/bench_backends.py [--runs N]

Prints the median wall time of ``memacct backends --json`` over ``--runs``
fresh processes, then one line per plugin with the seconds its import and
``availability()`` take in a fresh process of its own::

    memacct backends: median 0.34 s over 5 runs (min 0.31, max 0.41)
      cuda        0.01 s  unavailable: torch 2.13.0+cpu is a CPU-only build ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBE = """
import json, time
from memacct import registry
entry = registry._entries()[{name!r}]
start = time.perf_counter()
avail = registry._probe_all([entry])[{name!r}]
print(json.dumps([time.perf_counter() - start, avail.available, avail.reason]))
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}


def time_command(runs: int) -> list[float]:
    """Wall seconds of ``python -m memacct backends --json`` in ``runs`` fresh processes."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "memacct", "backends", "--json"],
            check=True, capture_output=True, env=_env(),
        )  # fmt: skip
        times.append(time.perf_counter() - start)
    return times


def time_plugin(name: str) -> tuple[float, bool, str]:
    """Seconds one plugin takes to import and answer ``availability()``, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(name=name)],
        check=True, capture_output=True, text=True, env=_env(),
    )  # fmt: skip
    seconds, available, reason = json.loads(out.stdout.strip().splitlines()[-1])
    return float(seconds), bool(available), str(reason)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes to time")
    args = parser.parse_args()
    from memacct.registry import backend_names

    time_command(1)  # warm the page cache: the first run reads every framework from disk
    times = time_command(args.runs)
    print(
        f"memacct backends: median {statistics.median(times):.2f} s over {args.runs} runs "
        f"(min {min(times):.2f}, max {max(times):.2f})"
    )
    for name in backend_names():
        seconds, available, reason = time_plugin(name)
        state = "available" if available else "unavailable"
        print(f"  {name:<10} {seconds:5.2f} s  {state}: {reason[:70]}")


if __name__ == "__main__":
    main()
