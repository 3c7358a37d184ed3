"""Benchmark: how long ``memacct plan --model qwen2.5-7b --device h100`` takes, as a user
runs it (a fresh process each time), and how much of it is importing.

Planning a preset takes well under a millisecond; what a user waits for is the
interpreter starting and memacct's modules importing (pydantic models, the engines,
the command line). The target is 0.15 s for the whole command on an idle machine; the
``pydantic + click`` line is the part of it no laziness in memacct removes.

Run from the repository root::

    .venv/bin/python benchmarks/bench_cli_startup.py [--runs N] [--limit S]

Prints, over ``--runs`` fresh processes, the median wall and CPU seconds of the command,
of ``python -c pass`` (the interpreter alone), of ``import memacct`` (which must stay
near the interpreter alone) and of the libraries the command cannot do without (pydantic
with one model built, which the plan's types are, and click, which parses the command
line: the floor under the command), then the ten modules whose own import time is largest
(``python -X importtime``)::

    memacct plan (preset): wall 0.20 s, cpu 0.20 s (median of 9)
    python -c pass:        wall 0.01 s, cpu 0.01 s
    import memacct:        wall 0.01 s, cpu 0.01 s
    pydantic + click:      wall 0.13 s, cpu 0.13 s
      0.011 s  memacct.engines.base
      ...

The children write and read their bytecode caches (``PYTHONDONTWRITEBYTECODE`` is dropped
from their environment, and one run warms the caches first), as an installed memacct has
them: without them every module is compiled again on each run (0.42 s instead of 0.29 s
here before the command's imports were made lazy).

With ``--limit S`` it exits 1 when the command's median CPU time exceeds ``S`` seconds
(CPU time: a loaded machine stretches the wall time of every process, not its CPU time).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

PLAN = ["-m", "memacct", "plan", "--model", "qwen2.5-7b", "--device", "h100"]

# What the command needs whatever memacct does: pydantic and one model of it, and click.
FLOOR = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nimport click"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("MEMACCT_") and k != "PYTHONDONTWRITEBYTECODE"}  # fmt: skip


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_runs(args: list[str], runs: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``python <args>`` over ``runs`` fresh processes."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu0, start = _children_cpu(), time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, capture_output=True, env=_env())
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def slowest_imports(count: int = 10) -> list[tuple[float, str]]:
    """The modules whose own import time (``-X importtime`` self column) is largest."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *PLAN], check=True,
                          capture_output=True, text=True, env=_env())  # fmt: skip
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|", 2)
        rows.append((int(own) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--limit", type=float, default=None,
                        help="fail when the command's median CPU seconds exceed this")
    args = parser.parse_args()
    time_runs(PLAN, 1)  # the bytecode caches written, as an installed memacct has them
    plan = time_runs(PLAN, args.runs)
    bare = time_runs(["-c", "pass"], args.runs)
    core = time_runs(["-c", "import memacct"], args.runs)
    floor = time_runs(["-c", FLOOR], args.runs)
    print(f"memacct plan (preset): wall {plan[0]:.2f} s, cpu {plan[1]:.2f} s "
          f"(median of {args.runs})")
    print(f"python -c pass:        wall {bare[0]:.2f} s, cpu {bare[1]:.2f} s")
    print(f"import memacct:        wall {core[0]:.2f} s, cpu {core[1]:.2f} s")
    print(f"pydantic + click:      wall {floor[0]:.2f} s, cpu {floor[1]:.2f} s")
    for own, name in slowest_imports():
        print(f"  {own:.3f} s  {name}")
    if args.limit is not None and plan[1] > args.limit:
        print(f"over the limit: {plan[1]:.2f} s of CPU > {args.limit:.2f} s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
