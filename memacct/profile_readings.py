"""What a profiling session read from the device, as :func:`memacct.accounting.account`
takes it: snapshots, the allocator's peaks per phase, and the regions it was told to
leave out. Plain frozen data (:mod:`memacct.profiling` fills it, the accounting reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from memacct.backend import BackendQuirks
from memacct.models import ExcludedRegion, MemorySnapshot, ProfiledSetup, TruthSource

__all__ = ["PhasePeak", "ProfileReadings", "RegionReading"]


@dataclass(frozen=True)
class PhasePeak:
    """The allocator's peaks over one stretch of the session between region markers (bytes).

    Attributes:
        allocated_peak: ``allocated_bytes.all.peak`` at the stretch's end (absolute).
        reserved_peak: ``reserved_bytes.all.peak`` at the stretch's end (absolute).
        inactive_split_peak: ``inactive_split_bytes.all.peak`` (absolute; 0 where
            the allocator does not report it).
        graph_allocated: allocated bytes held by graph pools captured before
            this stretch (not activations).
        graph_reserved: reserved bytes held by graph pools captured before it.
    """

    allocated_peak: int
    reserved_peak: int
    inactive_split_peak: int = 0
    graph_allocated: int = 0
    graph_reserved: int = 0


@dataclass(frozen=True)
class RegionReading:
    """What the session read around one ``exclude()`` or ``graphs()`` region.

    Attributes:
        label: the caller's name for the region.
        kind: ``"exclude"`` or ``"graphs"``.
        start: snapshot at the region's start.
        top: snapshot at its end, before the allocator gave anything back
            (its peaks are the region's: they were reset at its start).
        end: snapshot after ``empty_cache``: what the region still holds.
        duration_s: wall time of the region.
    """

    label: str
    kind: Literal["exclude", "graphs"]
    start: MemorySnapshot
    top: MemorySnapshot
    end: MemorySnapshot
    duration_s: float = 0.0

    @property
    def allocated_kept(self) -> int:
        """Allocated bytes the region left live."""
        return max(0, self.end.allocated - self.start.allocated)

    @property
    def reserved_kept(self) -> int:
        """Reserved bytes the region left after the allocator gave back what it could."""
        return max(0, self.end.reserved - self.start.reserved)

    @property
    def retained(self) -> int:
        """Idle bytes the region left in the allocator that it could not give back."""
        idle_end = self.end.reserved - self.end.allocated
        idle_start = self.start.reserved - self.start.allocated
        return max(0, idle_end - idle_start)

    @property
    def non_allocator_kept(self) -> int:
        """Growth of this process's memory outside the allocator across the region."""
        return max(0, self.end.non_allocator - self.start.non_allocator)

    @property
    def held(self) -> int:
        """Device memory the region holds after it ended (the graph pool for ``graphs``)."""
        return max(self.allocated_kept, self.reserved_kept) + self.non_allocator_kept

    def record(self) -> ExcludedRegion:
        """The region as the profile records it."""
        return ExcludedRegion(
            label=self.label,
            kind=self.kind,
            allocated_spike=max(0, self.top.allocated_peak - self.start.allocated),
            reserved_spike=max(0, self.top.reserved_peak - self.start.reserved),
            duration_s=max(0.0, self.duration_s),
            allocated_kept=self.allocated_kept,
            retained_bytes=self.retained,
            held_bytes=self.held if self.kind == "graphs" else 0,
        )


@dataclass(frozen=True)
class ProfileReadings:
    """Everything a profiling session read from the device, and what it was asked.

    Attributes:
        baseline: snapshot before the model existed.
        before: snapshot on entering the session (after gc, empty_cache, peak reset).
        pre_empty: snapshot on leaving it, before ``empty_cache``.
        after: snapshot on leaving it, after ``empty_cache``.
        phases: the allocator's peaks over each stretch between region markers,
            in order (regions themselves are not phases: their spikes are not
            activations).
        regions: the ``exclude()`` and ``graphs()`` regions, in order.
        requested_truth_source: the truth source asked for (may be ``auto``).
        inactive_split_start: ``inactive_split_bytes.all.current`` on entering.
        weights_memory: the caller's weights, or ``None`` to measure them.
        quirks: the backend's declared quirks.
        allocator_settings: the allocator settings in effect.
        profiled: what was profiled.
        duration_s: wall time of the session.
        replay_need: what replaying the profiled work's traces through the backend's
            allocator model needs for the activations (:func:`replay_request` says what
            to replay; the profiling session runs it), ``None`` without a replay;
            ``auto`` sizes the activations from it.
        allocator_limit: the most bytes the allocator may reserve, as the backend
            declared it (``None``: no cap beyond the device); recorded as is.
    """

    baseline: MemorySnapshot
    before: MemorySnapshot
    pre_empty: MemorySnapshot
    after: MemorySnapshot
    phases: tuple[PhasePeak, ...]
    regions: tuple[RegionReading, ...]
    requested_truth_source: TruthSource
    inactive_split_start: int = 0
    weights_memory: int | None = None
    quirks: BackendQuirks = field(default_factory=BackendQuirks)
    allocator_settings: Mapping[str, str] = field(default_factory=dict)
    profiled: ProfiledSetup = field(default_factory=ProfiledSetup)
    duration_s: float = 0.0
    replay_need: int | None = None
    allocator_limit: int | None = None

    @property
    def serving_role(self) -> str:
        """The role the profile records (``mixed`` where it records none)."""
        return self.profiled.serving_role or "mixed"
