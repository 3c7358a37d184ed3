"""Argument checks shared by every public entry point, so each rule and message is written once.

Each check names the argument, shows the value it got and says what to give
instead, as :class:`~memacct.errors.InvalidInputError` (a ``MemacctError``):
the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

import math

from pydantic import ConfigDict

from memacct.errors import InvalidInputError

__all__ = [
    "FROZEN", "check_batch_budget", "check_fraction", "check_int", "check_optional_int",
    "check_type",
]

FROZEN = ConfigDict(frozen=True, extra="forbid", validate_default=True)
"""The pydantic config of every memacct value object: immutable, no unknown field,
defaults checked."""


def check_int(name: str, value: object, *, low: int = 1, high: int | None = None) -> int:
    """``value`` as an ``int`` in ``[low, high]`` (``bool`` is refused: it is not a count).

    Args:
        name: the argument's name, for the message.
        value: what the caller gave.
        low: the smallest value accepted (1: a positive count; 0: a size that may be empty).
        high: the largest value accepted, or ``None`` for no bound.

    Raises:
        InvalidInputError: not an integer, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(
            f"{name} must be an integer, got {value!r} ({type(value).__name__})"
        )
    if value < low:
        kind = "positive" if low == 1 else f"at least {low}"
        raise InvalidInputError(f"{name} must be {kind}, got {value}")
    if high is not None and value > high:
        raise InvalidInputError(f"{name} {value} is implausible: at most {high}")
    return value


def check_optional_int(
    name: str, value: object, *, low: int = 1, high: int | None = None
) -> int | None:
    """:func:`check_int`, with ``None`` passed through (the argument is optional)."""
    return None if value is None else check_int(name, value, low=low, high=high)


def check_fraction(name: str, value: object, *, what: str = "") -> float:
    """``value`` as a ``float`` in ``(0, 1]``, such as ``gpu_memory_utilization``.

    Args:
        name: the argument's name, for the message.
        value: what the caller gave.
        what: what the fraction means, appended to the range message.

    Raises:
        InvalidInputError: not a number (``bool`` included), or outside ``(0, 1]``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{name} must be a number in (0, 1], got {value!r}")
    fraction = float(value)
    if not (math.isfinite(fraction) and 0.0 < fraction <= 1.0):
        raise InvalidInputError(f"{name} must be in (0, 1], got {value!r}{what}")
    return fraction


def check_type(name: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
    """Refuse ``value`` unless it is a ``kind`` (``bool`` is not an ``int`` here).

    Args:
        name: the argument's name, for the message.
        value: what the caller gave.
        kind: the type (or types) accepted.
        what: what to give instead, e.g. ``"a string such as 'vllm'"``.

    Raises:
        InvalidInputError: ``value`` is of another type.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    is_bool = isinstance(value, bool)
    if not isinstance(value, kinds) or (is_bool and bool not in kinds):
        raise InvalidInputError(
            f"{name} must be {what}, got {value!r} ({type(value).__name__})"
        )


def check_batch_budget(max_num_batched_tokens: int, max_num_seqs: int) -> None:
    """vLLM's start check: a step's token budget holds at least one token per sequence.

    ``vllm/config/scheduler.py`` (``SchedulerConfig.verify_max_model_len``) raises
    "max_num_batched_tokens (...) must be greater than or equal to max_num_seqs".

    Raises:
        InvalidInputError: ``max_num_batched_tokens`` below ``max_num_seqs``.
    """
    if max_num_batched_tokens < max_num_seqs:
        raise InvalidInputError(
            f"max_num_batched_tokens {max_num_batched_tokens} is below max_num_seqs "
            f"{max_num_seqs}: vLLM refuses to start then (SchedulerConfig: the tokens of a "
            "step must be at least its sequences); raise max_num_batched_tokens or lower "
            "max_num_seqs"
        )
