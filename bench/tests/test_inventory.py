"""One weight inventory: the offline estimate and the simulated engine hold the same bytes.

For every model preset, under its own quantization and three others, at every tensor-parallel
size its geometry allows, the weights :func:`memacct.model.weights.estimate.estimate_weights` plans
(the offline plan's figure) are byte for byte what the simulated engine allocates on the
device (the allocator's ``requested_bytes``), role by role.
"""

from __future__ import annotations

from typing import Any

import pytest
from memacct_bench import simulate_engine_start
from memacct_bench.start import mxfp4_pad_for
from memacct_bench.workload import TransformerWorkload

from memacct.devices import DEVICE_INFO
from memacct.errors import ConfigError, MemacctError
from memacct.model.weights.estimate import estimate_weights, mxfp4_padding
from memacct.planner import KVCacheSpec, load_model_preset, model_presets
from memacct.sim import SimDevice
from memacct.units import GiB

QUANTIZATIONS: dict[str, dict[str, Any] | None] = {
    "as published": None,
    "fp8 blocks": {"quant_method": "fp8", "weight_block_size": [128, 128],
                   "activation_scheme": "dynamic"},
    "awq int4": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
    "gptq int4": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
}  # fmt: skip


def _config(name: str, quantization: str) -> dict[str, Any]:
    config = load_model_preset(name)
    scheme = QUANTIZATIONS[quantization]
    if scheme is not None:
        config["quantization_config"] = dict(scheme)
    return config


def _requested(dev: SimDevice) -> int:
    return int(dev.memory_stats()["requested_bytes.all.current"])


@pytest.mark.parametrize("quantization", list(QUANTIZATIONS))
@pytest.mark.parametrize("name", model_presets())
def test_offline_and_simulated_weights_agree_byte_for_byte(name: str, quantization: str) -> None:
    config = _config(name, quantization)
    checked = 0
    for tp in (1, 2, 4, 8):
        try:
            spec = KVCacheSpec.from_hf_config(dict(config), tensor_parallel_size=tp)
        except MemacctError:
            continue  # a size this model cannot be split into
        try:
            offline = estimate_weights(config, tensor_parallel_size=tp)
        except ConfigError as refusal:
            # What the offline plan cannot size, the simulated engine refuses the same way.
            with pytest.raises(ConfigError) as simulated:
                TransformerWorkload(spec, config)
            assert str(simulated.value) == str(refusal)
            checked += 1
            continue
        work = TransformerWorkload(spec, config)
        dev = SimDevice(total_bytes=offline.total_bytes + 64 * GiB)
        for n in work.parameter_tensors():
            dev.malloc(n, persistent=True)
        assert _requested(dev) == offline.total_bytes, (tp, offline.source)
        by_role: dict[str, int] = {}
        for t in work.weights:
            by_role[t.role] = by_role.get(t.role, 0) + t.nbytes
        assert by_role == dict(offline.by_role), tp
        checked += 1
    assert checked, f"{name}: no tensor-parallel size of 1, 2, 4, 8 is valid"


def test_the_simulated_engine_loads_gpt_oss_20b_as_the_offline_plan_sizes_it() -> None:
    config = load_model_preset("gpt-oss-20b")
    start = simulate_engine_start(config, device="h100-80gb", truth_source="reserved",
                                  max_num_batched_tokens=2048, max_num_seqs=16)  # fmt: skip
    offline = estimate_weights(config).total_bytes
    buffers = sum(start.workload.weight_tensors()) - offline
    assert _requested(start.device) == offline + buffers
    assert offline < 15 * GiB  # MXFP4 experts: 13.46 GiB, not the 38.95 GiB of bf16 experts


def test_gpt_oss_120b_starts_on_one_simulated_h100_as_it_does_on_a_real_one() -> None:
    # gpt-oss-120b's config.json is gpt-oss-20b's with 36 layers and 128 experts (MXFP4):
    # about 61 GiB of weights, which vLLM loads on one 80 GB H100.
    config = load_model_preset("gpt-oss-20b")
    config.update(num_hidden_layers=36, num_local_experts=128)
    config["layer_types"] = ["sliding_attention", "full_attention"] * 18
    offline = estimate_weights(config).total_bytes
    assert 55 * GiB < offline < 65 * GiB
    start = simulate_engine_start(config, device="h100-80gb", truth_source="reserved",
                                  max_num_batched_tokens=2048, max_num_seqs=16)  # fmt: skip
    assert start.result.weights_memory >= offline


@pytest.mark.parametrize("device", ["h100-80gb", "b200-192gb", "a100-80gb"])
def test_the_simulated_engine_pads_mxfp4_experts_as_the_offline_plan_does_on_that_device(
    device: str,
) -> None:
    config = load_model_preset("gpt-oss-20b")
    layout = DEVICE_INFO[device].mxfp4_layout
    offline = estimate_weights(config, mxfp4_pad=mxfp4_padding(layout)).total_bytes
    work = TransformerWorkload(KVCacheSpec.from_hf_config(dict(config)), config,
                               mxfp4_pad=mxfp4_pad_for(device))  # fmt: skip
    assert sum(work.parameter_tensors()) == offline
