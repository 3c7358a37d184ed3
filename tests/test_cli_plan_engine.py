"""``memacct plan --engine ... --kv-cache-memory-bytes ...``: a plan without a device."""

from __future__ import annotations

import json

import pytest

from memacct.cli import main


def test_plan_from_a_budget_prints_vllms_lines(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "gemma-3-12b", "--kv-cache-memory-bytes", "20GiB",
            "--max-model-len", "8192"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "KV cache plan (vllm 0.33):"
    assert out[-3:] == [
        "Available KV cache memory: 20.00 GiB",
        "GPU KV cache size: 54,524 tokens",
        "Maximum concurrency for 8,192 tokens per request: 6.66x",
    ]


def test_plan_for_sglang_uses_its_page_and_pool(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "llama-3.1-8b", "--engine", "sglang",
            "--kv-cache-memory-bytes", "1GiB", "--max-model-len", "4096", "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["engine"], plan["block_size"], plan["kv_tokens"]) == ("sglang", 1, 8192)


@pytest.mark.parametrize("size", ["20Gx", "-1GiB", "nan", "0"])
def test_a_bad_budget_is_one_line_and_exit_2(
    size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", size]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memacct: error: ") and "is not a size" in err


def test_a_refused_budget_names_the_engines_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB"]
    assert main(argv) == 2
    assert "largest --max-model-len that fits is 8176" in capsys.readouterr().err


def test_the_sampler_flag_and_vllms_variable_shape_the_offline_plan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0.11.1-0.16 sort by default (0.9.0-0.11.0 take FlashInfer, as their vllm-openai image
    # installs it: releases.default_sampler).
    base = ["plan", "--model", "qwen2.5-7b", "--device", "a100-80gb", "--engine-version",
            "0.11.1", "--json"]  # fmt: skip
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    plans = {}
    for extra in ([], ["--sampler", "flashinfer"]):
        assert main(base + extra) == 0
        plans[tuple(extra)] = json.loads(capsys.readouterr().out)
    sort, fi = plans[()], plans[("--sampler", "flashinfer")]
    assert (sort["budget"]["sampler"], fi["budget"]["sampler"]) == ("sort", "flashinfer")
    assert fi["activation_peak"] < sort["activation_peak"]
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["budget"]["sampler"] == "flashinfer"
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "on")
    assert main(base) == 2
    assert "VLLM_USE_FLASHINFER_SAMPLER='on' is not an integer" in capsys.readouterr().err
