"""Property-based tests: invariants that hold for every input hypothesis can find.

* snapshot arithmetic: subtraction is field-wise, antisymmetric and keeps the
  split of ``used``; JSON round trips are lossless;
* the simulated device under random alloc/free sequences with memory outside
  the allocator and other processes: every snapshot is consistent and agrees
  with a recount of the allocator's blocks; freeing everything and emptying
  the cache gives the device back whole;
* profiling random workloads: the profile's arithmetic always holds;
* planner: more utilization never plans fewer blocks (the planner's other
  invariants are in test_planner_plan.py);
* fuzzed profile and config JSON: only ever a valid plan or a MemacctError,
  never TypeError, KeyError, ZeroDivisionError, OverflowError or RecursionError.

Example counts come from the hypothesis profile (tests/_hypothesis_profiles.py):
``default`` in CI, ``fuzz`` (20x) under ``make fuzz``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import memacct
import memacct.profiling
from memacct import (
    ConfigError,
    InvalidInputError,
    MemacctError,
    MemorySnapshot,
    ProfileResult,
    TruthSource,
)
from memacct.models import MAX_BYTES, load_model_json
from memacct.planner import (
    KVCachePlan,
    KVCacheSpec,
    load_model_preset,
    model_presets,
    plan_kv_cache,
)
from memacct.sim import ALLOCATOR_PRESETS, SimDevice, SimOutOfMemory
from memacct.units import GiB, MiB

# --- snapshot arithmetic ---------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn, backend: str = "sim", device: int = 0) -> MemorySnapshot:
    total = draw(st.integers(1, MAX_BYTES))
    used = draw(st.integers(0, total))
    reserved = draw(st.integers(0, used))
    allocated = draw(st.integers(0, reserved))
    other = draw(st.none() | st.integers(0, used - reserved))
    return MemorySnapshot(
        backend=backend,
        device=device,
        timestamp=draw(st.floats(0, 2e9)),
        total=total,
        free=total - used,
        used=used,
        allocated=allocated,
        allocated_peak=draw(st.integers(allocated, MAX_BYTES)),
        reserved=reserved,
        reserved_peak=draw(st.integers(reserved, MAX_BYTES)),
        non_allocator=used - reserved - (other or 0),
        other_processes=other,
    )


SIZE_FIELDS = ("total", "free", "used", "allocated", "allocated_peak", "reserved",
               "reserved_peak", "non_allocator")


@given(snapshots(), snapshots())
def test_snapshot_difference_is_field_wise(a: MemorySnapshot, b: MemorySnapshot) -> None:
    delta = a - b
    for name in SIZE_FIELDS:
        assert getattr(delta, name) == getattr(a, name) - getattr(b, name)
    assert delta.timestamp == a.timestamp - b.timestamp


@given(snapshots(), snapshots())
def test_snapshot_difference_is_antisymmetric(a: MemorySnapshot, b: MemorySnapshot) -> None:
    forward, backward = a - b, b - a
    for name in (*SIZE_FIELDS, "other_processes"):
        value = getattr(forward, name)
        assert value == (None if value is None else -getattr(backward, name))


@given(snapshots(), snapshots())
def test_snapshot_difference_keeps_the_split_of_used(a: MemorySnapshot, b: MemorySnapshot) -> None:
    delta = a - b
    others = (a.other_processes or 0) - (b.other_processes or 0)
    assert delta.used == delta.reserved + delta.non_allocator + others
    assert delta.free == -delta.used + delta.total


@given(snapshots())
def test_snapshot_minus_itself_is_zero(a: MemorySnapshot) -> None:
    delta = a - a
    assert all(getattr(delta, name) == 0 for name in SIZE_FIELDS)
    assert delta.other_processes == (None if a.other_processes is None else 0)


@given(snapshots())
def test_snapshot_json_round_trip_is_lossless(a: MemorySnapshot) -> None:
    assert MemorySnapshot.model_validate_json(a.model_dump_json()) == a


@given(snapshots(), st.sampled_from([("cuda", 0), ("sim", 1), ("npu", 3)]))
def test_snapshots_of_different_devices_never_subtract(
    a: MemorySnapshot, where: tuple[str, int]
) -> None:
    b = a.model_copy(update={"backend": where[0], "device": where[1]})
    with pytest.raises(InvalidInputError):
        a - b


# --- the simulated device under random operations --------------------------------------------

_sizes = st.one_of(st.integers(0, MiB), st.integers(MiB, 12 * MiB), st.integers(12 * MiB, 90 * MiB))
_device_ops = st.lists(
    st.one_of(
        st.tuples(st.just("malloc"), _sizes),
        st.tuples(st.just("free"), st.integers(0, 1000)),
        st.tuples(st.just("external_malloc"), st.integers(1, 40 * MiB)),
        st.tuples(st.just("external_free"), st.integers(0, 1000)),
        st.tuples(st.just("other_malloc"), st.integers(1, 60 * MiB)),
        st.tuples(st.just("other_free"), st.integers(0, 1000)),
        st.tuples(st.just("empty_cache"), st.just(0)),
        st.tuples(st.just("reset_peaks"), st.just(0)),
    ),
    max_size=50,
)


def check_device(dev: SimDevice, backend: memacct.DeviceBackend) -> None:
    snap = memacct.snapshot(backend)  # validates used = reserved + non_allocator + others
    alloc = dev.allocator
    assert 0 <= alloc.allocated <= alloc.reserved <= dev.total - dev.other_process_memory
    assert (snap.allocated, snap.reserved) == (alloc.allocated, alloc.reserved)
    assert snap.other_processes == dev.other_process_memory
    assert snap.non_allocator == dev.process_memory - alloc.reserved
    assert snap.allocated_peak >= snap.allocated and snap.reserved_peak >= snap.reserved
    recount = alloc._recount_stats()  # also checks the block structure
    stats = dev.memory_stats()
    assert {k: stats[k] for k in recount} == recount


@pytest.mark.parametrize("preset", sorted(ALLOCATOR_PRESETS))
@given(ops=_device_ops)
def test_sim_device_stays_consistent_under_random_operations(
    preset: str, ops: list[tuple[str, int]]
) -> None:
    dev = SimDevice(allocator=preset, total_bytes=512 * MiB)
    backend = memacct.get_backend("sim", device=dev)
    live: dict[str, list[int]] = {"malloc": [], "external_malloc": [], "other_malloc": []}
    frees = {"free": ("malloc", dev.free), "external_free": ("external_malloc", dev.external_free),
             "other_free": ("other_malloc", dev.other_process_free)}
    takes: dict[str, Callable[[int], int]] = {
        "malloc": dev.malloc, "external_malloc": dev.external_malloc,
        "other_malloc": dev.other_process_malloc,
    }
    for op, arg in ops:
        if op in takes:
            with contextlib.suppress(SimOutOfMemory):
                live[op].append(takes[op](arg))
        elif op in frees:
            kind, release = frees[op]
            if live[kind]:
                release(live[kind].pop(arg % len(live[kind])))
        elif op == "empty_cache":
            dev.empty_cache()
        else:
            dev.reset_peak_memory_stats()
        check_device(dev, backend)
    for kind, (_, release) in {v[0]: (k, v[1]) for k, v in frees.items()}.items():
        for handle in live[kind]:
            release(handle)
    dev.empty_cache()
    check_device(dev, backend)
    assert dev.allocator.reserved == 0 and dev.free_bytes == dev.total


# --- profiling random workloads --------------------------------------------------------------

_workload = st.lists(
    st.tuples(st.sampled_from(["malloc", "free", "exclude", "external"]),
              st.integers(1, 3 * GiB)),
    max_size=25,
)


@given(
    weights=st.integers(0, 20 * GiB),
    steps=_workload,
    truth=st.sampled_from(list(TruthSource)),
    preset=st.sampled_from(sorted(ALLOCATOR_PRESETS)),
)
def test_profiling_random_workloads_keeps_the_profile_arithmetic(
    weights: int, steps: list[tuple[str, int]], truth: TruthSource, preset: str
) -> None:
    dev = SimDevice("h100-80gb", preset)
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    if weights:
        dev.malloc(weights)
    live: list[int] = []
    peak_live = 0
    external = 0
    # The simulated device frees memory explicitly; two full collections of this test
    # process's heap (torch and mindspore loaded) per example would dominate the run.
    no_gc = SimpleNamespace(collect=lambda: 0)
    with mock.patch.object(memacct.profiling, "gc", no_gc), memacct.memory_profiling(
        backend, baseline, weights_memory=weights, truth_source=truth
    ) as session:
        for op, size in steps:
            if op == "malloc":
                live.append(dev.malloc(size))
                peak_live = max(peak_live, sum(dev.allocator._live[p].size for p in live))
            elif op == "free" and live:
                dev.free(live.pop(size % len(live)))
            elif op == "exclude":
                with session.exclude("compile"):
                    dev.free(dev.malloc(size))
            elif op == "external":
                dev.external_malloc(size // 16)
                external += size // 16
    result = session.result
    assert result.truth_source is not TruthSource.AUTO
    expected = (result.allocated_peak_increase if result.truth_source is TruthSource.ALLOCATED_PEAK
                else result.reserved_peak_increase)
    assert result.activation_peak == expected
    assert result.non_kv_cache_memory == weights + expected + result.non_allocator_increase
    assert result.allocated_peak_increase >= peak_live  # no live bytes escape the peak
    assert result.non_allocator_increase == external
    assert result.warnings == ()
    assert ProfileResult.model_validate_json(result.model_dump_json()) == result


# --- planner ---------------------------------------------------------------------------------


def sim_profile(weights: int = 16 * GiB, activation: int = 2 * GiB) -> ProfileResult:
    dev = SimDevice("h100-80gb")
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    dev.malloc(weights)
    with memacct.memory_profiling(backend, baseline, weights_memory=weights) as session:
        dev.free(dev.malloc(activation))
    return session.result


PROFILE = sim_profile()
# gpt-oss's config names no dtype: its engines run the KV cache in bfloat16.
SPECS = {name: KVCacheSpec.from_preset(name, "bfloat16") for name in model_presets()}


@given(
    st.sampled_from(sorted(SPECS)),
    st.floats(0.3, 1.0),
    st.floats(0.3, 1.0),
    st.sampled_from([1, 16, 32, 128]),
)
def test_more_utilization_never_plans_fewer_blocks(
    name: str, low: float, high: float, block_size: int
) -> None:
    low, high = min(low, high), max(low, high)
    plans: list[KVCachePlan | None] = []
    for utilization in (low, high):
        try:
            plans.append(plan_kv_cache(PROFILE, SPECS[name], utilization, block_size, 1024))
        except memacct.InsufficientMemoryError:
            plans.append(None)
    if plans[0] is not None:
        assert plans[1] is not None and plans[1].num_blocks >= plans[0].num_blocks


# --- fuzzed JSON -----------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10**6),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 10**400, 2**63, 2**64 + 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1e30, -0.0, 4.0]),
    st.text(max_size=12),
    st.sampled_from(["auto", "bfloat16", "fp8", "sliding_attention", "reserved", "sim"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


_mutation = st.tuples(
    st.sampled_from(["replace", "delete", "add"]),
    st.integers(0, 10**6),
    _values,
    st.text(max_size=8),
)


def mutate(data: Any, mutations: list[tuple[str, int, Any, str]]) -> Any:
    """Replace, delete or add values anywhere in a JSON document."""
    data = copy.deepcopy(data)
    for kind, index, value, key in mutations:
        paths = _paths(data)
        if not paths:
            return data
        path = paths[index % len(paths)]
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if kind == "replace":
            parent[last] = value
        elif kind == "delete":
            del parent[last]
        elif isinstance(parent, dict):
            parent[key] = value
        else:
            parent.append(value)
    return data


def text_mutate(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Cut, insert or overwrite characters of a JSON text."""
    for position, length, insert in edits:
        at = position % (len(text) + 1)
        text = text[:at] + insert + text[at + length % 4:]
    return text


