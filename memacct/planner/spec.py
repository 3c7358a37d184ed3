"""What one token of KV cache costs on one rank, read from a model's ``config.json``.

:meth:`KVCacheSpec.from_hf_config` reads a Hugging Face ``config.json`` (a
path, a model directory, or the parsed dict) and works out the bytes of KV
cache one token needs on one rank, for:

* standard multi-head, grouped-query and multi-query attention:
  ``2 x kv_heads_per_rank x head_dim x kv_dtype_bytes`` per layer;
* multi-head latent attention (DeepSeek-V2/V3): one latent of
  ``kv_lora_rank + qk_rope_head_dim`` elements per layer, replicated on every
  tensor-parallel rank;
* sliding-window and hybrid models (``sliding_window``, ``use_sliding_window``,
  ``layer_types``, Gemma's interleaved patterns): window layers cost the same
  per token but a request never needs more than its window of them;
* tensor parallelism (KV heads split across ranks, replicated when there are
  fewer KV heads than ranks) and pipeline parallelism (layers split across
  stages as vLLM splits them; the stage with the most cache decides).

It also lists every layer of the model as a :class:`LayerSpec`
(:mod:`memacct.planner.layers`): full, sliding, chunked local (Llama 4), MLA,
Mamba2 / gated-delta-net state with its bytes per request (Granite-4.0-H,
Qwen3-Next, Nemotron-H), cache-less and KV-sharing layers (Gemma-3n). The
engines' KV-cache managers (:mod:`memacct.engines`) plan from that list.

Example::

    >>> from memacct.planner import KVCacheSpec, load_model_preset
    >>> spec = KVCacheSpec.from_hf_config(load_model_preset("llama-3.1-8b"))
    >>> spec.bytes_per_token == 2 * 32 * 8 * 128 * 2
    True
    >>> KVCacheSpec.from_preset("deepseek-v3", tensor_parallel_size=8).bytes_per_token
    70272
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memacct.errors import ConfigError, InvalidInputError
from memacct.planner.config import (
    _DTYPE_ALIASES,
    _HEAD_KEYS,
    _HIDDEN_KEYS,
    _KV_DTYPES,
    _KV_HEAD_KEYS,
    _LAYER_KEYS,
    _MAX_DIM,
    _MAX_HEADS,
    _MAX_INTERMEDIATE,
    _MAX_LAYERS,
    _MAX_POSITIONS,
    _MAX_VOCAB,
    _checkpoint_kv_dtype,
    _Config,
    _model_dtype,
    _parallel_size,
    _positive_int,
    _raise_missing_config,
    read_config_file,
)
from memacct.planner.layers import LayerSpec, layer_kinds, layer_specs, state_bytes

__all__ = [
    "KVCacheSpec",
    "LayerGroup",
    "LayerSpec",
    "kv_dtype_bytes",
    "pipeline_partition",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid", validate_default=True)

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
    name = _DTYPE_ALIASES.get(name, name)
    if name == FP8_DS_MLA:
        return name, 1
    if name not in _KV_DTYPES:
        choices = ", ".join(["auto", *_KV_DTYPES, *_DTYPE_ALIASES])
        raise InvalidInputError(f"unknown kv_cache_dtype {kv_cache_dtype!r}: use one of {choices}")
    return name, _KV_DTYPES[name]


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


class LayerGroup(BaseModel):
    """Layers of one rank that cost the same per token and see the same window.

    Attributes:
        num_layers: how many layers of this rank are in the group.
        bytes_per_token_per_layer: KV-cache bytes one token needs in one of them.
        sliding_window: the attention window in tokens, or ``None`` for
            layers that attend to the whole sequence.
    """

    model_config = _FROZEN

    num_layers: int = Field(gt=0)
    bytes_per_token_per_layer: int = Field(gt=0)
    sliding_window: int | None = Field(default=None, gt=0)

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token needs in all layers of the group."""
        return self.num_layers * self.bytes_per_token_per_layer


