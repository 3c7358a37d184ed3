"""Layouts: each layer's cache modules, as a family's vLLM model file builds them.

A layout turns a checked config (:class:`~memacct.model.config.ModelConfig`)
into one list of module kinds per decoder layer; :func:`build_layers` gives
each module its geometry (:mod:`memacct.model.layers`) for one rank. Which
family uses which layout is :mod:`memacct.model.arch_rules`; the sources
of every rule are in ``docs/architectures.md`` and ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from memacct.errors import ConfigError, InvalidInputError
from memacct.model.attention_geometry import ATTENTION_GEOMETRY, gemma4_layer_types
from memacct.model.config import MAX_DIM, MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, ModelConfig
from memacct.model.layers import (
    ChunkedLocalAttention,
    CrossAttention,
    FullAttention,
    LayerSpec,
    MLAAttention,
    NoCache,
    ShortConvWindow,
    SlidingWindow,
    SparseIndexerCache,
)
from memacct.model.loop_layouts import LOOP_LAYOUTS
from memacct.model.mm_layouts import MM_LAYOUTS
from memacct.model.states import STATES, Geometry, linear_config, ssm_dtype_bytes

__all__ = [
    "ATTENTION_FREE",
    "ATTENTION_GEOMETRY",
    "LAYOUTS",
    "PERIODIC_LAYER_TYPES",
    "Geometry",
    "build_layers",
    "ssm_dtype_bytes",
]

Kind = tuple[str, int | None]  # (kind, window or chunk) of one module
Layout = Callable[[ModelConfig, int], list[list[Kind]]]

_FULL: Kind = ("full", None)
_NONE: Kind = ("none", None)


def _each(kinds: Sequence[Kind]) -> list[list[Kind]]:
    return [[kind] for kind in kinds]


def _decoder(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Standard decoders: ``layer_types``, or Mistral/Gemma/Qwen2's window keys."""
    window = cfg.integer(("sliding_window",), MAX_POSITIONS)
    # Cohere2 attends to [pos - window, pos]: window + 1 tokens (cohere2.py, and
    # cohere2_moe.py's config.sliding_window + 1).
    wider = cfg.model_type in ("cohere2", "cohere2_moe")
    span = None if window is None else window + (1 if wider else 0)
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        layer_types = periodic_layer_types(cfg, n)
    if layer_types is not None:
        kinds = _typed(cfg, n, layer_types, span)
        windows = cfg.get("sliding_windows") if cfg.model_type == "exaone_moe" else None
        if isinstance(windows, list) and len(windows) == n:
            # exaone_moe.py: a sliding layer's window is sliding_windows[i] (none: full).
            kinds = [(k, size) if k != "sliding" else
                     (("sliding", cfg.check_int(f"sliding_windows[{i}]", windows[i],
                                                high=MAX_POSITIONS)) if windows[i] else _FULL)
                     for i, (k, size) in enumerate(kinds)]
        return _each(kinds)
    if span is None:
        return _each([_FULL] * n)
    if cfg.get("use_sliding_window") is False:
        cfg.notes.append(f"sliding_window {window} ignored: use_sliding_window is false")
        return _each([_FULL] * n)
    pattern = cfg.integer(("sliding_window_pattern", "_sliding_window_pattern"), MAX_LAYERS)
    if pattern is not None:
        # Every pattern-th layer (1-based) attends globally; the rest slide.
        return _each([_FULL if (i + 1) % pattern == 0 else ("sliding", span) for i in range(n)])
    window_layers = cfg.integer(("max_window_layers",), MAX_LAYERS, low=0)
    if window_layers is not None and cfg.get("use_sliding_window") is True:
        # Qwen2's rule: the first max_window_layers layers attend globally.
        return _each([("sliding", span) if i >= window_layers else _FULL for i in range(n)])
    return _each([("sliding", span)] * n)


# Config classes that derive ``layer_types`` from a period when the config lists none:
# model type -> (period key, the class's default period, the kind of the other layers).
# Every period-th layer (1-based) is full attention.
PERIODIC_LAYER_TYPES: dict[str, tuple[str, int, str]] = {
    # transformers Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig (__post_init__).
    "qwen3_next": ("full_attention_interval", 4, "linear_attention"),
    "qwen3_5_text": ("full_attention_interval", 4, "linear_attention"),
    "qwen3_5_moe_text": ("full_attention_interval", 4, "linear_attention"),
    # transformers AfmoeConfig.__post_init__: sliding unless (i + 1) % n == 0; vLLM's
    # afmoe.py reads config.layer_types[layer_idx].
    "afmoe": ("global_attn_every_n_layers", 4, "sliding_attention"),
}


