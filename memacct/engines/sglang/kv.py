"""SGLang 0.5.23's KV token pool, as rules plus small functions.

SGLang does not page by block tables per layer group: it keeps one token pool
(a slot holds one token of every full-attention layer of the rank) and, for
the architectures it runs as hybrid sliding-window models, a second pool for
the sliding layers. Sources (``python/sglang/srt/model_executor/
pool_configurator.py``, ``python/sglang/srt/mem_cache/kv_cache_configurator.py``,
``python/sglang/srt/configs/model_config.py``, ``configs/mamba_utils.py``) and
the differences from vLLM are in ``docs/engines.md``:

* cell size (bytes per token per rank) = KV heads per rank x (head_dim +
  v_head_dim) x dtype bytes x layers of the stage (MLA: the latent, not split
  by TP); pool tokens = budget // cell, floored to the page size;
* hybrid sliding-window pools (gpt-oss, Llama 4 only): cell = full bytes x
  full layers + r x sliding bytes x sliding layers with
  ``swa_full_tokens_ratio`` r (0.8 unless given); full = budget // cell,
  sliding = full x r, both floored to the page; refused when the sliding pool
  holds no more than window + page tokens (gpt-oss's window is exclusive:
  ``sliding_window - 1``); every other sliding-window model gets the plain
  pool with every layer at full size;
* pipeline parallelism: the extra layers go to the last stages; every stage
  sizes its own pool and the smallest wins;
* Mamba/linear-attention hybrids: the state pool is taken first (0.9 of
  every 1.9 bytes, in whole per-request slots plus one; the SSM state in
  float32 unless told otherwise, the conv state in bfloat16), and only the
  full-attention layers count in the cell;
* ``max_running_requests`` = min(clamp(int(tokens / context x 512), 2048,
  4096), tokens // 2) (48 in place of the clamp under speculative decoding,
  unless given), and for Mamba hybrids at most slots // (3 + the radix cache's
  tracking slots: 2 with the extra buffer, 5 in all); concurrency is capped by
  it; a pool smaller than one request is only warned about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memacct.engines.base import KVBlock, KVGroup, KVLayout, KVSettings
from memacct.engines.sglang.options import (
    OPTIONS,
    SGLANG_RELEASES,
    SGLANG_VERSION,
    STATE_DTYPE_BYTES,
    SglangOptions,
    check_kv_cache_dtype,
)
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.model.spec import KVCacheSpec
from memacct.units import GiB

__all__ = [
    "SGLANG_RELEASES",
    "SGLANG_VERSION",
    "SWA_FULL_TOKENS_RATIO",
    "SglangKVManager",
    "mamba_slots_per_request",
    "mamba_state_pool",
    "max_running_requests",
    "state_slot_bytes",
]

SWA_FULL_TOKENS_RATIO = 0.8
MAMBA_FULL_MEMORY_RATIO = 0.9
# State slots per running request with the radix cache on
# (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO in kv_cache_configurator.py) ...
MAMBA_SLOTS_PER_REQUEST = 3
# ... plus get_mamba_tracking_slots (mem_cache/allocation_sizing.py): 2 under the overlap
# scheduler (on by default) when the radix cache keeps its extra buffer, 1 without it
# (pipeline parallelism turns the overlap scheduler off: _pipeline_parallel_overlap_disable
# in arg_groups/overrides.py, asserted by check_pipeline_parallel_compat).
MAMBA_TRACKING_SLOTS = 2
MAMBA_TRACKING_SLOTS_NO_OVERLAP = 1
# model_type -> architecture of _MAMBA_EXTRA_BUFFER_ARCHS (arg_groups/overrides.py) that
# _mamba_radix_cache_resolution gives the "extra_buffer" strategy by default.
_EXTRA_BUFFER_TYPES = frozenset({
    "qwen3_next", "qwen3_5", "qwen3_5_moe", "granitemoehybrid", "nemotron_h", "falcon_h1",
    "kimi_linear",
})  # fmt: skip
# State families whose shapes SGLang prices as Mamba2StateShape (conv tensors + one temporal).
_PRICED_FAMILIES = frozenset({"mamba2", "gdn"})
# configs/granitemoehybrid.py builds Mamba2CacheParams without dtype=mamba2_state_dtype(self):
# it ignores the config's mamba_ssm_dtype.
_SSM_DTYPE_NOT_READ = frozenset({"granitemoehybrid"})
# Architectures SGLang sizes with a split full/sliding pool (model_config.py is_hybrid_swa_model).
_HYBRID_SWA_TYPES = frozenset({"gpt_oss", "llama4", "llama4_text"})
# models/gpt_oss.py get_attention_sliding_window_size: config.sliding_window - 1.
_EXCLUSIVE_WINDOW_TYPES = frozenset({"gpt_oss"})


def sglang_partition(num_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """Layers per stage as SGLang splits them: the remainder goes to the last stages."""
    parts = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for i in range(num_layers % pipeline_parallel_size):
        parts[-1 - i] += 1
    return tuple(parts)


def max_running_requests(
    tokens: int, context_len: int, requested: int | None = None, mamba_cap: int | None = None
) -> int:
    """SGLang's cap on running requests for a pool of ``tokens`` (``resolve_max_num_reqs``).

    ``requested``: ``--max-running-requests``; ``mamba_cap``: state slots // slots per
    request for Mamba hybrids.
    """
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    running = min(requested if requested is not None else estimated, tokens // 2)
    return running if mamba_cap is None else min(running, mamba_cap)


def mamba_slots_per_request(spec: KVCacheSpec, settings: KVSettings) -> int:
    """State slots a running request holds (``_calculate_mamba_ratio``).

    1 without the radix cache (``enable_prefix_caching=False``); 3 with it, plus tracking
    slots where SGLang keeps the extra buffer (the architectures of
    ``_MAMBA_EXTRA_BUFFER_ARCHS``): 2 with overlap scheduling (the default), 1 under
    pipeline parallelism, which turns it off.
    """
    if not settings.enable_prefix_caching:
        return 1
    extra = 0
    if spec.model_type in _EXTRA_BUFFER_TYPES:
        overlap = spec.pipeline_parallel_size == 1
        extra = MAMBA_TRACKING_SLOTS if overlap else MAMBA_TRACKING_SLOTS_NO_OVERLAP
    return MAMBA_SLOTS_PER_REQUEST + extra


def state_slot_bytes(spec: KVCacheSpec, options: SglangOptions) -> tuple[list[int], str]:
    """Each Mamba layer's state bytes per request as SGLang prices them, and a note.

    ``Mamba2CacheParams.mamba_cache_per_req``: conv elements x the conv dtype (bfloat16)
    + temporal elements x the SSM dtype (:meth:`SglangOptions.ssm_dtype`).
    """
    declared = None if spec.model_type in _SSM_DTYPE_NOT_READ else _declared_ssm(spec)
    ssm, where = options.ssm_dtype(declared)
    conv = options.conv_dtype()
    sizes: list[int] = []
    for layer in spec.layers:
        if layer.kind != "mamba":
            continue
        shapes: Sequence[tuple[int, int]] = getattr(layer, "shapes", None) or ()
        if layer.state_kind in _PRICED_FAMILIES and len(shapes) >= 2:
            conv_elements = sum(elements for elements, _ in shapes[:-1])
            sizes.append(
                conv_elements * STATE_DTYPE_BYTES[conv] + shapes[-1][0] * STATE_DTYPE_BYTES[ssm]
            )
        else:
            sizes.append(layer.state_bytes or 0)
    return sizes, f"SSM state in {ssm} ({where}), conv state in {conv}"


def _declared_ssm(spec: KVCacheSpec) -> str | None:
    value: Any = getattr(spec, "mamba_ssm_dtype", None)
    return value if isinstance(value, str) else None


def mamba_state_pool(
    spec: KVCacheSpec, budget_bytes: int, options: SglangOptions | None = None
) -> tuple[int, int, str]:
    """SGLang's Mamba state pool, taken from the budget first (``_handle_max_mamba_cache``).

    ``mamba_full_memory_ratio`` r = 0.9 of every 1 + r bytes go to whole
    per-request state slots (one more slot pads the pool); the rest is the KV
    budget. Under pipeline parallelism a slot is priced at the stage with the
    most Mamba layers. Returns ``(KV budget bytes, slots, note on the dtypes)``.

    Raises:
        InsufficientMemoryError: not one slot fits.
    """
    per_layer, dtypes = state_slot_bytes(spec, options or SglangOptions())
    stages = _stage_layers(spec)
    most = max(sum(1 for x in stage if x.kind == "mamba") for stage in stages)
    per_slot = int(sum(per_layer) * (most / len(per_layer)))
    # SGLang works in GiB floats here.
    rest_gib = budget_bytes / GiB
    state_budget = rest_gib * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO) * GiB
    slots = int((state_budget - per_slot) // per_slot)
    if slots <= 0:
        raise InsufficientMemoryError(
            f"SGLang's Mamba state pool for {spec.model_name} holds no request: one slot is "
            f"{per_slot} bytes ({dtypes}) and {budget_bytes} bytes of budget leave "
            f"{MAMBA_FULL_MEMORY_RATIO}/{1 + MAMBA_FULL_MEMORY_RATIO:g} of it for states; "
            f"give the KV cache more memory or --mamba-ssm-dtype bfloat16",
            estimated_max_model_len=0,
        )
    rest_gib -= (slots + 1) * per_slot / GiB
    return int(rest_gib * GiB), slots, dtypes


def _stage_layers(spec: KVCacheSpec) -> list[list[Any]]:
    layers = list(spec.layers)
    if not layers:
        raise InvalidInputError(
            f"the spec of {spec.model_name} lists no per-layer geometry: build it with "
            f"KVCacheSpec.from_hf_config to plan it for SGLang"
        )
    # By decoder layer: a Falcon-H1 layer holds two cache modules (attention and Mamba2).
    parts = sglang_partition(spec.total_num_layers, spec.pipeline_parallel_size)
    starts = [sum(parts[:i]) for i in range(len(parts))]
    return [[x for x in layers if s <= x.layer < s + n]
            for s, n in zip(starts, parts, strict=True)]


def sliding_window_size(spec: KVCacheSpec) -> int:
    """The window SGLang's SWA admission check uses (``validate_swa_pool_size``)."""
    window = max((x.window or x.chunk or 0) for x in spec.layers)
    return window - 1 if spec.model_type in _EXCLUSIVE_WINDOW_TYPES and window else window


