"""Byte units and their printing. memacct keeps every size as ``int`` bytes."""

from __future__ import annotations

__all__ = ["GiB", "KiB", "MiB", "format_gib"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def format_gib(num_bytes: int | float, digits: int = 2) -> str:
    """Format a byte count as GiB, e.g. ``format_gib(3 * GiB) == "3.00GiB"``."""
    return f"{num_bytes / GiB:.{digits}f}GiB"