def periodic_layer_types(cfg: ModelConfig, n: int) -> list[str] | None:
    """``layer_types`` as the config class derives it from a period key, else ``None``."""
    derived = PERIODIC_LAYER_TYPES.get(cfg.model_type or "")
    if derived is None:
        return None
    key, default, other = derived
    period = cfg.integer((key,), MAX_LAYERS) or default
    return [other if (i + 1) % period else "full_attention" for i in range(n)]


def _transformers_backend(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """vLLM's Transformers backend (``transformers/base.py``,
    ``_create_attention_instances``): one attention per layer, sliding only where
    ``layer_types[i]`` is ``sliding_attention`` (``sliding_window`` alone slides nothing);
    a layer of any other type does not dispatch through the attention interface and vLLM
    refuses the model."""
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        return _each([_FULL] * n)
    window = cfg.integer(("sliding_window",), MAX_POSITIONS)
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
    ("qwen3_5_text", "linear_attention"): "gdn",
    ("qwen3_5_moe_text", "linear_attention"): "gdn",
    ("granitemoehybrid", "mamba"): "mamba2",
    ("granitemoehybrid", "linear_attention"): "mamba2",
    ("nemotron_h", "mamba"): "mamba2",
    ("lfm2", "conv"): "short_conv",
    ("lfm2_moe", "conv"): "short_conv",
    ("olmo_hybrid", "linear_attention"): "gdn",
    ("alice_ai", "linear_attention"): "kda_flat",
}
# layer_types entries an engine reads otherwise than their name: rnj1.py gives its
# "chunked_attention" layers per_layer_sliding_window = sliding_window (a sliding window).
_RENAMED_TYPES: dict[tuple[str, str], str] = {
    ("rnj1", "chunked_attention"): "sliding_attention",
}


def _typed(cfg: ModelConfig, n: int, layer_types: object, span: int | None) -> list[Kind]:
    if not isinstance(layer_types, list) or len(layer_types) != n:
        count = len(layer_types) if isinstance(layer_types, list) else type(layer_types)
        raise ConfigError(
            f"{cfg.source}: layer_types must list one type per layer ({n}), got {count}: "
            f"fix layer_types or num_hidden_layers"
        )
    chunk = cfg.integer(("attention_chunk_size",), MAX_POSITIONS)
    kinds: list[Kind] = []
    for i, written in enumerate(layer_types):
        kind = _RENAMED_TYPES.get((cfg.model_type or "", str(written)), written)
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


