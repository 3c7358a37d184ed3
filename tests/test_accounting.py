"""Accounting from hand-written readings: no backend, no device, every number exact."""

from __future__ import annotations

import pytest

from memacct import InvalidInputError, TruthSource
from memacct.accounting import (
    PhasePeak,
    ProfileReadings,
    RegionReading,
    account,
    parse_accounting,
)
from memacct.backend import BackendQuirks
from memacct.models import MemorySnapshot
from memacct.units import GiB, MiB

TOTAL = 80 * GiB
CONTEXT = 512 * MiB
W = 10 * GiB


def snap(
    allocated: int,
    reserved: int,
    *,
    non_allocator: int = CONTEXT,
    allocated_peak: int | None = None,
    reserved_peak: int | None = None,
    other: int | None = None,
) -> MemorySnapshot:
    used = reserved + non_allocator + (other or 0)
    return MemorySnapshot(
        backend="sim", device=0, timestamp=0.0, total=TOTAL, free=TOTAL - used, used=used,
        allocated=allocated, reserved=reserved,
        allocated_peak=max(allocated, allocated_peak or 0),
        reserved_peak=max(reserved, reserved_peak or 0),
        non_allocator=non_allocator, other_processes=other,
    )


BASELINE = snap(0, 0, non_allocator=0)
BEFORE = snap(W, W)


def readings(
    *,
    phases: tuple[PhasePeak, ...],
    after: MemorySnapshot = BEFORE,
    regions: tuple[RegionReading, ...] = (),
    source: TruthSource = TruthSource.ALLOCATED_PEAK,
    weights: int | None = W,
    quirks: BackendQuirks | None = None,
    pre_empty: MemorySnapshot | None = None,
) -> ProfileReadings:
    return ProfileReadings(
        baseline=BASELINE, before=BEFORE, pre_empty=pre_empty or after, after=after,
        phases=phases, regions=regions, requested_truth_source=source, weights_memory=weights,
        quirks=quirks or BackendQuirks(),
    )


def test_the_seed_formula_adds_weights_peak_and_memory_outside_the_allocator() -> None:
    r = readings(phases=(PhasePeak(W + 2 * GiB, W + 3 * GiB),))
    result = account(r, "components")
    assert result.activation_peak == 2 * GiB
    assert result.non_allocator_increase == CONTEXT
    assert result.non_kv_cache_memory == W + 2 * GiB + CONTEXT
    assert result.accounting == "components"


def test_the_reserved_source_charges_the_reserved_peak() -> None:
    r = readings(phases=(PhasePeak(W + 2 * GiB, W + 3 * GiB),), source=TruthSource.RESERVED)
    assert account(r).activation_peak == 3 * GiB


def test_the_free_memory_formula_charges_idle_memory_the_allocator_keeps() -> None:
    # 300 MiB stay reserved but idle after the profile (a segment that never releases):
    # the seed formula under allocated_peak does not see it, vLLM 0.33's does.
    after = snap(W, W + 300 * MiB)
    r = readings(phases=(PhasePeak(W + 2 * GiB, W + 3 * GiB),), after=after)
    seed = account(r, "components")
    free = account(r, "free_memory")
    assert seed.non_kv_cache_memory == W + 2 * GiB + CONTEXT
    assert free.non_kv_cache_memory == W + 2 * GiB + CONTEXT + 300 * MiB
    assert free.retained_memory == 300 * MiB
    assert free.accounting == "free_memory"


def test_the_free_memory_formula_charges_the_peak_above_what_stays_allocated() -> None:
    # 1 GiB stays allocated after the profile: the drop of free memory has it, the
    # peak term is only the transient above it.
    after = snap(W + GiB, W + GiB)
    r = readings(phases=(PhasePeak(W + 3 * GiB, W + 3 * GiB),), after=after)
    free = account(r, "free_memory")
    assert free.activation_peak == 2 * GiB
    assert free.non_kv_cache_memory == W + GiB + CONTEXT + 2 * GiB


def test_the_free_memory_formula_leaves_out_a_co_tenant_with_attribution() -> None:
    baseline_other = 3 * GiB
    r = ProfileReadings(
        baseline=snap(0, 0, non_allocator=0, other=baseline_other),
        before=snap(W, W, other=baseline_other),
        pre_empty=snap(W, W, other=baseline_other + 4 * GiB),
        after=snap(W, W, other=baseline_other + 4 * GiB),
        phases=(PhasePeak(W + GiB, W + GiB),), regions=(),
        requested_truth_source=TruthSource.ALLOCATED_PEAK, weights_memory=W,
    )
    assert account(r, "free_memory").non_kv_cache_memory == W + GiB + CONTEXT


