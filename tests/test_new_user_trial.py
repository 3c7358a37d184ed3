"""A new user's and an attacker's trial of ``memacct plan`` and the planning API.

A matrix of ``memacct plan`` invocations (every preset on several devices and engines,
edge values of every option, hostile profiles and model files, capacity plans) and of
API calls with wrong types found these; each test reproduces one finding and failed on
the code the trial ran against. docs/reliability.md ("A new user's trial") lists them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from memacct import ConfigError, InvalidInputError, MemacctError, ProfileResult
from memacct.cli import main
from memacct.planner import KVCacheSpec, load_model_preset, load_profile, save_profile
from memacct.planner.offline import plan_capacity, plan_offline, smallest_serving
from memacct.planner.options import PlanOptions

QWEN = ["plan", "--model", "qwen2.5-7b"]
HUB_ID = "Qwen/Qwen2.5-7B-Instruct"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``memacct argv``: exit code, stdout, stderr (an exception fails the test)."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub cannot be imported: a Hub id of a shipped preset falls back to it."""
    for name in [m for m in sys.modules if m.split(".")[0] == "huggingface_hub"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)


def _fallback_note(notes: Any) -> bool:
    return any("shipped preset qwen2.5-7b" in note for note in notes)


def test_model_source_notes_reach_the_plan_and_its_json(
    no_hub: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The resolver's notes (a preset planned for an unreadable Hub id) were printed to
    stderr and lost: the plan's notes and the JSON did not say what was planned."""
    code, out, _ = run(["plan", "--model", HUB_ID, "--device", "h100", "--json"], capsys)
    assert code == 0
    assert _fallback_note(json.loads(out)["notes"])
    code, out, _ = run(["plan", "--model", HUB_ID, "--kv-cache-memory-bytes", "20GiB",
                        "--json"], capsys)  # fmt: skip
    assert code == 0 and _fallback_note(json.loads(out)["notes"])
    code, out, _ = run(["plan", "--model", HUB_ID, "--device", "h100,l4", "--json"], capsys)
    assert code == 0 and all(_fallback_note(row["plan"]["notes"]) for row in json.loads(out))
    assert _fallback_note(plan_offline(HUB_ID, device="l4").notes)


def test_table_prints_the_source_note_once(
    no_hub: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["plan", "--model", HUB_ID, "--device", "h100"], capsys)
    assert code == 0
    assert (out + err).count("could not be read from the Hub") == 1


def test_vanishing_utilization_is_a_refused_plan_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--gpu-memory-utilization 1e-300`` rounds the target to 0 bytes: a pydantic
    ValidationError of KVCachePlan reached the user as a traceback."""
    code, out, _ = run([*QWEN, "--device", "h100", "--gpu-memory-utilization", "1e-300",
                        "--json"], capsys)  # fmt: skip
    plan = json.loads(out)
    assert code == 1 and plan["fits"] is False and plan["target_allocation"] == 0


@pytest.mark.parametrize(("model", "device"), [
    ("llama-4-scout", "l4"), ("qwen2.5-7b", "t4"), ("mixtral-8x7b", "l4"),
    pytest.param("qwen3-next-80b-a3b", "a100-40gb", marks=pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="its linear-attention weights are sized on the meta device, which needs torch "
        "(the core-only pass has none)")),
])  # fmt: skip
def test_tensor_parallel_advice_names_only_degrees_the_model_accepts(
    model: str, device: str
) -> None:
    """A refused plan suggested ``--tensor-parallel-size`` 16 or 64 for models whose heads
    it does not divide (Llama 4 Scout's 40): following the advice was an error."""
    plan = plan_offline(model, device=device)
    assert not plan.fits
    config = load_model_preset(model)
    for suggestion in plan.suggestions:
        if suggestion.startswith("raise --tensor-parallel-size to "):
            degree = int(suggestion.split()[3])
            KVCacheSpec.from_hf_config(config, tensor_parallel_size=degree)  # accepted
            assert plan_offline(model, device=device, tensor_parallel_size=degree).fits


def test_no_tensor_parallel_advice_when_no_degree_helps() -> None:
    plan = plan_offline("qwen2.5-7b", device="h100", gpu_memory_utilization=1e-300)
    assert not any("--tensor-parallel-size" in s for s in plan.suggestions)


@pytest.mark.parametrize(("call", "named"), [
    (lambda: plan_offline(None, device="l4"), "NoneType"),  # type: ignore[arg-type]
    (lambda: plan_offline(7, device="l4"), "int"),  # type: ignore[arg-type]
    (lambda: plan_offline("", device="l4"), "''"),
    (lambda: plan_offline("qwen2.5-7b", {"device": "l4"}), "dict"),  # type: ignore[arg-type]
    (lambda: plan_offline("qwen2.5-7b", device="l4", kv_cache_dtype=None), "kv_cache_dtype"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", kv_cache_dtype=8), "kv_cache_dtype"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", engine=["vllm"]), "engine"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", enforce_eager="yes"), "enforce_eager"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", enforce_eager=None), "enforce_eager"),
    (lambda: plan_offline("qwen2.5-7b", device=""), "device ''"),
    (lambda: plan_offline("qwen2.5-7b", device=5), "device"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", gpu_memory_utilization="0.9"),
     "gpu_memory_utilization"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", gpu_memory_utilization=math.nan),
     "gpu_memory_utilization"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", swa_full_tokens_ratio="0.5"),
     "swa_full_tokens_ratio"),
    (lambda: plan_offline("qwen2.5-7b", device="l4", engine_version=0.11), "engine_version"),
    (lambda: plan_offline("qwen2.5-7b", kv_cache_memory_bytes=10**24), "10000000000000000"),
    (lambda: plan_offline("qwen2.5-7b", device_memory=10**24), "device_memory"),
])  # fmt: skip
def test_api_arguments_of_the_wrong_type_are_memacct_errors_naming_them(
    call: Any, named: str
) -> None:
    """A wrong type reached deep code: AttributeError ('NoneType' has no attribute 'strip'),
    TypeError (os.fspath, unhashable list, dataclasses.replace), pydantic ValidationError
    (MemoryBudget.enforce_eager); a 10**24-byte budget planned a 931 PiB cache."""
    with pytest.raises(MemacctError, match=named):
        call()


