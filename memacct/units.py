"""Byte units and their printing. memacct keeps every size as ``int`` bytes."""

from __future__ import annotations

import math

__all__ = ["GiB", "KiB", "MiB", "format_gib", "format_size", "parse_size"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def format_gib(num_bytes: int | float, digits: int = 2) -> str:
    """Format a byte count as GiB, e.g. ``format_gib(3 * GiB) == "3.00GiB"``."""
    return f"{num_bytes / GiB:.{digits}f}GiB"


def format_size(num_bytes: int) -> str:
    """Human-readable size as torch prints it: ``512 bytes``, ``2.00 MiB``, ``79.19 GiB``."""
    if num_bytes < KiB:
        return f"{num_bytes} bytes"
    if num_bytes < MiB:
        return f"{num_bytes / KiB:.2f} KiB"
    if num_bytes < GiB:
        return f"{num_bytes / MiB:.2f} MiB"
    return f"{num_bytes / GiB:.2f} GiB"


_SUFFIXES = {"": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": 1024 * GiB,
             "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}


def parse_size(text: str) -> int:
    """Parse ``"20GiB"``, ``"512 MiB"``, ``"24GB"`` or a plain byte count into bytes.

    Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones (KB,
    MB, GB, TB) powers of 1000, as vendors print them.

    Raises:
        ValueError: not a size; the message names the text and the accepted forms.
    """
    raw = text.strip().replace("_", "")
    number = raw.rstrip("BbKkMmGgTtIi ")
    suffix = raw[len(number):].strip().lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if suffix not in _SUFFIXES or not (math.isfinite(value) and value >= 0):
        raise ValueError(
            f"{text!r} is not a size: write bytes or a number with KiB/MiB/GiB/TiB "
            f"(or KB/MB/GB/TB), e.g. 20GiB"
        )
    return int(value * _SUFFIXES[suffix])
