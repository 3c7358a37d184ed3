"""Choosing the truth source: which measured peak the KV-cache budget must respect.

``allocated_peak`` trusts the bytes of live tensors at the peak: right for an
allocator that can reuse its free cached blocks for the next request.
``reserved`` trusts what the allocator really took from the device: right
when the pool fragments and those free cached blocks cannot be reused.
``auto`` decides from the measurement itself (see :func:`resolve_truth_source`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memacct.backend import BackendQuirks
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

# Above this share of the reserved increase held in cached-but-unallocated blocks,
# the allocated peak is taken to understate what serving will reserve.
AUTO_FRAGMENTATION_THRESHOLD = 0.05


@dataclass(frozen=True)
class PeakMeasurement:
    """What a profiling session measured, as the truth-source decision sees it (bytes)."""

    allocated_peak_increase: int
    reserved_peak_increase: int
    inactive_split_peak: int


@dataclass(frozen=True)
class TruthDecision:
    """The resolved truth source, the activation peak it implies, and why."""

    truth_source: TruthSource
    activation_peak: int
    reason: str


def requested_truth_source(argument: TruthSource | str | None, default: TruthSource) -> TruthSource:
    """The truth source asked for: the argument, else ``MEMACCT_TRUTH_SOURCE``, else ``default``."""
    if argument is not None:
        return TruthSource.parse(argument)
    env = os.environ.get(ENV_TRUTH_SOURCE, "").strip()
    if env:
        return TruthSource.parse(env)
    return default


def resolve_truth_source(
    requested: TruthSource, peaks: PeakMeasurement, quirks: BackendQuirks
) -> TruthDecision:
    """Resolve ``requested`` against what was measured.

    A fixed source is taken as asked. ``auto`` compares the reserved and
    allocated increases: when the allocator reserved noticeably more than the
    live tensors needed (more than 5% of the reserved increase and more than
    one growth step of the allocator), that overhead is what serving will pay
    too, so it resolves to ``reserved``; otherwise to ``allocated_peak``.
    """
    api = peaks.allocated_peak_increase
    rpi = peaks.reserved_peak_increase
    if requested is TruthSource.ALLOCATED_PEAK:
        return TruthDecision(requested, api, "requested allocated_peak")
    if requested is TruthSource.RESERVED:
        return TruthDecision(requested, rpi, "requested reserved")
    overhead = max(0, rpi - api)
    share = overhead / rpi if rpi > 0 else 0.0
    measured = (
        f"reserved increase {format_gib(rpi)} vs allocated peak increase {format_gib(api)}"
        f" ({share:.1%} not allocated)"
    )
    if share > AUTO_FRAGMENTATION_THRESHOLD and overhead > quirks.growth_granularity_bytes:
        return TruthDecision(
            TruthSource.RESERVED, rpi, f"auto: fragmented pool, {measured}: using reserved"
        )
    return TruthDecision(
        TruthSource.ALLOCATED_PEAK,
        api,
        f"auto: pool not fragmented, {measured}: using allocated peak",
    )
