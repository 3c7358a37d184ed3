"""Layouts of the text models that multimodal model files of vLLM 0.33 build of their own.

Intern-S2-Mobius (``vllm/model_executor/models/interns2_mobius.py``,
``InternS2MobiusDecoderLayer.__init__``) builds a Qwen3.5 gated delta net
(``QwenGatedDeltaNetAttention``) where ``layer_types[i]`` is ``linear_attention`` and
Qwen3-Next's attention (``Qwen3NextAttention``) where it is ``full_attention``, and raises
on any other kind; it reads the list by position, whatever the text config's model type
(a remote-code class), so this layout does not go through the model-type table of
:mod:`memacct.model.layouts`. The states are sized by ``states._gdn`` (vLLM's
``mamba_utils.gated_delta_net_state_shape``).
"""

from __future__ import annotations

from collections.abc import Callable

from memacct.errors import ConfigError
from memacct.model.config import ModelConfig

__all__ = ["MM_LAYOUTS"]

Kind = tuple[str, int | None]

_MOBIUS_KINDS: dict[str, Kind] = {"linear_attention": ("gdn", None),
                                  "full_attention": ("full", None)}


def _mobius(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Intern-S2-Mobius: a gated delta net or full attention per ``layer_types[i]``."""
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != n:
        raise ConfigError(
            f"{cfg.source}: layer_types must list one type per layer ({n}): "
            f"interns2_mobius.py builds each layer from it; fix layer_types"
        )
    bad = sorted({str(t) for t in types} - set(_MOBIUS_KINDS))
    if bad:
        raise ConfigError(
            f"{cfg.source}: layer_types lists {', '.join(bad)}, which interns2_mobius.py "
            f"refuses (it builds linear_attention and full_attention only): fix layer_types"
        )
    return [[_MOBIUS_KINDS[str(t)]] for t in types]


MM_LAYOUTS: dict[str, Callable[[ModelConfig, int], list[list[Kind]]]] = {
    "mobius": _mobius,
}
"""Layout name -> the layout (merged into :data:`memacct.model.layouts.LAYOUTS`)."""
