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

It lists every cache module of the model as a layer spec class
(:mod:`memacct.model.layers`): full, sliding, chunked local (Llama 4), MLA,
Mamba-1 / Mamba-2 / gated-delta-net / short-conv state with its bytes per
request (Jamba, Falcon-H1, Granite-4.0-H, Qwen3-Next, Nemotron-H, LFM2),
cache-less and KV-sharing layers (Gemma-3n), each with its own geometry. The
list is the one record: :attr:`KVCacheSpec.layer_groups` summarises it, and
the engines' KV-cache managers (:mod:`memacct.engines`) plan from it. An
architecture without a rule is refused (:mod:`memacct.model.arch_rules`).

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
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, InstanceOf, PlainSerializer, model_validator

from memacct.checks import FROZEN, check_int
from memacct.errors import InvalidInputError
from memacct.model.config import (
    MAX_PARALLEL,
    ModelConfig,
)
from memacct.model.geometry import (
    kv_dtype_bytes,
    pipeline_partition,
    spec_fields,
)
from memacct.model.layers import LayerGroup, LayerSpec, layer_from_json, layer_to_json
from memacct.model.sources.local import read_config_file

__all__ = [
    "KVCacheSpec",
    "LayerGroup",
    "LayerSpec",
    "kv_dtype_bytes",
    "pipeline_partition",
]


