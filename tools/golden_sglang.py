"""Golden table of SGLang 0.5.23's own pool code (run by hand, never in ``make test``).

SGLang's sizing classes import its CUDA build and a live server's argument groups, so this
tool runs its functions' *source* from the wheel, not a copy of memacct's rules:

* ``configs/mamba_utils.py`` is imported whole (``mamba2_state_dtype``,
  ``Mamba2StateShape.create``, ``Mamba2CacheParams.mamba_cache_per_req``), with stand-ins
  for the two modules it imports (``distributed.utils.divide``, ``environ.envs``);
* the methods ``HybridSWAPoolConfigurator`` (``_recompute_cell_size``, ``_full_cell_bytes``,
  ``_swa_cell_bytes``, ``calculate_pool_sizes``, ``_solve_pool_sizes``,
  ``_make_pool_config``, ``validate_swa_pool_size``) and ``KVCacheConfigurator``
  (``_handle_max_mamba_cache``, ``_calculate_mamba_ratio``, ``resolve_max_num_reqs``)
  are compiled from ``pool_configurator.py`` / ``kv_cache_configurator.py`` and run on
  objects holding exactly the attributes they read (``get_schedule()`` & co. answer the
  server's defaults: page 1, ratio 0.8, ``mamba_full_memory_ratio`` 0.9, overlap on, no
  speculative decoding, no DP attention, no unified memory); the Qwen3-Next rows with
  ``pipeline_parallel_size`` run ``_handle_max_mamba_cache`` at that PP with SGLang's
  ``get_pp_indices`` and the overlap scheduler off, as SGLang runs pipeline parallelism.

The configs' sizes are the presets' ``config.json`` (and ``tests/data/golden/models``).
Usage::

    pip download sglang==0.5.23 --no-deps -d /tmp/sgl && unzip -q /tmp/sgl/sglang-*.whl \\
        'sglang/*' -d /tmp/sgl/src
    .venv/bin/python tools/golden_sglang.py --sglang-src /tmp/sgl/src \\
        --out tests/data/golden/sglang-0.5.23.json
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import math
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

GiB = 1 << 30
SRT = "sglang/srt"


class _Env:
    """``envs.X.get()`` as ``environ.py`` declares the few variables the functions read."""

    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "SGLANG_MAMBA_CONV_DTYPE": "bfloat16",
        "SGLANG_MAMBA_SSM_DTYPE": None,
        "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": False,
        "SGLANG_NPU_ENABLE_SPARSE_KV_OFFLOAD": False,
    }

    def __getattr__(self, name: str) -> Any:
        default = self._DEFAULTS[name]

        class _Var:
            @staticmethod
            def get() -> Any:
                return os.environ.get(name, default)

        return _Var


def _load_mamba_utils(src: Path) -> types.ModuleType:
    for name in ("sglang", "sglang.srt", "sglang.srt.distributed", "sglang.srt.configs"):
        sys.modules.setdefault(name, types.ModuleType(name))
    dist = types.ModuleType("sglang.srt.distributed.utils")

    def divide(a: int, b: int) -> int:
        assert a % b == 0, (a, b)
        return a // b

    dist.divide = divide  # type: ignore[attr-defined]
    sys.modules["sglang.srt.distributed.utils"] = dist
    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = _Env()  # type: ignore[attr-defined]
    sys.modules["sglang.srt.environ"] = environ
    spec = importlib.util.spec_from_file_location(
        "sglang.srt.configs.mamba_utils", src / SRT / "configs/mamba_utils.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _methods(path: Path, cls: str, names: set[str], env: dict[str, Any]) -> dict[str, Any]:
    """Compile the named methods of ``cls`` in ``path`` into functions over ``env``."""
    tree = ast.parse(path.read_text())
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in names:
                    item.decorator_list = []
                    module = ast.Module(body=[item], type_ignores=[])
                    scope: dict[str, Any] = {}
                    exec(compile(module, str(path), "exec"), env, scope)
                    out[item.name] = scope[item.name]
    missing = names - set(out)
    assert not missing, missing
    return out


@dataclass
class _Schedule:
    swa_full_tokens_ratio: float = 0.8
    mamba_full_memory_ratio: float = 0.9
    max_mamba_cache_size: int | None = None
    max_running_requests: int | None = None
    disable_overlap_schedule: bool = False


@dataclass
class MemoryPoolConfig:
    max_total_num_tokens: int
    full_max_total_num_tokens: int | None = None
    swa_max_total_num_tokens: int | None = None
    unified_memory_pool_bytes: int | None = None


@dataclass
class _Ctx:
    schedule: _Schedule
    radix: bool = True
    extra_buffer: bool = True

    def env(self, logger: Any) -> dict[str, Any]:
        ns = types.SimpleNamespace
        ctx = self

        class _Context:
            @staticmethod
            def override(_key: str, **values: Any) -> None:
                for k, v in values.items():
                    setattr(ctx.schedule, k, v)

        def tracking_slots(*, extra_buffer: bool, overlap: bool, lazy: bool = False) -> int:
            # mem_cache/allocation_sizing.py get_mamba_tracking_slots, compiled below.
            raise AssertionError("replaced")

        return {
            "get_schedule": lambda: self.schedule,
            "get_memory": lambda: ns(disable_radix_cache=not self.radix,
                                     enable_unified_memory=False),
            "get_exec": lambda: ns(mamba=ns(enable_mamba_extra_buffer=self.extra_buffer,
                                            enable_mamba_extra_buffer_lazy=False,
                                            enable_linear_replayssm_spec=False)),
            "get_context": lambda: _Context,
            "get_spec": lambda: ns(speculative_num_draft_tokens=None),
            "envs": _Env(),
            "logger": logger,
            "logging": logger,
            "MemoryPoolConfig": MemoryPoolConfig,
            "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO": 3,
            "MAMBA_CACHE_BASE_RATIO_DROP_ON_SKIP": 1,
            "MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_BUFFER": 1,
            "_pd_prefill_skips_mamba_spec_state": lambda: False,
            "get_pp_indices": None,
            "get_mamba_tracking_slots": tracking_slots,
            "math": math,
        }


class _Logger:
    def info(self, *_a: Any, **_k: Any) -> None: ...
    def warning(self, *_a: Any, **_k: Any) -> None: ...


def _sglang(src: Path, ctx: _Ctx) -> dict[str, Any]:
    env = ctx.env(_Logger())
    tracking = _methods_free(src / SRT / "mem_cache/allocation_sizing.py",
                             "get_mamba_tracking_slots", env)
    env["get_mamba_tracking_slots"] = tracking
    swa = _methods(src / SRT / "model_executor/pool_configurator.py",
                   "HybridSWAPoolConfigurator",
                   {"_recompute_cell_size", "_full_cell_bytes", "_swa_cell_bytes",
                    "calculate_pool_sizes", "_solve_pool_sizes", "_make_pool_config"}, env)
    base = _methods(src / SRT / "model_executor/pool_configurator.py",
                    "MemoryPoolConfigurator", {"validate_swa_pool_size"}, env)
    kvc = _methods(src / SRT / "mem_cache/kv_cache_configurator.py", "KVCacheConfigurator",
                   {"_handle_max_mamba_cache", "_calculate_mamba_ratio",
                    "resolve_max_num_reqs"}, env)
    return {**swa, **base, **kvc}


def _methods_free(path: Path, name: str, env: dict[str, Any]) -> Any:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            scope: dict[str, Any] = {}
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"),
                 env, scope)
            return scope[name]
    raise AssertionError(name)


def swa_row(src: Path, per_token: int, full_layers: int, swa_layers: int, window: int,
            budget: int, page: int, ratio: float) -> dict[str, Any]:
    """gpt-oss-style hybrid SWA: HybridSWAPoolConfigurator's sizes, or its refusal."""
    ctx = _Ctx(_Schedule(swa_full_tokens_ratio=ratio))
    fns = _sglang(src, ctx)
    self = types.SimpleNamespace(
        _full_per_token=per_token, _swa_per_token=per_token, _full_layers_num=full_layers,
        _swa_layers_num=swa_layers, _draft_full_layers_num=0, _draft_swa_layers_num=0,
        _draft_swa_full_layers_num=0, _draft_cell_size=0, _fused_full_entry=None,
        _fused_swa_entry=None, _swa_full_tokens_ratio=ratio, _sliding_window_size=window,
        _page_size=page, _enable_unified_memory=False,
    )
    for key in ("_full_cell_bytes", "_swa_cell_bytes", "_solve_pool_sizes",
                "_make_pool_config"):
        setattr(self, key, types.MethodType(fns[key], self))
    self.validate_swa_pool_size = fns["validate_swa_pool_size"]
    fns["_recompute_cell_size"](self)
    try:
        config = fns["calculate_pool_sizes"](self, budget, page)
    except ValueError:
        return {"refused": True}
    return {"refused": False, "full_tokens": config.full_max_total_num_tokens,
            "swa_tokens": config.swa_max_total_num_tokens}


