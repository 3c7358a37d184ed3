"""vLLM: its KV-cache manager (:mod:`memacct.engines.vllm.kv`) behind :class:`Engine`."""

from __future__ import annotations

from memacct.engines.base import Engine
from memacct.engines.vllm.kv import VLLM_VERSION, VllmKVManager
from memacct.engines.vllm.startup import STARTUP

__all__ = ["ENGINE"]

ENGINE = Engine(name="vllm", version=VLLM_VERSION, kv=VllmKVManager(), startup=STARTUP)
