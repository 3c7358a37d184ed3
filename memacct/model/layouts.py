"""Layouts: each layer's cache modules, as a family's vLLM model file builds them.

A layout turns a checked config (:class:`~memacct.model.config.ModelConfig`)
into one list of module kinds per decoder layer; :func:`build_layers` gives
each module its geometry (:mod:`memacct.model.layers`) for one rank. Which
family uses which layout is :mod:`memacct.model.arch_rules`; the sources
of every rule are in ``docs/architectures.md`` and ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memacct.errors import ConfigError, InvalidInputError
from memacct.model.config import (
    _DTYPE_ALIASES,
    _KV_DTYPES,
    _MAX_DIM,
    _MAX_HEADS,
    _MAX_LAYERS,
    _MAX_POSITIONS,
    ModelConfig,
)
from memacct.model.layers import (
    ChunkedLocalAttention,
    FullAttention,
    GatedDeltaNetState,
    KimiDeltaState,
    LayerSpec,
    LinearAttentionState,
    Mamba1State,
    Mamba2State,
    MLAAttention,
    NoCache,
    ShortConvState,
    SlidingWindow,
)

__all__ = ["LAYOUTS", "Geometry", "build_layers"]

Kind = tuple[str, int | None]  # (kind, window or chunk) of one module
Layout = Callable[[ModelConfig, int], list[list[Kind]]]

_FULL: Kind = ("full", None)
_NONE: Kind = ("none", None)


def _each(kinds: Sequence[Kind]) -> list[list[Kind]]:
    return [[kind] for kind in kinds]


def _decoder(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Standard decoders: ``layer_types``, or Mistral/Gemma/Qwen2's window keys."""
    window = cfg.integer(("sliding_window",), _MAX_POSITIONS)
    # Cohere2 attends to [pos - window, pos]: window + 1 tokens.
    span = None if window is None else window + (1 if cfg.model_type == "cohere2" else 0)
    layer_types = cfg.get("layer_types")
    if layer_types is None and cfg.model_type == "qwen3_next":
        interval = cfg.integer(("full_attention_interval",), _MAX_LAYERS) or 4
        layer_types = ["linear_attention" if (i + 1) % interval else "full_attention"
                       for i in range(n)]  # fmt: skip
    if layer_types is not None:
        return _each(_typed(cfg, n, layer_types, span))
    if span is None:
        return _each([_FULL] * n)
    if cfg.get("use_sliding_window") is False:
        cfg.notes.append(f"sliding_window {window} ignored: use_sliding_window is false")
        return _each([_FULL] * n)
    pattern = cfg.integer(("sliding_window_pattern", "_sliding_window_pattern"), _MAX_LAYERS)
    if pattern is not None:
        # Every pattern-th layer (1-based) attends globally; the rest slide.
        return _each([_FULL if (i + 1) % pattern == 0 else ("sliding", span) for i in range(n)])
    window_layers = cfg.integer(("max_window_layers",), _MAX_LAYERS, low=0)
    if window_layers is not None and cfg.get("use_sliding_window") is True:
        # Qwen2's rule: the first max_window_layers layers attend globally.
        return _each([("sliding", span) if i >= window_layers else _FULL for i in range(n)])
    return _each([("sliding", span)] * n)


