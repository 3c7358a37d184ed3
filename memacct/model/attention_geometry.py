"""Attention geometry per layer kind, for families whose kinds differ in heads or head size.

Most families give every attention layer the geometry of
:func:`memacct.model.geometry.spec_fields`; the layouts here give each kind its own
``(KV heads per rank, head size, V head size)``, as their vLLM model files build them:
Gemma 4's per-layer configuration, Step-1/3.5's attention groups, Step-3's single KV head,
HRM-Text's multi-head attention, IQuest-LoopCoder's head size.
"""

from __future__ import annotations

from collections.abc import Callable

from memacct.errors import ConfigError, InvalidInputError
from memacct.model.config import MAX_DIM, MAX_HEADS, MAX_LAYERS, ModelConfig
from memacct.model.loop_layouts import domyn_heads, domyn_kinds

__all__ = ["ATTENTION_GEOMETRY", "KVHeadsPerRank", "gemma4_layer_types"]

KVHeadsPerRank = Callable[[int], int]


def gemma4_layer_types(cfg: ModelConfig, n: int) -> list[str]:
    """Gemma 4's ``layer_types`` as ``Gemma4TextConfig.__post_init__`` leaves them: every
    6th layer full when none are listed, and the last layer forced to full attention."""
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        layer_types = ["sliding_attention" if (i + 1) % 6 else "full_attention"
                       for i in range(n)]  # fmt: skip
    if not isinstance(layer_types, list) or len(layer_types) != n:
        raise ConfigError(
            f"{cfg.source}: layer_types must list one type per layer ({n}): fix layer_types"
        )
    return [*layer_types[:-1], "full_attention"]


def _gemma4_attention(cfg: ModelConfig, head: int, kv_heads: int, per_rank: KVHeadsPerRank,
                      k_eq_v: bool | None = None) -> dict[str, tuple[int, int, int]]:
    """Gemma 4's two geometries (``Gemma4TextConfig.per_layer_config``, read by gemma4.py's
    decoder layer): full layers take ``global_head_dim`` (class default 512) and, when
    ``attention_k_eq_v`` is true, ``num_global_key_value_heads``; sliding layers keep
    ``head_dim`` and ``num_key_value_heads``. A written ``per_layer_config`` wins.
    ``k_eq_v`` overrides the config's ``attention_k_eq_v`` (DiffusionGemma)."""
    global_head = cfg.integer(("global_head_dim",), MAX_DIM) or 512
    global_kv = kv_heads
    if (cfg.get("attention_k_eq_v") is True) if k_eq_v is None else k_eq_v:
        global_kv = cfg.integer(("num_global_key_value_heads",), MAX_HEADS) or kv_heads
    written = cfg.get("per_layer_config")
    if isinstance(written, dict) and written:
        n = cfg.required(("num_hidden_layers",), MAX_LAYERS)
        full = {i for i, t in enumerate(gemma4_layer_types(cfg, n)) if t == "full_attention"}
        if {int(k) for k in written if str(k).isdigit()} != full:
            raise ConfigError(
                f"{cfg.source}: per_layer_config overrides other layers than the full-"
                f"attention ones of layer_types, which memacct's Gemma 4 rule does not size: "
                f"fix per_layer_config or layer_types"
            )
        entries = [v for v in written.values() if isinstance(v, dict)]
        heads = {v.get("head_dim", head) for v in entries}
        kvs = {v.get("num_key_value_heads", kv_heads) for v in entries}
        if len(heads) != 1 or len(kvs) != 1:
            raise ConfigError(
                f"{cfg.source}: per_layer_config gives the overridden layers more than one "
                f"geometry, which memacct's Gemma 4 rule does not size: fix per_layer_config"
            )
        global_head = cfg.check_int("per_layer_config.head_dim", heads.pop(), high=MAX_DIM)
        global_kv = cfg.check_int("per_layer_config.num_key_value_heads", kvs.pop(),
                                  high=MAX_HEADS)
    return {"full": (per_rank(global_kv), global_head, global_head),
            "sliding": (per_rank(kv_heads), head, head)}


def _diffusion_gemma_attention(cfg: ModelConfig, head: int, kv_heads: int,
                               per_rank: KVHeadsPerRank) -> dict[str, tuple[int, int, int]]:
    """DiffusionGemma (diffusion_gemma.py:189, DiffusionGemmaForConditionalGeneration.__init__)
    sets ``text_config.attention_k_eq_v = True`` before it builds Gemma 4's layers, whatever
    the config says: Gemma 4's geometry with it on."""
    return _gemma4_attention(cfg, head, kv_heads, per_rank, k_eq_v=True)


def _step_attention(cfg: ModelConfig, head: int, kv_heads: int, per_rank: KVHeadsPerRank
                    ) -> dict[str, tuple[int, int, int]]:
    """Step-1 and Step-3.5 (step1.py, step3p5.py): ``num_attention_groups`` KV heads (Step-1:
    else ``num_key_value_heads``, else 1), on full and sliding layers alike."""
    groups = cfg.integer(("num_attention_groups", "num_key_value_heads"), MAX_HEADS) or 1
    return {"full": (per_rank(groups), head, head), "sliding": (per_rank(groups), head, head)}


