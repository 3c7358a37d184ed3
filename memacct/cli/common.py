"""What every subcommand shares: the console, the one-line error, JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console

__all__ = ["EXIT_USER_ERROR", "console", "echo_json", "print_error"]

EXIT_USER_ERROR = 2


def console() -> Console:
    """The console for tables; a pipe gets wide lines rather than a table folded into 80."""
    width = None if sys.stdout.isatty() else 160
    return Console(highlight=False, width=width)


def print_error(message: str) -> int:
    """Print ``memacct: error: ...`` on stderr; returns the exit code of a user error."""
    click.echo(f"memacct: error: {message}", err=True)
    return EXIT_USER_ERROR


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    click.echo(json.dumps(data, indent=2, sort_keys=False))
