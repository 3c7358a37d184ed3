"""Layer specs as classes: each cache-holding module of a model, as a KV-cache manager sees it.

One small frozen class per kind of cache, as vLLM 0.33 keeps them in
``vllm/v1/kv_cache_interface.py`` (``FullAttentionSpec``,
``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``,
``CrossAttentionSpec``, ``MambaSpec``). Each carries its own geometry (KV
heads, K and V head sizes, window or chunk, state shapes and dtypes, all for
one rank) and answers what a manager asks of it: bytes per token, the page of
one block, the blocks one request keeps. The engines' managers
(:mod:`memacct.engines`) only group and sum; which layer is which is decided
by the architecture rules (:mod:`memacct.model.arch_rules`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from memacct.checks import FROZEN

__all__ = [
    "LAYER_CLASSES",
    "ChunkedLocalAttention",
    "CrossAttention",
    "FullAttention",
    "GatedDeltaNetState",
    "KimiDeltaState",
    "LayerGroup",
    "LayerSpec",
    "LinearAttentionState",
    "MLAAttention",
    "Mamba1State",
    "Mamba2State",
    "MambaState",
    "NoCache",
    "ShortConvState",
    "SlidingWindow",
    "SparseIndexerCache",
]


# Where a module sits, not what it is: left out of the spec's identity.
_PLACEMENT = frozenset({"layer", "shares_kv_with"})


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """One cache-holding module of decoder layer ``layer`` (one rank).

    Attributes:
        layer: the decoder layer it belongs to (a Falcon-H1 layer holds an
            attention and a Mamba module: two specs with one index).
        shares_kv_with: the layer whose KV cache this one reads instead of
            keeping its own (Gemma-3n's KV sharing), or ``None``.
    """

    kind: ClassVar[str] = "none"
    layer: int = 0
    shares_kv_with: int | None = None

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token needs here (0 for a state, no cache, or shared KV)."""
        return 0

    @property
    def window(self) -> int | None:
        """Tokens a sliding layer attends to, else ``None``."""
        return None

    @property
    def chunk(self) -> int | None:
        """The attention chunk of a chunked local layer, else ``None``."""
        return None

    @property
    def state_bytes(self) -> int | None:
        """Bytes of one request's recurrent state (state layers only), else ``None``."""
        return None

    @property
    def state_kind(self) -> str | None:
        """``mamba1``, ``mamba2``, ``gdn``, ``linear``, ``short_conv`` or ``kda`` (states)."""
        return None

    @property
    def has_cache(self) -> bool:
        """Whether the module keeps a cache of its own."""
        return self.state_bytes is not None or self.bytes_per_token > 0

    def page_bytes(self, block_size: int) -> int:
        """Bytes of one page (a block of ``block_size`` tokens, or one state)."""
        return block_size * self.bytes_per_token

    def blocks_per_request(
        self, max_model_len: int, in_flight: int, block_size: int, prefix_caching: bool = True
    ) -> int:
        """Blocks one request of ``max_model_len`` keeps (``max_memory_usage_bytes`` / page)."""
        return _ceil(max_model_len, block_size)

    def key(self) -> tuple[object, ...]:
        """Modules with equal keys have equal specs (one bucket when grouping): the class and
        every geometry field, as vLLM compares its spec dataclasses."""
        return (type(self).__name__, *(
            getattr(self, f.name) for f in fields(self) if f.name not in _PLACEMENT))


@dataclass(frozen=True, kw_only=True)
class NoCache(LayerSpec):
    """A layer that keeps no cache (an MLP or MoE block of Nemotron-H; counted in the PP split)."""

    kind: ClassVar[str] = "none"


@dataclass(frozen=True, kw_only=True)
class FullAttention(LayerSpec):
    """Attention over every token: ``kv_heads x (head_size + head_size_v) x dtype`` per token."""

    kind: ClassVar[str] = "full"
    kv_heads: int
    head_size: int
    head_size_v: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        if self.shares_kv_with is not None:
            return 0
        return self.kv_heads * (self.head_size + self.head_size_v) * self.dtype_bytes


@dataclass(frozen=True, kw_only=True)
class SlidingWindow(FullAttention):
    """A window of ``sliding_window`` tokens: ``ceil(min(w - 1 + in-flight, L) / block) + 1``."""

    kind: ClassVar[str] = "sliding"
    sliding_window: int

    @property
    def window(self) -> int | None:
        return self.sliding_window

    def blocks_per_request(
        self, max_model_len: int, in_flight: int, block_size: int, prefix_caching: bool = True
    ) -> int:
        held = min(self.sliding_window - 1 + in_flight, max_model_len)
        return _ceil(held, block_size) + 1


@dataclass(frozen=True, kw_only=True)
class ShortConvWindow(SlidingWindow):
    """Inkling's short-convolution state (``InklingConvState``, vllm/models/inkling/nvidia/
    sconv_swa_attn.py): a sliding window of ``sconv_kernel_size`` tokens paged in blocks of
    its own ``block_tokens`` (the kernel size), not the cache's; K, V and the two hidden
    streams packed into ``head_size`` (no V part)."""

    block_tokens: int

    @classmethod
    def of(cls, layer: int, geometry: tuple[int, int, int], dtype_bytes: int, kernel: int
           ) -> ShortConvWindow:
        """The state of ``layer``: ``(heads per rank, packed head size, _)``, ``kernel`` tokens."""
        return cls(layer=layer, kv_heads=geometry[0], head_size=geometry[1], head_size_v=0,
                   dtype_bytes=dtype_bytes, sliding_window=kernel, block_tokens=kernel)


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttention(FullAttention):
    """Chunked local attention (Llama 4): ``ceil(min(chunk + in-flight, L) / block)``."""

    kind: ClassVar[str] = "chunked"
    attention_chunk_size: int

    @property
    def chunk(self) -> int | None:
        return self.attention_chunk_size

    def blocks_per_request(
        self, max_model_len: int, in_flight: int, block_size: int, prefix_caching: bool = True
    ) -> int:
        held = min(self.attention_chunk_size + in_flight, max_model_len)
        return _ceil(held, block_size)


@dataclass(frozen=True, kw_only=True)
class CrossAttention(FullAttention):
    """Cross attention over the encoder's output (Whisper): ``ceil(max_encoder_len / block)``.

    The model gives the encoder's length (``max_source_positions``); vLLM 0.33 holds its
    scheduler's ``max_num_encoder_input_tokens`` instead (``CrossAttentionSpec``), which its
    manager substitutes (:func:`memacct.engines.vllm.kv.layer_pages`)."""

    kind: ClassVar[str] = "cross"
    max_encoder_len: int

    def blocks_per_request(
        self, max_model_len: int, in_flight: int, block_size: int, prefix_caching: bool = True
    ) -> int:
        return _ceil(self.max_encoder_len, block_size)


@dataclass(frozen=True, kw_only=True)
class MLAAttention(LayerSpec):
    """Multi-head latent attention: one latent of ``latent_size`` elements on every rank.

    ``row_bytes`` overrides the row (DeepSeek-V3.2's ``fp8_ds_mla``: 656 bytes).
    """

    kind: ClassVar[str] = "mla"
    latent_size: int
    dtype_bytes: int
    row_bytes: int | None = None

    @property
    def bytes_per_token(self) -> int:
        if self.shares_kv_with is not None:
            return 0
        return self.row_bytes or self.latent_size * self.dtype_bytes


@dataclass(frozen=True, kw_only=True)
class SparseIndexerCache(MLAAttention):
    """DeepSeek-V3.2's indexer K cache (``DeepseekV32IndexerCache`` in vLLM's
    ``deepseek_v2.py``): one uint8 row of ``index_head_dim`` fp8 values plus a 4-byte scale
    per 128 of them, per token, on every rank. vLLM plans it as an MLA spec (the indexer
    role) beside the layer's sparse-MLA latent, in the same block pool. MiniMax-M3's
    ``MiniMaxM3IndexerCache`` is one too: a bf16 key of ``sparse_index_dim`` per token."""

    kind: ClassVar[str] = "mla"


@dataclass(frozen=True, kw_only=True)
class MambaState(LayerSpec):
    """A per-request recurrent state (vLLM's ``MambaSpec``): tensors of ``shapes`` elements.

    ``shapes`` pairs each state tensor's element count with its dtype bytes.
    A request keeps 3 state blocks with prefix caching (``mamba_cache_mode``
    "align": two running, one checkpoint) and 1 without, or when the model
    does not support Mamba prefix caching (``checkpoints`` false: vLLM turns
    prefix caching off for it, e.g. Zamba2).
    """

    kind: ClassVar[str] = "mamba"
    family: ClassVar[str] = "mamba2"
    shapes: tuple[tuple[int, int], ...]
    checkpoints: bool = True

    @property
    def state_bytes(self) -> int | None:
        return sum(elements * size for elements, size in self.shapes)

    @property
    def state_kind(self) -> str | None:
        return self.family

    def page_bytes(self, block_size: int) -> int:
        return self.state_bytes or 0

    def blocks_per_request(
        self, max_model_len: int, in_flight: int, block_size: int, prefix_caching: bool = True
    ) -> int:
        return 3 if prefix_caching and self.checkpoints else 1


@dataclass(frozen=True, kw_only=True)
class Mamba1State(MambaState):
    """Mamba-1: conv ``(d_conv - 1) x inner / tp``, ssm ``inner / tp x d_state``."""

    family: ClassVar[str] = "mamba1"


@dataclass(frozen=True, kw_only=True)
class Mamba2State(MambaState):
    """Mamba-2: conv ``(d_conv - 1) x (inner + 2 groups x state) / tp``, ssm heads/tp x hd x ds."""

    family: ClassVar[str] = "mamba2"


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetState(MambaState):
    """Gated delta net (Qwen3-Next): a conv state plus ``v_heads / tp x v_dim x k_dim``."""

    family: ClassVar[str] = "gdn"


@dataclass(frozen=True, kw_only=True)
class LinearAttentionState(MambaState):
    """Lightning/linear attention (MiniMax-Text-01): ``heads / tp x head_dim x head_dim``."""

    family: ClassVar[str] = "linear"


@dataclass(frozen=True, kw_only=True)
class ShortConvState(MambaState):
    """A short convolution (LFM2): ``(L_cache - 1) x hidden / tp``."""

    family: ClassVar[str] = "short_conv"


@dataclass(frozen=True, kw_only=True)
class KimiDeltaState(MambaState):
    """Kimi delta attention (Kimi-Linear): a conv state plus ``heads / tp x hd x hd`` in fp32."""

    family: ClassVar[str] = "kda"


LAYER_CLASSES: dict[str, type[LayerSpec]] = {
    cls.__name__: cls
    for cls in (NoCache, FullAttention, SlidingWindow, ChunkedLocalAttention, CrossAttention,
                MLAAttention, SparseIndexerCache, Mamba1State, Mamba2State, GatedDeltaNetState,
                LinearAttentionState, ShortConvState, KimiDeltaState)
}


def layer_to_json(layer: LayerSpec) -> dict[str, Any]:
    """A layer spec as a JSON object: its class name under ``spec`` and its fields."""
    return {"spec": type(layer).__name__, **asdict(layer)}


def layer_from_json(value: Any) -> Any:
    """A layer spec back from :func:`layer_to_json` (other values pass through unchanged)."""
    if not isinstance(value, dict):
        return value
    values = dict(value)
    cls = LAYER_CLASSES.get(str(values.pop("spec", "")))
    if cls is None:
        raise ValueError(f"unknown layer spec {value.get('spec')!r}: use one of "
                         f"{', '.join(LAYER_CLASSES)}")
    if "shapes" in values:
        values["shapes"] = tuple(tuple(pair) for pair in values["shapes"])
    return cls(**values)


class LayerGroup(BaseModel):
    """Layers of one rank that cost the same per token and see the same window.

    A summary of :attr:`KVCacheSpec.layers` (never stored beside them).

    Attributes:
        num_layers: how many layers of this rank are in the group.
        bytes_per_token_per_layer: KV-cache bytes one token needs in one of them.
        sliding_window: the attention window in tokens, or ``None`` for
            layers that attend to the whole sequence.
    """

    model_config = FROZEN

    num_layers: int = Field(gt=0)
    bytes_per_token_per_layer: int = Field(gt=0)
    sliding_window: int | None = Field(default=None, gt=0)

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token needs in all layers of the group."""
        return self.num_layers * self.bytes_per_token_per_layer