def _transformers_backend(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """vLLM's Transformers backend (``transformers/base.py``,
    ``_create_attention_instances``): one attention per layer, sliding only where
    ``layer_types[i]`` is ``sliding_attention`` (``sliding_window`` alone slides nothing);
    a layer of any other type does not dispatch through the attention interface and vLLM
    refuses the model."""
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        return _each([_FULL] * n)
    window = cfg.integer(("sliding_window",), _MAX_POSITIONS)
    kinds = _typed(cfg, n, layer_types, window)
    if any(kind[0] not in ("full", "sliding") for kind in kinds):
        raise ConfigError(
            f"{cfg.source}: {cfg.architecture or cfg.model_type} runs through vLLM's "
            f"Transformers backend, which keeps only full and sliding attention layers; "
            f"layer_types lists others, so vLLM refuses it: fix layer_types"
        )
    return _each(kinds)


# layer_types entries, per model type where a name means a state (transformers' config classes).
_STATE_TYPES: dict[tuple[str, str], str] = {
    ("qwen3_next", "linear_attention"): "gdn",
    ("granitemoehybrid", "mamba"): "mamba2",
    ("granitemoehybrid", "linear_attention"): "mamba2",
    ("nemotron_h", "mamba"): "mamba2",
    ("lfm2", "conv"): "short_conv",
    ("lfm2_moe", "conv"): "short_conv",
}


def _typed(cfg: ModelConfig, n: int, layer_types: object, span: int | None) -> list[Kind]:
    if not isinstance(layer_types, list) or len(layer_types) != n:
        count = len(layer_types) if isinstance(layer_types, list) else type(layer_types)
        raise ConfigError(
            f"{cfg.source}: layer_types must list one type per layer ({n}), got {count}: "
            f"fix layer_types or num_hidden_layers"
        )
    chunk = cfg.integer(("attention_chunk_size",), _MAX_POSITIONS)
    kinds: list[Kind] = []
    for i, kind in enumerate(layer_types):
        state = _STATE_TYPES.get((cfg.model_type or "", str(kind)))
        if state is not None:
            kinds.append((state, None))
        elif kind == "sliding_attention":
            if span is None:
                raise ConfigError(
                    f"{cfg.source}: layer_types[{i}] is 'sliding_attention' but "
                    f"sliding_window is not set: add sliding_window"
                )
            kinds.append(("sliding", span))
        elif kind in ("full_attention", "attention"):
            kinds.append(_FULL)
        elif kind == "chunked_attention":
            kinds.append(("chunked", chunk) if chunk is not None else _FULL)
        else:
            raise ConfigError(
                f"{cfg.source}: layer_types[{i}] = {kind!r} is a kind of layer memacct does not "
                f"size for {cfg.model_type}: it reads 'full_attention', 'sliding_attention', "
                f"'chunked_attention' and the state layers of Qwen3-Next, Granite-4.0-H, "
                f"Nemotron-H and LFM2 (docs/architectures.md)"
            )
    return kinds


def _llama4(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Llama 4: layers without RoPE attend globally, the others to their chunk."""
    chunk = cfg.integer(("attention_chunk_size",), _MAX_POSITIONS)
    nope = cfg.get("no_rope_layers")
    if not nope:
        interval = cfg.integer(("no_rope_layer_interval",), _MAX_LAYERS) or 4
        nope = [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(nope, list) or len(nope) != n:
        raise ConfigError(
            f"{cfg.source}: no_rope_layers must list one flag per layer ({n}): "
            f"fix no_rope_layers"
        )
    if chunk is None:
        return _each([_FULL] * n)
    return _each([_FULL if flag == 0 else ("chunked", chunk) for flag in nope])


def _pattern(cfg: ModelConfig, key: str, n: int, table: dict[str, Kind]) -> list[list[Kind]]:
    pattern = cfg.get(key)
    if not isinstance(pattern, (str, list)) or len(pattern) != n:
        raise ConfigError(
            f"{cfg.source}: {key} must have one entry per layer ({n}): fix {key}"
        )
    return _each([table.get(str(c), _NONE) for c in pattern])


# transformers 5's NemotronHConfig writes layers_block_type and derives the pattern from it
# (NemotronHConfig._list_to_pattern), which nemotron_h.py reads.
_NEMOTRON_H_TYPES = {"linear_attention": "M", "mamba": "M", "moe": "E", "full_attention": "*",
                     "attention": "*", "mlp": "-"}


def _nemotron_h(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Nemotron-H: ``M`` Mamba2, ``*`` attention, ``-``/``E`` MLP or MoE (no cache)."""
    table = {"M": ("mamba2", None), "*": _FULL}
    types = cfg.get("layers_block_type")
    if cfg.get("hybrid_override_pattern") is None and isinstance(types, list):
        if len(types) != n or any(str(t) not in _NEMOTRON_H_TYPES for t in types):
            raise ConfigError(
                f"{cfg.source}: layers_block_type must list one of "
                f"{sorted(_NEMOTRON_H_TYPES)} per layer ({n}): fix layers_block_type"
            )
        return _each([table.get(_NEMOTRON_H_TYPES[str(t)], _NONE) for t in types])
    return _pattern(cfg, "hybrid_override_pattern", n, table)


def _jamba(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Jamba: transformers' ``layers_block_type``: attention where ``i % period == offset``."""
    period = cfg.integer(("attn_layer_period",), _MAX_LAYERS) or 8
    offset = cfg.integer(("attn_layer_offset",), _MAX_LAYERS, low=0) or 0
    return _each([_FULL if i % period == offset else ("mamba1", None) for i in range(n)])


def _bamba(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Bamba: attention on ``attn_layer_indices``, Mamba2 elsewhere."""
    indices = cfg.get("attn_layer_indices") or []
    if not isinstance(indices, list):
        raise ConfigError(f"{cfg.source}: attn_layer_indices must be a list of layer indices")
    return _each([_FULL if i in indices else ("mamba2", None) for i in range(n)])


def _falcon_h1(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Falcon-H1: every layer runs attention and a Mamba2 mixer side by side."""
    return [[_FULL, ("mamba2", None)] for _ in range(n)]


def _minimax(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """MiniMax-Text-01: ``attn_type_list[i]`` 0 is lightning (linear) attention, 1 softmax."""
    return _pattern(cfg, "attn_type_list", n, {"0": ("linear", None), "1": _FULL})


def _linear_config(cfg: ModelConfig) -> dict[str, Any]:
    section = cfg.get("linear_attn_config")
    if not isinstance(section, dict):
        raise ConfigError(f"{cfg.source}: linear_attn_config must be a JSON object")
    return section


def _kimi_linear(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Kimi-Linear: ``linear_attn_config.kda_layers`` (1-based) are KDA, the rest MLA."""
    kda = _linear_config(cfg).get("kda_layers") or []
    if not isinstance(kda, list):
        raise ConfigError(f"{cfg.source}: linear_attn_config.kda_layers must be a list")
    return _each([("kda", None) if i + 1 in kda else _FULL for i in range(n)])


def _zamba2(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Zamba2: Mamba2 in every layer; ``hybrid`` layers add their own shared-block attention."""
    types = cfg.get("layers_block_type")
    if not isinstance(types, list) or len(types) != n:
        raise ConfigError(f"{cfg.source}: layers_block_type must list one type per layer ({n})")
    return [[_FULL, ("mamba2", None)] if t == "hybrid" else [("mamba2", None)] for t in types]


def _mimo_v2_flash(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """MiMo-V2-Flash: ``hybrid_layer_pattern[i] == 1`` slides with the ``swa_*`` geometry."""
    window = cfg.required(("sliding_window_size", "sliding_window"), _MAX_POSITIONS)
    return _pattern(cfg, "hybrid_layer_pattern", n, {"1": ("sliding", window), "0": _FULL})


LAYOUTS: dict[str, Layout] = {
    "decoder": _decoder,
    "full": lambda cfg, n: _each([_FULL] * n),
    "llama4": _llama4,
    "nemotron_h": _nemotron_h,
    "jamba": _jamba,
    "bamba": _bamba,
    "falcon_h1": _falcon_h1,
    "mimo_v2_flash": _mimo_v2_flash,
    "minimax": _minimax,
    "zamba2": _zamba2,
    "kimi_linear": _kimi_linear,
    "lfm2": _decoder,
    "transformers": _transformers_backend,
    "mamba": lambda cfg, n: _each([("mamba1", None)] * n),
    "mamba2": lambda cfg, n: _each([("mamba2", None)] * n),
}


@dataclass(frozen=True)
class Geometry:
    """What every module of one rank shares: parallelism, dtypes, the attention geometry.

    ``attention`` maps ``full``/``sliding``/``chunked`` to ``(kv heads per rank,
    head size, V head size)``; ``latent`` is MLA's latent row (elements), else ``None``.
    """

    tp: int
    hidden: int
    kv_bytes: int
    model_bytes: int
    ssm_bytes: int
    attention: dict[str, tuple[int, int, int]]
    latent: int | None = None
    latent_row_bytes: int | None = None
    state_checkpoints: bool = True


def ssm_dtype_bytes(cfg: ModelConfig, model_bytes: int) -> int:
    """The recurrent state's bytes: ``mamba_ssm_dtype`` when written, else the model dtype
    (Nemotron-H: float32)."""
    name = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype")
    if name is None and cfg.model_type == "nemotron_h":
        # vLLM 0.33's NemotronHForCausalLMConfig (vllm/model_executor/models/config.py):
        # the SSM cache is float32 unless the config names another dtype.
        name = "float32"
    if isinstance(name, str):
        key = _DTYPE_ALIASES.get(name.lower().removeprefix("torch."), name.lower())
        return _KV_DTYPES.get(key, model_bytes)
    return model_bytes


def _check_divides(cfg: ModelConfig, tp: int, values: dict[str, int]) -> None:
    for name, value in values.items():
        if value % tp:
            raise InvalidInputError(
                f"tensor_parallel_size {tp} does not divide the {value} {name} of "
                f"{cfg.source}: use a tensor_parallel_size that divides {value}"
            )


def _conv_ssm(conv: int, ssm: int, geo: Geometry) -> tuple[tuple[int, int], ...]:
    return ((conv, geo.model_bytes), (ssm, geo.ssm_bytes))


def _gdn(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    nk = cfg.required(("linear_num_key_heads",), _MAX_HEADS)
    nv = cfg.required(("linear_num_value_heads",), _MAX_HEADS)
    dk = cfg.required(("linear_key_head_dim",), _MAX_DIM)
    dv = cfg.required(("linear_value_head_dim",), _MAX_DIM)
    kernel = cfg.required(("linear_conv_kernel_dim",), _MAX_DIM)
    conv_dim = dk * nk * 2 + dv * nv
    _check_divides(cfg, geo.tp, {"linear_num_value_heads": nv, "linear conv dim": conv_dim})
    return _conv_ssm(conv_dim // geo.tp * (kernel - 1), nv // geo.tp * dv * dk, geo)


def _mamba2(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    heads = cfg.required(("mamba_n_heads", "mamba_num_heads", "n_mamba_heads", "num_heads"),
                         _MAX_HEADS)
    head_dim = cfg.required(("mamba_d_head", "mamba_head_dim", "mamba_headdim", "head_dim"),
                            _MAX_DIM)
    state = cfg.required(("mamba_d_state", "ssm_state_size", "state_size"), _MAX_DIM)
    groups = cfg.required(("mamba_n_groups", "n_groups", "mamba_ngroups"), _MAX_HEADS)
    kernel = cfg.required(("mamba_d_conv", "conv_kernel"), _MAX_DIM)
    expand = cfg.integer(("mamba_expand", "expand"), _MAX_DIM)
    inner = cfg.integer(("mamba_d_ssm",), _MAX_DIM)
    if inner is None:
        # Nemotron-H's mixer is heads x head_dim wide; Granite's and Bamba's mamba_expand x hidden.
        use_expand = expand is not None and cfg.model_type != "nemotron_h"
        inner = expand * geo.hidden if use_expand and expand is not None else heads * head_dim
    # Groups that do not divide the TP size are replicated up to it.
    groups += 0 if groups % geo.tp == 0 else geo.tp - groups
    conv_dim = inner + 2 * groups * state
    _check_divides(cfg, geo.tp, {"mamba heads": heads, "mamba conv dim": conv_dim})
    return _conv_ssm(conv_dim // geo.tp * (kernel - 1), heads // geo.tp * head_dim * state, geo)


def _mamba1(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    state = cfg.required(("mamba_d_state", "state_size"), _MAX_DIM)
    kernel = cfg.required(("mamba_d_conv", "conv_kernel"), _MAX_DIM)
    expand = cfg.integer(("mamba_expand",), _MAX_DIM)
    # Jamba's mixer is mamba_expand x hidden wide; Mamba's intermediate_size.
    inner = expand * geo.hidden if expand else cfg.required(("intermediate_size",), _MAX_DIM)
    _check_divides(cfg, geo.tp, {"mamba intermediate size": inner})
    return _conv_ssm(inner // geo.tp * (kernel - 1), inner // geo.tp * state, geo)


def _short_conv(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    kernel = cfg.required(("conv_L_cache",), _MAX_DIM)
    _check_divides(cfg, geo.tp, {"hidden size": geo.hidden})
    return ((geo.hidden // geo.tp * (kernel - 1), geo.model_bytes),)


def _linear(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # minimax_text_01.py: heads / tp x head_dim x head_dim, in the cache dtype (auto: the model's).
    heads = cfg.required(("num_attention_heads",), _MAX_HEADS)
    head_dim = cfg.integer(("head_dim",), _MAX_DIM) or geo.hidden // heads
    _check_divides(cfg, geo.tp, {"attention heads": heads})
    return ((heads // geo.tp * head_dim * head_dim, geo.model_bytes),)


def _kda(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # mamba_utils.py kda_state_shape / kda_state_dtype: a conv state of q, k and v
    # (3 x heads x head_dim / tp x (kernel - 1)) in the model dtype, heads / tp x hd x hd in fp32.
    section = _linear_config(cfg)
    heads = cfg.check_int("linear_attn_config.num_heads", section.get("num_heads"),
                          high=_MAX_HEADS)
    head_dim = cfg.check_int("linear_attn_config.head_dim", section.get("head_dim"),
                             high=_MAX_DIM)
    kernel = cfg.check_int("linear_attn_config.short_conv_kernel_size",
                           section.get("short_conv_kernel_size", 4), high=_MAX_DIM)
    _check_divides(cfg, geo.tp, {"KDA heads": heads})
    conv = 3 * heads * head_dim // geo.tp * (kernel - 1)
    return ((conv, geo.model_bytes), (heads // geo.tp * head_dim * head_dim, 4))


_STATES: dict[str, tuple[type[LayerSpec], Callable[[ModelConfig, Geometry], tuple[
    tuple[int, int], ...]]]] = {
    "gdn": (GatedDeltaNetState, _gdn),
    "mamba2": (Mamba2State, _mamba2),
    "mamba1": (Mamba1State, _mamba1),
    "short_conv": (ShortConvState, _short_conv),
    "linear": (LinearAttentionState, _linear),
    "kda": (KimiDeltaState, _kda),
}


def _attention(i: int, kind: str, size: int | None, geo: Geometry, target: int | None
               ) -> LayerSpec:
    if geo.latent is not None and kind == "full":
        return MLAAttention(layer=i, latent_size=geo.latent, dtype_bytes=geo.kv_bytes,
                            row_bytes=geo.latent_row_bytes, shares_kv_with=target)
    heads, head, head_v = geo.attention.get(kind, geo.attention["full"])
    if geo.latent is not None:  # a latent layer that slides: one latent row per token
        heads, head, head_v = 1, geo.latent, 0
    common = dict(layer=i, kv_heads=heads, head_size=head, head_size_v=head_v,
                  dtype_bytes=geo.kv_bytes, shares_kv_with=target)
    if kind == "sliding" and size is not None:
        return SlidingWindow(sliding_window=size, **common)  # type: ignore[arg-type]
    if kind == "chunked" and size is not None:
        return ChunkedLocalAttention(attention_chunk_size=size, **common)  # type: ignore[arg-type]
    return FullAttention(**common)  # type: ignore[arg-type]


def build_layers(cfg: ModelConfig, layout: str, num_layers: int, geo: Geometry
                 ) -> list[LayerSpec]:
    """Every cache module of the model, in layer order, sized for one rank.

    The last ``num_kv_shared_layers`` layers read the KV cache of the last
    earlier layer of the same kind (Gemma-3n) and keep none of their own.
    """
    slots = LAYOUTS[layout](cfg, num_layers)
    shared = cfg.integer(("num_kv_shared_layers",), _MAX_LAYERS, low=0) or 0
    if shared >= num_layers:
        raise ConfigError(
            f"{cfg.source}: num_kv_shared_layers = {shared} leaves no layer of the "
            f"{num_layers} with a KV cache of its own: fix num_kv_shared_layers"
        )
    first_shared = num_layers - shared
    states: dict[str, tuple[tuple[int, int], ...]] = {}
    layers: list[LayerSpec] = []
    for i, kinds in enumerate(slots):
        for kind, size in kinds:
            if kind in _STATES:
                cls, shape = _STATES[kind]
                if kind not in states:
                    states[kind] = shape(cfg, geo)
                layers.append(cls(layer=i, shapes=states[kind],  # type: ignore[call-arg]
                                  checkpoints=geo.state_checkpoints))
            elif kind == "none":
                layers.append(NoCache(layer=i))
            else:
                target: int | None = None
                if i >= first_shared:
                    same = [j for j in range(first_shared) if (kind, size) in slots[j]]
                    target = same[-1] if same else first_shared - 1
                layers.append(_attention(i, kind, size, geo, target))
    if shared:
        cfg.notes.append(
            f"the last {shared} layers share the KV cache of earlier layers "
            f"(num_kv_shared_layers) and keep none of their own"
        )
    return layers
