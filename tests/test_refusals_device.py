"""A plan of weights the engine cannot load on the device is refused, from the device's
capability table and the engine's loaders (memacct.planner.capability), never sized."""

from __future__ import annotations

import pytest

from memacct import InvalidInputError
from memacct.devices import resolve_device
from memacct.engines.deployment import Deployment
from memacct.planner.capability import check_loadable, fp8_weights
from memacct.planner.offline import plan_offline


@pytest.mark.parametrize("device", ["t4", "v100"])
def test_fp8_online_quantization_refused_where_the_device_has_no_fp8(device: str) -> None:
    with pytest.raises(InvalidInputError, match=r"FP8.*compute capability 7\.\d"):
        plan_offline("qwen2.5-7b", device=device, deployment=Deployment(quantization="fp8"))


def test_fp8_checkpoint_refused_on_turing() -> None:
    with pytest.raises(InvalidInputError, match="stores the weights in FP8"):
        plan_offline("llama-3.1-8b-fp8", device="t4")


def test_fp8_checkpoint_plans_on_ampere_and_hopper() -> None:
    for device in ("a100", "h100"):
        assert plan_offline("llama-3.1-8b-fp8", device=device).num_blocks > 0


@pytest.mark.parametrize("model", ["llama-3.1-8b-fp8", "gpt-oss-20b"])
def test_vllm_ascend_refuses_checkpoints_it_does_not_load(model: str) -> None:
    with pytest.raises(InvalidInputError, match="vllm-ascend|FP8"):
        plan_offline(model, device="ascend-910b-64gb", engine="vllm-ascend")


def test_vllm_ascend_names_what_it_loads_for_awq() -> None:
    info = resolve_device("ascend-910b-64gb")
    with pytest.raises(InvalidInputError, match="awq.*compressed-tensors"):
        check_loadable(info, "vllm-ascend", {"quant_method": "awq", "bits": 4})
    check_loadable(info, "vllm-ascend", {"quant_method": "compressed-tensors"})
    check_loadable(info, "vllm", {"quant_method": "awq"})  # vLLM's CUDA loaders: not checked here


def test_fp8_detection_reads_compressed_tensors_and_modelopt_schemes() -> None:
    float8 = {"quant_method": "compressed-tensors",
              "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8}}}}
    int8 = {"quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"type": "int", "num_bits": 8}}}}
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    assert fp8_weights(float8) and fp8_weights({"quant_method": "modelopt", "quant_algo": "FP8"})
    assert not fp8_weights(int8) and not fp8_weights(nvfp4) and not fp8_weights("awq")
    # An unquantized model still plans on a T4 (it does not fit, but it is not refused).
    assert plan_offline("qwen2.5-7b", device="t4", max_model_len=4096).shortfall_bytes > 0
