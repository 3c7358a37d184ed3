"""The data model: snapshots of one device's memory and the result of profiling.

All sizes are ``int`` bytes. Every model is a frozen pydantic v2 model, so it
round-trips through JSON losslessly::

    >>> snap = MemorySnapshot(backend="sim", device=0, timestamp=0.0, total=80, free=30,
    ...                       used=50, allocated=10, allocated_peak=12, reserved=20,
    ...                       reserved_peak=20, non_allocator=30, other_processes=None)
    >>> MemorySnapshot.model_validate_json(snap.model_dump_json()) == snap
    True

A snapshot splits the device's ``used`` memory into this process's allocator
(``reserved``, of which ``allocated`` is live tensors), this process's memory
outside the allocator (``non_allocator``), and other processes
(``other_processes``, ``None`` where the backend cannot attribute memory per
process; then ``non_allocator`` includes them).
"""

from __future__ import annotations

import enum
import math
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from memacct.checks import FROZEN
from memacct.errors import InvalidInputError
from memacct.jsonfile import LOADED_CONTEXT, JsonFile, load_model_json, validation_problems
from memacct.units import format_gib

__all__ = [
    "ExcludedRegion",
    "MemoryDelta",
    "MemorySnapshot",
    "ProfileResult",
    "ProfiledSetup",
    "TruthSource",
    "load_model_json",
    "non_kv_sum",
    "validation_problems",
]

PROFILE_FORMAT_VERSION = 1

MAX_BYTES = 2**60
"""The largest size a model accepts, bytes (1 EiB): far beyond any device, so a larger
number is a corrupt or hand-edited file, refused before any arithmetic overflows on it."""

_Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
"""A size in bytes as the files hold it: 0 up to :data:`MAX_BYTES`."""


class TruthSource(str, enum.Enum):
    """Which measurement decides the activation peak of a profile.

    ``allocated_peak``: the increase of ``allocated_bytes.all.peak`` during
    profiling (what vLLM does). ``reserved``: the increase of reserved memory
    during profiling (what vllm-mindspore does, because its pool fragments).
    ``auto``: decided from the measurement itself; a profile always records
    the resolved source, never ``auto``.
    """

    ALLOCATED_PEAK = "allocated_peak"
    RESERVED = "reserved"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | TruthSource) -> TruthSource:
        """Return the truth source named ``value`` or raise a clear error."""
        if isinstance(value, TruthSource):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            choices = ", ".join(repr(t.value) for t in cls)
            raise InvalidInputError(
                f"unknown truth source {value!r}: use one of {choices}"
            ) from None


