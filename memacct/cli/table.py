"""A table of text cells, printed as rich prints it, without importing rich on a pipe.

rich lays out a table for a terminal (colours, the terminal's width, folding); on a pipe its
output is plain text: a box of heavy-head lines (``rich.box.HEAVY_HEAD``) around cells padded
by one space. Importing rich costs a preset plan about a tenth of its run, so
:func:`print_table` writes that text itself where rich would write exactly it (stdout not
a terminal, no variable asking rich for colours, every cell plain ASCII that rich's markup
and emoji codes leave alone, the table within the pipe's width), and hands everything
else to rich. ``tests/test_cli_table.py`` checks that both write the same text.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

import click

__all__ = ["PIPE_WIDTH", "plain_table", "print_table"]

PIPE_WIDTH = 160
"""The console width a pipe gets (:func:`memacct.cli.common.console`)."""

# Variables with which rich colours a pipe or treats it as a terminal.
_RICH_TERMINAL_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


# What rich could read as an emoji code: two colons with no space between them (its
# rich._emoji_replace pattern is ``:(\S*?)(-emoji|-text)?:``).
_EMOJI_LIKE = re.compile(r":\S*:")


def _plain_cell(text: str) -> bool:
    """Whether rich prints ``text`` as it is: printable ASCII with no markup (``[``) and
    nothing that could be an emoji code (``:name:``)."""
    return (all(" " <= ch <= "~" for ch in text) and "[" not in text
            and _EMOJI_LIKE.search(text) is None)  # fmt: skip


def plain_table(
    columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], width: int = PIPE_WIDTH
) -> str | None:
    """The table rich prints without colours: ``columns`` as ``(header, "left"|"right")``,
    ``rows`` of text cells; ``None`` where only rich can lay it out (a cell it would read
    as markup, or wider than ``width`` in all, which rich folds)."""
    cells = [[header for header, _ in columns], *(list(row) for row in rows)]
    if any(len(row) != len(columns) for row in cells) or not all(
        _plain_cell(cell) for row in cells for cell in row
    ):
        return None
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    if sum(widths) + 3 * len(widths) + 1 > width:
        return None

    def line(row: Sequence[str], edge: str) -> str:
        parts = [cell.rjust(w) if justify == "right" else cell.ljust(w)
                 for cell, w, (_, justify) in zip(row, widths, columns, strict=True)]  # fmt: skip
        return edge + edge.join(f" {part} " for part in parts) + edge

    def rule(left: str, fill: str, cross: str, right: str) -> str:
        return left + cross.join(fill * (w + 2) for w in widths) + right

    lines = [rule("┏", "━", "┳", "┓"), line(cells[0], "┃"), rule("┡", "━", "╇", "┩")]
    lines += [line(row, "│") for row in cells[1:]]
    lines.append(rule("└", "─", "┴", "┘"))
    return "\n".join(lines)


def print_table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]) -> None:
    """Print the table: the plain text of :func:`plain_table` on a pipe where it is rich's
    own, otherwise through rich (a terminal's colours and width)."""
    piped = not (sys.stdout.isatty() or "IPython" in sys.modules  # rich renders a notebook
                 or any(os.environ.get(name) for name in _RICH_TERMINAL_VARIABLES))  # fmt: skip
    text = plain_table(columns, rows) if piped else None
    if text is not None:
        click.echo(text)
        return
    from rich.table import Table

    from memacct.cli.common import console

    table = Table()
    for header, justify in columns:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    console().print(table)
