"""The ``auto`` truth source: decided from what the allocator reports, recorded with its reasons."""

from __future__ import annotations

import pytest

import memacct
from memacct.backend import BackendQuirks
from memacct.models import TruthSource
from memacct.planner import KVCacheSpec, plan_kv_cache
from memacct.planner.allocator_fit import kv_cache_reservation
from memacct.sim import SimDevice
from memacct.truth import (
    SHARED_SEGMENT_BYTES,
    PeakMeasurement,
    replay_floor,
    resolve_truth_source,
)
from memacct.units import GiB, MiB

AUTO = TruthSource.AUTO
TORCH = BackendQuirks()


def decide(allocated: int, reserved: int, stranded: int = 0, *, quirks: BackendQuirks = TORCH,
           weights_idle: int = 0, weights_given: bool = True) -> tuple[TruthSource, int, int]:
    d = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=allocated, reserved_peak_increase=reserved,
        inactive_split_increase=stranded, weights_idle=weights_idle,
        weights_given=weights_given), quirks)
    return d.truth_source, d.activation_peak, d.fragmentation_allowance


def test_without_fragmentation_auto_is_the_allocated_peak() -> None:
    assert decide(2 * GiB, 2 * GiB) == (TruthSource.ALLOCATED_PEAK, 2 * GiB, 0)


def test_without_a_replay_the_reserved_peak_is_the_floor() -> None:
    # 900 MiB reserved beyond the peak, 100 MiB stranded: no replay, so the reserved peak.
    assert decide(1000 * MiB, 1900 * MiB, stranded=100 * MiB) == (
        TruthSource.RESERVED, 1900 * MiB, 0)


def test_without_a_replay_stranded_memory_is_charged_for_two_step_sizes() -> None:
    source, peak, allowance = decide(1000 * MiB, 1128 * MiB, stranded=100 * MiB)
    assert (source, peak) == (TruthSource.RESERVED, 1128 * MiB)
    assert peak + allowance == 1000 * MiB + 2 * 100 * MiB


def test_an_allocator_that_reports_no_stranded_memory_keeps_the_reserved_peak() -> None:
    # Expandable segments count no inactive split: their idle pages are not attributed.
    source, peak, allowance = decide(1000 * MiB, 1060 * MiB, stranded=0)
    assert (source, peak, allowance) == (TruthSource.RESERVED, 1060 * MiB, 0)


def replayed(allocated: int, reserved: int, need: int, stranded: int = 0,
             quirks: BackendQuirks = TORCH) -> tuple[TruthSource, int, int]:
    d = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=allocated, reserved_peak_increase=reserved,
        inactive_split_increase=stranded, replay_need=need), quirks)
    return d.truth_source, d.activation_peak, d.fragmentation_allowance


def test_a_replay_on_a_caching_allocator_that_strands_adds_one_shared_segment() -> None:
    # 100 MiB stranded by the profiled step: the replay (1100 MiB) plus one 20 MiB segment
    # for step sequences outside its sample; the old A + 2 x I bound (1200 MiB) is not charged.
    source, peak, allowance = replayed(1000 * MiB, 1110 * MiB, 1100 * MiB, stranded=100 * MiB)
    assert (source, peak) == (TruthSource.RESERVED, 1110 * MiB)
    assert peak + allowance == 1100 * MiB + SHARED_SEGMENT_BYTES == 1120 * MiB


def test_a_replay_on_a_packed_pool_is_charged_as_replayed() -> None:
    # Expandable segments report no stranded pieces: no shared-segment term, and the replay
    # (taken over cache ends spread across a page) is trusted below the reserved peak.
    # One page (20 MiB) is added for cache ends between the replayed ones.
    packed = BackendQuirks(growth_rounding="packed", growth_granularity_bytes=20 * MiB)
    assert replayed(1000 * MiB, 1060 * MiB, 1010 * MiB, quirks=packed) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 30 * MiB)
    assert replayed(1000 * MiB, 1060 * MiB, 1100 * MiB, quirks=packed) == (
        TruthSource.RESERVED, 1060 * MiB, 60 * MiB)


def test_a_caching_allocator_charges_a_replay_below_the_reserved_peak_as_replayed() -> None:
    # The reserved peak of the profile from an empty cache is no floor: at the limit torch
    # releases its free segments and retries, and the replayed steps (the profiled shape
    # first) complete in less (gen-0-12: 1.478 GiB replayed, 2.436 GiB reserved). A mixed
    # instance ...
    assert replayed(1000 * MiB, 1900 * MiB, 1100 * MiB) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 100 * MiB)
    # ... and a decode instance alike.
    d = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=1000 * MiB, reserved_peak_increase=1900 * MiB,
        replay_need=1100 * MiB, serving_role="decode"), TORCH)
    assert (d.truth_source, d.activation_peak, d.fragmentation_allowance) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 100 * MiB)


def test_a_replay_below_the_reserved_peak_of_a_packed_pool_charges_the_rest() -> None:
    packed = BackendQuirks(growth_rounding="packed", growth_granularity_bytes=2 * MiB)
    assert replayed(1000 * MiB, 1900 * MiB, 1100 * MiB, quirks=packed) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 102 * MiB)


def test_a_replay_above_the_reserved_peak_charges_beyond_it() -> None:
    assert replayed(1000 * MiB, 1100 * MiB, 1300 * MiB) == (
        TruthSource.RESERVED, 1100 * MiB, 200 * MiB)