_text_edits = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3),
                                 st.text(alphabet='{}[]":,-0123456789eE.naNI \\', max_size=3)),
                       min_size=1, max_size=4)
PROFILE_DATA = json.loads(PROFILE.model_dump_json())
LLAMA = SPECS["llama-3.1-8b"]


def plan_or_memacct_error(result: ProfileResult, spec: KVCacheSpec, **kwargs: Any) -> None:
    try:
        plan = plan_kv_cache(result, spec, **kwargs)
    except MemacctError:
        return
    assert isinstance(plan, KVCachePlan)
    assert 0 < plan.kv_cache_used_bytes <= plan.kv_cache_bytes
    assert plan.non_kv_cache_memory + plan.kv_cache_bytes == plan.target_allocation
    assert plan.target_allocation <= plan.total_memory


def load_profile_text(text: str) -> ProfileResult | None:
    try:
        result: ProfileResult = load_model_json(ProfileResult, text, "fuzzed.json")
    except ConfigError:
        return None
    return result


@given(st.lists(_mutation, min_size=1, max_size=3))
def test_mutated_profile_json_is_a_valid_profile_or_a_config_error(
    mutations: list[tuple[str, int, Any, str]],
) -> None:
    text = json.dumps(mutate(PROFILE_DATA, mutations))
    result = load_profile_text(text)
    if result is not None:
        plan_or_memacct_error(result, LLAMA, max_model_len=4096)


