"""The KV-cache geometry of a model, read from its ``config.json``.

What :class:`~memacct.model.spec.KVCacheSpec` holds, worked out from a
checked config (:class:`~memacct.model.config.ModelConfig`): the rule that
reads its architecture (:mod:`memacct.model.arch_rules`), the KV-cache
dtype (``auto`` resolved as vLLM resolves it), the attention kind (MHA/GQA/MQA
or MLA), KV heads per tensor-parallel rank, the per-layer list
(:mod:`memacct.model.layouts`) and the pipeline stage that needs the most cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from memacct.errors import ConfigError, InvalidInputError
from memacct.model.arch_rules import Rule, resolve_rule, unread_geometry_fields
from memacct.model.config import (
    DTYPE_ALIASES,
    HEAD_KEYS,
    HIDDEN_KEYS,
    KV_DTYPE_BYTES,
    KV_HEAD_KEYS,
    LAYER_KEYS,
    MAX_DIM,
    MAX_HEADS,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_VOCAB,
    ModelConfig,
    checkpoint_dtype,
    checkpoint_kv_dtype,
)
from memacct.model.layers import LayerSpec
from memacct.model.layouts import (
    ATTENTION_FREE,
    ATTENTION_GEOMETRY,
    Geometry,
    build_layers,
    ssm_dtype_bytes,
)

__all__ = [
    "FP8_DS_MLA",
    "FP8_DS_MLA_BYTES",
    "kv_dtype_bytes",
    "pipeline_partition",
    "spec_fields",
]

FP8_DS_MLA = "fp8_ds_mla"
# Bytes per token per layer of DeepSeek-V3.2's sparse-MLA KV format (docs/engines.md).
FP8_DS_MLA_BYTES = 656



def kv_dtype_bytes(kv_cache_dtype: str) -> tuple[str, int]:
    """Normalise a KV-cache dtype name and return ``(name, bytes per element)``.

    Accepts ``bfloat16``/``bf16``, ``float16``/``fp16``/``half``,
    ``float32``/``fp32``/``float``, ``fp8``, ``fp8_e4m3``, ``fp8_e5m2``,
    ``fp8_inc`` and ``int8`` (case-insensitive, an optional ``torch.``
    prefix). ``auto`` is resolved by :meth:`KVCacheSpec.from_hf_config`, not here.

    Raises:
        InvalidInputError: the name is not a KV-cache dtype.
    """
    if not isinstance(kv_cache_dtype, str):
        raise InvalidInputError(
            f"kv_cache_dtype must be a string such as 'auto', 'bfloat16' or 'fp8', "
            f"got {kv_cache_dtype!r}"
        )
    name = kv_cache_dtype.strip().lower().removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    if name == FP8_DS_MLA:
        return name, 1
    if name not in KV_DTYPE_BYTES:
        choices = ", ".join(["auto", *KV_DTYPE_BYTES, *DTYPE_ALIASES])
        raise InvalidInputError(f"unknown kv_cache_dtype {kv_cache_dtype!r}: use one of {choices}")
    return name, KV_DTYPE_BYTES[name]


def pipeline_partition(num_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """Layers per pipeline stage, split as vLLM splits them.

    Every stage gets ``num_layers // pp`` layers; the remainder goes one layer
    each to the stages just before the last (the last stage also holds the
    LM head), e.g. 61 layers on 4 stages -> ``(15, 15, 16, 15)``.

    Raises:
        InvalidInputError: more stages than layers.
    """
    if pipeline_parallel_size > num_layers:
        raise InvalidInputError(
            f"pipeline_parallel_size {pipeline_parallel_size} exceeds the model's {num_layers} "
            f"layers: every stage needs at least one layer; use at most {num_layers} stages"
        )
    parts = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for i in range(2, num_layers % pipeline_parallel_size + 2):
        parts[-i] += 1
    return tuple(parts)


def _resolve_kv_dtype(cfg: ModelConfig, kv_cache_dtype: str, model_dtype: str | None) -> str:
    if kv_cache_dtype.strip().lower() != "auto":
        return kv_dtype_bytes(kv_cache_dtype)[0]
    declared = checkpoint_kv_dtype(cfg)
    if declared is not None:
        cfg.notes.append(
            "kv_cache_dtype auto: the checkpoint's ModelOpt quantization_config declares "
            "an FP8 KV cache"
        )
        return declared
    if model_dtype is None:
        # vLLM reads a missing dtype as float32 and runs float32 checkpoints in bfloat16.
        cfg.notes.append(
            f"{cfg.source} has no torch_dtype or dtype: kv_cache_dtype='auto' is bfloat16, "
            f"as vLLM runs it; pass kv_cache_dtype if the engine runs another dtype"
        )
        return "bfloat16"
    if model_dtype == "float32":
        # vLLM (vllm/config/model.py _resolve_auto_dtype) and SGLang run float32
        # checkpoints in the device's preferred 16-bit dtype: bfloat16 on CUDA.
        cfg.notes.append(
            "the checkpoint is float32: kv_cache_dtype='auto' is bfloat16, as engines run it; "
            "pass kv_cache_dtype='float32' for a float32 KV cache"
        )
        return "bfloat16"
    return model_dtype


def kv_heads_of(cfg: ModelConfig, num_heads: int) -> int:
    found = cfg.find(KV_HEAD_KEYS)
    # ChatGLM names a group count that only applies when multi-query attention is on.
    if (
        found is not None
        and found[0].endswith("multi_query_group_num")
        and cfg.get("multi_query_attention") is False
    ):
        found = None
    if cfg.get("new_decoder_architecture") is False and cfg.get("multi_query") is True:
        # Falcon's older layout: one KV head whatever num_kv_heads says (falcon.py).
        return 1
    attn_config = cfg.get("attn_config")
    if found is None and isinstance(attn_config, dict) and attn_config.get("kv_n_heads"):
        # DBRX and MPT keep their KV heads in attn_config (vllm/model_executor/models/dbrx.py).
        found = ("attn_config.kv_n_heads", attn_config["kv_n_heads"])
    if found is None:
        return 1 if cfg.get("multi_query") is True else num_heads
    kv = cfg.check_int(*found, high=MAX_HEADS)
    if kv > num_heads:
        raise ConfigError(
            f"{cfg.source}: {found[0]} = {kv} exceeds num_attention_heads = {num_heads}: "
            f"fix one of them"
        )
    return kv


def _head_dim(cfg: ModelConfig, hidden: int, num_heads: int) -> int:
    # HunYuan names it attention_head_dim when head_dim is absent (hunyuan_v1.py).
    head_dim = cfg.integer(("head_dim", "attention_head_dim"), MAX_DIM)
    if head_dim is not None:
        return head_dim
    if hidden % num_heads:
        raise ConfigError(
            f"{cfg.source} has no head_dim and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {num_heads}: add head_dim"
        )
    return hidden // num_heads


def _kv_heads_per_rank(cfg: ModelConfig, total: int, num_heads: int, tp: int) -> int:
    if num_heads % tp:
        raise InvalidInputError(
            f"tensor_parallel_size {tp} does not divide the {num_heads} attention heads of "
            f"{cfg.source}: use a tensor_parallel_size that divides {num_heads}"
        )
    if total >= tp:
        if total % tp:
            raise InvalidInputError(
                f"tensor_parallel_size {tp} does not divide the {total} KV heads of "
                f"{cfg.source}: use a divisor of {total}, or a multiple of it"
            )
        return total // tp
    if tp % total:
        raise InvalidInputError(
            f"tensor_parallel_size {tp} exceeds the {total} KV heads of {cfg.source} but is "
            f"not a multiple of it, so the heads cannot be replicated evenly: use a multiple "
            f"of {total}"
        )
    cfg.notes.append(f"{total} KV heads replicated: one per rank across {tp} ranks")
    return 1


def _attention_geometry(
    cfg: ModelConfig, rule: Rule, tp: int, num_heads: int, hidden: int
) -> dict[str, tuple[int, int, int]]:
    """``(kv heads per rank, head size, V head size)`` per attention kind."""
    if rule.layout == "zamba2":
        # zamba2.py: the shared blocks' Attention keeps all its heads (no GQA) of
        # attention_head_dim, split across the TP ranks.
        head = cfg.required(("attention_head_dim",), MAX_DIM)
        _kv_heads_per_rank(cfg, num_heads, num_heads, tp)
        return {"full": (num_heads // tp, head, head)}
    head = _head_dim(cfg, hidden, num_heads)
    total = kv_heads_of(cfg, num_heads)
    if rule.layout in ATTENTION_GEOMETRY:
        return ATTENTION_GEOMETRY[rule.layout](
            cfg, head, total, lambda kv: _kv_heads_per_rank(cfg, kv, num_heads, tp))
    if rule.layout != "mimo_v2_flash":
        return {"full": (_kv_heads_per_rank(cfg, total, num_heads, tp), head, head)}
    # MiMo-V2-Flash (vllm/model_executor/models/mimo_v2_flash.py): its own K, V and window
    # geometry, max(1, kv_heads // tp) per rank.
    swa_kv = cfg.required(("swa_num_key_value_heads",), MAX_HEADS)
    swa_head = cfg.required(("swa_head_dim",), MAX_DIM)
    return {
        "full": (max(1, total // tp), head, cfg.integer(("v_head_dim",), MAX_DIM) or head),
        "sliding": (max(1, swa_kv // tp), swa_head,
                    cfg.integer(("swa_v_head_dim",), MAX_DIM) or swa_head),
    }


def _stage_of(layers: Sequence[LayerSpec], stages: Sequence[int]) -> int:
    """The stage that needs the most cache: most KV bytes per token, then most full layers."""
    starts = [sum(stages[:i]) for i in range(len(stages))]

    def key(stage: int) -> tuple[int, int, int]:
        members = [x for x in layers if starts[stage] <= x.layer < starts[stage] + stages[stage]]
        kv = [x for x in members if x.bytes_per_token]
        full = sum(x.kind in ("full", "mla") for x in kv)
        return sum(x.bytes_per_token for x in kv), full, stages[stage]

    return max(range(len(stages)), key=key)


class _Dtypes(NamedTuple):
    """The dtypes a spec is sized in: the model's (float32 served as bfloat16), the KV cache's;
    named as the spec's fields, which take them as they are."""

    dtype: str | None
    dtype_bytes: int | None
    kv_dtype: str
    kv_dtype_bytes: int