class MemorySnapshot(BaseModel):
    """One device's memory at one moment, split into the three kinds.

    Attributes:
        backend: name of the backend that measured it.
        device: device index as the backend numbers devices.
        timestamp: ``time.time()`` when it was taken.
        total: device memory visible to this process, bytes.
        free: free device memory, bytes.
        used: ``total - free``, bytes.
        allocated: bytes of live tensors in this process's caching allocator.
        allocated_peak: peak of ``allocated`` since the last peak reset.
        reserved: bytes the caching allocator holds from the device.
        reserved_peak: peak of ``reserved`` since the last peak reset.
        non_allocator: this process's memory outside the allocator
            (``used - reserved - other_processes``).
        other_processes: memory of other processes, or ``None`` where the
            backend cannot attribute memory per process.
    """

    model_config = FROZEN

    backend: str
    device: int = Field(ge=0)
    timestamp: float
    total: int = Field(gt=0, le=MAX_BYTES)
    free: _Bytes
    used: _Bytes
    allocated: _Bytes
    allocated_peak: _Bytes
    reserved: _Bytes
    reserved_peak: _Bytes
    non_allocator: _Bytes
    other_processes: int | None = Field(default=None, ge=0, le=MAX_BYTES)

    @model_validator(mode="after")
    def _consistent(self) -> MemorySnapshot:
        if not math.isfinite(self.timestamp):
            raise ValueError(f"timestamp must be finite, got {self.timestamp}")
        if self.free > self.total:
            raise ValueError(f"free ({self.free}) exceeds total ({self.total})")
        if self.used != self.total - self.free:
            raise ValueError(
                f"used ({self.used}) must equal total - free ({self.total - self.free})"
            )
        if self.allocated > self.reserved:
            raise ValueError(f"allocated ({self.allocated}) exceeds reserved ({self.reserved})")
        if self.allocated_peak < self.allocated or self.reserved_peak < self.reserved:
            raise ValueError("a peak is below its current value")
        expected = self.used - self.reserved - (self.other_processes or 0)
        if self.non_allocator != expected:
            raise ValueError(
                f"non_allocator ({self.non_allocator}) must equal used - reserved"
                f" - other_processes ({expected})"
            )
        return self

    def __sub__(self, other: MemorySnapshot) -> MemoryDelta:
        if not isinstance(other, MemorySnapshot):
            return NotImplemented
        if (self.backend, self.device) != (other.backend, other.device):
            raise InvalidInputError(
                f"cannot subtract a snapshot of {other.backend}:{other.device} from one of "
                f"{self.backend}:{self.device}: take both snapshots on the same device"
            )
        now, then = self.other_processes, other.other_processes
        fields = ("timestamp", "total", "free", "used", "allocated", "allocated_peak",
                  "reserved", "reserved_peak", "non_allocator")  # fmt: skip
        return MemoryDelta(
            backend=self.backend,
            device=self.device,
            other_processes=None if now is None or then is None else now - then,
            **{f: getattr(self, f) - getattr(other, f) for f in fields},
        )

    def __str__(self) -> str:
        other = "n/a" if self.other_processes is None else format_gib(self.other_processes)
        return (
            f"{self.backend}:{self.device} used {format_gib(self.used)} of "
            f"{format_gib(self.total)} (free {format_gib(self.free)}): reserved "
            f"{format_gib(self.reserved)}, allocated {format_gib(self.allocated)}, non-allocator "
            f"{format_gib(self.non_allocator)}, other processes {other}"
        )


class MemoryDelta(BaseModel):
    """Field-wise difference of two snapshots of one device (``later - earlier``).

    Sizes may be negative; ``timestamp`` holds the seconds between the two.
    """

    model_config = FROZEN

    backend: str
    device: int
    timestamp: float
    total: int
    free: int
    used: int
    allocated: int
    allocated_peak: int
    reserved: int
    reserved_peak: int
    non_allocator: int
    other_processes: int | None = None

    def __str__(self) -> str:
        return (
            f"{self.backend}:{self.device} over {self.timestamp:.3f}s: "
            f"used {format_gib(self.used)}, reserved {format_gib(self.reserved)}, "
            f"allocated {format_gib(self.allocated)}, "
            f"non-allocator {format_gib(self.non_allocator)}"
        )


class ExcludedRegion(BaseModel):
    """A region of a profiling session whose spike was not charged as activations.

    ``kind`` is ``"exclude"`` for :meth:`ProfilingSession.exclude` (compilation:
    its transient spike is not needed again while serving) and ``"graphs"`` for
    :meth:`ProfilingSession.graphs` (graph capture: the memory it holds after
    it ends is the graph pool, charged as ``cudagraph_memory``).
    """

    model_config = FROZEN

    label: str
    allocated_spike: _Bytes = Field(description="peak allocated above the region's start, bytes")
    reserved_spike: _Bytes = Field(description="peak reserved above the region's start, bytes")
    duration_s: float = Field(ge=0)
    kind: Literal["exclude", "graphs"] = "exclude"
    allocated_kept: _Bytes = Field(
        default=0,
        description="allocated bytes the region left live after it ended",
    )  # fmt: skip
    retained_bytes: _Bytes = Field(
        default=0,
        description=(
            "idle bytes the allocator kept from the region after giving back what it "
            "could (empty_cache): a pool or partly used segments that never release"
        ),
    )  # fmt: skip
    held_bytes: _Bytes = Field(
        default=0,
        description=(
            "graphs only: device memory the region holds after it ended (the graph pool "
            "and its memory outside the allocator), bytes"
        ),
    )  # fmt: skip