class SglangKVManager:
    """SGLang 0.5.23's token pool (see the module docstring)."""

    name = "sglang"
    version = SGLANG_VERSION
    releases = SGLANG_RELEASES
    options = tuple(OPTIONS)
    default_block_size = 1  # SGLang's --page-size default (docs/engines.md)

    def block(self, spec: KVCacheSpec, settings: KVSettings) -> KVBlock:
        """One page of the pool: ``page_size`` tokens of the stage whose token costs most
        (its pool is the smallest), whatever the budget; a split pool's token, a fraction
        of a byte more, rounded down as :meth:`plan` rounds it.

        Raises:
            InvalidInputError: a KV dtype SGLang has no name for, a bad engine option, or
                a pipeline stage without a KV layer.
        """
        options = SglangOptions.parse(getattr(settings, "engine_options", None))
        check_kv_cache_dtype(spec.kv_dtype)
        _check_no_cross(spec)
        ratio = options.swa_full_tokens_ratio if spec.model_type in _HYBRID_SWA_TYPES else None
        cell = max(_stage_cell(spec, layers, ratio)[2] for layers in _stage_layers(spec))
        page = settings.block_size
        return KVBlock(page, max(int(cell) * page, 1))

    def plan(self, spec: KVCacheSpec, budget_bytes: int, settings: KVSettings) -> KVLayout:
        """SGLang's pools for ``budget_bytes`` of KV cache on each rank.

        ``block_size`` is SGLang's ``page_size`` (1 by default on CUDA; pass it).
        ``settings.engine_options`` takes :class:`SglangOptions`' fields.

        Raises:
            InsufficientMemoryError: the pool holds no token, the sliding pool
                cannot hold one window, or the Mamba state pool no request.
            InvalidInputError: ``max_model_len=-1`` (SGLang has no auto-fit), a
                KV dtype SGLang has no name for, or a bad engine option.
        """
        options = SglangOptions.parse(getattr(settings, "engine_options", None))
        check_kv_cache_dtype(spec.kv_dtype)
        _check_no_cross(spec)
        if settings.max_model_len < 1:
            raise InvalidInputError(
                "SGLang has no max_model_len=-1 auto-fit: pass the context length"
            )
        notes: list[str] = []
        mamba_cap: int | None = None
        if any(x.kind == "mamba" for x in spec.layers):
            budget_bytes, slots, dtypes = mamba_state_pool(spec, budget_bytes, options)
            per_request = mamba_slots_per_request(spec, settings)
            mamba_cap = slots // per_request
            notes.append(
                f"{slots} Mamba state slots ({dtypes}) take {MAMBA_FULL_MEMORY_RATIO}/"
                f"{1 + MAMBA_FULL_MEMORY_RATIO:g} of the budget first; a running request holds "
                f"{per_request} of them"
            )
        page = settings.block_size
        ratio = options.swa_full_tokens_ratio
        hybrid = spec.model_type in _HYBRID_SWA_TYPES
        stage_tokens = [
            self._stage_pool(spec, layers, budget_bytes, page, ratio if hybrid else None)
            for layers in _stage_layers(spec)
        ]
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
        window = sliding_window_size(spec)
        if swa is not None and window + page >= swa:
            raise InsufficientMemoryError(
                f"SGLang's sliding-window pool ({swa} tokens at swa_full_tokens_ratio "
                f"{ratio:g}) cannot hold one request: it needs more than the window "
                f"({window}) plus a page ({page}); give the KV cache more memory or raise "
                f"--swa-full-tokens-ratio",
                estimated_max_model_len=0,
            )
        length = settings.max_model_len
        running = max_running_requests(full, length, options.running_requests(), mamba_cap)
        if running <= 0:
            raise InsufficientMemoryError(
                f"SGLang's Mamba state cache of {spec.model_name} serves no request: "
                f"{mamba_cap} requests' worth of state slots; give the KV cache more memory "
                f"or --mamba-ssm-dtype bfloat16",
                estimated_max_model_len=0,
            )
        notes.insert(0, f"max_running_requests={running} (SGLang's cap for this pool)")
        if swa is not None:
            notes.append(f"sliding-window pool: {swa} tokens (swa_full_tokens_ratio {ratio:g})")
        if full < length:
            notes.append(
                f"the pool ({full} tokens) is smaller than one request of {length} tokens: "
                f"SGLang only warns, and serves requests of up to {full} tokens"
            )
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
            max_concurrency=min(full / length, running),
            groups=_groups(spec.layers, page, swa is not None),
            notes=tuple(notes),
            **_running_field(running),
        )

    def _stage_pool(
        self, spec: KVCacheSpec, layers: Sequence[Any], budget: int, page: int,
        ratio: float | None,
    ) -> tuple[int, int | None, float]:
        """Pool tokens, sliding-pool tokens and bytes per pool token of one stage."""
        full_bytes, swa_bytes, cell = _stage_cell(spec, layers, ratio)
        if ratio is None:
            return budget // full_bytes // page * page, None, cell
        if not full_bytes:
            tokens = budget // swa_bytes // page * page
            return tokens, tokens, cell
        tokens = int(budget // cell) // page * page
        return tokens, int(tokens * ratio) // page * page, cell

    def resize(self, layout: KVLayout, num_blocks: int) -> KVLayout:
        """``layout`` with ``num_blocks`` pages (SGLang only warns about a small pool)."""
        tokens = num_blocks * layout.block_size
        running = _running(layout, tokens)
        return layout.model_copy(update={
            "num_blocks": num_blocks, "kv_tokens": tokens,
            "max_concurrency": min(tokens / layout.max_model_len, running),
            **_running_field(running),
        })

    def log_lines(self, layout: KVLayout) -> list[str]:
        """SGLang's start-up lines about its KV pool."""
        running = _running(layout, layout.kv_tokens)
        return [
            f"KV Cache is allocated. #tokens: {layout.kv_tokens}",
            f"max_total_num_tokens={layout.kv_tokens}, max_running_requests={running}, "
            f"context_len={layout.max_model_len}",
        ]


def _check_no_cross(spec: KVCacheSpec) -> None:
    """Refuse an encoder-decoder (cross-attention layers): SGLang sizes its encoder-decoder
    pool its own way (``EncoderDecoderMemoryPool``-style layouts), which memacct does not
    model; summing the cross layers into the token cell would be a silent guess.

    Raises:
        InvalidInputError: the spec holds a cross-attention layer.
    """
    if any(x.kind == "cross" for x in spec.layers):
        raise InvalidInputError(
            f"{spec.model_name} is an encoder-decoder (cross-attention layers): memacct does not "
            "model SGLang's pool for it yet; plan it with --engine vllm"
        )


def _stage_cell(
    spec: KVCacheSpec, layers: Sequence[Any], ratio: float | None
) -> tuple[int, int, float]:
    """One stage's bytes per token: of the layers at full size, of the sliding layers of a
    split pool (``ratio``: its tokens per full-pool token; ``None``: no split), and of one
    pool token (full + ratio x sliding).

    Raises:
        InvalidInputError: the stage holds no KV layer.
    """
    kv = [x for x in layers if x.bytes_per_token]
    if ratio is None:
        cell = sum(x.bytes_per_token for x in kv)
        if cell == 0:
            raise InvalidInputError(
                f"a pipeline stage of {spec.model_name} holds no KV layer: use fewer stages"
            )
        return cell, 0, float(cell)
    full_bytes = sum(x.bytes_per_token for x in kv if x.kind in ("full", "mla"))
    swa_bytes = sum(x.bytes_per_token for x in kv if x.kind in ("sliding", "chunked"))
    if not full_bytes:
        return 0, swa_bytes, float(swa_bytes)
    return full_bytes, swa_bytes, full_bytes + ratio * swa_bytes


def _running(layout: KVLayout, tokens: int) -> int:
    """The layout's cap on running requests for a pool of ``tokens`` (after a resize)."""
    recorded: int | None = getattr(layout, "max_running_requests", None)
    fresh = max_running_requests(tokens, layout.max_model_len)
    if recorded is None:
        return fresh
    if recorded > max_running_requests(layout.kv_tokens, layout.max_model_len):
        # A --max-running-requests above the default: only tokens // 2 bounds it.
        return min(recorded, tokens // 2)
    # The default, or a Mamba (or smaller user) cap below it.
    return min(recorded, fresh)


def _running_field(running: int) -> dict[str, int]:
    """``max_running_requests`` for a :class:`KVLayout` that has the field."""
    return {"max_running_requests": running} if "max_running_requests" in (
        KVLayout.model_fields) else {}


def _groups(layers: Sequence[Any], page: int, split: bool) -> tuple[KVGroup, ...]:
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
