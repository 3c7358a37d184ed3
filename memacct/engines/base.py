"""The interface every engine implements: its KV-cache manager and its start-up model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Engine", "StartupModel"]


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


class StartupModel(Protocol):
    """An engine's start-up as it bears on memory (``engines/<name>/startup.py``)."""

    name: str
    version: str

    def defaults(self, total_memory: int, device_name: str) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine picks on this device."""
        ...

    def estimate(
        self,
        config: Mapping[str, Any],
        *,
        total_memory: int,
        device_name: str = "",
        settings: Any = None,
        weights: Any = None,
    ) -> Any:
        """One rank before the KV cache: weights, activation, non-torch, graphs, KV budget."""
        ...
