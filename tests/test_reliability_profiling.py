"""Faults during profiling: a failing block, an OOM, and other processes moving memory.

Cases already proven in test_profiling.py (the exception propagates and leaves
no result; OOM suggests max_num_batched_tokens; nested and concurrent
sessions are refused) are not repeated here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

import memacct
from memacct import (
    DeviceBackend,
    ProfileResult,
    ProfilingError,
    ProfilingOutOfMemoryError,
    TorchLikeBackend,
)
from memacct.planner import KVCacheSpec, plan_kv_cache
from memacct.profiling import INTERFERENCE_TOLERANCE_BYTES
from memacct.sim import SimDevice
from memacct.units import GiB, MiB

WEIGHTS = 8 * GiB


@pytest.fixture
def dev() -> SimDevice:
    return SimDevice("h100-80gb", "torch-cuda")


@pytest.fixture
def attributed(dev: SimDevice) -> DeviceBackend:
    return memacct.get_backend("sim", device=dev)


@pytest.fixture
def device_wide(dev: SimDevice) -> DeviceBackend:
    # The same device without process_memory: no per-process attribution.
    return TorchLikeBackend(dev.api, name="sim")


# --- the profiled block fails ----------------------------------------------------------------


def test_failed_block_leaves_the_peaks_as_the_block_drove_them(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    baseline = memacct.snapshot(attributed)
    with pytest.raises(ValueError, match="bad batch"):
        with memacct.memory_profiling(attributed, baseline, weights_memory=0):
            dev.free(dev.malloc(3 * GiB))
            raise ValueError("bad batch")
    # Documented: peaks were reset on entry and are not restored.
    assert attributed.memory_stats(0)["allocated_bytes.all.peak"] == 3 * GiB


def test_device_is_free_for_a_new_session_after_a_failed_one(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    baseline = memacct.snapshot(attributed)
    with pytest.raises(RuntimeError):
        with memacct.memory_profiling(attributed, baseline):
            raise RuntimeError("first attempt")
    with memacct.memory_profiling(attributed, baseline, weights_memory=0) as session:
        dev.free(dev.malloc(GiB))
    assert session.result.activation_peak == GiB


def _capture_fails(dev: SimDevice) -> None:
    raise KeyError("capture failed")


def _runs_out_of_memory(dev: SimDevice) -> None:
    dev.malloc(100 * GiB)


@pytest.mark.parametrize(
    ("fail", "error", "match"),
    [pytest.param(_capture_fails, KeyError, "capture failed", id="its-own-exception"),
     pytest.param(_runs_out_of_memory, ProfilingOutOfMemoryError, "max_num_batched_tokens",
                  id="out-of-memory-is-a-profiling-oom")],
)  # fmt: skip
def test_a_failure_inside_an_excluded_region_propagates_and_leaves_no_result(
    dev: SimDevice,
    attributed: DeviceBackend,
    fail: Callable[[SimDevice], None],
    error: type[BaseException],
    match: str,
) -> None:
    baseline = memacct.snapshot(attributed)
    with pytest.raises(error, match=match):
        with memacct.memory_profiling(attributed, baseline) as session:
            with session.exclude("cuda-graphs"):
                fail(dev)
    with pytest.raises(ProfilingError, match="no profile result"):
        _ = session.result


def test_keyboard_interrupt_in_the_block_propagates_untouched(
    attributed: DeviceBackend,
) -> None:
    baseline = memacct.snapshot(attributed)
    with pytest.raises(KeyboardInterrupt):
        with memacct.memory_profiling(attributed, baseline):
            raise KeyboardInterrupt


# --- out of memory ---------------------------------------------------------------------------


def test_out_of_memory_message_gives_the_device_numbers(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    baseline = memacct.snapshot(attributed)
    dev.malloc(WEIGHTS)
    with pytest.raises(ProfilingOutOfMemoryError) as info:
        with memacct.memory_profiling(attributed, baseline, weights_memory=WEIGHTS):
            dev.malloc(100 * GiB)
    message = str(info.value)
    assert "on sim:0 (total 79.19GiB, free 71.19GiB, weights 8.00GiB)" in message
    assert "smaller max_num_batched_tokens" in message
    assert isinstance(info.value.__cause__, memacct.sim.SimOutOfMemory)


def test_out_of_memory_on_a_device_that_then_cannot_be_read_still_says_oom(
    dev: SimDevice, attributed: DeviceBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline = memacct.snapshot(attributed)
    with pytest.raises(ProfilingOutOfMemoryError, match="device unreadable after the OOM"):
        with memacct.memory_profiling(attributed, baseline):
            monkeypatch.setattr(attributed, "mem_get_info", _lost)
            dev.malloc(100 * GiB)


def _lost(device: int) -> tuple[int, int]:
    raise RuntimeError("GPU has fallen off the bus")


class _PoolExhausted(RuntimeError):
    """A framework's own out-of-memory type, declared by its backend."""


