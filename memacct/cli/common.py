"""What every subcommand shares: the console, the one-line error, JSON output, and
``memacct plan --emit``'s output (:func:`print_emitted`)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["EXIT_USER_ERROR", "console", "echo_json", "print_emitted", "print_error"]

EXIT_USER_ERROR = 2


def console() -> Console:
    """The console for tables; a pipe gets wide lines rather than a table folded into 80.

    rich is imported here, by the commands that print a table (a ``--json`` plan does not).
    """
    from rich.console import Console

    width = None if sys.stdout.isatty() else 160
    return Console(highlight=False, width=width)


def print_error(message: str) -> int:
    """Print ``memacct: error: ...`` on stderr; returns the exit code of a user error."""
    click.echo(f"memacct: error: {message}", err=True)
    return EXIT_USER_ERROR


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def print_emitted(flags: dict[str, Any], plans: list[tuple[str, Any, Any]]) -> None:
    """``memacct plan --emit``: the command (or pod resources) of each plan that fits.

    ``plans``: ``(label, plan, options)`` each; one plan prints its command alone, several
    (a capacity plan) one block per fitting row under a ``#`` line naming it (YAML
    documents apart by ``---`` for k8s). The notes go to stderr.

    Raises:
        InvalidInputError: ``--json`` or ``--plot`` beside ``--emit``, or a single plan that
            does not fit.
    """
    from memacct.errors import InvalidInputError
    from memacct.planner.emit import emit

    target = flags["emit"]
    for flag, key, what in (("--json", "as_json", "prints the plan"),
                            ("--plot", "plot_path", "draws the plan")):  # fmt: skip
        if flags.get(key):
            raise InvalidInputError(
                f"--emit {target} prints the command line and {flag} {what}: give one of them"
            )
    blocks: list[str] = []
    notes: list[str] = []
    for label, plan, opts in plans:
        if len(plans) > 1 and not plan.fits:
            continue
        out = emit(target, plan, opts, model=flags["model"], revision=flags.get("revision"))
        head = f"# {label}: {plan.verdict}\n" if len(plans) > 1 else ""
        blocks.append(head + out.text)
        notes += [note for note in out.notes if note not in notes]
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(("\n---\n" if target == "k8s" else "\n").join(blocks))
