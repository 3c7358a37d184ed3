"""torch_npu's caching allocator (preset ``npu``)."""

from __future__ import annotations

from typing import Any

from memacct.sim._core import CachingAllocator
from memacct.sim._errors import check_size
from memacct.sim._expandable import ExpandableSegmentsAllocator
from memacct.sim._memory import DeviceMemory
from memacct.units import format_size

__all__ = ["NpuCachingAllocator", "NpuExpandableAllocator"]


class NpuCachingAllocator(CachingAllocator):
    """Ascend torch_npu's caching allocator, modelled (preset ``npu``).

    The torch-cuda rules, except that every request is padded by 32 bytes
    before rounding to 512 (a 512-byte request takes 1024 bytes), and that
    the allocator keeps an operator *workspace* beside its pools.

    The workspace is modelled as one cached amount of device memory
    (:meth:`reserve_workspace` grows it to the largest workspace an operator
    asked for; it is never shrunk while cached). It belongs to the process
    but not to the pools, so it is not in ``reserved_bytes``: memacct sees it
    as non-allocator memory. :meth:`empty_cache` releases it, as
    ``torch.npu.empty_cache()`` does, and an allocation that fails releases it
    together with the wholly free segments before its one retry.

    Args:
        device_memory: where segments and the workspace are mapped from.
        **settings: the torch-cuda settings (``max_split_size_mb``, ...), which
            ``PYTORCH_NPU_ALLOC_CONF`` takes too.
    """

    name = "npu"
    oom_hint = (
        "If reserved but unallocated memory is large, "
        "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True avoids that fragmentation."
    )
    growth_granularity_bytes = 2 * 1024 * 1024
    _pad = 32

    def __init__(self, device_memory: DeviceMemory, **settings: Any) -> None:
        super().__init__(device_memory, **settings)
        self._workspace = 0

    @property
    def workspace(self) -> int:
        """Bytes of the cached operator workspace."""
        return self._workspace

    def reserve_workspace(self, nbytes: int) -> None:
        """An operator needs a workspace of ``nbytes``: grow the cached workspace to fit.

        If the device has not enough free memory, the allocator's wholly free
        segments are released first.

        Raises:
            SimOutOfMemory: the workspace cannot grow even then.
        """
        nbytes = check_size(nbytes)
        extra = nbytes - self._workspace
        if extra <= 0:
            return
        if not self._device.map(extra):
            self._release_cached()
            if not self._device.map(extra):
                free = self._device.free
                raise self._refusal(
                    f"Simulated device out of memory (npu allocator): tried to grow the "
                    f"operator workspace from {format_size(self._workspace)} to "
                    f"{format_size(nbytes)} ({extra} bytes more), but only "
                    f"{format_size(free)} of {format_size(self._device.total)} is free. "
                    "Free memory or run the operator on smaller inputs.",
                    extra,
                    extra,
                )
        self._workspace = nbytes

    def release_workspace(self) -> int:
        """Give the cached workspace back to the device; return the bytes released."""
        released = self._workspace
        if released:
            self._device.unmap(released)
            self._workspace = 0
        return released

    def empty_cache(self) -> None:
        """Release wholly free segments and the cached workspace."""
        super().empty_cache()
        self.release_workspace()

    def _release_for_retry(self) -> None:
        self._release_cached()
        self.release_workspace()



class NpuExpandableAllocator(ExpandableSegmentsAllocator):
    """torch_npu's allocator with ``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True``.

    The ``torch-cuda-expandable`` model (pages of 2 MiB in the small pool, 20 MiB in
    the large one) with torch_npu's 32-byte padding before rounding to 512. The
    operator workspace of the ``npu`` preset is not modelled here.

    Args:
        device_memory: where pages are mapped from.
        **settings: the torch-cuda settings.
    """

    name = "npu-expandable"
    _pad = 32

