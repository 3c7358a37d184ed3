"""Serving engines: how each engine sizes its KV cache and what its start-up costs.

One subpackage per engine, each behind the same interface
(:class:`~memacct.engines.base.Engine`):

* ``kv``: the engine's KV-cache manager as rules plus small functions (how it
  groups layers, how many blocks one request needs, how it turns a byte
  budget into blocks, tokens and concurrency, when it refuses);
* ``startup``: the engine's start-up sequence as it bears on memory (what its
  profile run allocates, graph capture, memory outside the allocator, its
  defaults per device class, how it rounds the budget).

Shared by every engine: :mod:`memacct.engines.base` (the interfaces),
:mod:`memacct.engines.accepts` (what each engine accepts), :mod:`memacct.engines.deployment`
and :mod:`memacct.engines.forward` (the allocation trace of a dummy forward pass, whose
peaks the offline start-up estimates take). This floor imports the model's reading
(:mod:`memacct.model`) and the core, never the planner: the plan without a device
(:mod:`memacct.planner.offline`) is a floor above and calls the engines. An engine start
on the simulated device is the harness's (``memacct_bench.simulate_engine_start``).

A new engine is a new subpackage registered in :data:`ENGINE_MODULES`, never
a branch in the planner.
"""

from __future__ import annotations

import importlib

from memacct.engines.base import Engine
from memacct.errors import InvalidInputError

__all__ = ["ENGINE_MODULES", "Engine", "engine_names", "get_engine"]

ENGINE_MODULES: dict[str, str] = {
    "vllm": "memacct.engines.vllm",
    "vllm-ascend": "memacct.engines.vllm_ascend",
    "vllm-mindspore": "memacct.engines.vllm_mindspore",
    "sglang": "memacct.engines.sglang",
}
"""Engine name -> module whose ``ENGINE`` attribute is its :class:`Engine`."""


def engine_names() -> tuple[str, ...]:
    """The names :func:`get_engine` accepts."""
    return tuple(ENGINE_MODULES)


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (``"vllm"``, ``"vllm-ascend"``, ``"sglang"``).

    Raises:
        InvalidInputError: no engine has that name.
    """
    module_name = ENGINE_MODULES.get(name) if isinstance(name, str) else None
    if module_name is None:
        raise InvalidInputError(
            f"engine {name!r} is not known: use one of {', '.join(ENGINE_MODULES)}"
        )
    engine: Engine = importlib.import_module(module_name).ENGINE
    return engine