def _step3_attention(cfg: ModelConfig, head: int, kv_heads: int, per_rank: KVHeadsPerRank
                     ) -> dict[str, tuple[int, int, int]]:
    """Step-3 (step3_text.py): one KV head of ``head_dim`` per layer (``num_kv_heads=1``),
    replicated on every rank."""
    return {"full": (per_rank(1), head, head)}


def _hrm_attention(cfg: ModelConfig, head: int, kv_heads: int, per_rank: KVHeadsPerRank
                   ) -> dict[str, tuple[int, int, int]]:
    """HRM-Text (hrm_text.py): multi-head attention, ``num_attention_heads`` KV heads
    (``num_key_value_heads`` is not read), of ``head_dim`` (class default 128)."""
    heads = cfg.required(("num_attention_heads",), MAX_HEADS)
    return {"full": (per_rank(heads), head, head)}


def _loopcoder_attention(cfg: ModelConfig, head: int, kv_heads: int,
                         per_rank: KVHeadsPerRank) -> dict[str, tuple[int, int, int]]:
    """IQuest-LoopCoder (iquest_loopcoder.py): ``hidden_size // num_attention_heads`` per
    head, whatever ``head_dim`` says; every loop's cache the same."""
    hidden = cfg.required(("hidden_size",), MAX_DIM)
    size = hidden // cfg.required(("num_attention_heads",), MAX_HEADS)
    geometry = (per_rank(kv_heads), size, size)
    return {"full": geometry, "sliding": geometry}


def _domyn_attention(cfg: ModelConfig, head: int, kv_heads: int, per_rank: KVHeadsPerRank
                     ) -> dict[str, tuple[int, int, int]]:
    """DomynEdge (domyn_edge.py): ``num_key_value_heads`` of ``per_layer_config[i].head_dim``;
    one head size per kind (full, sliding) is sized, more is refused."""
    n = cfg.required(("num_hidden_layers",), MAX_LAYERS)
    sizes: dict[str, set[int]] = {}
    for (kind, _), size in zip(domyn_kinds(cfg, n), domyn_heads(cfg, n), strict=True):
        sizes.setdefault(kind, set()).add(size)
    if any(len(v) > 1 for v in sizes.values()):
        raise ConfigError(
            f"{cfg.source}: per_layer_config gives layers of one kind more than one head_dim "
            f"({sizes}), which memacct's DomynEdge rule does not size: fix per_layer_config"
        )
    geometry = {kind: (per_rank(kv_heads), min(v), min(v)) for kind, v in sizes.items()}
    # spec_fields reports the full layers' geometry; an all-sliding model reports its own.
    return {"full": geometry.get("full", geometry["sliding"]), **geometry}


def _inkling_attention(cfg: ModelConfig, head: int, kv_heads: int, per_rank: KVHeadsPerRank
                       ) -> dict[str, tuple[int, int, int]]:
    """Inkling (vllm/models/inkling/nvidia): full layers ``num_key_value_heads`` x ``head_dim``,
    local ones the ``swa_*`` geometry (defaults: the full one's); each layer's conv state
    ``kv // tp`` heads of ``2 head_dim + 2 hidden // kv`` rounded up to a power of two
    (InklingConvState, which asserts tp <= kv)."""
    hidden = cfg.required(("hidden_size",), MAX_DIM)
    swa_kv = cfg.integer(("swa_num_key_value_heads",), MAX_HEADS) or kv_heads
    swa_head = cfg.integer(("swa_head_dim",), MAX_DIM) or head
    heads = cfg.required(("num_attention_heads",), MAX_HEADS)
    tp = heads // per_rank(heads)  # per_rank checks that tp divides the heads

    def conv(kv: int, size: int) -> tuple[int, int, int]:
        if tp > kv:
            raise InvalidInputError(
                f"{cfg.source}: Inkling's conv state keeps whole KV heads per rank: "
                f"tensor_parallel_size {tp} exceeds its {kv}; use at most {kv}")
        return per_rank(kv), 1 << (2 * size + 2 * (hidden // kv) - 1).bit_length(), 0

    return {"full": (per_rank(kv_heads), head, head),
            "sliding": (per_rank(swa_kv), swa_head, swa_head),
            "sconv": conv(kv_heads, head), "sconv_swa": conv(swa_kv, swa_head)}


# Layouts whose attention kinds have their own geometry: (config, head size, KV heads,
# KV heads per rank) -> {kind: (kv heads per rank, head size, V head size)}.
ATTENTION_GEOMETRY: dict[str, Callable[[ModelConfig, int, int, KVHeadsPerRank],
                                       dict[str, tuple[int, int, int]]]] = {
    "gemma4": _gemma4_attention,
    "diffusion_gemma": _diffusion_gemma_attention,
    "step": _step_attention,
    "step3": _step3_attention,
    "hrm_text": _hrm_attention,
    "loopcoder": _loopcoder_attention,
    "domyn_edge": _domyn_attention,
    "inkling": _inkling_attention,
}
