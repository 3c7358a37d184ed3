"""Layouts of models whose layers run more than once a token, each run with a cache of its own.

vLLM builds one ``Attention`` per (layer, loop) pair for these looped or recurrent-depth
models, each with its own layer name and KV cache; a layout here lists, per physical
layer, one module kind per run, as the model file builds them (vLLM 0.33):

* Dory (``vllm/model_executor/models/dory.py``): ``layer_types`` gives each physical block
  sliding, full or no attention (``mlp``); the ``n_recurrent_layers`` blocks after the
  ``n_input_layers`` ones run ``n_recurrent_loops`` times, each loop with its own cache
  when ``recurrent_kv_cache_mode`` is ``per_loop`` (one shared cache under ``last_loop``).
* IQuest-LoopCoder (``iquest_loopcoder.py``): ``loop_num`` runs of every layer; the first
  keeps the model's cache (full, or the config's window where vLLM sets
  ``CacheConfig.sliding_window``), the others slide over ``loop_window_size`` tokens.
* HRM-Text (``hrm_text.py``): an ``L`` and an ``H`` stack of ``num_layers_per_stack`` layers;
  ``L`` layers run ``H_cycles x L_cycles`` steps and ``H`` layers ``H_cycles``, one full
  attention cache per step. Both stacks' modules are listed under the stack layer's index
  (the model refuses pipeline parallelism, so no stage split depends on it).
* Muse-Glimmer (``muse_glimmer.py``): sliding or full per ``layer_types``, which
  ``MuseGlimmerTextConfig`` derives counting back from the last layer (every 4th full).
* Flint (``vllm/models/flint/model.py``): sliding where ``layer_types`` says so, over
  ``sliding_window`` tokens (the current one counted); FlintConfig's default is all full.
* MiniMax-M3 (``vllm/models/minimax_m3``): an indexer key cache beside the sparse layers'.
* Inkling (``vllm/models/inkling``): a short-conv state of its own block size in every layer.
* DomynEdge (``domyn_edge.py``), one run a layer but read per layer: ``window_sizes[i][0]``
  ``w > 0`` slides over ``w + 1`` keys (HF's window ``(w, 0)``), else full; the head size is
  ``per_layer_config[i].head_dim``, the layer's override or ``head_dim``
  (``memacct/model/attention_geometry.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from memacct.errors import ConfigError
from memacct.model.config import MAX_LAYERS, MAX_POSITIONS, ModelConfig

__all__ = ["LOOP_LAYOUTS", "MAX_LOOPS", "domyn_heads", "domyn_kinds"]

Kind = tuple[str, int | None]
# A bound on loops / cycles a config may ask for (vLLM builds one module per run).
MAX_LOOPS = 64
_FULL: Kind = ("full", None)


def _layer_types(cfg: ModelConfig, n: int, derived: list[str], allowed: set[str]) -> list[str]:
    """``layer_types`` as written, else as the config class derives it; checked."""
    written = cfg.get("layer_types")
    types = derived if written is None else written
    if not isinstance(types, list) or len(types) != n or not set(map(str, types)) <= allowed:
        raise ConfigError(
            f"{cfg.source}: layer_types must list one of {', '.join(sorted(allowed))} per "
            f"layer ({n}): fix layer_types or num_hidden_layers"
        )
    return [str(t) for t in types]


def _window(cfg: ModelConfig, key: str = "sliding_window") -> int:
    window = cfg.integer((key,), MAX_POSITIONS)
    if window is None:
        raise ConfigError(f"{cfg.source}: sliding layers need {key}: add {key}")
    return window


def _dory(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Dory: DoryConfig's layer_types default is ``mlp`` on odd blocks, full where
    ``i % 8 == 6``, sliding elsewhere; recurrent blocks keep a cache per loop (per_loop)."""
    derived = ["mlp" if i % 2 else "full_attention" if i % 8 == 6 else "sliding_attention"
               for i in range(n)]  # fmt: skip
    types = _layer_types(cfg, n, derived, {"mlp", "full_attention", "sliding_attention"})
    n_in = cfg.integer(("n_input_layers",), MAX_LAYERS, low=0) or 0
    n_out = cfg.integer(("n_output_layers",), MAX_LAYERS, low=0) or 0
    n_rec = cfg.integer(("n_recurrent_layers",), MAX_LAYERS, low=0)
    n_rec = n - n_in - n_out if n_rec is None else n_rec
    if n_rec < 0 or n_in + n_rec + n_out != n:
        raise ConfigError(
            f"{cfg.source}: n_input_layers {n_in} + n_recurrent_layers {n_rec} + "
            f"n_output_layers {n_out} must be num_hidden_layers {n}: fix them"
        )
    loops = cfg.integer(("n_recurrent_loops",), MAX_LOOPS) or 1
    mode = cfg.get("recurrent_kv_cache_mode", "per_loop")
    if mode not in ("per_loop", "last_loop"):
        raise ConfigError(
            f"{cfg.source}: recurrent_kv_cache_mode {mode!r} is neither 'per_loop' nor "
            f"'last_loop' (DoryConfig refuses it): fix recurrent_kv_cache_mode"
        )
    window = _window(cfg) if "sliding_attention" in types else None
    layers: list[list[Kind]] = []
    for i, kind in enumerate(types):
        if kind == "mlp":
            layers.append([("none", None)])
            continue
        runs = loops if mode == "per_loop" and n_in <= i < n_in + n_rec else 1
        layers.append([("sliding", window) if kind == "sliding_attention" else _FULL] * runs)
    return layers