@given(_text_edits)
@example([(0, 0, "[" * 100_000)])
def test_corrupted_profile_text_is_a_valid_profile_or_a_config_error(
    edits: list[tuple[int, int, str]],
) -> None:
    result = load_profile_text(text_mutate(PROFILE.model_dump_json(), edits))
    if result is not None:
        plan_or_memacct_error(result, LLAMA, max_model_len=4096)


_scales = st.sampled_from([GiB, 200 * GiB, MAX_BYTES, MAX_BYTES * 2, 10**30, 10**400])


@st.composite
def hand_edited_profiles(draw: st.DrawFn) -> dict[str, Any]:
    """Profile JSON whose derived numbers were recomputed after editing, as a careful hand
    would: sizes at any scale (up to 10**400), adding up, so only range checks stand
    between it and the planner's arithmetic. Half the examples keep every size in its
    range; the other half may put a negative number anywhere."""
    scale = draw(_scales)
    junk = draw(st.booleans())
    floats = st.floats(allow_nan=True, allow_infinity=True)

    def size(high: int) -> int:
        in_range = st.integers(0, max(0, high))
        return draw(in_range | st.integers(-scale, -1) if junk else in_range)

    total = draw(st.integers(1, scale))

    def snap(t: float) -> dict[str, Any]:
        free = size(total)
        used = total - free
        reserved = size(used)
        allocated = size(reserved)
        other = None if draw(st.booleans()) else size(used - reserved)
        return {"backend": "sim", "device": 0, "timestamp": t, "total": total, "free": free,
                "used": used, "allocated": allocated, "allocated_peak": allocated,
                "reserved": reserved, "reserved_peak": reserved,
                "non_allocator": used - reserved - (other or 0), "other_processes": other}

    weights, activation = size(scale), size(scale)
    increase = draw(st.integers(-scale, scale))
    later = snap(1.0)
    return {
        "baseline": snap(0.0), "before": later, "after": later,
        "weights_memory": weights, "activation_peak": activation,
        "allocated_peak_increase": activation, "reserved_peak_increase": activation,
        "non_allocator_increase": increase,
        "non_kv_cache_memory": weights + activation + increase,
        "truth_source": draw(st.sampled_from(["allocated_peak", "reserved"])),
        "fragmentation": draw(floats | st.floats(0, 1) if junk else st.floats(0, 1)),
        "duration_s": draw(floats | st.floats(0, 1e9) if junk else st.floats(0, 1e9)),
    }


