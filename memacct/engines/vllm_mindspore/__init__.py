"""vllm-mindspore: vLLM's V0 block manager on MindSpore, and its start-up (:mod:`.startup`).

vllm-mindspore 0.2.0 keeps vLLM 0.7.3's V0 block count, ``available // cache_block_size``
with ``cache_block_size = block_size x layers x 2 x KV heads x head size x dtype`` (one
latent per layer for MLA, ``vllm_mindspore/worker/cache_engine.py``): for the full-attention
and MLA models it runs, the same blocks as vLLM's pool (:class:`VllmKVManager`), reported
under its own name. Sources in ``docs/engines.md`` and ``docs/simulator.md``.
"""

from __future__ import annotations

from memacct.engines.base import Engine, KVLayout, KVSettings
from memacct.engines.vllm.kv import VllmKVManager
from memacct.engines.vllm_mindspore.startup import STARTUP, VERSION
from memacct.model.spec import KVCacheSpec

__all__ = ["ENGINE", "VllmMindsporeKVManager"]


class VllmMindsporeKVManager(VllmKVManager):
    """vLLM's block pool as vllm-mindspore 0.2.0 sizes it (see the module docstring)."""

    name = "vllm-mindspore"
    version = VERSION

    def plan(self, spec: KVCacheSpec, budget_bytes: int, settings: KVSettings) -> KVLayout:
        """vLLM's pool for ``budget_bytes``, under vllm-mindspore's name and release."""
        layout = super().plan(spec, budget_bytes, settings)
        return layout.model_copy(update={"engine": self.name, "engine_version": self.version})


# No device named: the Ascend 910B1 (64 GB), an Ascend part memacct has a reading of.
ENGINE = Engine(
    name="vllm-mindspore", version=VERSION, kv=VllmMindsporeKVManager(), startup=STARTUP,
    default_device="ascend-910b1-64gb",
)