def _cache_window(cfg: ModelConfig) -> int | None:
    """``CacheConfig.sliding_window`` (vllm/engine/arg_utils.py): the config's
    ``sliding_window`` when it lists no ``layer_types`` (0 is none: vllm/config/model.py);
    an ``Attention`` given no window of its own slides over it."""
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and any(k != "sliding_attention" for k in kinds):
        return None
    return cfg.integer(("sliding_window",), MAX_POSITIONS, low=0) or None


def domyn_kinds(cfg: ModelConfig, n: int) -> list[Kind]:
    """DomynEdge's kind per layer from ``window_sizes`` (``[left, right]`` per layer)."""
    windows = cfg.get("window_sizes")
    if not isinstance(windows, list) or len(windows) != n:
        raise ConfigError(f"{cfg.source}: window_sizes must list one [left, right] window per "
                          f"layer ({n}): fix window_sizes")
    kinds: list[Kind] = []
    fallback = _cache_window(cfg)
    for i, pair in enumerate(windows):
        left = pair[0] if isinstance(pair, list) and pair else pair
        if not isinstance(left, int) or isinstance(left, bool) or left > MAX_POSITIONS:
            raise ConfigError(f"{cfg.source}: window_sizes[{i}] = {pair!r} is not a [left, "
                              f"right] pair of token counts: fix window_sizes")
        window = left + 1 if left > 0 else fallback
        kinds.append(("sliding", window) if window else _FULL)
    return kinds


def domyn_heads(cfg: ModelConfig, n: int) -> list[int]:
    """``per_layer_config[i].head_dim`` of each DomynEdge layer: transformers' heterogeneous
    config (``integrations/heterogeneity``) maps a layer index to its overrides; a layer
    without one keeps the global ``head_dim``."""
    per = cfg.get("per_layer_config") or {}
    head = cfg.required(("head_dim",), 1 << 20)
    if not isinstance(per, dict) or not all(str(k).isdigit() and int(k) < n for k in per):
        raise ConfigError(f"{cfg.source}: per_layer_config must map layer indices below {n} "
                          f"to their overrides: fix per_layer_config")
    overrides = {int(k): v for k, v in per.items()}
    heads = [(overrides.get(i) or {}).get("head_dim", head) for i in range(n)]
    return [cfg.check_int(f"per_layer_config[{i}].head_dim", h, high=1 << 20)
            for i, h in enumerate(heads)]


