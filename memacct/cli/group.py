"""The ``memacct`` command group: the core's commands and other distributions', each
imported when it is run (or listed by ``--help``), never all at start-up.

A core command's module (:data:`CORE_COMMANDS`) defines its ``click.command`` and does not
know the group; :func:`load_command` adds it to :data:`app` on first use, so ``memacct plan``
imports neither ``explain`` (the log reader) nor ``snapshot`` (the backends) nor rich's
live display.
"""

from __future__ import annotations

import click

from memacct._version import __version__
from memacct.cli.common import print_error as _print_error
from memacct.errors import InvalidInputError

__all__ = ["CLI_GROUP", "CORE_COMMANDS", "app", "load_command"]


CLI_GROUP = "memacct.cli"
"""Entry-point group through which other distributions add subcommands (memacct-bench: bench)."""

_EXTERNAL_COMMANDS = {"bench": "memacct-bench (the evaluation harness: pip install -e ./bench)"}


def _external_command(name: str | None = None) -> dict[str, click.Command]:
    """The subcommands other distributions register (``name``: only that one).

    Reading the entry points scans every installed distribution's metadata (about 0.1-0.2 s),
    so :class:`_LazyGroup` does it only for a name that is not a core command, or to list
    them all for ``--help``. A plugin that fails to load is reported, never fatal.
    """
    from importlib.metadata import entry_points

    found: dict[str, click.Command] = {}
    for ep in entry_points(group=CLI_GROUP):
        if name is not None and ep.name != name:
            continue
        try:
            command = ep.load()
        except Exception as exc:  # a broken plugin must not break the core's commands
            _print_error(f"subcommand {ep.name!r} from {ep.value} failed to load: {exc}")
            continue
        if isinstance(command, click.Command):
            found.setdefault(ep.name, command)
    for known, dist in _EXTERNAL_COMMANDS.items():
        if known not in found and name in (None, known):
            found[known] = _missing_command(known, dist)
    return found


CORE_COMMANDS = ("backends", "explain", "plan", "snapshot")
"""The core's subcommands, each in the module :mod:`memacct.cli.<name>`."""


def _core_command(name: str) -> click.Command:
    """The core's command ``name`` (one of :data:`CORE_COMMANDS`), its module imported now."""
    if name == "plan":
        from memacct.cli.plan import plan_cmd

        return plan_cmd
    if name == "explain":
        from memacct.cli.explain import explain_cmd

        return explain_cmd
    if name == "snapshot":
        from memacct.cli.snapshot import snapshot_cmd

        return snapshot_cmd
    from memacct.cli.backends import backends_cmd

    return backends_cmd


def load_command(name: str) -> click.Command | None:
    """The subcommand ``name`` of :data:`app`, a core one imported and added on first use;
    ``None`` when it is not a core command nor already added."""
    command = app.commands.get(name)
    if command is None and name in CORE_COMMANDS:
        command = _core_command(name)
        app.add_command(command, name)
    return command


class _LazyGroup(click.Group):
    """Each command imported when it runs: the core's by name, other distributions' through
    their entry points (only for a name that is not a core command); all when listed."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = load_command(cmd_name)
        if command is None:
            command = _external_command(cmd_name).get(cmd_name)
            if command is not None:
                self.add_command(command, cmd_name)
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in CORE_COMMANDS:
            load_command(name)
        for name, command in _external_command().items():
            if name not in self.commands:
                self.add_command(command, name)
        return super().list_commands(ctx)


def _missing_command(name: str, dist: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True}, add_help_option=False)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def missing(args: tuple[str, ...]) -> None:
        raise InvalidInputError(f"'memacct {name}' comes with {dist}; it is not installed here")

    missing.help = f"(not installed: {dist})"
    return missing


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", "-V", prog_name="memacct", message="%(prog)s %(version)s"
)
def app() -> None:
    """How much accelerator memory can the KV cache safely take?

    Measure a device, plan a KV-cache budget from a saved profile or a simulated
    device, and benchmark the truth sources.
    """
