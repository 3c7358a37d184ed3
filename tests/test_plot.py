"""The memory breakdown behind the plot and the CLI table."""

from __future__ import annotations

import pytest
from _harness import simulate_engine_start

from memacct import KVCacheSpec, load_model_preset, plan_kv_cache
from memacct.plot import KV_BLOCKS, KV_CACHE_PARTS, breakdown


@pytest.mark.parametrize("truth_source", ["allocated_peak", "reserved", "auto"])
def test_breakdown_accounts_for_every_byte_of_the_device(truth_source: str) -> None:
    config = load_model_preset("qwen2.5-7b")
    start = simulate_engine_start(
        config, device="a100-40gb", truth_source=truth_source, other_process_bytes=2**30
    )
    plan = plan_kv_cache(start.result, KVCacheSpec.from_hf_config(config), 0.9)
    parts = dict(breakdown(plan, start.result))
    assert sum(parts.values()) == plan.total_memory
    assert parts["other processes"] == 2**30
    assert parts[KV_BLOCKS] == plan.num_blocks * plan.block_bytes
    assert sum(parts[name] for name in KV_CACHE_PARTS) == plan.kv_cache_bytes
    assert min(parts.values()) >= 0
