"""Profiling a dummy forward pass: what does the model need besides the KV cache?

Example (on the simulated device, runnable as is)::

    >>> import memacct
    >>> from memacct.sim import SimDevice
    >>> dev = SimDevice("h100-80gb")
    >>> backend = memacct.get_backend("sim", device=dev)
    >>> baseline = memacct.snapshot(backend)
    >>> weights = dev.malloc(16 * 2**30)
    >>> with memacct.memory_profiling(backend, baseline, weights_memory=16 * 2**30) as session:
    ...     act = dev.malloc(2 * 2**30); dev.free(act)
    >>> session.result.activation_peak == 2 * 2**30
    True
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

from memacct.backend import DeviceBackend, allocator_settings, as_base_backend, get_quirks
from memacct.errors import InvalidInputError, ProfilingError, ProfilingOutOfMemoryError
from memacct.measure import (
    ALLOCATED,
    ALLOCATED_PEAK,
    INACTIVE_SPLIT,
    INACTIVE_SPLIT_PEAK,
    RESERVED,
    RESERVED_PEAK,
    read_stat,
    require_backend,
    snapshot,
)
from memacct.models import MAX_BYTES, ExcludedRegion, MemorySnapshot, ProfileResult, TruthSource
from memacct.truth import PeakMeasurement, requested_truth_source, resolve_truth_source
from memacct.units import MiB, format_gib

__all__ = ["INTERFERENCE_TOLERANCE_BYTES", "ProfilingSession", "memory_profiling"]

logger = logging.getLogger("memacct")

INTERFERENCE_TOLERANCE_BYTES = 64 * MiB
"""Changes of memory outside this process's allocator up to this size are not reported.

