"""Reading and writing the golden tables of ``tools/golden_vllm.py`` (no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def merge_tables(parts: list[Path], out: Path) -> int:
    """One table from runs over parts of a grid's models (the same versions and grid)."""
    tables = [json.loads(p.read_text()) for p in parts]
    table = dict(tables[0])
    for key in ("models", "sources", "vllm_classes", "generator_failed"):
        merged: dict[str, str] = {}
        for t in tables:
            merged.update(t.get(key, {}))
        if merged:
            table[key] = dict(sorted(merged.items()))
    for model in table.get("models", {}):
        table.get("generator_failed", {}).pop(model, None)
    table["seconds"] = round(sum(t["seconds"] for t in tables), 1)
    order = list(table["models"])
    rows: dict[str, list[dict[str, Any]]] = {}
    for t in tables:
        # A model's rows come from the last part that has them (a rerun replaces them).
        mine: dict[str, list[dict[str, Any]]] = {}
        for row in t["rows"]:
            mine.setdefault(row["model"], []).append(row)
        rows.update(mine)
    table["rows"] = [row for model in sorted(order) for row in rows.get(model, [])]
    write_table(table, out)
    return 0


def write_table(table: dict[str, Any], out: Path) -> None:
    text = json.dumps(table, separators=(",", ":")).replace('},{"model"', '},\n{"model"')
    out.write_text(text + "\n")
    print(f"wrote {out}: {len(table['rows'])} rows")


def rejection(cfg: dict[str, Any], tp: int, pp: int) -> str | None:
    heads = cfg.get("num_attention_heads") or 0
    if heads and heads % tp:
        return f"num_attention_heads {heads} not divisible by tensor_parallel_size {tp}"
    kv = cfg.get("num_key_value_heads") or heads
    if kv and not cfg.get("kv_lora_rank"):
        if kv >= tp and kv % tp:
            return f"num_key_value_heads {kv} not divisible by tensor_parallel_size {tp}"
        if kv < tp and tp % kv:
            return f"tensor_parallel_size {tp} not a multiple of num_key_value_heads {kv}"
    for key in ("linear_num_value_heads", "mamba_n_heads", "mamba_num_heads"):
        if cfg.get(key) and cfg[key] % tp:
            return f"{key} {cfg[key]} not divisible by tensor_parallel_size {tp}"
    if pp > cfg["num_hidden_layers"]:
        return "more pipeline stages than layers"
    return None
