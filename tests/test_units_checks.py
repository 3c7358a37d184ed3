"""Byte units and the shared argument checks."""

from __future__ import annotations

import pytest

from memacct.checks import check_int, check_optional_int
from memacct.errors import InvalidInputError
from memacct.units import GiB, MiB, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("20GiB", 20 * GiB), ("512 MiB", 512 * MiB), ("24GB", 24 * 10**9), ("4096", 4096),
     ("1.5GiB", 3 * GiB // 2), ("80_000_000_000", 80 * 10**9)],
)
def test_parse_size_reads_binary_and_decimal_suffixes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "x", "-1GiB", "nanGiB", "infGiB", "20XB", "1e999GiB"])
def test_parse_size_refuses_what_is_not_a_size_and_names_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def test_format_size_picks_the_unit_torch_prints() -> None:
    assert [format_size(n) for n in (512, 2 * MiB, 85_029_158_912)] == [
        "512 bytes", "2.00 MiB", "79.19 GiB"
    ]


@pytest.mark.parametrize("value", [True, 1.0, "3", None])
def test_check_int_refuses_non_integers_naming_the_argument(value: object) -> None:
    with pytest.raises(InvalidInputError, match="block_size must be an integer"):
        check_int("block_size", value)


def test_check_int_bounds() -> None:
    assert check_int("n", 0, low=0) == 0
    with pytest.raises(InvalidInputError, match="n must be positive, got 0"):
        check_int("n", 0)
    with pytest.raises(InvalidInputError, match="n 11 is implausible: at most 10"):
        check_int("n", 11, high=10)
    assert check_optional_int("n", None) is None
    assert check_optional_int("n", 3) == 3
