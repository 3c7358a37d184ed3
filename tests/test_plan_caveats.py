"""A plan says what it guessed, in its own notes and the printed output, not only deep in
its JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memacct.cli import main
from memacct.planner.offline import plan_offline

UNKNOWN: dict[str, Any] = {
    "architectures": ["AcmeForCausalLM"], "model_type": "acme", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}  # fmt: skip


def test_the_full_attention_guess_is_the_plans_first_note() -> None:
    plan = plan_offline({**UNKNOWN, "_memacct_assume_full_attention": True}, device="h100")
    assert "the figures are a guess" in plan.notes[0]


def test_the_full_attention_guess_is_printed(tmp_path: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(UNKNOWN))
    argv = ["plan", "--model", str(path), "--device", "h100", "--assume-full-attention"]
    assert main(argv) == 0
    assert "AcmeForCausalLM has no memacct rule" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert "the figures are a guess" in json.loads(capsys.readouterr().out)["notes"][0]


def test_a_float32_config_is_planned_in_the_dtype_vllm_serves() -> None:
    from memacct.model.sources.presets import load_model_preset

    config = dict(load_model_preset("qwen2.5-7b"))
    bf16 = plan_offline(config, device="h100")
    fp32 = plan_offline({**config, "torch_dtype": "float32"}, device="h100")
    fields = ("weights_memory", "activation_peak", "cudagraph_memory", "block_bytes",
              "kv_cache_bytes")  # fmt: skip
    assert [getattr(fp32, f) for f in fields] == [getattr(bf16, f) for f in fields]
    assert fp32.spec.dtype == "bfloat16"
    assert sum("float32" in n for n in fp32.spec.notes) == 1


def test_a_kv_cache_asked_beyond_the_device_is_lowered_first_with_the_figure() -> None:
    plan = plan_offline("qwen2.5-7b", device="h100", kv_cache_memory_bytes=100 * 2**30)
    assert not plan.fits
    most = plan.total_memory - plan.non_kv_cache_memory
    assert plan.suggestions[0] == (
        f"lower --kv-cache-memory-bytes to at most {most / 2**30:.2f}GiB")
    assert "activation peak" not in plan.verdict
    # Nothing that leaves the asked-for cache as large is offered (a batch, the utilization).
    assert not any("--max-num-seqs" in s or "utilization" in s for s in plan.suggestions)


def test_a_kv_cache_too_small_for_one_request_is_raised_to_one_request() -> None:
    plan = plan_offline("qwen2.5-7b", device="h100", kv_cache_memory_bytes=2**30,
                        max_model_len=32768)
    assert not plan.fits
    assert any(s.startswith("raise --kv-cache-memory-bytes to at least") for s in plan.suggestions)


def test_the_verdict_claims_no_more_requests_than_the_engine_runs() -> None:
    plan = plan_offline("qwen2.5-7b", device="h200", max_model_len=1024, max_num_seqs=256)
    assert plan.max_concurrency > 256
    assert plan.verdict.startswith("fits: 256 concurrent requests of 1,024 tokens, the "
                                   "engine's max_num_seqs")


def test_the_shortfall_is_one_figure_in_the_verdict_and_the_plan() -> None:
    plan = plan_offline("llama-3.1-70b", device="h100")
    assert not plan.fits
    assert f"the target is {plan.shortfall_bytes / 2**30:.2f}GiB short of" in plan.verdict
