"""Which simulated allocator models a real backend's allocator, for ``auto``'s replay."""

from __future__ import annotations

from typing import Any

import pytest
from _harness import workload_from_config

import memacct
from memacct.backend import BackendQuirks
from memacct.planner import load_model_preset
from memacct.sim import SimDevice
from memacct.sim.allocator import PresetModel
from memacct.torchlike import torch_allocator_model
from memacct.trace import replay

ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
QUIRKS = BackendQuirks(allocator_settings_env=ENV)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (*ENV, "PYTORCH_NPU_ALLOC_CONF"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(
    ("setting", "model"),
    [
        ("", "torch-cuda"),
        ("expandable_segments:True", "torch-cuda-expandable"),
        ("expandable_segments:False", "torch-cuda"),
        (" expandable_segments : True ", "torch-cuda-expandable"),
        ("max_split_size_mb:512", None),
        ("expandable_segments:True,garbage_collection_threshold:0.6", None),
        ("roundup_power2_divisions:4", None),
    ],
)
def test_a_setting_the_presets_do_not_model_leaves_no_model(
    monkeypatch: pytest.MonkeyPatch, setting: str, model: str | None
) -> None:
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", setting)
    assert torch_allocator_model(QUIRKS, "torch-cuda", "torch-cuda-expandable") == model


def test_an_allocator_without_an_expandable_preset_has_no_model_when_expandable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert torch_allocator_model(QUIRKS, "npu") is None
    assert torch_allocator_model(BackendQuirks(), "npu") == "npu"  # no variable declared


def _plugin(module: str) -> Any:
    return pytest.importorskip(
        module, reason=f"{module} is not installed (the core-only pass has no backend distribution)"
    )


def test_the_cuda_and_npu_backends_name_their_models(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = _plugin("memacct_cuda")
    npu = _plugin("memacct_npu")
    dev = SimDevice("h100-80gb")
    assert cuda.CudaBackend(dev.api, attribution=False).allocator_model == PresetModel("torch-cuda")
    ascend = SimDevice("ascend-910b-64gb", allocator="npu")
    assert npu.AscendBackend(ascend.api).allocator_model == PresetModel("npu")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert cuda.CudaBackend(dev.api, attribution=False).allocator_model == PresetModel(
        "torch-cuda-expandable"
    )
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    assert cuda.CudaBackend(dev.api, attribution=False).allocator_model is None


def test_a_cuda_profile_given_the_works_traces_replays_them() -> None:
    cuda = _plugin("memacct_cuda")
    dev = SimDevice("h100-80gb")
    backend = cuda.CudaBackend(dev.api, attribution=False)
    work = workload_from_config(
        load_model_preset("qwen2.5-7b"), max_num_batched_tokens=1024, max_num_seqs=32
    )
    baseline = memacct.snapshot(backend)
    for n in work.weight_tensors():
        dev.malloc(n, persistent=True)
    results = []
    for trace in (work, None):
        with memacct.memory_profiling(
            backend, baseline, truth_source="auto", serving_trace=trace
        ) as session:
            replay(dev, work.step_trace(1024, 32))
        results.append(session.result.truth_source_reason)
    with_trace, without = results
    assert "replaying the profile" in with_trace
    assert "replaying" not in without
