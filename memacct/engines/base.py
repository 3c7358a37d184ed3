"""The interface every engine implements: its KV-cache manager and its start-up model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Engine"]


@dataclass(frozen=True)
class Engine:
    """One serving engine, as data plus small functions.

    Attributes:
        name: the engine's name (``"vllm"``, ``"vllm-ascend"``, ``"sglang"``).
        version: the engine release whose code the rules were taken from.
        kv: the engine's KV-cache manager (see ``docs/engines.md``).
        startup: the engine's start-up model (see ``docs/engines.md``), or
            ``None`` where memacct does not model it.
    """

    name: str
    version: str
    kv: Any
    startup: Any = None
