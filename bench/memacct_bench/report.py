"""The benchmark's results: rows, the summary per truth source, the targets, the report.

A :class:`BenchRow` is one scenario under one truth source; :func:`summarize`
gives each truth source's OOMs and efficiencies over a set, :func:`checks` the
targets ``auto`` is held to, and :func:`render_markdown` (``docs/results.md``)
and the console table show them. :mod:`memacct_bench.bench` runs the scenarios.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from memacct.checks import FROZEN
from memacct.units import GiB
from memacct_bench.scenario import Scenario, ScenarioOutcome

__all__ = [
    "AUTO_MARGIN",
    "AUTO_MEDIAN_EFFICIENCY",
    "AUTO_MIN_EFFICIENCY",
    "FIXED_TRUTH_SOURCES",
    "TRUTH_SOURCES",
    "BenchRow",
    "BenchSection",
    "TruthSourceSummary",
    "best_safe_fixed",
    "checks",
    "print_table",
    "render_markdown",
    "summarize",
]

TRUTH_SOURCES: tuple[str, ...] = ("allocated_peak", "reserved", "auto")
"""The truth sources compared, in table order."""
FIXED_TRUTH_SOURCES: tuple[str, ...] = ("allocated_peak", "reserved")

# The must-show margins: auto may trail the better safe fixed truth source by at most this much.
AUTO_MARGIN = 0.005
AUTO_MIN_EFFICIENCY = 0.97
AUTO_MEDIAN_EFFICIENCY = 0.995

_FROZEN = FROZEN


_FROM_OUTCOME = {"truth_source_reason", "planned_kv_bytes", "oracle_kv_bytes", "efficiency",
                 "oom", "oom_at", "refused", "duration_s",
                 "fragmentation_allowance"}  # fmt: skip
"""The fields of a :class:`ScenarioOutcome` a :class:`BenchRow` carries under the same names."""


class BenchRow(BaseModel):
    """One scenario under one truth source.

    Attributes:
        scenario: scenario name.
        allocator: allocator preset.
        device: device name.
        model: model name.
        utilization: the scenario's ``gpu_memory_utilization``.
        truth_source: the truth source asked for.
        resolved_truth_source: what the profile resolved it to.
        truth_source_reason: the profile's reason.
        planned_kv_bytes: whole blocks the plan allocated, bytes.
        oracle_kv_bytes: the oracle's whole blocks, bytes.
        efficiency: ``planned / oracle``.
        oom: whether allocating the plan or serving ran out of memory.
        oom_at: where.
        refused: the planner's refusal (0 blocks planned), if it refused.
        duration_s: wall time of this row (the oracle search shared between truth sources).
        fragmentation_allowance: what ``auto`` kept free beyond the resolved source's peak
            (its margin below that source; 0 for a fixed source).
    """

    model_config = _FROZEN

    scenario: str
    allocator: str
    device: str
    model: str
    utilization: float = 1.0
    truth_source: str
    resolved_truth_source: str
    truth_source_reason: str
    planned_kv_bytes: int
    oracle_kv_bytes: int
    efficiency: float
    oom: bool
    oom_at: str | None = None
    refused: str | None = None
    duration_s: float = 0.0
    fragmentation_allowance: int = 0

    @property
    def resolved_as(self) -> str:
        """The resolved source, with the allowance ``auto`` charged on top where it did."""
        if not self.fragmentation_allowance:
            return self.resolved_truth_source
        return f"{self.resolved_truth_source} + {_gib(self.fragmentation_allowance)} GiB allowance"

    @classmethod
    def from_outcome(cls, scenario: Scenario, outcome: ScenarioOutcome) -> BenchRow:
        # The row keeps these fields of the outcome as they are (the truth sources as text).
        """The row of one :class:`ScenarioOutcome`."""
        return cls(
            scenario=scenario.name,
            allocator=scenario.allocator,
            device=scenario.device_name,
            model=scenario.model_name,
            utilization=scenario.gpu_memory_utilization,
            truth_source=str(outcome.truth_source),
            resolved_truth_source=str(outcome.resolved_truth_source),
            **outcome.model_dump(include=_FROM_OUTCOME),
        )


class TruthSourceSummary(BaseModel):
    """One truth source over every scenario of a set.

    Attributes:
        truth_source: the truth source.
        scenarios: scenarios run.
        ooms: scenarios where the plan ran out of memory.
        efficiency_min: lowest efficiency (every scenario, OOM or not).
        efficiency_median: median efficiency.
        safe_efficiency_min: lowest efficiency among scenarios without OOM
            (``None`` if every one ran out of memory).
        behind_best_safe: scenarios where this truth source trails the better
            fixed truth source that did not run out of memory by more than
            :data:`AUTO_MARGIN` (auto only).
        within_margin_share: share of scenarios where it does not (auto only).
        below_reachable: scenarios where it stays below :data:`AUTO_MIN_EFFICIENCY`
            although a fixed truth source reaches it without OOM (auto only).
    """

    model_config = _FROZEN

    truth_source: str
    scenarios: int
    ooms: int
    efficiency_min: float
    efficiency_median: float
    safe_efficiency_min: float | None
    behind_best_safe: tuple[str, ...] = ()
    within_margin_share: float = 1.0
    below_reachable: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchSection:
    """One set of scenarios in the report.

    Attributes:
        title: the section's heading.
        intro: one paragraph on what the set is.
        rows: its rows.
        every_row: list every scenario (the shipped set) or only auto's misses.
    """

    title: str
    intro: str
    rows: Sequence[BenchRow]
    every_row: bool = True



def _by_scenario(rows: Iterable[BenchRow]) -> dict[str, dict[str, BenchRow]]:
    table: dict[str, dict[str, BenchRow]] = {}
    for row in rows:
        table.setdefault(row.scenario, {})[row.truth_source] = row
    return table


def best_safe_fixed(cells: dict[str, BenchRow]) -> float | None:
    """Efficiency of the better fixed truth source that did not run out of memory, or ``None``."""
    safe = [
        cells[p].efficiency for p in FIXED_TRUTH_SOURCES if p in cells and not cells[p].oom
    ]
    return max(safe) if safe else None


def summarize(rows: Sequence[BenchRow]) -> list[TruthSourceSummary]:
    """One summary per truth source, in the order they first appear."""
    table = _by_scenario(rows)
    sources = list(dict.fromkeys(r.truth_source for r in rows))
    out = []
    for source in sources:
        mine = [r for r in rows if r.truth_source == source]
        effs = [r.efficiency for r in mine]
        safe = [r.efficiency for r in mine if not r.oom]
        behind: list[str] = []
        unreached: list[str] = []
        if source == "auto":
            for name, cells in table.items():
                best = best_safe_fixed(cells)
                if best is None or "auto" not in cells:
                    continue
                auto = cells["auto"]
                if auto.oom or auto.efficiency < best - AUTO_MARGIN:
                    behind.append(name)
                if best >= AUTO_MIN_EFFICIENCY and (
                    auto.oom or auto.efficiency < AUTO_MIN_EFFICIENCY
                ):
                    unreached.append(name)
        out.append(
            TruthSourceSummary(
                truth_source=source,
                scenarios=len(mine),
                ooms=sum(r.oom for r in mine),
                efficiency_min=min(effs),
                efficiency_median=statistics.median(effs),
                safe_efficiency_min=min(safe) if safe else None,
                behind_best_safe=tuple(behind),
                within_margin_share=1 - len(behind) / len(mine) if mine else 1.0,
                below_reachable=tuple(unreached),
            )
        )
    return out


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"


def checks(
    rows: Sequence[BenchRow], summaries: Sequence[TruthSourceSummary]
) -> list[tuple[str, bool]]:
    """The targets (issue 23's restatement) and whether this set meets each.

    The share of scenarios where auto is within :data:`AUTO_MARGIN` of the best safe fixed
    truth source is a figure, not a target (:func:`margin_figure`): a truth source that does
    not see the serving mix cannot reach the best safe fixed one everywhere (the twin
    scenarios with one profile and two safe limits show it).
    """
    auto = next((s for s in summaries if s.truth_source == "auto"), None)
    if auto is None:
        return []
    return [
        (f"auto: zero OOMs ({auto.ooms} OOMs)", auto.ooms == 0),
        (
            f"auto: median efficiency >= {AUTO_MEDIAN_EFFICIENCY} (median "
            f"{auto.efficiency_median:.4f})",
            auto.efficiency_median >= AUTO_MEDIAN_EFFICIENCY,
        ),
        (
            f"auto: >= {AUTO_MIN_EFFICIENCY} wherever a fixed truth source reaches it without "
            f"OOM ({len(auto.below_reachable)} below)",
            not auto.below_reachable,
        ),
    ]


def margin_figure(summaries: Sequence[TruthSourceSummary]) -> str | None:
    """The share of scenarios where auto is within :data:`AUTO_MARGIN` of the best safe
    fixed truth source, as a sentence (a figure, not a target)."""
    auto = next((s for s in summaries if s.truth_source == "auto"), None)
    if auto is None:
        return None
    return (
        f"Figure: auto is within {AUTO_MARGIN} of the best fixed truth source without OOM on "
        f"{auto.within_margin_share:.1%} of scenarios ({len(auto.behind_best_safe)} behind)."
    )


_INTRO = (
    "Each truth source profiles the simulated engine with memacct, plans the KV cache, "
    "allocates it as vLLM lays it out (a tensor per layer; a hybrid shares one per layer of "
    "its widest group) and serves the scenario, held to the memory its "
    "`gpu_memory_utilization` grants (total x utilization; co-tenants hold their own memory "
    "outside it). The oracle is the largest KV cache (whole blocks) with which the scenario "
    "completes in that same memory, found by binary search over full replays (every count "
    "tried on tiny devices). Efficiency = planned / oracle KV bytes; a plan that runs out of "
    "memory is an OOM whatever its efficiency. `allocated_peak` is what vLLM charges, "
    "`reserved` what vllm-mindspore charges, `auto` memacct's fragmentation-aware choice "
    "(see [backends.md](backends.md#truth-sources)); the workload is described in "
    "[workload.md](workload.md)."
)


def _section_lines(section: BenchSection, level: str = "##") -> list[str]:
    rows = section.rows
    summaries = summarize(rows)
    lines = [
        f"{level} {section.title}",
        "",
        section.intro,
        "",
        "| truth source | scenarios | OOM | efficiency min | efficiency median | min without OOM |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        safe = "-" if s.safe_efficiency_min is None else f"{s.safe_efficiency_min:.4f}"
        lines.append(
            f"| {s.truth_source} | {s.scenarios} | {s.ooms} | {s.efficiency_min:.4f} | "
            f"{s.efficiency_median:.4f} | {safe} |"
        )
    found = checks(rows, summaries)
    if found:
        lines += ["", "Targets:", ""]
        lines += [f"- [{'x' if ok else ' '}] {text}" for text, ok in found]
        figure = margin_figure(summaries)
        if figure is not None:
            lines += ["", figure]
    table = _by_scenario(rows)
    listed = (
        rows
        if section.every_row
        else [
            r
            for r in rows
            if r.scenario in {n for s in summaries for n in s.behind_best_safe}
            or (r.truth_source == "auto" and r.oom)
        ]
    )
    if listed:
        lines += [
            "",
            "| scenario | u | truth source | planned GiB | oracle GiB | efficiency | OOM | "
            "resolved as |",
            "|---|---:|---|---:|---:|---:|---|---|",
        ]
        for r in listed:
            oom = (
                f"**OOM** ({r.oom_at})" if r.oom else ("no (refused)" if r.refused else "no")
            )
            lines.append(
                f"| {r.scenario} | {r.utilization:.4g} | {r.truth_source} | "
                f"{_gib(r.planned_kv_bytes)} | {_gib(r.oracle_kv_bytes)} | {r.efficiency:.4f} | "
                f"{oom} | {r.resolved_as} |"
            )
    if not section.every_row and not listed:
        lines += ["", "auto is within the margin of the best safe fixed truth source everywhere."]
    missed = [
        r
        for r in rows
        if r.truth_source == "auto" and not r.oom and r.efficiency < AUTO_MIN_EFFICIENCY
    ]
    if missed and section.every_row:
        lines += ["", f"Where auto stays below {AUTO_MIN_EFFICIENCY}:", ""]
        for r in missed:
            best = best_safe_fixed(table[r.scenario])
            best_text = "none ran without OOM" if best is None else f"{best:.4f}"
            lines.append(
                f"- **{r.scenario}**: auto plans {_gib(r.planned_kv_bytes)} GiB, the oracle "
                f"{_gib(r.oracle_kv_bytes)} GiB ({r.efficiency:.4f}); better fixed truth source "
                f"without OOM: {best_text}"
            )
    return lines


def render_markdown(
    rows: Sequence[BenchRow] | Sequence[BenchSection],
    duration_s: float,
    command: str = "make bench",
) -> str:
    """The benchmark as Markdown: per set, the summary, the targets and the rows."""
    sections = [r for r in rows if isinstance(r, BenchSection)]
    if not sections:
        plain = [r for r in rows if isinstance(r, BenchRow)]
        count = len({r.scenario for r in plain})
        sections = [BenchSection("Summary per truth source", f"{count} scenarios.", plain)]
    lines = [
        "# Truth-source accuracy benchmark",
        "",
        f"Generated by `{command}`; do not edit.",
        "",
        _INTRO,
        "",
        f"Full run: {duration_s:.0f} s on {os.cpu_count()} CPU cores "
        f"({platform.python_implementation()} {platform.python_version()}), command `{command}`.",
        "",
    ]
    for section in sections:
        lines += _section_lines(section)
        lines.append("")
    auto_rows = [r for s in sections if s.every_row for r in s.rows if r.truth_source == "auto"]
    if auto_rows:
        lines += ["## Why auto decided as it did", ""]
        lines += [f"- **{r.scenario}**: {r.truth_source_reason}" for r in auto_rows]
    return "\n".join(lines).rstrip("\n") + "\n"


def print_table(sections: Sequence[BenchSection], duration_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    # A pipe gets wide lines rather than a table folded into 80 columns (as the CLI does).
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    for section in sections:
        rows = section.rows
        if section.every_row:
            table = Table(title=f"{section.title}: memacct truth-source benchmark")
            for col in ("scenario", "u", "truth source", "planned GiB", "oracle GiB",
                        "efficiency", "OOM"):
                table.add_column(col, justify="left" if col in {"scenario", "truth source",
                                                                "OOM"} else "right")
            previous = None
            for r in rows:
                if previous is not None and r.scenario != previous:
                    table.add_section()
                previous = r.scenario
                table.add_row(
                    r.scenario, f"{r.utilization:.4g}", r.truth_source,
                    _gib(r.planned_kv_bytes), _gib(r.oracle_kv_bytes), f"{r.efficiency:.4f}",
                    f"[red]OOM[/red] ({r.oom_at})" if r.oom else "no",
                )
            console.print(table)
        summary = Table(title=f"{section.title}: summary per truth source")
        for col in ("truth source", "scenarios", "OOM", "eff. min", "eff. median",
                    "min without OOM"):
            summary.add_column(col, justify="left" if col == "truth source" else "right")
        summaries = summarize(rows)
        for s in summaries:
            safe = "-" if s.safe_efficiency_min is None else f"{s.safe_efficiency_min:.4f}"
            summary.add_row(s.truth_source, str(s.scenarios), str(s.ooms),
                            f"{s.efficiency_min:.4f}", f"{s.efficiency_median:.4f}", safe)
        console.print(summary)
        for text, ok in checks(rows, summaries):
            console.print(f"{'[green]met[/green]' if ok else '[red]NOT met[/red]'}  {text}")
    total = sum(len({r.scenario for r in s.rows}) for s in sections)
    console.print(f"{total} scenarios in {duration_s:.1f} s")

