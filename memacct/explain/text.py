"""Start-up logs as users paste them: prefixes off, wrapped lines joined, figures to bytes.

A pasted log carries whatever its source put before each message: vLLM's
``(EngineCore_DP0 pid=123) INFO 11-21 10:26:22 [kv_cache_utils.py:1234]``, a
Ray or Docker timestamp before that, SGLang's ``[2025-10-16 09:06:22 TP0]``,
indentation from a Markdown fence. :func:`clean_lines` takes those off, keeps
the rank a line came from (``TP0``, ``Worker_TP7``) and joins a line that a
terminal or an issue tracker wrapped inside a word. :class:`Figure` is one
printed number with its unit, the printed text kept so that a test can check
it to the printed precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from memacct.units import GiB, MiB

__all__ = ["Figure", "Line", "clean_lines", "figure", "to_int"]

UNITS = {"GiB": GiB, "MiB": MiB, "GB": GiB, "MB": MiB, "B": 1}
"""Bytes per printed unit. vLLM and vllm-ascend print "GB" for a value divided by 2**30
(vllm_ascend/worker/model_runner_v1.py: ``m.consumed_memory / float(2**30)`` after
"Loading model weights took %.4f GB"), and so does SGLang (python/sglang/srt/utils.py
``get_available_gpu_memory`` returns ``free / (1 << 30)``; its memory pool divides the K and
V sizes by ``GB = 1024 * 1024 * 1024``): "GB" in these logs is GiB."""

# One prefix element: a bracketed timestamp or rank tag, a process tag, a log level with
# vLLM's date and time, a source location, or a Python logging "name:" header.
_PREFIX = re.compile(
    r"""^\s*(?:
        \[\d{4}-\d\d-\d\d[ T][\d:.,]+Z?
          (?:\s+(?P<rank1>(?:DP\d+\s+|PP\d+\s+|EP\d+\s+)*TP\d+)[^\]]*)?\]
      | \((?P<proc>[\w\-]+(?:[\s,]+(?:(?:pid|rank|ip)=[\w.:\-]+|[TDPE]P\d+))*
                   |pid=\d+(?:,\s*ip=[\w.:\-]+)?)\)
      | \[rank(?P<rank3>\d+)\]:
      | \[(?P<rank2>(?:DP\d+\s+)?TP\d+)\]
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.,]+
          (?:\s+\[[^\]]+\]|\s+[\w./]+\.py:\d+\])?
      | \d{4}-\d\d-\d\d\s+[\d:,.]+\s+-\s+\w+\s+-\s+[\w./]+:\d+\s+-
      | (?:DEBUG|INFO|WARNING|WARN|ERROR)(?:\s+\[[\w./]+:\d+\])?(?=\s)
      | (?:DEBUG|INFO|WARNING|ERROR):[\w.]+:
      | \d{4}-\d\d-\d\dT[\d:.]+Z?(?=\s)
      | \d\d:\d\d:\d\d(?:[.,]\d+)?(?=\s)
      | [\w\-.]+\s+\|(?=\s)
      | \[[A-Z][A-Z0-9 _\-]*\](?=\s)
      | \$\s | >\s
    )\s*""",
    re.VERBOSE,
)
_RANK_IN_PROC = re.compile(r"(?:TP|rank)[_ =]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Line:
    """One message of the log with its prefixes taken off.

    Attributes:
        text: the message.
        number: its line number in the pasted text (1-based).
        rank: the tensor-parallel rank its prefix names (``None``: not named).
    """

    text: str
    number: int
    rank: int | None = None


def _strip(raw: str) -> tuple[str, int | None]:
    text, rank = raw, None
    for _ in range(6):  # a handful of prefixes at most: Ray, Docker, vLLM, a location
        match = _PREFIX.match(text)
        if match is None or match.end() == 0:
            break
        tag = match.group("rank1") or match.group("rank2")
        proc = match.group("proc")
        if match.group("rank3"):
            rank = int(match.group("rank3"))
        elif tag:
            rank = int(re.findall(r"TP(\d+)", tag)[0])
        elif proc and (found := _RANK_IN_PROC.search(proc)):
            rank = int(found.group(1))
        text = text[match.end():]
    return text.strip(), rank


def clean_lines(text: str) -> list[Line]:
    """The messages of a pasted log, prefixes off, each with its rank where named.

    A line that continues a word the previous line broke (no space at the break, the
    previous line not ending a sentence) is joined to it, and so is a shell command
    continued with a trailing backslash.
    """
    out: list[Line] = []
    pending_shell = False
    for number, raw in enumerate(text.splitlines(), start=1):
        message, rank = _strip(raw.rstrip("\r"))
        if pending_shell and out:
            prev = out[-1]
            out[-1] = Line(prev.text.rstrip("\\").rstrip() + " " + message, prev.number, prev.rank)
            pending_shell = message.endswith("\\")
            continue
        if out and _wrapped(out[-1].text, raw):
            prev = out[-1]
            out[-1] = Line(prev.text + message, prev.number, prev.rank)
            continue
        if message:
            out.append(Line(message, number, rank))
            pending_shell = message.endswith("\\")
    return out


def _wrapped(previous: str, raw: str) -> bool:
    """Whether ``raw`` continues ``previous`` inside a word or a ``key=value``: a tracker
    wrapped the config line (``chunk`` / ``ed_prefill_enabled=True``)."""
    if not previous or not raw or raw[0].isspace() or _PREFIX.match(raw):
        return False
    head = re.match(r"[a-z_]+[=,]|=", raw)
    return bool(head) and bool(re.search(r"[a-z_]$", previous)) and "=" in previous


def figure(value: str, unit: str) -> Figure:
    """The figure ``value`` printed in ``unit`` (``"GiB"``, ``"GB"``, ``"MiB"``, ``""``)."""
    return Figure(printed=value.replace(",", ""), unit=unit)


def to_int(value: str) -> int:
    """A printed count (``178,880``) as an int."""
    return int(value.replace(",", ""))


@dataclass(frozen=True)
class Figure:
    """A number as the log printed it.

    Attributes:
        printed: the digits as printed (``"8.11"``, ``"-0.87"``, ``"14.9888"``; commas off).
        unit: the printed unit (``"GiB"``, ``"GB"``, ``"MiB"``) or ``""`` for a count or ratio.
    """

    printed: str
    unit: str = ""

    @property
    def value(self) -> float:
        """The printed number."""
        return float(self.printed)

    @property
    def bytes(self) -> int:
        """The printed size in bytes (exact for the printed digits); a count as an int."""
        scale = UNITS.get(self.unit, 1)
        return int((Decimal(self.printed) * scale).to_integral_value())

    @property
    def decimals(self) -> int:
        """Digits printed after the point: the figure's precision."""
        return len(self.printed.partition(".")[2])

    @property
    def resolution_bytes(self) -> int:
        """Half a unit of the last printed digit, in bytes: how far the true value may lie."""
        scale = UNITS.get(self.unit, 1)
        return int(Decimal(scale) / (2 * 10**self.decimals))

    def text(self) -> str:
        """``"8.11 GiB"`` as printed (count: the digits alone)."""
        return f"{self.printed} {self.unit}".strip()
