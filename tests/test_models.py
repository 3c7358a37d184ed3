"""The data model: consistency, subtraction, JSON round trip, printing."""

from __future__ import annotations

import pytest

from memacct import InvalidInputError, MemorySnapshot, ProfileResult, TruthSource
from memacct.errors import ConfigError
from memacct.models import load_model_json
from memacct.units import GiB


def snap(**overrides: object) -> MemorySnapshot:
    values: dict[str, object] = dict(
        backend="sim",
        device=0,
        timestamp=100.0,
        total=80 * GiB,
        free=50 * GiB,
        used=30 * GiB,
        allocated=10 * GiB,
        allocated_peak=12 * GiB,
        reserved=20 * GiB,
        reserved_peak=22 * GiB,
        non_allocator=6 * GiB,
        other_processes=4 * GiB,
    )
    values.update(overrides)
    return MemorySnapshot(**values)  # type: ignore[arg-type]


def test_snapshot_json_round_trip_is_lossless() -> None:
    s = snap(timestamp=1234.5678901234)
    assert MemorySnapshot.model_validate_json(s.model_dump_json()) == s


def test_snapshot_is_frozen() -> None:
    s = snap()
    with pytest.raises(Exception, match="frozen"):
        s.free = 1  # type: ignore[misc]


def test_snapshot_rejects_used_not_total_minus_free() -> None:
    with pytest.raises(ValueError, match="used"):
        snap(used=31 * GiB)


def test_snapshot_rejects_non_allocator_inconsistent_with_used() -> None:
    with pytest.raises(ValueError, match="non_allocator"):
        snap(non_allocator=7 * GiB)


def test_snapshot_without_attribution_puts_others_in_non_allocator() -> None:
    s = snap(other_processes=None, non_allocator=10 * GiB)
    assert s.used == s.reserved + s.non_allocator


def test_snapshot_rejects_allocated_above_reserved() -> None:
    with pytest.raises(ValueError, match="allocated"):
        snap(allocated=21 * GiB, allocated_peak=21 * GiB)


def test_snapshot_subtraction_is_field_wise() -> None:
    later = snap(free=40 * GiB, used=40 * GiB, non_allocator=16 * GiB, timestamp=101.5)
    delta = later - snap()
    assert (delta.free, delta.used, delta.non_allocator, delta.reserved) == (
        -10 * GiB,
        10 * GiB,
        10 * GiB,
        0,
    )
    assert delta.timestamp == pytest.approx(1.5)


def test_snapshot_subtraction_across_devices_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="sim:1"):
        snap() - snap(device=1)


def test_snapshot_str_is_in_gib() -> None:
    assert "sim:0 used 30.00GiB of 80.00GiB (free 50.00GiB): reserved 20.00GiB" in str(snap())
    assert "other processes 4.00GiB" in str(snap())


def test_truth_source_parse_names_the_bad_value() -> None:
    with pytest.raises(InvalidInputError, match="'peak'.*allocated_peak"):
        TruthSource.parse("peak")
    assert TruthSource.parse(" Reserved ") is TruthSource.RESERVED


def profile(**overrides: object) -> ProfileResult:
    values: dict[str, object] = dict(
        baseline=snap(),
        before=snap(),
        after=snap(),
        weights_memory=15 * GiB,
        activation_peak=2 * GiB,
        allocated_peak_increase=2 * GiB,
        reserved_peak_increase=3 * GiB,
        non_allocator_increase=GiB,
        non_kv_cache_memory=18 * GiB,
        truth_source=TruthSource.ALLOCATED_PEAK,
        fragmentation=0.1,
        duration_s=0.5,
    )
    values.update(overrides)
    return ProfileResult(**values)  # type: ignore[arg-type]


def test_profile_json_round_trip_is_lossless() -> None:
    p = profile()
    assert ProfileResult.model_validate_json(p.model_dump_json()) == p


def test_profile_rejects_unresolved_auto() -> None:
    with pytest.raises(ValueError, match="resolved"):
        profile(truth_source=TruthSource.AUTO)


def test_profile_rejects_inconsistent_non_kv_total() -> None:
    with pytest.raises(ValueError, match="non_kv_cache_memory"):
        profile(non_kv_cache_memory=17 * GiB)


def test_profile_from_another_format_version_is_a_config_error() -> None:
    text = profile().model_dump_json().replace('"format_version":1', '"format_version":7')
    with pytest.raises(ConfigError, match="format_version 7"):
        load_model_json(ProfileResult, text, "old.json")


def test_profile_with_negative_number_is_a_config_error_naming_the_field() -> None:
    text = profile().model_dump_json().replace('"weights_memory":', '"weights_memory":-', 1)
    with pytest.raises(ConfigError, match="weights_memory"):
        load_model_json(ProfileResult, text, "edited.json")


def test_invalid_json_is_a_config_error_naming_the_source() -> None:
    with pytest.raises(ConfigError, match="profile.json"):
        load_model_json(ProfileResult, "{not json", "profile.json")