Per-process readings lag device readings a little (NVML), and a runtime's own
bookkeeping moves by a few MiB; a co-tenant or an unexplained fall of more
than this is named in :attr:`ProfileResult.warnings`.
"""

_active_lock = threading.Lock()
_active: set[Hashable] = set()


def _is_out_of_memory(exc: BaseException) -> bool:
    # torch.OutOfMemoryError, torch_npu's and the simulator's share the name; MindSpore
    # raises RuntimeError whose text says "Out of memory".
    name = type(exc).__name__
    return name in {"OutOfMemoryError", "SimOutOfMemory"} or "out of memory" in str(exc).lower()


class ProfilingSession:
    """A running profiling session; see :func:`memory_profiling`.

    After the ``with`` block ends without an exception, :attr:`result` holds
    the :class:`ProfileResult`.
    """

    def __init__(
        self,
        backend: DeviceBackend,
        baseline: MemorySnapshot,
        device: int,
        weights_memory: int | None,
        truth_source: TruthSource,
    ) -> None:
        self.backend = backend
        self.baseline = baseline
        self.device = device
        self.weights_memory = weights_memory
        self.requested_truth_source = truth_source
        self._result: ProfileResult | None = None
        self._allocated_peak = 0
        self._reserved_peak = 0
        self._inactive_split_peak = 0
        self._inactive_split_start = 0
        self._excluded: list[ExcludedRegion] = []
        self._in_exclusion = False
        self._open = False  # between entering and leaving the with-block
        self.before: MemorySnapshot | None = None
        self._start = 0.0

    @property
    def result(self) -> ProfileResult:
        """The profile; raises :class:`ProfilingError` before the session ended well."""
        if self._result is None:
            raise ProfilingError(
                "no profile result: the session has not finished, or its block raised "
                "(read session.result after the with-block completes)"
            )
        return self._result

    def _fold_peaks(self) -> tuple[int, int]:
        """Fold the allocator's current peaks into the session's; return current values."""
        stats = self.backend.memory_stats(self.device)
        self._allocated_peak = max(self._allocated_peak, read_stat(stats, ALLOCATED_PEAK))
        self._reserved_peak = max(self._reserved_peak, read_stat(stats, RESERVED_PEAK))
        self._inactive_split_peak = max(
            self._inactive_split_peak, read_stat(stats, INACTIVE_SPLIT_PEAK)
        )
        return read_stat(stats, ALLOCATED), read_stat(stats, RESERVED)

    @contextmanager
    def exclude(self, label: str) -> Iterator[None]:
        """Leave the memory spike of this region out of the activation peak.

        Use it around compilation or graph capture: their transient peak is not
        needed again while serving. A peak reached before the region survives
        it; what the region leaves allocated afterwards still counts.

        Note: this resets the allocator's peak statistics at the region's end.
        """
        if not isinstance(label, str) or not label.strip():
            raise InvalidInputError(
                f"exclude() takes a label naming the region, e.g. exclude('compile'), "
                f"got {label!r}"
            )
        if not self._open:
            raise ProfilingError(
                f"exclude({label!r}) outside the profiling block: the session has ended (or "
                "not begun); exclude regions inside `with memory_profiling(...) as session:`"
            )
        if self._in_exclusion:
            raise ProfilingError(
                f"exclude({label!r}) inside another excluded region is not allowed"
            )
        self._in_exclusion = True
        start = time.perf_counter()
        self.backend.synchronize(self.device)
        alloc_start, res_start = self._fold_peaks()
        self.backend.reset_peak_memory_stats(self.device)
        try:
            yield
        finally:
            self.backend.synchronize(self.device)
            stats = self.backend.memory_stats(self.device)
            self._excluded.append(
                ExcludedRegion(
                    label=label,
                    allocated_spike=max(0, read_stat(stats, ALLOCATED_PEAK) - alloc_start),
                    reserved_spike=max(0, read_stat(stats, RESERVED_PEAK) - res_start),
                    duration_s=time.perf_counter() - start,
                )
            )
            # Peaks restart from what the region left behind.
            self.backend.reset_peak_memory_stats(self.device)
            self._in_exclusion = False

    def _enter(self) -> None:
        gc.collect()
        self.backend.synchronize(self.device)
        self.backend.empty_cache()
        self.backend.reset_peak_memory_stats(self.device)
        self.before = snapshot(self.backend, self.device)
        # The free pieces already stranded at the start (in the weights' segments) are not
        # the forward pass's: the auto truth source needs the increase.
        self._inactive_split_start = read_stat(
            self.backend.memory_stats(self.device), INACTIVE_SPLIT
        )
        self._allocated_peak = self.before.allocated
        self._reserved_peak = self.before.reserved
        self._start = time.perf_counter()

    def _finish(self) -> ProfileResult:
        assert self.before is not None
        gc.collect()
        self.backend.synchronize(self.device)
        self._fold_peaks()
        quirks = get_quirks(self.backend)
        pre_empty = snapshot(self.backend, self.device)
        self.backend.empty_cache()
        after = snapshot(self.backend, self.device)
        non_allocator = after.non_allocator
        if quirks.empty_cache_releases_runtime_memory:
            # This device's empty_cache() can also free runtime memory, which the
            # next forward pass takes again: the figure before emptying is the true one.
            non_allocator = max(non_allocator, pre_empty.non_allocator)
        before = self.before
        peaks = PeakMeasurement(
            allocated_peak_increase=max(0, self._allocated_peak - before.allocated),
            reserved_peak_increase=max(0, self._reserved_peak - before.reserved),
            inactive_split_peak=self._inactive_split_peak,
            inactive_split_increase=max(0, self._inactive_split_peak - self._inactive_split_start),
            # Idle space the allocator kept since the baseline (after empty_cache: it cannot
            # give it back): free pieces of the weights' segments or pool blocks.
            weights_idle=max(
                0,
                (before.reserved - before.allocated)
                - (self.baseline.reserved - self.baseline.allocated),
            ),
            weights_given=self.weights_memory is not None,
        )
        decision = resolve_truth_source(self.requested_truth_source, peaks, quirks)
        weights = self.weights_memory
        if weights is None:
            if decision.truth_source is TruthSource.RESERVED:
                weights = max(0, before.reserved - self.baseline.reserved)
            else:
                weights = max(0, before.allocated - self.baseline.allocated)
        warnings = self._interference(after)
        non_allocator_increase = non_allocator - self.baseline.non_allocator
        if non_allocator_increase < 0:
            # A fall below the baseline is never credited: without attribution it is most
            # likely another process freeing memory it may take again; with attribution
            # it is memory that was there before the model, which serving may need again.
            # Charging 0 errs on the side of a smaller KV cache, never an OOM.
            if -non_allocator_increase > INTERFERENCE_TOLERANCE_BYTES:
                warnings.append(
                    f"non-allocator memory on {self._where} ended "
                    f"{format_gib(-non_allocator_increase)} below the baseline "
                    f"({format_gib(self.baseline.non_allocator)} -> "
                    f"{format_gib(non_allocator)}); "
                    + (
                        "this process gave back memory it held before the model"
                        if after.other_processes is not None
                        else "another process probably freed device memory, which memacct "
                        "cannot tell from this process's without per-process attribution"
                    )
                    + ": the fall is not credited (non_allocator_increase charged as 0)"
                )
            non_allocator_increase = 0
        for warning in warnings:
            logger.warning("memacct: %s", warning)
        fragmentation = (
            (self._reserved_peak - self._allocated_peak) / self._reserved_peak
            if self._reserved_peak > 0
            else 0.0
        )
        return ProfileResult(
            baseline=self.baseline,
            before=before,
            after=after,
            weights_memory=weights,
            activation_peak=decision.activation_peak,
            allocated_peak_increase=peaks.allocated_peak_increase,
            reserved_peak_increase=peaks.reserved_peak_increase,
            non_allocator_increase=non_allocator_increase,
            non_kv_cache_memory=max(0, weights + decision.activation_peak + non_allocator_increase),
            truth_source=decision.truth_source,
            requested_truth_source=self.requested_truth_source,
            truth_source_reason=decision.reason,
            fragmentation=min(1.0, max(0.0, fragmentation)),
            duration_s=time.perf_counter() - self._start,
            excluded_regions=tuple(self._excluded),
            allocator_settings=allocator_settings(self.backend),
            inactive_split_peak=peaks.inactive_split_peak,
            warnings=tuple(warnings),
            fragmentation_allowance=decision.fragmentation_allowance,
            growth_granularity_bytes=quirks.growth_granularity_bytes,
            growth_rounding=quirks.growth_rounding,
        )

    @property
    def _where(self) -> str:
        return f"{self.backend.name}:{self.device}"

    def _interference(self, after: MemorySnapshot) -> list[str]:
        """Name memory changes during the session that this process did not make."""
        before = self.before
        assert before is not None
        found: list[str] = []
        if before.other_processes is not None and after.other_processes is not None:
            change = after.other_processes - before.other_processes
            if abs(change) > INTERFERENCE_TOLERANCE_BYTES:
                found.append(
                    f"another process {'allocated' if change > 0 else 'freed'} "
                    f"{format_gib(abs(change))} on {self._where} during profiling (other "
                    f"processes held {format_gib(before.other_processes)} at the start, "
                    f"{format_gib(after.other_processes)} at the end); per-process attribution "
                    "kept it out of this profile, but the device now has "
                    f"{'less' if change > 0 else 'more'} free memory than when profiling began"
                )
            return found
        # Without attribution every change of used memory that the allocator does not
        # explain lands in non_allocator: this process's (NCCL, cuBLAS workspaces) or not.
        change = after.non_allocator - before.non_allocator
        if change < -INTERFERENCE_TOLERANCE_BYTES:
            found.append(
                f"used memory on {self._where} fell by {format_gib(-change)} during profiling "
                "more than the allocator's reservation did: another process probably freed "
                "device memory (without per-process attribution memacct cannot tell); profile "
                "on an idle device, or with a backend that attributes memory per process"
            )
        elif change > INTERFERENCE_TOLERANCE_BYTES:
            found.append(
                f"used memory on {self._where} grew by {format_gib(change)} during profiling "
                "beyond the allocator's reservation: this process's memory outside the "
                "allocator (NCCL, cuBLAS workspaces) or another process's; without "
                "per-process attribution it is charged to this instance (the safe side)"
            )
        return found

    def _oom_error(self, exc: BaseException) -> ProfilingOutOfMemoryError:
        try:
            free, total = self.backend.mem_get_info(self.device)
            device = f"total {format_gib(total)}, free {format_gib(free)}"
        except Exception as reading:  # the message must not hide the OOM behind a 2nd error
            device = f"device unreadable after the OOM: {type(reading).__name__}: {reading}"
        if self.weights_memory is not None:
            held = f"weights {format_gib(self.weights_memory)}"
        else:  # not given: inferred at the end, which an OOM never reaches
            reserved = self.before.reserved if self.before else 0
            held = f"{format_gib(reserved)} reserved before the block"
        return ProfilingOutOfMemoryError(
            f"the device ran out of memory during the profiled forward pass on "
            f"{self._where} ({device}, {held}): {exc}. Profile with a smaller "
            "max_num_batched_tokens (or fewer sequences), or free device memory"
        )


@contextmanager
def memory_profiling(
    backend: DeviceBackend,
    baseline: MemorySnapshot,
    weights_memory: int | None = None,
    truth_source: TruthSource | str | None = None,
    *,
    device: int | None = None,
) -> Iterator[ProfilingSession]:
    """Profile the block: the memory it needs besides the KV cache.

    On entry: gc, ``empty_cache``, reset peaks, snapshot ``before``. On exit:
    gc, ``empty_cache``, snapshot ``after``, compute :class:`ProfileResult`
    into ``session.result``. An exception inside the block propagates and
    leaves no result; an out-of-memory error becomes
    :class:`ProfilingOutOfMemoryError` with the numbers and the fix. After a
    failed block the allocator's peak statistics are left as the block drove
    them (reset on entry, never restored), and the device is free for the next
    session.

    Memory that changes outside this process's allocator during the session is
    checked: where the backend attributes memory per process, another process
    allocating or freeing more than :data:`INTERFERENCE_TOLERANCE_BYTES` is
    named; without attribution, a fall of used memory that the allocator does
    not explain (or a growth it does not explain) is. Each finding is logged as
    a warning on logger ``memacct`` and recorded in
    :attr:`ProfileResult.warnings`. A fall of non-allocator memory below the
    baseline is never credited: ``non_allocator_increase`` is at least 0.

    Args:
        backend: the backend that measured ``baseline``.
        baseline: snapshot taken before the model was created.
        weights_memory: bytes of the weights; ``None`` measures it as the
            growth of the allocator between ``baseline`` and the session start.
        truth_source: ``"allocated_peak"``, ``"reserved"`` or ``"auto"``;
            ``None`` takes ``MEMACCT_TRUTH_SOURCE``, else the backend's default.
        device: device index; defaults to ``baseline.device``.

    Raises:
        InvalidInputError: the baseline belongs to another backend or device,
            or ``weights_memory`` is negative.
        ProfilingError: a session is already running on this device, or the
            backend has no allocator statistics (``nvml``).
    """
    backend = require_backend(backend, "memory_profiling")
    if not isinstance(baseline, MemorySnapshot):
        raise InvalidInputError(
            f"baseline must be the MemorySnapshot memacct.snapshot() took before the model "
            f"existed, got {type(baseline).__name__}"
        )
    if not get_quirks(backend).has_allocator_stats:
        raise ProfilingError(
            f"backend {backend.name!r} has no allocator statistics, so it cannot measure the "
            "activation peak: profile with the backend of the framework that allocates (cuda, "
            f"npu, mindspore) and use {backend.name!r} for device-level snapshots only"
        )
    dev = baseline.device if device is None else device
    if baseline.backend != backend.name or baseline.device != dev:
        raise InvalidInputError(
            f"baseline was taken on {baseline.backend}:{baseline.device} but profiling runs on "
            f"{backend.name}:{dev}: take the baseline with the same backend and device"
        )
    if weights_memory is not None and (
        isinstance(weights_memory, bool)
        or not isinstance(weights_memory, int)
        or weights_memory < 0
    ):
        raise InvalidInputError(
            f"weights_memory must be a non-negative int of bytes, got {weights_memory!r}"
        )
    if weights_memory is not None and weights_memory > MAX_BYTES:
        raise InvalidInputError(
            f"weights_memory={weights_memory} bytes is more than any device holds (at most "
            f"{MAX_BYTES} bytes, 1 EiB): pass the weights' size in bytes"
        )
    requested = requested_truth_source(
        truth_source, TruthSource.parse(backend.default_truth_source)
    )
    # One session per physical device: real backends are keyed by name and index; a
    # backend whose instances stand for different devices (the simulator) says so.
    key: Hashable = as_base_backend(backend).device_identity(dev)
    with _active_lock:
        if key in _active:
            raise ProfilingError(
                f"a profiling session is already running on {backend.name}:{dev}: sessions on "
                "one device cannot nest or overlap; finish the first one before starting another"
            )
        _active.add(key)
    session = ProfilingSession(backend, baseline, dev, weights_memory, requested)
    try:
        session._enter()
        session._open = True
        try:
            yield session
        except BaseException as exc:
            if _is_out_of_memory(exc) and not isinstance(exc, ProfilingError):
                raise session._oom_error(exc) from exc
            raise
        session._open = False
        session._result = session._finish()
    finally:
        session._open = False
        with _active_lock:
            _active.discard(key)
