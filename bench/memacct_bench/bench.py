"""The truth-source accuracy benchmark: simulated serving scenarios, three truth sources.

For each scenario (the shipped ``bench/memacct_bench/scenarios/*.json``, a
directory of your own, or scenarios drawn by :mod:`memacct_bench.generator`)
and each truth source — ``allocated_peak`` (what vLLM charges), ``reserved``
(what vllm-mindspore charges) and ``auto`` (memacct's fragmentation-aware
choice) — the benchmark profiles the simulated engine with memacct, plans the
KV cache, serves the scenario within the memory its utilization grants, and
compares the plan with the oracle: the largest KV cache with which the
scenario completes in that memory (:func:`memacct_bench.scenario.find_oracle`).

``memacct bench [--scenarios DIR | --generated N --seed S | --full] [--json]
[--output FILE]`` prints one table and a summary per truth source; ``--output``
also writes them as Markdown. ``--full`` (``make bench``) runs the shipped set,
the development seed and a fresh seed, each in its own section of
``docs/results.md``.

Example::

    >>> from memacct_bench.bench import load_scenarios, run_benchmark
    >>> rows = run_benchmark(load_scenarios()[:1], ["reserved"])
    >>> rows[0].truth_source
    'reserved'
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel

from memacct.checks import FROZEN
from memacct.errors import ConfigError, InvalidInputError
from memacct.io import atomic_write_text
from memacct.models import TruthSource
from memacct.units import GiB
from memacct_bench.generator import generate_scenarios
from memacct_bench.notes import PlanNotes, captured_warnings
from memacct_bench.scenario import Scenario, ScenarioOutcome, run_scenarios

__all__ = [
    "DEVELOPMENT_COUNT",
    "DEVELOPMENT_SEED",
    "FRESH_COUNT",
    "FRESH_SEED",
    "TRUTH_SOURCES",
    "BenchRow",
    "BenchSection",
    "TruthSourceSummary",
    "load_scenarios",
    "render_markdown",
    "run_benchmark",
    "run_benchmark_cli",
    "summarize",
]

TRUTH_SOURCES: tuple[str, ...] = ("allocated_peak", "reserved", "auto")
"""The truth sources compared, in table order."""
FIXED_TRUTH_SOURCES: tuple[str, ...] = ("allocated_peak", "reserved")

# The must-show margins: auto may trail the better safe fixed truth source by at most this much.
AUTO_MARGIN = 0.005
AUTO_MIN_EFFICIENCY = 0.97
AUTO_MEDIAN_EFFICIENCY = 0.99
AUTO_WITHIN_MARGIN_SHARE = 0.99

DEVELOPMENT_SEED = 0
"""The generated scenarios looked at while developing memacct (``--full``'s second section)."""
DEVELOPMENT_COUNT = 100
FRESH_SEED = 6021
"""A seed never looked at while developing: ``--full``'s third section (changed each round;
20261201 and 5150 were looked at while developing this round)."""
FRESH_COUNT = 200

_FROZEN = FROZEN


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

    @classmethod
    def from_outcome(cls, scenario: Scenario, outcome: ScenarioOutcome) -> BenchRow:
        """The row of one :class:`ScenarioOutcome`."""
        return cls(
            scenario=scenario.name,
            allocator=scenario.allocator,
            device=scenario.device_name,
            model=scenario.model_name,
            utilization=scenario.gpu_memory_utilization,
            truth_source=str(outcome.truth_source),
            resolved_truth_source=str(outcome.resolved_truth_source),
            truth_source_reason=outcome.truth_source_reason,
            planned_kv_bytes=outcome.planned_kv_bytes,
            oracle_kv_bytes=outcome.oracle_kv_bytes,
            efficiency=outcome.efficiency,
            oom=outcome.oom,
            oom_at=outcome.oom_at,
            refused=outcome.refused,
            duration_s=outcome.duration_s,
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


def load_scenarios(directory: str | os.PathLike[str] | None = None) -> list[Scenario]:
    """Every ``*.json`` scenario of ``directory`` (default: the shipped set), sorted by file name.

    Raises:
        ConfigError: the directory is missing or holds no scenario, or a file is invalid.
    """
    if directory is None:
        folder = resources.files("memacct_bench").joinpath("scenarios")
        entries = sorted(
            (e for e in folder.iterdir() if e.name.endswith(".json")), key=lambda e: e.name
        )
        return [
            Scenario.from_dict(
                json.loads(e.read_text(encoding="utf-8")), source=f"scenario {e.name}"
            )
            for e in entries
        ]
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(f"scenario directory {str(path)!r} does not exist or is not a directory")
    files = sorted(path.glob("*.json"))
    if not files:
        raise ConfigError(f"scenario directory {str(path)!r} holds no *.json scenario")
    return [Scenario.load(f) for f in files]


def _run_one(args: tuple[Scenario, tuple[str, ...]]) -> tuple[list[BenchRow], list[str]]:
    scenario, sources = args
    # The planner's warnings come back with the rows, so a run prints each kind once.
    with captured_warnings() as warnings:
        rows = [BenchRow.from_outcome(scenario, o) for o in run_scenarios(scenario, sources)]
    return rows, list(warnings)


def run_benchmark(
    scenarios: Sequence[Scenario],
    truth_sources: Sequence[str | TruthSource] = TRUTH_SOURCES,
    *,
    jobs: int = 1,
    on_rows: Callable[[list[BenchRow]], None] | None = None,
    notes: PlanNotes | None = None,
) -> list[BenchRow]:
    """Run every truth source on every scenario; one row per (scenario, source), in input order.

    Args:
        scenarios: the scenarios.
        truth_sources: the truth sources to compare.
        jobs: worker processes (scenarios are independent; each is deterministic).
        on_rows: called with each scenario's rows as it finishes (progress).
        notes: collects the planner's warnings for the caller to print once per run;
            ``None``: each kind is printed once on stderr when this call ends.
    """
    names = tuple(str(TruthSource.parse(p)) for p in truth_sources)
    work = [(s, names) for s in scenarios]
    out: list[BenchRow] = []
    collected = PlanNotes() if notes is None else notes
    if jobs <= 1 or len(work) <= 1:
        results: Iterable[tuple[list[BenchRow], list[str]]] = map(_run_one, work)
        pool = None
    else:
        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(_run_one, work, chunksize=4)
    try:
        for rows, warnings in results:
            out.extend(rows)
            collected.add(warnings)
            if on_rows is not None:
                on_rows(rows)
    finally:
        if pool is not None:
            pool.shutdown()
    if notes is None:
        collected.emit()
    return out


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
    """The targets of issue 12 and whether this set meets each."""
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
            f"auto: at least the best fixed truth source without OOM minus {AUTO_MARGIN} on "
            f">= {AUTO_WITHIN_MARGIN_SHARE:.0%} of scenarios ({auto.within_margin_share:.1%}; "
            f"{len(auto.behind_best_safe)} behind)",
            auto.within_margin_share >= AUTO_WITHIN_MARGIN_SHARE,
        ),
        (
            f"auto: >= {AUTO_MIN_EFFICIENCY} wherever a fixed truth source reaches it without "
            f"OOM ({len(auto.below_reachable)} below)",
            not auto.below_reachable,
        ),
    ]


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
                f"{oom} | {r.resolved_truth_source} |"
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


