"""A few torch calls over a SimDevice, so ported test bodies read like their originals.

Only what the ported tests call: tensors of a dtype and shape (``empty``), their
deletion, and the ``torch.cuda`` memory functions (through ``SimDevice.api``).
"""

from __future__ import annotations

import math

from memacct.sim import SimDevice

DTYPE_BYTES = {"float32": 4, "int8": 1}


class Tensor:
    """A device allocation of ``numel`` elements; :meth:`delete` frees it."""

    def __init__(self, dev: SimDevice, numel: int, dtype: str = "float32") -> None:
        self.dev = dev
        self._numel = numel
        self.ptr = dev.malloc(numel * DTYPE_BYTES[dtype])

    def numel(self) -> int:
        return self._numel

    def delete(self) -> None:
        if self.ptr is not None:
            self.dev.free(self.ptr)
            self.ptr = None  # type: ignore[assignment]


def empty(dev: SimDevice, *shape: int, dtype: str = "float32") -> Tensor:
    """``torch.empty(*shape, dtype=dtype, device=...)``."""
    return Tensor(dev, math.prod(shape), dtype)
