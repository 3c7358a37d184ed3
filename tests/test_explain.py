"""``memacct explain``: real start-up logs read figure by figure, planned as ``memacct plan``."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from memacct.cli import main
from memacct.explain import NoMemoryLinesError, read_log
from memacct.explain.reading import read_setup
from memacct.explain.terms import explain
from memacct.explain.text import clean_lines

DATA = Path(__file__).parent / "data" / "explain"
EXPECTED: list[dict[str, Any]] = json.loads((DATA / "expected.json").read_text())["cases"]
WITH_FIGURES = [c for c in EXPECTED if not c.get("no_memory_lines")]
SCALE = {"GiB": 2**30, "GB": 2**30, "MiB": 2**20, "B": 1}


def _text(case: dict[str, Any]) -> str:
    return (DATA / str(case["log"])).read_text()


def test_the_set_holds_real_cited_logs_across_engines() -> None:
    assert len(WITH_FIGURES) >= 15
    assert {c["engine"] for c in WITH_FIGURES} >= {"vllm", "vllm-ascend", "sglang"}
    assert {c["era"] for c in WITH_FIGURES if c["engine"] == "vllm"} == {"V0", "V1"}
    on_disk = {p.name for p in DATA.glob("*.log")}
    assert on_disk == {c["log"] for c in EXPECTED}
    for case in EXPECTED:
        assert case["source"].startswith("https://github.com/"), case["log"]


def test_docs_cite_every_log_with_its_source() -> None:
    page = (Path(__file__).parents[1] / "docs" / "explain.md").read_text()
    for case in EXPECTED:
        assert f"| `{case['log']}` |" in page and case["source"] in page, case["log"]


@pytest.mark.parametrize("case", WITH_FIGURES, ids=lambda c: c["log"])
def test_every_printed_figure_is_read_exactly(case: dict[str, Any]) -> None:
    reading = read_log(_text(case), case["log"])
    assert {name: fig.text() for name, fig in reading.figures.items()} == case["figures"]
    for name, printed in case["figures"].items():
        digits, _, unit = printed.partition(" ")
        fig = reading.figures[name]
        if unit:  # bytes from the printed digits, exact: 8.11 GiB is 8.11 x 2**30
            assert fig.bytes == int((Decimal(digits) * SCALE[unit]).to_integral_value()), name
        else:
            assert Decimal(fig.printed) == Decimal(digits) and fig.value == float(digits)
    assert reading.kv_pools == case.get("kv_pools", reading.kv_pools)


@pytest.mark.parametrize("case", EXPECTED, ids=lambda c: c["log"])
def test_the_engine_release_and_settings_are_read(case: dict[str, Any]) -> None:
    setup = read_setup(_text(case))
    assert (setup.engine, setup.engine_version, setup.era) == (
        case["engine"], case["engine_version"], case["era"])  # fmt: skip
    assert setup.settings == case["settings"]
    assert setup.device == case.get("device")


def test_releases_are_read_from_each_wording() -> None:
    releases = {c["log"]: c["engine_version"] for c in EXPECTED if c["engine_version"]}
    assert releases == {
        "vllm-10517-llama31-70b-v054-config-only.log": "0.5.4",  # Initializing an LLM engine
        "vllm-12529-v074dev-llama31-8b-int8-config.log": "0.7.4.dev390+gdebd6bbf",  # V0 engine
        "vllm-24162-v0102dev-qwen25-05b-tp2-config.log": "0.10.2.dev378+g4d7fe40fc.d20250829",
        "vllm-ascend-14274-qwen3-0.6b-310p.log": "0.22.1rc1",  # the container image's tag
        "vllm-8031-v083-mistral-small-awq-config.log": "0.8.3",  # the line's prefix cut
        "vllm-club3090-612-v0240-qwen36-35b-nvfp4-rtx5090.log": "0.24.0",
    }


@pytest.mark.parametrize(("line", "engine", "version"), [
    ("vLLM Version                 : 0.10.1.1\nGPU KV cache size: 10 tokens", "vllm", "0.10.1.1"),
    ("[pip3] vllm==0.9.2\n[pip3] vllm-flash-attn==2.6.1\nGPU KV cache size: 1 tokens", "vllm",
     "0.9.2"),
    ("vLLM Version: 0.9.1\nvLLM Ascend Version: 0.9.1rc2\n# npu blocks: 3", "vllm-ascend",
     "0.9.1rc2"),
    ("vLLM API server version 0.9.1\n# npu blocks: 3", "vllm-ascend", "0.9.1"),
    ("sglang: 0.4.6.post1\nKV Cache is allocated. #tokens: 5, K size: 1 GB, V size: 1 GB",
     "sglang", "0.4.6.post1"),
])  # fmt: skip
def test_a_release_is_read_where_an_environment_dump_names_it(
    line: str, engine: str, version: str
) -> None:
    reading = read_log(line)
    assert (reading.engine, reading.engine_version) == (engine, version)


def test_vllm_mindspore_is_told_by_its_cpu_binding_line() -> None:
    reading = read_log(
        "INFO 05-01 10:00:00 [worker.py:150] bind process 4242 in rank 0 to cpu: [0, 1, 2]\n"
        "INFO 05-01 10:00:09 [gpu_worker.py:230] Available KV cache memory: 20.50 GiB\n"
    )
    assert (reading.engine, reading.era) == ("vllm-mindspore", "V1")


def test_the_logged_terms_are_bytes_and_v0_activation_is_the_peak_less_the_weights() -> None:
    reading = read_log((DATA / "vllm-10517-llama31-8b-rtx3090-20k.log").read_text())
    logged = reading.logged
    gib = 2**30
    assert logged["weights_memory"] == round(Decimal("14.9888") * gib)
    # vLLM 0.6.4 printed peak_torch_memory with the weights in it: 17.06 GiB - 14.9888 GB.
    assert logged["activation_peak"] == round(Decimal("17.06") * gib) - round(
        Decimal("14.9888") * gib)  # fmt: skip
    assert logged["kv_cache_bytes"] == round(Decimal("3.81") * gib)
    assert (logged["num_blocks"], logged["max_concurrency"]) == (1952, 1.56)
    assert reading.max_model_len == 20000  # from "Maximum concurrency for 20000 tokens"


def test_sglang_takes_rank_zeros_first_pool_and_counts_the_draft_pool_apart() -> None:
    reading = read_log((DATA / "sglang-club3090-1261-nvfp4-tp2-rtx5090.log").read_text())
    assert reading.figures["kv_cache_bytes"].text() == "6.92 GB"  # 3.46 + 3.46, not 1.08
    assert reading.kv_pools == 2
    assert reading.ranks == (0, 1)


def test_prefixes_come_off_and_ranks_are_kept() -> None:
    text = (
        "[2025-08-12T08:42:39Z] (EngineCore_0 pid=13564) INFO 08-12 01:42:39 "
        "[gpu_model_runner.py:1985] Model loading took 2.8871 GiB and 5.96 seconds\n"
        "(Worker_TP3 pid=9) INFO 05-08 16:18:24 [gpu_model_runner.py:4960] Model loading took "
        "1 GiB\n"
        "[2025-10-16 09:06:22 DP1 TP2] KV Cache is allocated. #tokens: 5, K size: 1 GB\n"
        "INFO 12-13 19:54:18 worker.py:243] model weights take   14.96GiB\n"
        "(pid=4242, ip=10.0.0.2) INFO 01-01 00:00:00 worker.py:1] # GPU blocks: 7\n"
        "[rank1]: INFO 01-01 00:00:00 [worker.py:2] # npu blocks: 8\n"
        "(VllmWorker TP5 pid=77) INFO 01-01 00:00:00 [gpu_worker.py:3] # GPU blocks: 9\n"
    )
    lines = clean_lines(text)
    assert [line.text.split(" took")[0] for line in lines[:2]] == ["Model loading"] * 2
    assert [line.rank for line in lines] == [None, 3, 2, None, None, 1, 5]
    assert lines[3].text == "model weights take   14.96GiB"
    assert [line.text for line in lines[4:]] == ["# GPU blocks: 7", "# npu blocks: 8",
                                                 "# GPU blocks: 9"]


def test_a_wrapped_config_line_and_a_continued_command_are_joined() -> None:
    setup = read_setup(
        "vllm serve org/m \\\n  --tensor-parallel-size 2 \\\n  --max-model-len 4096\n"
        "Initializing a V1 LLM engine (v0.9.2) with config: model='org/m', enable_prefix_cach\n"
        "ing=True, tensor_parallel_size=2, max_seq_len=8192, gpu_memory_utilization=0.8\n"
    )
    assert setup.engine_version == "0.9.2"
    # The engine's resolved line wins over the command line the user typed.
    assert setup.settings["max_model_len"] == 8192
    assert setup.settings["enable_prefix_caching"] is True
    assert setup.settings["gpu_memory_utilization"] == 0.8


def test_vllm_serve_flags_reach_the_plan_and_defaults_stay_out() -> None:
    from memacct.explain.request import plan_request

    reading = read_log(
        "vllm serve org/m --enable-expert-parallel --data-parallel-size 1 --dtype half "
        "--quantization awq -tp 2\nAvailable KV cache memory: 1.00 GiB\n"
    )
    flags = plan_request(reading).flags
    assert flags["enable_expert_parallel"] is True and flags["dtype"] == "float16"
    assert flags["tensor_parallel_size"] == 2
    # awq comes with its checkpoint (read from it); a data parallel size of 1 is the default.
    assert "quantization" not in flags and "data_parallel_size" not in flags


def test_a_figure_keeps_its_printed_precision() -> None:
    fig = read_log("Available KV cache memory: 8.11 GiB").figures["kv_cache_bytes"]
    assert (fig.decimals, fig.resolution_bytes) == (2, 2**30 // 200)
    assert abs(fig.bytes - 8.11 * 2**30) < 1


_HALF_H100 = str(int((Decimal("39.19") * 2**30).to_integral_value()))


@pytest.mark.parametrize(("total", "flag"), [("79.19", {"device": "h100-80gb"}),
                                             ("39.19", {"device_memory": _HALF_H100})])
def test_a_named_device_is_planned_for_where_its_total_agrees(
    total: str, flag: dict[str, str]
) -> None:
    from memacct.explain.request import plan_request

    reading = read_log(
        f"GPU 0: NVIDIA H100 80GB HBM3\nFree memory on device (30.00/{total} GiB) on startup. "
        "Desired GPU memory utilization is (0.9, 30.00 GiB)."
    )
    flags = plan_request(reading).flags
    assert {k: flags[k] for k in flag} == flag
    assert len({"device", "device_memory"} & set(flags)) == 1


def test_a_budget_given_in_bytes_is_planned_in_bytes() -> None:
    from memacct.explain.request import plan_request

    reading = read_log(
        "(EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [gpu_worker.py:250] Initial free memory "
        "78.50 GiB, reserved 20.00 GiB memory for KV Cache as specified by kv_cache_memory_bytes "
        "config and skipped memory profiling."
    )
    assert reading.logged["kv_cache_bytes"] == 20 * 2**30
    flags = plan_request(reading, model="qwen3-8b").flags
    assert flags["kv_cache_memory_bytes"] == 20 * 2**30 and "gpu_memory_utilization" not in flags


def test_older_sglang_weights_are_the_free_memory_the_load_took() -> None:
    reading = read_log(
        "[2024-08-01 10:00:00 TP0] Load weight begin. avail mem=78.58 GB\n"
        "[2024-08-01 10:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=63.54 GB\n"
    )
    assert reading.figures["weights_memory"].text() == "15.04 GB"


@pytest.mark.parametrize(("named", "preset"), [("NVIDIA H100 80GB HBM3", "h100-80gb"),
                                               ("NVIDIA A100-SXM4-40GB", "a100-40gb")])
def test_the_device_a_log_names_is_planned_for(named: str, preset: str) -> None:
    from memacct.explain.request import plan_request

    reading = read_log(
        f"GPU models and configuration: GPU 0: {named}\nvllm serve Qwen/Qwen3-8B --max-model-len "
        "8192\nModel loading took 15.27 GiB and 3.1 seconds\n"
        "Using FlashInfer for top-p & top-k sampling\n"
    )
    assert reading.device == named
    flags = plan_request(reading).flags
    assert flags["device"] == preset and flags["sampler"] == "flashinfer"


@pytest.mark.parametrize("case", [c for c in EXPECTED if c.get("no_memory_lines")],
                         ids=lambda c: c["log"])  # fmt: skip
def test_a_log_without_memory_lines_is_one_line_exit_2(
    case: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(NoMemoryLinesError, match="no memory lines"):
        read_log(_text(case), case["log"])
    assert main(["explain", str(DATA / case["log"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "no memory lines" in err


@pytest.mark.parametrize("argv", [["/nonexistent/start.log"], ["a.log", "b.log", "c.log"]])
def test_bad_arguments_are_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memacct: error:") and err.count("\n") == 1


def test_an_empty_stdin_says_it_is_empty(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["explain", "-"]) == 2
    assert "it is empty" in capsys.readouterr().err


def _explained(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(["explain", *argv, "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


PLANNED = [
    ("vllm-10517-llama31-8b-rtx3090-29k.log", "llama-3.1-8b"),
    ("vllm-29830-free-memory-debug-l40s.log", "qwen3-8b"),
    ("vllm-ascend-8289-npu-graph-suggestion.log", "qwen2.5-7b"),
    ("sglang-vllm-21348-qwen3-235b-fp8-tp4-h100.log", "qwen3-30b-a3b"),
]


@pytest.mark.parametrize(("log", "model"), PLANNED)
def test_the_plan_side_is_memacct_plan_with_the_settings_read(
    log: str, model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _explained(capsys, [str(DATA / log), "--model", model])
    assert set(data) >= {"engine", "engine_version", "settings", "logged", "plan", "terms",
                         "suggestions"}  # fmt: skip
    argv = data["plan_command"].split()[2:]
    assert argv[:2] == ["--model", model]
    code = main(["plan", *argv, "--json"])
    assert code in (0, 1)  # 1: the plan says the start does not fit, as the log did
    assert json.loads(capsys.readouterr().out) == data["plan"]


@pytest.mark.parametrize("case", WITH_FIGURES, ids=lambda c: c["log"])
def test_every_logs_plan_is_memacct_plans_or_both_refuse(
    case: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    data = _explained(capsys, [str(DATA / case["log"]), "--model", "llama-3.1-8b"])
    code = main(["plan", *shlex.split(data["plan_command"])[2:], "--json"])
    out, err = capsys.readouterr()
    if data["plan"] is None:  # the planner refused the settings read: memacct plan does too
        assert code == 2 and err.startswith("memacct: error:"), data["plan_error"]
    else:
        assert code in (0, 1) and json.loads(out) == data["plan"]
    for term in data["terms"]:
        known = term["logged"] and term["difference"] is not None
        if known and abs(term["difference"]) / abs(term["logged"]) > 0.05:
            assert term["why"], term


def test_the_contract_keys_and_every_term_beyond_five_percent_has_a_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for log, model in PLANNED:
        data = _explained(capsys, [str(DATA / log), "--model", model])
        assert set(data["logged"]) == {"weights_memory", "activation_peak",
                                       "non_allocator_increase", "cudagraph_memory",
                                       "kv_cache_bytes", "num_tokens", "num_blocks",
                                       "max_concurrency", "total_memory"}  # fmt: skip
        for term in data["terms"]:
            assert set(term) == {"term", "logged", "planned", "difference", "why"}
            known = term["logged"] and term["difference"] is not None
            if known and abs(term["difference"]) / abs(term["logged"]) > 0.05:
                assert term["why"], (log, term)


def test_the_kv_budgets_why_splits_its_difference_into_the_terms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _explained(capsys, [str(DATA / "vllm-10517-llama31-8b-rtx3090-29k.log"),
                               "--model", "llama-3.1-8b"])  # fmt: skip
    kv = next(t for t in data["terms"] if t["term"] == "kv_cache_bytes")
    assert "activation peak +" in kv["why"] and "V0" in kv["why"]


def test_the_suggestions_reproduce_the_run_and_fit_what_was_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _explained(capsys, [str(DATA / "vllm-10517-llama31-8b-rtx3090-29k.log"),
                               "--model", "llama-3.1-8b"])  # fmt: skip
    kv = data["logged"]["kv_cache_bytes"]
    assert any(s.startswith(f"--kv-cache-memory-bytes {kv} ") for s in data["suggestions"])
    # The log refused 29,000 tokens; the utilization suggested must plan a start that fits.
    util = next(s for s in data["suggestions"] if s.startswith("--gpu-memory-utilization"))
    argv = data["plan_command"].split()[2:]
    at = argv.index("--gpu-memory-utilization")
    argv[at + 1] = util.split()[1]
    assert main(["plan", *argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True


def test_the_longest_request_of_the_logged_budget_is_the_engines_own_figure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # vLLM refused 29,000 tokens: "the maximum number of tokens that can be stored in KV
    # cache (23648)". memacct's KV manager, given the logged 2.89 GiB, says the same.
    data = _explained(capsys, [str(DATA / "vllm-10517-llama31-8b-rtx3090-29k.log"),
                               "--model", "llama-3.1-8b"])  # fmt: skip
    assert data["logged"]["num_tokens"] == 23648
    assert any(s.startswith("--max-model-len 23648 ") for s in data["suggestions"])


def test_a_refused_start_the_plan_fits_is_named_not_advised_down(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The log's budget is negative (vllm-ascend#9372); a smaller model's plan fits: the
    # advice is not a lower utilization but that the terms differ.
    data = _explained(capsys, [str(DATA / "vllm-ascend-9372-qwen3-14b-vnpu32.log"),
                               "--model", "qwen3-8b", "--device-memory", "32GiB"])  # fmt: skip
    assert data["plan"]["fits"] is True and data["logged"]["kv_cache_bytes"] < 0
    assert not any(s.startswith("--gpu-memory-utilization") for s in data["suggestions"])
    assert any("where the engine did not" in s for s in data["suggestions"])


def test_a_log_naming_no_model_still_explains_its_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _explained(capsys, [str(DATA / "vllm-14447-v0-worker-tp-rtx3090.log")])
    assert data["plan"] is None and "pass --model" in " ".join(data["notes"])
    assert data["logged"]["kv_cache_bytes"] == round(Decimal("1.57") * 2**30)


def test_a_local_model_path_gets_a_hint_and_stdin_is_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    text = (DATA / "vllm-21348-qwen3-235b-fp8-tp4-h100.log").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    data = _explained(capsys, ["-"])
    assert data["log"] == "-" and data["logged"]["num_tokens"] == 178880
    assert any("org/Qwen3-235B-A22B-FP8" in note for note in data["notes"])


def test_two_logs_name_what_moved(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (str(DATA / f"vllm-10517-llama31-8b-rtx3090-{n}.log") for n in ("20k", "29k"))
    data = _explained(capsys, [a, b])
    moved = data["moved"]
    assert "max_model_len: 20000 -> 29000" in moved
    assert any(line.startswith("activation_peak 2.07 GiB -> 2.99 GiB") for line in moved)
    assert not any(line.startswith("weights_memory") for line in moved)


def test_two_engines_name_their_rules(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (str(DATA / f"{p}vllm-21348-qwen3-235b-fp8-tp4-h100.log") for p in ("", "sglang-"))
    moved = _explained(capsys, [a, b])["moved"]
    assert moved[0] == "engine: vllm (release not named) -> sglang (release not named)"
    assert any("--mem-fraction-static" in line for line in moved)
    assert "kv_cache_bytes 8.11 GiB -> 16.46 GiB (+8.35 GiB, +103.0%)" in moved


def test_the_plot_draws_logged_beside_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    svg = tmp_path / "terms.svg"
    argv = [str(DATA / "vllm-29830-free-memory-debug-l40s.log"), "--model", "qwen3-8b"]
    assert main(["explain", *argv, "--plot", str(svg)]) == 0
    drawn = svg.read_text()
    assert "logged: " in drawn and "planned: qwen3-8b" in drawn


def test_explain_reuses_the_plan_function_not_a_copy() -> None:
    reading = read_log((DATA / "vllm-29830-free-memory-debug-l40s.log").read_text())
    done = explain(reading, model="qwen3-8b")
    from memacct.planner.offline import plan_offline
    from memacct.planner.options import PlanOptions

    options = PlanOptions(engine="vllm", device_memory=done.plan.total_memory,
                          gpu_memory_utilization=0.9)
    again = plan_offline("qwen3-8b", options)
    assert again == done.plan
