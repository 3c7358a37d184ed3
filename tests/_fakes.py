"""A base for the tests' fake ``torch.cuda``-shaped modules."""

from __future__ import annotations


class OneDeviceModule:
    """One device whose controls do nothing; a subclass supplies ``mem_get_info`` and
    ``memory_stats`` (the readings its test sets)."""

    def device_count(self) -> int:
        return 1

    def reset_peak_memory_stats(self, device: int) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def synchronize(self, device: int) -> None:
        pass