class _Attention(NamedTuple):
    """The attention kind and its per-rank geometry (MLA: the latent row)."""

    kind: Literal["mha", "mla"]
    geometry: dict[str, tuple[int, int, int]]
    """``(kv heads per rank, head size, V head size)`` per attention kind."""
    lora_rank: int | None
    rope_dim: int | None
    latent: int | None
    row_bytes: int | None
    """Bytes of one token's row where the format fixes it (DeepSeek's sparse MLA)."""


def spec_fields(
    cfg: ModelConfig,
    kv_cache_dtype: str,
    tp: int,
    pp: int,
    *,
    model_name: str | None,
    default_name: str | None,
    assume_full_attention: bool = False,
) -> dict[str, Any]:
    """The fields of a :class:`~memacct.model.spec.KVCacheSpec` read from ``cfg``.

    ``tp`` and ``pp`` are checked already; ``kv_cache_dtype`` is ``auto`` or a valid name.
    """
    rule = resolve_rule(cfg, assume_full_attention=assume_full_attention)
    _check_pipeline(cfg, rule, pp, tp)
    num_layers = cfg.required(rule.layer_keys or LAYER_KEYS, MAX_LAYERS)
    attention_free = rule.layout in ATTENTION_FREE
    num_heads = ((cfg.integer(HEAD_KEYS, MAX_HEADS) or 1) if attention_free
                 else cfg.required(HEAD_KEYS, MAX_HEADS))
    hidden = cfg.required(HIDDEN_KEYS, MAX_DIM)
    dtypes = _read_dtypes(cfg, kv_cache_dtype)
    att = _read_attention(cfg, rule, tp, num_heads, hidden, dtypes.kv_dtype, attention_free)
    _note_unplanned(cfg, rule, att.kind == "mla")
    model_bytes = dtypes.dtype_bytes or 2
    ssm_bytes = ssm_dtype_bytes(cfg, model_bytes)
    geo = Geometry(tp=tp, hidden=hidden, kv_bytes=dtypes.kv_dtype_bytes, model_bytes=model_bytes,
                   ssm_bytes=ssm_bytes, attention=att.geometry, latent=att.latent,
                   latent_row_bytes=att.row_bytes, state_checkpoints=rule.prefix_caching)
    layers = build_layers(cfg, rule.layout, num_layers, geo)
    stages = pipeline_partition(num_layers, pp)
    stage, mine = _planned_stage(cfg, layers, stages, attention_free)
    kv_heads, head_dim, _ = att.geometry["full"]
    has_state = any(x.state_bytes is not None for x in layers)
    mlp = _mlp_fields(cfg)
    name = model_name or _default_model_name(cfg, default_name)
    return dict(
        model_name=name,
        model_type=cfg.model_type,
        attention=att.kind,
        **dtypes._asdict(),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        pipeline_stage=stage,
        pipeline_layers=stages,
        total_num_layers=num_layers,
        num_layers=stages[stage],
        hidden_size=hidden,
        num_attention_heads=num_heads,
        total_num_kv_heads=1 if att.kind == "mla" else kv_heads_of(cfg, num_heads),
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        kv_lora_rank=att.lora_rank,
        qk_rope_head_dim=att.rope_dim,
        **mlp,
        **_size_limits(cfg),
        bytes_per_token=sum(x.bytes_per_token for x in mine),
        layers=tuple(layers),
        state_dtype_bytes=ssm_bytes if has_state else None,
        mamba_ssm_dtype=(
            declared if has_state and isinstance(declared := cfg.get("mamba_ssm_dtype"), str)
            else None
        ),
        position_limit=None if (limit := cfg.position_limit) is None else limit[0],
        notes=tuple(dict.fromkeys(cfg.notes)),
    )


