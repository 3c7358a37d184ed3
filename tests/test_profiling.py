"""Profiling on the simulated device: every number exact to the byte."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

import memacct
from memacct import ProfilingError, ProfilingOutOfMemoryError, ProfilingSession, TruthSource
from memacct.sim import SimDevice
from memacct.units import GiB, MiB


@pytest.fixture
def dev() -> SimDevice:
    return SimDevice("h100-80gb", "torch-cuda")


@pytest.fixture
def backend(dev: SimDevice) -> memacct.DeviceBackend:
    return memacct.get_backend("sim", device=dev)


Profile = Callable[..., AbstractContextManager[ProfilingSession]]


@pytest.fixture
def profile(backend: memacct.DeviceBackend) -> Profile:
    """Starts a profiling session from a baseline read then, with no weights unless given."""

    def start(**kwargs: Any) -> AbstractContextManager[ProfilingSession]:
        kwargs.setdefault("weights_memory", 0)
        return memacct.memory_profiling(backend, memacct.snapshot(backend), **kwargs)

    return start


def load_weights(dev: SimDevice, layers: int = 10, layer_bytes: int = GiB) -> list[int]:
    return [dev.malloc(layer_bytes) for _ in range(layers)]


def test_profile_numbers_are_exact_with_every_kind_of_memory(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    dev.other_process_malloc(3 * GiB)  # a co-tenant
    dev.external_malloc(512 * MiB)  # this process's driver context
    baseline = memacct.snapshot(backend)
    assert baseline.other_processes == 3 * GiB
    assert baseline.non_allocator == 512 * MiB
    load_weights(dev)  # 10 GiB of weights
    with memacct.memory_profiling(
        backend, baseline, weights_memory=10 * GiB, truth_source="allocated_peak"
    ) as session:
        act = dev.malloc(2 * GiB)  # the activation spike
        dev.free(act)
        with session.exclude("compile"):
            spike = dev.malloc(5 * GiB)  # a compile spike, not an activation
            dev.free(spike)
        dev.external_malloc(256 * MiB)  # NCCL buffers appear during profiling
    result = session.result
    assert result.activation_peak == 2 * GiB
    assert result.allocated_peak_increase == 2 * GiB
    assert result.non_allocator_increase == 256 * MiB
    assert result.non_kv_cache_memory == 10 * GiB + 2 * GiB + 256 * MiB
    assert result.truth_source is TruthSource.ALLOCATED_PEAK
    assert [r.label for r in result.excluded_regions] == ["compile"]
    assert result.excluded_regions[0].allocated_spike == 5 * GiB
    assert result.after.other_processes == 3 * GiB


@pytest.mark.parametrize(
    ("before", "inside", "after", "peak"),
    [pytest.param(3, 1, 2, 3, id="a-peak-before-the-region-survives-it"),
     pytest.param(0, 8, 1, 1, id="a-spike-inside-the-region-does-not-count")],
)  # fmt: skip
def test_an_excluded_region_takes_out_only_its_own_spike(
    dev: SimDevice, profile: Profile, before: int, inside: int, after: int, peak: int
) -> None:
    with profile() as session:
        if before:
            dev.free(dev.malloc(before * GiB))
        with session.exclude("compile"):
            dev.free(dev.malloc(inside * GiB))
        dev.free(dev.malloc(after * GiB))
    assert session.result.activation_peak == peak * GiB


def test_memory_an_excluded_region_keeps_still_counts(dev: SimDevice, profile: Profile) -> None:
    with profile() as session:
        with session.exclude("cuda-graph-capture"):
            dev.free(dev.malloc(4 * GiB))
            dev.malloc(100 * MiB)  # the captured graph's pool stays
        dev.free(dev.malloc(1 * GiB))
    assert session.result.activation_peak == 1 * GiB + 100 * MiB


def test_weights_are_measured_when_not_given(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    baseline = memacct.snapshot(backend)
    load_weights(dev, layers=4)
    with memacct.memory_profiling(backend, baseline) as session:
        dev.free(dev.malloc(GiB))
    assert session.result.weights_memory == 4 * GiB


def fragment(dev: SimDevice, segments: int = 10) -> list[int]:
    """Fill `segments` 20 MiB segments with three 6 MiB blocks each; keep one per segment."""
    blocks = [dev.malloc(6 * MiB) for _ in range(3 * segments)]
    kept = blocks[::3]
    for ptr in blocks:
        if ptr not in kept:
            dev.free(ptr)
    return kept


def test_fragmenting_pattern_reserves_more_than_it_allocates(
    dev: SimDevice, profile: Profile
) -> None:
    with profile() as session:
        fragment(dev)
    result = session.result
    # Requests under 10 MiB get a 20 MiB segment; three 6 MiB blocks fit in each.
    assert result.allocated_peak_increase == 30 * 6 * MiB
    assert result.reserved_peak_increase == 10 * 20 * MiB
    assert result.reserved_peak_increase > result.allocated_peak_increase


def test_empty_cache_keeps_partly_used_segments_reserved(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    fragment(dev)
    backend.empty_cache()
    stats = backend.memory_stats(0)
    assert stats["reserved_bytes.all.current"] == 10 * 20 * MiB
    assert stats["allocated_bytes.all.current"] == 10 * 6 * MiB
    assert stats["inactive_split_bytes.all.current"] == 10 * 14 * MiB


def test_reserved_truth_source_charges_the_fragmentation(dev: SimDevice, profile: Profile) -> None:
    with profile(truth_source="reserved") as session:
        fragment(dev)
    assert session.result.activation_peak == 10 * 20 * MiB
    assert session.result.truth_source is TruthSource.RESERVED


def test_auto_picks_reserved_when_fragmentation_is_large_and_says_why(
    dev: SimDevice, profile: Profile
) -> None:
    with profile(truth_source="auto") as session:
        fragment(dev)
    result = session.result
    assert result.requested_truth_source is TruthSource.AUTO
    assert result.truth_source is TruthSource.RESERVED
    assert "stranded in partly used segments" in result.truth_source_reason


def test_auto_picks_allocated_peak_when_pool_does_not_fragment(
    dev: SimDevice, profile: Profile
) -> None:
    with profile(truth_source="auto") as session:
        dev.free(dev.malloc(2 * GiB))
    assert session.result.truth_source is TruthSource.ALLOCATED_PEAK
    assert session.result.activation_peak == 2 * GiB


def test_truth_source_env_overrides_backend_default(
    dev: SimDevice, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMACCT_TRUTH_SOURCE", "reserved")
    with profile() as session:
        fragment(dev)
    assert session.result.truth_source is TruthSource.RESERVED


def test_exception_in_block_propagates_and_leaves_no_result(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    baseline = memacct.snapshot(backend)
    with pytest.raises(KeyError, match="boom"):
        with memacct.memory_profiling(backend, baseline) as session:
            raise KeyError("boom")
    with pytest.raises(ProfilingError, match="no profile result"):
        _ = session.result


def test_out_of_memory_in_forward_suggests_fewer_batched_tokens(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    baseline = memacct.snapshot(backend)
    with pytest.raises(ProfilingOutOfMemoryError, match="max_num_batched_tokens"):
        with memacct.memory_profiling(backend, baseline):
            dev.malloc(200 * GiB)


def test_nested_session_on_one_device_is_refused(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    baseline = memacct.snapshot(backend)
    with memacct.memory_profiling(backend, baseline):
        with pytest.raises(ProfilingError, match="already running on sim:0"):
            with memacct.memory_profiling(backend, baseline):
                pass


def test_concurrent_session_from_another_thread_is_refused(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    baseline = memacct.snapshot(backend)
    errors: list[BaseException] = []

    def second() -> None:
        try:
            with memacct.memory_profiling(backend, baseline):
                pass
        except ProfilingError as exc:
            errors.append(exc)

    with memacct.memory_profiling(backend, baseline):
        t = threading.Thread(target=second)
        t.start()
        t.join()
    assert len(errors) == 1


def test_baseline_from_another_device_is_refused(backend: memacct.DeviceBackend) -> None:
    baseline = memacct.snapshot(backend).model_copy(update={"backend": "cuda"})
    with pytest.raises(memacct.InvalidInputError, match="cuda:0"):
        with memacct.memory_profiling(backend, baseline):
            pass


def test_snapshots_from_many_threads_are_consistent(
    dev: SimDevice, backend: memacct.DeviceBackend
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def churn() -> None:
        for _ in range(200):
            dev.free(dev.malloc(3 * MiB))

    def read(_: int) -> memacct.MemorySnapshot:
        return memacct.snapshot(backend)

    with ThreadPoolExecutor(6) as pool:
        churners = [pool.submit(churn) for _ in range(2)]
        snaps = list(pool.map(read, range(300)))
        for c in churners:
            c.result()
    # Every snapshot validated its own arithmetic; none saw a torn state.
    assert all(s.used == s.reserved + s.non_allocator for s in snaps)


def test_sim_npu_declares_that_empty_cache_frees_runtime_memory() -> None:
    backend = memacct.get_backend("sim", device=SimDevice(allocator="npu"))
    assert memacct.backend.get_quirks(backend).empty_cache_releases_runtime_memory