def _loopcoder(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """IQuest-LoopCoder: loop 0 keeps the model's own cache; loops 1.. slide over
    ``loop_window_size`` (class default 64, its getattr default)."""
    loops = cfg.integer(("loop_num",), MAX_LOOPS) or 2
    window = cfg.integer(("loop_window_size",), MAX_POSITIONS) or 64
    first = _cache_window(cfg)  # loop 0 keeps the model's cache_config
    loop0: Kind = ("sliding", first) if first else _FULL
    return [[loop0] + [("sliding", window)] * (loops - 1) for _ in range(n)]


def _hrm_text(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """HRM-Text: per stack layer, ``H_cycles x L_cycles`` L-stack steps and ``H_cycles``
    H-stack steps, each a full-attention cache (class defaults 2 and 3)."""
    high = cfg.integer(("H_cycles",), MAX_LOOPS) or 2
    low = cfg.integer(("L_cycles",), MAX_LOOPS) or 3
    return [[_FULL] * (high * low + high) for _ in range(n)]


def _muse_glimmer(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Muse-Glimmer: full where ``(n - 1 - i) % 4 == 0`` unless layer_types is written."""
    derived = ["full_attention" if (n - 1 - i) % 4 == 0 else "sliding_attention"
               for i in range(n)]  # fmt: skip
    types = _layer_types(cfg, n, derived, {"full_attention", "sliding_attention"})
    window = _window(cfg) if "sliding_attention" in types else None
    return [[("sliding", window) if t == "sliding_attention" else _FULL] for t in types]


def _flint(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Flint: ``layer_types`` as written, else all full (FlintConfig)."""
    types = _layer_types(cfg, n, ["full_attention"] * n, {"full_attention", "sliding_attention"})
    window = _window(cfg) if "sliding_attention" in types else None
    return [[("sliding", window) if t == "sliding_attention" else _FULL] for t in types]


def _minimax_m3(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """MiniMax-M3 (vllm/models/minimax_m3/nvidia/model.py): GQA attention in every layer; where
    ``sparse_attention_config.sparse_attention_freq[i]`` is non-zero, also the indexer's bf16
    key cache of ``sparse_index_dim`` (common/indexer.py; ``indexer_kv_dtype`` auto is bf16)."""
    sparse = cfg.get("sparse_attention_config") or {}
    freq = sparse.get("sparse_attention_freq") if isinstance(sparse, dict) else None
    if freq is None:
        return [[_FULL] for _ in range(n)]
    if not isinstance(freq, list) or len(freq) != n:
        raise ConfigError(f"{cfg.source}: sparse_attention_config.sparse_attention_freq must "
                          f"give each of the {n} layers a 0 or 1: fix it")
    dim = cfg.check_int("sparse_attention_config.sparse_index_dim",
                        sparse.get("sparse_index_dim"), high=1 << 20)
    return [[_FULL, ("indexer_bf16", dim)] if f else [_FULL] for f in freq]


def _inkling(cfg: ModelConfig, n: int) -> list[list[Kind]]:
    """Inkling (vllm/models/inkling/nvidia/model.py): each layer a short-conv state of
    ``sconv_kernel_size`` (default 4) and attention, sliding over ``sliding_window_size``
    (default 512) on ``local_layer_ids``, full elsewhere."""
    local = cfg.get("local_layer_ids") or []
    if not isinstance(local, list) or not all(isinstance(i, int) for i in local):
        raise ConfigError(f"{cfg.source}: local_layer_ids must list layer indices: fix it")
    kernel = cfg.integer(("sconv_kernel_size", "conv_kernel_size"), MAX_POSITIONS) or 4
    window = cfg.integer(("sliding_window_size",), MAX_POSITIONS) or 512
    return [[("sconv_swa", kernel), ("sliding", window)] if i in local
            else [("sconv", kernel), _FULL] for i in range(n)]


LOOP_LAYOUTS: dict[str, Callable[[ModelConfig, int], list[list[Kind]]]] = {
    "dory": _dory,
    "loopcoder": _loopcoder,
    "hrm_text": _hrm_text,
    "muse_glimmer": _muse_glimmer,
    "flint": _flint,
    "minimax_m3": _minimax_m3,
    "inkling": _inkling,
    "domyn_edge": lambda cfg, n: [[kind] for kind in domyn_kinds(cfg, n)],
}
