"""SGLang 0.5.23's token pool (rules and sources: docs/engines.md, "SGLang 0.5.23's rules").

The parity rows below are SGLang's own arithmetic, written out from its pool code
(``model_executor/pool_configurator.py`` HybridSWAPoolConfigurator, ``mem_cache/
kv_cache_configurator.py`` ``_handle_max_mamba_cache`` / ``resolve_max_num_reqs``,
``configs/mamba_utils.py`` ``mamba2_state_dtype``) with the config's sizes, not memacct's.
"""

from __future__ import annotations

import pytest

import memacct
from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.engines.sglang.kv import max_running_requests, sglang_partition
from memacct.engines.sglang.options import SGLANG_RELEASES
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.planner import KVCacheSpec
from memacct.planner.offline import plan_offline
from memacct.units import GiB

SGLANG = get_engine("sglang").kv

# gpt-oss-20b: 24 layers (12 full, 12 sliding over 128), 8 KV heads of 64, bf16.
GPT_OSS_TOKEN = 8 * (64 + 64) * 2
# Qwen3-Next-80B-A3B: 36 GDN layers (16 key heads, 32 value heads of 128, conv kernel 4) and
# 12 full-attention layers (2 KV heads of 256), bf16; Mamba2StateShape.create for one rank.
QWEN_NEXT_CONV = (2 * 16 * 128 + 32 * 128) * (4 - 1)
QWEN_NEXT_SSM = 32 * 128 * 128
QWEN_NEXT_TOKEN = 12 * 2 * (256 + 256) * 2


def settings(length: int = 8192, page: int = 1, **options: float | int | str) -> KVSettings:
    return KVSettings(max_model_len=length, block_size=page, engine_options=options)


