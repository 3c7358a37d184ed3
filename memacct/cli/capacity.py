"""``memacct plan --device h100,a100-80gb,l4 --tensor-parallel-size 1,2,4,8``: a capacity plan.

One row per device and degree (:func:`memacct.planner.offline.plan_capacity`): does the
model fit, the KV cache per rank, the requests of ``--max-model-len`` served at once;
``--min-concurrency N`` marks the smallest configuration that serves N
(:func:`memacct.planner.offline.smallest_serving`). ``--json`` prints the rows as a
list (each with its whole plan), ``--plot`` one chart.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click
from rich.table import Table

from memacct.cli.common import console as _console
from memacct.cli.common import print_emitted
from memacct.cli.flags import cli_wording
from memacct.planner.options import PlanOptions
from memacct.planner.result import PLAN_FORMAT_VERSION
from memacct.units import GiB

__all__ = ["capacity_cmd"]

MARK = "<- smallest serving"


def _device_notes(device: str, opts: PlanOptions) -> tuple[str, ...]:
    """What a plan on ``device`` assumes about memory it shares with the CPU and OS (each
    row's plan carries it; the table says it once per device)."""
    from memacct.devices import memory_notes, resolve_device
    from memacct.errors import InvalidInputError

    try:
        info = resolve_device(device)
    except InvalidInputError:  # a device given by its size: nothing known about it
        return ()
    return memory_notes(info, opts.engine, opts.gpu_memory_utilization)


def capacity_cmd(config: dict[str, Any], opts: PlanOptions, devices: tuple[str, ...],
                 degrees: tuple[int, ...], flags: dict[str, Any],
                 notes: tuple[str, ...] = ()) -> None:
    """Plan every device x degree and print the table (exit 1 when none fits); ``notes``
    (what reading the model assumed) go into each row's plan and, with the table, to stderr."""
    from memacct.planner.offline import plan_capacity, smallest_serving, with_source_notes

    wanted = flags["min_concurrency"]
    if wanted is not None:
        smallest_serving([], wanted)  # a bad --min-concurrency is refused before any plan
    rows = [
        replace(row, plan=None if row.plan is None else with_source_notes(row.plan, notes),
                refusal=cli_wording(row.refusal))
        for row in plan_capacity(config, devices, degrees, opts)
    ]
    if flags.get("emit") is not None and any(row.plan is not None and row.plan.fits
                                             for row in rows):
        print_emitted(flags, [
            (f"{row.device} x TP {row.tensor_parallel_size}", row.plan,
             replace(opts, device=row.device, tensor_parallel_size=row.tensor_parallel_size))
            for row in rows if row.plan is not None
        ])  # fmt: skip
        return
    marked = None if wanted is None else smallest_serving(rows, wanted)
    if flags["plot_path"] is not None:
        from memacct.plot import plot_capacity

        plot_capacity(rows, flags["plot_path"], title=f"{opts.model_name}: capacity plan",
                      marked=marked)  # fmt: skip
    if flags["as_json"]:
        click.echo(json.dumps([
            {"format_version": PLAN_FORMAT_VERSION, "device": row.device,
             "tensor_parallel_size": row.tensor_parallel_size,
             "fits": row.plan is not None and row.plan.fits,
             # Null where not asked (no --min-concurrency) or not refused.
             "serves_min_concurrency": None if wanted is None else row is marked,
             "refusal": row.refusal or None,
             "plan": None if row.plan is None else row.plan.model_dump(mode="json")}
            for row in rows
        ], indent=2))  # fmt: skip
    else:
        for note in notes:
            click.echo(f"note: {note}", err=True)
        for device in dict.fromkeys(row.device for row in rows):  # unified memory, ...
            for note in _device_notes(device, opts):
                click.echo(f"note: {device}: {note}", err=True)
        _console().print(_table(rows, opts, marked, wanted))
        if wanted is not None:
            click.echo(
                f"smallest configuration serving {wanted:g} requests: {marked.device} x "
                f"{marked.tensor_parallel_size}" if marked is not None else
                f"no configuration here serves {wanted:g} concurrent requests"
            )  # fmt: skip
        if flags["plot_path"] is not None:
            click.echo(f"plot written to {flags['plot_path']}")
    if not any(row.plan is not None and row.plan.fits for row in rows) or (
        wanted is not None and marked is None
    ):
        raise click.exceptions.Exit(1)


def _table(rows: list[Any], opts: PlanOptions, marked: Any, wanted: float | None) -> Table:
    lengths = {row.plan.max_model_len for row in rows if row.plan is not None}
    length = f"{lengths.pop():,} tokens" if len(lengths) == 1 else "--max-model-len"
    table = Table(title=f"{opts.model_name}: capacity plan ({opts.engine}, per rank)")
    for column in ("device", "TP", "fits", "KV GiB", f"concurrency at {length}", ""):
        table.add_column(column, justify="left" if column in ("device", "") else "right")
    for row in rows:
        plan = row.plan
        if plan is None:
            table.add_row(row.device, str(row.tensor_parallel_size), "refused", "-", "-",
                          row.refusal)  # fmt: skip
            continue
        kv = f"{plan.kv_cache_used_bytes / GiB:.2f}" if plan.fits else "-"
        short = "" if plan.fits else f"{plan.shortfall_bytes / GiB:.2f} GiB short"
        table.add_row(
            row.device, str(row.tensor_parallel_size), "yes" if plan.fits else "no", kv,
            f"{plan.max_concurrency:.2f}x" if plan.fits else "0", MARK if row is marked else short,
        )  # fmt: skip
    return table