def test_a_graph_region_is_charged_as_cudagraph_memory_not_activation() -> None:
    pool, outside = 600 * MiB, 100 * MiB
    start = snap(W, W, allocated_peak=W + 2 * GiB, reserved_peak=W + 2 * GiB)
    top = snap(W + pool, W + pool, allocated_peak=W + GiB + pool, reserved_peak=W + GiB + pool)
    end = snap(W + pool, W + pool, non_allocator=CONTEXT + outside)
    graphs = RegionReading("graphs", "graphs", start, top, end, 0.5)
    r = readings(
        phases=(
            PhasePeak(W + 2 * GiB, W + 2 * GiB),
            PhasePeak(W + pool + GiB, W + pool + GiB, graph_allocated=pool, graph_reserved=pool),
        ),
        regions=(graphs,),
        after=snap(W + pool, W + pool, non_allocator=CONTEXT + outside),
    )
    result = account(r)
    assert result.cudagraph_memory == pool + outside
    assert result.activation_peak == 2 * GiB
    assert result.non_allocator_increase == CONTEXT
    assert result.non_kv_cache_memory == W + 2 * GiB + CONTEXT + pool + outside
    assert result.excluded_regions[0].kind == "graphs"
    assert result.excluded_regions[0].held_bytes == pool + outside


def test_idle_memory_an_excluded_region_cannot_give_back_is_named_and_charged() -> None:
    kept = 200 * MiB
    start = snap(W, W)
    top = snap(W, W + 4 * GiB, allocated_peak=W + 4 * GiB, reserved_peak=W + 4 * GiB)
    end = snap(W, W + kept)  # a pool that does not release 200 MiB of it
    region = RegionReading("compile", "exclude", start, top, end)
    r = readings(
        phases=(PhasePeak(W, W), PhasePeak(W + GiB, W + kept + GiB)), regions=(region,),
        after=snap(W, W + kept),
    )
    result = account(r)
    assert result.excluded_regions[0].retained_bytes == kept
    assert result.retained_memory == kept
    assert result.activation_peak == GiB
    # Never more than charging the spike itself would have cost.
    assert result.non_kv_cache_memory <= W + 4 * GiB + CONTEXT


def test_retained_memory_is_not_charged_twice_under_the_reserved_source() -> None:
    start = snap(W, W)
    top = snap(W, W + 4 * GiB, allocated_peak=W + 4 * GiB, reserved_peak=W + 4 * GiB)
    end = snap(W, W + 200 * MiB)
    region = RegionReading("compile", "exclude", start, top, end)
    r = readings(
        phases=(PhasePeak(W, W), PhasePeak(W + GiB, W + 200 * MiB + GiB)), regions=(region,),
        after=snap(W, W + 200 * MiB), source=TruthSource.RESERVED,
    )
    result = account(r)
    assert result.retained_memory == 0
    assert result.activation_peak == GiB + 200 * MiB


def test_runtime_memory_freed_by_empty_cache_is_charged_where_the_backend_declares_it() -> None:
    quirks = BackendQuirks(empty_cache_releases_runtime_memory=True)
    r = readings(
        phases=(PhasePeak(W + GiB, W + GiB),), quirks=quirks,
        pre_empty=snap(W, W + GiB, non_allocator=CONTEXT + 256 * MiB),
    )
    assert account(r).non_allocator_increase == CONTEXT + 256 * MiB


def test_weights_measured_as_zero_are_declared_none_with_a_warning() -> None:
    r = ProfileReadings(
        baseline=BEFORE, before=BEFORE, pre_empty=BEFORE, after=BEFORE,
        phases=(PhasePeak(W + GiB, W + GiB),), regions=(),
        requested_truth_source=TruthSource.ALLOCATED_PEAK,
    )
    result = account(r)
    assert result.weights_memory == 0
    assert result.weights_source == "none"
    assert any("weights measured 0 bytes" in w for w in result.warnings)


def test_an_unknown_formula_is_refused_naming_the_choices() -> None:
    with pytest.raises(InvalidInputError, match="'components', 'free_memory'"):
        parse_accounting("vllm")
    assert parse_accounting("free-memory") == "free_memory"
