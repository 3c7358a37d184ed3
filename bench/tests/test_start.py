"""The simulated engine start keeps the signature the core's ``memacct.engines.start`` had."""

from __future__ import annotations

import inspect

import memacct_bench
import pytest
from memacct_bench.start import simulate_engine_start

from memacct.model.sources.presets import load_model_preset
from memacct.planner.offline import plan_offline
from memacct.units import MiB

# memacct.engines.start.simulate_engine_start as of da41e00, before it moved to the harness.
SIGNATURE: list[tuple[str, object, object]] = [
    ("config", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
    ("device", inspect.Parameter.KEYWORD_ONLY, "h100-80gb"),
    ("allocator", inspect.Parameter.KEYWORD_ONLY, "torch-cuda"),
    ("max_num_batched_tokens", inspect.Parameter.KEYWORD_ONLY, 8192),
    ("max_num_seqs", inspect.Parameter.KEYWORD_ONLY, 256),
    ("tensor_parallel_size", inspect.Parameter.KEYWORD_ONLY, 1),
    ("kv_cache_dtype", inspect.Parameter.KEYWORD_ONLY, "auto"),
    ("truth_source", inspect.Parameter.KEYWORD_ONLY, "auto"),
    ("context_bytes", inspect.Parameter.KEYWORD_ONLY, 512 * MiB),
    ("other_process_bytes", inspect.Parameter.KEYWORD_ONLY, 0),
    ("progress", inspect.Parameter.KEYWORD_ONLY, False),
    ("block_size", inspect.Parameter.KEYWORD_ONLY, 16),
    ("max_model_len", inspect.Parameter.KEYWORD_ONLY, None),
    ("serving_role", inspect.Parameter.KEYWORD_ONLY, "mixed"),
]


def test_the_harness_exports_the_simulated_engine_start() -> None:
    assert memacct_bench.simulate_engine_start is simulate_engine_start


def test_the_simulated_engine_start_keeps_its_signature() -> None:
    params = inspect.signature(simulate_engine_start).parameters.values()
    assert [(p.name, p.kind, p.default) for p in params] == SIGNATURE


@pytest.mark.parametrize(("truth_source", "held"), [
    ("allocated_peak", "allocated_bytes.all.current"),
    ("reserved", "reserved_bytes.all.current"),
])  # fmt: skip
def test_the_simulated_weights_are_the_offline_weights_plus_named_terms(
    truth_source: str, held: str
) -> None:
    # gemma-3-12b on an H100: the offline plan's 22.76 GiB beside 22.85 GiB simulated was
    # the persistent step buffers and the allocator's rounding, counted as weights unnamed.
    plan = plan_offline("gemma-3-12b", device="h100")
    assert plan.max_num_batched_tokens is not None and plan.max_num_seqs is not None
    start = simulate_engine_start(
        load_model_preset("gemma-3-12b"), device="h100-80gb", truth_source=truth_source,
        max_num_batched_tokens=plan.max_num_batched_tokens, max_num_seqs=plan.max_num_seqs,
        max_model_len=plan.max_model_len,
    )  # fmt: skip
    terms = start.weights_terms
    assert terms is not None
    assert terms.parameters == plan.weights_memory
    # block table of 256 rows x 131,072 / 16 blocks x 4 bytes, ids, positions, slots...
    assert terms.step_buffers == sum(start.workload.step_buffer_tensors()) > 32 * MiB
    stats = start.device.allocator.memory_stats()
    assert terms.allocator_rounding == stats[held] - stats["requested_bytes.all.current"] > 0
    assert terms.total == start.result.weights_memory
