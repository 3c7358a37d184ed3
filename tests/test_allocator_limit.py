"""The allocator's limit: declared by backends, recorded in profiles, kept by the planner.

An allocator with a cap below the device (MindSpore's pool budget, torch's
per-process memory fraction) refuses the KV cache a plan from
``gpu_memory_utilization`` alone gives it; these tests allocate the planned
KV cache on the simulated device to show the capped plan fits.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _harness import simulate_engine_start, workload

import memacct
from memacct.backend import BaseBackend, as_base_backend
from memacct.errors import BackendError, InsufficientMemoryError
from memacct.models import ProfileResult
from memacct.planner import KVCacheSpec, load_model_preset, plan_kv_cache
from memacct.planner.allocator_fit import allocator_held, kv_cache_reservation
from memacct.profiling import read_allocator_limit
from memacct.sim import SimDevice
from memacct.sim._core import SimOutOfMemory
from memacct.sim._mindspore import default_budget
from memacct.sim.backend import SimBackend
from memacct.trace import replay
from memacct.units import GiB, MiB

QWEN = load_model_preset("qwen2.5-7b")

_NO_PLUGIN = "{} is not installed (the core-only pass has no backend distribution)"


def _plugin(module: str) -> Any:
    return pytest.importorskip(module, reason=_NO_PLUGIN.format(module))


def CudaBackend(*args: Any, **kwargs: Any) -> Any:
    return _plugin("memacct_cuda").CudaBackend(*args, **kwargs)


def AscendBackend(*args: Any, **kwargs: Any) -> Any:
    return _plugin("memacct_npu").AscendBackend(*args, **kwargs)


def MindSporeBackend(*args: Any, **kwargs: Any) -> Any:
    return _plugin("memacct_mindspore").MindSporeBackend(*args, **kwargs)


def default_pool_budget(*args: Any, **kwargs: Any) -> Any:
    return _plugin("memacct_mindspore").default_pool_budget(*args, **kwargs)


def _start(truth_source: str) -> Any:
    return simulate_engine_start(
        QWEN, device="ascend-910b-64gb", allocator="mindspore", max_num_seqs=256,
        truth_source=truth_source,
    )  # fmt: skip


def _allocates(allocator: Any, tensors: list[int]) -> bool:
    try:
        for n in tensors:
            allocator.malloc(n)
    except SimOutOfMemory:
        return False
    return True


# --- MindSpore's pool budget on the simulated device -------------------------------------------


@pytest.mark.parametrize("truth_source", ["reserved", "allocated_peak"])
def test_mindspore_plan_at_full_utilization_stays_within_the_pool_budget(truth_source: str) -> None:
    start = _start(truth_source)
    result = start.result
    budget = start.device.allocator.budget_bytes
    assert budget is not None and result.allocator_limit == budget
    plan = plan_kv_cache(result, start.spec, 1.0)
    # Everything the allocator holds stays within the budget, the KV tensors as it rounds them.
    kv = kv_cache_reservation(
        start.spec, plan.num_blocks, plan.block_size, result.growth_granularity_bytes,
        result.growth_rounding,
    )  # fmt: skip
    assert allocator_held(result) + kv <= budget
    assert plan.target_allocation is not None
    assert plan.target_allocation < int(result.total_memory * 1.0)  # the cap bound
    assert plan.allocator_limit == budget
    assert any(n.startswith("the allocator's pool budget of 56.67GiB") for n in plan.notes)
    assert "binds before gpu_memory_utilization" in plan.report()
    # The KV cache allocates on the device the profile came from.
    assert _allocates(start.device.allocator, start.workload.kv_cache_tensors(plan.num_blocks))


def test_without_the_limit_the_same_plan_runs_out_of_memory() -> None:
    # The failure the limit prevents: the uncapped plan does not allocate.
    start = _start("allocated_peak")
    uncapped = start.result.model_copy(update={"allocator_limit": None})
    plan = plan_kv_cache(uncapped, start.spec, 1.0)
    assert plan.notes == ()
    assert not _allocates(start.device.allocator, start.workload.kv_cache_tensors(plan.num_blocks))


def test_mindspore_capped_plan_serves_the_profiled_step_after_the_kv_cache() -> None:
    start = _start("reserved")
    plan = plan_kv_cache(start.result, start.spec, 1.0)
    alloc = start.device.allocator
    assert _allocates(alloc, start.workload.kv_cache_tensors(plan.num_blocks))
    replay(alloc, start.workload.step_trace(8192, 256))  # raises SimOutOfMemory if it does not fit


def test_below_the_limit_the_plan_is_unchanged() -> None:
    start = _start("reserved")
    capped = plan_kv_cache(start.result, start.spec, 0.8)
    uncapped = start.result.model_copy(update={"allocator_limit": None})
    plain = plan_kv_cache(uncapped, start.spec, 0.8)
    assert capped.num_blocks == plain.num_blocks and capped.notes == ()


def test_a_limit_that_leaves_no_block_is_an_error_naming_it_and_the_fix() -> None:
    start = _start("reserved")
    tight = start.result.model_copy(update={"allocator_limit": allocator_held(start.result)})
    with pytest.raises(InsufficientMemoryError) as info:
        plan_kv_cache(tight, start.spec, 1.0)
    text = str(info.value)
    assert "pool budget of" in text and "max_device_memory" in text
    assert "set_per_process_memory_fraction" in text


def test_a_limit_that_leaves_no_whole_request_names_the_limit() -> None:
    start = _start("reserved")
    # Room for some blocks, not for one request of 32768 tokens (2048 blocks of 0.875 MiB).
    limit = allocator_held(start.result) + 512 * MiB
    with pytest.raises(InsufficientMemoryError) as info:
        plan_kv_cache(start.result.model_copy(update={"allocator_limit": limit}), start.spec, 1.0)
    assert "pool budget of" in str(info.value)
    assert info.value.estimated_max_model_len is not None
    assert 0 < info.value.estimated_max_model_len < 32768


def test_an_override_beyond_the_limit_is_refused() -> None:
    start = _start("reserved")
    with pytest.raises(InsufficientMemoryError, match="pool budget of 56.67GiB"):
        plan_kv_cache(start.result, start.spec, kv_cache_memory_bytes=44 * GiB)


# --- torch's per-process memory fraction (the sim's torch presets, cuda and npu plugins) -------


def _profile_on(backend: Any, dev: SimDevice) -> ProfileResult:
    baseline = memacct.snapshot(backend)
    dev.allocator.malloc(16 * GiB, persistent=True)
    with memacct.memory_profiling(backend, baseline, truth_source="allocated_peak") as session:
        dev.allocator.free(dev.allocator.malloc(2 * GiB))
    return session.result


@pytest.mark.parametrize(
    ("allocator", "make"),
    [
        ("torch-cuda", lambda dev: CudaBackend(dev.api, attribution=False)),
        ("npu", lambda dev: AscendBackend(dev.api)),
        ("torch-cuda", SimBackend),
    ],
)
def test_a_memory_fraction_caps_the_plan(allocator: str, make: Any) -> None:
    dev = SimDevice("h100-80gb", allocator)
    dev.api.set_per_process_memory_fraction(0.5)
    backend = make(dev)
    limit = int(0.5 * dev.total)
    assert backend.allocator_limit(0) == limit
    result = _profile_on(backend, dev)
    assert result.allocator_limit == limit
    spec = KVCacheSpec.from_hf_config(dict(QWEN))
    plan = plan_kv_cache(result, spec, 0.9)
    assert plan.notes and plan.allocator_limit == limit
    work = workload(spec, QWEN)
    assert allocator_held(result) + sum(work.kv_cache_tensors(plan.num_blocks)) <= limit
    assert _allocates(dev.allocator, work.kv_cache_tensors(plan.num_blocks))
    uncapped = plan_kv_cache(result.model_copy(update={"allocator_limit": None}), spec, 0.9)
    assert uncapped.num_blocks > plan.num_blocks


def test_no_fraction_means_no_limit() -> None:
    dev = SimDevice("h100-80gb", "torch-cuda")
    assert CudaBackend(dev.api, attribution=False).allocator_limit(0) is None
    assert SimBackend(dev).allocator_limit(0) is None
    dev.api.set_per_process_memory_fraction(0.25)
    assert SimBackend(dev).allocator_limit(0) == int(0.25 * dev.total)


def test_a_torch_without_the_fraction_reading_declares_no_limit() -> None:
    dev = SimDevice("h100-80gb", "torch-cuda")
    dev.api.set_per_process_memory_fraction(0.5)

    class OldTorchCuda:  # torch before get_per_process_memory_fraction
        def __getattr__(self, name: str) -> Any:
            if name == "get_per_process_memory_fraction":
                raise AttributeError(name)
            return getattr(dev.api, name)

    assert CudaBackend(OldTorchCuda(), attribution=False).allocator_limit(0) is None
    assert AscendBackend(OldTorchCuda()).allocator_limit(0) is None


def test_the_sim_mindspore_pool_declares_its_budget_once_taken() -> None:
    dev = SimDevice("ascend-910b-64gb", "mindspore")
    backend = SimBackend(dev)
    assert backend.allocator_limit(0) is None  # no request yet: no budget taken
    free = dev.free_bytes
    dev.allocator.malloc(MiB)
    assert backend.allocator_limit(0) == default_budget(free)
    fixed = SimDevice(
        "ascend-910b-64gb", "mindspore-block", allocator_options={"budget_bytes": 20 * GiB}
    )
    assert SimBackend(fixed).allocator_limit(0) == 20 * GiB


# --- the MindSpore plugin ----------------------------------------------------------------------


def _fake_mindspore(context_gb: Any, reserved: int = 0) -> Any:
    stats = {
        "total_reserved_memory": reserved, "total_allocated_memory": reserved,
        "max_reserved_memory": reserved, "max_allocated_memory": reserved,
    }  # fmt: skip
    context = {"device_target": "Ascend", "device_id": 0, "max_device_memory": context_gb}
    return SimpleNamespace(
        get_context=context.__getitem__,
        runtime=SimpleNamespace(memory_stats=lambda: dict(stats)),
    )


def _ms_backend(context_gb: Any, reserved: int = 0, **kwargs: Any) -> Any:
    return MindSporeBackend(
        _fake_mindspore(context_gb, reserved),
        memory_info=lambda device: (40 * GiB, 64 * GiB),
        **kwargs,
    )


def test_mindspore_reads_max_device_memory_from_its_context() -> None:
    assert _ms_backend(30.0).allocator_limit(0) == 30 * GiB
    assert _ms_backend(3.5).allocator_limit(0) == int(3.5 * GiB)


def test_mindspore_default_rule_when_max_device_memory_is_unset() -> None:
    # MindSpore's default "1024GB" is no budget: 15/16 of the free memory the pool started with,
    # estimated as the free memory now plus what the pool holds.
    expected = default_pool_budget(40 * GiB + 10 * GiB)
    assert expected == (50 * GiB * 15 // 16) // (2 * MiB) * (2 * MiB) - 10 * MiB
    assert _ms_backend(1024.0, reserved=10 * GiB).allocator_limit(0) == expected
    # A setting above the device's total counts as unset, as in MindSpore.
    assert _ms_backend(100.0, reserved=10 * GiB).allocator_limit(0) == expected
    # The plugin's rule is the simulator's.
    assert default_pool_budget(50 * GiB) == default_budget(50 * GiB)


def test_mindspore_budget_given_to_the_backend_wins() -> None:
    backend = _ms_backend(1024.0, max_device_memory=20 * GiB)
    assert backend.allocator_limit(0) == 20 * GiB
    with pytest.raises(memacct.InvalidInputError, match="max_device_memory"):
        _ms_backend(1024.0, max_device_memory=0)


# --- the contract and the profile --------------------------------------------------------------


def test_the_default_is_no_limit_for_base_and_protocol_backends() -> None:
    dev = SimDevice(total_bytes=2**30)
    assert BaseBackend().allocator_limit(0) is None
    assert memacct.TorchLikeBackend(dev.api, name="plain").allocator_limit(0) is None

    class Bare:
        name = "bare"
        default_truth_source = memacct.TruthSource.ALLOCATED_PEAK

        def allocator_limit(self, device: int) -> int:
            return 123

    assert as_base_backend(Bare()).allocator_limit(0) == 123  # type: ignore[arg-type]


def test_a_backend_declaring_a_bad_limit_is_named() -> None:
    class Broken(memacct.TorchLikeBackend):
        def allocator_limit(self, device: int) -> int | None:
            return -5

    backend = Broken(SimDevice(total_bytes=2**30).api, name="broken")
    with pytest.raises(BackendError, match=r"allocator_limit\(0\) returned -5"):
        read_allocator_limit(backend, 0)


def test_a_profile_saved_without_the_field_loads_and_plans(tmp_path: Path) -> None:
    start = _start("reserved")
    data = json.loads(start.result.model_dump_json())
    assert data.pop("allocator_limit") == start.device.allocator.budget_bytes
    old = tmp_path / "old-profile.json"
    old.write_text(json.dumps(data))
    loaded = ProfileResult.load(old)
    assert loaded.allocator_limit is None
    plan = plan_kv_cache(loaded, start.spec, 1.0)
    assert plan.notes == () and plan.allocator_limit is None
    # And the field round-trips where it is present.
    new = tmp_path / "profile.json"
    start.result.save(new)
    assert ProfileResult.load(new).allocator_limit == start.result.allocator_limit


def test_mindspore_2_10_reads_as_unset_by_default() -> None:
    # The CPU build in the dev environment: get_context answers there too.
    mindspore = pytest.importorskip("mindspore", reason="mindspore is not installed")

    backend = MindSporeBackend(mindspore, memory_info=lambda device: (40 * GiB, 64 * GiB))
    assert backend.configured_budget() is None  # MindSpore's "1024GB": no budget of its own
    assert backend.allocator_limit(0) == default_pool_budget(40 * GiB)
