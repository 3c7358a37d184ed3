#!/usr/bin/env python3
"""``memacct plan --emit vllm`` against vLLM's own parser (run by hand, never in ``make test``).

For a grid of plans (presets x devices x tensor-parallel degrees x settings) this emits each
plan's ``vllm serve`` line (:func:`memacct.planner.emit.emit`) in memacct's environment, then
feeds the words after ``vllm serve`` to the parser ``vllm serve --help`` prints
(``vllm/entrypoints/common/cli_args.py``, ``make_arg_parser``: the positional model,
the frontend's flags and ``AsyncEngineArgs.add_cli_args``), runs its
``validate_parsed_serve_args`` and ``AsyncEngineArgs.from_cli_args``, and compares every
engine argument the plan decides with what vLLM parsed. A plan that does not fit is
recorded with its verdict (no command starts it). The result:
tests/data/golden/emit-vllm-0.33.json; tests/test_emit_golden.py checks it is complete,
all-passing, and that today's emitter still writes the commands recorded.

``--engine sglang`` does the same for ``memacct plan --emit sglang`` with SGLang 0.5.23's
``ServerArgs.add_cli_args`` (an ``argparse`` parser, as ``sglang.launch_server`` builds it)
and ``ServerArgs.from_cli_args``, which import and run on a CPU machine given three
packages the golden environment lacks (orjson, IPython, traitlets; ``--deps``):
tests/data/golden/emit-sglang-0.5.23.json.

Set-up: the golden environment of tools/golden_vllm.py (``/tmp/vllmenv``, vLLM 0.33's
pure-Python files at ``/tmp/vllm033/src``)::

    /tmp/vllmenv/bin/python tools/emit_check.py --src /tmp/vllm033/src
    pip download sglang==0.5.23 --no-deps -d /tmp/sgl && unzip -q /tmp/sgl/*.whl -d /tmp/sgl/src
    /tmp/vllmenv/bin/pip install --no-deps --target /tmp/sgl/deps orjson IPython traitlets
    /tmp/vllmenv/bin/python tools/emit_check.py --engine sglang --src /tmp/sgl/src \\
        --deps /tmp/sgl/deps
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden"
OUT = {"vllm": GOLDEN / "emit-vllm-0.33.json", "sglang": GOLDEN / "emit-sglang-0.5.23.json"}

MODELS = ("qwen2.5-7b", "llama-3.1-8b", "qwen3-30b-a3b", "gemma-3-12b", "llama-3.1-70b",
          "gpt-oss-20b")  # fmt: skip
DEVICES = ("h100", "l4")
DEGREES = (1, 2, 4)
SETTINGS: tuple[dict[str, Any], ...] = (
    {},
    {"max_model_len": -1},
    {"max_model_len": 8192, "kv_cache_memory_bytes": 12 * 2**30},
    {"gpu_memory_utilization": 0.85, "max_num_seqs": 64, "max_num_batched_tokens": 4096},
    {"enforce_eager": True, "block_size": 32, "kv_cache_dtype": "fp8"},
    {"quantization": "fp8", "max_model_len": 16384},
    {"enable_lora": True, "max_loras": 4, "max_lora_rank": 64, "max_cpu_loras": 8},
    {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 4}'},
    {"enable_expert_parallel": True, "data_parallel_size": 2},
    {"cpu_offload_gb": 4, "pipeline_parallel_size": 2},
    {"limit_mm_per_prompt": '{"image": 2}', "skip_mm_profiling": True},
)
"""Each a set of plan keywords (``plan_offline``'s, the CLI's flags): every setting the
emitter writes appears in one."""

SGLANG_SETTINGS: tuple[dict[str, Any], ...] = (
    {},
    {"max_model_len": 8192, "gpu_memory_utilization": 0.85},
    {"max_running_requests": 48, "max_num_batched_tokens": 4096, "block_size": 16},
    {"enforce_eager": True, "kv_cache_dtype": "fp8_e4m3"},
    {"swa_full_tokens_ratio": 0.5, "max_model_len": 16384},
)
"""The same for SGLang (``--engine sglang``)."""


def grid(engine: str = "vllm") -> list[dict[str, Any]]:
    """The cases, in order: model, device, degree, settings."""
    settings_of = SETTINGS if engine == "vllm" else SGLANG_SETTINGS
    return [
        {"model": model, "device": device, "tensor_parallel_size": tp, "settings": settings}
        for model in MODELS for device in DEVICES for tp in DEGREES for settings in settings_of
    ]  # fmt: skip


def _applies(model: str, settings: dict[str, Any]) -> bool:
    """Whether the settings mean anything for the model (MoE flags on an MoE, multimodal
    limits on a multimodal model), so that a refusal is never the only record."""
    if "enable_expert_parallel" in settings:
        return model in ("qwen3-30b-a3b", "gpt-oss-20b")
    if "limit_mm_per_prompt" in settings:
        return model == "gemma-3-12b"
    return True


def expected_engine_args(plan: Any, opts: Any, model: str) -> dict[str, Any]:
    """The ``EngineArgs`` fields the plan decides, with the values vLLM must parse."""
    d = opts.deployment
    want: dict[str, Any] = {
        "model": model,
        "tensor_parallel_size": opts.tensor_parallel_size,
        "pipeline_parallel_size": opts.pipeline_parallel_size,
        "max_model_len": plan.max_model_len,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "kv_cache_dtype": opts.kv_cache_dtype,
        "enforce_eager": opts.enforce_eager,
    }
    if opts.kv_cache_memory_bytes is not None:
        want["kv_cache_memory_bytes"] = opts.kv_cache_memory_bytes
    else:
        want["gpu_memory_utilization"] = plan.gpu_memory_utilization
    if opts.block_size is not None:
        want["block_size"] = opts.block_size
    if d is None:
        return want
    want.update(quantization=d.quantization, dtype=d.dtype,
                enable_expert_parallel=d.enable_expert_parallel,
                data_parallel_size=d.data_parallel_size,
                cpu_offload_gb=d.cpu_offload_gb)  # fmt: skip
    if d.lora is not None:  # off: vLLM's EngineArgs.enable_lora stays None, not False
        want.update(enable_lora=True, max_loras=d.lora.max_loras,
                    max_lora_rank=d.lora.max_lora_rank, max_cpu_loras=d.lora.max_cpu_loras,
                    fully_sharded_loras=d.lora.fully_sharded_loras)  # fmt: skip
    if d.speculative is not None:
        from memacct.planner.emit import speculative_flag_value

        want["speculative_config"] = speculative_flag_value(d.speculative)
    mm = d.multimodal
    if mm.limit_mm_per_prompt:
        want["limit_mm_per_prompt"] = dict(mm.limit_mm_per_prompt)
    if mm.skip_mm_profiling:
        want["skip_mm_profiling"] = True
    return want


def expected_server_args(plan: Any, opts: Any, model: str) -> dict[str, Any]:
    """The ``ServerArgs`` fields an SGLang plan decides, with the values SGLang must parse."""
    want: dict[str, Any] = {
        "model_path": model, "tp_size": opts.tensor_parallel_size,
        "pp_size": opts.pipeline_parallel_size, "context_length": plan.max_model_len,
        "chunked_prefill_size": plan.max_num_batched_tokens,
        "max_running_requests": plan.max_running_requests,
        "kv_cache_dtype": opts.kv_cache_dtype,
    }  # fmt: skip
    if opts.gpu_memory_utilization is not None:
        want["mem_fraction_static"] = opts.gpu_memory_utilization
    if opts.block_size is not None:
        want["page_size"] = opts.block_size
    if opts.enforce_eager:
        want.update(disable_decode_cuda_graph=True, disable_prefill_cuda_graph=True)
    if opts.swa_full_tokens_ratio is not None:
        want["swa_full_tokens_ratio"] = opts.swa_full_tokens_ratio
    return want


def emit_grid(engine: str = "vllm") -> list[dict[str, Any]]:
    """Each case of :func:`grid` with its emitted command, or why there is none (memacct's
    environment)."""
    sys.path.insert(0, str(ROOT))
    from memacct.errors import MemacctError
    from memacct.planner.emit import emit
    from memacct.planner.offline import plan_offline
    from memacct.planner.options import PlanOptions

    expected = expected_engine_args if engine == "vllm" else expected_server_args
    cases = []
    for case in grid(engine):
        row = dict(case)
        if not _applies(case["model"], case["settings"]):
            continue
        try:
            opts = PlanOptions.from_kwargs(engine=engine, device=case["device"],
                                           tensor_parallel_size=case["tensor_parallel_size"],
                                           **case["settings"])  # fmt: skip
            plan = plan_offline(case["model"], opts)
            out = emit(engine, plan, opts, model=case["model"])
        except MemacctError as exc:
            row["refused"] = str(exc)
        else:
            row.update(command=out.text, env=dict(out.env),
                       expected=expected(plan, opts, case["model"]))  # fmt: skip
        cases.append(row)
    return cases


def _import_vllm(src: str) -> Any:
    sys.path.insert(0, src)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from golden_vllm_standins import emulate_h100, stub_extension, stub_ops

    for name in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn"):
        stub_extension(name)
    emulate_h100()
    stub_ops()
    import vllm  # type: ignore[import-not-found]

    return vllm


def _same(parsed: Any, want: Any) -> bool:
    if hasattr(parsed, "model_dump"):  # a config object parsed from JSON
        parsed = parsed.model_dump()
    if isinstance(want, dict) and isinstance(parsed, dict):
        return all(_same(parsed.get(key), value) for key, value in want.items())
    if isinstance(want, float) or isinstance(parsed, float):
        return parsed is not None and float(parsed) == float(want)
    return bool(parsed == want)


def check_vllm(cases: list[dict[str, Any]], src: str) -> dict[str, Any]:
    """Parse every emitted command with vLLM's ``vllm serve`` parser (golden environment)."""
    vllm = _import_vllm(src)
    from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
    from vllm.entrypoints.common.cli_args import (  # type: ignore[import-not-found]
        make_arg_parser,
        validate_parsed_serve_args,
    )
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    for case in cases:
        if "command" not in case:
            continue
        argv = _words(case["command"])
        assert argv[:2] == ["vllm", "serve"], argv
        try:
            args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(argv[2:])
            validate_parsed_serve_args(args)
            args.model = args.model_tag  # vllm/entrypoints/cli/serve.py, ServeSubcommand.cmd
            engine_args = AsyncEngineArgs.from_cli_args(args)
        except (SystemExit, Exception) as exc:  # argparse exits on a flag it refuses
            case.update(parsed=False, error=f"{type(exc).__name__}: {exc}")
            continue
        case.update(parsed=True, mismatches=_mismatches(engine_args, case["expected"]))
    return {"version": vllm.__version__, "parser": "vllm/entrypoints/common/cli_args.py "
            "make_arg_parser + validate_parsed_serve_args, AsyncEngineArgs.from_cli_args"}