def state_layers(layers: list[int], intermediate_size: int, n_groups: int, num_heads: int,
                 head_dim: int, state_size: int, conv_kernel: int) -> dict[str, Any]:
    """The layers holding a GDN/Mamba2 state and the arguments of SGLang's
    ``Mamba2StateShape.create`` for them, as :func:`mamba_row` reads them."""
    shape = {"intermediate_size": intermediate_size, "n_groups": n_groups,
             "num_heads": num_heads, "head_dim": head_dim, "state_size": state_size,
             "conv_kernel": conv_kernel}  # fmt: skip
    return {"shape": shape, "layers": layers}


@dataclass(frozen=True)
class Stages:
    """Pipeline parallelism for :func:`mamba_row`: the decoder's layer count, its
    full-attention layers and one such layer's bytes per token (page 1)."""

    pp: int
    num_layers: int
    attention: list[int]
    layer_token: int

    def cells(self, src: Path) -> list[int]:
        """Each stage's full-attention bytes per token, with SGLang's own stage split
        (``distributed/utils.py`` ``get_pp_indices``, compiled from the wheel)."""
        indices = _methods_free(src / SRT / "distributed/utils.py", "get_pp_indices",
                                {"os": os, "Tuple": tuple})
        spans = [indices(self.num_layers, rank, self.pp) for rank in range(self.pp)]
        return [self.layer_token * sum(1 for i in self.attention if a <= i < b)
                for a, b in spans]


