"""Stand-ins the cuda backend's tests share."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["WithProperties"]


class WithProperties:
    """A torch.cuda-shaped module that also answers get_device_properties."""

    def __init__(self, module: Any, **properties: Any) -> None:
        self._module = module
        self._properties = SimpleNamespace(**properties)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def get_device_properties(self, device: int) -> Any:
        return self._properties
