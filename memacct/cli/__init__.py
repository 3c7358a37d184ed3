"""The ``memacct`` command line: backends, snapshot, plan, explain, bench.

Every user mistake ends as one line on stderr and exit code 2, never a traceback;
its message names the CLI's flags, not the Python keywords behind them
(:func:`memacct.cli.flags.cli_wording`). Subcommands: :mod:`memacct.cli.backends`,
:mod:`memacct.cli.snapshot`, :mod:`memacct.cli.plan`, :mod:`memacct.cli.explain`, each
imported only when it runs (or ``--help`` lists them all: :mod:`memacct.cli.group`); other
distributions add theirs through the ``memacct.cli`` entry-point group (memacct-bench:
``bench``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

try:  # a Ctrl-C while the command line starts is as quiet as one during a command
    import click

    from memacct.cli.common import EXIT_USER_ERROR, print_error
    from memacct.cli.group import CLI_GROUP, app, load_command
    from memacct.errors import MemacctError
except KeyboardInterrupt:
    raise SystemExit(130) from None

__all__ = ["CLI_GROUP", "app", "main"]

_print_error = print_error


# click >= 8.2 raises this for a group run without a command (older versions exit with the help).
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    cls for cls in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if cls is not None
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    return _run(argv)


def _command_name(args: Sequence[str]) -> str | None:
    """The subcommand ``args`` run: the first that is not one of the group's own options
    (``--help``, ``--version``: they take no value)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


def _run(argv: Sequence[str] | None) -> int:
    args = list(argv) if argv is not None else sys.argv[1:]
    try:
        # Dispatch before click runs: only the subcommand that runs is imported, and a Ctrl-C
        # while it imports is as quiet as one while the command line starts.
        from memacct.cli.streams import guarded_stdout

        name = _command_name(args)
        if name is not None:
            load_command(name)
    except KeyboardInterrupt:
        return 130
    try:
        with guarded_stdout():  # an output that cannot be written is a one-line error too
            code = app.main(args=args, prog_name="memacct", standalone_mode=False)
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
        from memacct.cli.flags import cli_wording

        return _print_error(cli_wording(str(exc)))
    except KeyboardInterrupt:
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
