"""The ``auto`` truth source: decided from what the allocator reports, recorded with its reasons."""

from __future__ import annotations

import pytest

import memacct
from memacct.backend import BackendQuirks
from memacct.models import TruthSource
from memacct.planner import KVCacheSpec, plan_kv_cache
from memacct.planner.plan import kv_cache_reservation
from memacct.sim import SimDevice
from memacct.truth import SHARED_SEGMENT_BYTES, PeakMeasurement, resolve_truth_source
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
    source, peak, allowance = replayed(1000 * MiB, 1900 * MiB, 1100 * MiB, stranded=100 * MiB)
    assert (source, peak) == (TruthSource.ALLOCATED_PEAK, 1000 * MiB)
    assert peak + allowance == 1100 * MiB + SHARED_SEGMENT_BYTES == 1120 * MiB


def test_a_replay_on_a_packed_pool_is_charged_as_replayed() -> None:
    # Expandable segments report no stranded pieces: no shared-segment term, and the replay
    # (taken over cache ends spread across a page) is trusted below the reserved peak.
    packed = BackendQuirks(growth_rounding="packed", growth_granularity_bytes=20 * MiB)
    assert replayed(1000 * MiB, 1060 * MiB, 1010 * MiB, quirks=packed) == (
        TruthSource.ALLOCATED_PEAK, 1000 * MiB, 10 * MiB)
    assert replayed(1000 * MiB, 1060 * MiB, 1100 * MiB, quirks=packed) == (
        TruthSource.RESERVED, 1060 * MiB, 40 * MiB)
