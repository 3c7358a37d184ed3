"""vllm-ascend: vLLM's KV-cache manager on Ascend NPUs.

vllm-ascend plugs its platform into vLLM and keeps vLLM's KV-cache grouping,
pool and refusal rules, so its KV plan is vLLM's (see ``docs/engines.md``). Its releases are
numbered after the vLLM each pins (:mod:`memacct.engines.vllm_ascend.releases`).
"""

from __future__ import annotations

from memacct.engines.base import Engine
from memacct.engines.vllm.kv import VllmKVManager
from memacct.engines.vllm_ascend.startup import STARTUP

__all__ = ["ENGINE"]

# No device named: the Ascend 910B1 (64 GB), an Ascend part memacct has a reading of.
ENGINE = Engine(name="vllm-ascend", version=STARTUP.version, kv=VllmKVManager(), startup=STARTUP,
                default_device="ascend-910b1-64gb")
