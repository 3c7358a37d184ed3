#!/usr/bin/env python3
"""Copy vLLM's model registry into ``memacct/model/vllm_registry.json`` (run by hand).

Reads the dict literals of ``vllm/model_executor/models/registry.py`` from the files of a
vLLM wheel (no import): architecture -> model module per table, the architectures run
through the Transformers backend, and ``_PREVIOUSLY_SUPPORTED_MODELS`` (removed, with the
last version that ran them)::

    python3 tools/vllm_registry_copy.py /tmp/vllm033/src 0.33.0
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "memacct" / "planner" / "vllm_registry.json"
# memacct's table -> the registry's dicts, in order (an architecture is listed once, in
# its first table).
TABLES = {
    "text": ["_TEXT_GENERATION_MODELS"],
    "embedding": ["_EMBEDDING_MODELS", "_LATE_INTERACTION_MODELS", "_REWARD_MODELS",
                  "_TOKEN_CLASSIFICATION_MODELS"],
    "cross_encoder": ["_SEQUENCE_CLASSIFICATION_MODELS"],
    "multimodal": ["_MULTIMODAL_MODELS"],
    "speculative": ["_SPECULATIVE_DECODING_MODELS"],
    "transformers": ["_TRANSFORMERS_SUPPORTED_MODELS", "_TRANSFORMERS_BACKEND_MODELS"],
}


def literal_dicts(source: str) -> dict[str, dict[str, object]]:
    """Every module-level ``NAME = {...}`` of the registry, ``**`` splats of string keys
    resolved, the other entries evaluated as literals."""
    found: dict[str, dict[str, object]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        entries: dict[str, object] = {}
        for key, item in zip(value.keys, value.values, strict=True):
            if key is None:  # **splat
                if isinstance(item, ast.Dict):
                    entries.update(ast.literal_eval(item))
                elif isinstance(item, ast.Name) and item.id in found:
                    entries.update(found[item.id])
                continue
            try:
                entries[ast.literal_eval(key)] = ast.literal_eval(item)
            except ValueError:
                continue
        found[target.id] = entries
    return found


def module_name(value: object) -> str:
    """The model module: ``("llama", "LlamaForCausalLM")`` -> ``llama``; a module outside
    ``vllm/model_executor/models`` (``vllm.models.kimi_k3``) by its last component."""
    module = value[0] if isinstance(value, tuple) else str(value)
    return str(module).rsplit(".", 1)[-1]


def main(argv: list[str]) -> int:
    src, version = Path(argv[0]), argv[1]
    path = src / "vllm" / "model_executor" / "models" / "registry.py"
    dicts = literal_dicts(path.read_text(encoding="utf-8"))
    tables: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    for table, names in TABLES.items():
        rows: dict[str, str] = {}
        for name in names:
            for arch, value in dicts[name].items():
                if arch not in seen:
                    rows[arch] = module_name(value)
                    seen.add(arch)
        tables[table] = dict(sorted(rows.items()))
    removed = {arch: str(last) for arch, last in dicts["_PREVIOUSLY_SUPPORTED_MODELS"].items()
               if arch not in seen}
    data = {
        "source": f"vllm {version} wheel, vllm/model_executor/models/registry.py "
                  f"(tools/vllm_registry_copy.py): architecture -> model module per table "
                  f"(an architecture listed once, in its first table); removed: "
                  f"_PREVIOUSLY_SUPPORTED_MODELS, the last vLLM version that ran each",
        "vllm_version": version,
        "tables": tables,
        "removed": dict(sorted(removed.items())),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(seen)} architectures, {len(removed)} removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
