"""How ``memacct plan`` prints a plan: JSON, the verdict, the report, the table, the plot.

Every path prints the one :class:`~memacct.planner.result.KVCachePlan`: ``--json``
its one schema; the table and the plot its parts under the names of
:mod:`memacct.plot` (:func:`memacct.plot.breakdown`), each beside the JSON field
it comes from.
"""

from __future__ import annotations

from typing import Any

import click

from memacct.cli.table import print_table
from memacct.units import GiB, format_gib

__all__ = ["BREAKDOWN_COLUMNS", "breakdown_rows", "listed_backends", "print_plan"]

_SHOWN_WHEN_HELD = ("other processes", "fragmentation overhead", "retained")

BREAKDOWN_COLUMNS = (("part", "left"), ("GiB", "right"), ("share", "right"),
                     ("JSON field", "left"))  # fmt: skip
"""The breakdown table's columns: ``(header, justify)``."""


def print_plan(plan: Any, result: Any, *, as_json: bool, plot_path: str | None) -> None:
    """Print ``plan`` (and draw it to ``plot_path``); ``result`` is its profile, if any."""
    if plot_path is not None:
        from memacct.plot import plot_plan

        plot_plan(plan, result, plot_path, title=_title(plan, result))
    if as_json:
        click.echo(plan.model_dump_json(indent=2))
        return
    budget = plan.budget
    # Lines of text go out as they are (a pipe gets them whole, not folded at the table's
    # width with trailing spaces); only the table is laid out by rich.
    if budget is None or budget.source == "profile":
        click.echo(plan.report())
    else:
        click.echo(plan.verdict)
        for suggestion in plan.suggestions:
            click.echo(f"  - {suggestion}")
    # What the plan assumed (the library logs it too, but only the command line prints).
    for note in plan.notes:
        click.echo(f"note: {note}")
    if budget is not None:
        click.echo(_title(plan, result) + ": device memory")  # the table's title, unpadded
        print_table(BREAKDOWN_COLUMNS, breakdown_rows(plan, result))
    if plan.fits and budget is not None:
        click.echo(
            f"plan: {_blocks(plan)} ({plan.num_tokens:,} tokens, "
            f"{format_gib(plan.kv_cache_used_bytes)} of kv_cache_size "
            f"{format_gib(plan.kv_cache_bytes)}); maximum concurrency for "
            f"{plan.max_model_len:,} tokens per request: {plan.max_concurrency:.2f}x"
        )
    if plot_path is not None:
        click.echo(f"plot written to {plot_path}")


def _blocks(plan: Any) -> str:
    """The cache's units as the engine counts them: vLLM's blocks, SGLang's token slots."""
    if plan.block_size == 1:
        return f"{plan.num_blocks:,} token slots"
    return f"{plan.num_blocks:,} blocks of {plan.block_size} tokens"


def _target_label(plan: Any) -> str:
    """``target_allocation`` with what set it, in the engine's own terms."""
    budget = plan.budget
    if budget is not None and plan.target_allocation != budget.target_allocation:
        return "target_allocation (the rest + --kv-cache-memory-bytes)"
    flag = "mem_fraction_static" if plan.engine == "sglang" else "gpu_memory_utilization"
    return f"target_allocation ({flag} {plan.gpu_memory_utilization:g})"


def _title(plan: Any, result: Any) -> str:
    budget = plan.budget
    if result is not None:
        return f"{plan.model} on {result.backend}:{result.device} (saved profile)"
    where = budget.device_label if budget is not None else plan.engine
    return (
        f"{plan.model} on {where} ({plan.engine} {plan.engine_version}, "
        f"TP {plan.spec.tensor_parallel_size}, per rank)"
    )


def breakdown_rows(plan: Any, result: Any) -> list[tuple[str, str, str, str]]:
    """Every part of :func:`memacct.plot.breakdown` (the parts that may be absent, only when
    present), each with its share of the device and the JSON field it comes from."""
    from memacct.plot import FIELDS, KV_CACHE_PARTS, KV_CACHE_SIZE, breakdown, term_label

    rows: list[tuple[str, str, str, str]] = []
    total = plan.total_memory

    def row(label: str, value: int, field: str = "") -> None:
        rows.append((label, f"{value / GiB:.2f}", f"{value / total:.1%}", field))

    row("device total", total, "total_memory")
    budget = plan.budget
    row(_target_label(plan), plan.target_allocation or 0, "target_allocation")
    for label, value in breakdown(plan, result):
        if label == KV_CACHE_PARTS[0]:
            if plan.fits:
                row(KV_CACHE_SIZE, plan.kv_cache_bytes, "kv_cache_bytes")
            else:
                rows.append((
                    f"{KV_CACHE_SIZE}: none, {format_gib(plan.shortfall_bytes)} short of one "
                    f"request of {plan.max_model_len:,} tokens", "0.00", "0.0%",
                    "shortfall_bytes",
                ))  # fmt: skip
        if label in KV_CACHE_PARTS:
            if plan.fits:
                row("  " + label.removeprefix(KV_CACHE_SIZE + ": "), value)
            continue
        if value or label not in _SHOWN_WHEN_HELD:
            row(term_label(label, plan), value, FIELDS.get(label, ""))
    if budget is not None and budget.cudagraph_estimate and not budget.cudagraph_memory:
        rows.append((f"(CUDA graphs estimated, not charged by {plan.engine} "
                     f"{plan.engine_version})", f"{budget.cudagraph_estimate / GiB:.2f}", "",
                     "budget.cudagraph_estimate"))  # fmt: skip
    return rows


def listed_backends() -> list[Any]:
    """What ``memacct backends`` lists: every registered backend
    (:func:`memacct.registry.available_backends`), then each first-party backend that is
    not installed, unavailable, with how to install it (``memacct.plugin.KNOWN_BACKENDS``)."""
    from memacct.plugin import CORE_DISTRIBUTION, KNOWN_BACKENDS
    from memacct.registry import BackendInfo, available_backends, backend_names

    infos = available_backends()
    listed = {info.name for info in infos} | set(backend_names())
    return infos + [
        BackendInfo(name=name, available=False, distribution=known.distribution, version=None,
                    reason=f"not installed ({known.install}: {known.serves})")
        for name, known in sorted(KNOWN_BACKENDS.items())
        if name not in listed and known.distribution != CORE_DISTRIBUTION
    ]  # fmt: skip
