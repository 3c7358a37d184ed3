"""Accounting: turn a profiling session's readings into a :class:`ProfileResult` (pure).

:mod:`memacct.profiling` only reads the device; this module only computes.
:func:`account` takes the :class:`ProfileReadings` a session collected
(snapshots, peaks per phase, region markers) and returns the profile, with
no device, backend or clock involved, so every number can be tested from
hand-written readings.

Two formulas (``ProfileResult.accounting``; the differences, with the
measurements behind the default, are in ``docs/accounting.md``):

``components`` (the seed's, the default)
    ``weights + activation peak + non-allocator increase``, plus the graph pool
    and the idle memory excluded regions left that the allocator cannot give back.
``free_memory`` (vLLM 0.33's)
    ``(free at the baseline - free after the profile) + (peak - allocated after
    the profile)``: everything the process took since the baseline, whether
    the allocator can reuse it or not, plus the transient peak above it.

Example (a 2 GiB forward pass over 10 GiB of weights, hand-written readings)::

    >>> from memacct.models import MemorySnapshot, TruthSource
    >>> def snap(alloc, res, peak=None):
    ...     used = 1024 + res
    ...     return MemorySnapshot(backend="sim", device=0, timestamp=0.0, total=100 << 30,
    ...         free=(100 << 30) - used, used=used, allocated=alloc, reserved=res,
    ...         allocated_peak=peak or alloc, reserved_peak=peak or res,
    ...         non_allocator=1024, other_processes=None)
    >>> w = 10 << 30
    >>> readings = ProfileReadings(baseline=snap(0, 0), before=snap(w, w),
    ...     pre_empty=snap(w, w + (2 << 30)), after=snap(w, w),
    ...     phases=(PhasePeak(allocated_peak=w + (2 << 30), reserved_peak=w + (2 << 30)),),
    ...     regions=(), requested_truth_source=TruthSource.ALLOCATED_PEAK)
    >>> result = account(readings)
    >>> result.activation_peak == 2 << 30, result.non_kv_cache_memory == 12 << 30
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memacct._attrs import same_named
from memacct.errors import InvalidInputError
from memacct.models import (
    ProfileResult,
    TruthSource,
    non_kv_sum,
)
from memacct.profile_readings import PhasePeak, ProfileReadings, RegionReading
from memacct.truth import PeakMeasurement, cache_ends_over, replay_floor, resolve_truth_source
from memacct.units import MiB, format_gib

__all__ = [
    "ACCOUNTING_FORMULAS",
    "DEFAULT_ACCOUNTING",
    "INTERFERENCE_TOLERANCE_BYTES",
    "Accounting",
    "PhasePeak",
    "ProfileReadings",
    "RegionReading",
    "ReplayRequest",
    "account",
    "parse_accounting",
    "replay_request",
]

Accounting = Literal["components", "free_memory"]
ACCOUNTING_FORMULAS: tuple[Accounting, ...] = ("components", "free_memory")
DEFAULT_ACCOUNTING: Accounting = "components"
"""The formula a profile uses unless asked otherwise; chosen by measurement
(``docs/accounting.md#which-formula-by-default``)."""

INTERFERENCE_TOLERANCE_BYTES = 64 * MiB
"""Changes of memory outside this process's allocator up to this size are not reported.

Per-process readings lag device readings a little (NVML), and a runtime's own
bookkeeping moves by a few MiB; a co-tenant or an unexplained fall of more
than this is named in :attr:`ProfileResult.warnings`.
"""


def parse_accounting(value: str | None) -> Accounting:
    """The accounting formula named ``value`` (``None``: the default), or a clear error."""
    if value is None:
        return DEFAULT_ACCOUNTING
    name = str(value).strip().lower().replace("-", "_")
    for formula in ACCOUNTING_FORMULAS:
        if name == formula:
            return formula
    raise InvalidInputError(
        f"unknown accounting formula {value!r}: use one of "
        f"{', '.join(repr(f) for f in ACCOUNTING_FORMULAS)}"
    )


@dataclass(frozen=True)
class _Peaks:
    """Peak increases over the session: raw, and of activations only (graph pools taken out)."""

    allocated: int
    reserved: int
    activation_allocated: int
    activation_reserved: int
    inactive_split: int
    inactive_split_increase: int
    allocated_abs: int
    reserved_abs: int


def _peaks(r: ProfileReadings) -> _Peaks:
    before = r.before
    phases = r.phases or (PhasePeak(before.allocated_peak, before.reserved_peak),)
    alloc_abs = max(p.allocated_peak for p in phases)
    res_abs = max(p.reserved_peak for p in phases)
    return _Peaks(
        allocated=max(0, alloc_abs - before.allocated),
        reserved=max(0, res_abs - before.reserved),
        activation_allocated=max(
            0, max(p.allocated_peak - p.graph_allocated for p in phases) - before.allocated
        ),
        activation_reserved=max(
            0, max(p.reserved_peak - p.graph_reserved for p in phases) - before.reserved
        ),
        inactive_split=max(p.inactive_split_peak for p in phases),
        inactive_split_increase=max(
            0, max(p.inactive_split_peak for p in phases) - r.inactive_split_start
        ),
        allocated_abs=alloc_abs,
        reserved_abs=res_abs,
    )


@dataclass(frozen=True)
class ReplayRequest:
    """What a replay must measure for a profile's readings (the arguments of
    :func:`memacct.replay.replay_need` besides the model and the traces)."""

    kv_cache_bytes: int
    low_hint: int
    high_hint: int
    cache_ends: tuple[int, ...]
    role: str
    pairs: bool
    sequences: bool
    floor: int


def replay_request(r: ProfileReadings) -> ReplayRequest | None:
    """The replay ``auto`` asks for these readings, ``None`` where it needs none.

    Only ``auto`` replays, and only where the activations' reserved peak is above their
    allocated peak (a pool that does not fragment is charged its allocated peak exactly).
    """
    peaks = _peaks(r)
    if (
        r.requested_truth_source is not TruthSource.AUTO
        or peaks.activation_reserved <= peaks.activation_allocated
    ):
        return None
    multiple = r.quirks.growth_rounding == "multiple"
    return ReplayRequest(
        # About the cache a plan at the physical limit gives: what the profile left free.
        kv_cache_bytes=max(0, r.after.free - peaks.activation_reserved),
        low_hint=peaks.activation_allocated // 2,
        high_hint=peaks.activation_reserved,
        cache_ends=(
            cache_ends_over(r.quirks.growth_granularity_bytes)
            if r.quirks.growth_rounding == "packed" else (0,)
        ),
        role=r.serving_role,
        # On a caching allocator what a step strands depends on the free segments earlier
        # steps left: every pair of the shape grid, and random sequences, are replayed.
        pairs=multiple,
        sequences=multiple,
        floor=replay_floor(
            peaks.activation_reserved, peaks.inactive_split_increase, r.quirks, r.serving_role
        ),
    )


def _where(r: ProfileReadings) -> str:
    return f"{r.after.backend}:{r.after.device}"


def _interference(r: ProfileReadings) -> list[str]:
    """Name memory changes during the session that this process did not make."""
    before, after = r.before, r.after
    found: list[str] = []
    if before.other_processes is not None and after.other_processes is not None:
        change = after.other_processes - before.other_processes
        if abs(change) > INTERFERENCE_TOLERANCE_BYTES:
            found.append(
                f"another process {'allocated' if change > 0 else 'freed'} "
                f"{format_gib(abs(change))} on {_where(r)} during profiling (other "
                f"processes held {format_gib(before.other_processes)} at the start, "
                f"{format_gib(after.other_processes)} at the end); per-process attribution "
                "kept it out of this profile, but the device now has "
                f"{'less' if change > 0 else 'more'} free memory than when profiling began"
            )
        return found
    # Without attribution every change of used memory that the allocator does not
    # explain lands in non_allocator: this process's (NCCL, cuBLAS workspaces) or not.
    change = after.non_allocator - before.non_allocator
    graphs = sum(g.non_allocator_kept for g in r.regions if g.kind == "graphs")
    change -= graphs
    if change < -INTERFERENCE_TOLERANCE_BYTES:
        found.append(
            f"used memory on {_where(r)} fell by {format_gib(-change)} during profiling "
            "more than the allocator's reservation did: another process probably freed "
            "device memory (without per-process attribution memacct cannot tell); profile "
            "on an idle device, or with a backend that attributes memory per process"
        )
    elif change > INTERFERENCE_TOLERANCE_BYTES:
        found.append(
            f"used memory on {_where(r)} grew by {format_gib(change)} during profiling "
            "beyond the allocator's reservation: this process's memory outside the "
            "allocator (NCCL, cuBLAS workspaces) or another process's; without "
            "per-process attribution it is charged to this instance (the safe side)"
        )
    return found


def _non_allocator_increase(r: ProfileReadings, graphs: int, warnings: list[str]) -> int:
    """This process's growth outside the allocator since the baseline, graph pools taken out."""
    non_allocator = r.after.non_allocator
    if r.quirks.empty_cache_releases_runtime_memory:
        # This device's empty_cache() can also free runtime memory, which the
        # next forward pass takes again: the figure before emptying is the true one.
        non_allocator = max(non_allocator, r.pre_empty.non_allocator)
    increase = non_allocator - r.baseline.non_allocator - graphs
    if increase >= 0:
        return increase
    # A fall below the baseline is never credited: without attribution it is most
    # likely another process freeing memory it may take again; with attribution
    # it is memory that was there before the model, which serving may need again.
    # Charging 0 errs on the side of a smaller KV cache, never an OOM.
    if -increase > INTERFERENCE_TOLERANCE_BYTES:
        cause = (
            "this process gave back memory it held before the model"
            if r.after.other_processes is not None
            else "another process probably freed device memory, which memacct "
            "cannot tell from this process's without per-process attribution"
        )
        warnings.append(
            f"non-allocator memory on {_where(r)} ended {format_gib(-increase)} below the "
            f"baseline ({format_gib(r.baseline.non_allocator)} -> {format_gib(non_allocator)}); "
            f"{cause}: the fall is not credited (non_allocator_increase charged as 0)"
        )
    return 0


def _excluded_retained(r: ProfileReadings, charged_peak: int, source: TruthSource) -> int:
    """Idle memory excluded regions left that the allocator cannot give back, as charged.

    Under ``reserved`` it is already inside the reserved peak (the peaks after a
    region start from what it left). Under ``allocated_peak`` the allocated peak
    does not see it: it is charged, but never more than charging the region's
    spike would have cost (so excluding never gives fewer blocks than not excluding).
    """
    if source is TruthSource.RESERVED:
        return 0
    excluded = [g for g in r.regions if g.kind == "exclude"]
    retained = sum(g.retained for g in excluded)
    if retained == 0:
        return 0
    spike = max(g.top.allocated_peak - r.before.allocated for g in excluded)
    return min(retained, max(0, spike - charged_peak))


def account(readings: ProfileReadings, accounting: str | None = None) -> ProfileResult:
    """The :class:`ProfileResult` the readings imply (pure: no device, no clock).

    Args:
        readings: what a :class:`~memacct.profiling.ProfilingSession` read.
        accounting: ``"components"`` or ``"free_memory"``; ``None``: :data:`DEFAULT_ACCOUNTING`.

    The activation peak is the resolved truth source's peak increase with the
    graph pools taken out (they are ``cudagraph_memory``); ``auto`` is resolved
    by :func:`memacct.truth.resolve_truth_source` from the same readings.
    """
    formula = parse_accounting(accounting)
    r = readings
    baseline, before, after = r.baseline, r.before, r.after
    peaks = _peaks(r)
    graph_regions = [g for g in r.regions if g.kind == "graphs"]
    cudagraph = sum(g.held for g in graph_regions)
    graph_non_allocator = sum(g.non_allocator_kept for g in graph_regions)
    weights_idle = max(
        0, (before.reserved - before.allocated) - (baseline.reserved - baseline.allocated)
    )
    measurement = PeakMeasurement(
        allocated_peak_increase=peaks.activation_allocated,
        reserved_peak_increase=peaks.activation_reserved,
        inactive_split_peak=peaks.inactive_split,
        inactive_split_increase=peaks.inactive_split_increase,
        # Idle space the allocator kept since the baseline (after empty_cache: it cannot
        # give it back): free pieces of the weights' segments or pool blocks. The
        # free-memory formula charges it through the drop of free memory.
        weights_idle=weights_idle if formula == "components" else 0,
        weights_given=r.weights_memory is not None,
        replay_need=r.replay_need,
        serving_role=r.serving_role,
    )
    decision = resolve_truth_source(r.requested_truth_source, measurement, r.quirks)
    source = decision.truth_source
    warnings = _interference(r)
    non_allocator = _non_allocator_increase(r, graph_non_allocator, warnings)

    if r.weights_memory is not None:
        weights = r.weights_memory
    elif source is TruthSource.RESERVED and formula == "components":
        weights = max(0, before.reserved - baseline.reserved)
    else:
        weights = max(0, before.allocated - baseline.allocated)
    weights_source: Literal["given", "measured", "none"] = (
        "given" if r.weights_memory is not None else "measured" if weights > 0 else "none"
    )
    if weights_source == "none":
        warnings.append(
            f"the weights measured 0 bytes on {_where(r)}: the baseline was taken after the "
            "model was loaded; pass weights_memory, or take the baseline before loading"
        )

    if formula == "components":
        activation = decision.activation_peak
        retained = _excluded_retained(r, activation, source)
    else:
        activation, retained = _free_memory_terms(r, peaks, source, decision.activation_peak)
        retained = max(0, retained - weights - non_allocator - cudagraph)

    fragmentation = (
        (peaks.reserved_abs - peaks.allocated_abs) / peaks.reserved_abs
        if peaks.reserved_abs > 0
        else 0.0
    )
    return ProfileResult(
        baseline=baseline,
        before=before,
        after=after,
        weights_memory=weights,
        activation_peak=activation,
        allocated_peak_increase=peaks.allocated,
        reserved_peak_increase=peaks.reserved,
        non_allocator_increase=non_allocator,
        non_kv_cache_memory=non_kv_sum(weights, activation, non_allocator, cudagraph, retained),
        truth_source=source,
        **same_named(r, "requested_truth_source", "profiled", "allocator_limit"),
        **same_named(r.quirks, "growth_granularity_bytes", "growth_rounding"),
        fragmentation_allowance=decision.fragmentation_allowance,
        truth_source_reason=decision.reason,
        fragmentation=min(1.0, max(0.0, fragmentation)),
        duration_s=max(0.0, r.duration_s),
        excluded_regions=tuple(g.record() for g in r.regions),
        allocator_settings=dict(r.allocator_settings),
        inactive_split_peak=peaks.inactive_split,
        warnings=tuple(warnings),
        weights_idle_memory=decision.weights_idle,
        accounting=formula,
        cudagraph_memory=cudagraph,
        retained_memory=retained,
        weights_source=weights_source,
    )


def _free_memory_terms(
    r: ProfileReadings, peaks: _Peaks, source: TruthSource, charged_increase: int
) -> tuple[int, int]:
    """vLLM 0.33's terms: (peak above what stays after the profile, the free-memory drop).

    The drop of free memory since the baseline counts everything the process
    took (weights, what stays allocated, idle memory the allocator keeps, memory
    outside it); the peak term is the transient above what stays. With
    per-process attribution a co-tenant's change is taken out of the drop; on a
    device whose ``empty_cache`` frees runtime memory the figure before emptying
    counts.
    """
    before, after = r.before, r.after
    graphs = [g for g in r.regions if g.kind == "graphs"]
    if source is TruthSource.RESERVED:
        held_graph = sum(g.reserved_kept for g in graphs)
        stays = after.reserved - before.reserved - held_graph
    else:
        held_graph = sum(g.allocated_kept for g in graphs)
        stays = after.allocated - before.allocated - held_graph
    activation = max(0, charged_increase - max(0, stays))
    drop = r.baseline.free - after.free
    if r.baseline.other_processes is not None and after.other_processes is not None:
        drop -= after.other_processes - r.baseline.other_processes
    if r.quirks.empty_cache_releases_runtime_memory:
        drop += max(0, r.pre_empty.non_allocator - after.non_allocator)
    return activation, max(0, drop)
