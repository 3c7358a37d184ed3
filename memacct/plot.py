"""The device's memory as one stacked bar: where every byte of a plan goes.

matplotlib is imported only when drawing (``pip install memacct[plot]``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from memacct.errors import InvalidInputError, MemacctError
from memacct.io import atomic_write_bytes
from memacct.models import ProfileResult, TruthSource

__all__ = ["breakdown", "plot_plan"]

COLORS = {
    "other processes": "#7f7f7f",
    "non-allocator": "#bcbd22",
    "weights": "#1f77b4",
    "activation peak": "#ff7f0e",
    "fragmentation overhead": "#d62728",
    "KV cache": "#2ca02c",
    "allocator reserve": "#9467bd",
    "headroom": "#e5e5e5",
}


def breakdown(plan: Any, result: ProfileResult) -> list[tuple[str, int]]:
    """Split the device's total memory into the parts of a plan, bytes, summing to total.

    ``fragmentation overhead`` is what the allocator reserved beyond the live
    tensors' peak, when the plan budgets it (truth source ``reserved``);
    ``allocator reserve`` is what the plan keeps free inside the cache budget
    for the KV tensors' own rounding and the fragmentation allowance.
    """
    other = result.baseline.other_processes or 0
    non_allocator = result.baseline.non_allocator + result.non_allocator_increase
    activation = result.activation_peak
    overhead = 0
    if result.truth_source is TruthSource.RESERVED:
        overhead = max(0, activation - result.allocated_peak_increase)
        activation -= overhead
    parts = [
        ("other processes", other),
        ("non-allocator", max(0, non_allocator)),
        ("weights", result.weights_memory),
        ("activation peak", activation),
        ("fragmentation overhead", overhead),
        ("KV cache", int(plan.kv_cache_used_bytes)),
        # Kept free inside the cache budget for the allocator's own rounding and
        # fragmentation (see KVCachePlan.allocator_reserve_bytes).
        ("allocator reserve", int(getattr(plan, "allocator_reserve_bytes", 0))),
    ]
    used = sum(v for _, v in parts)
    parts.append(("headroom", max(0, int(plan.total_memory) - used)))
    return parts


def plot_plan(plan: Any, result: ProfileResult, path: str | Path, title: str = "") -> Path:
    """Draw :func:`breakdown` as a horizontal stacked bar labelled in GiB; PNG or SVG by suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in {".png", ".svg"}:
        raise InvalidInputError(f"plot file {str(path)!r} must end in .png or .svg")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MemacctError(
            f"drawing needs matplotlib ({exc}): pip install 'memacct[plot]'"
        ) from None
    matplotlib.rcParams["svg.fonttype"] = "none"  # keep labels as text in SVG
    parts = [(label, value) for label, value in breakdown(plan, result) if value > 0]
    total = float(plan.total_memory)
    fig, ax = plt.subplots(figsize=(12, 3.2), dpi=100)
    left = 0.0
    for label, value in parts:
        gib = value / 2**30
        ax.barh([0], [gib], left=left, color=COLORS[label], edgecolor="white", label=label)
        if value / total > 0.04:
            ax.text(
                left + gib / 2, 0, f"{label}\n{gib:.2f} GiB", ha="center", va="center", fontsize=8
            )
        left += gib
    ax.set_xlim(0, total / 2**30)
    ax.set_yticks([])
    ax.set_xlabel("GiB")
    ax.set_title(title or f"KV-cache plan on {result.backend}:{result.device}")
    ax.legend(
        [f"{label}: {value / 2**30:.2f} GiB" for label, value in parts],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35),
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=suffix[1:])
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue(), "plot")
