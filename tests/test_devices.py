"""Device presets (issue 22): unified-memory parts, AMD Instinct and Radeon with ROCm vLLM's
differences as data, the presets users asked for, and docs/devices.md covering every one."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from memacct.cli import main
from memacct.devices import DEVICE_INFO, DeviceInfo, memory_notes, resolve_device
from memacct.engines.vllm.defaults import batch_defaults
from memacct.engines.vllm.releases import default_sampler
from memacct.errors import InvalidInputError
from memacct.planner import load_model_preset
from memacct.planner.offline import plan_offline
from memacct.units import GiB

DOCS = Path(__file__).resolve().parents[1] / "docs" / "devices.md"


@pytest.mark.parametrize(
    "name",
    ["l4", "l40s", "a10g", "a100-40gb", "h100-pcie", "h100-nvl", "h200-nvl", "b200", "b300",
     "gb200", "rtx4090", "rtx5090", "rtx-pro-6000", "t4", "v100", "v100-32gb", "910b", "910c",
     "300i-duo", "gb10", "dgx-spark", "gh200", "gh200-144gb", "orin", "thor", "mi300x",
     "mi325x", "mi355x", "mi250x", "mi210", "rx7900xtx", "w7900", "r9700"],
)  # fmt: skip
def test_the_presets_users_asked_for_exist(name: str) -> None:
    info = resolve_device(name)
    assert info.kind in ("reading", "derived") and info.source and info.total_bytes > GiB


def test_device_info_stays_backward_compatible() -> None:
    # The fields issue 22 added have defaults: the old positional form still builds one.
    info = DeviceInfo("x-24gb", 24 * GiB, "X", "derived", "test")
    assert (info.unified_memory, info.hbm_numa_node, info.gfx_arch) == (False, False, None)
    assert info.vendor == "nvidia" and info.fp8_kv_cache


@pytest.mark.parametrize(
    ("name", "unified", "numa"),
    [("gb10-128gb", True, False), ("jetson-agx-orin-64gb", True, False),
     ("jetson-agx-orin-32gb", True, False), ("jetson-agx-thor-128gb", True, False),
     ("gh200-96gb", False, True), ("gh200-144gb", False, True), ("gb200-186gb", False, True),
     ("h100-80gb", False, False), ("mi300x-192gb", False, False)],
)  # fmt: skip
def test_unified_memory_and_numa_flags(name: str, unified: bool, numa: bool) -> None:
    info = DEVICE_INFO[name]
    assert (info.unified_memory, info.hbm_numa_node) == (unified, numa)


@pytest.mark.parametrize(
    ("name", "gfx", "fp8_dtype", "custom_allreduce"),
    [("mi300x-192gb", "gfx942", "float8_e4m3fnuz", True),
     ("mi325x-256gb", "gfx942", "float8_e4m3fnuz", True),
     ("mi355x-288gb", "gfx950", "float8_e4m3fn", True),
     ("mi250x-64gb", "gfx90a", "float8_e4m3fn", False),
     ("mi210-64gb", "gfx90a", "float8_e4m3fn", False),
     ("rx-7900-xtx-24gb", "gfx1100", "float8_e4m3fn", False),
     ("radeon-pro-w7900-48gb", "gfx1100", "float8_e4m3fn", False),
     ("radeon-ai-pro-r9700-32gb", "gfx1201", "float8_e4m3fn", False)],
)  # fmt: skip
def test_amd_parts_carry_their_gfx_and_rocm_vllm_rules(
    name: str, gfx: str, fp8_dtype: str, custom_allreduce: bool
) -> None:
    # vllm/platforms/rocm.py (0.33): is_fp8_fnuz ("gfx94"), use_custom_allreduce (gfx94/95),
    # supports_fp8 (CDNA or RDNA): every part here takes FP8 weights and an FP8 KV cache.
    info = DEVICE_INFO[name]
    assert info.vendor == "amd" and info.gfx_arch == gfx and info.compute_capability is None
    assert info.fp8_dtype == fp8_dtype and info.custom_allreduce is custom_allreduce
    assert info.fp8_weights and info.fp8_kv_cache


def test_rocm_rules_follow_the_gfx_not_the_name() -> None:
    # A part named like an MI300X but recorded as gfx1030 (RDNA 2) gets no FP8 in vLLM 0.33.
    odd = DeviceInfo("mi300x-lookalike", GiB * 8, "X", "derived", "test", vendor="amd",
                     gfx_arch="gfx1030")
    assert not odd.fp8_weights and not odd.custom_allreduce


def test_the_dummy_sampler_on_a_radeon_is_rocm_s_native_path() -> None:
    # ROCm takes the native top-k/top-p path, a Radeon preset as much as an Instinct one;
    # the old check knew AMD parts only by an "mi" prefix.
    assert default_sampler((0, 33), device_name="rx-7900-xtx-24gb") == "triton"
    assert default_sampler((0, 33), device_name="radeon-ai-pro-r9700-32gb") == "triton"
    assert default_sampler((0, 33), device_name="rtx-4090-24gb") == "flashinfer"


@pytest.mark.parametrize(
    ("device", "expected"),
    [("t4-16gb", "triton"), ("v100-32gb", "triton"), ("jetson-agx-orin-64gb", "triton"),
     ("jetson-agx-thor-128gb", "flashinfer"), ("gb10-128gb", "flashinfer"),
     ("a100-40gb", "flashinfer"), ("rtx-pro-6000-96gb", "flashinfer")],
)  # fmt: skip
def test_vllm_0_33_samples_with_flashinfer_only_where_it_can(device: str, expected: str) -> None:
    # topk_topp_sampler.py flashinfer_sampler_supported (0.33): SM 8.0-12.1 and > 16 SMs
    # (an AGX Orin 64GB has 16); the releases before keep 0.21's SM 7.5-12.1 check
    # (FlashInferBackend.supports_compute_capability), which the V100 (7.0) fails.
    assert default_sampler((0, 33), device_name=device) == expected
    before = "triton" if device.startswith("v100") else "flashinfer"
    assert default_sampler((0, 32), device_name=device) == before


def test_forcing_flashinfer_s_sampler_where_vllm_refuses_it_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="VLLM_USE_FLASHINFER_SAMPLER=1.*T4"):
        default_sampler((0, 33), flashinfer_env=True, device_name="t4-16gb")
    assert default_sampler((0, 33), flashinfer_env=True, device_name="h100-80gb") == "flashinfer"


def test_a_dgx_spark_keeps_vllm_s_small_batch_defaults() -> None:
    # vllm/engine/arg_utils.py get_batch_defaults (0.33): is_device_capability((12, 1)).
    gb10 = DEVICE_INFO["gb10-128gb"]
    assert batch_defaults(gb10.total_bytes, gb10.name) == (2048, 256)
    h200 = DEVICE_INFO["h200-141gb"]
    assert batch_defaults(h200.total_bytes, h200.name) == (8192, 1024)


@pytest.mark.parametrize(
    ("device", "version", "expected"),
    [("b200-192gb", None, (16384, 1024)), ("b300-288gb", (0, 33), (16384, 1024)),
     ("mi355x-288gb", (0, 28), (16384, 1024)), ("mi300x-192gb", (0, 27), (8192, 1024)),
     ("h200-141gb", None, (8192, 1024))],
)  # fmt: skip
def test_devices_of_160_gib_and_more_take_vllm_s_largest_batch_tier(
    device: str, version: tuple[int, int] | None, expected: tuple[int, int]
) -> None:
    # vllm/engine/arg_utils.py get_batch_defaults: "for GPUs like B200/B300 with >= 160GB".
    info = DEVICE_INFO[device]
    assert batch_defaults(info.total_bytes, info.name, version) == expected


def test_an_offline_plan_on_a_b300_names_the_largest_tier() -> None:
    plan = plan_offline(load_model_preset("qwen2.5-7b"), device="b300")
    assert (plan.max_num_batched_tokens, plan.max_num_seqs) == (16384, 1024)
    old = plan_offline(load_model_preset("qwen2.5-7b"), device="b300", engine_version="0.27")
    assert old.max_num_batched_tokens == 8192


def test_an_offline_plan_on_a_dgx_spark_says_what_it_assumed() -> None:
    plan = plan_offline(load_model_preset("qwen2.5-7b"), device="gb10")
    gb10 = DEVICE_INFO["gb10-128gb"]
    assert plan.fits and plan.total_memory == gb10.total_bytes
    notes = " ".join(plan.notes)
    assert "unified memory" in notes and "MemAvailable" in notes
    asked = math.ceil(gb10.total_bytes * 0.9) / GiB
    assert f"starts only if {asked:.2f} GiB" in notes
    assert "memacct assumed" in notes and "upper bound" in notes


def test_memacct_plan_on_a_gb10_prints_its_assumptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "qwen2.5-7b", "--device", "gb10", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["total_memory"] == DEVICE_INFO["gb10-128gb"].total_bytes
    assert any("unified memory" in note and "memacct assumed" in note for note in plan["notes"])
    assert (plan["max_num_batched_tokens"], plan["max_num_seqs"]) == (2048, 256)
    assert main(["plan", "--model", "qwen2.5-7b", "--device-memory", "120GiB", "--json"]) == 0
    custom = json.loads(capsys.readouterr().out)
    assert custom["total_memory"] == 120 * GiB
    assert not any("unified memory" in note for note in custom["notes"])


def test_the_unified_memory_note_follows_the_utilization() -> None:
    plan = plan_offline(load_model_preset("qwen2.5-7b"), device="orin", gpu_memory_utilization=0.5)
    orin = DEVICE_INFO["jetson-agx-orin-64gb"]
    asked = math.ceil(orin.total_bytes * 0.5) / GiB
    assert f"starts only if {asked:.2f} GiB" in " ".join(plan.notes)


def test_a_derived_unified_memory_total_is_said_to_be_derived() -> None:
    # never a guess as a fact: the Jetson totals are estimates; the GB10's is a reading.
    orin = memory_notes(DEVICE_INFO["jetson-agx-orin-64gb"], "vllm")
    assert any("is derived" in note and "--device-memory" in note for note in orin)
    assert not any("is derived" in note for note in memory_notes(DEVICE_INFO["gb10-128gb"], "vllm"))


def test_sglang_on_unified_memory_says_its_pool_comes_from_free_memory() -> None:
    notes = memory_notes(DEVICE_INFO["gb10-128gb"], "sglang")
    assert len(notes) == 1 and "SGLang" in notes[0] and "vLLM" not in notes[0]


def test_a_discrete_gpu_plan_has_no_unified_memory_note() -> None:
    plan = plan_offline(load_model_preset("qwen2.5-7b"), device="h100")
    assert not any("unified memory" in note or "NUMA" in note for note in plan.notes)
    assert memory_notes(DEVICE_INFO["h100-80gb"], "vllm") == ()


def test_a_grace_hopper_plan_names_its_numa_hbm() -> None:
    plan = plan_offline(load_model_preset("qwen2.5-7b"), device="gh200")
    notes = " ".join(plan.notes)
    assert "NUMA node" in notes and "memacct assumed" in notes


def test_device_memory_still_overrides_any_preset() -> None:
    size = 100 * GiB
    plan = plan_offline(load_model_preset("qwen2.5-7b"), device_memory=size)
    assert plan.total_memory == size
    assert not any("unified memory" in note for note in plan.notes)
    with pytest.raises(InvalidInputError, match="not both"):
        plan_offline(load_model_preset("qwen2.5-7b"), device="gb10", device_memory=size)


@pytest.mark.parametrize("device", ["910c", "300i-duo"])
def test_ascend_parts_refuse_fp8_kv_and_gpu_engines(device: str) -> None:
    config = load_model_preset("qwen2.5-7b")
    with pytest.raises(InvalidInputError, match="no FP8 KV cache"):
        plan_offline(config, engine="vllm-ascend", device=device, kv_cache_dtype="fp8")
    with pytest.raises(InvalidInputError, match="does not run on"):
        plan_offline(config, engine="vllm", device=device)


@pytest.mark.parametrize("device", ["mi355x", "rx7900xtx", "gb10"])
def test_vllm_ascend_refuses_gpu_presets(device: str) -> None:
    with pytest.raises(InvalidInputError, match="does not run on"):
        plan_offline(load_model_preset("qwen2.5-7b"), engine="vllm-ascend", device=device)


def test_rocm_refuses_the_quantizations_its_vllm_build_does_not_run() -> None:
    # vllm/platforms/rocm.py supported_quantization (0.33) has no bitsandbytes, gguf or
    # gptq_marlin; verify_quantization raises on them.
    config = dict(load_model_preset("qwen2.5-7b"))
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    with pytest.raises(InvalidInputError, match="bitsandbytes quantization: .*ROCm.*MI300X"):
        plan_offline(config, device="mi300x")
    assert plan_offline(config, device="h100").weights_memory > 0
    awq = dict(load_model_preset("qwen2.5-7b"))
    awq["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                  "zero_point": True}
    assert plan_offline(awq, device="mi300x").weights_memory > 0


def test_a_gguf_file_on_an_amd_part_is_refused(tmp_path: Path) -> None:
    from tests.test_gguf import write_gguf

    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    with pytest.raises(InvalidInputError, match="gguf quantization"):
        plan_offline(str(path), device="rx7900xtx")
    assert plan_offline(str(path), device="h100").weights_memory > 0


def test_every_preset_is_documented_with_its_source() -> None:
    text = DOCS.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for info in DEVICE_INFO.values():
        row = next((r for r in rows if re.search(rf"`{re.escape(info.name)}`", r)), None)
        assert row is not None, f"{info.name} has no row in docs/devices.md"
        assert f"{info.total_bytes / GiB:.2f}" in row, f"{info.name}: GiB differs from the doc"
        assert info.kind in row, info.name
        # a spec sheet's address, or a real log's thread (owner/repo#N) or file (owner/repo, path)
        assert re.search(r"https://|[\w.-]+/[\w.-]+(#\d+|, \S+\.md)", row), info.name