def _print_table(sections: Sequence[BenchSection], duration_s: float) -> None:
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


def _sets(
    scenarios_dir: str | None, generated: int | None, seed: int, full: bool
) -> list[tuple[str, str, list[Scenario], bool]]:
    if full:
        return [
            ("Shipped scenarios", "The scenarios shipped in `bench/memacct_bench/scenarios/` "
             "(utilization 1.0, the physical limit).", load_scenarios(), True),
            (f"Development seed ({DEVELOPMENT_COUNT} generated, seed {DEVELOPMENT_SEED})",
             f"`memacct bench --generated {DEVELOPMENT_COUNT} --seed {DEVELOPMENT_SEED}`: the "
             "generated scenarios looked at while developing memacct (families, allocators, "
             "co-tenants, mixes and utilizations in [results.md's generator]"
             "(../bench/memacct_bench/generator.py)). Listed: auto's misses only.",
             generate_scenarios(DEVELOPMENT_COUNT, DEVELOPMENT_SEED), False),
            (f"Fresh seed ({FRESH_COUNT} generated, seed {FRESH_SEED})",
             f"`memacct bench --generated {FRESH_COUNT} --seed {FRESH_SEED}`: a seed never "
             "looked at while developing. Listed: auto's misses only.",
             generate_scenarios(FRESH_COUNT, FRESH_SEED), False),
        ]
    if generated is not None:
        if scenarios_dir is not None:
            raise InvalidInputError("give --scenarios or --generated, not both")
        return [(f"{generated} generated scenarios, seed {seed}",
                 f"`memacct bench --generated {generated} --seed {seed}`.",
                 generate_scenarios(generated, seed), generated <= 60)]
    title = "Shipped scenarios" if scenarios_dir is None else f"Scenarios of {scenarios_dir}"
    return [(title, "", load_scenarios(scenarios_dir), True)]


