#!/usr/bin/env python3
"""The config keys each vLLM 0.33 model module reads, grepped from its source.

For every module of vLLM's registry (``memacct/model/vllm_registry.json``) this reads
``vllm/model_executor/models/<module>.py`` (or the package ``vllm/models/<module>/``) and
collects the keys it reads from a config object: ``config.<key>``, ``hf_config.<key>``,
``text_config.<key>``, ``getattr(config, "<key>"`` and ``hasattr(config, "<key>"``.
A grep over-collects (``config.<key>`` of another config object); the test that uses the
table, ``tests/test_config_keys.py``, keeps only layer-shaping keys. Writes
``memacct/model/vllm_config_keys.json``; run by hand::

    python tools/vllm_config_keys.py --vllm-src /tmp/vllm033/src
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "memacct" / "model" / "vllm_registry.json"
OUT = ROOT / "memacct" / "model" / "vllm_config_keys.json"

_OBJECTS = r"(?:config|hf_config|text_config|hf_text_config|self\.config|model_config\.hf_config)"
_ATTRIBUTE = re.compile(rf"\b{_OBJECTS}\.([a-z_][a-z0-9_]*)\b")
_GETATTR = re.compile(
    rf"\b(?:getattr|hasattr)\(\s*{_OBJECTS},\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
# Attributes of a config object that are methods or vLLM's own sub-configs, not keys.
_NOT_KEYS = frozenset({"get", "to_dict", "get_text_config", "model_config", "cache_config",
                       "parallel_config", "quant_config", "compilation_config",
                       "scheduler_config", "speculative_config", "lora_config",
                       "device_config", "load_config", "model", "get_hf_config"})


def module_files(src: Path, module: str) -> list[Path]:
    """The source files of a registry module: its file, or every file of its package."""
    single = src / "vllm" / "model_executor" / "models" / f"{module}.py"
    if single.exists():
        return [single]
    package = src / "vllm" / "models" / module
    return sorted(package.rglob("*.py")) if package.is_dir() else []


def keys_read(files: list[Path]) -> list[str]:
    found: set[str] = set()
    for path in files:
        text = path.read_text(encoding="utf-8")
        found.update(_ATTRIBUTE.findall(text))
        found.update(_GETATTR.findall(text))
    return sorted(found - _NOT_KEYS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    args = parser.parse_args()
    src = Path(args.vllm_src)
    tables = json.loads(REGISTRY.read_text())["tables"]
    modules = sorted({m for rows in tables.values() for m in rows.values()})
    table: dict[str, list[str]] = {}
    missing: list[str] = []
    for module in modules:
        files = module_files(src, module)
        if not files:
            missing.append(module)
            continue
        table[module] = keys_read(files)
    out = {"vllm_version": "0.33.0", "generator": "tools/vllm_config_keys.py",
           "patterns": [_ATTRIBUTE.pattern, _GETATTR.pattern], "modules": table,
           "not_found": missing}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(table)} modules ({len(missing)} without a source file)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