def test_plan_options_check_types_once_for_every_caller() -> None:
    with pytest.raises(InvalidInputError, match=r"enforce_eager must be True or False, got 0"):
        PlanOptions(enforce_eager=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"model_name must be a string"):
        PlanOptions(model_name=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("flags", "named"), [
    (["--max-num-batched-tokens", "512", "--max-num-seqs", "1024"], "512 is below"),
    (["--max-num-seqs", "99999999999999"], "8192 is below --max-num-seqs 99999999999999"),
])  # fmt: skip
def test_fewer_batched_tokens_than_sequences_is_refused_as_vllm_refuses_it(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's SchedulerConfig raises when max_num_batched_tokens < max_num_seqs; memacct
    planned it (``--max-num-seqs 99999999999999``: "fits: 22 concurrent requests")."""
    code, _, err = run([*QWEN, "--device", "h100", *flags], capsys)
    assert code == 2 and named in err and "--max-num-batched-tokens" in err


def test_defaulted_sequences_are_clamped_to_the_batched_tokens_as_vllm_does() -> None:
    """vLLM's EngineArgs sets a defaulted max_num_seqs to min(default, max_num_batched_tokens);
    memacct kept 1024 sequences for a 512-token step (and its sampler's activation)."""
    plan = plan_offline("qwen2.5-7b", device="h100", max_num_batched_tokens=512)
    assert plan.max_num_seqs == 512
    assert any("max_num_seqs 512" in note for note in plan.notes)


def _readme_profile() -> ProfileResult:
    """The README's profile: 15 GiB of weights, then a 3 GiB step on a simulated H100,
    saved without its setup."""
    import memacct
    from memacct.sim import SimDevice

    dev = SimDevice("h100-80gb")
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    weights = [dev.malloc(2**30) for _ in range(15)]
    with memacct.memory_profiling(backend, baseline) as session:
        dev.free(dev.malloc(3 * 2**30))
    assert weights
    return session.result


def test_profile_with_format_version_true_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``"format_version": true`` was read as version 1 (pydantic's lax bool-to-int)."""
    good = tmp_path / "p.json"
    save_profile(_readme_profile(), good)
    data = json.loads(good.read_text())
    data["format_version"] = True
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="format_version"):
        load_profile(bad)
    code, _, err = run([*QWEN, "--profile", str(bad)], capsys)
    assert code == 2 and "format_version" in err


def test_capacity_json_rows_carry_the_format_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([*QWEN, "--device", "h100,l4", "--tensor-parallel-size", "1,2",
                        "--json"], capsys)  # fmt: skip
    rows = json.loads(out)
    assert code == 0 and len(rows) == 4
    assert all(row["format_version"] == row["plan"]["format_version"] == 4 for row in rows)


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_min_concurrency_that_is_no_count_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--min-concurrency nan`` printed "no configuration here serves nan concurrent
    requests" (exit 1); ``-1`` marked the smallest configuration as serving it."""
    code, out, err = run([*QWEN, "--device", "h100,l4", "--min-concurrency", value], capsys)
    assert code == 2 and "--min-concurrency" in err and not out
    with pytest.raises(InvalidInputError, match="min_concurrency"):
        smallest_serving(plan_capacity(load_model_preset("qwen2.5-7b"), ("l4",), (1,)),
                         float(value))  # fmt: skip


@pytest.mark.parametrize(("flags", "named"), [
    (["--device", "h100,,l4"], "empty device name"),
    (["--device", ""], "empty device name"),
    (["--device", "h100,h100"], "h100 more than once"),
    (["--device", "h100", "--tensor-parallel-size", "1,2,1"], "1 more than once"),
    (["--device", "h100", "--allow-mismatch"], "--allow-mismatch"),
    (["--kv-cache-memory-bytes", "20GiB", "--allow-mismatch"], "--allow-mismatch"),
    (["--kv-cache-memory-bytes", "999999999999999999999999"], "implausible"),
    (["--device-memory", "2000000TiB"], "implausible"),
])  # fmt: skip
def test_cli_options_that_would_plan_something_else_are_refused(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--device ''`` planned the reference H100, ``h100,,l4`` dropped the empty item,
    repeated devices or degrees repeated rows, ``--allow-mismatch`` without a profile did
    nothing, and a 10**24-byte budget planned 1.09e18 blocks."""
    code, out, err = run([*QWEN, *flags], capsys)
    assert code == 2 and named in err and not out
    assert len(err.strip().splitlines()) == 1


def test_empty_model_name_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """``--model ''`` said "model directory '.' has no config.json"."""
    code, _, err = run(["plan", "--model", "", "--device", "h100"], capsys)
    assert code == 2 and "model '' is empty" in err


def test_empty_config_path_is_named_on_every_reader() -> None:
    """``KVCacheSpec.from_hf_config('')`` and ``read_config_file('')`` read the working
    directory (``Path('')`` is ``.``): "model directory '.' has no config.json"."""
    from memacct.model.sources.local import read_config_file

    with pytest.raises(ConfigError, match="model '' is empty"):
        KVCacheSpec.from_hf_config("")
    with pytest.raises(ConfigError, match="config path '' is empty"):
        read_config_file("")


def test_sglang_utilization_error_names_the_flag_typed(capsys: pytest.CaptureFixture[str]) -> None:
    """``--engine sglang --gpu-memory-utilization 1`` said "mem_fraction_static must be in
    (0, 1)", a name the user never typed."""
    code, _, err = run([*QWEN, "--device", "h100", "--engine", "sglang",
                        "--gpu-memory-utilization", "1"], capsys)  # fmt: skip
    assert code == 2 and "--gpu-memory-utilization" in err and "1.0" in err


def test_vllm_refuses_kv_cache_dtype_names_its_parser_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--kv-cache-dtype int8`` (``float32``, ``bf16``, ``FP8``) was planned for vLLM, whose
    ``CacheDType`` literal has none of them: ``vllm serve`` refuses them."""
    for name in ("int8", "float32", "bf16", "FP8"):
        code, out, err = run([*QWEN, "--device", "h100", "--kv-cache-dtype", name], capsys)
        assert code == 2 and f"'{name}'" in err and "CacheDType" in err and not out
    with pytest.raises(InvalidInputError, match="not one vllm-ascend accepts"):
        PlanOptions(engine="vllm-ascend", kv_cache_dtype="int8")
    assert plan_offline("qwen2.5-7b", device="h100", kv_cache_dtype="fp8").fits


def test_preset_with_per_layer_mlp_widths_says_why_it_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--model gemma-3n-e4b`` said "the config has no MLP width; add it to config.json",
    though its config holds 35 of them (a per-layer list)."""
    code, _, err = run(["plan", "--model", "gemma-3n-e4b", "--device", "h100"], capsys)
    assert code == 2 and "per-layer list (35 widths)" in err and "no MLP width" not in err


@pytest.mark.parametrize("engine", ["vllm-mindspore"])
def test_enforce_eager_that_changes_nothing_is_refused(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--engine vllm-mindspore --enforce-eager`` printed the same plan as without it
    (no graph term is modelled there): an option that does nothing on that path."""
    code, out, err = run([*QWEN, "--device", "910b", "--engine", engine, "--enforce-eager"],
                         capsys)  # fmt: skip
    assert code == 2 and "--enforce-eager changes nothing" in err and not out
    eager = plan_offline("qwen2.5-7b", device="h100", enforce_eager=True)
    graphs = plan_offline("qwen2.5-7b", device="h100")
    assert eager.kv_cache_bytes > graphs.kv_cache_bytes  # vLLM: it frees the graphs' memory


def test_offline_api_is_reachable_from_the_package() -> None:
    """``memacct.plan_offline`` raised AttributeError: the offline API was only in
    ``memacct.planner.offline``."""
    import memacct

    assert memacct.plan_offline is plan_offline and memacct.plan_capacity is plan_capacity
    assert memacct.PlanOptions is PlanOptions
    assert {"plan_offline", "plan_capacity", "PlanOptions"} <= set(memacct.__all__)


@pytest.mark.parametrize("flags", [["--json"], ["--device", "zzz"], ["--engine", "sglang"],
                                   ["--plot", "x.png"]])  # fmt: skip
def test_model_list_refuses_the_flags_it_would_ignore(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--model list --json`` printed plain names; ``--model list --device zzz`` listed
    them without a word about the unknown device."""
    code, out, err = run(["plan", "--model", "list", *flags], capsys)
    assert code == 2 and not out and f"drop {flags[0]}" in err
    code, out, _ = run(["plan", "--model", "list"], capsys)
    assert code == 0 and "qwen2.5-7b" in out.split()


def test_layout_a_profile_did_not_record_is_said_to_be_taken_on_trust(tmp_path: Path) -> None:
    """A profile saved without its setup (the README's example) planned at TP 2 doubled its
    blocks without a word, though nothing said the profiled run was at TP 2."""
    import memacct

    result = _readme_profile()
    assert result.profiled.tensor_parallel_size is None
    config = load_model_preset("qwen2.5-7b")
    one = memacct.plan_kv_cache(result, KVCacheSpec.from_hf_config(config))
    assert not any("recorded no" in note for note in one.notes)
    two = memacct.plan_kv_cache(
        result, KVCacheSpec.from_hf_config(config, tensor_parallel_size=2),
        max_num_seqs=4,
    )  # fmt: skip
    assert two.num_blocks > one.num_blocks
    said = [note for note in two.notes if "the profile recorded no" in note]
    assert len(said) == 2
    assert "tensor_parallel_size: planned with 2" in said[0] and "max_num_seqs" in said[1]


@pytest.mark.parametrize(("keyword", "value"), [
    ("allow_mismatch", "no"), ("async_scheduling", "no"), ("enable_prefix_caching", 0),
    ("engine_options", [1]),
])  # fmt: skip
def test_plan_kv_cache_refuses_flags_that_are_not_bools(keyword: str, value: Any) -> None:
    """``allow_mismatch="no"`` was truthy and let a mismatched profile through;
    ``engine_options=[1]`` raised TypeError from ``dict()``."""
    import memacct

    spec = KVCacheSpec.from_hf_config(load_model_preset("qwen2.5-7b"))
    with pytest.raises(InvalidInputError, match=keyword):
        memacct.plan_kv_cache(None, spec, kv_cache_memory_bytes=2**34, **{keyword: value})


def test_save_profile_to_no_path_is_named(tmp_path: Path) -> None:
    """``save_profile(result, None)`` raised TypeError from pathlib."""
    import memacct
    from memacct.sim import SimDevice

    backend = memacct.get_backend("sim", device=SimDevice("h100-80gb"))
    with memacct.memory_profiling(backend, memacct.snapshot(backend)) as session:
        pass
    with pytest.raises(InvalidInputError, match="path must be a file path, got None"):
        save_profile(session.result, None)  # type: ignore[arg-type]
