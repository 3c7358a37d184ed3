"""The library logs on its logger and puts what a plan assumed in the plan's notes; it
prints nothing on stderr itself, however many plans a program makes."""

from __future__ import annotations

import subprocess
import sys

# A profile on the simulated device, planned three times with a budget that overrides the
# utilization (a warning each time: the override is logged).
_PLANS = """
import memacct
from memacct.planner import KVCacheSpec, load_model_preset, plan_kv_cache
from memacct.sim import SimDevice
dev = SimDevice("h100-80gb")
backend = memacct.get_backend("sim", device=dev)
baseline = memacct.snapshot(backend)
dev.malloc(15 * 2**30)
with memacct.memory_profiling(backend, baseline, weights_memory=15 * 2**30) as session:
    dev.free(dev.malloc(3 * 2**30))
spec = KVCacheSpec.from_hf_config(load_model_preset("qwen2.5-7b"))
for _ in range(3):
    plan = plan_kv_cache(session.result, spec, kv_cache_memory_bytes=8 * 2**30)
print(plan.num_blocks > 0)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip


def test_a_loop_of_plans_prints_nothing_on_stderr() -> None:
    proc = _run(_PLANS)
    assert (proc.stdout.strip(), proc.stderr) == ("True", "")


def test_the_warnings_are_still_on_the_memacct_logger() -> None:
    code = "import logging; logging.basicConfig(level=logging.WARNING)\n" + _PLANS
    proc = _run(code)
    assert proc.stderr.count("WARNING:memacct:") == 3, proc.stderr
