"""Benchmark: how long planning one model's KV cache takes, per engine (target: < 5 ms).

Builds each preset's spec once (reading config.json is not timed), then times
``memacct.plan_kv_cache(None, spec, engine=..., kv_cache_memory_bytes=20 GiB,
max_model_len=8192)`` — the engine's grouping, pool, refusal check and report —
``--repeat`` times and prints the median and the worst model.

Run from the repository root::

    .venv/bin/python benchmarks/bench_plan.py [--repeat N] [--engine vllm]

Prints one line per engine, e.g.::

    vllm: median 0.41 ms per plan, slowest model qwen3-next-80b-a3b 0.90 ms (18 presets)

and exits 1 when the slowest model takes 5 ms or more.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memacct.errors import InvalidInputError
from memacct.planner import KVCacheSpec, model_presets, plan_kv_cache
from memacct.units import GiB

TARGET_MS = 5.0


def time_model(spec: KVCacheSpec, engine: str, repeat: int) -> float:
    """Median milliseconds of one plan."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan_kv_cache(None, spec, engine=engine, kv_cache_memory_bytes=20 * GiB,
                      max_model_len=8192)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--engine", action="append", default=None)
    args = parser.parse_args()
    logging.getLogger("memacct").setLevel(logging.WARNING)
    worst_overall = 0.0
    for engine in args.engine or ["vllm", "sglang"]:
        times: dict[str, float] = {}
        refused: list[str] = []
        for name in model_presets():
            try:
                spec = KVCacheSpec.from_preset(
                    name, tensor_parallel_size=2, pipeline_parallel_size=2
                )
                times[name] = time_model(spec, engine, args.repeat)
            except InvalidInputError:
                # Refused at TP2 PP2 (a model class without pipeline parallelism in vLLM) or
                # not modelled for this engine (SGLang's Mamba pool): not a plan to time.
                refused.append(name)
        slowest = max(times, key=times.__getitem__)
        worst_overall = max(worst_overall, times[slowest])
        print(f"{engine}: median {statistics.median(times.values()):.2f} ms per plan, slowest "
              f"model {slowest} {times[slowest]:.2f} ms ({len(times)} presets, TP2 PP2; refused: "
              f"{', '.join(refused) or 'none'})")
    return 0 if worst_overall < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
