"""One term of a start-up, logged beside planned (:class:`Term`), and how sizes print."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memacct.units import GiB

__all__ = ["TOLERANCE", "Term", "gib"]

TOLERANCE = 0.05
"""A relative difference above which a term gets a ``why`` (issue 30's 5%)."""


@dataclass(frozen=True)
class Term:
    """One term logged beside planned (bytes, counts or the concurrency ratio)."""

    term: str
    logged: int | float | None
    planned: int | float | None
    why: str = ""

    @property
    def difference(self) -> int | float | None:
        """``planned - logged`` where both are known."""
        if self.logged is None or self.planned is None:
            return None
        diff = self.planned - self.logged
        return round(diff, 2) if isinstance(diff, float) else diff

    @property
    def relative(self) -> float | None:
        """The difference relative to the logged value (None where that is 0 or unknown)."""
        diff = self.difference
        if diff is None or not self.logged:
            return None
        return diff / abs(self.logged)

    @property
    def differs(self) -> bool:
        """Whether planned and logged differ by more than :data:`TOLERANCE`."""
        rel = self.relative
        if rel is None:
            return self.difference not in (None, 0, 0.0)
        return abs(rel) > TOLERANCE

    def as_json(self) -> dict[str, Any]:
        """The contract's ``terms`` item."""
        return {"term": self.term, "logged": self.logged, "planned": self.planned,
                "difference": self.difference, "why": self.why}  # fmt: skip


def gib(value: int | float | None) -> str:
    """Bytes as ``1.23 GiB`` (``?`` where unknown)."""
    return "?" if value is None else f"{value / GiB:.2f} GiB"
