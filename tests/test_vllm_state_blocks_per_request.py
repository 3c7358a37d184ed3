"""A Mamba-style state's blocks per request in vLLM 0.33 (tokens and concurrency).

With prefix caching on, vLLM sets ``mamba_cache_mode`` "align" and a request takes
``2 + num_prefill_checkpoint_blocks`` state blocks per group
(``MambaSpec.max_memory_usage_bytes``, vllm/v1/kv_cache_interface.py). Only some layers ask
for a checkpoint block: MambaMixer2 does, MambaMixer (Mamba-1, Jamba) does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.engines.vllm.kv import layer_pages
from memacct.planner import KVCacheSpec

NEW = Path(__file__).parent / "data" / "golden" / "models" / "new"


def _spec(model: str, tp: int = 1, kv: str = "auto") -> KVCacheSpec:
    return KVCacheSpec.from_hf_config(NEW / f"{model}.json", model_name=model,
                                      kv_cache_dtype=kv, tensor_parallel_size=tp)


def test_jamba_tokens_and_concurrency_are_vllms() -> None:
    """vLLM 0.33 on Jamba, TP 4, fp8 KV, 4,096 tokens, 13.7 GiB: 4,596,940 tokens
    (memacct planned 3,912,290 when it charged Mamba-1 a checkpoint block)."""
    settings = KVSettings(block_size=16, max_model_len=4096, max_num_batched_tokens=8192,
                          async_scheduling=True)
    layout = get_engine("vllm").kv.plan(_spec("jamba-v0.1", tp=4, kv="fp8"),
                                        int(13.7 * 2**30), settings)
    assert layout.num_blocks == 44892
    assert layout.kv_tokens == 4_596_940
    assert layout.max_concurrency == pytest.approx(1122.3)


@pytest.mark.parametrize(("model", "prefix", "blocks"), [
    ("jamba-v0.1", True, 2),      # MambaMixer: no prefill checkpoint block
    ("falcon-h1-0.5b", True, 3),  # MambaMixer2: one prefill checkpoint block
    ("jamba-v0.1", False, 1),     # mamba_cache_mode "none": the running state only
    ("falcon-h1-0.5b", False, 1),
])
def test_state_blocks_follow_the_layers_checkpoint_blocks(model: str, prefix: bool,
                                                          blocks: int) -> None:
    settings = KVSettings(block_size=16, max_model_len=8192, max_num_batched_tokens=8192,
                          enable_prefix_caching=prefix)
    states = [p for p in layer_pages(_spec(model), settings) if p.kind == "mamba"]
    assert states
    assert {p.blocks_per_request(8192, 16384) for p in states} == {blocks}