@given(hand_edited_profiles(), st.floats(0.01, 1.0))
def test_consistent_but_absurd_profile_is_a_valid_plan_or_a_memacct_error(
    data: dict[str, Any], utilization: float
) -> None:
    result = load_profile_text(json.dumps(data))
    if result is not None:
        plan_or_memacct_error(result, LLAMA, gpu_memory_utilization=utilization,
                              max_model_len=4096)


_plan_args = st.fixed_dictionaries({
    "gpu_memory_utilization": st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                        st.floats(0.01, 1.0)),
    "block_size": st.one_of(st.sampled_from([1, 16, 32]), st.integers(-2, 2**40)),
    "max_model_len": st.one_of(st.none(), st.integers(1, 1 << 20), st.integers(-2, 2**70)),
})


@given(
    st.sampled_from(sorted(SPECS)),
    st.lists(_mutation, max_size=3),
    st.sampled_from(["auto", "fp8", "bfloat16"]),
    st.integers(1, 16),
    st.integers(1, 4),
    _plan_args,
)
def test_mutated_config_is_a_valid_plan_or_a_memacct_error(
    preset: str,
    mutations: list[tuple[str, int, Any, str]],
    kv_cache_dtype: str,
    tp: int,
    pp: int,
    plan_args: dict[str, Any],
) -> None:
    config = mutate(load_model_preset(preset), mutations)
    try:
        spec = KVCacheSpec.from_hf_config(config, kv_cache_dtype, tp, pp)
    except MemacctError:
        return
    assert spec.bytes_per_token > 0
    plan_or_memacct_error(PROFILE, spec, **plan_args)


