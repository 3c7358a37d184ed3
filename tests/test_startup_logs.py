"""Replays the real start-up logs of tests/data/startup_logs/ (see docs/accuracy.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _tools import load_tool

ROOT = Path(__file__).resolve().parents[1]

ACC = load_tool("accuracy.py", "memacct_accuracy")
DATA = ACC.load_cases()
ROWS = ACC.replay_all(DATA)


def test_the_log_set_has_cited_logs() -> None:
    cases = DATA["cases"]
    assert len(cases) >= 20
    for case in cases:
        assert case["source"].startswith("https://"), case["id"]
        assert isinstance(case.get("development"), list), case["id"]
        assert case["engine"] in ("vllm", "vllm-ascend", "sglang")
        assert {"tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
                "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "kv_cache_dtype",
                "quantization"} <= set(case["settings"])  # fmt: skip
        assert case["model"] is None or case["model"] in DATA["models"] or case["notes"]
    for name, model in DATA["models"].items():
        assert model.get("source"), name


@pytest.mark.parametrize("row", [r for r in ROWS if r.error("weights") is not None],
                         ids=lambda r: r.case["id"])  # fmt: skip
def test_weights_within_two_percent_wherever_the_checkpoint_is_known(row: object) -> None:
    error = row.error("weights")  # type: ignore[attr-defined]
    assert abs(error) <= 0.02


def test_kv_cache_on_v1_logs_meets_the_targets() -> None:
    n, median, _worst, within = ACC.summary(ROWS, "kv_cache", v1_only=True)
    assert n >= 9
    assert median <= 0.03
    # Issue 11's target: 80% within 5%. The two misses are explained in docs/accuracy.md (a
    # source whose own figures disagree, a refused start at -1.44 GiB).
    assert within >= 0.8 * n


def test_held_out_v1_kv_cache_is_reported_and_bounded() -> None:
    # The cases that shaped no constant, each with the sampler its log names.
    n, median, worst, within = ACC.summary(ROWS, "kv_cache", v1_only=True, held_out=True)
    assert n >= 6 and median <= 0.03 and worst <= 0.05 and within == n


def test_the_logged_sampler_is_what_closes_the_flashinfer_logs() -> None:
    # Replayed with the sort (a pip install of vLLM 0.10 without the flashinfer extra)
    # instead, the FlashInfer logs fall 0.9 GiB low: the sampler, not a fitted constant,
    # is what moved them.
    named = [r for r in ROWS if r.case.get("sampler") == "flashinfer"]
    assert len(named) >= 4
    for row in named:
        assert row.case["sampler_evidence"].startswith("log line")
        sort = ACC.replay({**row.case, "sampler": "sort"}, DATA["models"]).error("kv_cache")
        after = row.error("kv_cache")
        assert sort is not None and after is not None
        assert abs(after) < abs(sort) and abs(after) <= 0.05, row.case["id"]


def test_without_sampler_the_release_default_takes_the_path_the_logs_name() -> None:
    # vLLM 0.9-0.11.0 sample with FlashInfer wherever it is installed, as the release's
    # vllm/vllm-openai image does: the plan without --sampler lands where the log does.
    defaults = {r.case["id"]: r for r in ACC.replay_all(DATA, logged_sampler=False)}
    named = [r for r in ROWS if r.case.get("sampler") == "flashinfer"]
    for row in named:
        default = defaults[row.case["id"]]
        assert default.sampler == "flashinfer", row.case["id"]
        error = default.error("kv_cache")
        assert error is not None and abs(error) <= 0.05, row.case["id"]
    # Where the logged activation is the sort's, the case says how that was read.
    for row in (r for r in ROWS if r.sampler.endswith("(activation)")):
        assert "bytes per logit" in row.case["sampler_evidence"], row.case["id"]


def test_activation_on_v1_logs_within_two_percent() -> None:
    # Two percent on the logs that shaped SAMPLER_BYTES_PER_LOGIT (vLLM 0.11, H100); the
    # held-out dense vLLM 0.19 H100 logs (llm-d-planner) land 1.8-2.8% low, so they are held
    # to 5%. The two held-out 0.19 MoE logs (Mixtral-8x7B TP2, Qwen3-30B-A3B) profile 20-30%
    # more than memacct's dummy forward: a known gap (docs/accuracy.md), held apart here; so
    # does Llama-4-Scout's at TP 4 (7.3%: 3.19 GiB logged, its 16 experts top-1).
    dev = [r for r in ROWS if r.case["v1"] is True
           and any(w.startswith("activation") for w in r.case.get("development") or [])]
    dev_errs = [abs(e) for r in dev if (e := r.error("activation")) is not None]
    assert len(dev_errs) >= 8 and max(dev_errs) <= 0.02
    moe = {"llmdp-mixtral-8x7b-tp2-h100", "llmdp-qwen3-30b-a3b-h100",
           "llmdp-llama-4-scout-tp4-h100"}
    # W8A8 int8 at TP 1 (Mistral-Small-3.1): 2.18 GiB logged against the bf16 log's 2.03; the
    # int8 copy of each linear's input (dynamic per-token quantization) is not modelled.
    int8 = {"llmdp-mistral-small-3.1-24b-w8a8-h100"}
    for row in (r for r in ROWS if r.case["id"] in int8):
        error = row.error("activation")
        assert error is not None and -0.12 < error < -0.05, row.case["id"]
    dense = [r for r in ROWS if r.case["v1"] is True and r.case["id"] not in moe | int8]
    errs = [abs(e) for r in dense if (e := r.error("activation")) is not None]
    assert len(errs) >= 16 and max(errs) <= 0.05
    for row in (r for r in ROWS if r.case["id"] in moe):
        error = row.error("activation")
        assert error is not None and -0.35 < error < -0.05, row.case["id"]


def test_docs_accuracy_is_regenerated() -> None:
    text = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    defaults = ACC.replay_all(DATA, logged_sampler=False)
    assert text == ACC.render(ROWS, defaults), "run `make accuracy` and commit docs/accuracy.md"


def test_the_engine_s_kv_manager_reproduces_the_logged_tokens_from_the_logged_budget() -> None:
    # Independent of every constant memacct fitted: the logged "Available KV cache memory"
    # (printed to 0.01 GiB) through plan_kv_cache(None, spec, kv_cache_memory_bytes=...).
    checked = [r for r in ROWS if ACC.budget_agrees(r) is not None]
    assert len(checked) >= 3
    for row in checked:
        assert ACC.budget_agrees(row), (row.case["id"], row.logged["kv_tokens"], row.from_budget)
        low, high = row.from_budget["tokens"]
        # The rounding window is narrow: 0.01 GiB is a fraction of a percent of the tokens.
        assert high - low <= 0.01 * row.logged["kv_tokens"]


def test_the_budget_check_fails_on_a_wrong_token_count() -> None:
    for row in [r for r in ROWS if ACC.budget_agrees(r)]:
        low = min(*row.from_budget["tokens"], *row.from_budget["block_tokens"])
        high = max(*row.from_budget["tokens"], *row.from_budget["block_tokens"])
        block = row.case["settings"]["block_size"]
        for tokens in (low - block, high + block):
            wrong = ACC.Replayed({**row.case}, {**row.logged, "kv_tokens": tokens},
                                 row.estimated, row.reason, row.from_budget, row.token_slack)
            assert ACC.budget_agrees(wrong) == "", (row.case["id"], tokens)
        if row.logged["max_concurrency"]:
            off = {**row.logged, "max_concurrency": row.logged["max_concurrency"] * 1.05 + 0.02}
            wrong = ACC.Replayed({**row.case}, off, row.estimated, row.reason, row.from_budget,
                                 row.token_slack)  # fmt: skip
            assert ACC.budget_agrees(wrong) == "", row.case["id"]


@pytest.mark.parametrize("name", ["kv_tokens", "max_concurrency"])
def test_tokens_and_concurrency_are_as_close_as_the_kv_budget(name: str) -> None:
    # Blocks are floor(budget / block bytes): a KV budget off by x gives tokens and concurrency
    # off by x, plus one block and the print's rounding (ACC.token_bound).
    rows = [r for r in ROWS if r.error(name) is not None]
    assert len(rows) >= 2
    for row in rows:
        bound = ACC.token_bound(row, name)
        assert bound is not None and abs(row.error(name)) <= bound, (row.case["id"], bound)


def test_memacct_refuses_where_the_engine_refused_for_lack_of_kv_cache() -> None:
    refused = [r for r in ROWS if r.refused]
    assert refused
    for row in refused:
        assert row.logged["max_concurrency"] is not None and row.logged["max_concurrency"] < 1
    started = [r for r in ROWS if r.estimated["max_concurrency"] is not None
               and r.logged["max_concurrency"] is not None]  # fmt: skip
    assert all(r.logged["max_concurrency"] >= 1 for r in started)


def test_development_cases_say_what_they_shaped() -> None:
    dev = [r for r in ROWS if r.development]
    assert any(r.case["id"] == "gh-lmcache-3430-qwen3-8b-a5000" for r in dev)
    for row in dev:
        assert all(isinstance(x, str) and ":" in x for x in row.case["development"])
    # The held-out figures exclude them.
    n_all = ACC.summary(ROWS, "kv_cache", v1_only=False)[0]
    n_held = ACC.summary(ROWS, "kv_cache", v1_only=False, held_out=True)[0]
    assert n_held == n_all - sum(1 for r in dev if r.error("kv_cache") is not None)
