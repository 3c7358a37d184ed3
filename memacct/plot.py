"""The device's memory as one stacked bar: where every byte of a plan goes.

One KV figure is named the same everywhere: ``kv_cache_size`` (the report's
line, :attr:`KVCachePlan.kv_cache_bytes`), whose parts are the whole blocks
the engine allocates, the allocator reserve (kept free for the allocator's
rounding and fragmentation) and the remainder too small for a block.

matplotlib is imported only when drawing (``pip install memacct[plot]``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from memacct.errors import InvalidInputError, MemacctError
from memacct.io import atomic_write_bytes
from memacct.models import ProfileResult, TruthSource
from memacct.units import GiB, MiB

__all__ = ["FIELDS", "KV_CACHE_PARTS", "breakdown", "plot_capacity", "plot_plan", "term_label"]

KV_CACHE_SIZE = "kv_cache_size"
KV_BLOCKS = "kv_cache_size: blocks"
KV_RESERVE = "kv_cache_size: allocator reserve"
KV_REMAINDER = "kv_cache_size: remainder"
KV_CACHE_PARTS = (KV_BLOCKS, KV_RESERVE, KV_REMAINDER)
"""The parts of ``kv_cache_size`` in :func:`breakdown`, which sum to it."""

OTHER = "other processes"
NON_ALLOCATOR = "non-allocator"
WEIGHTS = "weights"
ACTIVATION = "activation peak"
FRAGMENTATION = "fragmentation overhead"
GRAPHS = "CUDA graphs"
RETAINED = "retained"
HEADROOM = "headroom"

FIELDS = {
    OTHER: "provenance.other_processes_at_baseline",
    NON_ALLOCATOR: "non_allocator_increase",
    WEIGHTS: "weights_memory",
    ACTIVATION: "activation_peak",
    FRAGMENTATION: "activation_peak (its reserved part)",
    GRAPHS: "cudagraph_memory",
    RETAINED: "retained_memory",
    KV_BLOCKS: "kv_cache_used_bytes",
    KV_RESERVE: "allocator_reserve_bytes",
}
"""The one set of names: each part of :func:`breakdown` (the table's row, the plot's segment)
and the :class:`~memacct.planner.result.KVCachePlan` JSON field it comes from."""

COLORS = {
    OTHER: "#7f7f7f",
    NON_ALLOCATOR: "#bcbd22",
    WEIGHTS: "#1f77b4",
    ACTIVATION: "#ff7f0e",
    FRAGMENTATION: "#d62728",
    GRAPHS: "#e377c2",
    RETAINED: "#8c564b",
    KV_BLOCKS: "#2ca02c",
    KV_RESERVE: "#9467bd",
    KV_REMAINDER: "#98df8a",
    HEADROOM: "#e5e5e5",
}

# A part narrower than this share of the device cannot carry a label in the bar: it is
# drawn again in the zoomed row below, where every small part gets its own width.
SMALL_SHARE = 0.04


def term_label(label: str, plan: Any) -> str:
    """A part's name with what it was measured or estimated for (the table's row label)."""
    budget = plan.budget
    if budget is None or budget.source != "estimate":
        return label
    if label == WEIGHTS:
        return f"weights ({budget.quantization or 'unquantized'}, {budget.weights_source})"
    if label == ACTIVATION:
        sampler = f", {budget.sampler} sampler" if budget.sampler else ""
        return (f"activation peak ({budget.max_num_batched_tokens} tokens, "
                f"{budget.max_num_seqs} seqs{sampler})")  # fmt: skip
    return label


def breakdown(plan: Any, result: ProfileResult | None = None) -> list[tuple[str, int]]:
    """Split the device's total memory into every term a plan charges, bytes.

    The parts sum to the device's total when the plan fits (``headroom`` is what
    is left); for a plan that does not fit they exceed it. ``fragmentation
    overhead`` is what the allocator reserved beyond the live tensors' peak, when
    the plan budgets it (truth source ``reserved``); ``other processes`` and the
    baseline's memory outside the allocator come from the profile (``result``).
    The three ``kv_cache_size: ...`` parts (:data:`KV_CACHE_PARTS`) sum to the
    plan's ``kv_cache_size`` (``kv_cache_bytes``): the whole blocks, the
    allocator reserve left free inside the cache budget for the KV tensors' own
    rounding and the fragmentation allowance, and the remainder too small for
    a block in every layer; all three are 0 for a plan that does not fit.
    """
    other = 0
    non_allocator = int(plan.non_allocator_increase)
    activation = int(plan.activation_peak)
    overhead = 0
    if result is not None:
        other = result.baseline.other_processes or 0
        non_allocator += result.baseline.non_allocator
        if result.truth_source is TruthSource.RESERVED:
            overhead = max(0, activation - result.allocated_peak_increase)
            activation -= overhead
    fits = bool(getattr(plan, "fits", True))
    blocks = int(plan.kv_cache_used_bytes) if fits else 0
    reserve = int(plan.allocator_reserve_bytes) if fits else 0
    parts = [
        (OTHER, other),
        (NON_ALLOCATOR, max(0, non_allocator)),
        (WEIGHTS, int(plan.weights_memory)),
        (ACTIVATION, activation),
        (FRAGMENTATION, overhead),
        (GRAPHS, int(plan.cudagraph_memory)),
        (RETAINED, int(plan.retained_memory)),
        (KV_BLOCKS, blocks),
        (KV_RESERVE, reserve),
        (KV_REMAINDER, max(0, int(plan.kv_cache_bytes) - blocks - reserve) if fits else 0),
    ]
    used = sum(v for _, v in parts)
    parts.append((HEADROOM, max(0, int(plan.total_memory) - used)))
    return parts


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _summary(plan: Any) -> str:
    if not getattr(plan, "fits", True):
        return (
            f"does not fit: {_gib(plan.shortfall_bytes)} short of one request of "
            f"{plan.max_model_len:,} tokens"
        )
    return (
        f"kv_cache_size {_gib(plan.kv_cache_bytes)}: {plan.num_blocks:,} blocks of "
        f"{plan.block_size} tokens ({plan.num_tokens:,} tokens), maximum concurrency "
        f"{plan.max_concurrency:.2f}x at {plan.max_model_len:,} tokens per request"
    )


def plot_plan(
    plan: Any, result: ProfileResult | None, path: str | Path, title: str = ""
) -> Path:
    """Draw :func:`breakdown` as a stacked bar labelled in GiB; PNG or SVG by suffix.

    The top row is the whole device, with a line at the utilization target; the
    row below zooms into the parts too small to read there (non-allocator memory,
    fragmentation, the allocator reserve), each at a width of its own with its
    size written on it. The subtitle gives the blocks and the concurrency, or for a
    plan that does not fit, by how much; its bar then runs past the device's end,
    which a red line marks. ``result`` is the plan's profile (``None`` offline).
    """
    path, plt = pyplot_for(path)
    from matplotlib.patches import Patch

    parts = [(label, value) for label, value in breakdown(plan, result) if value > 0]
    total = float(plan.total_memory)
    span = max(total, float(sum(value for _, value in parts)))
    small = [(label, value) for label, value in parts if value / total < SMALL_SHARE]
    rows = 2 if small else 1
    fig, axes = plt.subplots(
        rows,
        1,
        figsize=(12, 2.6 + 1.4 * rows),
        dpi=100,
        gridspec_kw={"height_ratios": [1.4, 1][:rows]},
        squeeze=False,
    )
    ax = axes[0][0]
    left = 0.0
    for label, value in parts:
        gib = value / GiB
        ax.barh([0], [gib], left=left, color=COLORS[label], edgecolor="white", height=0.6)
        if value / total >= SMALL_SHARE:
            ax.text(
                left + gib / 2, 0, f"{label.replace('kv_cache_size: ', 'KV ')}\n{gib:.2f} GiB",
                ha="center", va="center", fontsize=8,
            )  # fmt: skip
        left += gib
    target = plan.target_allocation / GiB
    ax.axvline(target, color="black", linestyle="--", linewidth=1.2)
    ax.text(
        target, 0.42, f"target {target:.2f} GiB (gpu_memory_utilization "
        f"{plan.gpu_memory_utilization:g}) ", ha="right", va="bottom", fontsize=8,
    )  # fmt: skip
    ax.set_xlim(0, span / GiB)
    if span > total:
        ax.axvline(total / GiB, color="red", linewidth=2)
        ax.text(total / GiB, -0.42, f" device total {total / GiB:.2f} GiB: does not fit",
                color="red", ha="left", va="bottom", fontsize=8)  # fmt: skip
    ax.set_ylim(-0.45, 0.6)
    ax.set_yticks([])
    ax.set_xlabel(f"GiB of {total / GiB:.2f} GiB total")
    device = f"{result.backend}:{result.device}" if result is not None else "the device"
    ax.set_title(f"{title or f'KV-cache plan on {device}'}\n{_summary(plan)}", fontsize=10)
    if small:
        _zoom_row(axes[1][0], small)
    handles = [Patch(color=COLORS[label]) for label, _ in parts]
    fig.legend(
        handles,
        [f"{label}: {_gib(value)}" for label, value in parts],
        loc="lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.08 + 0.04 * (len(parts) > 8), 1, 1))
    return save_figure(fig, plt, path)


def pyplot_for(path: str | Path) -> tuple[Path, Any]:
    """The checked path and matplotlib's pyplot (imported here: ``memacct[plot]``); every
    drawing (this module's, :mod:`memacct.explain.plot`) starts here."""
    path = Path(path)
    if path.suffix.lower() not in {".png", ".svg"}:
        raise InvalidInputError(f"plot file {str(path)!r} must end in .png or .svg")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from memacct.plugin import extra_hint

        raise MemacctError(f"drawing needs matplotlib ({exc}): {extra_hint('plot')}") from None
    matplotlib.rcParams["svg.fonttype"] = "none"  # keep labels as text in SVG
    return path, plt


def save_figure(fig: Any, plt: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` in its suffix's format at once (atomically) and close it."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=path.suffix.lower()[1:])
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue(), "plot")


def plot_capacity(rows: list[Any], path: str | Path, title: str = "",
                  marked: Any = None) -> Path:
    """A capacity plan as one chart: the requests served at once per device, one bar per
    tensor-parallel degree (:func:`memacct.planner.offline.plan_capacity`); a configuration
    that does not fit is marked with a cross, the ``marked`` one outlined."""
    path, plt = pyplot_for(path)
    devices = list(dict.fromkeys(row.device for row in rows))
    degrees = list(dict.fromkeys(row.tensor_parallel_size for row in rows))
    width = 0.8 / max(1, len(degrees))
    fig, ax = plt.subplots(figsize=(2.5 + 1.6 * len(devices), 4.5), dpi=100)
    for i, tp in enumerate(degrees):
        for j, device in enumerate(devices):
            row = next((r for r in rows if r.device == device and r.tensor_parallel_size == tp),
                       None)  # fmt: skip
            if row is None:
                continue
            x = j + (i - (len(degrees) - 1) / 2) * width
            value = row.concurrency
            ax.bar([x], [value], width=width * 0.9, color=f"C{i}",
                   edgecolor="black" if row is marked else "none",
                   linewidth=2 if row is marked else 0)  # fmt: skip
            ax.text(x, value, f"{value:.1f}x" if value else "x", ha="center", va="bottom",
                    fontsize=8, color="black" if value else "red")  # fmt: skip
    ax.set_xticks(range(len(devices)))
    ax.set_xticklabels(devices)
    ax.set_ylabel("requests of max_model_len served at once")
    ax.set_title(title or "capacity plan", fontsize=10)
    from matplotlib.patches import Patch

    handles = [Patch(color=f"C{i}", label=f"TP {tp}") for i, tp in enumerate(degrees)]
    if marked is not None:
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=2,
                             label=f"smallest serving: {marked.device} x "
                             f"{marked.tensor_parallel_size}"))  # fmt: skip
    ax.legend(handles=handles, fontsize=8)
    fig.tight_layout()
    return save_figure(fig, plt, path)


def _small(n: int) -> str:
    # Below 0.01 GiB the GiB figure reads 0.000: give MiB instead.
    return f"{n / GiB:.3f} GiB" if n >= GiB // 100 else f"{n / MiB:.2f} MiB"


def _zoom_row(ax: Any, small: list[tuple[str, int]]) -> None:
    """The small parts side by side at equal widths, each labelled with its size."""
    for i, (label, value) in enumerate(small):
        ax.barh([0], [1], left=i, color=COLORS[label], edgecolor="white", height=0.6)
        ax.text(
            i + 0.5, 0, f"{label.replace('kv_cache_size: ', 'KV ')}\n{_small(value)}",
            ha="center", va="center", fontsize=8,
        )  # fmt: skip
    ax.set_xlim(0, len(small))
    ax.set_yticks([])
    ax.set_xticks([])
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(
        f"zoom: the parts under {SMALL_SHARE:.0%} of the device, at equal widths", fontsize=8
    )
