"""Profiling a dummy forward pass: what does the model need besides the KV cache?

The package's docstring (:mod:`memacct`) runs a session on the simulated device. The
weights are what the process took between the baseline and the session's start, unless
``memory_profiling`` is given ``weights_memory`` (the size the engine reports).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Hashable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any, Literal

from memacct._log import logger
from memacct.accounting import (
    INTERFERENCE_TOLERANCE_BYTES,
    PhasePeak,
    ProfileReadings,
    RegionReading,
    account,
    parse_accounting,
    replay_request,
)
from memacct.backend import (
    AllocatorModel,
    DeviceBackend,
    allocator_settings,
    as_base_backend,
    backend_code,
    get_quirks,
    is_out_of_memory,
)
from memacct.backend_calls import backend_errors, call_backend
from memacct.errors import (
    BackendError,
    InvalidInputError,
    ProfilingError,
    ProfilingOutOfMemoryError,
)
from memacct.measure import (
    INACTIVE_SPLIT,
    INACTIVE_SPLIT_PEAK,
    read_stat,
    require_backend,
    snapshot,
)
from memacct.models import MAX_BYTES, MemorySnapshot, ProfiledSetup, ProfileResult, TruthSource
from memacct.replay import ServingTrace, replay_need
from memacct.truth import requested_truth_source
from memacct.units import format_gib

__all__ = [
    "INTERFERENCE_TOLERANCE_BYTES",
    "ProfilingSession",
    "memory_profiling",
    "read_allocator_limit",
]


def read_allocator_limit(backend: DeviceBackend, device: int) -> int | None:
    """The backend's declared allocator limit on ``device``, checked (``None``: no cap).

    Raises:
        BackendError: the backend returned something other than ``None`` or a
            positive int of bytes (a bug in the plugin, named in the message).
    """
    limit = call_backend(backend, as_base_backend(backend).allocator_limit, device)
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_BYTES:
        raise BackendError(
            f"{backend_code(backend)}.allocator_limit({device}) returned {limit!r}: it must "
            f"return None (no cap) or a positive int of bytes up to {MAX_BYTES}; fix the "
            "backend plugin"
        )
    return limit


def read_allocator_model(backend: DeviceBackend) -> AllocatorModel | None:
    """The backend's declared model of its allocator, checked (``None``: it declares none).

    Raises:
        BackendError: the backend failed, or returned something that is not a
            :class:`memacct.AllocatorModel` (named in the message).
    """
    base = as_base_backend(backend)
    with backend_errors(backend, "failed to give its allocator_model"):
        model = base.allocator_model
    if model is not None and not isinstance(model, AllocatorModel):
        raise BackendError(
            f"{backend_code(backend)}.allocator_model is {model!r}: it must be None or a "
            "memacct.AllocatorModel (memacct.sim.allocator.preset_model(name) for a simulator "
            "preset); fix the backend plugin"
        )
    return model


def with_replay(
    readings: ProfileReadings, backend: DeviceBackend, trace: ServingTrace | None
) -> ProfileReadings:
    """``readings`` with the replay's need, where ``auto`` asks for one and it can run.

    It runs where the caller gave the profiled work's traces and the backend declares a
    model of its allocator (:func:`memacct.accounting.replay_request` says what to replay).
    """
    request = replay_request(readings) if trace is not None else None
    model = read_allocator_model(backend) if request is not None else None
    if request is None or model is None or trace is None:
        return readings
    need = replay_need(
        model, trace, kv_cache_bytes=request.kv_cache_bytes, low_hint=request.low_hint,
        high_hint=request.high_hint, cache_ends=request.cache_ends, role=request.role,
        pairs=request.pairs, sequences=request.sequences, floor=request.floor,
    )  # fmt: skip
    return replace(readings, replay_need=need)


_active_lock = threading.Lock()
_active: set[Hashable] = set()


class ProfilingSession:
    """A running profiling session: it reads the device and nothing else.

    :meth:`start` and :meth:`stop` bracket the profiled work; :meth:`exclude`
    and :meth:`graphs` mark regions inside it. :meth:`stop` returns the
    :class:`~memacct.accounting.ProfileReadings`, which
    :func:`memacct.accounting.account` turns into the profile. After the
    ``with`` block of :func:`memory_profiling` ends without an exception,
    :attr:`result` holds the :class:`ProfileResult`.
    """

    def __init__(
        self,
        backend: DeviceBackend,
        baseline: MemorySnapshot,
        device: int,
        weights_memory: int | None,
        truth_source: TruthSource,
        profiled: ProfiledSetup | None = None,
    ) -> None:
        self.backend = backend
        self.baseline = baseline
        self.device = device
        self.weights_memory = weights_memory
        self.requested_truth_source = truth_source
        self.profiled = profiled or ProfiledSetup()
        self.serving_trace: ServingTrace | None = None
        self.before: MemorySnapshot | None = None
        self._result: ProfileResult | None = None
        self._phases: list[PhasePeak] = []
        self._regions: list[RegionReading] = []
        self._graph_allocated = 0
        self._graph_reserved = 0
        self._inactive_split_start = 0
        self._in_region: str | None = None
        self._open = False  # between entering and leaving the with-block
        self._start = 0.0
        self.allocator_limit: int | None = None

    @property
    def result(self) -> ProfileResult:
        """The profile; raises :class:`ProfilingError` before the session ended well."""
        if self._result is None:
            raise ProfilingError(
                "no profile result: the session has not finished, or its block raised "
                "(read session.result after the with-block completes)"
            )
        return self._result

    @result.setter
    def result(self, value: ProfileResult) -> None:
        self._result = value

    @property
    def where(self) -> str:
        """``backend:device`` for messages."""
        return f"{self.backend.name}:{self.device}"

    # ------------------------------------------------------------ readings
    # Every call into the backend goes through call_backend: a plugin's own exception
    # becomes a BackendError naming the plugin and the call (as snapshot() does).

    def _sync(self) -> None:
        call_backend(self.backend, self.backend.synchronize, self.device)

    def _reset_peaks(self) -> None:
        call_backend(self.backend, self.backend.reset_peak_memory_stats, self.device)

    def _stats(self) -> Mapping[str, int]:
        return call_backend(self.backend, self.backend.memory_stats, self.device)

    def start(self) -> MemorySnapshot:
        """Begin: gc, ``empty_cache``, reset the peaks, snapshot ``before``."""
        gc.collect()
        self._sync()
        call_backend(self.backend, self.backend.empty_cache)
        self._reset_peaks()
        self.before = snapshot(self.backend, self.device)
        # Read once, after the model is loaded: MindSpore's pool takes its budget at its first
        # request, so only now is it certain to be set.
        self.allocator_limit = read_allocator_limit(self.backend, self.device)
        # The free pieces already stranded at the start (in the weights' segments) are not
        # the forward pass's: the auto truth source needs the increase.
        self._inactive_split_start = read_stat(self._stats(), INACTIVE_SPLIT)
        self._start = time.perf_counter()
        return self.before

    def _close_phase(self) -> MemorySnapshot:
        """Snapshot now and record the peaks of the stretch since the last reset."""
        snap = snapshot(self.backend, self.device)
        split_peak = read_stat(self._stats(), INACTIVE_SPLIT_PEAK)
        self._phases.append(
            PhasePeak(
                allocated_peak=snap.allocated_peak,
                reserved_peak=snap.reserved_peak,
                inactive_split_peak=split_peak,
                graph_allocated=self._graph_allocated,
                graph_reserved=self._graph_reserved,
            )
        )
        return snap

    @contextmanager
    def _region(self, label: str, kind: Literal["exclude", "graphs"]) -> Iterator[None]:
        if not isinstance(label, str) or not label.strip():
            raise InvalidInputError(
                f"{kind}() takes a label naming the region, e.g. {kind}('compile'), "
                f"got {label!r}"
            )
        if self.before is None or not self._open:
            raise ProfilingError(
                f"{kind}({label!r}) outside the profiling block: the session has ended (or "
                f"not begun); use {kind}() inside `with memory_profiling(...) as session:`"
            )
        if self._in_region is not None:
            raise ProfilingError(
                f"{kind}({label!r}) inside another excluded region ({self._in_region!r}) is "
                "not allowed: end the first region before starting the next"
            )
        self._in_region = label
        try:
            began = time.perf_counter()
            self._sync()
            start = self._close_phase()
            self._reset_peaks()
            yield
            self._sync()
            top = snapshot(self.backend, self.device)
            # What the allocator can give back (wholly free cached segments) it gives back
            # now, so the peaks after the region start from what the region really keeps.
            call_backend(self.backend, self.backend.empty_cache)
            end = snapshot(self.backend, self.device)
            self._reset_peaks()
            region = RegionReading(label, kind, start, top, end, time.perf_counter() - began)
            self._regions.append(region)
            if kind == "graphs":
                self._graph_allocated += region.allocated_kept
                self._graph_reserved += region.reserved_kept
        finally:
            self._in_region = None

    def exclude(self, label: str) -> AbstractContextManager[None]:
        """Leave the memory spike of this region out of the activation peak.

        Use it around compilation: its transient peak is not needed again while
        serving. A peak reached before the region survives it; what the region
        leaves allocated afterwards still counts. At its end the allocator gives
        back what it can (``empty_cache``: wholly free cached segments), so the
        region's spike does not stay in the reserved peak; idle memory it cannot
        give back is named as the region's ``retained_bytes`` and charged.

        Note: this resets the allocator's peak statistics at the region's start and end.
        """
        return self._region(label, "exclude")

    def graphs(self, label: str = "graphs") -> AbstractContextManager[None]:
        """Capture graphs (CUDA/ACL graphs) in this region; their pool is charged on its own.

        The memory the region still holds after it ends (after ``empty_cache``),
        inside the allocator and outside it, is the graph pool: charged as
        ``cudagraph_memory``, never as activations. The capture's transient
        spike is not charged.
        """
        return self._region(label, "graphs")

    def stop(self) -> ProfileReadings:
        """End: gc, read the peaks, ``empty_cache``, snapshot ``after``; return the readings."""
        if self.before is None:
            raise ProfilingError("stop() before start(): the session never began")
        gc.collect()
        self._sync()
        pre_empty = self._close_phase()
        call_backend(self.backend, self.backend.empty_cache)
        after = snapshot(self.backend, self.device)
        return ProfileReadings(
            baseline=self.baseline,
            before=self.before,
            pre_empty=pre_empty,
            after=after,
            phases=tuple(self._phases),
            regions=tuple(self._regions),
            requested_truth_source=self.requested_truth_source,
            inactive_split_start=self._inactive_split_start,
            weights_memory=self.weights_memory,
            quirks=get_quirks(self.backend),
            allocator_settings=allocator_settings(self.backend),
            profiled=self.profiled,
            duration_s=time.perf_counter() - self._start,
            allocator_limit=self.allocator_limit,
        )

    def out_of_memory_error(self, exc: BaseException) -> ProfilingOutOfMemoryError:
        """The error for an out-of-memory ``exc`` in the profiled block, with the numbers."""
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
            f"{self.where} ({device}, {held}): {exc}. Profile with a smaller "
            "max_num_batched_tokens (or fewer sequences), or free device memory"
        )


def _profiled(value: ProfiledSetup | Mapping[str, Any] | None) -> ProfiledSetup:
    if value is None or isinstance(value, ProfiledSetup):
        return value or ProfiledSetup()
    if isinstance(value, Mapping):
        try:
            return ProfiledSetup.model_validate(dict(value))
        except ValueError as exc:
            raise InvalidInputError(
                f"profiled must describe the profiled setup (architecture, model_name, "
                f"tensor_parallel_size, ...): {exc}"
            ) from None
    raise InvalidInputError(
        f"profiled must be a memacct.ProfiledSetup or a dict of its fields, got {value!r}"
    )


@contextmanager
def memory_profiling(
    backend: DeviceBackend,
    baseline: MemorySnapshot,
    weights_memory: int | None = None,
    truth_source: TruthSource | str | None = None,
    *,
    device: int | None = None,
    accounting: str | None = None,
    profiled: ProfiledSetup | Mapping[str, Any] | None = None,
    serving_trace: ServingTrace | None = None,
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
        accounting: ``"components"`` (the seed's formula) or ``"free_memory"``
            (vLLM 0.33's); ``None``: :data:`memacct.accounting.DEFAULT_ACCOUNTING`.
        profiled: what is profiled (:class:`memacct.ProfiledSetup` or a dict of
            its fields: architecture, model name, TP/PP size and rank, dtype,
            max_num_batched_tokens, max_num_seqs), recorded in the profile so the
            planner can refuse a spec that does not match.
        serving_trace: the profiled work's allocation traces
            (:class:`memacct.replay.ServingTrace`), where the caller knows them. With
            a backend that names its ``allocator_model``, ``auto`` replays serving-step
            shapes through that model to size the activations' memory.

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
    key: Hashable = call_backend(backend, as_base_backend(backend).device_identity, dev)
    formula = parse_accounting(accounting)
    setup = _profiled(profiled)
    with _active_lock:
        if key in _active:
            raise ProfilingError(
                f"a profiling session is already running on {backend.name}:{dev}: sessions on "
                "one device cannot nest or overlap; finish the first one before starting another"
            )
        _active.add(key)
    session = ProfilingSession(backend, baseline, dev, weights_memory, requested, setup)
    session.serving_trace = serving_trace
    try:
        session.start()
        session._open = True
        try:
            yield session
        except BaseException as exc:
            if not isinstance(exc, ProfilingError) and is_out_of_memory(backend, exc):
                raise session.out_of_memory_error(exc) from exc
            raise
        session._open = False
        readings = with_replay(session.stop(), backend, session.serving_trace)
        result = account(readings, formula)
        for warning in result.warnings:
            logger.warning("memacct: %s", warning)
        session.result = result
    finally:
        session._open = False
        with _active_lock:
            _active.discard(key)