class ProfiledSetup(BaseModel):
    """What a profile profiled: the model, its layout and the engine's budgets.

    Every field is optional (``None``: not recorded; profiles saved before
    these fields existed load with none). :func:`memacct.planner.guard.check_profile_matches`
    refuses to plan a spec that contradicts a recorded value.

    Attributes:
        architecture: the config's ``model_type`` (e.g. ``qwen2``).
        model_name: the model's name or path.
        tensor_parallel_size: ranks a layer is split across.
        tensor_parallel_rank: this rank's index among them.
        pipeline_parallel_size: pipeline stages.
        pipeline_parallel_rank: this rank's stage.
        dtype: the weights' dtype (``bfloat16``, ...).
        max_num_batched_tokens: tokens of the profiled forward pass.
        max_num_seqs: sequences the profiled sampler sampled.
        serving_role: the steps the instance will serve, which ``auto``'s replay
            covers (:data:`memacct.replay.SERVING_ROLES`): ``decode`` for a
            disaggregated decode instance (every step as many tokens as sequences),
            ``prefill`` for a prefill instance, ``mixed`` (or ``None``) for any step.
    """

    model_config = FROZEN

    architecture: str | None = None
    model_name: str | None = None
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    tensor_parallel_rank: int | None = Field(default=None, ge=0)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_rank: int | None = Field(default=None, ge=0)
    dtype: str | None = None
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    serving_role: Literal["mixed", "prefill", "decode"] | None = None

    @model_validator(mode="after")
    def _ranks_in_range(self) -> ProfiledSetup:
        for kind in ("tensor", "pipeline"):
            size = getattr(self, f"{kind}_parallel_size")
            rank = getattr(self, f"{kind}_parallel_rank")
            if size is not None and rank is not None and rank >= size:
                raise ValueError(
                    f"{kind}_parallel_rank {rank} is not below {kind}_parallel_size {size}"
                )
        return self


def non_kv_sum(
    weights_memory: int,
    activation_peak: int,
    non_allocator_increase: int,
    cudagraph_memory: int = 0,
    retained_memory: int = 0,
) -> int:
    """What one rank holds besides its KV cache: the one sum of the non-KV terms, for a
    profile (:class:`ProfileResult`), a plan's budget, an engine's start-up estimate and the
    plan's own check of them alike."""
    return (weights_memory + activation_peak + non_allocator_increase + cudagraph_memory
            + retained_memory)  # fmt: skip


