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
        for row in t["rows"]:
            rows.setdefault(row["model"], []).append(row)
    table["rows"] = [row for model in sorted(order) for row in rows.get(model, [])]
    write_table(table, out)
    return 0


def write_table(table: dict[str, Any], out: Path) -> None:
    text = json.dumps(table, separators=(",", ":")).replace('},{"model"', '},\n{"model"')
    out.write_text(text + "\n")
    print(f"wrote {out}: {len(table['rows'])} rows")
