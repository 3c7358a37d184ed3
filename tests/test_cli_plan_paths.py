"""``memacct plan`` on every path: one plan type, options that apply or are refused, and the
defects of issue 23 rows 6-10 and 12 (each test failed on main da41e00)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import memacct
from memacct.cli import main
from memacct.units import GiB, MiB

# --------------------------------------------------------------------------- profiles


def _profile(tmp_path: Path, *, graphs: bool = False, tokens: int = 8192) -> Path:
    """A profile of 15 GiB of weights, a 2 GiB forward and (``graphs``) a 1 GiB graph pool,
    on a simulated H100, recording qwen2.5-7b at ``tokens`` batched tokens."""
    from memacct.sim import SimDevice

    dev = SimDevice("h100-80gb")
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    for _ in range(15):
        dev.malloc(GiB, persistent=True)
    setup = {"architecture": "qwen2", "model_name": "qwen2.5-7b", "tensor_parallel_size": 1,
             "max_num_batched_tokens": tokens, "max_num_seqs": 256}  # fmt: skip
    with memacct.memory_profiling(backend, baseline, truth_source="allocated_peak",
                                  profiled=setup) as session:  # fmt: skip
        dev.free(dev.malloc(2 * GiB))
        if graphs:
            with session.graphs("cudagraphs"):
                for _ in range(4):
                    dev.malloc(256 * MiB)
    return memacct.save_profile(session.result, tmp_path / "p.json")


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert main([*argv, "--json"]) == code
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


# ------------------------------------------------------------- one plan type, one schema


@pytest.mark.parametrize(
    "argv",
    [["--device", "h100"], ["--kv-cache-memory-bytes", "4GiB", "--max-model-len", "8192"],
     ["--device", "h100", "--kv-cache-memory-bytes", "20GiB"], ["--profile"]],
)  # fmt: skip
def test_every_path_prints_one_schema_with_its_format_version(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv == ["--profile"]:
        argv = ["--profile", str(_profile(tmp_path))]
    data = _json(capsys, ["plan", "--model", "qwen2.5-7b", *argv])
    plan = memacct.KVCachePlan.model_validate(data)
    assert data["format_version"] == memacct.planner.result.PLAN_FORMAT_VERSION == 4
    assert plan.fits and "groups" in data and "budget" in data and "verdict" in data


def test_the_weights_plus_a_given_cache_on_a_card(capsys: pytest.CaptureFixture[str]) -> None:
    # "Do the weights plus 20 GiB of KV fit on this card?" (refused before: drop --device).
    fits = _json(capsys, ["plan", "--model", "qwen2.5-7b", "--device", "h100",
                          "--kv-cache-memory-bytes", "20GiB"])  # fmt: skip
    assert fits["kv_cache_bytes"] == 20 * GiB and fits["total_memory"] == 85_029_158_912
    budget = fits["budget"]
    assert isinstance(budget, dict) and fits["target_allocation"] == (
        fits["non_kv_cache_memory"] + 20 * GiB)
    big = _json(capsys, ["plan", "--model", "qwen2.5-7b", "--device", "l4",
                         "--kv-cache-memory-bytes", "20GiB"], code=1)  # fmt: skip
    assert not big["fits"] and "exceed the 21.96GiB of the NVIDIA L4" in str(big["verdict"])


def test_auto_fit_max_model_len_works_offline(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _json(capsys, ["plan", "--model", "qwen2.5-7b", "--device", "h100",
                          "--max-model-len", "-1"])  # fmt: skip
    assert plan["fits"] and plan["max_model_len"] == 32768
    small = _json(capsys, ["plan", "--model", "llama-3.1-8b", "--device", "l4",
                           "--max-model-len", "-1"])  # fmt: skip
    assert small["fits"] and 0 < int(small["max_model_len"]) < 131072


def test_a_profile_plans_with_the_batch_it_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A profile taken at 2,048 tokens plans without repeating the flag (refused before).
    path = _profile(tmp_path, tokens=2048)
    plan = _json(capsys, ["plan", "--profile", str(path), "--model", "qwen2.5-7b"])
    assert plan["max_num_batched_tokens"] == 2048 and plan["max_num_seqs"] == 256


# ------------------------------------------------------- options apply or are refused


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine", "sglang", "--engine-version", "0.4.0"],
         "sglang 0.4.0 is not a release memacct models: it models sglang 0.5.23"),
        (["--engine-version", "0.6.3"], "vllm 0.6.3 is not a release memacct models"),
        (["--engine", "vllm-ascend", "--device", "h100"],
         "--engine vllm-ascend does not run on the NVIDIA H100"),
        (["--engine", "vllm-ascend", "--device", "910b", "--kv-cache-dtype", "fp8"],
         "vllm-ascend has no FP8 KV cache"),
        (["--block-size", "15"], "--block-size 15 is not one vllm accepts"),
        (["--kv-cache-memory-bytes", "2GiB", "--enforce-eager"],
         "--enforce-eager shapes the offline start-up estimate"),
        (["--engine", "tgi"], "'tgi' is not one of"),
        (["--device", "h100", "--kv-cache-memory-bytes", "20GiB", "--gpu-memory-utilization",
          "0.8"], "--gpu-memory-utilization does not apply with --kv-cache-memory-bytes"),
    ],
)  # fmt: skip
def test_an_option_that_does_not_apply_is_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--model", "qwen2.5-7b", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("option", ["--truth-source", "--allocator"])
def test_the_plan_has_no_option_that_exists_only_to_be_refused(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The truth source is chosen when profiling and the allocator is the simulated device's
    # (memacct bench): no plan takes either.
    assert main(["plan", "--model", "qwen2.5-7b", option, "reserved"]) == 2
    assert f"No such option '{option}'" in capsys.readouterr().err


def test_the_engine_choices_come_from_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    from memacct.engines import ENGINE_MODULES

    assert main(["plan", "--help"]) == 0
    shown = re.search(r"--engine \[([^\]]+)\]", " ".join(capsys.readouterr().out.split()))
    assert shown is not None and shown.group(1).split("|") == list(ENGINE_MODULES)


def test_the_api_refuses_a_block_size_vllm_refuses() -> None:
    from memacct.planner.offline import plan_offline
    from memacct.planner.options import PlanOptions

    spec = memacct.KVCacheSpec.from_hf_config(memacct.load_model_preset("qwen2.5-7b"))
    with pytest.raises(memacct.InvalidInputError, match="block_size 15 is not one vllm"):
        memacct.plan_kv_cache(None, spec, kv_cache_memory_bytes=GiB, block_size=15,
                              max_model_len=4096)  # fmt: skip
    with pytest.raises(memacct.InvalidInputError, match="block_size 15"):
        PlanOptions(block_size=15)
    # The options object is the API's: one keyword per option, an unknown one named.
    with pytest.raises(memacct.InvalidInputError, match="unknown plan option nosuch"):
        plan_offline(memacct.load_model_preset("qwen2.5-7b"), nosuch=1)


def test_the_batch_defaults_are_defined_once() -> None:
    # One owner: the engine's defaults (vLLM's batch_defaults), or what the profile recorded.
    root = Path(memacct.__file__).parent
    owners, others = [], []
    keyword = re.compile(r"(max_num_batched_tokens|max_num_seqs)\s*:\s*int\s*=\s*\d+\b"
                         r"|Field\(default=(8192|1024|256)\b|\bor (8192|1024|256)\b"
                         r"|_DEFAULT_(BATCHED_TOKENS|NUM_SEQS)")  # fmt: skip
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        name = str(path.relative_to(root))
        owners += [name] * text.count("return 8192, 1024")
        others += [f"{name}: {m.group(0)}" for m in keyword.finditer(text)]
    assert owners == ["engines/vllm/defaults.py"]
    assert others == []


# ------------------------------------------------------------------ issue 23, rows 6-12


def test_row6_a_profiles_graph_memory_is_drawn_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path, graphs=True)
    result = memacct.load_profile(path)
    assert result.cudagraph_memory == GiB
    svg = tmp_path / "plan.svg"
    argv = ["plan", "--profile", str(path), "--model", "qwen2.5-7b", "--plot", str(svg)]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert re.search(r"CUDA graphs\s+│\s+1\.00", table)
    assert re.search(r"^cudagraph_memory\s+1\.00GiB$", table, re.M)  # the report lists it
    assert "CUDA graphs: 1.00 GiB" in svg.read_text()
    from memacct.plot import GRAPHS, breakdown

    spec = memacct.KVCacheSpec.from_hf_config(memacct.load_model_preset("qwen2.5-7b"))
    plan = memacct.plan_kv_cache(result, spec)
    parts = dict(breakdown(plan, result))
    assert parts[GRAPHS] == GiB and sum(parts.values()) == plan.total_memory


def test_row7_the_table_the_plot_and_the_json_use_one_set_of_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svg = tmp_path / "plan.svg"
    base = ["plan", "--model", "qwen2.5-7b", "--device", "h100"]
    plan = _json(capsys, base)
    assert main([*base, "--plot", str(svg)]) == 0
    table = capsys.readouterr().out
    text = svg.read_text()
    assert "non-torch" not in table and "non-allocator" in table and "non-allocator" in text
    for term, field in (("activation peak", "activation_peak"), ("CUDA graphs",
                                                                "cudagraph_memory")):  # fmt: skip
        gib = f"{int(plan[field]) / GiB:.2f}"
        assert f"{term}: {gib} GiB" in text, term  # the plot's legend: the JSON's figure
        row = next(line for line in table.splitlines() if term in line)
        assert gib in row and field in row  # the table's row: the same figure, its field


def test_row8_a_model_that_does_not_fit_says_so_and_by_how_much(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svg = tmp_path / "plan.svg"
    base = ["plan", "--model", "llama-3.1-70b", "--device", "h100"]
    assert main([*base, "--plot", str(svg)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("does not fit: the weights alone (131.45GiB per rank) exceed "
                          "71.27GiB (0.9 of 79.19GiB) by 60.18GiB")  # fmt: skip
    assert not re.search(r"KV cache\s+│?\s*-", out) and "−" not in out
    plan = _json(capsys, base, code=1)
    short = int(plan["shortfall_bytes"])
    assert not plan["fits"] and short > 60 * GiB and plan["kv_cache_used_bytes"] == 0
    assert f"none, {short / GiB:.2f}GiB short of one request" in out
    text = svg.read_text()
    assert f"does not fit: {short / GiB:.2f} GiB short" in text and "device total" in text


def test_row9_a_config_file_is_named_after_its_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = memacct.load_model_preset("qwen2.5-7b")
    named = tmp_path / "a" / "config.json"
    named.parent.mkdir()
    named.write_text(json.dumps({**config, "_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}))
    bare = tmp_path / "my-qwen" / "config.json"
    bare.parent.mkdir()
    bare.write_text(json.dumps({k: v for k, v in config.items() if k != "_name_or_path"}))
    for path, name in ((named, "Qwen/Qwen2.5-7B-Instruct"), (bare, "my-qwen")):
        plan = _json(capsys, ["plan", "--model", str(path), "--device", "h100"])
        assert plan["model"] == name
    from memacct.model.sources.resolve import config_file_name

    orphan = {"architectures": ["Qwen2ForCausalLM"]}
    assert config_file_name(orphan, Path("/config.json")) == "Qwen2ForCausalLM"


def _suggestions(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    plan = _json(capsys, ["plan", *argv], code=1)
    assert not plan["fits"]
    suggestions: list[str] = plan["suggestions"]
    return suggestions


def test_row10_suggestions_close_the_gap_on_that_device(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 131 GiB of weights against a 71 GiB budget: neither an FP8 KV cache, nor eager mode,
    # nor utilization 0.95 closes that; more ranks do.
    big = _suggestions(capsys, ["--model", "llama-3.1-70b", "--device", "h100"])
    assert big and big[0].startswith("raise --tensor-parallel-size to ")
    assert not any(s.startswith(("store the KV", "--enforce-eager", "raise --gpu-memory"))
                   for s in big)  # fmt: skip
    # Weights just over the budget: an FP8 checkpoint closes it on an Ada L4, not on a T4
    # (Turing has no FP8).
    l4 = _suggestions(capsys, ["--model", "qwen2.5-7b", "--device", "l4",
                               "--gpu-memory-utilization", "0.6"])  # fmt: skip
    t4 = _suggestions(capsys, ["--model", "qwen2.5-7b", "--device", "t4"])
    assert any("FP8 checkpoint (the NVIDIA L4 runs FP8 weights)" in s for s in l4)
    assert not any("FP8" in s and "checkpoint" in s for s in t4)
    for suggestion in big + l4 + t4:  # each with the figure it gives
        assert re.search(r"\d", suggestion), suggestion


def test_row12_cli_errors_name_the_cli_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path)
    argv = ["plan", "--profile", str(path), "--model", "qwen2.5-7b", "--tensor-parallel-size",
            "2"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--allow-mismatch" in err and "allow_mismatch=True" not in err
    assert "--tensor-parallel-size: profiled 1, planned 2" in err
    from memacct.cli.flags import cli_wording

    assert cli_wording("unless asked: pass name='sim' to get_backend") == (
        "unless asked: pass --backend sim to get_backend")
    # A keyword inside a path or a longer name is left alone.
    assert cli_wording("see docs/max_model_len.md and engine_options") == (
        "see docs/max_model_len.md and engine_options")


# ---------------------------------------------------------------- capacity plan (issue 22)

CAPACITY = ["plan", "--model", "llama-3.1-70b", "--device", "h100,a100-80gb,l4",
            "--tensor-parallel-size", "1,2,4,8"]  # fmt: skip


def test_a_capacity_plan_is_one_table_marking_the_smallest_that_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "capacity.png"
    assert main([*CAPACITY, "--min-concurrency", "4", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"│ (h100|a100|l4)", line)]
    assert len(rows) == 12
    marked = [line for line in rows if "<- smallest serving" in line]
    assert len(marked) == 1 and "h100-80gb" in marked[0] and "│  8 │" in marked[0]
    assert "smallest configuration serving 4 requests: h100-80gb x 8" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*CAPACITY, "--min-concurrency", "50"]) == 1  # nothing here serves 50


def test_a_capacity_plan_prints_a_list_in_json_and_answers_quickly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import time

    from memacct.planner.offline import plan_capacity

    assert main([*CAPACITY, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and len(data) == 12
    one = next(row for row in data if row["device"] == "h100-80gb"
               and row["tensor_parallel_size"] == 4)  # fmt: skip
    plan = memacct.KVCachePlan.model_validate(one["plan"])
    single = _json(capsys, ["plan", "--model", "llama-3.1-70b", "--device", "h100",
                            "--tensor-parallel-size", "4"])  # fmt: skip
    assert one["fits"] and plan.num_blocks == single["num_blocks"]
    config = memacct.load_model_preset("llama-3.1-70b")
    start = time.process_time()
    plan_capacity(config, ("h100", "a100-80gb", "l4", "t4"), (1, 2, 4, 8))
    assert time.process_time() - start < 2.0  # 4 devices x 4 degrees (issue 22)


def test_a_new_serve_flag_is_one_click_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A click option named after a `vllm serve` setting the deployment takes reaches the plan
    # with nothing else written, and is refused where nothing is estimated.
    import click

    from memacct.cli.plan import plan_cmd

    option = click.Option(["--cpu-offload-gb"], type=float, default=0.0)
    params = [p for p in plan_cmd.params if p.name != "cpu_offload_gb"]  # the shipped one
    monkeypatch.setattr(plan_cmd, "params", [*params, option])
    base = ["plan", "--model", "qwen2.5-7b", "--device", "h100"]
    plain = _json(capsys, base)
    offloaded = _json(capsys, [*base, "--cpu-offload-gb", "4"])
    assert offloaded["weights_memory"] < plain["weights_memory"]
    assert main(["plan", "--model", "qwen2.5-7b", "--kv-cache-memory-bytes", "2GiB",
                 "--cpu-offload-gb", "4"]) == 2  # fmt: skip
    assert "--cpu-offload-gb shapes the offline start-up estimate" in capsys.readouterr().err
