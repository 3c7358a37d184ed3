"""Model presets: the published ``config.json`` of well-known models, shipped as package data.

Each preset is the model's ``config.json`` as its publisher ships it on the
Hugging Face Hub, under ``memacct/model/configs/<name>.json``. They let the
planner, the simulated device and the tests work without network access.

=====================  ==========================================  ===========================
preset                 Hub repository                              what it exercises
=====================  ==========================================  ===========================
llama-3.1-8b           meta-llama/Llama-3.1-8B-Instruct            grouped-query attention
llama-3.1-70b          meta-llama/Llama-3.1-70B-Instruct           grouped-query, 80 layers
llama-3.1-8b-fp8       nvidia/Llama-3.1-8B-Instruct-FP8            FP8 KV cache from ModelOpt
llama-4-scout          meta-llama/Llama-4-Scout-17B-16E-Instruct   text_config, MoE, chunked
qwen2.5-7b             Qwen/Qwen2.5-7B-Instruct                    use_sliding_window false
qwen3-8b               Qwen/Qwen3-8B                               explicit head_dim
qwen3-30b-a3b          Qwen/Qwen3-30B-A3B                          MoE (num_experts)
mistral-7b             mistralai/Mistral-7B-v0.1                   sliding window, every layer
mixtral-8x7b           mistralai/Mixtral-8x7B-Instruct-v0.1        MoE (num_local_experts)
gemma-2-9b             google/gemma-2-9b-it                        alternating sliding window
gemma-3-12b            google/gemma-3-12b-it                       text_config, 5:1 pattern
gpt-oss-20b            openai/gpt-oss-20b                          layer_types, no dtype
deepseek-v3            deepseek-ai/DeepSeek-V3                     MLA, MoE, FP8 weights
deepseek-v2-lite       deepseek-ai/DeepSeek-V2-Lite-Chat           MLA
cohere2-7b             CohereLabs/c4ai-command-r7b-12-2024         sliding window + 1, 3:1
gemma-3n-e4b           google/gemma-3n-E4B-it                      KV sharing (weights: checkpoint)
qwen3-next-80b-a3b     Qwen/Qwen3-Next-80B-A3B-Instruct            gated delta net hybrid
granite-4.0-h-small    ibm-granite/granite-4.0-h-small             Mamba2 hybrid
=====================  ==========================================  ===========================
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from memacct.errors import ConfigError

__all__ = ["NEEDS_CHECKPOINT", "load_model_preset", "model_presets", "offline_presets"]

_PACKAGE = "memacct.model"
_FOLDER = "configs"


NEEDS_CHECKPOINT: dict[str, str] = {
    "gemma-3n-e4b": (
        "its KV cache plans from config.json, its weights do not: the formulas do not size "
        "Gemma 3n's per-layer inputs, AltUp and LAuReL blocks, and vLLM 0.33 builds its vision "
        "and audio towers with transformers' AutoModel.from_config "
        "(vllm/model_executor/models/gemma3n_mm.py; the vision tower is timm's MobileNet-V5), "
        "which this config.json does not describe; plan it with --model google/gemma-3n-E4B-it "
        "or the checkpoint's directory (the weights are then read from its safetensors headers)"
    ),
}
"""Presets whose weights memacct cannot size without the checkpoint, with the reason."""


def offline_presets() -> list[str]:
    """The presets ``memacct plan --model NAME`` plans without a checkpoint, sorted."""
    return [name for name in model_presets() if name not in NEEDS_CHECKPOINT]


def model_presets() -> list[str]:
    """Names of the shipped model presets, sorted."""
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    names = (entry.name for entry in folder.iterdir())
    return sorted(name.removesuffix(".json") for name in names if name.endswith(".json"))


def load_model_preset(name: str) -> dict[str, Any]:
    """The published ``config.json`` of a model preset, as a fresh dict.

    Args:
        name: a preset name from :func:`model_presets` (case-insensitive).

    Raises:
        ConfigError: no preset has that name; the message lists the names.
    """
    names = model_presets()
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in names:
        raise ConfigError(
            f"unknown model preset {name!r}: use one of {', '.join(names)}, "
            f"or give the path of the model's config.json"
        )
    entry = resources.files(_PACKAGE).joinpath(_FOLDER).joinpath(f"{key}.json")
    text = entry.read_text(encoding="utf-8")
    config: dict[str, Any] = json.loads(text)
    return config