def _words(command: str) -> list[str]:
    """The command's words after the ``NAME=value`` variables it starts with."""
    words = shlex.split(command)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    return words


def _mismatches(parsed: Any, expected: dict[str, Any]) -> dict[str, Any]:
    return {
        key: {"expected": want, "parsed": repr(getattr(parsed, key, None))}
        for key, want in expected.items() if not _same(getattr(parsed, key, None), want)
    }  # fmt: skip


def check_sglang(cases: list[dict[str, Any]], src: str, deps: str | None) -> dict[str, Any]:
    """Parse every emitted command with SGLang's ``ServerArgs`` parser."""
    sys.path[:0] = [src, *([deps] if deps else [])]
    import sglang  # type: ignore[import-not-found]
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    head = ["python", "-m", "sglang.launch_server"]
    for case in cases:
        if "command" not in case:
            continue
        argv = _words(case["command"])
        assert argv[:3] == head, argv
        try:
            parser = argparse.ArgumentParser(prog="sglang.launch_server")
            ServerArgs.add_cli_args(parser)
            server_args = ServerArgs.from_cli_args(parser.parse_args(argv[3:]))
        except (SystemExit, Exception) as exc:
            case.update(parsed=False, error=f"{type(exc).__name__}: {exc}")
            continue
        case.update(parsed=True, mismatches=_mismatches(server_args, case["expected"]))
    return {"version": getattr(sglang, "__version__", "0.5.23"),
            "parser": "sglang/srt/server_args.py ServerArgs.add_cli_args, from_cli_args"}


