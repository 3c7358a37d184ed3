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
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import click

from memacct.errors import ConfigError, InvalidInputError
from memacct.io import atomic_write_text
from memacct.models import TruthSource
from memacct_bench.generator import generate_scenarios
from memacct_bench.notes import PlanNotes, captured_warnings
from memacct_bench.report import (
    TRUTH_SOURCES,
    BenchRow,
    BenchSection,
    TruthSourceSummary,
    print_table,
    render_markdown,
    summarize,
)
from memacct_bench.scenario import Scenario, run_scenarios

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

DEVELOPMENT_SEED = 0
"""The generated scenarios looked at while developing memacct (``--full``'s second section)."""
DEVELOPMENT_COUNT = 100
FRESH_SEED = 6021
"""A seed never looked at while developing: ``--full``'s third section (changed each round;
20261201 and 5150 were looked at while developing this round)."""
FRESH_COUNT = 200


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
    print_table(sections, duration)
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