def test_an_exception_the_backend_declares_as_oom_is_a_profiling_oom(
    attributed: DeviceBackend,
) -> None:
    attributed.out_of_memory_errors = (_PoolExhausted,)  # type: ignore[attr-defined]
    baseline = memacct.snapshot(attributed)
    with pytest.raises(ProfilingOutOfMemoryError, match="Out of memory: pool exhausted"):
        with memacct.memory_profiling(attributed, baseline):
            raise _PoolExhausted("Out of memory: pool exhausted")


def test_an_oom_message_alone_is_not_read_as_oom(attributed: DeviceBackend) -> None:
    # No class-name or message matching in the core: only the backend's declaration counts.
    baseline = memacct.snapshot(attributed)
    with pytest.raises(RuntimeError, match="Out of memory: pool exhausted") as info:
        with memacct.memory_profiling(attributed, baseline):
            raise RuntimeError("Out of memory: pool exhausted")
    assert not isinstance(info.value, ProfilingOutOfMemoryError)


def test_a_backend_predicate_decides_for_a_framework_without_an_oom_type(
    attributed: DeviceBackend,
) -> None:
    attributed.is_out_of_memory = (  # type: ignore[method-assign]
        lambda exc: isinstance(exc, RuntimeError) and "pool exhausted" in str(exc)
    )
    baseline = memacct.snapshot(attributed)
    with pytest.raises(ProfilingOutOfMemoryError):
        with memacct.memory_profiling(attributed, baseline):
            raise RuntimeError("pool exhausted")


# --- another process allocates or frees during profiling -------------------------------------


def profile(
    dev: SimDevice, backend: DeviceBackend, during: object = None, before: object = None
) -> ProfileResult:
    baseline = memacct.snapshot(backend)
    if callable(before):
        before()
    dev.malloc(WEIGHTS)
    with memacct.memory_profiling(backend, baseline, weights_memory=WEIGHTS) as session:
        dev.free(dev.malloc(2 * GiB))
        if callable(during):
            during()
    return session.result


@pytest.mark.parametrize("kind", ["attributed", "device_wide"])
def test_quiet_device_gives_a_profile_without_warnings(
    dev: SimDevice, kind: str, request: pytest.FixtureRequest
) -> None:
    backend: DeviceBackend = request.getfixturevalue(kind)
    assert profile(dev, backend).warnings == ()


def co_tenant_frees(dev: SimDevice, nbytes: int) -> Callable[[], None]:
    """A co-tenant holds ``nbytes`` from now; calling the result frees them."""
    handle = dev.other_process_malloc(nbytes)
    return lambda: dev.other_process_free(handle)


def test_co_tenant_allocating_during_profiling_is_named_with_attribution(
    dev: SimDevice, attributed: DeviceBackend, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="memacct"):
        result = profile(dev, attributed, during=lambda: dev.other_process_malloc(3 * GiB))
    (warning,) = result.warnings
    assert warning.startswith("another process allocated 3.00GiB on sim:0 during profiling")
    assert warning in caplog.text
    # Attribution keeps it out of this instance's numbers.
    assert result.non_kv_cache_memory == WEIGHTS + 2 * GiB


