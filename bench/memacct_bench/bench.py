"""The truth-source accuracy benchmark: simulated serving scenarios, three policies, one oracle.

For each scenario (shipped in ``bench/memacct_bench/scenarios/*.json``, or a
directory of your own) and each policy — ``allocated_peak`` (what vLLM
charges), ``reserved`` (what vllm-mindspore charges) and ``auto`` (memacct's
fragmentation-aware choice) — the benchmark profiles the simulated engine with
memacct, plans the KV cache, serves the scenario, and compares the plan with
the oracle: the largest KV cache with which the scenario completes
(:func:`memacct_bench.scenario.find_oracle`).

``memacct bench [--scenarios DIR] [--json] [--output FILE]`` prints one table
(scenario, policy, planned GiB, oracle GiB, efficiency, OOM) and a summary per
policy; ``--output`` also writes them as Markdown (``docs/results.md``).

Example::

    >>> from memacct_bench.bench import load_scenarios, run_benchmark
    >>> rows = run_benchmark(load_scenarios()[:1], ["reserved"])
    >>> rows[0].policy
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
from importlib import resources
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, ConfigDict

from memacct.errors import ConfigError
from memacct.io import atomic_write_text
from memacct.models import TruthSource
from memacct.units import GiB
from memacct_bench.scenario import Scenario, ScenarioOutcome, run_scenarios

__all__ = [
    "POLICIES",
    "BenchRow",
    "PolicySummary",
    "load_scenarios",
    "render_markdown",
    "run_benchmark",
    "run_benchmark_cli",
    "summarize",
]

POLICIES: tuple[str, ...] = ("allocated_peak", "reserved", "auto")
"""The policies compared, in table order."""

# The must-show margins: auto may trail the better safe fixed policy by at most this much.
AUTO_MARGIN = 0.005
AUTO_MIN_EFFICIENCY = 0.97
AUTO_MEDIAN_EFFICIENCY = 0.99

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class BenchRow(BaseModel):
    """One scenario under one policy.

    Attributes:
        scenario: scenario name.
        allocator: allocator preset.
        device: device name.
        model: model name.
        policy: the truth source asked for.
        resolved_truth_source: what the profile resolved it to.
        truth_source_reason: the profile's reason.
        planned_kv_bytes: whole blocks the plan allocated, bytes.
        oracle_kv_bytes: the oracle's whole blocks, bytes.
        efficiency: ``planned / oracle``.
        oom: whether allocating the plan or serving ran out of memory.
        oom_at: where.
        refused: the planner's refusal (0 blocks planned), if it refused.
        duration_s: wall time of this row (the oracle search shared between policies).
    """

    model_config = _FROZEN

    scenario: str
    allocator: str
    device: str
    model: str
    policy: str
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
            policy=str(outcome.truth_source),
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


class PolicySummary(BaseModel):
    """One policy over every scenario.

    Attributes:
        policy: the truth source.
        scenarios: scenarios run.
        ooms: scenarios where the plan ran out of memory.
        efficiency_min: lowest efficiency (every scenario, OOM or not).
        efficiency_median: median efficiency.
        safe_efficiency_min: lowest efficiency among scenarios without OOM
            (``None`` if every one ran out of memory).
        behind_best_safe: scenarios where this policy trails the better fixed
            policy that did not run out of memory by more than 0.005 (auto only).
    """

    model_config = _FROZEN

    policy: str
    scenarios: int
    ooms: int
    efficiency_min: float
    efficiency_median: float
    safe_efficiency_min: float | None
    behind_best_safe: tuple[str, ...] = ()


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


def _run_one(args: tuple[Scenario, tuple[str, ...]]) -> list[BenchRow]:
    scenario, policies = args
    return [BenchRow.from_outcome(scenario, o) for o in run_scenarios(scenario, policies)]


def run_benchmark(
    scenarios: Sequence[Scenario],
    policies: Sequence[str | TruthSource] = POLICIES,
    *,
    jobs: int = 1,
    on_rows: Callable[[list[BenchRow]], None] | None = None,
) -> list[BenchRow]:
    """Run every policy on every scenario; one row per (scenario, policy), in input order.

    Args:
        scenarios: the scenarios.
        policies: the truth sources to compare.
        jobs: worker processes (scenarios are independent; each is deterministic).
        on_rows: called with each scenario's rows as it finishes (progress).
    """
    names = tuple(str(TruthSource.parse(p)) for p in policies)
    work = [(s, names) for s in scenarios]
    out: list[BenchRow] = []
    if jobs <= 1 or len(work) <= 1:
        for item in work:
            rows = _run_one(item)
            out.extend(rows)
            if on_rows is not None:
                on_rows(rows)
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for rows in pool.map(_run_one, work):
            out.extend(rows)
            if on_rows is not None:
                on_rows(rows)
    return out


def _by_scenario(rows: Iterable[BenchRow]) -> dict[str, dict[str, BenchRow]]:
    table: dict[str, dict[str, BenchRow]] = {}
    for row in rows:
        table.setdefault(row.scenario, {})[row.policy] = row
    return table


def best_safe_fixed(policies: dict[str, BenchRow]) -> float | None:
    """Efficiency of the better fixed policy that did not run out of memory, or ``None``."""
    safe = [
        policies[p].efficiency
        for p in ("allocated_peak", "reserved")
        if p in policies and not policies[p].oom
    ]
    return max(safe) if safe else None


def summarize(rows: Sequence[BenchRow]) -> list[PolicySummary]:
    """One summary per policy, in the order the policies first appear."""
    table = _by_scenario(rows)
    policies = list(dict.fromkeys(r.policy for r in rows))
    out = []
    for policy in policies:
        mine = [r for r in rows if r.policy == policy]
        effs = [r.efficiency for r in mine]
        safe = [r.efficiency for r in mine if not r.oom]
        behind: list[str] = []
        if policy == "auto":
            for name, cells in table.items():
                best = best_safe_fixed(cells)
                if (
                    best is not None
                    and "auto" in cells
                    and cells["auto"].efficiency < best - AUTO_MARGIN
                ):
                    behind.append(name)
        out.append(
            PolicySummary(
                policy=policy,
                scenarios=len(mine),
                ooms=sum(r.oom for r in mine),
                efficiency_min=min(effs),
                efficiency_median=statistics.median(effs),
                safe_efficiency_min=min(safe) if safe else None,
                behind_best_safe=tuple(behind),
            )
        )
    return out


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"


def _checks(rows: Sequence[BenchRow], summaries: Sequence[PolicySummary]) -> list[tuple[str, bool]]:
    """The must-show targets and whether this run meets each."""
    auto = next((s for s in summaries if s.policy == "auto"), None)
    if auto is None:
        return []
    alloc_ooms = sorted({r.allocator for r in rows if r.policy == "allocated_peak" and r.oom})
    return [
        (f"auto: zero OOMs ({auto.ooms} OOMs)", auto.ooms == 0),
        (
            f"auto: efficiency >= {AUTO_MIN_EFFICIENCY} on every scenario (min "
            f"{auto.efficiency_min:.4f})",
            auto.efficiency_min >= AUTO_MIN_EFFICIENCY,
        ),
        (
            f"auto: median efficiency >= {AUTO_MEDIAN_EFFICIENCY} (median "
            f"{auto.efficiency_median:.4f})",
            auto.efficiency_median >= AUTO_MEDIAN_EFFICIENCY,
        ),
        (
            f"auto: at least the better fixed policy without OOM minus {AUTO_MARGIN} on every "
            f"scenario ({len(auto.behind_best_safe)} behind"
            + (f": {', '.join(auto.behind_best_safe)}" if auto.behind_best_safe else "")
            + ")",
            not auto.behind_best_safe,
        ),
        (
            f"allocated_peak runs out of memory on mindspore (OOM on: "
            f"{', '.join(alloc_ooms) or 'none'})",
            "mindspore" in alloc_ooms,
        ),
    ]


def render_markdown(
    rows: Sequence[BenchRow], duration_s: float, command: str = "make bench"
) -> str:
    """The benchmark as Markdown: the table, the summary per policy and the targets."""
    summaries = summarize(rows)
    scenarios = len({r.scenario for r in rows})
    lines = [
        "# Truth-source accuracy benchmark",
        "",
        "Generated by `memacct bench --output docs/results.md` (run by `make bench`); do not edit.",
        "",
        f"{scenarios} simulated serving scenarios at `gpu_memory_utilization` 1.0, the "
        "physical limit. Each policy profiles the simulated engine with memacct, plans the "
        "KV cache, allocates it one tensor per layer and serves the scenario. The oracle is the "
        "largest KV cache (whole blocks) with which the scenario completes, found by binary "
        "search over full replays (every count tried on tiny devices). Efficiency = planned / "
        "oracle KV bytes; a plan that runs out of memory is an OOM whatever its efficiency. "
        "`allocated_peak` is what vLLM charges, "
        "`reserved` what vllm-mindspore charges, `auto` memacct's fragmentation-aware choice "
        "(see [backends.md](backends.md#truth-sources)); the workload is described in "
        "[workload.md](workload.md).",
        "",
        f"Full run: {duration_s:.0f} s on {os.cpu_count()} CPU cores "
        f"({platform.python_implementation()} {platform.python_version()}), command `{command}`.",
        "",
        "## Summary per policy",
        "",
        "| policy | scenarios | OOM | efficiency min | efficiency median | min without OOM |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        safe = "-" if s.safe_efficiency_min is None else f"{s.safe_efficiency_min:.4f}"
        lines.append(
            f"| {s.policy} | {s.scenarios} | {s.ooms} | {s.efficiency_min:.4f} | "
            f"{s.efficiency_median:.4f} | {safe} |"
        )
    checks = _checks(rows, summaries)
    if checks:
        lines += ["", "## Targets", ""]
        lines += [f"- [{'x' if ok else ' '}] {text}" for text, ok in checks]
    table = _by_scenario(rows)
    missed = [
        r for r in rows
        if r.policy == "auto" and not r.oom and r.efficiency < AUTO_MIN_EFFICIENCY
    ]
    if missed:
        lines += [
            "",
            "## Where a target is out of reach",
            "",
            f"`auto` stays below {AUTO_MIN_EFFICIENCY} here; so does every fixed policy that did "
            "not run out of memory. Why, with the numbers: "
            "[backends.md](backends.md#where-auto-cannot-reach-the-oracle).",
            "",
        ]
        for r in missed:
            best = best_safe_fixed(table[r.scenario])
            best_text = "none ran without OOM" if best is None else f"{best:.4f}"
            lines.append(
                f"- **{r.scenario}**: auto plans {_gib(r.planned_kv_bytes)} GiB, the oracle "
                f"{_gib(r.oracle_kv_bytes)} GiB ({r.efficiency:.4f}); better fixed policy "
                f"without OOM: {best_text}"
            )
    lines += [
        "",
        "## Every scenario",
        "",
        "| scenario | policy | planned GiB | oracle GiB | efficiency | OOM | resolved as |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        oom = f"**OOM** ({r.oom_at})" if r.oom else ("no (planner refused)" if r.refused else "no")
        lines.append(
            f"| {r.scenario} | {r.policy} | {_gib(r.planned_kv_bytes)} | {_gib(r.oracle_kv_bytes)} "
            f"| {r.efficiency:.4f} | {oom} | {r.resolved_truth_source} |"
        )
    auto_rows = [r for r in rows if r.policy == "auto"]
    if auto_rows:
        lines += ["", "## Why auto decided as it did", ""]
        lines += [f"- **{r.scenario}**: {r.truth_source_reason}" for r in auto_rows]
    return "\n".join(lines) + "\n"


def _print_table(rows: Sequence[BenchRow], duration_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    # A pipe gets wide lines rather than a table folded into 80 columns (as the CLI does).
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    table = Table(title="memacct truth-source benchmark (utilization 1.0)")
    for col, justify in (
        ("scenario", "left"),
        ("policy", "left"),
        ("planned GiB", "right"),
        ("oracle GiB", "right"),
        ("efficiency", "right"),
        ("OOM", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    previous = None
    for r in rows:
        if previous is not None and r.scenario != previous:
            table.add_section()
        previous = r.scenario
        table.add_row(
            r.scenario,
            r.policy,
            _gib(r.planned_kv_bytes),
            _gib(r.oracle_kv_bytes),
            f"{r.efficiency:.4f}",
            f"[red]OOM[/red] ({r.oom_at})" if r.oom else "no",
        )
    console.print(table)
    summary = Table(title="summary per policy")
    for col in ("policy", "scenarios", "OOM", "eff. min", "eff. median", "min without OOM"):
        summary.add_column(col, justify="left" if col == "policy" else "right")
    for s in summarize(rows):
        safe = "-" if s.safe_efficiency_min is None else f"{s.safe_efficiency_min:.4f}"
        summary.add_row(
            s.policy,
            str(s.scenarios),
            str(s.ooms),
            f"{s.efficiency_min:.4f}",
            f"{s.efficiency_median:.4f}",
            safe,
        )
    console.print(summary)
    for text, ok in _checks(rows, summarize(rows)):
        console.print(f"{'[green]met[/green]' if ok else '[red]NOT met[/red]'}  {text}")
    console.print(f"{len({r.scenario for r in rows})} scenarios in {duration_s:.1f} s")


def run_benchmark_cli(
    scenarios_dir: str | None, *, as_json: bool, output: str | None, progress: bool
) -> None:
    """``memacct bench``: run the benchmark, print the table (or JSON), optionally write Markdown.

    Args:
        scenarios_dir: a directory of scenario JSON files; ``None``: the shipped set.
        as_json: print ``{"rows": [...], "summary": [...], "duration_s": ...}`` instead.
        output: also write the Markdown report to this file.
        progress: show a progress bar on stderr (for a terminal).
    """
    scenarios = load_scenarios(scenarios_dir)
    start = time.perf_counter()
    jobs = max(1, min(os.cpu_count() or 1, len(scenarios)))
    if progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        columns = (
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("scenarios", total=len(scenarios))

            def report(rows: list[BenchRow]) -> None:
                name = rows[0].scenario if rows else ""
                bar.update(task, advance=1, description=f"scenarios ({name})")

            rows = run_benchmark(scenarios, POLICIES, jobs=jobs, on_rows=report)
    else:
        rows = run_benchmark(scenarios, POLICIES, jobs=jobs)
    duration = time.perf_counter() - start
    if output is not None:
        path = Path(output)
        command = "make bench" if path.name == "results.md" else f"memacct bench --output {output}"
        atomic_write_text(path, render_markdown(rows, duration, command), "benchmark report")
    if as_json:
        data: dict[str, Any] = {
            "rows": [r.model_dump() for r in rows],
            "summary": [s.model_dump() for s in summarize(rows)],
            "duration_s": duration,
        }
        print(json.dumps(data, indent=2))
        return
    _print_table(rows, duration)
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
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the Markdown table to this file.",
)
def bench_command(scenarios_dir: str | None, as_json: bool, output: str | None) -> None:
    """Run the truth-source accuracy benchmark on simulated serving scenarios."""
    run_benchmark_cli(
        scenarios_dir, as_json=as_json, output=output, progress=not as_json and sys.stderr.isatty()
    )
