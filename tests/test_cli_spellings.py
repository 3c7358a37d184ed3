"""The engines' own spellings, read where memacct reads its own (issue 29 rows 12, 14, 16, 17;
each test failed on main 0804fda): vLLM's short options and human-readable numbers, SGLang's
flag names under ``--engine sglang``, the CLI's flags in its messages, and the API taking what
the CLI takes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memacct.cli import main
from memacct.engines.spellings import normalize_argv, parse_engine_int
from memacct.errors import InvalidInputError
from memacct.planner import load_model_preset
from memacct.planner.offline import plan_capacity, plan_offline

_FIGURES = ("kv_cache_bytes", "num_blocks", "max_model_len", "max_num_batched_tokens",
            "gpu_memory_utilization", "block_size", "max_running_requests", "weights_memory")


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["plan", "--model", "qwen2.5-7b", "--device", "h100", *argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


def _figures(plan: dict[str, Any]) -> dict[str, Any]:
    return {key: plan[key] for key in _FIGURES}


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


# ------------------------------------------------------------------ row 12: vLLM's spellings


@pytest.mark.parametrize(
    ("engine_spelling", "memacct_spelling"),
    [(["-tp", "2"], ["--tensor-parallel-size", "2"]),
     (["-pp", "2"], ["--pipeline-parallel-size", "2"]),
     (["-q", "fp8"], ["--quantization", "fp8"]),
     (["--device-memory-utilization", "0.8"], ["--gpu-memory-utilization", "0.8"]),
     (["--max_model_len=8192"], ["--max-model-len", "8192"]),
     (["--max-model-len", "32k"], ["--max-model-len", "32000"]),
     (["--max-model-len", "16K"], ["--max-model-len", "16384"]),
     (["--max-model-len", "auto"], ["--max-model-len", "-1"]),
     (["--max-num-batched-tokens", "4K"], ["--max-num-batched-tokens", "4096"]),
     (["--kv-cache-memory-bytes", "20G"], ["--kv-cache-memory-bytes", "20GiB"]),
     (["--kv-cache-memory-bytes=20g"], ["--kv-cache-memory-bytes", "20GB"])],
)  # fmt: skip
def test_vllms_spellings_plan_as_memaccts(
    engine_spelling: list[str], memacct_spelling: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _figures(_plan(capsys, *engine_spelling)) == _figures(_plan(capsys, *memacct_spelling))


def test_human_readable_numbers_follow_each_engines_rules() -> None:
    # vLLM: k/m/g/t decimal, K/M/G/T binary (vllm/utils/argparse_utils.py).
    assert parse_engine_int("vllm", "max_model_len", "1M") == 2**20
    assert parse_engine_int("vllm", "max_model_len", "25.6k") == 25600
    # SGLang: M is SI, Mi is IEC (sglang/srt/utils/common.py); it parses its context length so.
    assert parse_engine_int("sglang", "max_model_len", "1M") == 10**6
    assert parse_engine_int("sglang", "max_model_len", "32Ki") == 32768
    # A number that is not human-readable is left to the plain integer rules.
    assert parse_engine_int("vllm", "max_model_len", "8192") is None
    assert parse_engine_int("vllm", "max_num_seqs", "1k") is None  # vLLM parses it as int


def test_a_decimal_with_a_binary_suffix_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _error(capsys, "--model", "qwen2.5-7b", "--max-model-len", "1.5K")
    assert "--max-model-len '1.5K'" in err and "1.5k" in err


# ---------------------------------------------------------------- row 12: SGLang's spellings


def test_sglangs_flags_plan_under_engine_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    theirs = _plan(capsys, "--engine", "sglang", "--mem-fraction-static", "0.85", "--tp-size",
                   "2", "--context-length", "16Ki", "--chunked-prefill-size", "4096",
                   "--page-size", "16", "--max-running-requests", "64")  # fmt: skip
    ours = _plan(capsys, "--engine", "sglang", "--gpu-memory-utilization", "0.85",
                 "--tensor-parallel-size", "2", "--max-model-len", "16384",
                 "--max-num-batched-tokens", "4096", "--block-size", "16",
                 "--max-running-requests", "64")  # fmt: skip
    assert _figures(theirs) == _figures(ours)
    assert theirs["max_running_requests"] == 64 and theirs["block_size"] == 16


def test_sglangs_cuda_graph_switches_are_one_setting(capsys: pytest.CaptureFixture[str]) -> None:
    eager = _figures(_plan(capsys, "--engine", "sglang", "--enforce-eager"))
    assert _figures(_plan(capsys, "--engine", "sglang", "--disable-cuda-graph")) == eager
    both = ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")
    assert _figures(_plan(capsys, "--engine", "sglang", *both)) == eager
    err = _error(capsys, "--model", "qwen2.5-7b", "--engine", "sglang", both[0])
    assert "as a whole" in err and both[1] in err


def test_sglangs_names_are_sglangs_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--mem-fraction-static" in _error(capsys, "--model", "qwen2.5-7b",
                                             "--mem-fraction-static", "0.8")  # fmt: skip
    assert normalize_argv(["--context-length", "8k"]) == ["--context-length", "8k"]


# --------------------------------------------------------- row 14: the CLI's flags in messages


def test_a_capacity_rows_refusal_names_the_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "qwen2.5-7b", "--device", "h100", "--tensor-parallel-size",
                 "1,3", "--json"]) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out)
    refusal = rows[1]["refusal"]
    assert "--tensor-parallel-size 3 does not divide" in refusal
    assert "tensor_parallel_size" not in refusal


def test_a_revision_given_twice_names_both_flags(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, "--model", "acme/x@main", "--revision", "v2")
    assert "--model acme/x@main names revision 'main'" in err and "--revision v2" in err


# ----------------------------------------------------- rows 16, 17: the API takes the CLI's


def test_plan_capacity_takes_the_clis_comma_lists() -> None:
    cfg = load_model_preset("qwen2.5-7b")
    rows = plan_capacity(cfg, devices="h100,l4", tensor_parallel_sizes="1,2")
    assert [(row.device, row.tensor_parallel_size) for row in rows] == [
        ("h100-80gb", 1), ("h100-80gb", 2), ("l4-24gb", 1), ("l4-24gb", 2)]
    single = plan_capacity(cfg, devices="l4", tensor_parallel_sizes=2)
    assert [(row.device, row.tensor_parallel_size) for row in single] == [("l4-24gb", 2)]


@pytest.mark.parametrize(
    ("devices", "degrees", "message"),
    [("h100,,l4", "1", "holds ''"), ("h100", "1,x", "not a degree"), (5, "1", "not a list"),
     (["h100"], [1, "2"], "integer degree"), ("h100", (1, 1), "more than once")],
)  # fmt: skip
def test_plan_capacity_refuses_what_is_not_a_list(devices: Any, degrees: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        plan_capacity(load_model_preset("qwen2.5-7b"), devices=devices,
                      tensor_parallel_sizes=degrees)


def test_plan_offline_takes_the_serve_settings_the_cli_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = plan_offline("qwen2.5-7b", device="h100", quantization="fp8", enable_lora=True,
                       max_lora_rank=64)  # fmt: skip
    cli = _plan(capsys, "--quantization", "fp8", "--enable-lora", "--max-lora-rank", "64")
    assert (api.kv_cache_bytes, api.weights_memory) == (cli["kv_cache_bytes"],
                                                        cli["weights_memory"])  # fmt: skip
    assert api.weights_memory != plan_offline("qwen2.5-7b", device="h100").weights_memory


def test_serve_settings_beside_a_deployment_are_refused() -> None:
    from memacct.engines.deployment import Deployment

    with pytest.raises(InvalidInputError, match="not both"):
        plan_offline("qwen2.5-7b", device="h100", enable_lora=True,
                     deployment=Deployment(quantization="fp8"))  # fmt: skip
    with pytest.raises(InvalidInputError, match="serve settings"):
        plan_offline("qwen2.5-7b", device="h100", enable_loras=True)


def test_plan_offline_reads_the_draft_a_speculative_config_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = '{"method": "eagle3", "model": "qwen3-8b", "num_speculative_tokens": 3}'
    api = plan_offline("llama-3.1-8b", device="h100", speculative_config=spec)
    assert main(["plan", "--model", "llama-3.1-8b", "--device", "h100", "--speculative-config",
                 spec, "--json"]) == 0  # fmt: skip
    cli = json.loads(capsys.readouterr().out)
    assert (api.kv_cache_bytes, api.weights_memory) == (cli["kv_cache_bytes"],
                                                        cli["weights_memory"])  # fmt: skip
    assert api.weights_memory > plan_offline("llama-3.1-8b", device="h100").weights_memory
