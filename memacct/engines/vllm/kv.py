"""vLLM 0.33's KV-cache manager, as rules plus small functions.

The rules, their sources in vLLM's code (``vllm/v1/core/kv_cache_planning.py``,
``vllm/v1/core/kv_cache_utils.py``, ``vllm/v1/kv_cache_interface.py``,
``vllm/platforms/interface.py``, ``vllm/config/vllm.py``) and the golden
tables that check them are in ``docs/engines.md``. In short:

1. every layer with a cache of its own becomes one per-layer spec (a full,
   sliding-window, chunked-local, MLA or Mamba page); KV-sharing layers and
   layers without a cache get none;
2. for Mamba/linear-attention hybrids the block size is raised until an
   attention page holds a state, and the state page is padded to match;
3. page sizes are unified (a smaller attention page takes a larger block);
4. layers are bucketed by spec; the group size is the smallest bucket (the
   largest when it is under 1.5x the smallest); each bucket is split into
   ``ceil(n / size)`` groups by striding;
5. one pool serves all groups: a block is one page of every layer of the
   widest group, per pipeline stage; the engine takes the fewest blocks over
   the stages;
6. one block (the null block) is held back before the fit check, the
   estimate and an auto-fit;
7. a request takes, per group, ``ceil(L / block)`` blocks (full, MLA),
   ``ceil(min(window - 1 + in-flight, L) / block) + 1`` (sliding),
   ``ceil(min(chunk + in-flight, L) / block)`` (chunked), or 2 state blocks plus
   the layer's prefill checkpoint blocks with prefix caching (Mamba-2, GDN: 3;
   Mamba-1, short conv, linear attention: 2; 1 without);
8. concurrency = blocks / blocks per request; tokens = int(concurrency x L).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from memacct._attrs import ReadOnly
from memacct.engines.base import KVBlock, KVGroup, KVLayout, KVSettings
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.model.layers import CrossAttention, LayerSpec
from memacct.model.spec import KVCacheSpec
from memacct.units import format_gib

__all__ = ["VLLM_VERSION", "VllmKVManager", "in_flight_tokens", "kv_tensor_pages", "layer_pages"]

VLLM_VERSION = "0.33"

# FlashAttention's smallest kernel block on Hopper (its kernel block sizes are multiples of 16).
_KERNEL_BLOCK = 16
# FlashInfer's GDN prefill exports checkpoints on a 64-token grid (SM90).
_GDN_CHECKPOINT_ALIGNMENT = 64
# A state's prefill checkpoint blocks (MambaSpec.num_prefill_checkpoint_blocks, default 0):
# MambaMixer2.get_kv_cache_spec sets 1 (layers/mamba/mamba_mixer2.py), as does the GDN prefill
# that exports checkpoints (QwenGatedDeltaNetAttention, layers/mamba/gdn/qwen_gdn_linear_attn.py;
# KDA: models/kimi_k3/nvidia/kda.py); MambaMixer (Mamba-1), ShortConv and the linear-attention
# layers keep MambaSpec's 0.
_CHECKPOINT_BLOCKS: dict[str, int] = {"mamba1": 0, "short_conv": 0, "linear": 0}


@dataclass(frozen=True)
class Page:
    """One cache module's page as vLLM specs it: ``block_size`` tokens of ``spec``.

    The layer spec (:mod:`memacct.model.layers`) answers its own bytes and
    blocks per request; a page only adds the block size and padding the
    manager settles on.
    """

    spec: LayerSpec
    block_size: int
    page_bytes: int
    prefix_caching: bool = True

    layer = ReadOnly[int]("spec.layer", "The decoder layer the module belongs to (pipeline split).")
    kind = ReadOnly[str]("spec.kind", "The spec's kind: full, sliding, chunked, mla, cross, mamba.")
    window = ReadOnly[int | None]("spec.window", "Tokens a sliding layer sees, else ``None``.")
    chunk = ReadOnly[int | None]("spec.chunk", "A chunked local layer's chunk, else ``None``.")

    @property
    def key(self) -> tuple[object, ...]:
        """Modules with equal keys have equal specs and share a bucket."""
        return (*self.spec.key(), self.block_size, self.page_bytes)

    def blocks_per_request(self, max_model_len: int, in_flight: int) -> int:
        """Blocks one request of ``max_model_len`` takes for a module of this spec.

        A state in ``mamba_cache_mode`` "align" (prefix caching on) takes two running
        blocks plus its layer's prefill checkpoint blocks (``MambaSpec.max_memory_usage_bytes``
        in vllm/v1/kv_cache_interface.py): see :data:`_CHECKPOINT_BLOCKS`.
        """
        blocks = self.spec.blocks_per_request(max_model_len, in_flight, self.block_size,
                                              self.prefix_caching)
        if self.kind == "mamba" and blocks > 1:
            return 2 + _CHECKPOINT_BLOCKS.get(self.spec.state_kind or "", 1)
        return blocks


def in_flight_tokens(settings: KVSettings, pipeline_parallel_size: int) -> int:
    """Tokens scheduled but not yet settled: batches in flight x batched tokens.

    With async scheduling the V2 model runner keeps ``pp + 1`` batches in
    flight; without it, ``pp``.
    """
    batches = pipeline_parallel_size + (1 if settings.async_scheduling else 0)
    return batches * settings.max_num_batched_tokens


def _hybrid_block_size(
    layers: Sequence[LayerSpec], settings: KVSettings
) -> tuple[int, int | None]:
    """The block size a Mamba hybrid runs with, and the padded state page (else None)."""
    states = [x for x in layers if x.state_bytes is not None]
    attention = [x for x in layers if x.bytes_per_token > 0]
    if not states or not attention:
        return settings.block_size, None
    state_page = max(x.state_bytes or 0 for x in states)
    per_token = attention[0].bytes_per_token
    align = max(_KERNEL_BLOCK, settings.block_size)
    # Kimi delta attention runs as KimiGatedDeltaNetAttention, a GatedDeltaNetAttention
    # (mamba_type GDN_ATTN, vllm/model_executor/layers/mamba/gdn/base.py): GDN's alignment.
    if settings.enable_prefix_caching and any(x.state_kind in ("gdn", "kda") for x in states):
        align = math.lcm(align, _GDN_CHECKPOINT_ALIGNMENT)
    block = align * -(-state_page // (align * per_token))
    block = _KERNEL_BLOCK * -(-block // _KERNEL_BLOCK)
    block = max(settings.block_size, block)
    return block, block * per_token


def layer_pages(spec: KVCacheSpec, settings: KVSettings) -> list[Page]:
    """Each cache-holding module's page, after the hybrid block raise."""
    block, state_page = _hybrid_block_size(spec.layers, settings)
    prefix = settings.enable_prefix_caching
    # A module paged in blocks of its own (Inkling's conv state: block_tokens) keeps them.
    sizes = [getattr(layer, "block_tokens", None) or block for layer in spec.layers]
    return [
        Page(_encoder_budget(layer, settings), size, (state_page or layer.page_bytes(size))
             if layer.state_bytes is not None else layer.page_bytes(size), prefix)
        for layer, size in zip(spec.layers, sizes, strict=True) if layer.has_cache
    ]


