"""The building blocks of the tower rules: one tensor, linear layers and norms as vLLM's
parallel layers hold them, a ViT layer, the config readers every rule shares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.errors import ConfigError

__all__ = ["Out", "TowerTensor", "int_key", "layers_to", "linear", "norm", "section_of",
           "text_hidden", "text_section", "vit_layer"]


@dataclass(frozen=True)
class TowerTensor:
    """One tensor of the tower or projector: its name, full shape, and whether tensor
    parallelism splits it."""

    name: str
    shape: tuple[int, ...]
    split: bool

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


Out = list[TowerTensor]
"""What a rule appends to: every tensor of the tower and projector."""


def int_key(section: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}: the tower's config gives {value!r}; it must be a positive "
                          "integer (set it in config.json's vision or audio section)")
    return value


def section_of(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: the config has no {key} section; a "
                          f"{config.get('model_type')} model's tower is read from it")
    return value


def text_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config"):
        section = config.get(key)
        if isinstance(section, Mapping) and section.get("hidden_size"):
            return section
    return config


def text_hidden(config: Mapping[str, Any]) -> int:
    return int_key(text_section(config), "hidden_size")


def linear(out: Out, name: str, rows: int, cols: int, bias: bool = True, *,
            split: str = "column") -> None:  # fmt: skip
    """A linear layer: ``split`` "column" (its rows and bias split across ranks), "row" (its
    columns split, the bias whole) or "none" (a plain ``nn.Linear``, whole on every rank)."""
    out.append(TowerTensor(f"{name}.weight", (rows, cols), split != "none"))
    if bias:
        out.append(TowerTensor(f"{name}.bias", (rows,), split == "column"))


def norm(out: Out, name: str, width: int, bias: bool = True) -> None:
    out.append(TowerTensor(f"{name}.weight", (width,), False))
    if bias:
        out.append(TowerTensor(f"{name}.bias", (width,), False))


def vit_layer(out: Out, p: str, h: int, inner: int, *, qkv_bias: bool = True,
               norm_bias: bool = True) -> None:  # fmt: skip
    norm(out, f"{p}.norm1", h, norm_bias)
    linear(out, f"{p}.attn.qkv", 3 * h, h, qkv_bias)
    linear(out, f"{p}.attn.proj", h, h, split="row")
    norm(out, f"{p}.norm2", h, norm_bias)
    linear(out, f"{p}.mlp.fc1", inner, h)
    linear(out, f"{p}.mlp.fc2", h, inner, split="row")


def layers_to(total: int, feature_layer: Any) -> int:
    """Layers built up to a feature layer (``get_layer_index``: a negative index counts from
    the end, -1 is every layer); a list takes its deepest."""
    if isinstance(feature_layer, list) and feature_layer:
        return max(layers_to(total, f) for f in feature_layer)
    if isinstance(feature_layer, int) and not isinstance(feature_layer, bool):
        return feature_layer + total + 1 if feature_layer < 0 else feature_layer
    return total
