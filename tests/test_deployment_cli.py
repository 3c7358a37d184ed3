"""``memacct plan`` takes vLLM's deployment flags as ``vllm serve`` names them (issue 22)."""

from __future__ import annotations

import json

import pytest

from memacct.cli import main


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    code = main(["plan", "--json", "--max-model-len", "8192", *args])
    assert code in (0, 1)
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_deployment_flags_move_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    base = _plan(capsys, "--model", "llama-3.1-8b", "--device", "h100")
    fp8 = _plan(capsys, "--model", "llama-3.1-8b", "--device", "h100", "--quantization", "fp8")
    lora = _plan(capsys, "--model", "llama-3.1-8b", "--device", "h100", "--enable-lora",
                 "--max-loras", "4", "--max-lora-rank", "64")  # fmt: skip
    offload = _plan(capsys, "--model", "llama-3.1-8b", "--device", "h100",
                    "--cpu-offload-gb", "4")  # fmt: skip
    blocks = {name: int(plan["num_blocks"])  # type: ignore[call-overload]
              for name, plan in (("base", base), ("fp8", fp8), ("lora", lora),
                                 ("offload", offload))}  # fmt: skip
    assert blocks["fp8"] > blocks["offload"] > blocks["base"] > blocks["lora"]


def test_pipeline_parallel_is_planned_offline(capsys: pytest.CaptureFixture[str]) -> None:
    pp = _plan(capsys, "--model", "llama-3.1-70b", "--device", "h100",
               "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2")  # fmt: skip
    assert pp["fits"] is True and int(pp["num_blocks"]) > 0  # type: ignore[call-overload]


def test_speculative_and_expert_parallel_flags(capsys: pytest.CaptureFixture[str]) -> None:
    mtp = _plan(capsys, "--model", "deepseek-v3", "--device", "h200",
                "--tensor-parallel-size", "8", "--speculative-config",
                '{"method": "mtp", "num_speculative_tokens": 1}')  # fmt: skip
    plain = _plan(capsys, "--model", "deepseek-v3", "--device", "h200",
                  "--tensor-parallel-size", "8")  # fmt: skip
    ep = _plan(capsys, "--model", "deepseek-v3", "--device", "h200", "--tensor-parallel-size",
               "8", "--enable-expert-parallel", "--data-parallel-size", "2")  # fmt: skip
    n = {k: int(v["num_blocks"]) for k, v in  # type: ignore[call-overload]
         (("mtp", mtp), ("plain", plain), ("ep", ep))}  # fmt: skip
    assert n["ep"] > n["plain"] > n["mtp"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--device", "h100", "--max-loras", "4"], ["--enable-lora"]),
        (["--device", "h100", "--quantization", "awq"], ["awq", "not quantized", "fp8"]),
        (["--device", "h100", "--speculative-config", "{bad"], ["--speculative-config", "JSON"]),
        (["--kv-cache-memory-bytes", "20GiB", "--quantization", "fp8"], ["--device"]),
        (["--device", "h100", "--engine", "sglang", "--quantization", "fp8"], ["--engine vllm"]),
    ],
)
def test_bad_deployment_flags_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], words: list[str]
) -> None:
    assert main(["plan", "--model", "llama-3.1-8b", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memacct: error:") and "\n" not in err
    for word in words:
        assert word in err
