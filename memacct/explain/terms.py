"""Each term of a start-up, logged beside planned, with why they differ and what to change.

:func:`explain` reads nothing itself: it takes a :class:`LogReading`, plans the
same start-up (:mod:`memacct.explain.request`) and sets the terms side by side.
Every term that differs by more than :data:`TOLERANCE` gets a ``why`` that names
the engine setting that moves it; the KV budget's ``why`` splits its difference
into the other terms' (vLLM's budget is ``total x utilization - weights -
activation peak - non-torch increase [- graphs]``, so the split is exact where
the log prints them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memacct.explain.reading import LOGGED_TERMS, LogReading
from memacct.explain.request import PlannedRun, PlanRequest, plan_request, release, run_plan
from memacct.explain.term import TOLERANCE, Term, gib
from memacct.explain.why import suggestions, why

__all__ = ["TOLERANCE", "Explanation", "Term", "explain", "gib"]

@dataclass(frozen=True)
class Explanation:
    """A log explained: what it says, the plan of the same start-up, the terms, the advice."""

    reading: LogReading
    request: PlanRequest
    run: PlannedRun
    terms: tuple[Term, ...]
    suggestions: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def plan(self) -> Any:
        """The plan (a :class:`~memacct.planner.result.KVCachePlan`), or None."""
        return self.run.plan

    def as_json(self) -> dict[str, Any]:
        """``memacct explain --json`` (the keys of DESIGN.md's contract, then the details)."""
        import json

        r = self.reading
        plan = None if self.plan is None else json.loads(self.plan.model_dump_json())
        return {
            "engine": r.engine, "engine_version": r.engine_version, "settings": r.settings,
            "logged": r.logged, "plan": plan, "terms": [t.as_json() for t in self.terms],
            "suggestions": list(self.suggestions), "log": r.name, "era": r.era,
            "release": release(r.engine_version),
            "device": r.device, "settings_from": list(r.settings_from),
            "figures": [f.as_json() for f in r.found], "plan_command": self.request.command,
            "plan_error": self.run.error or None, "notes": list(self.notes),
        }  # fmt: skip


def _planned(plan: Any) -> dict[str, int | float | None]:
    if plan is None:
        return dict.fromkeys(LOGGED_TERMS)
    budget = plan.budget
    graphs = None if budget is None else (budget.cudagraph_memory or budget.cudagraph_estimate)
    kv = budget.kv_cache_bytes if budget is not None and not plan.fits else plan.kv_cache_bytes
    return {
        "weights_memory": plan.weights_memory, "activation_peak": plan.activation_peak,
        "non_allocator_increase": plan.non_allocator_increase, "cudagraph_memory": graphs,
        "kv_cache_bytes": kv, "num_tokens": plan.kv_tokens if plan.fits else 0,
        "num_blocks": plan.num_blocks, "max_concurrency": round(plan.max_concurrency, 2),
        "total_memory": plan.total_memory,
    }  # fmt: skip


def explain(reading: LogReading, *, model: str | None = None, device: str | None = None,
            device_memory: str | None = None) -> Explanation:  # fmt: skip
    """Plan the start-up ``reading`` records and set each term beside the log's.

    ``model``, ``device``, ``device_memory``: as ``memacct plan``'s flags, replacing what
    the log names.
    """
    request = plan_request(reading, model=model, device=device, device_memory=device_memory)
    run = run_plan(request)
    if run.error and "--enforce-eager changes nothing" in run.error:
        # The log ran eager; memacct models no graph memory for this engine, so the flag is
        # a no-op that `memacct plan` refuses: plan without it, as the same start-up.
        from dataclasses import replace

        flags = {k: v for k, v in request.flags.items() if k != "enforce_eager"}
        request = replace(request, flags=flags, notes=(
            *request.notes, f"--enforce-eager dropped: {reading.engine}'s start-up has no "
            "graph memory as memacct models it, so the plan is the same without it"))
        run = run_plan(request)
    logged, planned = reading.logged, _planned(run.plan)
    draft = [Term(t, logged[t], planned[t]) for t in LOGGED_TERMS]
    terms = tuple(
        Term(t.term, t.logged, t.planned, why(t, draft, reading, run.plan) if t.differs else "")
        for t in draft
    )
    notes = list(request.notes)
    if run.error:
        notes.append(f"no plan: {run.error}")
        hint = _local_model_hint(request.model, model)
        if hint:
            notes.append(hint)
    return Explanation(reading, request, run, terms, suggestions(reading, request, run.plan),
                       tuple(notes))  # fmt: skip


def _local_model_hint(named: str | None, given: str | None) -> str:
    """Where the log names its model by a path of the machine it ran on, the Hub id to try
    (a Hub cache directory ``models--org--name`` gives it whole; else its last part)."""
    import re

    if given is not None or not named or not re.match(r"[/~.]", named):
        return ""
    cached = re.search(r"models--([^/-][^/]*?)--([^/]+)", named)
    if cached:
        return f"the log's model is a local copy of {cached.group(1)}/{cached.group(2)}: pass " \
               f"--model {cached.group(1)}/{cached.group(2)}"
    base = named.rstrip("/").rsplit("/", 1)[-1]
    return (f"the log names its model by a path on the machine it ran on ({named}): pass "
            f"--model with its Hub id (org/{base}), a config.json or a preset")
