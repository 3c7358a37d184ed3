"""``memacct backends``: every registered backend, whether it can run here, and why not."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from memacct.cli.common import console, echo_json

__all__ = ["backends_cmd"]


@click.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def backends_cmd(as_json: bool) -> None:
    """List every registered backend, whether it can run here, and why not."""
    from memacct.cli.render import listed_backends

    if sys.stderr.isatty() and not as_json:
        # A plugin that hangs is waited for up to registry.TIME_LIMIT_S: say what is happening.
        with Console(stderr=True).status("probing backends ..."):
            infos = listed_backends()
    else:
        infos = listed_backends()
    if as_json:
        echo_json([info.model_dump() for info in infos])
        return
    table = Table(title="memacct backends")
    for col in ("name", "available", "default truth source", "distribution", "reason"):
        table.add_column(col, overflow="fold")
    for info in infos:
        dist = f"{info.distribution or '-'} {info.version or ''}".strip()
        table.add_row(
            info.name,
            "[green]yes[/green]" if info.available else "[red]no[/red]",
            info.default_truth_source or "-",
            dist,
            info.reason,
        )
    console().print(table)