def test_co_tenant_freeing_during_profiling_is_named_with_attribution(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    result = profile(dev, attributed, during=co_tenant_frees(dev, 5 * GiB))
    (warning,) = result.warnings
    assert warning.startswith("another process freed 5.00GiB on sim:0 during profiling")
    assert result.non_kv_cache_memory == WEIGHTS + 2 * GiB


def test_co_tenant_freeing_without_attribution_is_named_and_not_credited(
    dev: SimDevice, device_wide: DeviceBackend, caplog: pytest.LogCaptureFixture
) -> None:
    frees = co_tenant_frees(dev, 5 * GiB)
    with caplog.at_level(logging.WARNING, logger="memacct"):
        result = profile(dev, device_wide, during=frees)
    fell, not_credited = result.warnings
    assert fell.startswith("used memory on sim:0 fell by 5.00GiB during profiling")
    assert "another process probably freed device memory" in fell
    assert "not credited (non_allocator_increase charged as 0)" in not_credited
    # Crediting the fall would have planned 5 GiB of KV cache the co-tenant can take back.
    assert result.non_allocator_increase == 0
    assert result.non_kv_cache_memory == WEIGHTS + 2 * GiB
    assert "fell by 5.00GiB" in caplog.text


def test_co_tenant_freeing_more_than_the_model_needs_still_gives_a_profile(
    dev: SimDevice, device_wide: DeviceBackend
) -> None:
    # Before the fix this made non_kv_cache_memory negative and the profile invalid.
    handle = dev.other_process_malloc(40 * GiB)
    baseline = memacct.snapshot(device_wide)
    with memacct.memory_profiling(device_wide, baseline, weights_memory=0) as session:
        dev.other_process_free(handle)
    assert session.result.non_kv_cache_memory == 0
    assert len(session.result.warnings) == 2


def test_co_tenant_allocating_without_attribution_is_named_and_charged(
    dev: SimDevice, device_wide: DeviceBackend
) -> None:
    result = profile(dev, device_wide, during=lambda: dev.other_process_malloc(3 * GiB))
    (warning,) = result.warnings
    assert warning.startswith("used memory on sim:0 grew by 3.00GiB during profiling")
    assert "charged to this instance (the safe side)" in warning
    assert result.non_kv_cache_memory == WEIGHTS + 2 * GiB + 3 * GiB


def test_co_tenant_freeing_between_baseline_and_profiling_is_not_credited(
    dev: SimDevice, device_wide: DeviceBackend
) -> None:
    result = profile(dev, device_wide, before=co_tenant_frees(dev, 5 * GiB))
    (warning,) = result.warnings
    assert "5.00GiB below the baseline" in warning
    assert result.non_allocator_increase == 0


def test_changes_within_the_tolerance_are_not_reported(
    dev: SimDevice, device_wide: DeviceBackend
) -> None:
    result = profile(
        dev, device_wide, during=lambda: dev.external_malloc(INTERFERENCE_TOLERANCE_BYTES)
    )
    assert result.warnings == ()
    assert result.non_allocator_increase == INTERFERENCE_TOLERANCE_BYTES


def test_own_memory_outside_the_allocator_is_not_a_warning_with_attribution(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    result = profile(dev, attributed, during=lambda: dev.external_malloc(512 * MiB))
    assert result.warnings == ()
    assert result.non_allocator_increase == 512 * MiB


def test_profile_warnings_survive_a_json_round_trip(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    result = profile(dev, attributed, during=lambda: dev.other_process_malloc(GiB))
    assert ProfileResult.model_validate_json(result.model_dump_json()).warnings == result.warnings


def test_plan_from_a_doubtful_profile_repeats_its_warnings(
    dev: SimDevice, attributed: DeviceBackend, caplog: pytest.LogCaptureFixture
) -> None:
    result = profile(dev, attributed, during=lambda: dev.other_process_malloc(GiB))
    spec = KVCacheSpec.from_preset("llama-3.1-8b")
    with caplog.at_level(logging.WARNING, logger="memacct"):
        plan = plan_kv_cache(result, spec, max_model_len=8192)
    assert plan.provenance.profile_warnings == result.warnings
    assert f"{'profile_warning':<23}{result.warnings[0]}" in plan.report().splitlines()
    assert result.warnings[0] in caplog.text


def test_own_memory_freed_below_the_baseline_is_named_and_not_credited(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    handle = dev.external_malloc(GiB)  # e.g. a workspace that existed before the model
    result = profile(dev, attributed, during=lambda: dev.external_free(handle))
    (warning,) = result.warnings
    assert "1.00GiB below the baseline" in warning
    assert "this process gave back memory it held before the model" in warning
    assert result.non_allocator_increase == 0


def test_small_fall_below_the_baseline_is_not_credited_and_not_reported(
    dev: SimDevice, attributed: DeviceBackend
) -> None:
    handle = dev.external_malloc(32 * MiB)
    result = profile(dev, attributed, during=lambda: dev.external_free(handle))
    assert result.warnings == ()
    assert result.non_allocator_increase == 0


def test_excluded_region_inside_another_is_refused(attributed: DeviceBackend) -> None:
    baseline = memacct.snapshot(attributed)
    with pytest.raises(ProfilingError, match=r"exclude\('inner'\) inside another excluded region"):
        with memacct.memory_profiling(attributed, baseline) as session:
            with session.exclude("outer"), session.exclude("inner"):
                pass
