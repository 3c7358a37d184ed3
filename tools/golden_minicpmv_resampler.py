#!/usr/bin/env python3
"""Golden MiniCPM-V resampler working set: vLLM 0.33's ``Resampler2_5`` run on the CPU, its peak
read from the profiler's memory events.

Run by hand in the throwaway vLLM environment (never in ``make test``)::

    /tmp/vllmenv/bin/python tools/golden_minicpmv_resampler.py --vllm-src /tmp/vllm033/src

For each (text width, tower width, queries) of :data:`SHAPES` (MiniCPM-V 2.6, Llama3-V 2.5 and
4.0's) it builds vLLM 0.33's own ``Resampler2_5`` (``minicpmv.py``) in bfloat16, as
``init_resampler`` leaves it, feeds it a batch of :data:`SLICES` slices of :data:`PATCHES`
tower outputs (allocated before the measurement), and records the peak of the live bytes
that ``torch.profiler`` (``profile_memory``) reports during ``forward``, and the op at that
peak. ``tests/test_minicpmv_mm.py`` checks :mod:`memacct.engines.vllm.mm.minicpm`'s
resampler term against the table this writes
(``tests/data/golden/vllm-0.33-minicpmv-resampler.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-minicpmv-resampler.json"
SHAPES = ((3584, 1152, 64), (4096, 1152, 96), (2560, 1152, 64))
SLICES, SIDE = 4, 32
PATCHES = SIDE * SIDE


def measure(dim: int, width: int, queries: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from vllm.model_executor.models.minicpmv import Resampler2_5

    torch.set_default_dtype(torch.bfloat16)
    resampler = Resampler2_5(num_queries=queries, embed_dim=dim, num_heads=dim // 128,
                             kv_dim=width).eval().to(torch.bfloat16)
    x = torch.randn(SLICES, PATCHES, width)
    sizes = torch.tensor([[SIDE, SIDE]] * SLICES)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = resampler(x, sizes)
        del out
    events = prof.profiler.kineto_results.events()
    memory = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = peak = at = 0
    for e in memory:
        live += e.nbytes()
        if live > peak:
            peak, at = live, e.start_ns()
    ops = sorted((o for o in events if o.name() != "[memory]"
                  and o.start_ns() <= at <= o.start_ns() + o.duration_ns()),
                 key=lambda o: o.duration_ns())
    return {"dim": dim, "width": width, "queries": queries, "slices": SLICES,
            "patches": PATCHES, "peak_bytes": peak, "at": ops[0].name() if ops else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm
    from golden_vllm_standins import patch_parallel_groups

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    patch_parallel_groups(1)
    import torch

    # Resampler2_5.forward asks whether a CUDA graph is being captured; no device here.
    torch.cuda.is_current_stream_capturing = lambda: False
    rows = [measure(*shape) for shape in SHAPES]
    OUT.write_text(json.dumps({"vllm": version, "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
