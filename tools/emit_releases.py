#!/usr/bin/env python3
"""Which ``vllm serve`` flags each vLLM release takes, read from its own argument code (run by
hand, never in ``make test``): the data behind :data:`memacct.planner.emit.FLAG_SINCE`,
:data:`~memacct.planner.emit.KV_CACHE_DTYPE_SINCE` and
:data:`~memacct.planner.emit.LIMIT_MM_JSON_SINCE`.

For every release directory under ``--releases`` (``<version>/vllm/...``, the wheel's
``vllm/engine/arg_utils.py`` and ``vllm/config*``), it records whether ``arg_utils.py``
registers each flag :func:`memacct.planner.emit.emit` can write (the flag's string, in
either quote style), the ``--kv-cache-dtype`` names its ``CacheDType`` literal (or, before
the config dataclasses, its ``choices``) lists, and whether ``--limit-mm-per-prompt`` is
parsed as JSON or as ``image=2,video=1`` (``nullable_kvs``). Result:
tests/data/golden/emit-vllm-releases.json; tests/test_emit_golden.py checks the emitter's
constants against it.

Set-up (no vLLM environment needed: the files are read as text)::

    for v in 0.8.0 0.8.1 ... 0.33.0; do
        pip download "vllm==$v" --no-deps -d "w$v"
        unzip -q "w$v"/*.whl 'vllm/engine/arg_utils.py' 'vllm/config*' -d "releases/$v"
    done
    python tools/emit_releases.py --releases releases
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "emit-vllm-releases.json"

FLAGS = (
    "--tensor-parallel-size", "--pipeline-parallel-size", "--max-model-len", "--max-num-seqs",
    "--max-num-batched-tokens", "--kv-cache-dtype", "--block-size", "--kv-cache-memory-bytes",
    "--gpu-memory-utilization", "--enforce-eager", "--quantization", "--dtype", "--enable-lora",
    "--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-dtype", "--fully-sharded-loras",
    "--speculative-config", "--enable-expert-parallel", "--data-parallel-size",
    "--cpu-offload-gb", "--limit-mm-per-prompt", "--mm-processor-kwargs", "--skip-mm-profiling",
    "--revision",
)  # fmt: skip
"""Every flag the emitter writes (tests/test_emit_golden.py checks the grid's commands use
no other)."""

_LITERAL = re.compile(r"CacheDType\s*=\s*Literal\[(.*?)\]", re.S)
_CHOICES = re.compile(r"['\"]--kv-cache-dtype['\"].*?choices=\[(.*?)\]", re.S)


def version_key(text: str) -> tuple[int, ...]:
    """``0.10.1.1`` -> ``(0, 10, 1, 1)``; a suffix (``.post1``) is dropped."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("post", 1)[0]))


def read_release(root: Path) -> dict[str, object]:
    """What one release's files say (see the module docstring)."""
    args = (root / "vllm" / "engine" / "arg_utils.py").read_text()
    config = "\n".join(path.read_text() for path in sorted((root / "vllm").glob("config*/**/*.py")))
    config += "\n".join(path.read_text() for path in (root / "vllm").glob("config.py"))
    found = _LITERAL.search(config) or _CHOICES.search(args)
    dtypes = sorted(re.findall(r"['\"]([a-z0-9_]+)['\"]", found.group(1))) if found else []
    mm = re.search(r"['\"]--limit-mm-per-prompt['\"],?\s*(type=nullable_kvs)?", args)
    return {
        "flags": {flag: bool(re.search(rf"['\"]{flag}['\"]", args)) for flag in FLAGS},
        "kv_cache_dtypes": dtypes,
        "limit_mm_per_prompt": "kvs" if mm and mm.group(1) else "json",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--releases", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    dirs = sorted((d for d in args.releases.iterdir() if (d / "vllm").is_dir()),
                  key=lambda d: version_key(d.name))  # fmt: skip
    table = {"source": "vllm/engine/arg_utils.py and vllm/config of each release's wheel",
             "releases": {d.name: read_release(d) for d in dirs}}  # fmt: skip
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {args.out}: {len(dirs)} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