# A layer spec in a KVCacheSpec: kept as the object, written to JSON with its class name.
_Layer = Annotated[
    InstanceOf[LayerSpec], BeforeValidator(layer_from_json), PlainSerializer(layer_to_json)
]


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
        bytes_per_token: KV-cache bytes one token needs on this rank, all
            its layers together.
        layers: every cache module of the model (all stages), one layer spec
            each (:mod:`memacct.model.layers`), sized for one rank, in
            layer order (``LayerSpec.layer`` is its decoder layer).
        position_limit: the longest ``max_model_len`` vLLM accepts
            (:attr:`~memacct.model.config.ModelConfig.position_limit`), or
            ``None`` when the config names no length.
        state_dtype_bytes: bytes per element of Mamba/linear-attention state
            (``mamba_ssm_dtype`` when the config gives it, else the model
            dtype), for hybrids only.
        mamba_ssm_dtype: the config's ``mamba_ssm_dtype`` as written, for hybrids only
            (SGLang reads this key alone, ``docs/engines.md``).
        notes: assumptions made while reading the config, one sentence each.
    """

    model_config = FROZEN

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
    bytes_per_token: int = Field(ge=0)
    layers: tuple[_Layer, ...] = Field(min_length=1)
    position_limit: int | None = Field(default=None, gt=0)
    state_dtype_bytes: int | None = Field(default=None, gt=0)
    mamba_ssm_dtype: str | None = None
    notes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> KVCacheSpec:
        indices = [x.layer for x in self.layers]
        if indices != sorted(indices) or set(indices) != set(range(self.total_num_layers)):
            raise ValueError(
                f"layers must cover layers 0..{self.total_num_layers - 1} in order"
            )
        if len(self.pipeline_layers) != self.pipeline_parallel_size:
            raise ValueError("pipeline_layers must have one entry per pipeline stage")
        if sum(self.pipeline_layers) != self.total_num_layers:
            raise ValueError("pipeline_layers must add up to total_num_layers")
        if self.pipeline_stage >= self.pipeline_parallel_size:
            raise ValueError("pipeline_stage must be below pipeline_parallel_size")
        if self.pipeline_layers[self.pipeline_stage] != self.num_layers:
            raise ValueError("num_layers must equal pipeline_layers[pipeline_stage]")
        per_token = sum(x.bytes_per_token for x in self.stage_layers())
        if per_token != self.bytes_per_token:
            raise ValueError(
                f"bytes_per_token ({self.bytes_per_token}) must equal the sum over this "
                f"stage's layers ({per_token})"
            )
        return self

    def stage_layers(self, stage: int | None = None) -> tuple[LayerSpec, ...]:
        """The cache modules of pipeline ``stage`` (default: :attr:`pipeline_stage`)."""
        stage = self.pipeline_stage if stage is None else stage
        start = sum(self.pipeline_layers[:stage])
        end = start + self.pipeline_layers[stage]
        return tuple(x for x in self.layers if start <= x.layer < end)

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        """This rank's KV layers grouped by per-token cost and window (a summary of ``layers``).

        Layers without a KV cache of their own (states, no cache, shared KV) are left out.
        """
        counts: dict[tuple[int | None, int], int] = {}
        for layer in self.stage_layers():
            if layer.bytes_per_token:
                key = (layer.window, layer.bytes_per_token)
                counts[key] = counts.get(key, 0) + 1
        order = sorted(counts, key=lambda k: (-1 if k[0] is None else k[0], -k[1]))
        return tuple(
            LayerGroup(num_layers=counts[k], bytes_per_token_per_layer=k[1], sliding_window=k[0])
            for k in order
        )

    @property
    def has_sliding_window(self) -> bool:
        """Whether some layers of this rank attend through a sliding window."""
        return any(g.sliding_window is not None for g in self.layer_groups)

    def bytes_per_block(self, block_size: int) -> int:
        """KV-cache bytes of one block of ``block_size`` tokens on this rank."""
        return check_int("block_size", block_size) * self.bytes_per_token

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
        tokens = check_int("num_tokens", num_tokens)
        block = check_int("block_size", block_size)
        chunk = (
            tokens
            if max_num_batched_tokens is None
            else check_int("max_num_batched_tokens", max_num_batched_tokens)
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
        from memacct.model.sources.presets import load_model_preset

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
        path_or_dict: str | os.PathLike[str] | Mapping[str, Any] | ModelConfig,
        kv_cache_dtype: str = "auto",
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        *,
        model_name: str | None = None,
        assume_full_attention: bool = False,
        revision: str | None = None,
    ) -> KVCacheSpec:
        """Read a Hugging Face ``config.json`` (contract).

        Args:
            path_or_dict: a ``config.json`` path, a model directory holding
                one, or the parsed config. Multimodal configs are read from
                their ``text_config``. Nothing is executed or unpickled. A
                string may also name a model preset, a ``.gguf`` file or a
                Hugging Face Hub id ``org/name[@revision]``
                (:func:`memacct.model.sources.resolve.resolve_model`); or the
                model's :class:`~memacct.model.config.ModelConfig`, already read.
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
            assume_full_attention: plan an architecture memacct has no rule for
                as full attention on every layer (the plan's notes say so);
                without it such an architecture is refused.
            revision: the Hub revision (branch, tag or commit) of a Hub id.

        Raises:
            ConfigError: the config is missing, unreadable, or has a missing,
                mistyped, non-positive or implausible value; the message names
                the key and what to change. Or its architecture has no rule
                (the message names it and lists the supported ones).
            InvalidInputError: a bad ``kv_cache_dtype`` or parallel size, or
                one that does not divide the model's heads.
        """
        tp = check_int("tensor_parallel_size", tensor_parallel_size, high=MAX_PARALLEL)
        pp = check_int("pipeline_parallel_size", pipeline_parallel_size, high=MAX_PARALLEL)
        kv_choice = kv_cache_dtype
        if not (isinstance(kv_choice, str) and kv_choice.strip().lower() == "auto"):
            kv_dtype_bytes(kv_choice)  # fail on a bad name before reading anything
        reading: ModelConfig | None = None
        if isinstance(path_or_dict, ModelConfig):  # a reading already made (an offline plan's)
            reading, default_name = path_or_dict, None
        elif isinstance(path_or_dict, Mapping):
            config = dict(path_or_dict)
            source = f"config of {model_name}" if model_name else "the model config"
            default_name = None
        elif isinstance(path_or_dict, (str, os.PathLike)):
            path = Path(path_or_dict)  # Path("") is "."; resolve_model names an empty name
            named = bool(os.fspath(path_or_dict).strip())
            if named and path.exists() and path.suffix.lower() != ".gguf" and revision is None:
                config = read_config_file(path)
                source = str(path / "config.json" if path.is_dir() else path)
                default_name = (path if path.is_dir() else path.parent).name or None
            else:  # a preset, a Hub id, a .gguf file (or a missing path, said so)
                from memacct.model.sources.resolve import resolve_model

                found = resolve_model(path_or_dict, revision)
                config, source, default_name = found.config, found.location, found.name
        else:
            raise InvalidInputError(
                f"from_hf_config takes a config.json path or a dict, "
                f"got {type(path_or_dict).__name__}"
            )
        return cls(
            **spec_fields(
                reading or ModelConfig(config, source), kv_choice, tp, pp,
                model_name=model_name, default_name=default_name,
                assume_full_attention=assume_full_attention,
            )
        )