def _encoder_budget(layer: LayerSpec, settings: KVSettings) -> LayerSpec:
    """A cross-attention layer holds what vLLM's scheduler lets the encoder emit: its
    ``max_num_encoder_input_tokens``, which ``SchedulerConfig.__post_init__``
    (vllm/config/scheduler.py) sets to ``max_num_batched_tokens``, per request
    (``CrossAttentionSpec.max_memory_usage_bytes``, vllm/v1/kv_cache_interface.py), not the
    model's encoder length."""
    if isinstance(layer, CrossAttention):
        return replace(layer, max_encoder_len=settings.max_num_batched_tokens)
    return layer


def unify_page_sizes(pages: Sequence[Page]) -> list[Page]:
    """Make every page as large as the largest (vLLM unifies before grouping hybrids)."""
    largest = max((p.page_bytes for p in pages), default=0)
    unified: list[Page] = []
    for page in pages:
        if page.page_bytes == largest or page.kind == "mamba":
            unified.append(replace(page, page_bytes=largest))
        elif largest % page.page_bytes == 0:
            # A smaller attention page takes a proportionally larger block.
            ratio = largest // page.page_bytes
            unified.append(replace(page, block_size=page.block_size * ratio, page_bytes=largest))
        else:
            unified.append(replace(page, page_bytes=largest))
    return unified