def test_a_replay_never_charges_less_than_the_allocated_peak() -> None:
    packed = BackendQuirks(growth_rounding="packed", growth_granularity_bytes=0)
    assert replayed(1000 * MiB, 1100 * MiB, 500 * MiB, quirks=packed) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 0)


def test_idle_space_in_the_weights_segments_is_charged_once() -> None:
    _, _, given = decide(1000 * MiB, 1000 * MiB, weights_idle=300 * MiB)
    _, _, measured = decide(1000 * MiB, 1200 * MiB, stranded=0, weights_idle=300 * MiB,
                            weights_given=False)
    assert given == 300 * MiB  # weights passed as their size: their segments' idle space added
    assert measured == 0  # reserved growth already holds it


def test_a_decode_instance_is_named_in_the_reason() -> None:
    d = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=1000 * MiB, reserved_peak_increase=1900 * MiB,
        replay_need=1100 * MiB, serving_role="decode"), TORCH)
    assert (d.truth_source, d.activation_peak, d.fragmentation_allowance) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 100 * MiB)
    assert "shapes of a decode instance" in d.reason
    mixed = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=1000 * MiB, reserved_peak_increase=1900 * MiB,
        replay_need=1100 * MiB), TORCH)
    assert "instance" not in mixed.reason


def test_a_replay_from_the_weights_segments_credits_their_idle_space() -> None:
    # The replay starts from the weights' segments: it needs 400 MiB beyond them, their
    # 300 MiB idle space included in what it could reuse. 400 + 300 is below the allocated
    # peak, so nothing beyond the allocated peak is charged ...
    low = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=1000 * MiB, reserved_peak_increase=1100 * MiB,
        replay_need=400 * MiB, weights_idle=300 * MiB, serving_role="decode"), TORCH)
    assert (low.truth_source, low.activation_peak, low.fragmentation_allowance) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 0)
    # ... while a replay of 900 MiB needs 900 + 300 = 1200 MiB beyond the weights' bytes.
    high = resolve_truth_source(AUTO, PeakMeasurement(
        allocated_peak_increase=1000 * MiB, reserved_peak_increase=1100 * MiB,
        replay_need=900 * MiB, weights_idle=300 * MiB, serving_role="decode"), TORCH)
    assert high.activation_peak + high.fragmentation_allowance == 1200 * MiB


@pytest.mark.parametrize("source", [TruthSource.ALLOCATED_PEAK, TruthSource.RESERVED])
def test_a_fixed_source_is_taken_as_asked_without_allowance(source: TruthSource) -> None:
    d = resolve_truth_source(source, PeakMeasurement(1 * GiB, 3 * GiB, 0, 2 * GiB, 5 * GiB), TORCH)
    assert d.truth_source is source and d.fragmentation_allowance == 0


def test_the_profile_records_why_auto_decided_and_the_allowance() -> None:
    dev = SimDevice("h100-80gb")
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    with memacct.memory_profiling(backend, baseline, weights_memory=0, truth_source="auto") as s:
        live = [dev.malloc(6 * MiB) for _ in range(30)]  # three per 20 MiB segment
        for ptr in live[::3] + live[1::3]:
            dev.free(ptr)
        for ptr in live[2::3]:
            dev.free(ptr)
    result = s.result
    assert result.requested_truth_source is TruthSource.AUTO
    assert "reserved peak" in result.truth_source_reason
    assert "GiB" in result.truth_source_reason
    assert result.activation_peak + result.fragmentation_allowance > result.allocated_peak_increase


def test_the_planner_keeps_the_allowance_free() -> None:
    from _sim import simulated_start

    _, result = simulated_start(15 * GiB, 3 * GiB, truth_source="auto")
    spec = KVCacheSpec.from_preset("llama-3.1-8b")
    plan = plan_kv_cache(result, spec, gpu_memory_utilization=0.9, max_model_len=8192)
    used = kv_cache_reservation(spec, plan.num_blocks, 16, 2 * MiB, "multiple")
    assert used + result.fragmentation_allowance <= plan.kv_cache_bytes


def test_the_planner_sizes_doubling_pool_tensors_to_whole_units() -> None:
    # 28 layers, 1 GiB units: per-layer tensors just over 1 GiB would take 2 GiB blocks each.
    spec = KVCacheSpec.from_preset("qwen2.5-7b")
    per_layer_block = 16 * spec.bytes_per_token // spec.num_layers
    blocks_per_unit = (1 * GiB - 512) // per_layer_block
    assert kv_cache_reservation(spec, blocks_per_unit, 16, 1 * GiB, "doubling") == 28 * GiB
    assert kv_cache_reservation(spec, blocks_per_unit + 1, 16, 1 * GiB, "doubling") == 56 * GiB


@pytest.mark.parametrize("true_need", [0, 500 * MiB, 1700 * MiB, 1890 * MiB, 2500 * MiB])
@pytest.mark.parametrize("stranded", [0, 50 * MiB])
def test_a_replay_started_at_its_floor_decides_as_the_full_replay(
    true_need: int, stranded: int
) -> None:
    # The replay may skip bisecting below replay_floor(): the decision must not change.
    floor = replay_floor(1900 * MiB, stranded, TORCH, "mixed")
    full = replayed(1000 * MiB, 1900 * MiB, true_need, stranded=stranded)
    started = replayed(1000 * MiB, 1900 * MiB, max(true_need, floor), stranded=stranded)
    assert full == started
    assert replay_floor(1900 * MiB, stranded, TORCH, "decode") == 0
    packed = BackendQuirks(growth_rounding="packed", growth_granularity_bytes=2 * MiB)
    assert replay_floor(1900 * MiB, stranded, packed, "mixed") == 0
