"""The ``sim`` backend: the simulated device through the torch-like adapter."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Literal

from memacct.backend import Availability, BackendQuirks
from memacct.errors import InvalidInputError
from memacct.models import TruthSource
from memacct.sim._errors import SimOutOfMemory
from memacct.sim._mindspore import MindSporeMemoryPool
from memacct.sim._mindspore_block import MindSporeBlockPool
from memacct.sim.allocator import PresetModel
from memacct.sim.device import SimDevice
from memacct.torchlike import TorchLikeBackend

__all__ = ["SimBackend"]

# The truth source each simulated allocator's real counterpart uses by default.
_DEFAULT_TRUTH = {
    "mindspore": TruthSource.RESERVED,
    "mindspore-block": TruthSource.RESERVED,
}
# How each allocator rounds a large tensor to its growth granularity (BackendQuirks);
# the others give each large tensor its own segment rounded up to a multiple.
_GROWTH_ROUNDING: dict[str, Literal["multiple", "packed", "doubling"]] = {
    "torch-cuda-expandable": "packed",
    "npu-expandable": "packed",
    "mindspore": "packed",
    "mindspore-block": "doubling",
}


class SimBackend(TorchLikeBackend):
    """Backend over a :class:`~memacct.sim.SimDevice` (registered as ``sim``).

    Args:
        device: the simulated device; a new one is made from the other
            arguments when omitted.
        preset: device preset for a new device (``h100-80gb``, ...).
        allocator: allocator preset for a new device (``torch-cuda``, ...).
        total_bytes: capacity for a new device instead of a preset.
    """

    name = "sim"
    out_of_memory_errors = (SimOutOfMemory,)
    # Never chosen over a real device; the fallback when there is none.
    priority = 0

    def __init__(
        self,
        device: SimDevice | None = None,
        *,
        preset: str = "h100-80gb",
        allocator: str = "torch-cuda",
        total_bytes: int | None = None,
    ) -> None:
        if device is None:
            device = SimDevice(preset, allocator, total_bytes=total_bytes)
        elif not isinstance(device, SimDevice):
            raise InvalidInputError(
                f"device must be a memacct.sim.SimDevice, got {device!r}: the sim backend "
                "sees one device, index 0; give a device index to snapshot(), not here"
            )
        self.sim_device = device
        alloc = device.allocator
        self._model = PresetModel(alloc.name)
        super().__init__(
            device.api,
            name="sim",
            default_truth_source=_DEFAULT_TRUTH.get(alloc.name, TruthSource.ALLOCATED_PEAK),
            quirks=BackendQuirks(
                growth_granularity_bytes=int(alloc.growth_granularity_bytes),
                growth_rounding=_GROWTH_ROUNDING.get(alloc.name, "multiple"),
                # The simulated Ascend allocator's empty_cache() also frees its workspace,
                # which is memory outside the allocator: the real torch_npu's quirk.
                empty_cache_releases_runtime_memory=alloc.name == "npu",
            ),
        )

    @property
    def allocator_model(self) -> PresetModel:
        """The device's own allocator preset, which ``auto``'s replay runs traces through."""
        return self._model

    @classmethod
    def availability(cls) -> Availability:
        """Always available: the simulated device needs no hardware."""
        return Availability(True, "simulated device; needs no hardware")

    def process_memory(self, device: int) -> int | None:
        """This process's device memory: the allocator's reservation plus non-allocator memory."""
        self._check(device)
        return int(self.sim_device.process_memory)

    def consistent_reading(self, device: int) -> threading.RLock:
        """The device's lock: held while a snapshot reads, so its readings are one state."""
        return self.sim_device.lock

    def device_identity(self, device: int) -> Hashable:
        """Each simulated device is its own physical device."""
        return ("sim", id(self.sim_device), device)

    def allocator_limit(self, device: int) -> int | None:
        """The most bytes the simulated allocator may reserve; ``None`` when it has no cap.

        MindSpore's pools: their budget (``max_device_memory``, else MindSpore's
        default from the free memory), once the pool has taken it at its first
        request. The torch-style presets: ``memory_fraction x total`` when a
        fraction below 1 is set (``set_memory_fraction``, torch's
        ``set_per_process_memory_fraction``).
        """
        self._check(device)
        alloc = self.sim_device.allocator
        if isinstance(alloc, (MindSporeMemoryPool, MindSporeBlockPool)):
            return alloc.budget_bytes
        return super().allocator_limit(device)

    def __repr__(self) -> str:
        return f"SimBackend({self.sim_device!r})"