def _uniform_type(pages: Sequence[Page]) -> bool:
    """Whether all layers need the same token slots (one group, pages summed)."""
    if len({p.block_size for p in pages}) > 1:
        return False
    first = pages[0]
    if first.kind == "mamba":
        return all(p.key == first.key for p in pages)
    # vLLM's KVCacheSpecRegistry (single_type_kv_cache_manager.py register_all_kvcache_specs):
    # MLAAttentionSpec's uniform-type base is FullAttentionSpec (MiniMax-M3: GQA + indexer).
    def base(kind: str) -> str:
        return "full" if kind == "mla" else kind

    return all((base(p.kind), p.window, p.chunk) == (base(first.kind), first.window, first.chunk)
               for p in pages)


def group_layers(pages: Sequence[Page]) -> list[list[Page]]:
    """vLLM's KV-cache groups: buckets of equal specs, split by striding to one size."""
    if not pages:
        return []
    if len({p.key for p in pages}) == 1 or _uniform_type(pages):
        return [list(pages)]
    pages = unify_page_sizes(pages)
    buckets: dict[tuple[object, ...], list[Page]] = {}
    for page in pages:
        buckets.setdefault(page.key, []).append(page)
    sizes = [len(b) for b in buckets.values()]
    size = min(sizes)
    if max(sizes) < size * 1.5:
        size = max(sizes)
    groups: list[list[Page]] = []
    for bucket in buckets.values():
        count = -(-len(bucket) // size)
        groups += [bucket[i::count] for i in range(count)]
    return groups


def group_tensor_pages(groups: Sequence[Sequence[Page]]) -> list[int]:
    """Bytes per block of each KV-cache tensor vLLM allocates for ``groups`` (one stage).

    One group: a tensor per layer, holding that layer's page of every block.
    Several groups (hybrids): page sizes are unified, and tensor ``i`` holds
    one page per block shared by the ``i``-th layer of every group, so there
    are as many tensors as the widest group has layers
    (``vllm/v1/core/kv_cache_utils.py``, the hybrid branch of
    ``get_kv_cache_config_from_groups``: one ``KVCacheTensor`` of
    ``page_size x num_blocks`` per slot, ``shared_by`` a layer of each group).
    """
    if len(groups) == 1:
        return [p.page_bytes for p in groups[0]]
    width = max(len(g) for g in groups)
    page = max(p.page_bytes for g in groups for p in g)
    return [page] * width


def kv_tensor_pages(spec: KVCacheSpec, settings: KVSettings) -> list[int]:
    """Bytes per block of each KV-cache tensor vLLM allocates for ``spec`` on one rank.

    A tensor holds ``num_blocks`` such pages; see :func:`group_tensor_pages`.
    """
    return group_tensor_pages(group_layers(layer_pages(spec, settings)))


def _stage_bytes_per_block(
    groups: Sequence[Sequence[Page]], stages: Sequence[range]
) -> list[int]:
    """Per stage: bytes of one block, the widest group's pages on that stage."""
    return [
        max(sum(p.page_bytes for p in group if p.layer in stage) for group in groups)
        for stage in stages
    ]


def _blocks_per_request(
    groups: Sequence[Sequence[Page]], max_model_len: int, in_flight: int
) -> int:
    return sum(
        max(p.blocks_per_request(max_model_len, in_flight) for p in group) for group in groups
    )


def estimate_max_model_len(
    groups: Sequence[Sequence[Page]], bytes_per_block: int, available: int, limit: int,
    in_flight: int,
) -> int:
    """vLLM's binary search: the largest length in [1, limit] whose request fits (0: none)."""

    def fits(length: int) -> bool:
        return bytes_per_block * _blocks_per_request(groups, length, in_flight) <= available

    if not fits(1):
        return 0
    low, high, best = 1, limit, 1
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _pool(
    spec: KVCacheSpec, settings: KVSettings
) -> tuple[list[Page], list[list[Page]], list[int]]:
    """The pool's pages, its groups and the bytes of one block on each pipeline stage (rules
    1 to 5 of the module docstring): none of them depends on the budget.

    Raises:
        InvalidInputError: no layer has a KV cache, or a stage holds none.
    """
    pages = layer_pages(spec, settings)
    if not pages:
        raise InvalidInputError(
            f"{spec.model_name} has no layer with a KV cache: nothing to plan"
        )
    groups = group_layers(pages)
    parts = spec.pipeline_layers
    starts = [sum(parts[:i]) for i in range(len(parts))]
    stages = [range(s, s + n) for s, n in zip(starts, parts, strict=True)]
    stage_bpb = _stage_bytes_per_block(groups, stages)
    if min(stage_bpb) <= 0:
        raise InvalidInputError(
            f"a pipeline stage of {spec.model_name} holds no KV-cache layer; vLLM cannot "
            f"size its pool: use fewer pipeline stages"
        )
    return pages, groups, stage_bpb


class VllmKVManager:
    """vLLM 0.33's hybrid KV-cache manager (see the module docstring)."""

    name = "vllm"
    version = VLLM_VERSION
    default_block_size = 16

    def block(self, spec: KVCacheSpec, settings: KVSettings) -> KVBlock:
        """One block of the pool: ``block_size`` tokens of every layer of the widest group
        on the widest stage (what vLLM's ``page_size_bytes`` sums to), whatever the budget.

        Raises:
            InvalidInputError: no layer has a KV cache, or a pipeline stage holds none.
        """
        pages, groups, stage_bpb = _pool(spec, settings)
        tensors = tuple(group_tensor_pages(groups)) if spec.pipeline_parallel_size == 1 else ()
        return KVBlock(pages[0].block_size, max(stage_bpb), tensors)

    def plan(self, spec: KVCacheSpec, budget_bytes: int, settings: KVSettings) -> KVLayout:
        """vLLM's KV cache for ``budget_bytes`` on each rank (``kv_cache_memory_bytes``).

        Raises:
            InsufficientMemoryError: vLLM would refuse to start: no memory for
                the cache, or one request of ``max_model_len`` does not fit
                (``estimated_max_model_len`` is vLLM's estimate), or an
                auto-fit finds no length.
        """
        pages, groups, stage_bpb = _pool(spec, settings)
        pp = spec.pipeline_parallel_size
        in_flight = in_flight_tokens(settings, pp)
        derived = settings.derived_max_model_len or spec.position_limit
        max_len = settings.max_model_len
        notes: list[str] = []
        if max_len == -1:
            if derived is None:
                raise InvalidInputError(
                    f"max_model_len=-1 fits up to the model's own longest length, but the "
                    f"config of {spec.model_name} gives no max_position_embeddings: pass a "
                    f"max_model_len"
                )
            fitted = min(
                estimate_max_model_len(groups, bpb, budget_bytes - bpb, derived, in_flight)
                for bpb in stage_bpb
            )
            if fitted <= 0:
                raise InsufficientMemoryError(
                    f"Cannot auto-fit max_model_len: {format_gib(budget_bytes)} of KV cache "
                    f"({budget_bytes} bytes) holds not even one token of {spec.model_name} "
                    f"after vLLM's null block: give the KV cache more memory",
                    estimated_max_model_len=0,
                )
            max_len = min(derived, fitted)
            notes.append(f"max_model_len=-1 auto-fit to {max_len} tokens")
        for bpb in stage_bpb:
            available = budget_bytes - bpb
            if available <= 0:
                raise InsufficientMemoryError(
                    f"No available memory for the cache blocks: the KV-cache budget of "
                    f"{budget_bytes} bytes does not exceed one block of {bpb} bytes (vLLM "
                    f"holds one block back as its null block): give the KV cache more memory",
                    estimated_max_model_len=0,
                )
            needed = bpb * _blocks_per_request(groups, max_len, in_flight)
            if needed > available:
                estimate = estimate_max_model_len(groups, bpb, available, max_len, in_flight)
                raise InsufficientMemoryError(
                    f"To serve one request of max_model_len={max_len}, vLLM {VLLM_VERSION} needs "
                    f"{format_gib(needed)} ({needed} bytes) of KV cache, more than the "
                    f"{format_gib(available)} ({available} bytes) available after its null "
                    f"block. vLLM's estimate of the largest max_model_len that fits is "
                    f"{estimate}: set max_model_len to at most {estimate}, or give the KV cache "
                    f"more memory",
                    estimated_max_model_len=estimate,
                )
        stage_blocks = tuple(budget_bytes // bpb for bpb in stage_bpb)
        num_blocks = min(stage_blocks)
        limiting = stage_bpb[stage_blocks.index(num_blocks)]
        per_request = _blocks_per_request(groups, max_len, in_flight)
        concurrency = num_blocks / per_request
        if any(p.kind == "mamba" for p in pages) and pages[0].block_size != settings.block_size:
            notes.append(
                f"block size raised from {settings.block_size} to {pages[0].block_size} tokens "
                f"so an attention page holds a Mamba/linear-attention state"
            )
        return KVLayout(
            engine=self.name,
            engine_version=self.version,
            budget_bytes=budget_bytes,
            block_size=pages[0].block_size,
            block_bytes=limiting,
            num_blocks=num_blocks,
            stage_blocks=stage_blocks,
            max_model_len=max_len,
            blocks_per_request=per_request,
            kv_tokens=int(concurrency * max_len),
            max_concurrency=concurrency,
            groups=tuple(_describe(group, max_len, in_flight) for group in groups),
            notes=tuple(notes),
            tensor_pages=tuple(group_tensor_pages(groups)) if pp == 1 else (),
        )

    def resize(self, layout: KVLayout, num_blocks: int) -> KVLayout:
        """``layout`` with ``num_blocks`` blocks, refused as vLLM refuses (null block held back).

        Raises:
            InsufficientMemoryError: one request no longer fits.
        """
        if (num_blocks - 1) * layout.block_bytes < layout.request_bytes:
            raise InsufficientMemoryError(
                f"{num_blocks} blocks of {layout.block_bytes} bytes leave "
                f"{(num_blocks - 1) * layout.block_bytes} bytes after vLLM's null block, less "
                f"than one request of max_model_len={layout.max_model_len} needs "
                f"({layout.request_bytes} bytes): lower max_model_len or give every rank more "
                f"KV-cache memory"
            )
        concurrency = num_blocks / layout.blocks_per_request
        return layout.model_copy(update={
            "num_blocks": num_blocks, "max_concurrency": concurrency,
            "kv_tokens": int(concurrency * layout.max_model_len),
        })

    def log_lines(self, layout: KVLayout) -> list[str]:
        """vLLM 0.33's start-up lines about the KV cache."""
        return [
            f"Available KV cache memory: {format_gib(layout.budget_bytes, sep=' ')}",
            f"GPU KV cache size: {layout.kv_tokens:,} tokens",
            f"Maximum concurrency for {layout.max_model_len:,} tokens per request: "
            f"{layout.max_concurrency:.2f}x",
        ]


def _describe(group: Sequence[Page], max_model_len: int, in_flight: int) -> KVGroup:
    first = group[0]
    return KVGroup(
        kind=first.kind,
        layers=tuple(p.layer for p in group),
        page_bytes=first.page_bytes,
        block_size=first.block_size,
        window=first.window,
        chunk=first.chunk,
        blocks_per_request=max(p.blocks_per_request(max_model_len, in_flight) for p in group),
    )