def _check_pipeline(cfg: ModelConfig, rule: Rule, pp: int, tp: int) -> None:
    """Refuse pipeline (or tensor) parallelism where vLLM's model class does not run it."""
    if pp > 1 and not rule.pipeline_parallel:
        raise InvalidInputError(
            f"{cfg.source}: architecture {cfg.architecture or cfg.model_type!r} does not "
            f"support pipeline parallelism in vLLM (its model class is not SupportsPP, "
            f"{rule.source.split(',')[0]}): use pipeline_parallel_size 1"
        )
    if tp > 1 and not rule.tensor_parallel:
        raise InvalidInputError(
            f"{cfg.source}: architecture {cfg.architecture or cfg.model_type!r} runs on one "
            f"tensor-parallel rank only in vLLM ({rule.source.split(',')[0]}): use "
            f"tensor_parallel_size 1"
        )


def _read_dtypes(cfg: ModelConfig, kv_cache_dtype: str) -> _Dtypes:
    """The model's dtype as served, and the KV cache's (``auto``: the checkpoint's, the model's)."""
    dtype, dtype_bytes = checkpoint_dtype(cfg)
    kv_dtype = _resolve_kv_dtype(cfg, kv_cache_dtype, dtype)
    if dtype == "float32":
        # vLLM serves a float32 checkpoint in bfloat16 (vllm/config/model.py _resolve_auto_dtype):
        # the spec's dtype is the one every term (activations, graphs, state) is sized in.
        dtype, dtype_bytes = "bfloat16", KV_DTYPE_BYTES["bfloat16"]
        cfg.notes[:] = [n for n in cfg.notes if not n.startswith("the checkpoint is float32")]
        cfg.notes.append("the checkpoint is float32: planned in bfloat16, the dtype vLLM serves "
                         "it in (weights, activations, CUDA graphs, KV cache under --kv-cache-dtype"
                         " auto)")
    kv_bytes = 1 if kv_dtype == FP8_DS_MLA else KV_DTYPE_BYTES[kv_dtype]
    return _Dtypes(dtype, dtype_bytes, kv_dtype, kv_bytes)


