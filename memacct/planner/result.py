"""The KV-cache plan: what an engine gets, in bytes, blocks and tokens, and why (contract).

:class:`KVCachePlan` is what :func:`memacct.plan_kv_cache` returns; its
:meth:`KVCachePlan.report` prints the seed's "Memory profiling results" block,
memacct's own lines, then the lines the engine itself logs (vLLM 0.33:
"Available KV cache memory", "GPU KV cache size", "Maximum concurrency").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from memacct.checks import FROZEN, check_int
from memacct.engines.base import KVLayout
from memacct.errors import InvalidInputError
from memacct.jsonfile import JsonFile
from memacct.model.spec import KVCacheSpec
from memacct.models import TruthSource
from memacct.planner.budget import MemoryBudget
from memacct.planner.plan_json import PlanFigures, flat_plan, nested_plan
from memacct.units import format_gib

__all__ = [
    "PLAN_FORMAT_VERSION", "Agreement", "KVCachePlan", "Provenance", "fits_verdict",
]

PLAN_FORMAT_VERSION = 4
"""4: the plan holds its budget and the engine's layout (``layout``, after the flat keys)
and shows their figures, never a copy (:mod:`memacct.planner.plan_json`); 3: it carries
its non-KV budget (``budget``) and its verdict (``fits``, ``verdict``, ``suggestions``); a
plan that does not fit has no blocks. Versions 2 and 3 still load."""

_READS_FORMATS = (2, 3, PLAN_FORMAT_VERSION)

_NAME_WIDTH = 23  # the column vLLM's "Memory profiling results" block aligns values at


class Provenance(BaseModel):
    """Where a plan's numbers came from.

    Attributes:
        backend: backend that measured the profile.
        device: device index it measured.
        truth_source: the resolved truth source of the activation peak.
        requested_truth_source: what was asked for (``auto`` included).
        truth_source_reason: why the truth source was chosen.
        fragmentation: ``(reserved - allocated) / reserved`` at the profile's peak.
        allocator_settings: allocator environment variables in effect.
        free_at_start: free device memory at the baseline, bytes.
        other_processes_at_baseline: other processes' memory at the baseline,
            bytes, or ``None`` where the backend cannot attribute it.
        memacct_version: the memacct that made the plan.
        created_at: ``time.time()`` when the plan was made.
        overrides: overrides that replaced ``gpu_memory_utilization``, one
            ``name=value`` each.
        profile_warnings: the profile's warnings (another process moving
            memory during profiling, ...), repeated so they travel with the plan.
    """

    model_config = FROZEN

    backend: str
    device: int = Field(ge=0)
    truth_source: TruthSource
    requested_truth_source: TruthSource
    truth_source_reason: str = ""
    fragmentation: float = Field(ge=0.0, le=1.0)
    allocator_settings: dict[str, str] = Field(default_factory=dict)
    free_at_start: int = Field(ge=0)
    other_processes_at_baseline: int | None = Field(default=None, ge=0)
    memacct_version: str
    created_at: float
    overrides: tuple[str, ...] = ()
    profile_warnings: tuple[str, ...] = ()


class Agreement(BaseModel):
    """The ranks of a process group agreeing on one block count (see :func:`agree`).

    Attributes:
        ranks: each rank's ``num_blocks`` before agreeing, in group-rank order.
        min: the block count every rank took (the smallest).
        rank: this process's rank in the group.
        world_size: ranks in the group.
        backend: the ``torch.distributed`` backend, or ``"none"`` for the
            single-rank no-op outside any process group.
    """

    model_config = FROZEN

    ranks: tuple[int, ...] = Field(min_length=1)
    min: int = Field(gt=0)
    rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    backend: str

    @model_validator(mode="after")
    def _consistent(self) -> Agreement:
        if len(self.ranks) != self.world_size:
            raise ValueError(
                f"ranks has {len(self.ranks)} entries for world_size {self.world_size}"
            )
        if self.min != min(self.ranks):
            raise ValueError(f"min ({self.min}) must be the smallest of ranks {list(self.ranks)}")
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is outside world_size {self.world_size}")
        return self


def fits_verdict(max_concurrency: float, max_model_len: int, used_bytes: int,
                 max_num_seqs: int | None = None) -> str:
    """A fitting plan's first line: requests of the longest length at once, and the cache;
    never more requests than the engine runs at once (``max_num_seqs``)."""
    count = int(max_concurrency)
    if max_num_seqs is not None and count > max_num_seqs:
        return (
            f"fits: {max_num_seqs} concurrent requests of {max_model_len:,} tokens, the "
            f"engine's max_num_seqs (the KV cache of {format_gib(used_bytes)} holds {count:,})"
        )
    if count == 0:
        # Only an engine that starts with a pool under one request gets here (SGLang warns).
        return (
            f"fits, below one request of {max_model_len:,} tokens: the engine starts and only "
            f"warns; its pool holds {int(max_concurrency * max_model_len):,} tokens, so longer "
            f"requests cannot be served (KV cache {format_gib(used_bytes)})"
        )
    return (
        f"fits: {count} concurrent request{'' if count == 1 else 's'} of {max_model_len:,} "
        f"tokens (KV cache {format_gib(used_bytes)})"
    )


class KVCachePlan(JsonFile, PlanFigures):
    """How much of a device the KV cache gets, in bytes, blocks and tokens, and why (contract).

    Sizes are bytes, for one rank. ``kv_cache_bytes`` is the budget;
    ``kv_cache_used_bytes`` the whole blocks the engine allocates from it.
    The profile's fields (``total_memory`` ... ``profile_duration_s``,
    ``provenance``) are ``None`` for a plan made from ``kv_cache_memory_bytes``
    alone.

    Attributes:
        engine: the engine whose KV-cache manager made the plan.
        engine_version: the engine release its rules come from.
        total_memory: device memory, bytes.
        gpu_memory_utilization: the fraction of ``total_memory`` asked for.
        target_allocation: what this instance may hold: ``int(total x
            utilization)``, or non-KV memory plus an override's cache.
        non_kv_cache_memory: weights + activation peak + non-allocator increase.
        weights_memory: the model's weights.
        activation_peak: the profile's activation peak.
        non_allocator_increase: memory outside the allocator gained since baseline.
        kv_cache_bytes: the KV-cache budget of each rank.
        block_size: tokens per block (after any raise by the engine).
        block_bytes: bytes one block takes on the rank that limits the pool.
        num_blocks: the engine's block count (vLLM's ``num_gpu_blocks``; with
            pipeline parallelism, the whole pipeline's: the fewest of any stage).
        num_tokens: ``num_blocks x block_size``.
        kv_tokens: the tokens the engine logs ("GPU KV cache size: N tokens").
        kv_cache_used_bytes: ``num_blocks x block_bytes``.
        max_model_len: the longest request, tokens (after a ``-1`` auto-fit).
        max_num_batched_tokens: tokens one scheduler step may process.
        max_num_seqs: sequences one step may hold, when given.
        async_scheduling: whether the engine schedules one step ahead.
        blocks_per_request: blocks one request of ``max_model_len`` takes.
        request_bytes: ``blocks_per_request x block_bytes``.
        max_concurrency: the engine's "Maximum concurrency" figure (SGLang:
            capped by ``max_running_requests``).
        max_running_requests: the engine's cap on running requests, where it
            has one (SGLang's ``max_running_requests``), else ``None``.
        groups: the engine's KV-cache groups.
        stage_blocks: each pipeline stage's block count before the minimum.
        engine_notes: rules the engine applied, one sentence each.
        profile_duration_s: wall time of the profile.
        spec: the model's KV-cache geometry on this rank.
        provenance: where the numbers came from.
        agreement: set by :func:`agree` when ranks took a common block count.
        allocator_reserve_bytes: bytes of ``kv_cache_bytes`` left free for the
            allocator: the profile's fragmentation allowance plus what the
            allocator adds when it rounds each layer's KV-cache tensor to its
            growth granularity (0 for profiles that record neither).
        allocator_limit: the most bytes the allocator may reserve, from the
            profile (``None``: no cap beyond the device, or no profile).
        notes: memacct's notes on how the budget was set, one sentence each
            (the allocator's limit binding before ``gpu_memory_utilization``;
            ``target_allocation`` is then the non-KV memory plus what the
            limit leaves the KV cache).
        model: the model's name, for people.
        budget: the non-KV budget the plan was cut from (a profile's or an
            engine's start-up estimate); ``None`` for ``kv_cache_memory_bytes`` alone.
        fits: whether the engine starts with this cache. A plan that does not fit
            (offline only: :func:`memacct.plan_kv_cache` raises instead) has
            ``max_concurrency`` 0, and ``kv_cache_bytes`` may be negative: by that
            much the rest exceeds the target.
        verdict: one line a person reads first ("fits: ..." or "does not fit: ...").
        suggestions: what would make it fit, most effective first, each with its figure.
        shortfall_bytes: by how much it does not fit: the bytes the device would need
            besides what the target gives (0 for a plan that fits).
    """

    model_config = FROZEN
    file_kind: ClassVar[str] = "plan"

    format_version: int = Field(default=PLAN_FORMAT_VERSION, strict=True)
    engine: str = "vllm"
    engine_version: str
    target_allocation: int | None = Field(default=None, ge=0)
    kv_cache_bytes: int
    num_tokens: int = Field(ge=0)
    kv_cache_used_bytes: int = Field(ge=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    async_scheduling: bool = True
    request_bytes: int = Field(gt=0)
    layout: KVLayout
    profile_duration_s: float | None = Field(default=None, ge=0.0)
    spec: KVCacheSpec
    provenance: Provenance | None = None
    agreement: Agreement | None = None
    allocator_reserve_bytes: int = Field(default=0, ge=0)
    allocator_limit: int | None = Field(default=None, gt=0)
    notes: tuple[str, ...] = ()
    model: str = ""
    budget: MemoryBudget | None = None
    fits: bool = True
    verdict: str = ""
    suggestions: tuple[str, ...] = ()
    shortfall_bytes: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """The budget's and the layout's figures given by name (a file, the planner's
        keywords) into the objects that hold them (:func:`plan_json.nested_plan`)."""
        return nested_plan(data) if isinstance(data, Mapping) else data

    @model_serializer(mode="wrap")
    def _flat(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """Every figure under its flat name, as plans have always been written."""
        include, exclude = info.include, info.exclude

        def wanted(name: str) -> bool:
            return (include is None or name in include) and (exclude is None or name not in exclude)

        return flat_plan(handler(self), lambda name: getattr(self, name), wanted)

    @model_validator(mode="after")
    def _consistent(self) -> KVCachePlan:
        if self.format_version not in _READS_FORMATS:
            raise ValueError(
                f"format_version {self.format_version} is not supported by this memacct "
                f"(it reads versions {', '.join(map(str, _READS_FORMATS))}): plan again with "
                "this version"
            )
        if self.fits and min(self.kv_cache_bytes, self.num_blocks, self.num_tokens,
                             self.kv_cache_used_bytes) <= 0:
            raise ValueError("a plan that fits has a positive KV cache, blocks and tokens")
        if not self.fits and self.max_concurrency != 0:
            raise ValueError("a plan that does not fit has max_concurrency 0")
        if self.fits and self.shortfall_bytes:
            raise ValueError("a plan that fits has no shortfall")
        checks = [
            ("kv_cache_used_bytes", self.kv_cache_used_bytes, self.num_blocks * self.block_bytes),
            ("num_tokens", self.num_tokens, self.num_blocks * self.block_size),
            ("request_bytes", self.request_bytes, self.blocks_per_request * self.block_bytes),
        ]
        if self.target_allocation is not None:
            checks.append(("kv_cache_bytes", self.kv_cache_bytes,
                           self.target_allocation - self.non_kv_cache_memory))
        for name, value, expected in checks:
            if value != expected:
                raise ValueError(f"{name} ({value}) is inconsistent: expected {expected}")
        if (self.target_allocation is not None and self.total_memory is not None
                and self.target_allocation > self.total_memory):
            raise ValueError("target_allocation exceeds total_memory")
        if (self.kv_cache_used_bytes + self.allocator_reserve_bytes
                > max(0, self.kv_cache_bytes)):
            raise ValueError("kv_cache_used_bytes + allocator_reserve_bytes exceeds kv_cache_bytes")
        if not self.fits:
            return self
        # True division of absurd integers overflows here: load_model_json reports it.
        concurrency = (
            min(self.kv_tokens / self.max_model_len, self.max_running_requests or math.inf)
            if self.engine == "sglang"
            else self.num_blocks / self.blocks_per_request
        )
        if not math.isclose(self.max_concurrency, concurrency, rel_tol=1e-9):
            raise ValueError(f"max_concurrency ({self.max_concurrency}) must be {concurrency}")
        if self.agreement is not None and self.num_blocks != self.agreement.min:
            raise ValueError("num_blocks must equal the agreed minimum")
        return self

    def engine_lines(self) -> list[str]:
        """The lines the engine itself logs about this KV cache."""
        from memacct.engines import get_engine

        return get_engine(self.engine).kv.log_lines(self.layout)

    def report(self) -> str:
        """The seed's "Memory profiling results" block, memacct's lines, then the engine's.

        The first eight lines are exactly the block vLLM users know
        (``baseline_memory`` = weights + non-allocator increase,
        ``max_inference_spike`` = activation peak, ``kv_cache_size`` =
        target - baseline - spike); the lines after them add the truth source,
        fragmentation, blocks, tokens and concurrency, one ``profile_warning``
        line for each warning of the profile, and last the engine's own lines
        (vLLM 0.33: "Available KV cache memory", "GPU KV cache size",
        "Maximum concurrency"). A plan without a profile starts at the blocks.
        """
        rows: list[tuple[str, str]] = []
        lines: list[str] = []
        prov = self.provenance
        if prov is not None and self.total_memory is not None:
            utilization = f"{self.gpu_memory_utilization}"
            if prov.overrides:
                utilization += f" (overridden by {', '.join(prov.overrides)})"
            truth = str(prov.truth_source)
            if prov.truth_source_reason:
                truth += f" ({prov.truth_source_reason})"
            rows += [
                ("duration", f"{self.profile_duration_s or 0.0:.2f} seconds"),
                ("total_gpu_memory", format_gib(self.total_memory)),
                ("gpu_memory_utilization", utilization),
                ("target_allocation", format_gib(self.target_allocation or 0)),
                ("baseline_memory", format_gib(self.weights_memory + self.non_allocator_increase)),
                ("max_inference_spike", format_gib(self.activation_peak)),
                ("kv_cache_size", format_gib(self.kv_cache_bytes)),
                ("truth_source", truth),
                ("fragmentation", f"{prov.fragmentation:.1%}"),
            ]
            # Charged besides the spike, so kv_cache_size is target - baseline - spike - these.
            rows += [(name, format_gib(value)) for name, value in (
                ("cudagraph_memory", self.cudagraph_memory),
                ("retained_memory", self.retained_memory)) if value]  # fmt: skip
            lines.append("Memory profiling results:")
        else:
            lines.append(f"KV cache plan ({self.engine} {self.engine_version}):")
            rows.append(("kv_cache_size", format_gib(self.kv_cache_bytes)))
        rows += [
            ("num_gpu_blocks", str(self.num_blocks)),
            ("block_size", f"{self.block_size} tokens, {self.block_bytes} bytes per block"),
            ("kv_cache_tokens", str(self.kv_tokens)),
            ("max_concurrency",
             f"{self.max_concurrency:.2f}x for {self.max_model_len} tokens per request"),
        ]
        if prov is not None:
            rows += [("profile_warning", warning) for warning in prov.profile_warnings]
        if self.allocator_reserve_bytes:
            rows.append((
                "allocator_reserve",
                f"{format_gib(self.allocator_reserve_bytes)} of the cache budget left to the "
                f"allocator (fragmentation allowance, KV tensor rounding)",
            ))
        if self.allocator_limit is not None:
            rows.append(("allocator_limit", format_gib(self.allocator_limit)))
        rows += [("note", note) for note in self.notes]
        if self.agreement is not None and self.agreement.world_size > 1:
            rows.append((
                "agreed_num_gpu_blocks",
                f"{self.agreement.min}, the smallest of {self.agreement.world_size} ranks "
                f"{list(self.agreement.ranks)}",
            ))
        lines += [f"{name:<{_NAME_WIDTH}}{value}" for name, value in rows]
        lines += self.engine_lines()
        return "\n".join(lines)

    def __str__(self) -> str:
        where = (
            f"{self.provenance.backend}:{self.provenance.device}"
            if self.provenance is not None else self.engine
        )
        return (
            f"KV cache on {where}: {self.num_blocks} blocks x {self.block_size} tokens, "
            f"{self.kv_tokens} tokens ({format_gib(self.kv_cache_used_bytes)}), "
            f"{self.max_concurrency:.2f}x concurrency at {self.max_model_len} tokens"
        )

    def with_num_blocks(self, num_blocks: int, agreement: Agreement | None = None) -> KVCachePlan:
        """A copy with ``num_blocks`` blocks and the numbers that follow from it recomputed.

        Raises:
            InvalidInputError: more blocks than the budget holds, or none.
            InsufficientMemoryError: one request of ``max_model_len`` no longer
                fits, as the engine counts it.
        """
        from memacct.engines import get_engine

        check_int("num_blocks", num_blocks)
        if not self.fits:
            raise InvalidInputError(f"this plan does not fit ({self.verdict}): it has no blocks")
        if num_blocks * self.block_bytes + self.allocator_reserve_bytes > self.kv_cache_bytes:
            raise InvalidInputError(
                f"{num_blocks} blocks of {self.block_bytes} bytes exceed this plan's KV-cache "
                f"budget of {self.kv_cache_bytes} bytes ({self.kv_cache_bytes // self.block_bytes}"
                f" blocks)"
            )
        layout = get_engine(self.engine).kv.resize(self.layout, num_blocks)
        data = self.model_dump()
        data.update(
            num_blocks=num_blocks,
            num_tokens=num_blocks * self.block_size,
            kv_tokens=layout.kv_tokens,
            kv_cache_used_bytes=num_blocks * self.block_bytes,
            max_concurrency=layout.max_concurrency,
            max_running_requests=layout.max_running_requests,
            agreement=None if agreement is None else agreement.model_dump(),
            verdict=fits_verdict(layout.max_concurrency, self.max_model_len,
                                 num_blocks * self.block_bytes, self.max_num_seqs),
        )
        return KVCachePlan.model_validate(data)

