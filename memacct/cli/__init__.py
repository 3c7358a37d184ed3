"""The ``memacct`` command line: backends, snapshot, plan, bench.

Every user mistake ends as one line on stderr and exit code 2, never a traceback;
its message names the CLI's flags, not the Python keywords behind them
(:func:`memacct.cli.flags.cli_wording`). Subcommands: :mod:`memacct.cli.snapshot`,
:mod:`memacct.cli.plan`; other distributions add theirs through the ``memacct.cli``
entry-point group (memacct-bench: ``bench``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

try:  # a Ctrl-C while the command line starts is as quiet as one during a command
    import click
    from rich.console import Console
    from rich.table import Table

    from memacct.cli.common import EXIT_USER_ERROR, echo_json, print_error
    from memacct.cli.common import console as _console
    from memacct.cli.flags import cli_wording
    from memacct.cli.group import CLI_GROUP, app
    from memacct.errors import MemacctError
except KeyboardInterrupt:
    raise SystemExit(130) from None

__all__ = ["CLI_GROUP", "app", "main"]

_print_error = print_error
_echo_json = echo_json


@app.command("backends")
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
        _echo_json([info.model_dump() for info in infos])
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
    _console().print(table)


# click >= 8.2 raises this for a group run without a command (older versions exit with the help).
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    cls for cls in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if cls is not None
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    return _run(argv)


def _run(argv: Sequence[str] | None) -> int:
    from memacct.cli.streams import guarded_stdout

    try:
        with guarded_stdout():  # an output that cannot be written is a one-line error too
            code = app.main(
                args=list(argv) if argv is not None else None,
                prog_name="memacct",
                standalone_mode=False,
            )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        if isinstance(exc, _NO_ARGS_IS_HELP):  # `memacct` alone: the help, as click shows it
            exc.show()
            return EXIT_USER_ERROR
        # click's own "Usage: ... Error: Invalid value" becomes memacct's one line.
        message = " ".join(exc.format_message().split())
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            message += f" (see '{exc.ctx.command_path} --help')"
        _print_error(message)
        return EXIT_USER_ERROR if exc.exit_code in (1, 2) else exc.exit_code
    except click.exceptions.Abort:
        return 130
    except MemacctError as exc:
        return _print_error(cli_wording(str(exc)))
    except KeyboardInterrupt:
        return 130
    return code if isinstance(code, int) else 0



# The subcommands register themselves on `app` when imported.
try:
    from memacct.cli import explain as explain
    from memacct.cli import plan as plan
    from memacct.cli import snapshot as snapshot
except KeyboardInterrupt:
    raise SystemExit(130) from None

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
