"""SGLang 0.5.23's KV token pool, as rules plus small functions.

SGLang does not page by block tables per layer group: it keeps one token pool
(a slot holds one token of every full-attention layer of the rank) and, for
the architectures it runs as hybrid sliding-window models, a second pool for
the sliding layers. Sources (``python/sglang/srt/model_executor/
pool_configurator.py``, ``python/sglang/srt/mem_cache/kv_cache_configurator.py``,
``python/sglang/srt/configs/model_config.py``) and the differences from vLLM
are in ``docs/engines.md``:

* cell size (bytes per token per rank) = KV heads per rank x (head_dim +
  v_head_dim) x dtype bytes x layers of the stage (MLA: the latent, not split
  by TP); pool tokens = budget // cell, floored to the page size;
* hybrid sliding-window pools (gpt-oss, Llama 4 only): cell = full bytes x
  full layers + r x sliding bytes x sliding layers with
  ``swa_full_tokens_ratio`` r = 0.8; full = budget // cell, sliding = full x r,
  both floored to the page; refused when the sliding pool holds no more than
  window + page tokens; every other sliding-window model gets the plain pool
  with every layer at full size;
* pipeline parallelism: the extra layers go to the last stages; every stage
  sizes its own pool and the smallest wins;
* Mamba/linear-attention hybrids: the state pool is taken first (0.9 of
  every 1.9 bytes, in whole per-request slots plus one), and only the
  full-attention layers count in the cell;
* ``max_running_requests`` = min(clamp(int(tokens / context x 512), 2048,
  4096), tokens // 2); a pool smaller than one request is only warned about.
"""

from __future__ import annotations

from collections.abc import Sequence

from memacct.engines.base import KVGroup, KVLayout, KVSettings
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.planner.spec import KVCacheSpec, LayerSpec

__all__ = [
    "SGLANG_VERSION",
    "SWA_FULL_TOKENS_RATIO",
    "SglangKVManager",
    "mamba_state_pool",
    "max_running_requests",
]

SGLANG_VERSION = "0.5.23"
SWA_FULL_TOKENS_RATIO = 0.8
MAMBA_FULL_MEMORY_RATIO = 0.9
# State slots per running request with the radix cache on
# (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO in kv_cache_configurator.py).
MAMBA_SLOTS_PER_REQUEST = 3
# Architectures SGLang sizes with a split full/sliding pool (model_config.py is_hybrid_swa_model).
_HYBRID_SWA_TYPES = frozenset({"gpt_oss", "llama4", "llama4_text"})


