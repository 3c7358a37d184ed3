"""The adapter over ``torch.cuda``-shaped memory modules, and torch's allocator settings.

``torch.cuda`` and ``torch_npu``'s ``torch.npu`` share one API shape, and so
does the simulated device's ``.api``; :class:`TorchLikeBackend` adapts any of
them, so a vendor plugin is a few dozen lines. The functions read torch's
``PYTORCH_*_ALLOC_CONF`` settings a backend declares in its quirks.

The protocol these build on lives in :mod:`memacct.backend`; plugins import every name
here from :mod:`memacct`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from memacct.backend import LARGE_BUFFER_BYTES, BackendQuirks, BaseBackend
from memacct.errors import InvalidInputError
from memacct.models import TruthSource

__all__ = ["TorchLikeBackend", "torch_allocator_model", "with_allocator_settings"]


def with_allocator_settings(quirks: BackendQuirks) -> BackendQuirks:
    """``quirks`` adjusted for the allocator settings in effect now.

    torch's ``expandable_segments:True`` (in any of the declared variables)
    packs large tensors into one growing segment mapped in pages of
    :data:`LARGE_BUFFER_BYTES` instead of rounding each to 2 MiB in a segment of its own.
    """
    if "expandable_segments:true" in _allocator_options(quirks):
        return replace(
            quirks, growth_rounding="packed", growth_granularity_bytes=LARGE_BUFFER_BYTES
        )
    return quirks


def _allocator_options(quirks: BackendQuirks) -> list[str]:
    """The options set now in the declared variables, lower case without spaces."""
    options: list[str] = []
    for var in quirks.allocator_settings_env:
        text = os.environ.get(var, "").replace(" ", "").lower()
        options += [option for option in text.split(",") if option]
    return options


def torch_allocator_model(
    quirks: BackendQuirks, plain: str, expandable: str | None = None
) -> str | None:
    """The :mod:`memacct.sim` preset for a torch-style caching allocator under its settings now.

    ``plain`` models the default allocator and ``expandable`` the one with
    ``expandable_segments:True``; any other option in the declared variables
    (``max_split_size_mb``, ``garbage_collection_threshold``,
    ``roundup_power2_divisions``, ...) changes what the allocator does in ways
    the presets do not model, so there is no model (``None``) and ``auto`` falls
    back to its bound on the readings.
    """
    options = _allocator_options(quirks)
    if any(o not in ("expandable_segments:true", "expandable_segments:false") for o in options):
        return None
    return expandable if "expandable_segments:true" in options else plain


class TorchLikeBackend(BaseBackend):
    """A backend over any ``torch.cuda``-shaped memory module.

    The module needs ``device_count()``, ``mem_get_info(device)``,
    ``memory_stats(device)``, ``reset_peak_memory_stats(device)``,
    ``empty_cache()`` and ``synchronize(device)``, as ``torch.cuda``,
    ``torch.npu`` and :attr:`memacct.sim.SimDevice.api` have. Vendor plugins
    subclass it and set ``name``, ``default_truth_source`` and ``quirks``.

    Args:
        module: the memory module.
        name: backend name (``cuda``, ``npu``, ``sim``); defaults to the class's.
        default_truth_source: the truth source this device needs by default.
        quirks: the device's quirks.
    """

    name: str = "torch-like"
    default_truth_source: TruthSource = TruthSource.ALLOCATED_PEAK
    quirks: BackendQuirks = BackendQuirks()

    def __init__(
        self,
        module: Any,
        name: str | None = None,
        default_truth_source: TruthSource | str | None = None,
        quirks: BackendQuirks | None = None,
    ) -> None:
        self.module = module
        if name is not None:
            self.name = name
        if default_truth_source is not None:
            self.default_truth_source = TruthSource.parse(default_truth_source)
        if quirks is not None:
            self.quirks = quirks

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def _check(self, device: int) -> int:
        count = self.device_count()
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
            raise InvalidInputError(
                f"device {device!r} is out of range for backend {self.name!r}: "
                f"it sees {count} device(s), numbered 0..{count - 1}"
            )
        return device

    def device_count(self) -> int:
        return int(self.module.device_count())

    def mem_get_info(self, device: int) -> tuple[int, int]:
        free, total = self.module.mem_get_info(self._check(device))
        return int(free), int(total)

    def memory_stats(self, device: int) -> Mapping[str, int]:
        stats = self.module.memory_stats(self._check(device))
        return {str(k): int(v) for k, v in stats.items() if isinstance(v, (int, float))}

    def reset_peak_memory_stats(self, device: int) -> None:
        self.module.reset_peak_memory_stats(self._check(device))

    def empty_cache(self) -> None:
        self.module.empty_cache()

    def synchronize(self, device: int) -> None:
        self.module.synchronize(self._check(device))

    def allocator_limit(self, device: int) -> int | None:
        """The module's per-process memory fraction x the device's total, bytes.

        torch's and torch_npu's caching allocators refuse to reserve beyond
        ``fraction x total`` once ``set_per_process_memory_fraction`` set a
        fraction below 1 (``docs/backends.md``, "Allocator limit"). ``None``
        when the fraction is 1, or where the module cannot say (no
        ``get_per_process_memory_fraction``: torch before 2.8).
        """
        device = self._check(device)
        read = getattr(self.module, "get_per_process_memory_fraction", None)
        if not callable(read):
            return None
        fraction = float(read(device))
        if fraction >= 1.0:
            return None
        _, total = self.mem_get_info(device)
        return max(1, int(fraction * total))
