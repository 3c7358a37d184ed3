"""A multimodal model's encoder tower and projector, tensor by tensor, from its ``config.json``.

One rule per tower kind, each following the module vLLM 0.33 builds, one module per
family of towers: :mod:`.clip` (CLIP, SigLIP, Pixtral), :mod:`.internvit`, :mod:`.qwen`
(the Qwen3-VL ViT), :mod:`.whisper` (audio encoders), :mod:`.llama4`; the building blocks
are in :mod:`.parts`. A new family is a module with ``TYPES`` (top-level ``model_type`` ->
tower kind) and ``RULES`` (tower kind -> rule), listed in :data:`_FAMILIES`.

Each :class:`TowerTensor` says whether the engine splits it across tensor-parallel ranks
(the linear layers) or keeps it whole (norms, embeddings, convolutions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memacct.model.towers import (
    clip,
    gemma4,
    glm,
    idefics,
    internvit,
    llama4,
    minicpm,
    omni,
    qwen,
    whisper,
)  # fmt: skip
from memacct.model.towers.parts import Out, TowerTensor

__all__ = ["TOWER_TYPES", "TowerTensor", "tower_kind", "tower_params", "tower_tensors"]

_FAMILIES = (clip, internvit, qwen, whisper, llama4, idefics, gemma4, minicpm, omni, glm)

TOWER_TYPES: dict[str, str] = {k: v for fam in _FAMILIES for k, v in fam.TYPES.items()}
"""Top-level ``model_type`` -> the tower kind whose rule builds its weights."""

_RULES: dict[str, Callable[[Mapping[str, Any]], Out]] = {
    k: v for fam in _FAMILIES for k, v in fam.RULES.items()}


def tower_kind(config: Mapping[str, Any]) -> str | None:
    """The tower kind whose rule builds this config's encoder (``None``: no rule here)."""
    kind = TOWER_TYPES.get(str(config.get("model_type", "")))
    if kind == "clip":
        vision = config.get("vision_config")
        vtype = vision.get("model_type", "clip_vision_model") if isinstance(vision, Mapping) else ""
        return kind if vtype in ("clip_vision_model", "pixtral", "siglip_vision_model") else None
    return kind


def tower_tensors(config: Mapping[str, Any]) -> list[TowerTensor] | None:
    """Every tensor of the tower and its projector, full shapes (``None``: no rule for this
    config's tower; see the module notes).

    Raises:
        ConfigError: a size the rule reads is missing or not a positive integer.
    """
    kind = tower_kind(config)
    return None if kind is None else _RULES[kind](config)


def tower_params(config: Mapping[str, Any]) -> int:
    """The tower's and projector's parameter count (0 without a rule)."""
    return sum(t.numel for t in tower_tensors(config) or ())