def mamba_row(src: Path, mamba_utils: types.ModuleType, cfg: dict[str, Any], tp: int,
              attention_token: int, budget: int, context_len: int, radix: bool,
              extra_buffer: bool, config_obj: Any, stages: Stages | None = None
              ) -> dict[str, Any]:
    """A GDN/Mamba2 hybrid: the state pool, the KV tokens and max_running_requests.

    ``stages``: pipeline parallelism, where SGLang turns the overlap scheduler off
    (``arg_groups/overrides.py`` ``_pipeline_parallel_overlap_disable``), prices one
    request's state at the busiest stage's Mamba layers (``_handle_max_mamba_cache``) and
    takes the minimum of the stages' token counts (``_apply_token_constraints``)."""
    pp = 1 if stages is None else stages.pp
    ctx = _Ctx(_Schedule(disable_overlap_schedule=pp > 1), radix=radix,
               extra_buffer=extra_buffer)
    fns = _sglang(src, ctx)
    if stages is not None:
        fns["_handle_max_mamba_cache"].__globals__["get_pp_indices"] = _methods_free(
            src / SRT / "distributed/utils.py", "get_pp_indices", {"os": os, "Tuple": tuple})
    shape = mamba_utils.Mamba2StateShape.create(tp_world_size=tp, **cfg["shape"])
    params = mamba_utils.Mamba2CacheParams(
        shape=shape, layers=cfg["layers"], dtype=mamba_utils.mamba2_state_dtype(config_obj))
    ns = types.SimpleNamespace
    layers = 0 if stages is None else stages.num_layers
    self = ns(mambaish_config=ns(mamba2_cache_params=params), pp_size=pp,
              fused_entry_bytes=lambda _name: None, spec_algorithm=ns(is_none=lambda: True),
              hybrid_gdn_config=None, hybrid_kda_config=None, extra_mamba_cache_bytes_per_req=0,
              attn_dp_size=1, model_config=ns(context_len=context_len,
                                              num_hidden_layers=layers))
    self._calculate_mamba_ratio = types.MethodType(fns["_calculate_mamba_ratio"], self)
    rest_gib = fns["_handle_max_mamba_cache"](self, budget / GiB)
    rest = int(rest_gib * GiB)
    cells = [attention_token] if stages is None else stages.cells(src)
    tokens = min(rest // cell for cell in cells)
    running = fns["resolve_max_num_reqs"](self, tokens)
    return {"per_request": params.mamba_cache_per_req, "slots": ctx.schedule.max_mamba_cache_size,
            "kv_tokens": tokens, "max_running_requests": running}


def _hf(config: dict[str, Any]) -> Any:
    """A config dict as the attribute object SGLang's ``ModelConfig`` reads."""
    return types.SimpleNamespace(**config)


def _model_config(src: Path, config: dict[str, Any], context_len: int) -> Any:
    """The few ``ModelConfig`` fields the pool code reads, with SGLang's own
    ``get_num_kv_heads`` / ``get_total_num_kv_heads`` compiled from ``configs/model_config.py``
    (head sizes as its ``__init__`` unifies them: ``head_dim`` else hidden / heads)."""
    hf = _hf(config)
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    fns = _methods(src / SRT / "configs/model_config.py", "ModelConfig",
                   {"get_num_kv_heads", "get_total_num_kv_heads"},
                   {"AttentionArch": types.SimpleNamespace(SSM="ssm")})
    mc = types.SimpleNamespace(
        hf_config=hf, hf_text_config=hf, is_draft_model=False, attention_arch="mha",
        head_dim=head, v_head_dim=config.get("v_head_dim") or head, context_len=context_len,
        kv_lora_rank=config.get("kv_lora_rank"), qk_rope_head_dim=config.get("qk_rope_head_dim"),
        num_nextn_predict_layers=config.get("num_nextn_predict_layers"),
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_layers=config["num_hidden_layers"], is_hybrid_swa=False,
        is_deepseek_v4_arch=False)  # fmt: skip
    for name, fn in fns.items():
        setattr(mc, name, types.MethodType(fn, mc))
    return mc


def spec_row(src: Path, target: dict[str, Any], draft: dict[str, Any] | None, algorithm: str,
             tp: int, budget: int, context_len: int, page: int = 1) -> dict[str, Any]:
    """A target with an EAGLE / EAGLE3 / STANDALONE / NEXTN draft (``draft`` ``None``: the
    path-less MTP head, sized off the target's config): ``_resolve_eagle_aux_hidden_state``
    (``model_runner_components/spec_aux_hidden_state.py``) for the draft's layers,
    ``DefaultPoolConfigurator.__init__`` / ``_compute_cell_size`` / ``calculate_pool_sizes``
    (``pool_configurator.py``) for the cell and the tokens, ``calculate_mla_kv_cache_dim``
    and ``resolve_max_num_reqs`` (``kv_cache_configurator.py``) with the 48 requests
    ``_handle_eagle_family`` sets (``arg_groups/speculative_hook.py``)."""
    import torch

    ns = types.SimpleNamespace
    target_mc = _model_config(src, target, context_len)
    draft_mc = target_mc if draft is None else _model_config(src, draft, context_len)
    aux = ns(eagle_draft_num_layers=None, eagle_draft_swa_num_layers=None,
             eagle_use_aux_hidden_state=False, eagle_aux_hidden_state_layer_ids=None,
             draft_kv_num_layers=None, draft_model_config=None)  # fmt: skip
    algo = ns(is_eagle=lambda: algorithm in ("EAGLE", "EAGLE3"),
              is_eagle3=lambda: algorithm == "EAGLE3",
              is_standalone=lambda: algorithm == "STANDALONE",
              is_dflash_family=lambda: False, is_none=lambda: False)  # fmt: skip
    resolve = _methods_free(
        src / SRT / "model_executor/model_runner_components/spec_aux_hidden_state.py",
        "_resolve_eagle_aux_hidden_state",
        {"get_spec": lambda: ns(speculative_draft_model_path=None if draft is None else "d",
                                speculative_draft_model_revision=None),
         "ModelConfig": ns(from_server_args=lambda *_a, **_k: draft_mc)})
    resolve(config=aux, server_args=None, model_config=target_mc, spec_algorithm=algo,
            is_draft_worker=False)
    cp_utils = types.ModuleType("sglang.srt.layers.cp.utils")
    cp_utils.get_glm_dsa_layer_split_effective_num_layers = (  # type: ignore[attr-defined]
        lambda _kvc, n: n)  # GLM-DSA layer split only: every other model keeps n
    for name in ("sglang.srt.layers", "sglang.srt.layers.cp"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["sglang.srt.layers.cp.utils"] = cp_utils
    mla = target.get("kv_lora_rank") is not None
    kvc_fns = _sglang(src, _Ctx(_Schedule(max_running_requests=48)))
    mla_dim = _methods_free(src / SRT / "mem_cache/kv_cache_configurator.py",
                            "calculate_mla_kv_cache_dim", {"is_deepseek_dsa": lambda _c: False})
    env = {
        "mambaish_config": lambda _c: None, "torch": torch, "envs": _Env(),
        "get_parallel": lambda: ns(attn_dcp_size=1, attn_tp_size=tp),
        "get_schedule": lambda: ns(max_total_tokens=None, page_size=page),
        "get_memory": lambda: ns(enable_hisparse=False),
        # Logical-page KV sharding (--enable-kv-cache-sharding) is off by default: no scratch.
        "compute_page_shard_scratch_bytes": lambda _kvc, include_mtp: 0,
        "is_deepseek_dsa": lambda _c: False, "is_minimax_sparse": lambda _c: False,
        "is_float4_e2m1fn_x2": lambda _d: False,
    }
    fns = _methods(src / SRT / "model_executor/pool_configurator.py", "DefaultPoolConfigurator",
                   {"__init__", "_compute_cell_size", "calculate_pool_sizes"}, env)
    env["MemoryPoolConfig"] = MemoryPoolConfig
    kv_mod = types.ModuleType("sglang.srt.mem_cache.kv_cache_configurator")
    kv_mod.calculate_mla_kv_cache_dim = mla_dim  # type: ignore[attr-defined]
    sys.modules.setdefault("sglang.srt.mem_cache", types.ModuleType("sglang.srt.mem_cache"))
    sys.modules["sglang.srt.mem_cache.kv_cache_configurator"] = kv_mod
    layers = target["num_hidden_layers"]
    kvc = ns(model_config=target_mc, kv_cache_dtype=torch.bfloat16, kv_cache_dtype_str="auto",
             server_args=ns(enable_hisparse=False), use_mla_backend=mla, is_draft_worker=False,
             layer_info=ns(num_effective_layers=layers, start_layer=0, end_layer=layers),
             pp_size=1, spec_algorithm=algo, spec_aux_config=aux, device="cuda",
             fused_entry_bytes=lambda _name: None)  # fmt: skip
    configurator = ns(_compute_qsa_cell_size=lambda **_k: 0)  # no QSA profile in these configs
    configurator._compute_cell_size = types.MethodType(fns["_compute_cell_size"], configurator)
    fns["__init__"](configurator, kvc)
    config = fns["calculate_pool_sizes"](configurator, budget, page)
    holder = ns(model_config=target_mc, attn_dp_size=1, mambaish_config=None)
    running = kvc_fns["resolve_max_num_reqs"](holder, config.max_total_num_tokens)
    return {"draft_layers": aux.eagle_draft_num_layers, "cell": configurator._cell_size,
            "kv_tokens": config.max_total_num_tokens, "max_running_requests": running}


DRAFTS: dict[str, dict[str, Any]] = {
    # The layer counts SGLang reads (published config.json values of such drafts).
    "eagle3-1-layer": {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
                       "num_hidden_layers": 1, "hidden_size": 4096, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "draft_vocab_size": 32000},
    "eagle-1-layer": {"architectures": ["LlamaForCausalLMEagle"], "model_type": "llama",
                      "num_hidden_layers": 1, "hidden_size": 4096, "num_attention_heads": 32,
                      "num_key_value_heads": 8},
    "standalone-28-layers": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                             "num_hidden_layers": 28, "hidden_size": 1024,
                             "num_attention_heads": 16, "num_key_value_heads": 8,
                             "head_dim": 128},
}
"""Draft configs for :func:`spec_rows` (only the keys the pool code reads)."""


def spec_rows(src: Path, load: Any) -> list[dict[str, Any]]:
    """Speculative rows: each target with each draft, TP, budget, length and page."""
    cases = [("qwen3-8b", "EAGLE3", "eagle3-1-layer"), ("llama-3.1-8b", "EAGLE", "eagle-1-layer"),
             ("llama-3.1-70b", "EAGLE3", "eagle3-1-layer"),
             ("qwen3-8b", "STANDALONE", "standalone-28-layers"),
             ("deepseek-v3", "EAGLE", None)]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for model, algorithm, draft_name in cases:
        target = load(model)
        draft = None if draft_name is None else DRAFTS[draft_name]
        for tp in ((8,) if model == "deepseek-v3" else (1, 2, 4)):
            for budget in (20 * GiB, 60 * GiB + 12345, 7 * GiB + 999):
                for length in (8192, 131072):
                    for page in (1, 64):
                        row = spec_row(src, target, draft, algorithm, tp, budget, length, page)
                        rows.append({"kind": "spec", "model": model, "algorithm": algorithm,
                                     "draft": draft_name, "draft_config": draft,
                                     "tensor_parallel_size": tp,
                                     "budget_bytes": budget, "max_model_len": length,
                                     "page": page, **row})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang-src", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    src: Path = args.sglang_src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from memacct.planner import load_model_preset

    mamba_utils = _load_mamba_utils(src)
    rows: list[dict[str, Any]] = []
    gpt = load_model_preset("gpt-oss-20b")
    per_token = gpt["num_key_value_heads"] * gpt["head_dim"] * 2 * 2
    window = gpt["sliding_window"] - 1  # models/gpt_oss.py get_attention_sliding_window_size
    for budget in (20 * GiB, 7 * GiB + 12345, 3 * GiB, 40 * 1024 * 1024, 7166361, 7166362):
        for page in (1, 16, 64):
            for ratio in (0.8, 0.5, 1.0, 0.25, 0.05, 0.01):
                row = swa_row(src, per_token, 12, 12, window, budget, page, ratio)
                rows.append({"kind": "swa", "model": "gpt-oss-20b", "budget_bytes": budget,
                             "page": page, "swa_full_tokens_ratio": ratio, **row})
    qwen = load_model_preset("qwen3-next-80b-a3b")
    gdn = state_layers(
        [i for i in range(qwen["num_hidden_layers"]) if (i + 1) % 4],
        qwen["linear_value_head_dim"] * qwen["linear_num_value_heads"],
        qwen["linear_num_key_heads"], qwen["linear_num_value_heads"],
        qwen["linear_value_head_dim"], qwen["linear_key_head_dim"], qwen["linear_conv_kernel_dim"],
    )  # fmt: skip
    for ssm in (None, "bfloat16", "float16"):
        if ssm is None:
            os.environ.pop("SGLANG_MAMBA_SSM_DTYPE", None)
        else:
            os.environ["SGLANG_MAMBA_SSM_DTYPE"] = ssm
        for tp in (1, 2, 4):
            token = 12 * max(1, qwen["num_key_value_heads"] // tp) * qwen["head_dim"] * 2 * 2
            for budget in (20 * GiB, 60 * GiB, 7 * GiB + 999):
                for radix, extra in ((True, True), (False, False)):
                    for length in (8192, 262144):
                        row = mamba_row(src, mamba_utils, gdn, tp, token, budget, length,
                                        radix, extra, None)
                        rows.append({"kind": "mamba", "model": "qwen3-next-80b-a3b",
                                     "tensor_parallel_size": tp, "budget_bytes": budget,
                                     "ssm_env": ssm, "radix": radix, "max_model_len": length,
                                     **row})
        for pp in (2, 4):  # Qwen3-Next's 48 layers, 12 of them full attention
            attention = [i for i in range(qwen["num_hidden_layers"]) if not (i + 1) % 4]
            for tp in (1, 2):
                layer_token = max(1, qwen["num_key_value_heads"] // tp) * qwen["head_dim"] * 4
                stages = Stages(pp, qwen["num_hidden_layers"], attention, layer_token)
                for budget in (20 * GiB, 60 * GiB, 7 * GiB + 999):
                    for length in (8192, 262144):
                        row = mamba_row(src, mamba_utils, gdn, tp, 12 * layer_token, budget,
                                        length, True, True, None, stages)
                        rows.append({"kind": "mamba", "model": "qwen3-next-80b-a3b",
                                     "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                                     "budget_bytes": budget, "ssm_env": ssm, "radix": True,
                                     "max_model_len": length, **row})
        granite = load_model_preset("granite-4.0-h-small")
        mamba2 = state_layers(
            [i for i, t in enumerate(granite["layer_types"]) if t == "mamba"],
            granite["mamba_expand"] * granite["hidden_size"], granite["mamba_n_groups"],
            granite["mamba_n_heads"], granite["mamba_d_head"], granite["mamba_d_state"],
            granite["mamba_d_conv"],
        )  # fmt: skip
        attention = granite["layer_types"].count("attention")
        head = granite["hidden_size"] // granite["num_attention_heads"]
        for tp in (1, 2, 4):
            token = attention * max(1, granite["num_key_value_heads"] // tp) * head * 2 * 2
            for budget in (20 * GiB, 60 * GiB):
                # configs/granitemoehybrid.py: Mamba2CacheParams without the config's dtype.
                row = mamba_row(src, mamba_utils, mamba2, tp, token, budget, 8192, True,
                                True, None)
                rows.append({"kind": "mamba", "model": "granite-4.0-h-small",
                             "tensor_parallel_size": tp, "budget_bytes": budget,
                             "ssm_env": ssm, "radix": True, "max_model_len": 8192, **row})
    os.environ.pop("SGLANG_MAMBA_SSM_DTYPE", None)
    rows += spec_rows(src, load_model_preset)
    header = {
        "sglang": "0.5.23",
        "source": "sglang-0.5.23 wheel: configs/mamba_utils.py imported; "
                  "HybridSWAPoolConfigurator, MemoryPoolConfigurator.validate_swa_pool_size, "
                  "KVCacheConfigurator._handle_max_mamba_cache/_calculate_mamba_ratio/"
                  "resolve_max_num_reqs and allocation_sizing.get_mamba_tracking_slots "
                  "compiled from the wheel's source",
        "emulated": "page_size as given, overlap scheduler on, no DP attention, no unified "
                    "memory; speculative only in the spec rows (DefaultPoolConfigurator, "
                    "max_running_requests 48, no KV sharding, bf16 KV); PP 1 (rows with "
                    "pipeline_parallel_size: PP, overlap off, SGLang's stage split); "
                    "gpt-oss window = "
                    "sliding_window - 1; Qwen3-Next: extra buffer with the radix cache",
        "rows": len(rows),
    }
    args.out.write_text(
        json.dumps(header) + "\n" + "".join(json.dumps(r) + "\n" for r in rows)
    )
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
