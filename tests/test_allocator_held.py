"""The allocator's holdings besides the KV cache count the weights' idle space once (issue 23).

On MindSpore's block pool a 1 GiB weight (plus the pool's 32-byte padding) takes a 2 GiB
block: half of it idle for the process's life. ``auto`` charges that idle space in its
fragmentation allowance, and the reservation after the profile holds it too; the planner's
allocator limit must not count it twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memacct
from memacct.planner.allocator_fit import allocator_held
from memacct.sim import SimDevice, SimOutOfMemory
from memacct.units import GiB, MiB

WEIGHTS = 15
FORWARD = 24


def _forward(dev: SimDevice) -> None:
    acts = [dev.malloc(96 * MiB) for _ in range(FORWARD)]
    for ptr in acts:
        dev.free(ptr)


def _profiled_device() -> tuple[SimDevice, memacct.ProfileResult]:
    dev = SimDevice("h100-80gb", allocator="mindspore-block")
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    for _ in range(WEIGHTS):
        dev.malloc(GiB, persistent=True)
    with memacct.memory_profiling(backend, baseline, truth_source="auto") as session:
        _forward(dev)
    return dev, session.result


def _serves(num_blocks: int, spec: memacct.KVCacheSpec, block_size: int) -> bool:
    """Whether a cache of ``num_blocks`` (one tensor per layer) and then the forward fit."""
    dev, _ = _profiled_device()
    per_layer = num_blocks * spec.bytes_per_block(block_size) // spec.num_layers
    try:
        for _ in range(spec.num_layers):
            dev.malloc(per_layer)
        _forward(dev)
    except SimOutOfMemory:
        return False
    return True


def test_the_weights_idle_space_is_charged_once_against_the_pool_budget() -> None:
    _, result = _profiled_device()
    assert result.allocator_limit is not None
    before, baseline = result.before, result.baseline
    idle = (before.reserved - before.allocated) - (baseline.reserved - baseline.allocated)
    assert result.weights_idle_memory == idle > (WEIGHTS - 1) * GiB  # about half each block
    # Held after the profile (weights' blocks, idle halves included) plus the activations:
    # the idle halves are inside after.reserved, not added again.
    assert allocator_held(result) == result.after.reserved + result.activation_peak + (
        result.fragmentation_allowance - result.weights_idle_memory
    )
    assert allocator_held(result) < result.after.reserved + 3 * GiB


def test_the_plan_fits_with_the_forward_and_is_not_needlessly_small() -> None:
    _, result = _profiled_device()
    spec = memacct.KVCacheSpec.from_preset("qwen2.5-7b")
    plan = memacct.plan_kv_cache(result, spec, gpu_memory_utilization=0.9)
    assert _serves(plan.num_blocks, spec, plan.block_size)
    # The most blocks that fit with the forward, found by bisection on the device itself.
    low, high = plan.num_blocks, 4 * plan.num_blocks
    assert not _serves(high, spec, plan.block_size)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if _serves(mid, spec, plan.block_size) else (low, mid)
    assert plan.num_blocks >= 0.99 * low, (plan.num_blocks, low)


def test_a_profile_saved_before_the_field_loads_and_is_held_as_before(tmp_path: Path) -> None:
    _, result = _profiled_device()
    data = json.loads(result.model_dump_json())
    del data["weights_idle_memory"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = memacct.ProfileResult.load(path)
    assert old.weights_idle_memory == 0
    # Without the record the idle space stays counted in both places (the safe side).
    assert allocator_held(old) == allocator_held(result) + result.weights_idle_memory


def test_the_weights_idle_part_cannot_exceed_the_allowance() -> None:
    _, result = _profiled_device()
    data = json.loads(result.model_dump_json())
    data["weights_idle_memory"] = data["fragmentation_allowance"] + 1
    with pytest.raises(ValueError, match="weights_idle_memory .* cannot exceed"):
        memacct.ProfileResult.model_validate(data)