def run_benchmark_cli(
    scenarios_dir: str | None,
    *,
    as_json: bool,
    output: str | None,
    progress: bool,
    generated: int | None = None,
    seed: int = 0,
    full: bool = False,
    jobs: int | None = None,
) -> None:
    """``memacct bench``: run the benchmark, print the table (or JSON), optionally write Markdown.

    Args:
        scenarios_dir: a directory of scenario JSON files; ``None``: the shipped set.
        as_json: print ``{"rows": [...], "summary": [...], "duration_s": ...}`` instead.
        output: also write the Markdown report to this file.
        progress: show a progress bar on stderr (for a terminal).
        generated: run this many generated scenarios of ``seed`` instead.
        seed: the generator's seed.
        full: the shipped set, the development seed and a fresh seed (``make bench``).
        jobs: worker processes; default: every CPU core.
    """
    if generated is not None and generated < 1:
        raise InvalidInputError(f"--generated must be at least 1, got {generated}")
    sets = _sets(scenarios_dir, generated, seed, full)
    start = time.perf_counter()
    workers = jobs or os.cpu_count() or 1
    sections: list[BenchSection] = []
    total = sum(len(s[2]) for s in sets)
    report: Callable[[list[BenchRow]], None] | None = None
    bar: Any = None
    if progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        )
        bar.start()
        task = bar.add_task("scenarios", total=total)

        def report(rows: list[BenchRow]) -> None:
            name = rows[0].scenario if rows else ""
            bar.update(task, advance=1, description=f"scenarios ({name})")

    notes = PlanNotes()
    try:
        for title, intro, scenarios, every_row in sets:
            rows = run_benchmark(
                scenarios, TRUTH_SOURCES, jobs=max(1, min(workers, len(scenarios))),
                on_rows=report, notes=notes,
            )
            sections.append(BenchSection(title, intro, rows, every_row))
    finally:
        if bar is not None:
            bar.stop()
        notes.emit()
    duration = time.perf_counter() - start
    if output is not None:
        path = Path(output)
        if full and path.name == "results.md":
            command = "make bench"
        else:
            command = "memacct bench" + (" --full" if full else "") + (
                f" --generated {generated} --seed {seed}" if generated is not None else ""
            ) + f" --output {output}"
        atomic_write_text(path, render_markdown(sections, duration, command), "benchmark report")
    if as_json:
        data: dict[str, Any] = {
            "rows": [r.model_dump() for s in sections for r in s.rows],
            "summary": [x.model_dump() for s in sections for x in summarize(s.rows)],
            "duration_s": duration,
        }
        print(json.dumps(data, indent=2))
        return
    _print_table(sections, duration)
    if output is not None:
        print(f"written to {output}")


@click.command("bench")
@click.option(
    "--scenarios",
    "scenarios_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of scenario JSON files (default: the shipped set).",
)
@click.option("--generated", type=int, default=None,
              help="Run this many generated scenarios instead (see --seed).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the generated scenarios.")
@click.option("--full", is_flag=True,
              help="The shipped set, the development seed and a fresh seed (make bench).")
@click.option("--jobs", type=int, default=None, help="Worker processes (default: CPU cores).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the Markdown report to this file.",
)
def bench_command(
    scenarios_dir: str | None,
    generated: int | None,
    seed: int,
    full: bool,
    jobs: int | None,
    as_json: bool,
    output: str | None,
) -> None:
    """Run the truth-source accuracy benchmark on simulated serving scenarios."""
    run_benchmark_cli(
        scenarios_dir, as_json=as_json, output=output,
        progress=not as_json and sys.stderr.isatty(), generated=generated, seed=seed,
        full=full, jobs=jobs,
    )
