"""Benchmark: malloc+free pairs per second of each simulated allocator preset.

Steady state with mixed sizes (small and large) and many live blocks: the
benchmark first fills the allocator with ``--live`` blocks, then repeatedly
frees a random live block and allocates a new one of a random size, so the
number of live blocks stays constant. Sizes are drawn from a fixed-seed
distribution resembling a transformer forward pass: mostly small tensors,
some activations of a few MiB, a few large ones.

Run from the repository root::

    .venv/bin/python benchmarks/bench_allocator.py [--pairs N] [--live N] [--preset NAME]

Prints one line per preset::

    torch-cuda: 123,456 malloc+free pairs/s (10000 live blocks)
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memacct.sim.allocator import ALLOCATOR_PRESETS, SimpleDeviceMemory, make_allocator
from memacct.units import GiB, MiB


def make_sizes(n: int, seed: int) -> list[int]:
    """``n`` request sizes: 70% small (<= 1 MiB), 25% medium (1-16 MiB), 5% large (16-64 MiB)."""
    rng = random.Random(seed)
    sizes = []
    for _ in range(n):
        r = rng.random()
        if r < 0.70:
            sizes.append(rng.randrange(1, 1 * MiB))
        elif r < 0.95:
            sizes.append(rng.randrange(1 * MiB, 16 * MiB))
        else:
            sizes.append(rng.randrange(16 * MiB, 64 * MiB))
    return sizes


def bench(preset: str, pairs: int, live: int, seed: int) -> float:
    """Malloc+free pairs per second of ``preset`` in steady state with ``live`` blocks."""
    # Big enough that the steady state never runs out of memory.
    alloc = make_allocator(preset, SimpleDeviceMemory(4096 * GiB))
    rng = random.Random(seed)
    sizes = make_sizes(live + pairs, seed)
    ptrs = [alloc.malloc(sizes[i]) for i in range(live)]
    victims = [rng.randrange(live) for _ in range(pairs)]
    malloc = alloc.malloc
    free = alloc.free
    start = time.perf_counter()
    for i in range(pairs):
        j = victims[i]
        free(ptrs[j])
        ptrs[j] = malloc(sizes[live + i])
    elapsed = time.perf_counter() - start
    for p in ptrs:
        free(p)
    alloc.empty_cache()
    assert alloc.reserved == 0, alloc.memory_stats()
    return pairs / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200_000, help="malloc+free pairs timed")
    parser.add_argument("--live", type=int, default=10_000, help="live blocks in steady state")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timed runs per preset; the best is printed (less noise)",
    )
    parser.add_argument(
        "--preset",
        action="append",
        choices=sorted(ALLOCATOR_PRESETS),
        help="preset to run (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    for preset in args.preset or list(ALLOCATOR_PRESETS):
        rate = max(bench(preset, args.pairs, args.live, args.seed) for _ in range(args.repeat))
        print(f"{preset}: {rate:,.0f} malloc+free pairs/s ({args.live} live blocks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
