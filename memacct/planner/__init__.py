"""The planner: how many KV-cache bytes and blocks a rank gets, and why.

* :class:`KVCacheSpec` reads a model's ``config.json`` into bytes per token per rank;
* :func:`plan_kv_cache` turns a :class:`~memacct.ProfileResult` and a spec into a
  :class:`KVCachePlan` (bytes, blocks, concurrency, provenance, report);
* :func:`agree` makes every rank of a process group take the smallest block count;
* :func:`model_presets` / :func:`load_model_preset` give the shipped configs of
  well-known models.

Example, from a saved profile::

    >>> import memacct
    >>> spec = memacct.KVCacheSpec.from_preset("qwen2.5-7b")
    >>> spec.bytes_per_token == 2 * 28 * 4 * 128 * 2
    True

Importing the planner imports no framework: :func:`agree` imports torch when called.
"""

from __future__ import annotations

from memacct.model.config import ModelConfig
from memacct.model.sources.presets import load_model_preset, model_presets
from memacct.model.spec import KVCacheSpec, LayerGroup, kv_dtype_bytes, pipeline_partition
from memacct.planner.agree import agree
from memacct.planner.plan import load_profile, plan_kv_cache, save_profile
from memacct.planner.result import Agreement, KVCachePlan, Provenance

__all__ = [
    "Agreement",
    "KVCachePlan",
    "KVCacheSpec",
    "LayerGroup",
    "ModelConfig",
    "Provenance",
    "agree",
    "kv_dtype_bytes",
    "load_model_preset",
    "load_profile",
    "model_presets",
    "pipeline_partition",
    "plan_kv_cache",
    "save_profile",
]