def _read_attention(
    cfg: ModelConfig, rule: Rule, tp: int, num_heads: int, hidden: int, kv_dtype: str,
    attention_free: bool,
) -> _Attention:
    """MLA where the config has ``kv_lora_rank``, else multi-head (GQA, MQA) attention."""
    lora_rank = cfg.integer(("kv_lora_rank",), MAX_DIM)
    if lora_rank is not None:
        rope_dim = cfg.required(("qk_rope_head_dim",), MAX_DIM)
        if num_heads % tp:
            raise InvalidInputError(
                f"tensor_parallel_size {tp} does not divide the {num_heads} attention heads "
                f"of {cfg.source}: use a tensor_parallel_size that divides {num_heads}"
            )
        # One latent serves both keys and values, and every TP rank keeps all of it.
        latent = lora_rank + rope_dim
        # DeepSeek-V3.2's sparse MLA row: fp8 latent, scales and a bf16 RoPE tail.
        row_bytes = FP8_DS_MLA_BYTES if kv_dtype == FP8_DS_MLA else None
        return _Attention("mla", {"full": (1, latent, 0)}, lora_rank, rope_dim, latent, row_bytes)
    if kv_dtype == FP8_DS_MLA:
        raise InvalidInputError(
            f"kv_cache_dtype {FP8_DS_MLA!r} is DeepSeek's sparse-MLA format, but "
            f"{cfg.source} is not an MLA model: use 'fp8' or 'auto'"
        )
    # Attention-free: no attention geometry (the spec's head fields are placeholders).
    geometry = ({"full": (1, 1, 1)} if attention_free
                else _attention_geometry(cfg, rule, tp, num_heads, hidden))
    return _Attention("mha", geometry, None, None, None, None)


