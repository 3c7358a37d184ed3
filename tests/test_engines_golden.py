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
from memacct.errors import ConfigError, InsufficientMemoryError, InvalidInputError
from memacct.planner import KVCacheSpec, model_presets

GOLDEN = Path(__file__).parent / "data" / "golden"


@cache
def table(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text())
    return data


ROOT = Path(__file__).parent.parent
NEW_ARCHS = "vllm-0.33-new-archs.json"


@cache
def spec(model: str, kv: str, tp: int, pp: int, config: str | None = None) -> KVCacheSpec:
    kwargs: dict[str, Any] = {
        "kv_cache_dtype": kv, "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
    if config is None and model in model_presets():
        return KVCacheSpec.from_preset(model, **kwargs)
    path = ROOT / config if config else GOLDEN / "models" / f"{model}.json"
    return KVCacheSpec.from_hf_config(path, model_name=model, **kwargs)


def mismatch(row: dict[str, Any], config: str | None = None) -> str | None:
    """Why memacct disagrees with the row, or None (``config``: the row's config file,
    for models outside the presets)."""
    args = (row["model"], row["kv_cache_dtype"], row["tensor_parallel_size"],
            row["pipeline_parallel_size"], config)
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


def new_arch_outcomes() -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]],
                                 list[tuple[dict[str, Any], str]]]:
    """The new-architecture rows memacct matches, refuses (naming the architecture) and
    gets wrong."""
    data = table(NEW_ARCHS)
    exact: list[dict[str, Any]] = []
    refused: list[tuple[dict[str, Any], str]] = []
    wrong: list[tuple[dict[str, Any], str]] = []
    for row in data["rows"]:
        if "skipped" in row:
            continue
        config = data["models"][row["model"]]
        try:
            why = mismatch(row, config)
        except ConfigError as exc:
            arch = json.loads((ROOT / config).read_text()).get("architectures", ["?"])[0]
            (refused if arch in str(exc) else wrong).append((row, str(exc)))
            continue
        if why is None:
            exact.append(row)
        else:
            wrong.append((row, why))
    return exact, refused, wrong


def test_new_architectures_are_exact_or_refused_naming_the_architecture() -> None:
    """Golden rows of architectures memacct was not tuned to (tools/golden_new_archs.py):
    no row silently wrong, at least 90% exact."""
    exact, refused, wrong = new_arch_outcomes()
    total = len(exact) + len(refused) + len(wrong)
    assert total > 300
    assert not wrong, f"{len(wrong)} of {total} rows wrong, first: {wrong[:3]}"
    assert len(exact) >= 0.9 * total, f"{len(exact)} of {total} exact, refused: {refused[:3]}"


def test_new_architecture_table_names_versions_and_sources() -> None:
    data = table(NEW_ARCHS)
    assert data["versions"]["vllm"].startswith("0.33")
    assert set(data["models"]) <= set(data["sources"]), "every config names its source"
    assert not set(data["models"]) & set(model_presets())
    assert len({r["model"] for r in data["rows"]}) >= 30


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
