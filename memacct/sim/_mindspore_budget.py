"""What MindSpore's two pools share: the pool budget, the modelled versions, the checks.

The VMM pool is :mod:`memacct.sim._mindspore`, the block pool
:mod:`memacct.sim._mindspore_block`; the rules and their MindSpore sources are in
``docs/simulator.md`` (section "MindSpore").
"""

from __future__ import annotations

from typing import Any

from memacct.errors import InvalidInputError
from memacct.units import MiB

__all__ = [
    "MINDSPORE_VERSIONS",
    "VMM_PAGE",
    "check_budget",
    "check_version",
    "default_budget",
    "mindspore_options",
    "no_streams",
]

VMM_PAGE = 2 * MiB
"""Physical page of the VMM pool (``vmm_align_size``, default 2 MB)."""
MINDSPORE_VERSIONS = ("2.5", "2.6")
"""MindSpore versions whose statistics semantics are modelled (see :class:`MindSporeMemoryPool`)."""
_BUDGET_RESERVE = 10 * MiB


def default_budget(free_bytes: int) -> int:
    """MindSpore's pool budget without ``max_device_memory``: free x 15/16, 2 MiB down, - 10 MiB."""
    return max(0, (free_bytes * 15 // 16) // VMM_PAGE * VMM_PAGE - _BUDGET_RESERVE)


def check_budget(budget_bytes: object) -> int | None:
    if budget_bytes is None:
        return None
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise InvalidInputError(
            f"mindspore budget_bytes (max_device_memory) must be a positive int of bytes or "
            f"None for MindSpore's default, got {budget_bytes!r}"
        )
    return budget_bytes


def no_streams(stream: object) -> InvalidInputError:
    return InvalidInputError(
        f"stream={stream!r}: the simulated MindSpore pool models the default stream only "
        "(docs/simulator.md); allocate on stream 0"
    )


def check_version(version: object) -> str:
    if version not in MINDSPORE_VERSIONS:
        raise InvalidInputError(
            f"mindspore version must be one of {', '.join(MINDSPORE_VERSIONS)}, got {version!r}"
        )
    return str(version)


def mindspore_options(options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Resolve the ``vmm`` option of the ``mindspore`` preset to a preset name and options."""
    opts = dict(options)
    vmm = opts.pop("vmm", True)
    if not isinstance(vmm, bool):
        raise InvalidInputError(f"mindspore vmm must be True or False, got {vmm!r}")
    return ("mindspore" if vmm else "mindspore-block"), opts
