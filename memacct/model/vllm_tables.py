"""vLLM 0.33's tables as shipped with memacct: its model registry and the config keys its
model files read.

``vllm_registry.json`` (``tools/vllm_registry_copy.py``) maps each architecture to the
model module vLLM loads; ``vllm_config_keys.json`` (``tools/vllm_config_keys.py``) lists
the config keys each module's source reads. The architecture rules
(:mod:`memacct.model.arch_rules`) read both through this module.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from memacct.model.config_keys import MODULE_NOT_CACHE_SHAPING, is_layer_shaping

__all__ = ["engine_keys", "module_of", "registry", "removed"]


@cache
def registry() -> dict[str, dict[str, str]]:
    """vLLM's registry tables: ``{table: {architecture: module}}`` (``vllm_registry.json``)."""
    text = resources.files("memacct.model").joinpath("vllm_registry.json").read_text("utf-8")
    tables: dict[str, dict[str, str]] = json.loads(text)["tables"]
    return tables


@cache
def removed() -> dict[str, str]:
    """Architectures vLLM no longer runs: ``{architecture: last version that ran it}``."""
    text = resources.files("memacct.model").joinpath("vllm_registry.json").read_text("utf-8")
    gone: dict[str, str] = json.loads(text).get("removed", {})
    return gone


def module_of(architecture: str) -> str | None:
    for table in registry().values():
        if architecture in table:
            return table[architecture]
    return None


@cache
def engine_keys(module: str) -> frozenset[str]:
    """The layer-shaping config keys vLLM 0.33's ``module`` reads (``vllm_config_keys.json``,
    grepped from the model file by ``tools/vllm_config_keys.py``), less the ones that file
    reads for no cache (``config_keys.MODULE_NOT_CACHE_SHAPING``)."""
    text = resources.files("memacct.model").joinpath("vllm_config_keys.json").read_text("utf-8")
    keys: list[str] = json.loads(text)["modules"].get(module, [])
    ignored = MODULE_NOT_CACHE_SHAPING.get(module, {})
    return frozenset(k for k in keys if is_layer_shaping(k) and k not in ignored)