def _gemma4(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Gemma 4: sliding or full per ``layer_types``; the window is ``sliding_window``
    (halved plus one under ``use_bidirectional_attention: "all"``, as the class does)."""
    window = cfg.required(("sliding_window",), MAX_POSITIONS)
    if cfg.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1
    return _each(_typed(cfg, n, gemma4_layer_types(cfg, n), window))


def _llama4(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Llama 4: layers without RoPE attend globally, the others to their chunk."""
    chunk = cfg.integer(("attention_chunk_size",), MAX_POSITIONS)
    nope = cfg.get("no_rope_layers")
    if not nope:
        interval = cfg.integer(("no_rope_layer_interval",), MAX_LAYERS) or 4
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
    written = cfg.get("layers_block_type")
    if isinstance(written, list) and len(written) == n:
        # jamba.py reads config.layers_block_type ("attention" or "mamba" per layer).
        return _each([_FULL if t == "attention" else ("mamba1", None) for t in written])
    period = cfg.integer(("attn_layer_period",), MAX_LAYERS) or 8
    offset = cfg.integer(("attn_layer_offset",), MAX_LAYERS, low=0) or 0
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


def _kimi_linear(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Kimi-Linear: ``linear_attn_config.kda_layers`` (1-based) are KDA, the rest MLA."""
    kda = linear_config(cfg).get("kda_layers") or []
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
    window = cfg.required(("sliding_window_size", "sliding_window"), MAX_POSITIONS)
    return _pattern(cfg, "hybrid_layer_pattern", n, {"1": ("sliding", window), "0": _FULL})


def indexer_row_bytes(cfg: ModelConfig) -> int:
    """Bytes per token of DeepSeek-V3.2's indexer K cache: ``index_head_dim`` fp8 values
    and a float32 scale per 128 (``Indexer`` in vLLM's ``deepseek_v2.py``)."""
    head = cfg.integer(("index_head_dim",), MAX_DIM) or 128
    return head + head // 128 * 4


def _sparse_mla(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """DeepSeek-V3.2 / GLM-5 (``vllm/models/deepseek_v32/attention.py``): a sparse-MLA latent
    in every layer and an indexer K cache where the layer runs its own top-k: all layers
    unless ``index_topk_pattern[i]`` is ``"S"``, or, without a pattern, where
    ``max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0`` (defaults 2 and 1)."""
    pattern = cfg.get("index_topk_pattern")
    freq = cfg.integer(("index_topk_freq",), MAX_LAYERS) or 1
    offset = cfg.integer(("index_skip_topk_offset",), MAX_LAYERS, low=0)
    offset = 2 if offset is None else offset
    row = indexer_row_bytes(cfg)
    slots: list[list[Kind]] = []
    for i in range(n):
        if isinstance(pattern, (str, list)):
            skip = i < len(pattern) and pattern[i] == "S"
        else:
            skip = max(i - offset + 1, 0) % freq != 0
        slots.append([_FULL] if skip else [_FULL, ("indexer", row)])
    return slots


def _block_configs(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """DeciLM / Nemotron-NAS (nemotron_nas.py): ``block_configs[i].attention`` is a no-op
    (no cache) or attention with ``num_attention_heads // n_heads_in_group`` KV heads."""
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise ConfigError(f"{cfg.source}: block_configs must list one block per layer ({n})")
    heads = cfg.required(("num_attention_heads",), MAX_HEADS)
    slots: list[list[Kind]] = []
    for i, block in enumerate(blocks):
        attention = block.get("attention") if isinstance(block, dict) else None
        if not isinstance(attention, dict):
            raise ConfigError(f"{cfg.source}: block_configs[{i}].attention must be an object")
        if attention.get("replace_with_linear"):
            raise ConfigError(
                f"{cfg.source}: block_configs[{i}].attention.replace_with_linear is set, "
                f"which vLLM's nemotron_nas.py does not build: fix block_configs")
        if attention.get("no_op"):
            slots.append([_NONE])
            continue
        group = cfg.check_int(f"block_configs[{i}].attention.n_heads_in_group",
                              attention.get("n_heads_in_group"), high=heads)
        slots.append([("gqa", heads // group)])
    return slots


def _openpangu(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """openPangu (openpangu.py): MLA where the config has ``kv_lora_rank``; otherwise
    ``interleaved_sliding_window``, one window for every layer or a list cycled over them
    (``layer_idx % len``, null: full), else full attention."""
    windows = cfg.get("interleaved_sliding_window")
    if cfg.get("kv_lora_rank") is not None or windows is None:
        return _each([_FULL] * n)
    if not isinstance(windows, list):
        windows = [windows]
    if not windows:
        raise ConfigError(f"{cfg.source}: interleaved_sliding_window is an empty list")
    spans = [cfg.check_int("interleaved_sliding_window", w, high=MAX_POSITIONS) if w else None
             for w in windows]
    return _each([("sliding", span) if (span := spans[i % len(spans)]) else _FULL
                  for i in range(n)])


def _bailing_linear(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Bailing-MoE V2.5 (bailing_moe_linear.py is_linear_layer): lightning attention where
    ``(i + 1) % layer_group_size`` (class default 1: none), MLA elsewhere."""
    group = cfg.integer(("layer_group_size",), MAX_LAYERS, low=0)
    group = 1 if group is None else group
    return _each([("bailing_lightning", None) if group > 0 and (i + 1) % group else _FULL
                  for i in range(n)])


def _bailing_v3(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Bailing-MoE V3 (bailing_moe_v3.py _is_kda_layer): Kimi delta attention unless
    ``(i + 1) % layer_group_size == 0`` or ``i`` is past the last whole group; MLA there."""
    group = cfg.required(("layer_group_size",), MAX_LAYERS)
    whole = n // group * group
    return _each([_FULL if (i + 1) % group == 0 or i >= whole else ("kda_heads", None)
                  for i in range(n)])


def _plamo3(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """PLaMo-3 (plamo3.py): layer ``i`` slides over ``sliding_window[i]`` when the config
    lists one window per layer (vLLM renames the list ``interleaved_sliding_window``), full
    where the entry is null; a single window is the decoder's rule."""
    windows = cfg.get("interleaved_sliding_window") or cfg.get("sliding_window")
    if not isinstance(windows, list):
        return _decoder(cfg, n)
    if len(windows) != n:
        raise ConfigError(f"{cfg.source}: sliding_window must list one window per layer ({n})")
    return _each([("sliding", cfg.check_int(f"sliding_window[{i}]", w, high=MAX_POSITIONS))
                  if w else _FULL for i, w in enumerate(windows)])


LAYOUTS: dict[str, Layout] = {
    "decoder": _decoder,
    "full": lambda cfg, n: _each([_FULL] * n),
    "llama4": _llama4,
    "gemma4": _gemma4, "diffusion_gemma": _gemma4,
    "step": _decoder, "step3": _decoder,
    "plamo3": _plamo3,
    "sparse_mla": _sparse_mla,
    "block_configs": _block_configs,
    "openpangu": _openpangu,
    "bailing_linear": _bailing_linear,
    "bailing_v3": _bailing_v3,
    "longcat_flash": lambda cfg, n: [[_FULL, _FULL] for _ in range(n)],
    "nemotron_h": _nemotron_h,
    "jamba": _jamba, "bamba": _bamba,
    "falcon_h1": _falcon_h1, "mimo_v2_flash": _mimo_v2_flash,
    "minimax": _minimax, "zamba2": _zamba2,
    "kimi_linear": _kimi_linear,
    "lfm2": _decoder,
    "transformers": _transformers_backend,
    "mamba": lambda cfg, n: _each([("mamba1", None)] * n),
    "mamba2": lambda cfg, n: _each([("mamba2", None)] * n),
    **LOOP_LAYOUTS, **MM_LAYOUTS,
}


# fp8_ds_mla's bytes per token (mla_attention.py state_content_bytes): fp8 latent, scales
# and a bf16 RoPE part.
SPARSE_MLA_FP8_ROW = 656
# Layouts without attention: every layer keeps a recurrent state only.
ATTENTION_FREE = frozenset({"mamba", "mamba2"})


def _attention(i: int, kind: str, size: int | None, geo: Geometry, target: int | None
               ) -> LayerSpec:
    if geo.latent is not None and kind == "full":
        return MLAAttention(layer=i, latent_size=geo.latent, dtype_bytes=geo.kv_bytes,
                            row_bytes=geo.latent_row_bytes, shares_kv_with=target)
    heads, head, head_v = geo.attention.get(kind, geo.attention["full"])
    if kind == "gqa" and size is not None:  # this layer's own KV heads (DeciLM)
        heads = max(1, size // geo.tp)
        if (size % geo.tp if size >= geo.tp else geo.tp % size):
            raise InvalidInputError(
                f"tensor_parallel_size {geo.tp} neither divides nor is a multiple of the "
                f"{size} KV heads of layer {i}: use a tensor_parallel_size that divides {size}")
    if geo.latent is not None:  # a latent layer that slides: one latent row per token
        heads, head, head_v = 1, geo.latent, 0
    common = dict(layer=i, kv_heads=heads, head_size=head, head_size_v=head_v,
                  dtype_bytes=geo.kv_bytes, shares_kv_with=target)
    if kind == "sliding" and size is not None:
        return SlidingWindow(sliding_window=size, **common)  # type: ignore[arg-type]
    if kind == "chunked" and size is not None:
        return ChunkedLocalAttention(attention_chunk_size=size, **common)  # type: ignore[arg-type]
    if kind == "cross" and size is not None:  # an encoder-decoder's (mm_layouts._encoder_decoder)
        return CrossAttention(max_encoder_len=size, **common)  # type: ignore[arg-type]
    return FullAttention(**common)  # type: ignore[arg-type]


def build_layers(cfg: ModelConfig, layout: str, num_layers: int, geo: Geometry
                 ) -> list[LayerSpec]:
    """Every cache module of the model, in layer order, sized for one rank.

    The last ``num_kv_shared_layers`` layers read the KV cache of the last
    earlier layer of the same kind (Gemma-3n) and keep none of their own.
    """
    slots = LAYOUTS[layout](cfg, num_layers)
    if layout == "sparse_mla" and geo.kv_bytes == 1 and geo.latent_row_bytes is None:
        # mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype: on FLASHMLA_SPARSE (an
        # H100) any quantized KV dtype is served as fp8_ds_mla, a 656-byte row per token.
        geo = replace(geo, latent_row_bytes=SPARSE_MLA_FP8_ROW)
    shared = cfg.integer(("num_kv_shared_layers",), MAX_LAYERS, low=0) or 0
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
            if kind in STATES:
                cls, shape = STATES[kind]
                if kind not in states:
                    states[kind] = shape(cfg, geo)
                layers.append(cls(layer=i, shapes=states[kind],  # type: ignore[call-arg]
                                  checkpoints=geo.state_checkpoints))
            elif kind == "none":
                layers.append(NoCache(layer=i))
            elif kind in ("sconv", "sconv_swa") and size is not None:  # Inkling, model dtype
                layers.append(ShortConvWindow.of(i, geo.attention[kind], geo.model_bytes, size))
            elif kind in ("indexer", "indexer_bf16") and size is not None:  # bf16: MiniMax-M3
                layers.append(SparseIndexerCache(layer=i, latent_size=size,
                                                 dtype_bytes=2 if kind == "indexer_bf16" else 1))
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