class KVCacheSpec(BaseModel):
    """The KV-cache geometry of a model on one rank (contract).

    Build it with :meth:`from_hf_config` or :meth:`from_preset`. Sizes are
    for one rank: with pipeline parallelism, for the stage that needs the most
    cache per token.

    Attributes:
        model_name: a name for messages and provenance.
        model_type: the config's ``model_type`` (of ``text_config`` when nested).
        attention: ``"mha"`` (multi-head, grouped-query or multi-query) or
            ``"mla"`` (multi-head latent attention).
        kv_dtype: the resolved KV-cache dtype (``auto`` never appears).
        kv_dtype_bytes: bytes per KV-cache element.
        dtype: the checkpoint's dtype from ``torch_dtype``/``dtype``, or
            ``None`` when the config does not say.
        dtype_bytes: bytes per element of ``dtype``, or ``None``.
        tensor_parallel_size: ranks a layer's heads are split across.
        pipeline_parallel_size: stages the layers are split across.
        pipeline_stage: the stage this spec describes (the one needing the most cache).
        pipeline_layers: layers per stage, in stage order.
        total_num_layers: the model's layers.
        num_layers: layers on this rank (``pipeline_layers[pipeline_stage]``).
        hidden_size: the model's hidden size.
        num_attention_heads: the model's query heads (all ranks together).
        total_num_kv_heads: the model's KV heads (1 for MLA: one latent).
        num_kv_heads: KV heads on one rank (at least 1: replicated when
            ``tensor_parallel_size`` exceeds the KV heads).
        head_dim: elements per KV head (for MLA, ``kv_lora_rank + qk_rope_head_dim``).
        kv_lora_rank: MLA latent rank, else ``None``.
        qk_rope_head_dim: MLA rotary part of the key, else ``None``.
        intermediate_size: the dense MLP's hidden size, when the config gives it.
        vocab_size: the vocabulary size, when given.
        max_position_embeddings: the longest sequence the config supports, when given.
        num_experts: routed experts of a mixture-of-experts model, else ``None``.
        experts_per_token: experts each token is routed to, else ``None``.
        moe_intermediate_size: one expert's MLP hidden size, else ``None``.
        num_shared_experts: always-active experts (DeepSeek), else ``None``.
        layer_groups: this rank's attention layers grouped by per-token cost
            and window (layers without a KV cache of their own are left out).
        bytes_per_token: KV-cache bytes one token needs on this rank, all
            its layers together.
        layers: every layer of the model (all stages), one :class:`LayerSpec`
            each, sized for one rank; empty for a spec built by hand, which
            the engines then read from ``layer_groups``.
        state_dtype_bytes: bytes per element of Mamba/linear-attention state
            (``mamba_ssm_dtype`` when the config gives it, else the model
            dtype), for hybrids only.
        notes: assumptions made while reading the config, one sentence each.
    """

    model_config = _FROZEN

    model_name: str
    model_type: str | None = None
    attention: Literal["mha", "mla"]
    kv_dtype: str
    kv_dtype_bytes: int = Field(gt=0)
    dtype: str | None = None
    dtype_bytes: int | None = Field(default=None, gt=0)
    tensor_parallel_size: int = Field(ge=1)
    pipeline_parallel_size: int = Field(ge=1)
    pipeline_stage: int = Field(ge=0)
    pipeline_layers: tuple[int, ...]
    total_num_layers: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    total_num_kv_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    intermediate_size: int | None = Field(default=None, gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    max_position_embeddings: int | None = Field(default=None, gt=0)
    num_experts: int | None = Field(default=None, gt=0)
    experts_per_token: int | None = Field(default=None, gt=0)
    moe_intermediate_size: int | None = Field(default=None, gt=0)
    num_shared_experts: int | None = Field(default=None, ge=0)
    layer_groups: tuple[LayerGroup, ...] = Field(min_length=1)
    bytes_per_token: int = Field(gt=0)
    layers: tuple[LayerSpec, ...] = ()
    state_dtype_bytes: int | None = Field(default=None, gt=0)
    notes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> KVCacheSpec:
        layers = sum(g.num_layers for g in self.layer_groups)
        if layers > self.num_layers:
            raise ValueError(f"layer_groups hold {layers} layers, num_layers is {self.num_layers}")
        if self.layers and len(self.layers) != self.total_num_layers:
            raise ValueError(
                f"layers lists {len(self.layers)} layers, total_num_layers is "
                f"{self.total_num_layers}"
            )
        per_token = sum(g.bytes_per_token for g in self.layer_groups)
        if per_token != self.bytes_per_token:
            raise ValueError(
                f"bytes_per_token ({self.bytes_per_token}) must equal the sum over "
                f"layer_groups ({per_token})"
            )
        if len(self.pipeline_layers) != self.pipeline_parallel_size:
            raise ValueError("pipeline_layers must have one entry per pipeline stage")
        if sum(self.pipeline_layers) != self.total_num_layers:
            raise ValueError("pipeline_layers must add up to total_num_layers")
        if self.pipeline_stage >= self.pipeline_parallel_size:
            raise ValueError("pipeline_stage must be below pipeline_parallel_size")
        if self.pipeline_layers[self.pipeline_stage] != self.num_layers:
            raise ValueError("num_layers must equal pipeline_layers[pipeline_stage]")
        return self

    @property
    def has_sliding_window(self) -> bool:
        """Whether some layers of this rank attend through a sliding window."""
        return any(g.sliding_window is not None for g in self.layer_groups)

    def bytes_per_block(self, block_size: int) -> int:
        """KV-cache bytes of one block of ``block_size`` tokens on this rank."""
        return _positive_int("block_size", block_size) * self.bytes_per_token

    def request_bytes(
        self, num_tokens: int, block_size: int = 16, max_num_batched_tokens: int | None = None
    ) -> int:
        """KV-cache bytes one request of ``num_tokens`` tokens holds on this rank, engine-neutral.

        Full-attention layers hold every token, in whole blocks:
        ``ceil(num_tokens / block_size)`` blocks. Sliding-window layers hold
        the window before the newest chunk plus the chunk:
        ``ceil((window - 1 + max_num_batched_tokens) / block_size) + 1`` blocks
        (the window seldom starts on a block boundary), never more than the
        full-attention count. This is the memory a request really touches;
        each engine reserves its own way (vLLM adds in-flight batches, does
        not cap the extra block and pads groups; see :mod:`memacct.engines`
        and ``docs/engines.md``), and :func:`memacct.plan_kv_cache` follows
        the engine.

        Args:
            num_tokens: prompt plus output tokens of the request.
            block_size: tokens per cache block.
            max_num_batched_tokens: the engine's prefill chunk. ``None`` means
                no chunked prefill: a whole prompt is prefilled at once, so
                window layers must hold all of it.

        Raises:
            InvalidInputError: a non-positive or non-integer argument.
        """
        tokens = _positive_int("num_tokens", num_tokens)
        block = _positive_int("block_size", block_size)
        chunk = (
            tokens
            if max_num_batched_tokens is None
            else _positive_int("max_num_batched_tokens", max_num_batched_tokens)
        )
        full_blocks = -(-tokens // block)
        total = 0
        for group in self.layer_groups:
            blocks = full_blocks
            if group.sliding_window is not None:
                held = min(tokens, group.sliding_window - 1 + chunk)
                blocks = min(full_blocks, -(-held // block) + 1)
            total += blocks * block * group.bytes_per_token
        return total

    def __str__(self) -> str:
        parallel = f"tp={self.tensor_parallel_size} pp={self.pipeline_parallel_size}"
        return (
            f"{self.model_name}: {self.bytes_per_token} bytes/token/rank "
            f"({self.num_layers} layers, {self.attention}, {self.num_kv_heads} KV heads x "
            f"{self.head_dim}, {self.kv_dtype}, {parallel})"
        )

    @classmethod
    def from_preset(
        cls,
        name: str,
        kv_cache_dtype: str = "auto",
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
    ) -> KVCacheSpec:
        """Build the spec of a shipped model preset (see :func:`model_presets`)."""
        from memacct.planner.presets import load_model_preset

        config = load_model_preset(name)
        return cls.from_hf_config(
            config,
            kv_cache_dtype=kv_cache_dtype,
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            model_name=name.strip().lower(),
        )

    @classmethod
    def from_hf_config(
        cls,
        path_or_dict: str | os.PathLike[str] | Mapping[str, Any],
        kv_cache_dtype: str = "auto",
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        *,
        model_name: str | None = None,
    ) -> KVCacheSpec:
        """Read a Hugging Face ``config.json`` (contract).

        Args:
            path_or_dict: a ``config.json`` path, a model directory holding
                one, or the parsed config. Multimodal configs are read from
                their ``text_config``. Nothing is executed or unpickled.
            kv_cache_dtype: ``"auto"`` (the checkpoint's declared FP8 KV cache
                if its ModelOpt quantization config declares one, as vLLM
                does; else the checkpoint's ``torch_dtype``/``dtype`` as
                written), or an explicit dtype, see :func:`kv_dtype_bytes`.
                Engines that run a ``float32`` checkpoint in 16 bits need the
                16-bit dtype named here.
            tensor_parallel_size: ranks each layer's heads are split across.
            pipeline_parallel_size: stages the layers are split across.
            model_name: name for messages; defaults to ``_name_or_path``, the
                directory's name, the architecture or the model type.

        Raises:
            ConfigError: the config is missing, unreadable, or has a missing,
                mistyped, non-positive or implausible value; the message names
                the key and what to change.
            InvalidInputError: a bad ``kv_cache_dtype`` or parallel size, or
                one that does not divide the model's heads.
        """
        tp = _parallel_size("tensor_parallel_size", tensor_parallel_size)
        pp = _parallel_size("pipeline_parallel_size", pipeline_parallel_size)
        kv_choice = kv_cache_dtype
        if not (isinstance(kv_choice, str) and kv_choice.strip().lower() == "auto"):
            kv_dtype_bytes(kv_choice)  # fail on a bad name before reading anything
        if isinstance(path_or_dict, Mapping):
            config = dict(path_or_dict)
            source = f"config of {model_name}" if model_name else "the model config"
            default_name = None
        elif isinstance(path_or_dict, (str, os.PathLike)):
            path = Path(path_or_dict)
            if not path.exists():
                _raise_missing_config(path)
            config = read_config_file(path)
            source = str(path / "config.json" if path.is_dir() else path)
            default_name = (path if path.is_dir() else path.parent).name or None
        else:
            raise InvalidInputError(
                f"from_hf_config takes a config.json path or a dict, "
                f"got {type(path_or_dict).__name__}"
            )
        return _build_spec(
            _Config(config, source), kv_choice, tp, pp,
            model_name=model_name, default_name=default_name,
        )


def _resolve_kv_dtype(cfg: _Config, kv_cache_dtype: str, model_dtype: str | None) -> str:
    if kv_cache_dtype.strip().lower() != "auto":
        return kv_dtype_bytes(kv_cache_dtype)[0]
    declared = _checkpoint_kv_dtype(cfg)
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


def _kv_heads(cfg: _Config, num_heads: int) -> int:
    found = cfg.find(_KV_HEAD_KEYS)
    # ChatGLM names a group count that only applies when multi-query attention is on.
    if (
        found is not None
        and found[0].endswith("multi_query_group_num")
        and cfg.get("multi_query_attention") is False
    ):
        found = None
    if found is None:
        return 1 if cfg.get("multi_query") is True else num_heads
    kv = cfg.check_int(*found, high=_MAX_HEADS)
    if kv > num_heads:
        raise ConfigError(
            f"{cfg.source}: {found[0]} = {kv} exceeds num_attention_heads = {num_heads}: "
            f"fix one of them"
        )
    return kv


def _head_dim(cfg: _Config, hidden: int, num_heads: int) -> int:
    head_dim = cfg.integer(("head_dim",), _MAX_DIM)
    if head_dim is not None:
        return head_dim
    if hidden % num_heads:
        raise ConfigError(
            f"{cfg.source} has no head_dim and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {num_heads}: add head_dim"
        )
    return hidden // num_heads


def _kv_heads_per_rank(cfg: _Config, total: int, num_heads: int, tp: int) -> int:
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


def _group_stage(layers: Sequence[LayerSpec], per_layer: int) -> tuple[LayerGroup, ...]:
    counts: dict[int | None, int] = {}
    for layer in layers:
        if layer.bytes_per_token:
            window = layer.window if layer.kind == "sliding" else None
            counts[window] = counts.get(window, 0) + 1
    order = sorted(counts, key=lambda w: -1 if w is None else w)
    return tuple(
        LayerGroup(num_layers=counts[w], bytes_per_token_per_layer=per_layer, sliding_window=w)
        for w in order
    )


def _build_spec(
    cfg: _Config,
    kv_cache_dtype: str,
    tp: int,
    pp: int,
    *,
    model_name: str | None,
    default_name: str | None,
) -> KVCacheSpec:
    num_layers = cfg.required(_LAYER_KEYS, _MAX_LAYERS)
    num_heads = cfg.required(_HEAD_KEYS, _MAX_HEADS)
    hidden = cfg.required(_HIDDEN_KEYS, _MAX_DIM)
    dtype, dtype_bytes = _model_dtype(cfg)
    kv_dtype = _resolve_kv_dtype(cfg, kv_cache_dtype, dtype)
    kv_bytes = 1 if kv_dtype == FP8_DS_MLA else _KV_DTYPES[kv_dtype]

    lora_rank = cfg.integer(("kv_lora_rank",), _MAX_DIM)
    rope_dim: int | None = None
    if lora_rank is not None:
        rope_dim = cfg.required(("qk_rope_head_dim",), _MAX_DIM)
        if num_heads % tp:
            raise InvalidInputError(
                f"tensor_parallel_size {tp} does not divide the {num_heads} attention heads "
                f"of {cfg.source}: use a tensor_parallel_size that divides {num_heads}"
            )
        attention: Literal["mha", "mla"] = "mla"
        head_dim = lora_rank + rope_dim
        total_kv_heads = kv_heads = 1
        # One latent serves both keys and values, and every TP rank keeps all of it.
        per_layer = head_dim * kv_bytes
        if kv_dtype == FP8_DS_MLA:
            # DeepSeek-V3.2's sparse MLA row: fp8 latent, scales and a bf16 RoPE tail.
            per_layer = FP8_DS_MLA_BYTES
    else:
        attention = "mha"
        if kv_dtype == FP8_DS_MLA:
            raise InvalidInputError(
                f"kv_cache_dtype {FP8_DS_MLA!r} is DeepSeek's sparse-MLA format, but "
                f"{cfg.source} is not an MLA model: use 'fp8' or 'auto'"
            )
        head_dim = _head_dim(cfg, hidden, num_heads)
        total_kv_heads = _kv_heads(cfg, num_heads)
        kv_heads = _kv_heads_per_rank(cfg, total_kv_heads, num_heads, tp)
        per_layer = 2 * kv_heads * head_dim * kv_bytes

    mtp_layers = cfg.integer(("num_nextn_predict_layers",), _MAX_LAYERS, low=0)
    if mtp_layers:
        cfg.notes.append(
            f"the {mtp_layers} multi-token-prediction layer(s) are not counted: they hold "
            f"cache only when the engine runs them for speculative decoding"
        )

    kinds = layer_kinds(cfg, num_layers)
    if attention == "mla":
        kinds = [("mla", None) if kind == "full" else (kind, size) for kind, size in kinds]
    state_sizes, state_dtype_bytes = state_bytes(cfg, kinds, hidden, tp, dtype_bytes)
    layers = layer_specs(cfg, kinds, per_layer, state_sizes)
    stages = pipeline_partition(num_layers, pp)
    starts = [sum(stages[:i]) for i in range(pp)]

    def stage_layers(stage: int) -> list[LayerSpec]:
        return [x for x in layers[starts[stage] : starts[stage] + stages[stage]] if x.has_cache]

    def stage_key(stage: int) -> tuple[int, int, int]:
        kv = [x for x in stage_layers(stage) if x.bytes_per_token]
        return len(kv), sum(x.kind in ("full", "mla") for x in kv), stages[stage]

    # Every KV layer costs the same per token, so the stage with the most of them needs the most
    # cache; among equals, the one with more full-attention layers needs more for long requests.
    stage = max(range(pp), key=stage_key)
    groups = _group_stage(stage_layers(stage), per_layer)
    if not groups:
        raise ConfigError(
            f"{cfg.source}: no layer of pipeline stage {stage} keeps a KV cache of its own: "
            f"use fewer pipeline stages"
        )

    num_experts = cfg.integer(("num_local_experts", "n_routed_experts", "num_experts"), _MAX_HEADS)
    experts_per_token = cfg.integer(
        ("num_experts_per_tok", "experts_per_token", "moe_topk"), _MAX_HEADS
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
            cfg.check_int(found[0], v, high=_MAX_INTERMEDIATE) for v in found[1]
        )
    else:
        intermediate = cfg.integer(("intermediate_size", "ffn_dim", "n_inner"), _MAX_INTERMEDIATE)
    moe_intermediate = cfg.integer(("moe_intermediate_size",), _MAX_INTERMEDIATE)
    if moe_intermediate is None and num_experts is not None:
        moe_intermediate = intermediate
    name = model_name or _default_model_name(cfg, default_name)
    return KVCacheSpec(
        model_name=name,
        model_type=cfg.model_type,
        attention=attention,
        kv_dtype=kv_dtype,
        kv_dtype_bytes=kv_bytes,
        dtype=dtype,
        dtype_bytes=dtype_bytes,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        pipeline_stage=stage,
        pipeline_layers=stages,
        total_num_layers=num_layers,
        num_layers=stages[stage],
        hidden_size=hidden,
        num_attention_heads=num_heads,
        total_num_kv_heads=total_kv_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        kv_lora_rank=lora_rank,
        qk_rope_head_dim=rope_dim,
        intermediate_size=intermediate,
        vocab_size=cfg.integer(("vocab_size", "padded_vocab_size"), _MAX_VOCAB),
        max_position_embeddings=cfg.integer(
            ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
            _MAX_POSITIONS,
        ),
        num_experts=num_experts,
        experts_per_token=experts_per_token,
        moe_intermediate_size=moe_intermediate,
        num_shared_experts=cfg.integer(
            ("n_shared_experts", "num_shared_experts"), _MAX_HEADS, low=0
        ),
        layer_groups=groups,
        bytes_per_token=sum(g.bytes_per_token for g in groups),
        layers=tuple(layers),
        state_dtype_bytes=state_dtype_bytes,
        notes=tuple(dict.fromkeys(cfg.notes)),
    )


def _default_model_name(cfg: _Config, default_name: str | None) -> str:
    for candidate in (cfg.root.get("_name_or_path"), default_name):
        if isinstance(candidate, str) and candidate:
            return candidate
    architectures = cfg.root.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return cfg.model_type or "model"
