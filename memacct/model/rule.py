"""The rule that reads one family of architectures (:mod:`memacct.model.arch_rules` maps
vLLM's model modules to these)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Rule", "Status"]

Status = Literal["exact", "partial"]


@dataclass(frozen=True)
class Rule:
    """One family's layout, with where it is read from.

    Attributes:
        layout: the layout function's name in :data:`memacct.model.layouts.LAYOUTS`.
        status: ``exact`` (layers and geometry as vLLM's model file builds
            them) or ``partial`` (planned, with what is not modelled in ``note``).
        source: the vLLM model file and transformers config class it follows.
        reads: geometry fields beyond the common ones this layout reads.
        note: what a ``partial`` rule leaves out.
        refuse_if: a config field that, when set (truthy), takes the architecture
            outside the rule: a refusal naming it.
        prefix_caching: whether the model supports Mamba prefix caching
            (``SupportsMambaPrefixCaching``); without it vLLM turns prefix caching
            off and a state keeps one block.
        pipeline_parallel: whether the model class supports pipeline parallelism
            (``SupportsPP``); vLLM refuses more than one stage otherwise
            (``ModelConfig.verify_with_parallel_config``).
        defaults: ``(key, value)`` of the layer-shaping keys whose value the config
            class supplies when ``config.json`` leaves them out (transformers' class
            defaults), read as if written.
        layer_keys: the key the decoder-layer count is read from, where the model file
            reads another than ``num_hidden_layers`` (LongCat-Flash: ``num_layers``).
        tensor_parallel: whether the model class runs on more than one tensor-parallel
            rank (``dory.py`` refuses more than one).
    """

    layout: str
    status: Status
    source: str
    reads: frozenset[str] = frozenset()
    note: str = ""
    refuse_if: str | None = None
    prefix_caching: bool = True
    pipeline_parallel: bool = True
    defaults: tuple[tuple[str, object], ...] = ()
    layer_keys: tuple[str, ...] | None = None
    tensor_parallel: bool = True