def _note_unplanned(cfg: ModelConfig, rule: Rule, mla: bool) -> None:
    """Notes for what the config sets and the plan leaves out: geometry keys the rule does
    not read, and multi-token-prediction layers."""
    for field in unread_geometry_fields(cfg, rule, mla):
        cfg.notes.append(
            f"warning: {cfg.source} sets {field}, which changes a layer's geometry and which "
            f"memacct's rule for this architecture does not read: the plan may be wrong"
        )
    mtp_layers = cfg.integer(("num_nextn_predict_layers",), MAX_LAYERS, low=0)
    if mtp_layers:
        cfg.notes.append(
            f"the {mtp_layers} multi-token-prediction layer(s) are not counted: they hold "
            f"cache only when the engine runs them for speculative decoding"
        )


def _planned_stage(
    cfg: ModelConfig, layers: list[LayerSpec], stages: tuple[int, ...], attention_free: bool
) -> tuple[int, list[LayerSpec]]:
    """The pipeline stage planned for (the one needing the most cache) and its cache layers.

    Raises:
        ConfigError: no layer keeps a cache, or the stage has none of its own.
    """
    stage = _stage_of(layers, stages)
    start = sum(stages[:stage])
    # Attention-free models (Mamba, Mamba-2) keep only states: vLLM plans them as state groups.
    if not any(x.has_cache for x in layers):
        raise ConfigError(
            f"{cfg.source}: architecture {cfg.architecture or cfg.model_type!r} has no "
            f"layer that keeps a cache: refused"
        )
    mine = [x for x in layers if start <= x.layer < start + stages[stage]
            and (x.has_cache if attention_free else x.bytes_per_token)]
    if not mine:
        raise ConfigError(
            f"{cfg.source}: no layer of pipeline stage {stage} keeps a KV cache of its own: "
            f"use fewer pipeline stages"
        )
    return stage, mine


def _mlp_fields(cfg: ModelConfig) -> dict[str, int | None]:
    """The MLP's sizes: the dense intermediate size and, for MoE, the experts'."""
    num_experts = cfg.integer(("num_local_experts", "n_routed_experts", "num_experts"), MAX_HEADS)
    experts_per_token = cfg.integer(
        ("num_experts_per_tok", "experts_per_token", "moe_topk"), MAX_HEADS
    )
    if num_experts and experts_per_token and experts_per_token > num_experts:
        raise ConfigError(
            f"{cfg.source}: {experts_per_token} experts per token exceeds the {num_experts} "
            f"experts: fix num_experts_per_tok"
        )
    found = cfg.find(("intermediate_size", "ffn_dim", "n_inner"))
    if found is not None and isinstance(found[1], list) and found[1]:
        # Per-layer sizes (Gemma-3n): the largest one bounds the MLP.
        intermediate: int | None = max(
            cfg.check_int(found[0], v, high=MAX_INTERMEDIATE) for v in found[1]
        )
    else:
        intermediate = cfg.integer(("intermediate_size", "ffn_dim", "n_inner"), MAX_INTERMEDIATE)
    moe_intermediate = cfg.integer(("moe_intermediate_size",), MAX_INTERMEDIATE)
    if moe_intermediate is None and num_experts is not None:
        moe_intermediate = intermediate
    return dict(
        intermediate_size=intermediate,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
        moe_intermediate_size=moe_intermediate,
    )


def _size_limits(cfg: ModelConfig) -> dict[str, int | None]:
    """The vocabulary, the declared context length and the shared experts."""
    return dict(
        vocab_size=cfg.integer(("vocab_size", "padded_vocab_size"), MAX_VOCAB),
        max_position_embeddings=cfg.integer(
            ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
            MAX_POSITIONS,
        ),
        num_shared_experts=cfg.integer(
            ("n_shared_experts", "num_shared_experts"), MAX_HEADS, low=0
        ),
    )


def _default_model_name(cfg: ModelConfig, default_name: str | None) -> str:
    for candidate in (cfg.root.get("_name_or_path"), default_name):
        if isinstance(candidate, str) and candidate:
            return candidate
    architectures = cfg.root.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return cfg.model_type or "model"
