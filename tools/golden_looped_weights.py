#!/usr/bin/env python3
"""Golden weights of looped models: vLLM 0.33 builds each one and counts its parameters.

Run by hand in the throwaway vLLM environment (never in ``make test``)::

    /tmp/vllmenv/bin/python tools/golden_looped_weights.py --vllm-src /tmp/vllm033/src

Each config of :data:`MODELS` (the golden configs of ``tests/data/golden/models/new``) is
built on the meta device at TP 1 as ``tools/golden_towers.py`` builds a tower, and the
elements of every parameter are summed (buffers such as the rotary cache aside).
``tests/test_looped_weights.py`` checks memacct's weight formulas against the table this
writes (``tests/data/golden/vllm-0.33-looped-weights.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-looped-weights.json"
NEW = ROOT / "tests" / "data" / "golden" / "models" / "new"
MODELS = ["hrm-text-default", "dory-default", "dory-looped"]


def param_count(raw: dict[str, Any]) -> int:
    """Elements of every parameter vLLM 0.33 builds for ``raw`` (tied ones once)."""
    import tempfile

    import torch
    from golden_vllm_standins import meta_values, patch_parallel_groups
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    patch_parallel_groups(1)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps({**raw, "torch_dtype": "bfloat16"}))
        args = EngineArgs(model=folder, skip_tokenizer_init=True, load_format="dummy",
                          max_model_len=2048, enforce_eager=True, trust_remote_code=True,
                          runner="generate", tensor_parallel_size=1)
        vllm_config = args.create_engine_config()
        vllm_config.device_config.device = torch.device("meta")
        with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("meta"), \
                meta_values():
            model = initialize_model(vllm_config=vllm_config, prefix="")
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    rows: dict[str, Any] = {}
    for name in MODELS:
        config = f"tests/data/golden/models/new/{name}.json"
        try:
            raw = json.loads((ROOT / config).read_text())
            rows[name] = {"config": config, "params": param_count(raw)}
        except Exception as exc:
            traceback.print_exc()
            rows[name] = {"config": config, "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(name, rows[name].get("params", rows[name].get("error")), flush=True)
    OUT.write_text(json.dumps({"vllm": version, "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
