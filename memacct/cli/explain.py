"""``memacct explain LOG [LOG2]``: an engine's start-up log, term by term beside memacct's plan.

The log is read by :func:`memacct.explain.read_log` and planned by
:func:`memacct.explain.terms.explain` (the plan ``memacct plan`` prints for the
settings read; its command is shown). A log with no memory lines is refused in
one line saying what is missing (exit 2). Two logs are compared term by term.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from memacct.errors import InvalidInputError

__all__ = ["explain_cmd"]


def _read(path: str) -> str:
    """The text of ``path`` (``-``: stdin), refused in one line where it cannot be read."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InvalidInputError(f"cannot read log {path!r}: {exc.strerror or exc}: give the "
                                "path of a saved start-up log, or - for stdin") from None


@click.command("explain")
@click.argument("logs", nargs=-1, required=True, metavar="LOG [LOG2]")
@click.option("--model", default=None,
              help="The model as memacct plan takes it; default: the model the log names.")
@click.option("--device", default=None, help="The device preset; default: from the log.")
@click.option("--device-memory", default=None,
              help="The device's total (e.g. 24GiB); default: the total the log prints.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.option("--plot", "plot_path", default=None,
              help="Draw the terms logged beside planned (PNG or SVG).")
def explain_cmd(logs: tuple[str, ...], model: str | None, device: str | None,
                device_memory: str | None, as_json: bool, plot_path: str | None) -> None:
    """Read an engine's start-up log (vLLM, vllm-ascend, vllm-mindspore, SGLang; - for stdin),
    plan the same start-up and show each term logged beside planned, why they differ and
    what to change. Two logs: what moved between the two start-ups."""
    from memacct.explain import read_log
    from memacct.explain.terms import explain

    if len(logs) > 2:
        raise InvalidInputError(f"memacct explain takes one log or two to compare, got "
                                f"{len(logs)}: give LOG or LOG LOG2")  # fmt: skip
    if device is not None and device_memory is not None:
        raise InvalidInputError("give --device or --device-memory, not both")
    if plot_path is not None and Path(plot_path).suffix.lower() not in (".png", ".svg"):
        raise InvalidInputError(f"--plot {plot_path!r} must end in .png or .svg")
    done = [explain(read_log(_read(path), path), model=model, device=device,
                    device_memory=device_memory) for path in logs]  # fmt: skip
    if len(done) == 2:
        from memacct.explain.compare import compare

        _show_comparison(compare(done[0], done[1]), as_json)
    else:
        _show(done[0], as_json)
    if plot_path is not None:
        _plot(done, plot_path)
        if not as_json:
            click.echo(f"plot written to {plot_path}")


def _cell(term: str, value: Any) -> str:
    from memacct.units import GiB

    if value is None:
        return "-"
    if term == "max_concurrency":
        return f"{value:.2f}x"
    if term in ("num_tokens", "num_blocks"):
        return f"{value:,}"
    return f"{value / GiB:.2f} GiB"


def _show(done: Any, as_json: bool) -> None:
    from rich.table import Table

    from memacct.cli.common import console, echo_json

    if as_json:
        echo_json(done.as_json())
        return
    r = done.reading
    out = console()
    era = f" ({r.era})" if r.era else ""
    out.print(f"{r.name}: {r.engine} {r.engine_version or '(release not named)'}{era}; "
              f"settings: {_settings(r.settings)}", markup=False)  # fmt: skip
    out.print(f"planned as: {done.request.command}", markup=False)
    if done.plan is not None:
        out.print(f"plan: {done.plan.verdict}", markup=False)
    table = Table(title="logged beside planned (one rank)")
    for column in ("term", "logged", "planned", "difference", "why"):
        table.add_column(column, overflow="fold")
    for t in done.terms:
        diff = "-" if t.difference is None else _cell(t.term, t.difference)
        table.add_row(t.term, _cell(t.term, t.logged), _cell(t.term, t.planned), diff, t.why)
    out.print(table)
    for line in done.suggestions:
        out.print(f"  - {line}", markup=False)
    for note in done.notes:
        out.print(f"note: {note}", markup=False)


def _settings(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "none read"


def _show_comparison(comparison: Any, as_json: bool) -> None:
    from rich.table import Table

    from memacct.cli.common import console, echo_json

    if as_json:
        echo_json(comparison.as_json())
        return
    a, b = comparison.first.reading, comparison.second.reading
    out = console()
    table = Table(title=f"{a.name} -> {b.name}")
    for column in ("term", "first", "second", "difference"):
        table.add_column(column)
    for t in comparison.terms:
        diff = "-" if t.difference is None else _cell(t.term, t.difference)
        table.add_row(t.term, _cell(t.term, t.logged), _cell(t.term, t.planned), diff)
    out.print(table)
    out.print("what moved:", markup=False)
    for line in comparison.moved:
        out.print(f"  - {line}", markup=False)


def _plot(done: list[Any], path: str) -> None:
    from memacct.explain.plot import plot_terms

    columns = [(f"logged: {Path(d.reading.name).name}", d.reading.logged) for d in done]
    if len(done) == 1 and done[0].plan is not None:
        planned = {t.term: t.planned for t in done[0].terms}
        columns.append((f"planned: {done[0].plan.model}", planned))
    plot_terms(columns, path, title="\n".join(label for label, _ in columns))
