"""The simulated engine start keeps the signature the core's ``memacct.engines.start`` had."""

from __future__ import annotations

import inspect

import memacct_bench
from memacct_bench.start import simulate_engine_start

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
