"""Each layer of a model as a KV-cache manager sees it, read from its ``config.json``.

:func:`layer_specs` turns a config into one :class:`LayerSpec` per layer:
full attention, a sliding window (Gemma, gpt-oss, Mistral, Cohere2), chunked
local attention (Llama 4), multi-head latent attention, a Mamba2 or gated
delta net state (Granite-4.0-H, Qwen3-Next, Nemotron-H) with its bytes per
request on one rank, a layer with no cache, or a layer that reads an earlier
layer's KV cache (Gemma-3n). Which layer is which follows the model's own
code in the engines; ``docs/engines.md`` cites it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memacct.errors import ConfigError, InvalidInputError
from memacct.planner.config import (
    _DTYPE_ALIASES,
    _KV_DTYPES,
    _MAX_DIM,
    _MAX_HEADS,
    _MAX_LAYERS,
    _MAX_POSITIONS,
    _Config,
)

__all__ = ["LayerKind", "LayerSpec", "layer_kinds", "layer_specs", "state_bytes"]

_FROZEN = ConfigDict(frozen=True, extra="forbid", validate_default=True)

LayerKind = Literal["full", "sliding", "chunked", "mla", "mamba", "none"]


class LayerSpec(BaseModel):
    """One layer of the model, as a KV-cache manager sees it (one rank).

    Attributes:
        kind: ``"full"`` (attends to every token), ``"sliding"`` (a window),
            ``"chunked"`` (chunked local attention, Llama 4), ``"mla"``
            (multi-head latent attention), ``"mamba"`` (a per-request state:
            Mamba, gated delta net and other linear attention) or ``"none"``
            (a layer with no cache, e.g. Nemotron-H's MLP layers).
        bytes_per_token: KV-cache bytes one token needs in this layer on one
            rank (0 for ``mamba`` and ``none`` layers and for KV-sharing layers).
        window: tokens a sliding layer attends to (``None`` otherwise).
        chunk: the attention chunk of a chunked layer (``None`` otherwise).
        state_bytes: bytes of one request's state on one rank (``mamba`` only).
        state_kind: ``"mamba2"``, ``"mamba1"`` or ``"gdn"`` (``mamba`` only).
        shares_kv_with: the layer whose KV cache this layer reads instead of
            keeping its own (KV sharing, Gemma-3n), or ``None``.
    """

    model_config = _FROZEN

    kind: LayerKind
    bytes_per_token: int = Field(default=0, ge=0)
    window: int | None = Field(default=None, gt=0)
    chunk: int | None = Field(default=None, gt=0)
    state_bytes: int | None = Field(default=None, gt=0)
    state_kind: Literal["mamba1", "mamba2", "gdn"] | None = None
    shares_kv_with: int | None = Field(default=None, ge=0)

    @property
    def has_cache(self) -> bool:
        """Whether the layer keeps a cache of its own."""
        if self.shares_kv_with is not None or self.kind == "none":
            return False
        return self.kind == "mamba" or self.bytes_per_token > 0


_Kind = tuple[str, int | None]  # (kind, window or chunk) of one layer


def layer_kinds(cfg: _Config, num_layers: int) -> list[_Kind]:
    """Each layer's kind and window or chunk, as the model's code decides it.

    Kinds: ``full``, ``sliding`` (with its window), ``chunked`` (with its
    chunk), ``gdn``/``mamba2`` (linear-attention or Mamba state) and ``none``.
    """
    window = cfg.integer(("sliding_window",), _MAX_POSITIONS)
    # Cohere2 attends to [pos - window, pos]: window + 1 tokens.
    span = None if window is None else window + (1 if cfg.model_type == "cohere2" else 0)
    chunk = cfg.integer(("attention_chunk_size",), _MAX_POSITIONS)
    if cfg.model_type == "llama4_text" or (cfg.model_type == "llama4" and chunk is not None):
        return _llama4_kinds(cfg, num_layers, chunk)
    if cfg.model_type == "nemotron_h":
        return _nemotron_h_kinds(cfg, num_layers)
    layer_types = cfg.get("layer_types")
    if layer_types is None and cfg.model_type == "qwen3_next":
        interval = cfg.integer(("full_attention_interval",), _MAX_LAYERS) or 4
        layer_types = [
            "linear_attention" if (i + 1) % interval else "full_attention"
            for i in range(num_layers)
        ]
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            count = len(layer_types) if isinstance(layer_types, list) else type(layer_types)
            raise ConfigError(
                f"{cfg.source}: layer_types must list one type per layer ({num_layers}), "
                f"got {count}: fix layer_types or num_hidden_layers"
            )
        kinds: list[_Kind] = []
        for i, kind in enumerate(layer_types):
            if kind == "sliding_attention":
                if span is None:
                    raise ConfigError(
                        f"{cfg.source}: layer_types[{i}] is 'sliding_attention' but "
                        f"sliding_window is not set: add sliding_window"
                    )
                kinds.append(("sliding", span))
            elif kind in ("full_attention", "attention"):
                kinds.append(("full", None))
            elif kind == "chunked_attention":
                kinds.append(("chunked", chunk) if chunk is not None else ("full", None))
            elif kind == "linear_attention" and cfg.model_type in _GDN_TYPES:
                kinds.append(("gdn", None))
            elif kind in ("mamba", "linear_attention") and cfg.model_type in _MAMBA2_TYPES:
                kinds.append(("mamba2", None))
            else:
                raise ConfigError(
                    f"{cfg.source}: layer_types[{i}] = {kind!r}: memacct sizes "
                    f"'full_attention', 'sliding_attention' and 'chunked_attention' layers, "
                    f"Qwen3-Next's 'linear_attention' and Granite-4.0-H's 'mamba'; this "
                    f"kind keeps a per-request state memacct does not model for "
                    f"{cfg.model_type}"
                )
        return kinds
    if span is None:
        return [("full", None)] * num_layers
    if cfg.get("use_sliding_window") is False:
        cfg.notes.append(f"sliding_window {window} ignored: use_sliding_window is false")
        return [("full", None)] * num_layers
    pattern = cfg.integer(("sliding_window_pattern", "_sliding_window_pattern"), _MAX_LAYERS)
    if pattern is not None:
        # Every pattern-th layer (1-based) attends globally; the rest slide.
        return [("full", None) if (i + 1) % pattern == 0 else ("sliding", span)
                for i in range(num_layers)]
    window_layers = cfg.integer(("max_window_layers",), _MAX_LAYERS, low=0)
    if window_layers is not None and cfg.get("use_sliding_window") is True:
        # Qwen2's rule: the first max_window_layers layers attend globally.
        return [("sliding", span) if i >= window_layers else ("full", None)
                for i in range(num_layers)]
    return [("sliding", span)] * num_layers


_GDN_TYPES = ("qwen3_next",)
_MAMBA2_TYPES = ("granitemoehybrid", "nemotron_h")


def _llama4_kinds(cfg: _Config, num_layers: int, chunk: int | None) -> list[_Kind]:
    """Llama 4: layers without RoPE attend globally, the others to their chunk."""
    nope = cfg.get("no_rope_layers")
    if not nope:
        interval = cfg.integer(("no_rope_layer_interval",), _MAX_LAYERS) or 4
        nope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if not isinstance(nope, list) or len(nope) != num_layers:
        raise ConfigError(
            f"{cfg.source}: no_rope_layers must list one flag per layer ({num_layers}): "
            f"fix no_rope_layers"
        )
    if chunk is None:
        return [("full", None)] * num_layers
    return [("full", None) if flag == 0 else ("chunked", chunk) for flag in nope]


def _nemotron_h_kinds(cfg: _Config, num_layers: int) -> list[_Kind]:
    """Nemotron-H: ``M`` Mamba2, ``*`` attention, ``-``/``E`` MLP or MoE (no cache)."""
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != num_layers:
        raise ConfigError(
            f"{cfg.source}: hybrid_override_pattern must have one character per layer "
            f"({num_layers}): fix hybrid_override_pattern"
        )
    table: dict[str, _Kind] = {"M": ("mamba2", None), "*": ("full", None)}
    return [table.get(c, ("none", None)) for c in pattern]


def layer_specs(
    cfg: _Config, kinds: Sequence[_Kind], per_layer: int, state_bytes: dict[str, int]
) -> list[LayerSpec]:
    """One :class:`LayerSpec` per layer; the last ``num_kv_shared_layers`` share KV."""
    num_layers = len(kinds)
    shared = cfg.integer(("num_kv_shared_layers",), _MAX_LAYERS, low=0) or 0
    if shared >= num_layers:
        raise ConfigError(
            f"{cfg.source}: num_kv_shared_layers = {shared} leaves no layer of the "
            f"{num_layers} with a KV cache of its own: fix num_kv_shared_layers"
        )
    first_shared = num_layers - shared
    layers: list[LayerSpec] = []
    for i, (kind, size) in enumerate(kinds):
        if kind in ("gdn", "mamba2"):
            layers.append(LayerSpec(kind="mamba", state_bytes=state_bytes[kind], state_kind=kind))
            continue
        if kind == "none":
            layers.append(LayerSpec(kind="none"))
            continue
        target: int | None = None
        if i >= first_shared:
            # Shared layers read the last earlier layer of the same kind (Gemma-3n).
            same = [j for j in range(first_shared) if kinds[j] == (kind, size)]
            target = same[-1] if same else first_shared - 1
        layers.append(LayerSpec(
            kind=kind,
            bytes_per_token=0 if target is not None else per_layer,
            window=size if kind == "sliding" else None,
            chunk=size if kind == "chunked" else None,
            shares_kv_with=target,
        ))
    if shared:
        cfg.notes.append(
            f"the last {shared} layers share the KV cache of earlier layers "
            f"(num_kv_shared_layers) and keep none of their own"
        )
    return layers


def state_bytes(
    cfg: _Config, kinds: Sequence[_Kind], hidden: int, tp: int, dtype_bytes: int | None
) -> tuple[dict[str, int], int | None]:
    """Bytes of one request's state per Mamba / linear-attention layer, on one rank."""
    present = {kind for kind, _ in kinds if kind in ("gdn", "mamba2")}
    if not present:
        return {}, None
    model_bytes = dtype_bytes or 2
    ssm_name = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype")
    ssm_bytes = model_bytes
    if isinstance(ssm_name, str):
        name = _DTYPE_ALIASES.get(ssm_name.lower().removeprefix("torch."), ssm_name.lower())
        ssm_bytes = _KV_DTYPES.get(name, model_bytes)
    sizes: dict[str, int] = {}
    if "gdn" in present:
        nk = cfg.required(("linear_num_key_heads",), _MAX_HEADS)
        nv = cfg.required(("linear_num_value_heads",), _MAX_HEADS)
        dk = cfg.required(("linear_key_head_dim",), _MAX_DIM)
        dv = cfg.required(("linear_value_head_dim",), _MAX_DIM)
        kernel = cfg.required(("linear_conv_kernel_dim",), _MAX_DIM)
        conv_dim = dk * nk * 2 + dv * nv
        _check_divides(cfg, tp, {"linear_num_value_heads": nv, "linear conv dim": conv_dim})
        conv = conv_dim // tp * (kernel - 1)
        temporal = nv // tp * dv * dk
        sizes["gdn"] = conv * model_bytes + temporal * ssm_bytes
    if "mamba2" in present:
        heads = cfg.required(("mamba_n_heads", "mamba_num_heads"), _MAX_HEADS)
        head_dim = cfg.required(("mamba_d_head", "mamba_head_dim"), _MAX_DIM)
        state = cfg.required(("mamba_d_state", "ssm_state_size", "state_size"), _MAX_DIM)
        groups = cfg.required(("mamba_n_groups", "n_groups"), _MAX_HEADS)
        kernel = cfg.required(("mamba_d_conv", "conv_kernel"), _MAX_DIM)
        expand = cfg.integer(("mamba_expand", "expand"), _MAX_DIM)
        # Nemotron-H's mixer is heads x head_dim wide; Granite's mamba_expand x hidden.
        use_expand = expand is not None and cfg.model_type != "nemotron_h"
        inner = expand * hidden if use_expand and expand is not None else heads * head_dim
        # Groups that do not divide the TP size are replicated up to it.
        groups += 0 if groups % tp == 0 else tp - groups
        conv_dim = inner + 2 * groups * state
        _check_divides(cfg, tp, {"mamba heads": heads, "mamba conv dim": conv_dim})
        sizes["mamba2"] = (conv_dim // tp * (kernel - 1)) * model_bytes + (
            heads // tp * head_dim * state
        ) * ssm_bytes
    return sizes, ssm_bytes


def _check_divides(cfg: _Config, tp: int, values: dict[str, int]) -> None:
    for name, value in values.items():
        if value % tp:
            raise InvalidInputError(
                f"tensor_parallel_size {tp} does not divide the {value} {name} of "
                f"{cfg.source}: use a tensor_parallel_size that divides {value}"
            )