def sglang_mamba(budget: int, per_slot: int, ratio: int, length: int) -> tuple[int, int]:
    """SGLang's (max_total_num_tokens, max_running_requests) for a GDN hybrid, as its code
    computes them: the state pool in GiB floats first, then the cell of full layers."""
    rest = budget / GiB
    slots = int((rest * 0.9 / 1.9 * GiB - per_slot) // per_slot)
    rest -= (slots + 1) * per_slot / GiB
    tokens = int(rest * GiB) // QWEN_NEXT_TOKEN
    estimated = max(min(int(tokens / length * 512), 4096), 2048)
    return tokens, min(estimated, tokens // 2, slots // ratio)


# (budget, swa_full_tokens_ratio, page): the hybrid SWA pool of gpt-oss-20b.
SWA_ROWS = [
    (20 * GiB, None, 1),
    (20 * GiB, 0.5, 1),
    (20 * GiB, 1.0, 1),
    (7 * GiB + 12345, 0.25, 64),
    (3 * GiB, 0.05, 16),
]


@pytest.mark.parametrize(("budget", "ratio", "page"), SWA_ROWS)
def test_parity_hybrid_swa_pool_at_each_ratio(budget: int, ratio: float | None, page: int) -> None:
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    r = 0.8 if ratio is None else ratio
    options: dict[str, float | int | str] = (
        {} if ratio is None else {"swa_full_tokens_ratio": ratio}
    )
    cell = GPT_OSS_TOKEN * 12 + r * GPT_OSS_TOKEN * 12
    full = int(budget // cell) // page * page
    swa = int(full * r) // page * page
    layout = SGLANG.plan(gpt, budget, KVSettings(
        max_model_len=8192, block_size=page, engine_options=options))
    assert (layout.kv_tokens, layout.num_blocks) == (full, full // page)
    assert f"sliding-window pool: {swa} tokens" in " ".join(layout.notes)


@pytest.mark.parametrize(("full", "refused"), [(161, True), (162, False)])
def test_parity_gpt_oss_window_is_exclusive_at_the_edge(full: int, refused: bool) -> None:
    """SGLang's gpt-oss passes sliding_window - 1 = 127 (models/gpt_oss.py): 162 full tokens
    give int(162 x 0.8) = 129 sliding tokens and 127 + 1 < 129 starts; vLLM's 128 refused it."""
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    cell = GPT_OSS_TOKEN * 12 * 1.8
    budget = -int(-full * cell // 1)
    assert int(budget // cell) == full
    if refused:
        with pytest.raises(InsufficientMemoryError, match=r"window \(127\) plus a page"):
            SGLANG.plan(gpt, budget, settings())
    else:
        assert SGLANG.plan(gpt, budget, settings()).kv_tokens == full


@pytest.mark.parametrize("ratio", [0, 1.5, -0.1, "half"])
def test_a_ratio_outside_zero_to_one_is_refused(ratio: object) -> None:
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    with pytest.raises(InvalidInputError, match=r"swa_full_tokens_ratio .* \(0, 1\]"):
        SGLANG.plan(gpt, 20 * GiB, KVSettings(max_model_len=8192, engine_options={
            "swa_full_tokens_ratio": ratio}))


def test_a_small_ratio_refuses_where_the_default_starts() -> None:
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    budget = 40 * 1024 * 1024
    assert SGLANG.plan(gpt, budget, settings()).kv_tokens > 0
    with pytest.raises(InsufficientMemoryError, match="raise --swa-full-tokens-ratio"):
        SGLANG.plan(gpt, budget, settings(swa_full_tokens_ratio=0.01))


# (budget, mamba_ssm_dtype option, SGLANG_MAMBA_SSM_DTYPE, ssm bytes, prefix caching, ratio)
MAMBA_ROWS = [
    (20 * GiB, None, None, 4, True, 5),
    (20 * GiB, "bfloat16", None, 2, True, 5),
    (20 * GiB, None, "bfloat16", 2, True, 5),
    (20 * GiB, "float32", "bfloat16", 4, True, 5),
    (60 * GiB, None, None, 4, False, 1),
    (7 * GiB + 999, "float16", None, 2, True, 5),
]


@pytest.mark.parametrize(("budget", "option", "env", "ssm_bytes", "radix", "ratio"), MAMBA_ROWS)
def test_parity_mamba_state_dtype_slots_and_running_requests(
    monkeypatch: pytest.MonkeyPatch, budget: int, option: str | None, env: str | None,
    ssm_bytes: int, radix: bool, ratio: int,
) -> None:
    if env is None:
        monkeypatch.delenv("SGLANG_MAMBA_SSM_DTYPE", raising=False)
    else:
        monkeypatch.setenv("SGLANG_MAMBA_SSM_DTYPE", env)
    monkeypatch.delenv("SGLANG_MAMBA_CONV_DTYPE", raising=False)
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    per_slot = 36 * (QWEN_NEXT_CONV * 2 + QWEN_NEXT_SSM * ssm_bytes)
    tokens, running = sglang_mamba(budget, per_slot, ratio, 8192)
    options = {} if option is None else {"mamba_ssm_dtype": option}
    layout = SGLANG.plan(qwen, budget, KVSettings(
        max_model_len=8192, block_size=1, enable_prefix_caching=radix, engine_options=options))
    assert layout.kv_tokens == tokens
    assert layout.max_running_requests == running
    assert layout.max_concurrency == min(tokens / 8192, running)


def test_the_conv_state_stays_bfloat16_under_a_float32_ssm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLANG_MAMBA_SSM_DTYPE", raising=False)
    monkeypatch.setenv("SGLANG_MAMBA_CONV_DTYPE", "float32")
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    per_slot = 36 * (QWEN_NEXT_CONV * 4 + QWEN_NEXT_SSM * 4)
    assert SGLANG.plan(qwen, 20 * GiB, settings()).kv_tokens == sglang_mamba(
        20 * GiB, per_slot, 5, 8192)[0]


def test_granite_ignores_the_configs_ssm_dtype_and_nemotron_reads_it() -> None:
    """configs/granitemoehybrid.py builds its cache params without the config's dtype."""
    base = memacct.planner.load_model_preset("granite-4.0-h-small")
    declared = {**base, "mamba_ssm_dtype": "bfloat16"}
    plain = SGLANG.plan(KVCacheSpec.from_hf_config(base), 20 * GiB, settings())
    granite = SGLANG.plan(KVCacheSpec.from_hf_config(declared), 20 * GiB, settings())
    assert granite.kv_tokens == plain.kv_tokens
    qwen = memacct.planner.load_model_preset("qwen3-next-80b-a3b")
    per_slot = 36 * (QWEN_NEXT_CONV * 2 + QWEN_NEXT_SSM * 2)
    layout = SGLANG.plan(
        KVCacheSpec.from_hf_config({**qwen, "mamba_ssm_dtype": "bfloat16"}), 20 * GiB, settings())
    assert layout.kv_tokens == sglang_mamba(20 * GiB, per_slot, 5, 8192)[0]


def test_a_bad_ssm_dtype_is_refused() -> None:
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    with pytest.raises(InvalidInputError, match="float32, bfloat16, float16"):
        SGLANG.plan(qwen, 20 * GiB, settings(mamba_ssm_dtype="fp8"))


def test_running_requests_cap_the_concurrency() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    layout = SGLANG.plan(llama, 60 * GiB, settings(length=100))
    tokens = 60 * GiB // llama.bytes_per_token
    assert layout.max_running_requests == 4096 < tokens / 100
    assert layout.max_concurrency == 4096
    asked = SGLANG.plan(llama, 60 * GiB, settings(length=100, max_running_requests=300))
    assert (asked.max_running_requests, asked.max_concurrency) == (300, 300)


def test_plan_kv_cache_records_max_running_requests() -> None:
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    plan = memacct.plan_kv_cache(None, qwen, engine="sglang", kv_cache_memory_bytes=20 * GiB,
                                 max_model_len=8192)
    assert plan.max_running_requests is not None
    assert plan.max_concurrency == plan.max_running_requests < plan.kv_tokens / 8192
    assert f"max_running_requests={plan.max_running_requests}" in plan.report()
    again = memacct.KVCachePlan.model_validate_json(plan.model_dump_json())
    assert again.max_running_requests == plan.max_running_requests


def test_engine_options_reach_the_plan_and_other_engines_refuse_them() -> None:
    gpt = KVCacheSpec.from_preset("gpt-oss-20b")
    plan = memacct.plan_kv_cache(None, gpt, engine="sglang", kv_cache_memory_bytes=20 * GiB,
                                 max_model_len=8192, engine_options={"swa_full_tokens_ratio": 0.5})
    assert plan.kv_tokens == int(20 * GiB // (GPT_OSS_TOKEN * 12 * 1.5))
    with pytest.raises(InvalidInputError, match="vllm takes none"):
        memacct.plan_kv_cache(None, gpt, engine="vllm", kv_cache_memory_bytes=20 * GiB,
                              max_model_len=8192, engine_options={"swa_full_tokens_ratio": 0.5})
    with pytest.raises(InvalidInputError, match="swa_ratio"):
        memacct.plan_kv_cache(None, gpt, engine="sglang", kv_cache_memory_bytes=20 * GiB,
                              max_model_len=8192, engine_options={"swa_ratio": 0.5})


@pytest.mark.parametrize("dtype", ["fp8", "fp8_ds_mla"])
def test_kv_dtypes_sglang_has_no_name_for_are_refused(dtype: str) -> None:
    spec = KVCacheSpec.from_preset("llama-3.1-8b", kv_cache_dtype="fp8")
    if dtype != "fp8":
        spec = KVCacheSpec.from_preset("deepseek-v3", kv_cache_dtype=dtype)
    with pytest.raises(InvalidInputError, match="fp8_e5m2, fp8_e4m3"):
        SGLANG.plan(spec, 20 * GiB, settings())


def test_sglangs_fp8_names_are_accepted() -> None:
    for dtype in ("fp8_e4m3", "fp8_e5m2"):
        spec = KVCacheSpec.from_preset("llama-3.1-8b", kv_cache_dtype=dtype)
        assert SGLANG.plan(spec, 20 * GiB, settings()).kv_tokens == 20 * GiB // (32 * 8 * 256)


def test_offline_sglang_refuses_fp8_with_the_accepted_names() -> None:
    config = memacct.planner.load_model_preset("llama-3.1-8b")
    with pytest.raises(InvalidInputError, match="no fp8 alias"):
        plan_offline(config, engine="sglang", device="h100-80gb",
                                             kv_cache_dtype="fp8")


def test_the_modelled_release_is_data_and_another_is_refused() -> None:
    from memacct.engines.accepts import check_release

    assert getattr(get_engine("sglang").kv, "releases", None) == SGLANG_RELEASES == ("0.5.23",)
    check_release("sglang", "0.5.23")
    with pytest.raises(InvalidInputError, match="0.5.23"):
        check_release("sglang", "0.4.0")


MISTRAL_SMALL_3_1 = {
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 config.json (the sizes that matter here).
    "architectures": ["Mistral3ForConditionalGeneration"],
    "model_type": "mistral3",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
        "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0, "sliding_window": None,
    },
    "vision_config": {
        "model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096,
        "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 1540,
        "patch_size": 14, "num_channels": 3,
    },
    "spatial_merge_size": 2,
    "multimodal_projector_bias": False,
    "projector_hidden_act": "gelu",
}


def test_a_pool_under_one_full_length_request_says_what_sglang_does() -> None:
    """Mistral-Small-3.1 on an H100: SGLang starts with a pool under 131,072 tokens and warns."""
    plan = plan_offline(
        MISTRAL_SMALL_3_1, model_name="Mistral-Small-3.1", engine="sglang", device="h100-80gb")
    assert plan.fits and plan.kv_tokens < 131072
    assert "0 concurrent" not in plan.verdict
    assert "only warns" in plan.verdict and f"{plan.kv_tokens:,} tokens" in plan.verdict


def test_plain_pool_is_budget_over_cell_floored_to_the_page() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    budget = 10 * GiB + 12345
    assert SGLANG.plan(llama, budget, settings()).kv_tokens == budget // llama.bytes_per_token
    paged = SGLANG.plan(llama, budget, settings(page=64))
    assert paged.kv_tokens == budget // llama.bytes_per_token // 64 * 64
    assert paged.num_blocks == paged.kv_tokens // 64


def test_gemma2_gets_a_plain_pool_with_every_layer_at_full_size() -> None:
    gemma = KVCacheSpec.from_preset("gemma-2-9b")
    layout = SGLANG.plan(gemma, 20 * GiB, settings())
    assert layout.kv_tokens == 20 * GiB // gemma.bytes_per_token
    assert [g.kind for g in layout.groups] == ["full_pool"]


def test_a_pool_smaller_than_one_request_is_only_warned_about() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    layout = SGLANG.plan(llama, 1 * GiB, settings(131072))
    assert layout.kv_tokens < 131072
    assert any("only warns" in note for note in layout.notes)


def test_pipeline_extra_layers_go_to_the_last_stages() -> None:
    assert sglang_partition(61, 4) == (15, 15, 15, 16)
    assert sglang_partition(10, 4) == (2, 2, 3, 3)
    deepseek = KVCacheSpec.from_preset("deepseek-v3", pipeline_parallel_size=4)
    layout = SGLANG.plan(deepseek, 20 * GiB, settings())
    assert layout.kv_tokens == 20 * GiB // (16 * 576 * 2)


def test_max_running_requests_default() -> None:
    assert max_running_requests(1_000_000, 8192) == 4096
    assert max_running_requests(100_000, 131072) == 2048
    assert max_running_requests(3000, 8192) == 1500
    assert max_running_requests(1_000_000, 8192, mamba_cap=26) == 26


def test_a_budget_below_one_mamba_slot_is_refused() -> None:
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    with pytest.raises(InsufficientMemoryError, match="state pool"):
        SGLANG.plan(qwen, 1 << 20, settings())


def test_plan_kv_cache_dispatches_to_sglang_with_its_default_page() -> None:
    llama = KVCacheSpec.from_preset("llama-3.1-8b")
    p = memacct.plan_kv_cache(None, llama, engine="sglang", kv_cache_memory_bytes=20 * GiB,
                              max_model_len=8192)
    assert (p.engine, p.block_size, p.kv_tokens) == ("sglang", 1, 20 * GiB // (128 * 1024))
    assert p.report().splitlines()[-2].startswith("KV Cache is allocated. #tokens: ")


def test_resize_keeps_the_mamba_cap() -> None:
    qwen = KVCacheSpec.from_preset("qwen3-next-80b-a3b")
    plan = memacct.plan_kv_cache(None, qwen, engine="sglang", kv_cache_memory_bytes=20 * GiB,
                                 max_model_len=8192)
    smaller = plan.with_num_blocks(plan.num_blocks - 1000)
    assert smaller.max_running_requests == plan.max_running_requests


def test_the_cli_takes_swa_full_tokens_ratio_for_sglang_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memacct.cli import main

    base = ["plan", "--model", "gpt-oss-20b", "--kv-cache-memory-bytes", "20GiB",
            "--max-model-len", "8192", "--swa-full-tokens-ratio", "0.5"]
    assert main([*base, "--engine", "sglang"]) == 0
    tokens = int(20 * GiB // (GPT_OSS_TOKEN * 12 * 1.5))
    assert f"KV Cache is allocated. #tokens: {tokens}" in capsys.readouterr().out
    assert main([*base, "--engine", "vllm"]) == 2
    assert "--swa-full-tokens-ratio" in capsys.readouterr().err


def _golden() -> list[dict[str, object]]:
    import json
    from pathlib import Path

    lines = (Path(__file__).parent / "data/golden/sglang-0.5.23.json").read_text().splitlines()
    assert json.loads(lines[0])["sglang"] == "0.5.23"
    return [json.loads(line) for line in lines[1:]]


_METHODS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "STANDALONE": "draft_model"}


def _spec_row(row: dict[str, object]) -> dict[str, object]:
    """memacct's figures for a speculative row of the golden table."""
    from memacct.engines.deployment import Speculative
    from memacct.engines.sglang.speculative import draft_kv_layers, with_draft_pool

    model, tp = str(row["model"]), int(str(row["tensor_parallel_size"]))
    given = row["draft_config"]
    draft = dict(given) if isinstance(given, dict) else None
    method = "mtp" if draft is None else _METHODS[str(row["algorithm"])]
    speculative = Speculative(method=method, num_speculative_tokens=3, draft_config=draft)
    layers = draft_kv_layers(memacct.planner.load_model_preset(model), speculative)
    spec = with_draft_pool(KVCacheSpec.from_preset(model, tensor_parallel_size=tp), layers)
    page = int(str(row["page"]))
    layout = SGLANG.plan(spec, int(str(row["budget_bytes"])), KVSettings(
        max_model_len=int(str(row["max_model_len"])), block_size=page,
        engine_options={"speculative_algorithm": str(row["algorithm"])}))
    return {"draft_layers": layers, "cell": layout.block_bytes // page,
            "kv_tokens": layout.kv_tokens, "max_running_requests": layout.max_running_requests}


def test_golden_rows_of_sglangs_own_code_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """tools/golden_sglang.py ran SGLang 0.5.23's pool functions from its wheel."""
    monkeypatch.delenv("SGLANG_MAMBA_CONV_DTYPE", raising=False)
    rows = _golden()
    mismatches = []
    for row in rows:
        budget, model = int(str(row["budget_bytes"])), str(row["model"])
        if row["kind"] == "spec":
            got, want = _spec_row(row), {k: row[k] for k in ("draft_layers", "cell", "kv_tokens",
                                                            "max_running_requests")}
        elif row["kind"] == "swa":
            page, ratio = int(str(row["page"])), float(str(row["swa_full_tokens_ratio"]))
            options: dict[str, float | int | str] = {"swa_full_tokens_ratio": ratio}
            try:
                layout = SGLANG.plan(KVCacheSpec.from_preset(model), budget, KVSettings(
                    max_model_len=8192, block_size=page, engine_options=options))
            except InsufficientMemoryError:
                got: dict[str, object] = {"refused": True}
            else:
                swa = next(int(n.split()[2]) for n in layout.notes if n.startswith("sliding"))
                got = {"refused": False, "full_tokens": layout.kv_tokens, "swa_tokens": swa}
            want = {k: row[k] for k in got}
        else:
            env = row["ssm_env"]
            if env is None:
                monkeypatch.delenv("SGLANG_MAMBA_SSM_DTYPE", raising=False)
            else:
                monkeypatch.setenv("SGLANG_MAMBA_SSM_DTYPE", str(env))
            spec = KVCacheSpec.from_preset(
                model, tensor_parallel_size=int(str(row["tensor_parallel_size"])),
                pipeline_parallel_size=int(str(row.get("pipeline_parallel_size", 1))))
            layout = SGLANG.plan(spec, budget, KVSettings(
                max_model_len=int(str(row["max_model_len"])), block_size=1,
                enable_prefix_caching=bool(row["radix"])))
            got = {"kv_tokens": layout.kv_tokens,
                   "max_running_requests": layout.max_running_requests}
            want = {k: row[k] for k in got}
        if got != want:
            mismatches.append((row, got))
    assert len(rows) == 462
    assert sum(1 for r in rows if r.get("pipeline_parallel_size", 1) > 1) == 72
    assert sum(1 for r in rows if r["kind"] == "spec") == 156
    assert not mismatches, mismatches[:3]
