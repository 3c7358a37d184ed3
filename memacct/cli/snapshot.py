"""``memacct snapshot``: the device's memory, once or refreshed."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import click
from rich.table import Table

from memacct.cli.common import console as _console
from memacct.errors import InvalidInputError
from memacct.units import GiB

__all__ = ["snapshot_cmd"]


def _snapshot_table(snap: Any) -> Table:
    table = Table(title=f"{snap.backend}:{snap.device}")
    table.add_column("memory")
    table.add_column("GiB", justify="right")
    table.add_column("bytes", justify="right")
    rows = [
        ("total", snap.total),
        ("free", snap.free),
        ("used", snap.used),
        ("reserved (allocator)", snap.reserved),
        ("allocated (tensors)", snap.allocated),
        ("allocated peak", snap.allocated_peak),
        ("reserved peak", snap.reserved_peak),
        ("non-allocator", snap.non_allocator),
        ("other processes", snap.other_processes),
    ]
    for label, value in rows:
        if value is None:
            table.add_row(label, "n/a", "not attributable on this backend")
        else:
            table.add_row(label, f"{value / 2**30:.2f}", f"{value:,}")
    return table


@click.command("snapshot")
@click.option(
    "--backend", "backend_name", default=None, help="Backend name (default: best available)."
)
@click.option("--device", default=0, show_default=True, type=int, help="Device index.")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as JSON.")
@click.option(
    "--watch",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Refresh every SECONDS (at least 0.1) until interrupted; one line per refresh when "
    "the output is not a terminal.",
)
@click.option(
    "--demo",
    is_flag=True,
    help="Show a simulated device in use (weights, cache, a co-tenant) instead of a fresh one.",
)
def snapshot_cmd(
    backend_name: str | None, device: int, as_json: bool, watch: float | None, demo: bool
) -> None:
    """Show the device's memory split into other processes, allocator and the rest."""
    from memacct.measure import snapshot
    from memacct.registry import get_backend

    if watch is not None and not (math.isfinite(watch) and watch >= MIN_WATCH_S):
        raise InvalidInputError(
            f"--watch {watch:g} is not a refresh interval: give at least {MIN_WATCH_S:g} seconds"
        )
    if demo:
        if backend_name not in (None, "sim"):
            raise InvalidInputError(
                f"--demo shows a simulated device in use; it cannot be combined with "
                f"--backend {backend_name} (drop one of the two)"
            )
        backend = get_backend("sim", device=_demo_device())
    else:
        backend = get_backend(backend_name)
    note = _sim_note(backend.name, demo, as_json)
    if watch is None:
        snap = snapshot(backend, device)
        if as_json:
            click.echo(snap.model_dump_json(indent=2))
        else:
            _console().print(_snapshot_table(snap))
            if note:
                click.echo(note)
        return
    try:
        if as_json or not sys.stdout.isatty():
            # A pipe or a log gets one line per refresh, flushed, instead of a live table.
            while True:
                snap = snapshot(backend, device)
                click.echo(snap.model_dump_json() if as_json else _snapshot_line(snap))
                sys.stdout.flush()
                time.sleep(watch)
        from rich.live import Live

        if note:
            click.echo(note)
        with Live(_snapshot_table(snapshot(backend, device)), console=_console()) as live:
            while True:
                time.sleep(watch)
                live.update(_snapshot_table(snapshot(backend, device)))
    except KeyboardInterrupt:
        return


MIN_WATCH_S = 0.1
"""Shortest ``--watch`` interval: faster only spins a core without showing anything new."""


def _snapshot_line(snap: Any) -> str:
    # One line per refresh: the time, then the snapshot as MemorySnapshot prints itself.
    return f"{time.strftime('%H:%M:%S', time.localtime(snap.timestamp))} {snap}"


def _sim_note(name: str, demo: bool, as_json: bool) -> str | None:
    if name != "sim" or as_json:
        return None
    if demo:
        return (
            "note: a demo state of the simulated device: 14.00GiB of weights, 2.00GiB of cached "
            "blocks, 0.50GiB outside the allocator (a driver context) and a 6.00GiB co-tenant"
        )
    return (
        "note: this simulated device is fresh, so it holds nothing; "
        "'memacct snapshot --demo' shows one in use"
    )


def _demo_device() -> Any:
    """A simulated H100 in use: weights, cached blocks, a driver context and a co-tenant."""
    from memacct.sim import SimDevice

    dev = SimDevice("h100-80gb")
    dev.other_process_malloc(6 * GiB)
    dev.external_malloc(GiB // 2)
    for _ in range(14):
        dev.malloc(GiB)
    dev.free(dev.malloc(2 * GiB))  # freed, but kept cached by the allocator
    return dev
