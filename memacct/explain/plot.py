"""``memacct explain --plot``: each term logged beside planned (or beside a second log).

The colours and the file handling are :mod:`memacct.plot`'s (matplotlib is the
optional ``plot`` extra, imported only when drawing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memacct import plot as _plot
from memacct.units import GiB

__all__ = ["plot_terms"]

_ROWS = (("weights_memory", _plot.WEIGHTS), ("activation_peak", _plot.ACTIVATION),
         ("non_allocator_increase", _plot.NON_ALLOCATOR), ("cudagraph_memory", _plot.GRAPHS),
         ("kv_cache_bytes", _plot.KV_CACHE_SIZE))  # fmt: skip


def plot_terms(columns: list[tuple[str, dict[str, Any]]], path: str | Path,
               title: str = "") -> Path:  # fmt: skip
    """Grouped bars, one group per memory term and one bar per column (``(label, terms)``:
    a log's logged terms, a plan's); a term a column lacks is left out of its group."""
    path, plt = _plot.pyplot_for(path)
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    width = 0.8 / max(1, len(columns))
    hatches = ("", "//", "..")
    for i, (label, values) in enumerate(columns):
        for row, (term, part) in enumerate(_ROWS):
            value = values.get(term)
            if value is None:
                continue
            color = _plot.COLORS.get(part, _plot.COLORS[_plot.KV_BLOCKS])
            x = row + (i - (len(columns) - 1) / 2) * width
            ax.bar([x], [value / GiB], width=width, color=color, edgecolor="black",
                   hatch=hatches[i % len(hatches)], label=label if row == 0 else None)  # fmt: skip
            ax.text(x, value / GiB, f"{value / GiB:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(_ROWS)))
    ax.set_xticklabels([part for _, part in _ROWS], fontsize=8)
    ax.set_ylabel("GiB (one rank)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_title(title or "start-up terms", fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black",
                             hatch=hatches[i % len(hatches)])
               for i in range(len(columns))]  # fmt: skip
    ax.legend(handles, [label for label, _ in columns], fontsize=8, frameon=False)
    fig.tight_layout()
    return _plot.save_figure(fig, plt, path)
