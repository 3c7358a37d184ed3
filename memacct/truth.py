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

``auto`` therefore estimates what the allocator really needs from every reading
a real allocator reports, and leaves the part of it the chosen source does not
cover as a *fragmentation allowance*, which the planner keeps free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memacct.backend import BackendQuirks
from memacct.errors import InvalidInputError
from memacct.models import TruthSource
from memacct.units import format_gib

__all__ = [
    "ENV_TRUTH_SOURCE",
    "PeakMeasurement",
    "TruthDecision",
    "requested_truth_source",
    "resolve_truth_source",
]

ENV_TRUTH_SOURCE = "MEMACCT_TRUTH_SOURCE"

# Serving mixes step sizes the single profiling forward does not: tensors of one step land
# in segments cut for another's and strand their rest. The allowance for that is this share
# of the fragmentation the profile itself showed. Measured on the shipped scenarios (see
# docs/backends.md#truth-sources): no OOM from 0.1 up, within 0.005 of the reserved peak's
# efficiency up to 0.6; 0.5 leans toward safety.
CROSS_STEP_SHARE = 0.5
# Wholly free cached segments are released before an allocation fails, but only those still
# wholly free: a later step's smaller tensors best-fit into them first and pin them. This
# share of them stays charged (the hostile serving mixes measured needed up to a fifth).
REPIN_SHARE = 0.25


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
    """

    allocated_peak_increase: int
    reserved_peak_increase: int
    inactive_split_peak: int = 0
    inactive_split_increase: int = 0
    weights_idle: int = 0
    weights_given: bool = True


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
    """

    truth_source: TruthSource
    activation_peak: int
    reason: str
    fragmentation_allowance: int = 0


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


def resolve_truth_source(
    requested: TruthSource, peaks: PeakMeasurement, quirks: BackendQuirks
) -> TruthDecision:
    """Resolve ``requested`` against what was measured.

    A fixed source is taken as asked, with no allowance. ``auto`` estimates
    the memory the allocator needs for the activations at the physical limit,
    from readings every caching allocator reports (A = allocated peak
    increase, R = reserved peak increase, I = inactive-split peak increase,
    g = the allocator's growth granularity):

    1. Start from R: what the allocator really took.
    2. If the allocator attributes its idle memory (I > 0), memory beyond
       A + I sat in wholly free cached segments. A real allocator releases
       those and retries before it fails, so at the limit most of it is not
       needed: the estimate is ``A + I + REPIN_SHARE x (R - A - I)`` when that
       is below R (the share covers a later step pinning some of them first).
       Torch's expandable segments report no inactive split: they keep R.
    3. If the pool caps its growth at the free memory (``growth_rounding ==
       "doubling"``, MindSpore), the unused part of its last growth step is
       not needed at the limit either. The readings cannot separate it from
       the holes in the units before it, so half of ``R - A`` (at most one
       unit) is taken as that slack: the estimate is at most
       ``R - min(g, (R - A) / 2)``.
    4. The fragmentation F = estimate - A can recur between serving steps of
       other sizes; add ``CROSS_STEP_SHARE x F``.
    5. Free space inside the weights' segments (``weights_idle``) is held for
       the process's life and counted once, unless the weights are measured
       as reserved growth, which includes it.

    The resolved source is ``allocated_peak`` when the estimate is below R
    (the allocated peak plus an allowance covers it) and ``reserved`` when it
    is not (the reserved peak plus the cross-step allowance); the allowance is
    the estimate minus that source's peak, plus the weights' idle space.
    Without fragmentation (F = 0) ``auto`` is exactly ``allocated_peak``.
    """
    api = peaks.allocated_peak_increase
    rpi = peaks.reserved_peak_increase
    if requested is TruthSource.ALLOCATED_PEAK:
        return TruthDecision(requested, api, "requested allocated_peak")
    if requested is TruthSource.RESERVED:
        return TruthDecision(requested, rpi, "requested reserved")

    steps = [f"allocated peak +{_gib(api)}, reserved peak +{_gib(rpi)}"]
    estimate = max(rpi, api)
    isp = peaks.inactive_split_increase
    if rpi > api and isp > 0:
        bound = api + isp
        if bound < estimate:
            releasable = estimate - bound
            repinned = int(releasable * REPIN_SHARE)
            steps.append(
                f"at most {_gib(isp)} stranded in partly used segments, the other "
                f"{_gib(releasable)} reserved sat in wholly free segments the allocator "
                f"releases before failing (charging {_gib(repinned)} of them)"
            )
            estimate = bound + repinned
    elif rpi > api:
        steps.append("the allocator does not attribute its idle memory: keeping the reserved peak")
    if quirks.growth_rounding == "doubling" and rpi > api:
        # The unused part of the last unit is slack that a capped growth does not take, but the
        # readings cannot tell it from holes in the units before it: charge half of it.
        slack = min(quirks.growth_granularity_bytes, (rpi - api) // 2)
        if rpi - slack < estimate:
            steps.append(
                f"the pool caps its last growth ({_gib(quirks.growth_granularity_bytes)} units) "
                f"at the free memory: {_gib(slack)} taken as that unit's slack"
            )
            estimate = rpi - slack
    fragmentation = max(0, estimate - api)
    if fragmentation == 0:
        source = TruthSource.ALLOCATED_PEAK
        charged = api
        cross = 0
        steps.append("the pool does not fragment")
    else:
        cross = int(fragmentation * CROSS_STEP_SHARE)
        steps.append(
            f"fragmented pool: {_gib(fragmentation)} beyond the allocated peak, plus "
            f"{_gib(cross)} for serving steps of other sizes"
        )
        estimate += cross
        source = TruthSource.RESERVED if estimate >= rpi else TruthSource.ALLOCATED_PEAK
        charged = rpi if source is TruthSource.RESERVED else api
    allowance = estimate - charged
    weights_by_reserved = not peaks.weights_given and source is TruthSource.RESERVED
    if peaks.weights_idle > 0 and not weights_by_reserved:
        allowance += peaks.weights_idle
        steps.append(f"{_gib(peaks.weights_idle)} idle inside the weights' segments")
    peak_name = "reserved peak" if source is TruthSource.RESERVED else "allocated peak"
    reason = f"auto: {'; '.join(steps)}: charging the {peak_name}" + (
        f" plus a fragmentation allowance of {_gib(allowance)}" if allowance else ""
    )
    return TruthDecision(source, charged, reason, allowance)
