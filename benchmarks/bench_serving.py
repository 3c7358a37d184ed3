"""Benchmark: the truth sources on simulated serving scenarios, against the oracle.

Runs every scenario (the shipped set in ``memacct/sim/scenarios/``, or
``--scenarios DIR``) with the three truth sources side by side —
``allocated_peak`` (what vLLM charges), ``reserved`` (what vllm-mindspore
charges) and ``auto`` — at utilization 1.0, prints the table and the summary
per policy, and with ``--output`` writes them as Markdown. It is
``memacct bench`` as a script; ``make bench`` runs
``memacct bench --output docs/results.md``.

Run from the repository root::

    .venv/bin/python benchmarks/bench_serving.py [--scenarios DIR] [--json] [--output FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memacct.errors import MemacctError
from memacct.sim.bench import run_benchmark_cli


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=None, help="directory of scenario JSON files")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--output", default=None, help="also write the Markdown report here")
    args = parser.parse_args(argv)
    try:
        run_benchmark_cli(args.scenarios, as_json=args.json, output=args.output,
                          progress=not args.json and sys.stderr.isatty())
    except MemacctError as exc:
        print(f"bench_serving: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
