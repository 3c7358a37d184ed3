"""Argument checks shared by every public entry point, so each rule and message is written once.

Each check names the argument, shows the value it got and says what to give
instead, as :class:`~memacct.errors.InvalidInputError` (a ``MemacctError``):
the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

from memacct.errors import InvalidInputError

__all__ = ["check_int", "check_optional_int"]


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
