"""plan_kv_cache: budgets, blocks, refusals and the report, from exact profiles.

Profiles are built from snapshots with exact numbers (``make_profile``), so
each expected value is plain arithmetic on the inputs. The spec is
Llama-3.1-8B's: ``2 x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB`` per
token, so a block of 16 tokens is 2 MiB.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memacct._version import __version__
from memacct.errors import ConfigError, InsufficientMemoryError, InvalidInputError
from memacct.models import MemorySnapshot, ProfileResult, TruthSource
from memacct.planner import (
    KVCachePlan,
    KVCacheSpec,
    load_profile,
    plan_kv_cache,
    save_profile,
)
from memacct.units import GiB, MiB

LLAMA = KVCacheSpec.from_preset("llama-3.1-8b")
TOKEN = 2 * 32 * 8 * 128 * 2
BLOCK = 16 * TOKEN


def make_profile(
    total: int = 80 * GiB,
    weights: int = 16 * GiB,
    activation: int = 4 * GiB,
    non_allocator_increase: int = 1 * GiB,
    *,
    context: int = 500 * MiB,
    other: int | None = 0,
    unattributed: int = 0,
    duration: float = 0.44,
    fragmentation: float = 0.0,
    truth: TruthSource = TruthSource.ALLOCATED_PEAK,
    reason: str = "",
    settings: dict[str, str] | None = None,
) -> ProfileResult:
    """A consistent profile: ``context`` bytes outside the allocator before the model,
    ``other`` bytes of other processes (``None``: the backend cannot attribute, and
    ``unattributed`` bytes of them hide in ``non_allocator``)."""
    others = other or 0

    def snap(t: float, reserved: int, peak: int, non_allocator: int) -> MemorySnapshot:
        used = reserved + non_allocator + others
        return MemorySnapshot(
            backend="sim", device=0, timestamp=t, total=total, free=total - used, used=used,
            allocated=reserved, allocated_peak=peak, reserved=reserved, reserved_peak=peak,
            non_allocator=non_allocator, other_processes=other,
        )

    base_non_allocator = context + (unattributed if other is None else 0)
    return ProfileResult(
        baseline=snap(0.0, 0, 0, base_non_allocator),
        before=snap(1.0, weights, weights, base_non_allocator),
        after=snap(2.0, weights, weights + activation, base_non_allocator + non_allocator_increase),
        weights_memory=weights,
        activation_peak=activation,
        allocated_peak_increase=activation,
        reserved_peak_increase=activation,
        non_allocator_increase=non_allocator_increase,
        non_kv_cache_memory=weights + activation + non_allocator_increase,
        truth_source=truth,
        truth_source_reason=reason,
        fragmentation=fragmentation,
        duration_s=duration,
        allocator_settings=settings or {},
    )


def plan(result: ProfileResult | None = None, **kwargs: Any) -> KVCachePlan:
    kwargs.setdefault("max_model_len", 8192)
    return plan_kv_cache(result or make_profile(), LLAMA, **kwargs)


def refusal(result: ProfileResult, **kwargs: Any) -> InsufficientMemoryError:
    """The error :func:`plan` raises for ``result`` under ``kwargs`` (it must raise one)."""
    with pytest.raises(InsufficientMemoryError) as info:
        plan(result, **kwargs)
    return info.value


# --- the numbers -------------------------------------------------------------------------------


def test_plan_reproduces_the_profile_numbers_exactly() -> None:
    p = plan(gpu_memory_utilization=0.75)
    assert p.total_memory == 80 * GiB
    assert p.target_allocation == 80 * GiB * 3 // 4
    assert p.non_kv_cache_memory == 16 * GiB + 4 * GiB + 1 * GiB
    assert p.kv_cache_bytes == 60 * GiB - 21 * GiB
    assert p.block_bytes == 16 * 2 * 32 * 8 * 128 * 2
    assert p.num_blocks == 39 * GiB // (2 * MiB)
    assert p.num_tokens == 39 * GiB // (2 * MiB) * 16
    assert p.kv_cache_used_bytes == 39 * GiB


def test_target_is_total_times_utilization_truncated() -> None:
    total = 79_33 * GiB // 100
    p = plan(make_profile(total=total), gpu_memory_utilization=0.9)
    assert p.target_allocation == int(total * 0.9)


def test_only_whole_blocks_are_planned() -> None:
    p = plan(make_profile(non_allocator_increase=1 * GiB + 1), gpu_memory_utilization=0.75)
    assert p.kv_cache_bytes == 39 * GiB - 1
    assert p.num_blocks == 39 * GiB // BLOCK - 1
    assert p.kv_cache_used_bytes == p.num_blocks * BLOCK


def test_max_concurrency_is_capacity_over_one_request() -> None:
    p = plan(gpu_memory_utilization=0.75, max_model_len=8192)
    assert p.max_concurrency == (39 * GiB // BLOCK) / (8192 // 16)


def test_max_model_len_defaults_to_the_configs_max_position_embeddings() -> None:
    p = plan_kv_cache(make_profile(), LLAMA)
    assert p.max_model_len == 131072


def _mistral_on_24_gib() -> tuple[KVCacheSpec, ProfileResult]:
    """Mistral-7B (all sliding-window layers, window 4096) profiled on a 24 GiB device."""
    result = make_profile(total=24 * GiB, weights=14 * GiB, activation=2 * GiB)
    return KVCacheSpec.from_preset("mistral-7b"), result


def test_sliding_window_model_fits_a_length_full_attention_would_not() -> None:
    mistral, result = _mistral_on_24_gib()
    # 24 * 0.9 - 17 GiB leaves 4.6 GiB: 36 800-odd tokens full, but only window + chunk needed.
    p = plan_kv_cache(result, mistral, max_model_len=65536, max_num_batched_tokens=2048)
    # Async scheduling keeps two batches in flight: window - 1 + 2 x 2048 tokens, plus a block.
    window_blocks = math.ceil((4096 - 1 + 2 * 2048) / 16) + 1
    assert p.request_bytes == window_blocks * 16 * mistral.bytes_per_token
    without_async = plan_kv_cache(result, mistral, max_model_len=65536,
                                  max_num_batched_tokens=2048, async_scheduling=False)
    assert without_async.blocks_per_request == math.ceil((4096 - 1 + 2048) / 16) + 1
    with pytest.raises(InsufficientMemoryError):
        plan_kv_cache(result, KVCacheSpec.from_preset("llama-3.1-8b"), max_model_len=65536)


# --- the report ---------------------------------------------------------------------------------


DESIGN_BLOCK = """\
Memory profiling results:
duration               0.44 seconds
total_gpu_memory       79.33GiB
gpu_memory_utilization 0.25
target_allocation      19.83GiB
baseline_memory        4.71GiB
max_inference_spike    2.35GiB
kv_cache_size          12.77GiB"""


def design_plan() -> KVCachePlan:
    result = make_profile(
        total=79_33 * GiB // 100, weights=421 * GiB // 100, activation=235 * GiB // 100,
        non_allocator_increase=50 * GiB // 100, duration=0.44,
    )
    return plan(result, gpu_memory_utilization=0.25)


def test_report_starts_with_the_design_block_exactly() -> None:
    report = design_plan().report()
    assert report.splitlines()[:8] == DESIGN_BLOCK.splitlines()


def test_report_adds_truth_source_fragmentation_blocks_and_concurrency() -> None:
    p = plan(make_profile(fragmentation=0.125, reason="pool fragments"))
    extra = p.report().splitlines()[8:]
    assert extra == [
        "truth_source           allocated_peak (pool fragments)",
        "fragmentation          12.5%",
        f"num_gpu_blocks         {p.num_blocks}",
        f"block_size             16 tokens, {BLOCK} bytes per block",
        f"kv_cache_tokens        {p.num_blocks * 16}",
        f"max_concurrency        {p.num_blocks / (8192 // 16):.2f}x for 8192 tokens per request",
        f"Available KV cache memory: {p.kv_cache_bytes / GiB:.2f} GiB",
        f"GPU KV cache size: {p.num_blocks * 16:,} tokens",
        f"Maximum concurrency for 8,192 tokens per request: {p.num_blocks / 512:.2f}x",
    ]


def test_plan_logs_its_report_at_info_on_logger_memacct(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="memacct"):
        p = design_plan()
    assert [r.getMessage() for r in caplog.records if r.name == "memacct"] == [p.report()]


# --- provenance and serialization ----------------------------------------------------------------


def test_plan_records_its_provenance() -> None:
    result = make_profile(
        other=3 * GiB, fragmentation=0.25, truth=TruthSource.RESERVED, reason="fragmented pool",
        settings={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    )
    prov = plan(result).provenance
    assert (prov.backend, prov.device) == ("sim", 0)
    assert prov.truth_source == TruthSource.RESERVED
    assert prov.truth_source_reason == "fragmented pool"
    assert prov.fragmentation == 0.25
    assert prov.allocator_settings == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert prov.other_processes_at_baseline == 3 * GiB
    assert prov.free_at_start == result.baseline.free
    assert prov.memacct_version == __version__
    assert prov.created_at > 0
    assert prov.overrides == ()


def test_unattributed_co_tenants_are_recorded_as_unknown() -> None:
    assert plan(make_profile(other=None)).provenance.other_processes_at_baseline is None


def test_plan_round_trips_through_json() -> None:
    p = plan()
    assert KVCachePlan.model_validate_json(p.model_dump_json()) == p


def test_plan_saves_and_loads(tmp_path: Path) -> None:
    p = plan()
    assert KVCachePlan.load(p.save(tmp_path / "plan.json")) == p


def test_profile_saves_and_loads(tmp_path: Path) -> None:
    result = make_profile(other=None, unattributed=2 * GiB)
    assert load_profile(save_profile(result, tmp_path / "profile.json")) == result


def test_plan_from_a_loaded_profile_equals_the_plan_from_the_original(tmp_path: Path) -> None:
    result = make_profile()
    loaded = load_profile(save_profile(result, tmp_path / "profile.json"))
    assert plan(loaded).model_dump(exclude={"provenance"}) == plan(result).model_dump(
        exclude={"provenance"})


def test_loading_a_missing_plan_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        KVCachePlan.load(tmp_path / "missing.json")


def test_loading_invalid_json_profile_is_config_error(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not a valid ProfileResult"):
        load_profile(path)


def test_loading_a_profile_over_16_mib_is_config_error(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_bytes(b" " * (16 * MiB + 1))
    with pytest.raises(ConfigError, match=r"16\.00 MiB \(16777216 bytes\)"):
        load_profile(path)


def test_loading_a_plan_with_inconsistent_numbers_is_config_error(tmp_path: Path) -> None:
    path = plan().save(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    data["num_blocks"] += 1
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="kv_cache_used_bytes"):
        KVCachePlan.load(path)


def test_saving_into_a_missing_directory_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot write plan"):
        plan().save(tmp_path / "no" / "such" / "plan.json")


def test_save_profile_rejects_other_objects(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="ProfileResult"):
        save_profile({"weights": 1}, tmp_path / "p.json")  # type: ignore[arg-type]


# --- overrides ------------------------------------------------------------------------------------


def test_kv_cache_memory_bytes_replaces_the_budget(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memacct"):
        p = plan(kv_cache_memory_bytes=10 * GiB + 1)
    assert p.kv_cache_bytes == 10 * GiB + 1
    assert p.num_blocks == 10 * GiB // BLOCK
    assert p.target_allocation == 21 * GiB + 10 * GiB + 1
    assert p.provenance.overrides == (f"kv_cache_memory_bytes={10 * GiB + 1}",)
    assert any("overrides gpu_memory_utilization" in r.getMessage() for r in caplog.records)


def test_num_gpu_blocks_override_replaces_the_block_count(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memacct"):
        p = plan(num_gpu_blocks_override=1000)
    assert (p.num_blocks, p.kv_cache_bytes) == (1000, 1000 * BLOCK)
    assert p.provenance.overrides == ("num_gpu_blocks_override=1000",)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "num_gpu_blocks_override=1000 overrides gpu_memory_utilization" in (
        warnings[0].getMessage())


def test_report_says_the_utilization_was_overridden() -> None:
    line = plan(num_gpu_blocks_override=1000).report().splitlines()[3]
    assert line == "gpu_memory_utilization 0.9 (overridden by num_gpu_blocks_override=1000)"


def test_both_overrides_at_once_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="not both"):
        plan(kv_cache_memory_bytes=GiB, num_gpu_blocks_override=10)


def test_override_beyond_the_device_is_refused_with_the_maximum() -> None:
    with pytest.raises(InsufficientMemoryError, match=rf"at most {80 * GiB - 21 * GiB} bytes"):
        plan(kv_cache_memory_bytes=60 * GiB)


def test_override_beyond_free_memory_at_start_is_refused() -> None:
    result = make_profile(other=20 * GiB)
    free_for_cache = 80 * GiB - 20 * GiB - 500 * MiB - 21 * GiB
    with pytest.raises(
        InsufficientMemoryError, match=rf"other processes hold 20.00GiB.*at most {free_for_cache}"
    ):
        plan(result, num_gpu_blocks_override=free_for_cache // BLOCK + 1)


def test_override_below_one_block_is_refused() -> None:
    with pytest.raises(InsufficientMemoryError, match=rf"less than one block .*{BLOCK} bytes"):
        plan(kv_cache_memory_bytes=BLOCK - 1)


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "utilization", [0, 0.0, -0.1, 1.0001, 1.5, math.nan, math.inf, True, "0.9"]
)
def test_utilization_outside_zero_one_is_invalid_input_naming_it(utilization: Any) -> None:
    with pytest.raises(InvalidInputError, match=rf"gpu_memory_utilization .*{utilization!r}"):
        plan(gpu_memory_utilization=utilization)


def test_utilization_of_one_is_accepted() -> None:
    p = plan(make_profile(context=0), gpu_memory_utilization=1.0)
    assert p.target_allocation == 80 * GiB


@pytest.mark.parametrize("block_size", [0, -16, 16.0, True])
def test_block_size_not_positive_integer_is_invalid_input(block_size: Any) -> None:
    message = rf"block_size must be (positive|an integer), got {re.escape(repr(block_size))}"
    with pytest.raises(InvalidInputError, match=message):
        plan(block_size=block_size)


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_model_len", 0), ("max_model_len", -2), ("max_num_batched_tokens", 0),
     ("kv_cache_memory_bytes", -1), ("num_gpu_blocks_override", 0)],
)
def test_non_positive_lengths_and_overrides_are_invalid_input(name: str, value: int) -> None:
    with pytest.raises(InvalidInputError, match=rf"{name} must be positive, got {value}"):
        plan(**{name: value})


def test_missing_max_model_len_without_config_default_takes_vllms_2048() -> None:
    # vLLM assumes 2048 for a config without a length key (_get_and_verify_max_len), as the
    # offline plan does (ModelConfig.default_max_model_len; tests/test_twins.py).
    spec = KVCacheSpec.from_hf_config(
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
         "torch_dtype": "float16"})
    assert plan_kv_cache(make_profile(), spec).max_model_len == 2048


def test_wrong_argument_types_are_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="ProfileResult"):
        plan_kv_cache({}, LLAMA)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="KVCacheSpec"):
        plan_kv_cache(make_profile(), {})  # type: ignore[arg-type]


def test_free_memory_below_target_names_the_numbers_and_co_tenants() -> None:
    result = make_profile(other=20 * GiB)
    free = 80 * GiB - 20 * GiB - 500 * MiB
    message = str(refusal(result, gpu_memory_utilization=0.9))
    assert "Free memory on device sim:0 at start (59.51GiB" in message
    assert f"{free} bytes" in message
    assert "desired memory utilization 0.9 (72.00GiB" in message
    assert f"other processes hold 20.00GiB ({20 * GiB} bytes)" in message
    assert f"this process held 0.49GiB ({500 * MiB} bytes) at start" in message
    most = math.floor(free / (80 * GiB) * 1000) / 1000
    assert f"decrease gpu_memory_utilization to at most {most}" in message


def test_free_memory_below_target_without_attribution_says_so() -> None:
    result = make_profile(other=None, unattributed=20 * GiB)
    with pytest.raises(InsufficientMemoryError, match="cannot attribute it to processes"):
        plan(result, gpu_memory_utilization=0.9)


def test_free_memory_check_passes_when_target_just_fits() -> None:
    result = make_profile(other=8 * GiB - 500 * MiB)
    assert result.baseline.free == 72 * GiB
    assert plan(result, gpu_memory_utilization=0.9).target_allocation == int(80 * GiB * 0.9)


def test_no_memory_left_names_the_numbers_and_the_utilization_that_would_do() -> None:
    result = make_profile(weights=20 * GiB, activation=2 * GiB, non_allocator_increase=0)
    message = str(refusal(result, gpu_memory_utilization=0.25))
    assert "No available memory for the cache blocks on sim:0" in message
    assert f"{20 * GiB} + activation peak {2 * GiB}" in message
    assert f"leaving {20 * GiB - 22 * GiB} bytes" in message
    need = (22 * GiB + BLOCK) / (80 * GiB)
    assert f"at least {math.ceil(need * 1000) / 1000}" in message


def test_suggested_utilization_actually_fits_one_block() -> None:
    result = make_profile(weights=20 * GiB, activation=2 * GiB, non_allocator_increase=0)
    message = str(refusal(result, gpu_memory_utilization=0.25))
    suggested = float(message.split("at least ")[1].split(",", maxsplit=1)[0])
    assert plan(result, gpu_memory_utilization=suggested, max_model_len=16).num_blocks >= 1


def test_less_than_one_block_left_is_no_memory() -> None:
    result = make_profile(total=100 * GiB, weights=50 * GiB - BLOCK + 1, activation=0,
                          non_allocator_increase=0, context=0)
    with pytest.raises(InsufficientMemoryError, match=rf"leaving {BLOCK - 1} bytes"):
        plan(result, gpu_memory_utilization=0.5)


def test_model_larger_than_the_device_says_no_utilization_helps() -> None:
    result = make_profile(total=16 * GiB, weights=15 * GiB, activation=GiB,
                          non_allocator_increase=0, context=0)
    with pytest.raises(InsufficientMemoryError, match="does not fit this device at any"):
        plan(result, gpu_memory_utilization=1.0)


def test_max_model_len_that_does_not_fit_names_the_largest_that_does() -> None:
    result = make_profile(weights=60 * GiB, activation=2 * GiB, non_allocator_increase=0)
    budget_blocks = (int(80 * GiB * 0.9) - 62 * GiB) // BLOCK
    error = refusal(result, max_model_len=131072)
    message = str(error)
    assert "To serve one request of max_model_len=131072" in message
    assert f"{131072 * TOKEN} bytes" in message
    # vLLM holds its null block back before it estimates.
    assert f"largest max_model_len that fits is {(budget_blocks - 1) * 16}" in message
    assert error.estimated_max_model_len == (budget_blocks - 1) * 16


def test_the_largest_length_named_is_exact() -> None:
    gemma = KVCacheSpec.from_preset("gemma-2-9b")  # half the layers slide: a non-linear cost
    result = make_profile(total=24 * GiB, weights=14 * GiB, activation=2 * GiB)
    kwargs: dict[str, Any] = {"max_num_batched_tokens": 4096, "block_size": 32}
    with pytest.raises(InsufficientMemoryError) as info:
        plan_kv_cache(result, gemma, max_model_len=1_000_000, **kwargs)
    largest = info.value.estimated_max_model_len
    assert largest is not None and largest > 0
    assert plan_kv_cache(result, gemma, max_model_len=largest, **kwargs).max_model_len == largest
    with pytest.raises(InsufficientMemoryError):
        plan_kv_cache(result, gemma, max_model_len=largest + 1, **kwargs)


def test_an_all_sliding_model_fits_any_length_with_chunked_prefill() -> None:
    mistral, result = _mistral_on_24_gib()
    p = plan_kv_cache(result, mistral, max_model_len=1_000_000, max_num_batched_tokens=4096)
    blocks = math.ceil((4096 - 1 + 2 * 4096) / 16) + 1
    assert p.request_bytes == blocks * 16 * mistral.bytes_per_token


def test_with_num_blocks_cannot_exceed_the_budget() -> None:
    p = plan()
    with pytest.raises(InvalidInputError, match="exceed this plan's KV-cache budget"):
        p.with_num_blocks(p.num_blocks + 1)


def test_with_num_blocks_recomputes_what_follows() -> None:
    p = plan().with_num_blocks(1000)
    assert (p.num_tokens, p.kv_cache_used_bytes) == (16000, 1000 * BLOCK)
    assert p.max_concurrency == 1000 / (8192 // 16)


# --- properties -----------------------------------------------------------------------------------


usage = st.fixed_dictionaries({
    "weights": st.integers(0, 20 * GiB),
    "activation": st.integers(0, 8 * GiB),
    "non_allocator_increase": st.integers(0, 2 * GiB),
})
utilizations = st.floats(0.05, 1.0, allow_nan=False)
block_sizes = st.sampled_from([1, 8, 16, 32, 128])


def plan_or_none(result: ProfileResult, **kwargs: Any) -> KVCachePlan | None:
    try:
        return plan_kv_cache(result, LLAMA, max_model_len=16, **kwargs)
    except InsufficientMemoryError:
        return None


@settings(deadline=None)
@given(usage, st.integers(24 * GiB, 160 * GiB), st.integers(0, 64 * GiB), utilizations, block_sizes)
def test_more_free_memory_never_yields_fewer_blocks(
    used: dict[str, int], total: int, extra: int, utilization: float, block_size: int
) -> None:
    small = plan_or_none(make_profile(total=total, **used), gpu_memory_utilization=utilization,
                         block_size=block_size)
    assume(small is not None)
    assert small is not None
    large = plan_or_none(make_profile(total=total + extra, **used),
                         gpu_memory_utilization=utilization, block_size=block_size)
    assert large is not None
    assert large.num_blocks >= small.num_blocks


@settings(deadline=None)
@given(usage, st.integers(24 * GiB, 160 * GiB), utilizations, block_sizes)
def test_used_blocks_fit_the_budget_and_the_budget_fits_the_target(
    used: dict[str, int], total: int, utilization: float, block_size: int
) -> None:
    p = plan_or_none(make_profile(total=total, **used), gpu_memory_utilization=utilization,
                     block_size=block_size)
    assume(p is not None)
    assert p is not None
    assert p.num_blocks * p.block_bytes <= p.kv_cache_bytes <= p.target_allocation


@settings(deadline=None)
@given(usage, st.integers(24 * GiB, 160 * GiB), utilizations, block_sizes,
       st.one_of(st.none(), st.integers(1, 64 * GiB)))
def test_a_plan_never_exceeds_its_target(
    used: dict[str, int], total: int, utilization: float, block_size: int, kv_bytes: int | None
) -> None:
    p = plan_or_none(make_profile(total=total, **used), gpu_memory_utilization=utilization,
                     block_size=block_size, kv_cache_memory_bytes=kv_bytes)
    assume(p is not None)
    assert p is not None
    assert p.non_kv_cache_memory + p.kv_cache_used_bytes <= p.target_allocation <= p.total_memory
    if kv_bytes is None:
        assert p.target_allocation == int(total * utilization)


# --- end to end on the simulated device ----------------------------------------------------------


def test_plan_on_the_simulated_device_matches_its_profile_exactly() -> None:
    from _sim import simulated_start

    dev, result = simulated_start(15 * GiB, 3 * GiB, weights_memory=15 * GiB)
    p = plan_kv_cache(result, LLAMA, gpu_memory_utilization=0.9, max_model_len=8192)
    target = int(dev.total * 0.9)
    assert (p.total_memory, p.target_allocation) == (dev.total, target)
    assert p.non_kv_cache_memory == 15 * GiB + 3 * GiB == result.non_kv_cache_memory
    assert p.kv_cache_bytes == target - 18 * GiB
    # The allocator rounds each layer's KV tensor to its 2 MiB segments: the plan keeps room.
    from memacct.planner.allocator_fit import kv_cache_reservation

    budget = target - 18 * GiB
    assert kv_cache_reservation(LLAMA, p.num_blocks, 16, 2 * MiB, "multiple") <= budget
    assert kv_cache_reservation(LLAMA, p.num_blocks + 1, 16, 2 * MiB, "multiple") > budget


def test_co_tenant_on_the_simulated_device_is_named_with_its_bytes() -> None:
    from _sim import simulated_start

    _, result = simulated_start(
        15 * GiB, 3 * GiB, other_processes=30 * GiB, weights_memory=15 * GiB
    )
    message = rf"other processes hold 30.00GiB \({30 * GiB} bytes\)"
    with pytest.raises(InsufficientMemoryError, match=message):
        plan_kv_cache(result, LLAMA, gpu_memory_utilization=0.9, max_model_len=8192)


# --- one pipeline (issue 20): an engine's start-up estimate through plan_kv_cache -----------


def test_an_offline_plan_is_the_estimate_through_the_one_planner() -> None:
    from memacct.engines.base import StartupSettings
    from memacct.engines.vllm.startup import STARTUP
    from memacct.planner import load_model_preset
    from memacct.planner.budget import MemoryBudget
    from memacct.planner.offline import plan_offline

    config = load_model_preset("qwen2.5-7b")
    offline = plan_offline(config, device="h100-80gb")
    est = STARTUP.estimate(config, total_memory=offline.total_memory or 0,
                           device_name="h100-80gb",
                           settings=StartupSettings(max_model_len=32768))  # fmt: skip
    budget = MemoryBudget.from_estimate(est, device="h100-80gb", device_label="H100")
    plan = plan_kv_cache(budget, KVCacheSpec.from_hf_config(config), max_model_len=32768)
    assert isinstance(offline, KVCachePlan) and offline.budget is not None
    assert (plan.kv_cache_bytes, plan.num_blocks, plan.target_allocation) == (
        offline.kv_cache_bytes, offline.num_blocks, offline.target_allocation)
    assert plan.kv_cache_bytes == est.kv_cache_bytes  # the engine's own arithmetic
    # The batch the estimate profiled is the plan's, without repeating it.
    assert (plan.max_num_batched_tokens, plan.max_num_seqs) == (
        est.max_num_batched_tokens, est.max_num_seqs)


def test_a_plan_that_does_not_fit_has_no_blocks_to_resize() -> None:
    from memacct.planner import load_model_preset
    from memacct.planner.offline import plan_offline

    plan = plan_offline(load_model_preset("llama-3.1-70b"), device="l4")
    assert not plan.fits and plan.max_concurrency == 0 and plan.shortfall_bytes > 0
    assert plan.kv_cache_bytes < 0 and plan.verdict.startswith("does not fit: ")
    with pytest.raises(InvalidInputError, match="does not fit"):
        plan.with_num_blocks(1)
    again = KVCachePlan.model_validate_json(plan.model_dump_json())
    assert again == plan


def test_a_version_2_plan_still_loads(tmp_path: Path) -> None:
    spec = LLAMA
    plan = plan_kv_cache(None, spec, kv_cache_memory_bytes=GiB, max_model_len=4096)
    data = json.loads(plan.model_dump_json())
    assert data["format_version"] == 4
    for key in ("model", "budget", "fits", "verdict", "suggestions", "shortfall_bytes"):
        del data[key]
    data["format_version"] = 2
    old = KVCachePlan.model_validate(data)
    assert old.fits and old.num_blocks == plan.num_blocks


def test_a_plan_without_device_or_profile_takes_the_engines_reference_batch() -> None:
    from memacct.devices import DEVICE_INFO, REFERENCE_DEVICE
    from memacct.engines.vllm.defaults import batch_defaults

    spec = LLAMA
    plan = plan_kv_cache(None, spec, kv_cache_memory_bytes=GiB, max_model_len=4096)
    reference = DEVICE_INFO[REFERENCE_DEVICE]
    assert (plan.max_num_batched_tokens, plan.max_num_seqs) == batch_defaults(
        reference.total_bytes, reference.name)
