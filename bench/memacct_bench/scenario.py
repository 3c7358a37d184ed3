"""Simulated serving scenarios, and the oracle that knows the largest KV cache that survives them.

A scenario (contract: a JSON file, loaded by :meth:`Scenario.load`) names a
device, an allocator, a model, the engine's budgets and a list of serving
steps::

    {"name": "qwen7b-mindspore-mixed", "device": "ascend-910b-64gb", "allocator": "mindspore",
     "model": "qwen2.5-7b", "max_num_batched_tokens": 8192, "max_num_seqs": 256,
     "block_size": 16, "gpu_memory_utilization": 1.0, "other_process_bytes": 0,
     "context_bytes": 536870912,
     "serving": [{"num_tokens": 8192, "num_seqs": 1}, {"num_tokens": 256, "num_seqs": 256}],
     "seed": 0}

``device`` is a preset name or ``{"total_bytes": N}``; ``model`` a model
preset name or a ``config.json`` object. A serving step may also give
``"repeat": n``, and ``num_tokens``/``num_seqs`` as ``[low, high]`` ranges that
are drawn per step from ``seed`` (mixed lengths).

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

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from memacct.checks import FROZEN
from memacct.errors import ConfigError, InsufficientMemoryError
from memacct.io import read_json_object
from memacct.models import ProfileResult, TruthSource, validation_problems
from memacct.planner.plan import KVCachePlan, plan_kv_cache
from memacct.planner.presets import load_model_preset, model_presets
from memacct.planner.spec import KVCacheSpec
from memacct.sim import ALLOCATOR_PRESETS, DEVICE_PRESETS, SimDevice, SimOutOfMemory
from memacct_bench.start import (
    DEFAULT_CONTEXT_BYTES,
    EngineStart,
    make_device,
    simulate_engine_start,
)
from memacct_bench.workload import TransformerWorkload, replay

__all__ = [
    "EXHAUSTIVE_BLOCKS",
    "Oracle",
    "Scenario",
    "ScenarioOutcome",
    "ServingStep",
    "find_oracle",
    "run_scenario",
]

_FROZEN = FROZEN
_Range = int | tuple[int, int]


class ServingStep(BaseModel):
    """One engine step of the serving trace (or ``repeat`` of them).

    Attributes:
        num_tokens: tokens in the step, or ``[low, high]`` drawn per step from the seed.
        num_seqs: sequences in the step (each samples one token), or a range.
        repeat: how many such steps follow each other.
    """

    model_config = _FROZEN

    num_tokens: _Range
    num_seqs: _Range
    repeat: int = Field(default=1, ge=1, le=100_000)

    @field_validator("num_tokens", "num_seqs")
    @classmethod
    def _positive(cls, value: _Range) -> _Range:
        low, high = (value, value) if isinstance(value, int) else value
        if low < 1 or high < low:
            raise ValueError(
                f"must be a positive int or a range [low, high] with 1 <= low <= high, "
                f"got {value!r}"
            )
        return value


class Scenario(BaseModel):
    """A simulated serving scenario (contract; see the module docstring for the JSON).

    Attributes:
        name: the scenario's name in tables.
        device: a device preset name or ``{"total_bytes": N}``.
        allocator: an allocator preset name.
        model: a model preset name or a ``config.json`` object.
        max_num_batched_tokens: the engine's token budget per step (the profile's size).
        max_num_seqs: the engine's sequence budget per step (the profile's sampler rows).
        block_size: tokens per KV-cache block.
        gpu_memory_utilization: the share of the device's total memory the
            engine may hold; 1.0 is the physical limit.
        other_process_bytes: memory a co-tenant holds before the engine starts.
        context_bytes: the engine's memory outside the allocator.
        serving: the serving steps, replayed in order after the KV cache exists.
        seed: draws the per-step values of ranges in ``serving``.
        tensor_parallel_size: this rank's share of each layer.
        kv_cache_dtype: as for :meth:`memacct.KVCacheSpec.from_hf_config`.
        max_model_len: the longest request; ``None`` takes the config's, capped at 32768.
        serving_role: ``mixed``, ``prefill`` or ``decode``: the instance the engine is
            deployed as (:data:`memacct.replay.SERVING_ROLES`), which its profile
            records. ``None``: ``decode`` when every serving step has as many tokens as
            sequences (the steps of a disaggregated decode instance), else ``mixed``.
        description: free text for people.
    """

    model_config = _FROZEN

    name: str = Field(min_length=1)
    device: str | dict[str, int]
    allocator: str
    model: str | dict[str, Any]
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    max_num_seqs: int = Field(default=256, ge=1)
    block_size: int = Field(default=16, ge=1)
    gpu_memory_utilization: float = Field(default=1.0, gt=0.0, le=1.0)
    other_process_bytes: int = Field(default=0, ge=0)
    context_bytes: int = Field(default=DEFAULT_CONTEXT_BYTES, ge=0)
    serving: tuple[ServingStep, ...] = Field(min_length=1)
    seed: int = 0
    tensor_parallel_size: int = Field(default=1, ge=1)
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = Field(default=None, ge=1)
    serving_role: Literal["mixed", "prefill", "decode"] | None = None
    description: str = ""

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | dict[str, int]) -> str | dict[str, int]:
        if isinstance(value, str):
            if value not in DEVICE_PRESETS:
                choices = ", ".join(sorted(DEVICE_PRESETS))
                raise ValueError(
                    f"unknown device preset {value!r}; use one of {choices} "
                    'or {"total_bytes": N}'
                )
        elif set(value) != {"total_bytes"} or value["total_bytes"] <= 0:
            raise ValueError(f'a custom device is {{"total_bytes": N}} with N > 0, got {value!r}')
        return value

    @field_validator("allocator")
    @classmethod
    def _allocator(cls, value: str) -> str:
        if value not in ALLOCATOR_PRESETS:
            choices = ", ".join(sorted(ALLOCATOR_PRESETS))
            raise ValueError(f"unknown allocator preset {value!r}; use one of {choices}")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and value.strip().lower() not in model_presets():
            raise ValueError(
                f"unknown model preset {value!r}; use one of {', '.join(model_presets())} "
                "or give the config.json object"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        total = self.total_bytes
        if (
            self.other_process_bytes
            and self.gpu_memory_utilization > 1 - self.other_process_bytes / total
        ):
            most = 1 - self.other_process_bytes / total
            raise ValueError(
                f"gpu_memory_utilization {self.gpu_memory_utilization} with other_process_bytes "
                f"{self.other_process_bytes} asks for more than the device has free: use at most "
                f"{most:.4f} (= 1 - other/total)"
            )
        for i, step in enumerate(self.serving):
            tokens_high = (
                step.num_tokens if isinstance(step.num_tokens, int) else step.num_tokens[1]
            )
            seqs_high = step.num_seqs if isinstance(step.num_seqs, int) else step.num_seqs[1]
            seqs_low = step.num_seqs if isinstance(step.num_seqs, int) else step.num_seqs[0]
            tokens_low = step.num_tokens if isinstance(step.num_tokens, int) else step.num_tokens[0]
            if tokens_high > self.max_num_batched_tokens or seqs_high > self.max_num_seqs:
                raise ValueError(
                    f"serving[{i}] ({step.num_tokens} tokens, {step.num_seqs} sequences) exceeds "
                    f"max_num_batched_tokens {self.max_num_batched_tokens} or max_num_seqs "
                    f"{self.max_num_seqs}: an engine never schedules such a step"
                )
            if seqs_low > tokens_low:
                raise ValueError(
                    f"serving[{i}] can have more sequences ({step.num_seqs}) than tokens "
                    f"({step.num_tokens}): every sequence contributes at least one token"
                )
        prefill = next(((t, n) for t, n in self.steps() if t != n), None)
        if self.serving_role == "decode" and prefill is not None:
            t, n = prefill
            raise ValueError(
                f"serving_role 'decode' but a serving step has {t} tokens for {n} sequences: "
                "a decode instance runs one token per sequence; use serving_role 'mixed'"
            )
        return self

    @property
    def role(self) -> str:
        """The serving role the engine is deployed as (declared, else from the steps)."""
        if self.serving_role is not None:
            return self.serving_role
        return "decode" if all(t == n for t, n in self.steps()) else "mixed"

    # ------------------------------------------------------------ loading

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "scenario") -> Scenario:
        """Validate a scenario dict.

        Raises:
            ConfigError: a field is missing, mistyped or out of range; the
                message names the field.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source} must be a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise ConfigError(f"invalid {source}: {validation_problems(exc)}") from None

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario JSON file.

        Raises:
            ConfigError: missing, unreadable, not JSON, or invalid (naming the field).
        """
        data = read_json_object(path, "scenario")
        return cls.from_dict(data, source=f"scenario {str(path)!r}")

    # ------------------------------------------------------------ derived

    @property
    def total_bytes(self) -> int:
        """The device's capacity in bytes."""
        if isinstance(self.device, str):
            return DEVICE_PRESETS[self.device]
        return self.device["total_bytes"]

    @property
    def budget_bytes(self) -> int:
        """The memory the engine may hold: ``total x gpu_memory_utilization`` (vLLM's target),
        never more than the co-tenants leave."""
        return min(int(self.total_bytes * self.gpu_memory_utilization),
                   self.total_bytes - self.other_process_bytes)

    @property
    def outside_budget_bytes(self) -> int:
        """Free device memory the engine may not use at this utilization (0 at 1.0)."""
        return max(0, self.total_bytes - self.other_process_bytes - self.budget_bytes)

    @property
    def device_name(self) -> str:
        """The device's name for tables."""
        return self.device if isinstance(self.device, str) else f"sim-{self.total_bytes}"

    @property
    def model_name(self) -> str:
        """The model's name for tables."""
        if isinstance(self.model, str):
            return self.model.strip().lower()
        name = self.model.get("_name_or_path") or self.model.get("model_type") or "model"
        return str(name)

    def model_config_dict(self) -> dict[str, Any]:
        """The model's ``config.json`` as a fresh dict."""
        if isinstance(self.model, str):
            return load_model_preset(self.model)
        copy: dict[str, Any] = json.loads(json.dumps(self.model))  # a deep copy
        return copy

    def steps(self) -> list[tuple[int, int]]:
        """The serving steps as ``(num_tokens, num_seqs)``, ranges drawn from :attr:`seed`."""
        rng = random.Random(self.seed)
        out: list[tuple[int, int]] = []
        for step in self.serving:
            for _ in range(step.repeat):
                tokens = _draw(rng, step.num_tokens)
                seqs = min(_draw(rng, step.num_seqs), tokens)
                out.append((tokens, seqs))
        return out


def _draw(rng: random.Random, value: _Range) -> int:
    return value if isinstance(value, int) else rng.randint(value[0], value[1])


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


class _Setup:
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
    _setup: _Setup | None = None,
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
    setup = _setup or _Setup(scenario)
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


def start_engine(scenario: Scenario, truth_source: TruthSource | str) -> EngineStart:
    """Start the engine on the scenario's device and profile it with memacct."""
    return simulate_engine_start(
        scenario.model_config_dict(),
        device=scenario.device,
        allocator=scenario.allocator,
        max_num_batched_tokens=scenario.max_num_batched_tokens,
        max_num_seqs=scenario.max_num_seqs,
        tensor_parallel_size=scenario.tensor_parallel_size,
        kv_cache_dtype=scenario.kv_cache_dtype,
        truth_source=str(TruthSource.parse(truth_source)),
        context_bytes=scenario.context_bytes,
        other_process_bytes=scenario.other_process_bytes,
        block_size=scenario.block_size,
        max_model_len=scenario.max_model_len,
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


def _attempt(scenario: Scenario, setup: _Setup, source: TruthSource | str) -> _Attempt:
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
    setup = _Setup(scenario)
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
