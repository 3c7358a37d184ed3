"""Two start-ups side by side: two releases, two engines, two settings of one model.

:func:`compare` sets each logged term of one log beside the other's and names
what moved: the engine or release, each setting that differs, and each term
that moved by more than :data:`memacct.explain.terms.TOLERANCE`, largest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memacct.explain.reading import LOGGED_TERMS
from memacct.explain.term import Term, gib
from memacct.explain.terms import Explanation

__all__ = ["Comparison", "compare"]


_RULES = (
    "the engines size the KV cache by different rules: vLLM's is total x "
    "--gpu-memory-utilization (default 0.9) less the weights, the profile run's activation peak "
    "and the non-torch increase (and, from 0.21, the estimated CUDA graphs); SGLang's pool is "
    "what --mem-fraction-static leaves after the weights, the graphs and activations taking the "
    "rest; the figures per rank compare directly (vLLM's GiB, SGLang's K + V 'GB' are both 2**30)"
)


@dataclass(frozen=True)
class Comparison:
    """Two explained logs and what moved between them."""

    first: Explanation
    second: Explanation
    terms: tuple[Term, ...]
    """Per term: ``logged`` is the first log's, ``planned`` the second's (difference: second
    less first)."""
    moved: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        """Both explanations, the terms side by side and what moved."""
        return {
            "first": self.first.as_json(), "second": self.second.as_json(),
            "terms": [{"term": t.term, "first": t.logged, "second": t.planned,
                       "difference": t.difference} for t in self.terms],
            "moved": list(self.moved),
        }  # fmt: skip


def _describe(term: Term) -> str:
    diff = term.difference
    if term.term in ("num_tokens", "num_blocks"):
        return f"{term.term} {term.logged:,} -> {term.planned:,} ({term.relative:+.1%})"
    if term.term == "max_concurrency":
        return f"max_concurrency {term.logged:.2f}x -> {term.planned:.2f}x ({term.relative:+.1%})"
    sign = "+" if (diff or 0) >= 0 else "-"
    return (f"{term.term} {gib(term.logged)} -> {gib(term.planned)} "
            f"({sign}{gib(abs(diff or 0))}, {term.relative:+.1%})")


def compare(first: Explanation, second: Explanation) -> Comparison:
    """What moved from ``first``'s start-up to ``second``'s."""
    a, b = first.reading, second.reading
    terms = tuple(Term(t, a.logged[t], b.logged[t]) for t in LOGGED_TERMS)
    moved: list[str] = []
    if a.engine != b.engine or a.engine_version != b.engine_version:
        moved.append(f"engine: {a.engine} {a.engine_version or '(release not named)'} -> "
                     f"{b.engine} {b.engine_version or '(release not named)'}")  # fmt: skip
    if {a.engine, b.engine} >= {"sglang"} and a.engine != b.engine:
        moved.append(_RULES)
    if a.era != b.era and a.era and b.era:
        moved.append(f"vLLM engine: {a.era} -> {b.era}")
    if a.max_model_len != b.max_model_len:
        moved.append(f"max_model_len: {a.max_model_len} -> {b.max_model_len}")
    for key in sorted(set(a.settings) | set(b.settings)):
        if a.settings.get(key) != b.settings.get(key):
            moved.append(f"setting {key}: {a.settings.get(key)} -> {b.settings.get(key)}")
    shifted = [t for t in terms if t.relative is not None and t.differs]
    shifted.sort(key=lambda t: -abs(t.relative or 0))
    moved += [_describe(t) for t in shifted]
    if not moved:
        moved.append("nothing moved by more than 5% in the terms both logs print")
    return Comparison(first, second, terms, tuple(moved))