def sglang_partition(num_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """Layers per stage as SGLang splits them: the remainder goes to the last stages."""
    parts = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for i in range(num_layers % pipeline_parallel_size):
        parts[-1 - i] += 1
    return tuple(parts)


def max_running_requests(tokens: int, context_len: int) -> int:
    """SGLang's default cap on running requests for a pool of ``tokens``."""
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    return min(estimated, tokens // 2)


def mamba_state_pool(spec: KVCacheSpec, budget_bytes: int) -> tuple[int, int]:
    """SGLang's Mamba state pool, taken from the budget first.

    ``mamba_full_memory_ratio`` r = 0.9 of every 1 + r bytes go to whole
    per-request state slots (one more slot pads the pool); the rest is the KV
    budget. Under pipeline parallelism a slot is priced at the stage with the
    most Mamba layers. Returns ``(KV budget bytes, slots)``.

    Raises:
        InsufficientMemoryError: not one slot fits.
    """
    stages = _stage_layers(spec)
    per_layer = [x.state_bytes or 0 for x in spec.layers if x.kind == "mamba"]
    most = max(sum(1 for x in stage if x.kind == "mamba") for stage in stages)
    per_slot = int(sum(per_layer) * most / len(per_layer))
    # SGLang works in GiB floats here (kv_cache_configurator.py _handle_max_mamba_cache).
    rest_gib = budget_bytes / (1 << 30)
    state_budget = rest_gib * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO) * (1 << 30)
    slots = int((state_budget - per_slot) // per_slot)
    if slots <= 0:
        raise InsufficientMemoryError(
            f"SGLang's Mamba state pool for {spec.model_name} holds no request: one slot is "
            f"{per_slot} bytes and {budget_bytes} bytes of budget leave "
            f"{MAMBA_FULL_MEMORY_RATIO}/{1 + MAMBA_FULL_MEMORY_RATIO:g} of it for states; "
            f"give the KV cache more memory",
            estimated_max_model_len=0,
        )
    rest_gib -= (slots + 1) * per_slot / (1 << 30)
    return int(rest_gib * (1 << 30)), slots


def _stage_layers(spec: KVCacheSpec) -> list[list[LayerSpec]]:
    layers = list(spec.layers)
    if not layers:
        raise InvalidInputError(
            f"the spec of {spec.model_name} lists no per-layer geometry: build it with "
            f"KVCacheSpec.from_hf_config to plan it for SGLang"
        )
    parts = sglang_partition(len(layers), spec.pipeline_parallel_size)
    starts = [sum(parts[:i]) for i in range(len(parts))]
    return [layers[s : s + n] for s, n in zip(starts, parts, strict=True)]


class SglangKVManager:
    """SGLang 0.5.23's token pool (see the module docstring)."""

    name = "sglang"
    version = SGLANG_VERSION
    default_block_size = 1  # SGLang's --page-size default (docs/engines.md)

    def plan(self, spec: KVCacheSpec, budget_bytes: int, settings: KVSettings) -> KVLayout:
        """SGLang's pools for ``budget_bytes`` of KV cache on each rank.

        ``block_size`` is SGLang's ``page_size`` (1 by default on CUDA; pass it).

        Raises:
            InsufficientMemoryError: the pool holds no token, or the sliding
                pool cannot hold one window.
            InvalidInputError: ``max_model_len=-1`` (SGLang has no auto-fit).
        """
        notes: list[str] = []
        slots: int | None = None
        if any(x.kind == "mamba" for x in spec.layers):
            budget_bytes, slots = mamba_state_pool(spec, budget_bytes)
            notes.append(
                f"{slots} Mamba state slots take {MAMBA_FULL_MEMORY_RATIO}/"
                f"{1 + MAMBA_FULL_MEMORY_RATIO:g} of the budget first"
            )
        if settings.max_model_len < 1:
            raise InvalidInputError(
                "SGLang has no max_model_len=-1 auto-fit: pass the context length"
            )
        page = settings.block_size
        hybrid = spec.model_type in _HYBRID_SWA_TYPES
        stage_tokens: list[tuple[int, int | None, float]] = []
        for layers in _stage_layers(spec):
            stage_tokens.append(self._stage_pool(spec, layers, budget_bytes, page, hybrid))
        full = min(t for t, _, _ in stage_tokens)
        cell = max(c for t, _, c in stage_tokens if t == full)
        swa_values = [s for _, s, _ in stage_tokens if s is not None]
        swa = min(swa_values) if swa_values else None
        if full <= 0:
            raise InsufficientMemoryError(
                f"SGLang's KV pool for {spec.model_name} holds no token in "
                f"{budget_bytes} bytes: give the KV cache more memory",
                estimated_max_model_len=0,
            )
        window = max((x.window or x.chunk or 0) for x in spec.layers)
        if swa is not None and window + page >= swa:
            raise InsufficientMemoryError(
                f"SGLang's sliding-window pool ({swa} tokens) cannot hold one request: it "
                f"needs more than the window ({window}) plus a page ({page}); give the KV "
                f"cache more memory or raise swa_full_tokens_ratio",
                estimated_max_model_len=0,
            )
        length = settings.max_model_len
        running = max_running_requests(full, length)
        if slots is not None:
            running = min(running, slots // MAMBA_SLOTS_PER_REQUEST)
        notes.insert(0, f"max_running_requests={running} (SGLang's default for this pool)")
        if full < length:
            notes.append(
                f"the pool ({full} tokens) is smaller than one request of {length} tokens: "
                f"SGLang only warns"
            )
        groups = _groups(spec.layers, page, swa is not None)
        return KVLayout(
            engine=self.name,
            engine_version=self.version,
            budget_bytes=budget_bytes,
            block_size=page,
            # A split pool's token costs a fraction of a byte more; round down.
            block_bytes=max(int(cell) * page, 1),
            num_blocks=full // page,
            stage_blocks=tuple(t // page for t, _, _ in stage_tokens),
            max_model_len=length,
            blocks_per_request=-(-length // page),
            kv_tokens=full,
            max_concurrency=full / length,
            groups=groups,
            notes=tuple(notes),
        )

    def _stage_pool(
        self, spec: KVCacheSpec, layers: Sequence[LayerSpec], budget: int, page: int,
        hybrid: bool,
    ) -> tuple[int, int | None, float]:
        """Pool tokens, sliding-pool tokens and bytes per pool token of one stage."""
        kv = [x for x in layers if x.bytes_per_token]
        if not hybrid:
            cell = sum(x.bytes_per_token for x in kv)
            if cell == 0:
                raise InvalidInputError(
                    f"a pipeline stage of {spec.model_name} holds no KV layer: use fewer stages"
                )
            return budget // cell // page * page, None, float(cell)
        full = [x for x in kv if x.kind in ("full", "mla")]
        local = [x for x in kv if x.kind in ("sliding", "chunked")]
        full_bytes = sum(x.bytes_per_token for x in full)
        swa_bytes = sum(x.bytes_per_token for x in local)
        if not full:
            tokens = budget // swa_bytes // page * page
            return tokens, tokens, float(swa_bytes)
        split_cell = full_bytes + SWA_FULL_TOKENS_RATIO * swa_bytes
        tokens = int(budget // split_cell) // page * page
        return tokens, int(tokens * SWA_FULL_TOKENS_RATIO) // page * page, split_cell

    def resize(self, layout: KVLayout, num_blocks: int) -> KVLayout:
        """``layout`` with ``num_blocks`` pages (SGLang only warns about a small pool)."""
        tokens = num_blocks * layout.block_size
        return layout.model_copy(update={
            "num_blocks": num_blocks, "kv_tokens": tokens,
            "max_concurrency": tokens / layout.max_model_len,
        })

    def log_lines(self, layout: KVLayout) -> list[str]:
        """SGLang's start-up lines about its KV pool."""
        lines = [f"KV Cache is allocated. #tokens: {layout.kv_tokens}"]
        lines.append(
            f"max_total_num_tokens={layout.kv_tokens}, "
            f"max_running_requests={max_running_requests(layout.kv_tokens, layout.max_model_len)}, "
            f"context_len={layout.max_model_len}"
        )
        return lines


def _groups(layers: Sequence[LayerSpec], page: int, split: bool) -> tuple[KVGroup, ...]:
    full = tuple(i for i, x in enumerate(layers) if x.bytes_per_token and (
        not split or x.kind in ("full", "mla")))
    local = tuple(i for i, x in enumerate(layers) if x.bytes_per_token and split and x.kind in (
        "sliding", "chunked"))
    groups = []
    if full:
        groups.append(KVGroup(kind="full_pool", layers=full,
                              page_bytes=page * layers[full[0]].bytes_per_token,
                              block_size=page, blocks_per_request=0))
    if local:
        first = layers[local[0]]
        groups.append(KVGroup(kind="swa_pool", layers=local,
                              page_bytes=page * first.bytes_per_token, block_size=page,
                              window=first.window or first.chunk, blocks_per_request=0))
    return tuple(groups)
