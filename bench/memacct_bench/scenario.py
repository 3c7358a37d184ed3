"""Running a simulated serving scenario, and the oracle: the largest KV cache that survives it.

A scenario (:class:`~memacct_bench.scenario_spec.Scenario`, a JSON file) names a device, an
allocator, a model, the engine's budgets and its serving steps.

:func:`run_scenario` starts the engine on the simulated device and profiles
it with memacct exactly as an engine would (:func:`memacct_bench.start.simulate_engine_start`),
plans the KV cache with :func:`memacct.plan_kv_cache`, allocates it one tensor
per layer, and replays every serving step. The oracle is the largest KV cache,
in whole blocks, with which the same start, cache allocation and serving
complete without running out of memory, found by binary search over full
replays.

Example::

    >>> scenario = Scenario.from_dict({
    ...     "name": "tiny", "device": {"total_bytes": 24 * 2**30}, "allocator": "torch-cuda",
    ...     "model": "qwen2.5-7b", "max_num_batched_tokens": 2048, "max_num_seqs": 64,
    ...     "serving": [{"num_tokens": 2048, "num_seqs": 4}, {"num_tokens": 64, "num_seqs": 64}]})
    >>> outcome = run_scenario(scenario, "reserved")
    >>> outcome.oom, outcome.efficiency <= 1.0
    (False, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from memacct.checks import FROZEN
from memacct.errors import InsufficientMemoryError
from memacct.model.spec import KVCacheSpec
from memacct.models import ProfileResult, TruthSource
from memacct.planner.plan import plan_kv_cache
from memacct.planner.result import KVCachePlan
from memacct.sim import SimDevice, SimOutOfMemory
from memacct_bench.scenario_spec import Scenario, ServingStep
from memacct_bench.start import EngineStart, make_device, mxfp4_pad_for, simulate_engine_start
from memacct_bench.workload import TransformerWorkload, replay

__all__ = [
    "EXHAUSTIVE_BLOCKS",
    "Oracle",
    "Scenario",
    "ScenarioOutcome",
    "ServingStep",
    "find_oracle",
    "hold_to_budget",
    "run_scenario",
]

_FROZEN = FROZEN

class ScenarioOutcome(BaseModel):
    """What one truth source achieved on one scenario (contract).

    Attributes:
        scenario: the scenario's name.
        truth_source: the truth source asked for.
        resolved_truth_source: what the profile resolved it to.
        truth_source_reason: why (the profile's record).
        block_bytes: bytes of one KV-cache block on this rank.
        planned_num_blocks: blocks the plan gave.
        planned_kv_bytes: ``planned_num_blocks x block_bytes``.
        oracle_num_blocks: the most blocks with which the scenario completes.
        oracle_kv_bytes: ``oracle_num_blocks x block_bytes``.
        oom: whether allocating the planned cache or serving ran out of memory.
        oom_at: where it ran out (``"kv_cache"`` or ``"serving step i"``), else ``None``.
        refused: the planner's message when it refused to plan (0 blocks), else ``None``.
        efficiency: ``planned_kv_bytes / oracle_kv_bytes``.
        non_kv_cache_memory: the profile's non-KV memory, bytes.
        duration_s: wall time of the run, oracle search included.
        fragmentation_allowance: what ``auto`` keeps free beyond the resolved source's peak
            (``ProfileResult.fragmentation_allowance``; 0 for a fixed source): the margin by
            which its plan is below that source's.
    """

    model_config = _FROZEN

    scenario: str
    truth_source: TruthSource
    resolved_truth_source: TruthSource
    truth_source_reason: str
    block_bytes: int = Field(gt=0)
    planned_num_blocks: int = Field(ge=0)
    planned_kv_bytes: int = Field(ge=0)
    oracle_num_blocks: int = Field(ge=0)
    oracle_kv_bytes: int = Field(ge=0)
    oom: bool
    oom_at: str | None = None
    refused: str | None = None
    efficiency: float = Field(ge=0.0)
    non_kv_cache_memory: int = Field(ge=0)
    duration_s: float = Field(ge=0.0)
    fragmentation_allowance: int = Field(default=0, ge=0)


def hold_to_budget(scenario: Scenario, dev: SimDevice) -> str | None:
    """Hold the engine to the memory its utilization grants: ``"utilization budget"`` if not.

    The free memory beyond ``total x gpu_memory_utilization`` is taken after the engine's
    start and profile, before its KV cache, on the engine's device and the oracle's alike:
    an allocator that sizes its pool at its first request (MindSpore's free x 15/16) then
    sees the same device in both.
    """
    if not scenario.outside_budget_bytes:
        return None
    try:
        dev.other_process_malloc(scenario.outside_budget_bytes)
    except SimOutOfMemory:
        return "utilization budget"
    return None


class ScenarioSetup:
    """What every replay of one scenario shares: the model, its traces and the steps."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.config = scenario.model_config_dict()
        self.spec = KVCacheSpec.from_hf_config(
            dict(self.config),
            kv_cache_dtype=scenario.kv_cache_dtype,
            tensor_parallel_size=scenario.tensor_parallel_size,
            model_name=scenario.model_name,
        )
        self.workload = TransformerWorkload(
            self.spec,
            self.config,
            max_num_batched_tokens=scenario.max_num_batched_tokens,
            max_num_seqs=scenario.max_num_seqs,
            block_size=scenario.block_size,
            max_model_len=scenario.max_model_len,
            mxfp4_pad=mxfp4_pad_for(scenario.device),
        )
        self.block_bytes = self.workload.kv_block_bytes
        self.step_traces = [self.workload.step_trace(t, n) for t, n in scenario.steps()]
        self.profile_trace = self.workload.step_trace(
            scenario.max_num_batched_tokens,
            min(scenario.max_num_seqs, scenario.max_num_batched_tokens),
        )

    def boot(self) -> SimDevice:
        """A device in the state the engine leaves it after profiling.

        The same allocator operations as :func:`simulate_engine_start`, without
        memacct's readings (which change no allocator state), so the oracle's
        many replays stay cheap.
        """
        sc = self.scenario
        dev = make_device(sc.device, sc.allocator)
        if sc.other_process_bytes:
            dev.other_process_malloc(sc.other_process_bytes)
        if sc.context_bytes:
            dev.external_malloc(sc.context_bytes)
        alloc = dev.allocator
        for n in self.workload.weight_tensors():
            alloc.malloc(n, persistent=True)
        # memory_profiling empties the cache on entry and on exit.
        alloc.empty_cache()
        replay(alloc, self.profile_trace)
        alloc.empty_cache()
        if hold_to_budget(sc, dev) is not None:
            raise SimOutOfMemory(
                f"{sc.name}: the engine holds more than gpu_memory_utilization="
                f"{sc.gpu_memory_utilization} grants it before its KV cache"
            )
        return dev

    def serve(self, dev: SimDevice, num_blocks: int) -> str | None:
        """Allocate ``num_blocks`` of KV cache and replay the serving steps; where it failed."""
        alloc = dev.allocator
        try:
            for n in self.workload.kv_cache_tensors(num_blocks):
                alloc.malloc(n)
        except SimOutOfMemory:
            return "kv_cache"
        for i, trace in enumerate(self.step_traces):
            try:
                replay(alloc, trace)
            except SimOutOfMemory:
                return f"serving step {i}"
        return None

    def completes(self, num_blocks: int) -> bool:
        """Whether the whole scenario completes with ``num_blocks`` of KV cache."""
        try:
            dev = self.boot()
        except SimOutOfMemory:
            return False
        return self.serve(dev, num_blocks) is None

    def max_blocks(self) -> int:
        """More blocks than could ever be allocated.

        The cache can only take free device memory and the free blocks the
        allocator already caches (inside the weights' segments), so one block
        more than both together never fits.
        """
        try:
            dev = self.boot()
        except SimOutOfMemory:
            return 1
        alloc = dev.allocator
        return (dev.free_bytes + alloc.reserved - alloc.allocated) // self.block_bytes + 1


EXHAUSTIVE_BLOCKS = 2048
"""Up to this many possible block counts, :func:`find_oracle` tries every one..."""
EXHAUSTIVE_SECONDS = 10.0
"""...when trying them all is expected to take at most this long."""


class Oracle(BaseModel):
    """The largest KV cache with which a scenario completes, and how it was found.

    Attributes:
        num_blocks: the most blocks with which the scenario completes (0 if none).
        kv_bytes: ``num_blocks x block_bytes``.
        replays: full replays the search ran.
    """

    model_config = _FROZEN

    num_blocks: int = Field(ge=0)
    kv_bytes: int = Field(ge=0)
    replays: int = Field(ge=0)


def find_oracle(
    scenario: Scenario,
    known: Mapping[int, bool] | None = None,
    *,
    _setup: ScenarioSetup | None = None,
) -> Oracle:
    """The largest number of KV-cache blocks with which ``scenario`` completes.

    Binary search over full replays (start, cache allocation, serving) between
    the largest block count known to complete and the smallest known to fail
    above it. ``known`` maps block counts already replayed (the plans) to
    whether they completed; the answer is never below a count known to
    complete, so no plan that completed can beat the oracle.

    Completion is not always monotone in the block count: on a tiny device a
    few more blocks can move the cache into another segment and change where
    later tensors land. Up to :data:`EXHAUSTIVE_BLOCKS` possible counts (when
    that takes at most :data:`EXHAUSTIVE_SECONDS`) the search is exhaustive,
    from the top down, so the answer is exact there; above it the cache
    tensors are far larger than any segment rounding and bisection is exact
    in practice.
    """
    setup = _setup or ScenarioSetup(scenario)
    results: dict[int, bool] = dict(known or {})
    replays = 0

    def ok(n: int) -> bool:
        nonlocal replays
        if n not in results:
            replays += 1
            results[n] = setup.completes(n)
        return results[n]

    upper = setup.max_blocks()
    results.setdefault(upper, False)
    if 0 < upper <= EXHAUSTIVE_BLOCKS:
        t0 = time.perf_counter()
        if ok(upper - 1):
            return Oracle(num_blocks=upper - 1, kv_bytes=(upper - 1) * setup.block_bytes,
                          replays=replays)
        # Scan only while a scan stays cheap (tiny models); a large model bisects.
        if (time.perf_counter() - t0) * upper <= EXHAUSTIVE_SECONDS:
            best = next((n for n in range(upper - 2, -1, -1) if ok(n)), 0)
            return Oracle(num_blocks=best, kv_bytes=best * setup.block_bytes, replays=replays)
    if not any(results.values()) and not ok(0):
        return Oracle(num_blocks=0, kv_bytes=0, replays=replays)
    low = max(n for n, good in results.items() if good)
    high = (
        min(n for n, good in results.items() if not good and n > low)
        if any(not good and n > low for n, good in results.items())
        else upper
    )
    if high <= low:
        high = max(low + 1, upper)
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            low = mid
        else:
            high = mid
    return Oracle(num_blocks=low, kv_bytes=low * setup.block_bytes, replays=replays)


_ENGINE_START_SETTINGS = (
    "device", "allocator", "max_num_batched_tokens", "max_num_seqs", "tensor_parallel_size",
    "kv_cache_dtype", "context_bytes", "other_process_bytes", "block_size", "max_model_len",
)  # fmt: skip
"""The scenario's settings the simulated engine start takes under the same names."""


def start_engine(scenario: Scenario, truth_source: TruthSource | str) -> EngineStart:
    """Start the engine on the scenario's device and profile it with memacct."""
    return simulate_engine_start(
        scenario.model_config_dict(),
        **{name: getattr(scenario, name) for name in _ENGINE_START_SETTINGS},
        truth_source=str(TruthSource.parse(truth_source)),
        serving_role=scenario.role,
    )


def _plan(scenario: Scenario, start: EngineStart) -> KVCachePlan:
    return plan_kv_cache(
        start.result,
        start.spec,
        gpu_memory_utilization=scenario.gpu_memory_utilization,
        block_size=scenario.block_size,
        max_model_len=start.workload.max_model_len,
        max_num_batched_tokens=scenario.max_num_batched_tokens,
    )


@dataclass(frozen=True)
class _Attempt:
    """One truth source's plan on a scenario and how serving went."""

    source: TruthSource
    result: ProfileResult
    num_blocks: int
    failure: str | None
    refused: str | None
    elapsed_s: float


def _attempt(scenario: Scenario, setup: ScenarioSetup, source: TruthSource | str) -> _Attempt:
    t0 = time.perf_counter()
    start = start_engine(scenario, source)
    try:
        num_blocks = _plan(scenario, start).num_blocks
    except InsufficientMemoryError as exc:
        # A truth source that leaves no room for even one block (or one request) plans nothing.
        return _Attempt(TruthSource.parse(source), start.result, 0, None, str(exc),
                        time.perf_counter() - t0)
    # Serve on the device the engine profiled, as the engine would, holding the engine to
    # the memory its utilization grants (what the oracle is measured on).
    failure = hold_to_budget(scenario, start.device)
    if failure is None:
        failure = setup.serve(start.device, num_blocks)
    return _Attempt(TruthSource.parse(source), start.result, num_blocks, failure, None,
                    time.perf_counter() - t0)


def run_scenarios(
    scenario: Scenario,
    truth_sources: Sequence[TruthSource | str],
    *,
    on_outcome: Callable[[ScenarioOutcome], None] | None = None,
) -> list[ScenarioOutcome]:
    """Run several truth sources on one scenario, sharing one oracle search."""
    begin = time.perf_counter()
    setup = ScenarioSetup(scenario)
    attempts = [_attempt(scenario, setup, source) for source in truth_sources]
    known = {a.num_blocks: a.failure is None for a in attempts if a.refused is None}
    oracle = find_oracle(scenario, known, _setup=setup)
    # The setup and the oracle search serve every truth source: share their time.
    shared_s = time.perf_counter() - begin - sum(a.elapsed_s for a in attempts)
    outcomes: list[ScenarioOutcome] = []
    for a in attempts:
        planned = a.num_blocks * setup.block_bytes
        outcome = ScenarioOutcome(
            scenario=scenario.name,
            truth_source=a.source,
            resolved_truth_source=a.result.truth_source,
            truth_source_reason=a.result.truth_source_reason,
            block_bytes=setup.block_bytes,
            planned_num_blocks=a.num_blocks,
            planned_kv_bytes=planned,
            oracle_num_blocks=oracle.num_blocks,
            oracle_kv_bytes=oracle.kv_bytes,
            oom=a.failure is not None,
            oom_at=a.failure,
            refused=a.refused,
            efficiency=planned / oracle.kv_bytes if oracle.kv_bytes else 0.0,
            non_kv_cache_memory=a.result.non_kv_cache_memory,
            fragmentation_allowance=a.result.fragmentation_allowance,
            duration_s=a.elapsed_s + shared_s / len(attempts),
        )
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


def run_scenario(scenario: Scenario, truth_source: TruthSource | str) -> ScenarioOutcome:
    """Profile, plan, allocate the KV cache and serve ``scenario``; compare with the oracle.

    Args:
        scenario: the scenario.
        truth_source: ``allocated_peak``, ``reserved`` or ``auto``.

    Returns:
        The plan's blocks and bytes, the oracle's, whether serving ran out of
        memory, and ``efficiency = planned_kv_bytes / oracle_kv_bytes``.

    A plan the planner refuses (no memory left for one block, or for one
    request of ``max_model_len``) is an outcome with 0 planned blocks and the
    refusal in ``refused``.
    """
    return run_scenarios(scenario, [truth_source])[0]
