"""memacct's KV-cache managers against tables computed by the engines' own code.

``tests/data/golden/vllm-0.33.json`` (the main grid) and
``vllm-0.33-aside.json`` (a grid kept aside: other budgets, block sizes,
lengths, async scheduling off, models outside the presets) were written by
``tools/golden_vllm.py``, which runs vLLM 0.33's own planning functions. Every
row must agree: blocks and tokens exactly, concurrency within 1e-3, refusals
equal, the estimated max length within one block.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.planner import KVCacheSpec, model_presets

GOLDEN = Path(__file__).parent / "data" / "golden"


@cache
def table(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text())
    return data


@cache
def spec(model: str, kv: str, tp: int, pp: int) -> KVCacheSpec:
    kwargs: dict[str, Any] = {
        "kv_cache_dtype": kv, "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
    if model in model_presets():
        return KVCacheSpec.from_preset(model, **kwargs)
    return KVCacheSpec.from_hf_config(GOLDEN / "models" / f"{model}.json", model_name=model,
                                      **kwargs)


def mismatch(row: dict[str, Any]) -> str | None:
    """Why memacct disagrees with the row, or None."""
    args = (row["model"], row["kv_cache_dtype"], row["tensor_parallel_size"],
            row["pipeline_parallel_size"])
    settings = KVSettings(
        block_size=row["block_size"], max_model_len=row["max_model_len"],
        max_num_batched_tokens=row["max_num_batched_tokens"],
        async_scheduling=row["async_scheduling"],
    )
    manager = get_engine("vllm").kv
    if "error" in row:
        try:
            manager.plan(spec(*args), row["budget_bytes"], settings)
        except InvalidInputError:
            return None
        return "vLLM fails on this row, memacct planned it"
    try:
        layout = manager.plan(spec(*args), row["budget_bytes"], settings)
    except InsufficientMemoryError as exc:
        if not row["refused"]:
            return f"memacct refused, vLLM planned {row['num_gpu_blocks']} blocks: {exc}"
        estimate = exc.estimated_max_model_len or 0
        if abs(estimate - row["estimated_max_model_len"]) > row["block_size"]:
            return f"estimate {estimate} != vLLM's {row['estimated_max_model_len']}"
        return None
    if row["refused"]:
        return f"memacct planned {layout.num_blocks} blocks, vLLM refused"
    if (layout.num_blocks, layout.kv_tokens) != (row["num_gpu_blocks"], row["kv_tokens"]):
        return (f"blocks/tokens {layout.num_blocks}/{layout.kv_tokens} != vLLM's "
                f"{row['num_gpu_blocks']}/{row['kv_tokens']}")
    if abs(layout.max_concurrency - row["max_concurrency"]) > 1e-3:
        return f"concurrency {layout.max_concurrency} != vLLM's {row['max_concurrency']}"
    return None


@pytest.mark.parametrize("name", ["vllm-0.33.json", "vllm-0.33-aside.json"])
def test_every_golden_row_agrees_with_vllm(name: str) -> None:
    rows = [row for row in table(name)["rows"] if "skipped" not in row]
    failures = [(row, why) for row in rows if (why := mismatch(row)) is not None]
    assert not failures, f"{len(failures)} of {len(rows)} rows disagree, first: {failures[:3]}"


def test_golden_tables_name_their_vllm_version_and_cover_every_preset() -> None:
    main = table("vllm-0.33.json")
    assert main["vllm_version"].startswith("0.33")
    assert set(main["models"]) == set(model_presets())
    aside = table("vllm-0.33-aside.json")
    assert set(aside["models"]) - set(model_presets()), "the aside grid has outside models"
    assert {r["block_size"] for r in aside["rows"]} == {16, 32, 64}
    assert {r["async_scheduling"] for r in aside["rows"]} == {True, False}


def test_golden_grids_exercise_refusals_and_hybrids() -> None:
    rows = table("vllm-0.33.json")["rows"]
    assert sum(r.get("refused", False) for r in rows) > 10
    kinds = {g["kind"] for r in rows for g in r.get("groups", [])}
    assert {"SlidingWindowSpec", "ChunkedLocalAttentionSpec", "MambaSpec",
            "MLAAttentionSpec", "FullAttentionSpec"} <= kinds


def test_a_changed_rule_is_caught_by_the_table() -> None:
    row = next(r for r in table("vllm-0.33.json")["rows"]
               if r["model"] == "gemma-3-12b" and not r.get("refused", True))
    assert mismatch(row) is None
    assert mismatch({**row, "num_gpu_blocks": row["num_gpu_blocks"] + 1}) is not None
    assert mismatch({**row, "max_concurrency": row["max_concurrency"] * 1.01}) is not None
    assert mismatch({**row, "refused": True, "estimated_max_model_len": 1}) is not None