@given(preset=st.sampled_from(sorted(SPECS)), edits=_text_edits)
@example(preset="llama-3.1-8b", edits=[(0, 0, "[" * 100_000)])
@example(preset="llama-3.1-8b", edits=[(25, 0, "1" * 5000)])
def test_corrupted_config_file_is_a_valid_plan_or_a_memacct_error(
    preset: str, edits: list[tuple[int, int, str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(text_mutate(json.dumps(load_model_preset(preset)), edits), encoding="utf-8")
    try:
        spec = KVCacheSpec.from_hf_config(path)
    except MemacctError:
        return
    plan_or_memacct_error(PROFILE, spec, max_model_len=4096)


@given(st.dictionaries(st.sampled_from([
    "num_hidden_layers", "num_attention_heads", "hidden_size", "num_key_value_heads", "head_dim",
    "torch_dtype", "sliding_window", "layer_types", "kv_lora_rank", "qk_rope_head_dim",
    "max_position_embeddings", "text_config", "use_sliding_window", "sliding_window_pattern",
    "quantization_config", "model_type", "num_local_experts", "num_experts_per_tok",
]), _values, max_size=10))
def test_config_made_of_known_keys_with_any_values_is_a_plan_or_a_memacct_error(
    config: dict[str, Any],
) -> None:
    try:
        spec = KVCacheSpec.from_hf_config(config)
    except MemacctError:
        return
    plan_or_memacct_error(PROFILE, spec, max_model_len=4096)


def test_the_fuzz_seed_profile_and_configs_are_valid() -> None:
    # The mutations above start from valid documents; if these broke, the fuzzers would
    # only ever test the refusal path.
    assert load_profile_text(PROFILE.model_dump_json()) == PROFILE
    for spec in SPECS.values():
        plan_or_memacct_error(PROFILE, spec, max_model_len=4096)
    assert math.isfinite(PROFILE.duration_s)