class ProfileResult(JsonFile):
    """What a profiling session measured, and the non-KV-cache memory it implies.

    Attributes:
        baseline: snapshot taken before the model existed.
        before: snapshot on entering the session (after gc, empty_cache, peak reset).
        after: snapshot on leaving it (after gc, empty_cache).
        weights_memory: bytes of the model's weights.
        activation_peak: peak activation bytes by the resolved truth source.
        allocated_peak_increase: peak allocated during the session minus
            allocated at its start.
        reserved_peak_increase: peak reserved during the session minus
            reserved at its start.
        non_allocator_increase: ``after.non_allocator - baseline.non_allocator``;
            :func:`memacct.memory_profiling` records a fall as 0 (see ``warnings``).
        non_kv_cache_memory: ``weights_memory + activation_peak + non_allocator_increase
            + cudagraph_memory + retained_memory``.
        truth_source: the resolved truth source (never ``auto``).
        fragmentation: ``(reserved - allocated) / reserved`` at the session's peak.
        duration_s: wall time of the session.
        warnings: what made the measurement doubtful, one sentence each (another
            process allocating or freeing device memory during profiling, a fall
            of non-allocator memory that was not credited); empty when none.
        fragmentation_allowance: bytes the allocator is expected to hold while
            serving beyond the weights and the activation peak (stranded free
            pieces of segments, idle space in the weights' segments), estimated
            by the ``auto`` truth source; 0 for a fixed source. Not part of
            ``non_kv_cache_memory``: the planner keeps it free inside the KV budget.
        weights_idle_memory: the part of ``fragmentation_allowance`` that is idle space
            inside the weights' segments or pool blocks: held since before the profile,
            so ``after.reserved`` holds it too and the planner counts it once (0 in
            profiles saved before the field existed).
        accounting: which formula turned the readings into ``non_kv_cache_memory``:
            ``components`` (the seed's: weights + activation peak + non-allocator
            increase) or ``free_memory`` (vLLM 0.33's: free memory at the baseline
            minus free memory after the profile, plus the peak above what is
            allocated after it); see ``docs/accounting.md``.
        cudagraph_memory: device memory held by the graph pools captured in
            :meth:`ProfilingSession.graphs` regions, bytes (inside the allocator
            and outside it), charged on its own, never as activations.
        retained_memory: memory the allocator holds that the truth source's peak
            does not cover and cannot be given back: idle memory excluded regions
            left in a pool that does not release it (``components``), or every
            byte of the free-memory drop not named by another term (``free_memory``).
        weights_source: ``given`` (the caller passed ``weights_memory``),
            ``measured`` (the allocator's growth since the baseline) or ``none``
            (measured as 0: the baseline was taken after the weights existed).
            A profile with ``weights_memory == 0`` must say ``given`` or ``none``.
        profiled: what was profiled (model, layout, budgets); the planner refuses
            a spec that contradicts it.
        growth_granularity_bytes: the allocator's growth step for a large
            tensor (the backend's quirk); 0 when unknown (older profiles).
        growth_rounding: how the allocator rounds a large tensor to that step:
            ``multiple`` (its own segment, rounded up to a multiple: torch,
            torch_npu), ``packed`` (tensors packed one after another in a growing
            segment: expandable segments), ``doubling`` (a block of the step
            doubled until it fits, capped at the free memory: MindSpore). The
            planner uses both to leave room for each layer's KV-cache tensor.
        allocator_limit: the most bytes this process's allocator may reserve,
            as the backend declared it after the model was loaded (MindSpore's
            pool budget, torch's per-process memory fraction x total); ``None``
            when the allocator has no cap beyond the device (and in profiles
            saved before the field existed). The planner keeps the allocator's
            holdings, the KV cache included, within it.
    """

    model_config = FROZEN
    file_kind: ClassVar[str] = "profile"

    format_version: int = Field(default=PROFILE_FORMAT_VERSION, strict=True)
    baseline: MemorySnapshot
    before: MemorySnapshot
    after: MemorySnapshot
    weights_memory: _Bytes
    activation_peak: _Bytes
    allocated_peak_increase: _Bytes
    reserved_peak_increase: _Bytes
    non_allocator_increase: _Bytes
    non_kv_cache_memory: _Bytes
    truth_source: TruthSource
    requested_truth_source: TruthSource = TruthSource.ALLOCATED_PEAK
    truth_source_reason: str = ""
    fragmentation: float = Field(ge=0.0, le=1.0)
    duration_s: float = Field(ge=0.0)
    excluded_regions: tuple[ExcludedRegion, ...] = ()
    allocator_settings: dict[str, str] = Field(default_factory=dict)
    inactive_split_peak: _Bytes = 0
    warnings: tuple[str, ...] = ()
    fragmentation_allowance: _Bytes = 0
    weights_idle_memory: _Bytes = 0
    growth_granularity_bytes: _Bytes = 0
    growth_rounding: Literal["multiple", "packed", "doubling"] = "multiple"
    accounting: Literal["components", "free_memory"] = "components"
    cudagraph_memory: _Bytes = 0
    retained_memory: _Bytes = 0
    weights_source: Literal["given", "measured", "none"] = "measured"
    profiled: ProfiledSetup = Field(default_factory=ProfiledSetup)
    allocator_limit: int | None = Field(default=None, gt=0, le=MAX_BYTES)

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> ProfileResult:
        if self.format_version != PROFILE_FORMAT_VERSION:
            raise ValueError(
                f"format_version {self.format_version} is not supported by this memacct "
                f"(it reads version {PROFILE_FORMAT_VERSION}): profile again with this version"
            )
        if self.truth_source is TruthSource.AUTO:
            raise ValueError("truth_source must be resolved: 'allocated_peak' or 'reserved'")
        snaps = (self.baseline, self.before, self.after)
        if len({(s.backend, s.device) for s in snaps}) != 1:
            raise ValueError("baseline, before and after must come from one backend and device")
        if len({s.total for s in snaps}) != 1:
            raise ValueError("baseline, before and after disagree on the device's total memory")
        expected = self.weights_memory + self.activation_peak + self.non_allocator_increase
        expected += self.cudagraph_memory + self.retained_memory
        if self.non_kv_cache_memory != expected:
            raise ValueError(
                f"non_kv_cache_memory ({self.non_kv_cache_memory}) must equal weights_memory"
                " + activation_peak + non_allocator_increase + cudagraph_memory"
                f" + retained_memory ({expected})"
            )
        if not math.isfinite(self.duration_s) or not math.isfinite(self.fragmentation):
            raise ValueError("duration_s and fragmentation must be finite")
        if self.weights_idle_memory > self.fragmentation_allowance:
            raise ValueError(
                f"weights_idle_memory ({self.weights_idle_memory}) is part of the "
                f"fragmentation_allowance ({self.fragmentation_allowance}): it cannot exceed it"
            )
        self._peaks_agree()
        loaded = isinstance(info.context, dict) and info.context.get(LOADED_CONTEXT)
        if loaded and self.weights_memory == 0 and self.weights_source == "measured":
            # Checked on loading only: a test or a tool may build a weightless profile by hand.
            raise ValueError(
                "weights_memory is 0 but weights_source says it was measured: a profile of a "
                "model with weights measures them above 0; profile again (pass weights_memory=0 "
                "explicitly if the model really holds no weights on this device)"
            )
        return self

    def _peaks_agree(self) -> None:
        """No peak below its component, no activation peak beyond what was measured."""
        before = self.before
        if before.allocated + self.allocated_peak_increase > (
            before.reserved + self.reserved_peak_increase
        ):
            raise ValueError(
                f"the allocated peak ({before.allocated + self.allocated_peak_increase}) is "
                f"above the reserved peak ({before.reserved + self.reserved_peak_increase}): "
                "an allocator never hands out more than it holds"
            )
        measured = max(self.allocated_peak_increase, self.reserved_peak_increase)
        if self.activation_peak > measured:
            raise ValueError(
                f"activation_peak ({self.activation_peak}) is above both measured peak "
                f"increases (allocated {self.allocated_peak_increase}, reserved "
                f"{self.reserved_peak_increase})"
            )
        if self.accounting != "components":
            # The free-memory formula measures the peak above what stays allocated after the
            # profile; what stays is in retained_memory, through the free-memory drop.
            return
        floor = (
            self.reserved_peak_increase
            if self.truth_source is TruthSource.RESERVED
            else self.allocated_peak_increase
        )
        covered = self.activation_peak + self.cudagraph_memory + self.retained_memory
        if covered < floor:
            raise ValueError(
                f"activation_peak ({self.activation_peak}) with cudagraph_memory "
                f"({self.cudagraph_memory}) and retained_memory ({self.retained_memory}) is "
                f"below the {self.truth_source} increase it comes from ({floor})"
            )

    @property
    def backend(self) -> str:
        """Name of the backend that measured this profile."""
        return self.after.backend

    @property
    def device(self) -> int:
        """Device index this profile was measured on."""
        return self.after.device

    @property
    def total_memory(self) -> int:
        """Device memory visible to the process, bytes."""
        return self.after.total

    def __str__(self) -> str:
        return (
            f"profile on {self.backend}:{self.device} ({self.truth_source}): "
            f"weights {format_gib(self.weights_memory)}, "
            f"activation peak {format_gib(self.activation_peak)}, "
            f"non-allocator increase {format_gib(self.non_allocator_increase)}, "
            f"non-KV total {format_gib(self.non_kv_cache_memory)}, "
            f"fragmentation {self.fragmentation:.1%}, {self.duration_s:.2f}s"
        )
