"""Choosing the truth source: which measured peak the KV-cache budget must respect.

``allocated_peak`` trusts the bytes of live tensors at the peak: right for an
allocator that can always reuse its free cached blocks for the next request.
``reserved`` trusts what the allocator really took from the device: right
when the pool fragments and those free cached blocks cannot be reused.
``auto`` decides from the measurement itself (see :func:`resolve_truth_source`
and ``docs/backends.md#truth-sources``).

Why neither fixed source is right at the physical limit (utilization 1.0),
measured on the simulated allocators (``memacct bench``):

* the allocated peak lies whenever the allocator rounds or splits: torch keeps
  requests under 10 MiB in shared 20 MiB segments and strands the free rest of
  a segment that still holds a live tensor; MindSpore's pool cannot merge idle
  memory across its blocks. Serving then needs more than the allocated peak
  and runs out of memory;
* the reserved peak overstates when the allocator cached wholly free segments
  it could have given back (torch releases them and retries before it fails),
  and when the pool grew by a coarse unit it caps at the free memory anyway
  (MindSpore); and it understates when serving mixes step sizes, because a
  step's tensors land in segments cut for another step's and strand their rest
  (fragmentation the single profiling forward cannot show).

``auto`` therefore estimates what the allocator really needs: by replaying the
profiled work and serving-step shapes through the backend's allocator model
where it can (:mod:`memacct.replay`: on a caching allocator every ordered pair
of a grid of step shapes and random step sequences too, since what a step
strands depends on the segments the steps before it cut), else from a bound
on the readings, with the reserved peak as the floor for a pool that
fragments. The part of the estimate the chosen source does not cover is a *fragmentation allowance*,
which the planner keeps free. No constant in it was fitted on benchmark
scenarios.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memacct.backend import LARGE_BUFFER_BYTES, BackendQuirks
from memacct.errors import InvalidInputError
from memacct.models import TruthSource
from memacct.units import format_gib

__all__ = [
    "ENV_TRUTH_SOURCE",
    "PeakMeasurement",
    "TruthDecision",
    "cache_ends_over",
    "replay_floor",
    "requested_truth_source",
    "resolve_truth_source",
]

ENV_TRUTH_SOURCE = "MEMACCT_TRUTH_SOURCE"

SHARED_SEGMENT_BYTES = LARGE_BUFFER_BYTES
"""The segment that requests of 1-10 MiB share on torch's and torch_npu's caching
allocators (``kLargeBuffer``, :data:`memacct.backend.LARGE_BUFFER_BYTES`): the most one
more partly used shared segment can strand."""

@dataclass(frozen=True)
class PeakMeasurement:
    """What a profiling session measured, as the truth-source decision sees it (bytes).

    Attributes:
        allocated_peak_increase: peak allocated during the session minus allocated at its start.
        reserved_peak_increase: peak reserved during the session minus reserved at its start.
        inactive_split_peak: peak of ``inactive_split_bytes.all`` (absolute).
        inactive_split_increase: that peak minus ``inactive_split_bytes.all.current``
            at the session's start: free pieces of partly used segments the
            forward pass left stranded at worst.
        weights_idle: reserved-but-unallocated bytes gained between the
            baseline and the session's start (after ``empty_cache``): free
            space inside the weights' segments or pool blocks, which the
            allocator cannot give back.
        weights_given: the caller passed ``weights_memory`` (else the profiler
            measures the weights as the growth the resolved source sees).
        replay_need: the memory the activations need at the physical limit, from
            replaying serving-step shapes through the allocator's model
            (:func:`memacct.replay.replay_need`); ``None`` where no replay exists.
        serving_role: the steps the instance serves (:data:`memacct.replay.SERVING_ROLES`).
    """

    allocated_peak_increase: int
    reserved_peak_increase: int
    inactive_split_peak: int = 0
    inactive_split_increase: int = 0
    weights_idle: int = 0
    weights_given: bool = True
    replay_need: int | None = None
    serving_role: str = "mixed"


@dataclass(frozen=True)
class TruthDecision:
    """The resolved truth source, the activation peak it implies, the allowance, and why.

    Attributes:
        truth_source: ``allocated_peak`` or ``reserved`` (never ``auto``).
        activation_peak: the resolved source's peak increase.
        reason: one sentence with the numbers behind the decision.
        fragmentation_allowance: bytes the allocator is expected to hold beyond
            the weights and ``activation_peak`` while serving (``auto`` only; 0
            for a fixed source). The planner keeps them free.
        weights_idle: the part of the allowance that is the idle space inside the
            weights' segments (W), which the reservation after the profile holds too.
    """

    truth_source: TruthSource
    activation_peak: int
    reason: str
    fragmentation_allowance: int = 0
    weights_idle: int = 0


def requested_truth_source(argument: TruthSource | str | None, default: TruthSource) -> TruthSource:
    """The truth source asked for: the argument, else ``MEMACCT_TRUTH_SOURCE``, else ``default``."""
    if argument is not None:
        return TruthSource.parse(argument)
    env = os.environ.get(ENV_TRUTH_SOURCE, "").strip()
    if env:
        try:
            return TruthSource.parse(env)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"{ENV_TRUTH_SOURCE}={env!r} in the environment: {exc} (or unset it)"
            ) from None
    return default


def _gib(n: int) -> str:
    return format_gib(n, 3)


def replay_floor(
    reserved_peak_increase: int, inactive_split_increase: int, quirks: BackendQuirks, role: str
) -> int:
    """The replayed need below which :func:`resolve_truth_source` charges the same anyway: 0.

    The reserved peak was once the floor of a caching allocator's replayed need; it is not
    (see :func:`resolve_truth_source`), so the replay bisects all the way
    (:func:`memacct.replay.replay_need`'s ``floor``). Kept for callers that pass it.
    """
    return 0


def cache_ends_over(granularity: int, count: int = 4) -> tuple[int, ...]:
    """``count`` cache ends spread evenly over one page of ``granularity`` bytes.

    On a packed pool where the KV cache ends inside a page moves the activations' pages,
    and the plan's cache is not known when profiling: the replay runs once per end
    (:func:`memacct.replay.replay_need`'s ``cache_ends``).
    """
    return tuple(k * granularity // count for k in range(count)) if granularity > 0 else (0,)


def _shared_segment(quirks: BackendQuirks, inactive_split_increase: int) -> int:
    """One shared segment on a caching allocator whose profile stranded pieces, else 0."""
    stranded = quirks.growth_rounding == "multiple" and inactive_split_increase > 0
    return SHARED_SEGMENT_BYTES if stranded else 0


def resolve_truth_source(
    requested: TruthSource, peaks: PeakMeasurement, quirks: BackendQuirks
) -> TruthDecision:
    """Resolve ``requested`` against what was measured.

    A fixed source is taken as asked, with no allowance. ``auto`` estimates
    the memory the allocator needs for the activations at the physical limit
    (A = allocated peak increase, R = reserved peak increase, I = the
    inactive-split peak increase: free pieces stranded in partly used
    segments, W = idle space in the weights' segments):

    1. No fragmentation (R <= A): the allocated peak, exactly.
    2. With a replay (the profiled work's allocation trace and the backend's
       allocator model, :mod:`memacct.replay`): the least memory with which
       the profile, the KV cache and a ladder of serving-step shapes complete
       on the model, and on a caching allocator every ordered pair of a grid
       of shapes too, each from the state the cache left; the shapes are a
       decode instance's where the profile says it serves one. Nothing is
       fitted: the shapes cover the scheduler's whole range of token and
       sequence counts. The replay starts from the weights' segments, so W
       counts toward it; the total is never below A, what the engine's own
       profile needed. R is not a floor: the profiled step run again after
       the KV cache completes in less than it reserved from an empty cache,
       because at the limit the allocator releases its wholly free segments
       and retries (the replay runs it so). With R as the floor, 3 of 100
       development scenarios planned 0.956-0.967 of the oracle where
       ``allocated_peak`` served at 0.991-1.000; without it none ran out of
       memory on the development seed (100), the fresh seed (200) or the
       shipped set (``docs/backends.md#truth-sources``).
    3. Without one, a bound from the readings: the reserved peak R is the
       floor for a pool that fragments (what the allocator really took), and
       where the allocator reports stranded pieces, ``A + 2 x I`` when that
       is more: the profiled step stranded at most I, and a serving step of
       another size can strand as much again in the segments this one cut.

    The resolved source is ``allocated_peak`` when the estimate is below R
    and ``reserved`` when it is not; the allowance is the estimate minus that
    source's peak, plus W unless the weights were measured as reserved growth
    (which includes it). The planner keeps the allowance free.
    """
    api = peaks.allocated_peak_increase
    rpi = peaks.reserved_peak_increase
    if requested is TruthSource.ALLOCATED_PEAK:
        return TruthDecision(requested, api, "requested allocated_peak")
    if requested is TruthSource.RESERVED:
        return TruthDecision(requested, rpi, "requested reserved")

    steps = [f"allocated peak +{_gib(api)}, reserved peak +{_gib(rpi)}"]
    if rpi <= api:
        steps.append("the pool does not fragment")
        return _decision(peaks, steps, api)
    isp = peaks.inactive_split_increase
    stranded = api + 2 * isp if isp > 0 else 0
    if peaks.replay_need is not None:
        # The replay starts from the weights' segments, idle space W included, so what it
        # needs is beyond W; the allowance adds W back (_decision). The allocated peak
        # stays the floor of the total: the engine's own profile needed it.
        need = max(api - peaks.weights_idle, peaks.replay_need)
        role = "" if peaks.serving_role == "mixed" else f" of a {peaks.serving_role} instance"
        steps.append(
            f"replaying the profile, the KV cache and serving-step shapes{role} through the "
            f"allocator's model needs {_gib(need)} beyond the weights"
        )
        if quirks.growth_rounding == "packed" and quirks.growth_granularity_bytes > 0:
            # The replay's cache ends are samples a fraction of a page apart; between them
            # the activations can straddle one more page.
            steps.append(
                f"one page ({_gib(quirks.growth_granularity_bytes)}) for cache ends between "
                "the replayed ones"
            )
            need += quirks.growth_granularity_bytes
        shared = _shared_segment(quirks, isp)
        if shared:
            # The replay samples the scheduler's shapes; a sequence outside the sample
            # can leave one more shared segment partly used when a step peaks.
            steps.append(
                f"one shared segment ({_gib(shared)}) for step sequences outside the "
                "replay's sample"
            )
            need += shared
        return _decision(peaks, steps, need)
    estimate = rpi
    if stranded > rpi:
        estimate = stranded
        steps.append(
            f"no replay: {_gib(isp)} stranded in partly used segments, charged for this step "
            "and once more for a step of another size"
        )
    else:
        steps.append("no replay: the reserved peak, the floor for a pool that fragments")
    return _decision(peaks, steps, estimate)


def _decision(peaks: PeakMeasurement, steps: list[str], estimate: int) -> TruthDecision:
    """The source, its peak and the allowance that together charge ``estimate`` (+ W)."""
    api = peaks.allocated_peak_increase
    rpi = peaks.reserved_peak_increase
    source = TruthSource.RESERVED if estimate >= rpi > api else TruthSource.ALLOCATED_PEAK
    charged = rpi if source is TruthSource.RESERVED else api
    allowance = estimate - charged
    weights_by_reserved = not peaks.weights_given and source is TruthSource.RESERVED
    idle = 0 if weights_by_reserved else peaks.weights_idle
    if idle > 0:
        # Held for the process's life and counted once.
        allowance += idle
        steps.append(f"{_gib(idle)} idle inside the weights' segments")
    # Never below the charged peak: a replay that needs less than the allocated peak
    # (beyond the idle space) leaves the allocated peak, as the engine measured it.
    allowance = max(0, allowance)
    peak_name = "reserved peak" if source is TruthSource.RESERVED else "allocated peak"
    reason = f"auto: {'; '.join(steps)}: charging the {peak_name}" + (
        f" plus a fragmentation allowance of {_gib(allowance)}" if allowance else ""
    )
    return TruthDecision(source, charged, reason, allowance, min(idle, allowance))
