"""One family of multimodal models whose encoder pass memacct models, as a record.

Each family module under :mod:`memacct.engines.vllm.mm` (beside the built-in families of
:mod:`memacct.engines.vllm.multimodal`) exports one :class:`EncoderFamily` as ``FAMILY``
and is listed in ``multimodal.PLUGGED_FAMILIES``: the model types it reads, the vLLM modules it
covers (with the label the docs use), the ``--mm-processor-kwargs`` keys its processor
reads, its largest dummy item, and where its tower's weights are built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.items import Item

__all__ = ["EncoderFamily", "ItemContext"]


@dataclass(frozen=True)
class ItemContext:
    """What the profile run's budget knows besides the config and the multimodal settings."""

    seq_len: int  # max_model_len (or the model's position limit)
    dtype_bytes: int  # the model dtype's width
    tensor_parallel_size: int = 1
    version: tuple[int, int] | None = None  # the vLLM release (None: the newest)


def _always(config: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class EncoderFamily:
    """A family of multimodal models whose encoder pass and tower weights are modelled.

    ``item`` returns the profile's largest dummy item (``None``: the settings allow no item
    of any modality it encodes); ``accepts`` narrows ``model_types`` to the configs the rule
    reads (a tower kind it does not build answers False, and the plan says the pass is not
    modelled); ``towers`` gives, per vLLM module, the tower rule's description and its file
    under ``memacct/model/`` (docs/architectures.md); ``checked`` the modules whose tower
    parameter count vLLM 0.33's own model class confirmed (tools/golden_towers.py);
    ``max_per_prompt`` the items a prompt may carry where the processing-info class caps
    them (``get_supported_mm_limits``; vLLM takes the lesser of it and the user's limit,
    ``allowed_mm_limits``)."""

    model_types: frozenset[str]
    modules: Mapping[str, str]
    processor_keys: tuple[str, ...]
    item: Callable[[Mapping[str, Any], Multimodal, ItemContext], Item | None]
    towers: Mapping[str, tuple[str, str]]
    checked: frozenset[str] = frozenset()
    accepts: Callable[[Mapping[str, Any]], bool] = field(default=_always)
    max_per_prompt: Mapping[str, int] = field(default_factory=dict)