def _memacct_cases(memacct_python: str, engine: str) -> list[dict[str, Any]]:
    code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'tools')!r}); " \
           f"import emit_check; print(json.dumps(emit_check.emit_grid({engine!r})))"
    out = subprocess.run([memacct_python, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout  # fmt: skip
    cases: list[dict[str, Any]] = json.loads(out)
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--src", required=True,
                        help="vLLM 0.33's pure-Python files, or SGLang 0.5.23's wheel unzipped")
    parser.add_argument("--deps", default=None, help="more packages for SGLang's imports")
    parser.add_argument("--memacct-python", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    start = time.time()
    cases = _memacct_cases(args.memacct_python, args.engine)
    engine = (check_vllm(cases, args.src) if args.engine == "vllm"
              else check_sglang(cases, args.src, args.deps))  # fmt: skip
    emitted = [case for case in cases if "command" in case]
    summary = {
        "cases": len(cases), "emitted": len(emitted),
        "refused": len(cases) - len(emitted),
        "parsed": sum(1 for case in emitted if case.get("parsed")),
        "agree": sum(1 for case in emitted if case.get("parsed") and not case["mismatches"]),
    }  # fmt: skip
    table = {args.engine: engine, "summary": summary,
             "seconds": round(time.time() - start, 1), "cases": cases}  # fmt: skip
    text = json.dumps(table, separators=(",", ":")).replace('},{"model"', '},\n{"model"')
    out = args.out or OUT[args.engine]
    out.write_text(text + "\n")
    print(f"wrote {out}: {summary}")
    return 0 if summary["agree"] == summary["emitted"] else 1


if __name__ == "__main__":
    sys.exit(main())
