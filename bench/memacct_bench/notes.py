"""The planner's warnings over a benchmark run: each kind printed once, not once per plan.

A benchmark plans hundreds of KV caches; the planner logs the same warning for
many of them (the allocator's pool budget that binds before
``gpu_memory_utilization``, with that plan's figures). Each plan keeps its own
note in ``KVCachePlan.notes``; on stderr a run says each kind once, with how
many plans carried it. :func:`captured_warnings` collects the warnings of logger
``memacct`` in whichever process plans (the benchmark's workers included);
:class:`PlanNotes` keeps them for the run and :meth:`PlanNotes.emit` prints them.

Example::

    >>> notes = PlanNotes()
    >>> notes.add(["a budget of 1.00GiB (dev-1) binds", "a budget of 2.00GiB (dev-2) binds"])
    >>> notes.lines()
    ['a budget of 1.00GiB (dev-1) binds (and on 1 more plan, each with its figures in its notes)']
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["PlanNotes", "captured_warnings", "note_kind"]

_LOGGER = "memacct"
_PARENTHESES = re.compile(r"\([^()]*\)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def note_kind(message: str) -> str:
    """What makes two warnings the same note: the text without its figures and asides."""
    previous = None
    while previous != message:  # nested parentheses, innermost first
        previous, message = message, _PARENTHESES.sub("", message)
    return " ".join(_NUMBER.sub("#", message).split())


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def captured_warnings() -> Iterator[list[str]]:
    """Collect the warnings logger ``memacct`` logs inside the block instead of printing them.

    Yields the list the messages are appended to, in order.
    """
    logger = logging.getLogger(_LOGGER)
    handler = _ListHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class PlanNotes:
    """The warnings of one run: the first of each kind (:func:`note_kind`) and how often."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def add(self, messages: Iterable[str]) -> None:
        """Record warnings, in the order they were logged."""
        for message in messages:
            kind = note_kind(message)
            self._first.setdefault(kind, message)
            self._count[kind] = self._count.get(kind, 0) + 1

    def lines(self) -> list[str]:
        """One line per kind of warning, in the order each kind first came."""
        out = []
        for kind, message in self._first.items():
            more = self._count[kind] - 1
            plans = "plan" if more == 1 else "plans"
            tail = f" (and on {more} more {plans}, each with its figures in its notes)"
            out.append(message + tail if more else message)
        return out

    def emit(self, stream: TextIO | None = None) -> None:
        """Print :meth:`lines` on ``stream`` (default stderr) and forget them."""
        target = sys.stderr if stream is None else stream
        for line in self.lines():
            print(line, file=target, flush=True)
        self._first.clear()
        self._count.clear()
