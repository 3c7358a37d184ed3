"""``memacct explain``: read an engine's start-up log and set memacct's plan of it beside it.

:func:`read_log` reads the engine, its release, the settings and every memory
figure of a log as users paste it; :func:`explain` plans the same start-up
offline (:func:`memacct.planner.offline.plan_offline`, the function ``memacct
plan`` runs) and sets each term logged beside planned, with why they differ and
what to change. This package sits above the planner: nothing but the command
line imports it.
"""

from __future__ import annotations

from memacct.explain.reading import LOGGED_TERMS, LogReading, NoMemoryLinesError, read_log
from memacct.explain.terms import Explanation, explain

__all__ = ["LOGGED_TERMS", "Explanation", "LogReading", "NoMemoryLinesError", "explain", "read_log"]
