"""Planning the KV cache: from a profile and a spec to bytes, blocks and a report.

:func:`plan_kv_cache` follows vLLM's arithmetic so its numbers match what an
engine would compute, and adds what engines leave out: the plan records where
its numbers came from (:class:`Provenance`) and every refusal names the
numbers and the fix.

* ``target_allocation = int(total x gpu_memory_utilization)``;
* ``kv_cache_bytes = target_allocation - non_kv_cache_memory``;
* ``num_blocks = kv_cache_bytes // (block_size x bytes_per_token)``, whole blocks only;
* ``max_concurrency = num_blocks x block_bytes / request_bytes(max_model_len)``.

Plans and profiles serialize to JSON and load back losslessly, so an engine
can save its profile and a planner can work from it later, off the device.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memacct._version import __version__
from memacct.errors import InsufficientMemoryError, InvalidInputError
from memacct.io import atomic_write_text, read_text
from memacct.models import ProfileResult, TruthSource, load_model_json
from memacct.planner.guard import check_profile_matches
from memacct.planner.spec import KVCacheSpec
from memacct.units import format_gib

__all__ = [
    "PLAN_FORMAT_VERSION",
    "Agreement",
    "KVCachePlan",
    "Provenance",
    "kv_cache_reservation",
    "load_profile",
    "plan_kv_cache",
    "save_profile",
]

logger = logging.getLogger("memacct")

PLAN_FORMAT_VERSION = 1

_FROZEN = ConfigDict(frozen=True, extra="forbid", validate_default=True)
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

    model_config = _FROZEN

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

    model_config = _FROZEN

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


class KVCachePlan(BaseModel):
    """How much of a device the KV cache gets, in bytes and blocks, and why (contract).

    Sizes are bytes, for one rank. ``kv_cache_bytes`` is the raw budget;
    ``kv_cache_used_bytes`` the whole blocks allocated from it.

    Attributes:
        total_memory: device memory, bytes.
        gpu_memory_utilization: the fraction of ``total_memory`` asked for.
        target_allocation: what this instance may hold: ``int(total x
            utilization)``, or non-KV memory plus an override's cache.
        non_kv_cache_memory: weights + activation peak + non-allocator increase.
        weights_memory: the model's weights.
        activation_peak: the profile's activation peak.
        non_allocator_increase: memory outside the allocator gained since baseline.
        kv_cache_bytes: ``target_allocation - non_kv_cache_memory``.
        block_size: tokens per block.
        block_bytes: bytes per block: ``block_size x spec.bytes_per_token``.
        num_blocks: blocks of KV cache.
        num_tokens: ``num_blocks x block_size``.
        kv_cache_used_bytes: ``num_blocks x block_bytes``.
        max_model_len: the longest request the plan admits, tokens.
        max_num_batched_tokens: the prefill chunk assumed for sliding windows,
            or ``None`` for no chunked prefill.
        request_bytes: KV cache one request of ``max_model_len`` needs.
        max_concurrency: ``kv_cache_used_bytes / request_bytes``: how many
            requests of ``max_model_len`` fit at once.
        profile_duration_s: wall time of the profile.
        spec: the model's KV-cache geometry on this rank.
        provenance: where the numbers came from.
        agreement: set by :func:`agree` when ranks took a common block count.
        allocator_reserve_bytes: bytes of ``kv_cache_bytes`` left free for the
            allocator: the profile's fragmentation allowance plus what the
            allocator adds when it rounds each layer's KV-cache tensor to its
            growth granularity (0 for profiles that record neither).
    """

    model_config = _FROZEN

    format_version: int = PLAN_FORMAT_VERSION
    total_memory: int = Field(gt=0)
    gpu_memory_utilization: float = Field(gt=0.0, le=1.0)
    target_allocation: int = Field(gt=0)
    non_kv_cache_memory: int = Field(ge=0)
    weights_memory: int = Field(ge=0)
    activation_peak: int = Field(ge=0)
    non_allocator_increase: int
    kv_cache_bytes: int = Field(gt=0)
    block_size: int = Field(gt=0)
    block_bytes: int = Field(gt=0)
    num_blocks: int = Field(gt=0)
    num_tokens: int = Field(gt=0)
    kv_cache_used_bytes: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    request_bytes: int = Field(gt=0)
    max_concurrency: float = Field(gt=0.0)
    profile_duration_s: float = Field(ge=0.0)
    spec: KVCacheSpec
    provenance: Provenance
    agreement: Agreement | None = None
    allocator_reserve_bytes: int = Field(default=0, ge=0)
    cudagraph_memory: int = Field(default=0, ge=0)
    retained_memory: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> KVCachePlan:
        if self.format_version != PLAN_FORMAT_VERSION:
            raise ValueError(
                f"format_version {self.format_version} is not supported by this memacct "
                f"(it reads version {PLAN_FORMAT_VERSION}): plan again with this version"
            )
        checks = [
            ("non_kv_cache_memory", self.non_kv_cache_memory,
             self.weights_memory + self.activation_peak + self.non_allocator_increase
             + self.cudagraph_memory + self.retained_memory),
            ("kv_cache_bytes", self.kv_cache_bytes,
             self.target_allocation - self.non_kv_cache_memory),
            ("block_bytes", self.block_bytes, self.block_size * self.spec.bytes_per_token),
            ("kv_cache_used_bytes", self.kv_cache_used_bytes, self.num_blocks * self.block_bytes),
            ("num_tokens", self.num_tokens, self.num_blocks * self.block_size),
            ("request_bytes", self.request_bytes, self.spec.request_bytes(
                self.max_model_len, self.block_size, self.max_num_batched_tokens)),
        ]
        for name, value, expected in checks:
            if value != expected:
                raise ValueError(f"{name} ({value}) is inconsistent: expected {expected}")
        if self.target_allocation > self.total_memory:
            raise ValueError("target_allocation exceeds total_memory")
        if self.kv_cache_used_bytes + self.allocator_reserve_bytes > self.kv_cache_bytes:
            raise ValueError("kv_cache_used_bytes + allocator_reserve_bytes exceeds kv_cache_bytes")
        if self.request_bytes > self.kv_cache_used_bytes:
            raise ValueError("one request of max_model_len does not fit in the plan")
        if not math.isclose(
            self.max_concurrency, self.kv_cache_used_bytes / self.request_bytes, rel_tol=1e-12
        ):
            raise ValueError("max_concurrency must equal kv_cache_used_bytes / request_bytes")
        if self.agreement is not None and self.num_blocks != self.agreement.min:
            raise ValueError("num_blocks must equal the agreed minimum")
        return self

    def report(self) -> str:
        """vLLM's "Memory profiling results" block, then memacct's own lines.

        The first eight lines are exactly the block vLLM users know
        (``baseline_memory`` = weights + non-allocator increase,
        ``max_inference_spike`` = activation peak, ``kv_cache_size`` =
        target - baseline - spike); the lines after them add the truth source,
        fragmentation, blocks, tokens and concurrency, and one ``profile_warning``
        line for each warning of the profile.
        """
        utilization = f"{self.gpu_memory_utilization}"
        if self.provenance.overrides:
            utilization += f" (overridden by {', '.join(self.provenance.overrides)})"
        truth = str(self.provenance.truth_source)
        if self.provenance.truth_source_reason:
            truth += f" ({self.provenance.truth_source_reason})"
        rows = [
            ("duration", f"{self.profile_duration_s:.2f} seconds"),
            ("total_gpu_memory", format_gib(self.total_memory)),
            ("gpu_memory_utilization", utilization),
            ("target_allocation", format_gib(self.target_allocation)),
            ("baseline_memory", format_gib(self.weights_memory + self.non_allocator_increase)),
            ("max_inference_spike", format_gib(self.activation_peak)),
            ("kv_cache_size", format_gib(self.kv_cache_bytes)),
            ("truth_source", truth),
            ("fragmentation", f"{self.provenance.fragmentation:.1%}"),
            ("num_gpu_blocks", str(self.num_blocks)),
            ("block_size", f"{self.block_size} tokens, {self.block_bytes} bytes per block"),
            ("kv_cache_tokens", str(self.num_tokens)),
            ("max_concurrency",
             f"{self.max_concurrency:.2f}x for {self.max_model_len} tokens per request"),
        ]
        rows += [("profile_warning", warning) for warning in self.provenance.profile_warnings]
        if self.allocator_reserve_bytes:
            rows.append((
                "allocator_reserve",
                f"{format_gib(self.allocator_reserve_bytes)} of the cache budget left to the "
                f"allocator (fragmentation allowance, KV tensor rounding)",
            ))
        if self.agreement is not None and self.agreement.world_size > 1:
            rows.append((
                "agreed_num_gpu_blocks",
                f"{self.agreement.min}, the smallest of {self.agreement.world_size} ranks "
                f"{list(self.agreement.ranks)}",
            ))
        lines = ["Memory profiling results:"]
        lines += [f"{name:<{_NAME_WIDTH}}{value}" for name, value in rows]
        return "\n".join(lines)

    def __str__(self) -> str:
        return (
            f"KV cache on {self.provenance.backend}:{self.provenance.device}: "
            f"{self.num_blocks} blocks x {self.block_size} tokens = {self.num_tokens} tokens "
            f"({format_gib(self.kv_cache_used_bytes)}), {self.max_concurrency:.2f}x "
            f"concurrency at {self.max_model_len} tokens"
        )

    def with_num_blocks(self, num_blocks: int, agreement: Agreement | None = None) -> KVCachePlan:
        """A copy with ``num_blocks`` blocks and the numbers that follow from it recomputed.

        Raises:
            InvalidInputError: more blocks than the budget holds, or none.
            InsufficientMemoryError: one request of ``max_model_len`` no longer fits.
        """
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks <= 0:
            raise InvalidInputError(f"num_blocks must be a positive integer, got {num_blocks!r}")
        if num_blocks * self.block_bytes + self.allocator_reserve_bytes > self.kv_cache_bytes:
            raise InvalidInputError(
                f"{num_blocks} blocks of {self.block_bytes} bytes exceed this plan's KV-cache "
                f"budget of {self.kv_cache_bytes} bytes ({self.kv_cache_bytes // self.block_bytes}"
                f" blocks)"
            )
        used = num_blocks * self.block_bytes
        if self.request_bytes > used:
            raise InsufficientMemoryError(
                _max_len_message(self.spec, self.max_model_len, self.block_size,
                                 self.max_num_batched_tokens, self.request_bytes, num_blocks,
                                 self.block_bytes)
            )
        data = self.model_dump()
        data.update(
            num_blocks=num_blocks,
            num_tokens=num_blocks * self.block_size,
            kv_cache_used_bytes=used,
            max_concurrency=used / self.request_bytes,
            agreement=None if agreement is None else agreement.model_dump(),
        )
        return KVCachePlan.model_validate(data)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the plan as JSON; returns the path.

        Raises:
            ConfigError: the file cannot be written.
        """
        return _write_json(Path(path), self.model_dump_json(indent=2), "plan")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KVCachePlan:
        """Read a plan written by :meth:`save`.

        Raises:
            ConfigError: missing, over 16 MiB, not JSON, or numbers that do not add up.
        """
        plan: KVCachePlan = load_model_json(cls, read_text(path, "plan"), str(path))
        return plan


def save_profile(result: ProfileResult, path: str | os.PathLike[str]) -> Path:
    """Write a profile as JSON, for planning later (``memacct plan --profile``); returns the path.

    Raises:
        InvalidInputError: ``result`` is not a :class:`~memacct.ProfileResult`.
        ConfigError: the file cannot be written.
    """
    if not isinstance(result, ProfileResult):
        raise InvalidInputError(f"save_profile takes a ProfileResult, got {type(result).__name__}")
    return _write_json(Path(path), result.model_dump_json(indent=2), "profile")


def load_profile(path: str | os.PathLike[str]) -> ProfileResult:
    """Read a profile written by :func:`save_profile`.

    Raises:
        ConfigError: missing, over 16 MiB, not JSON, or numbers that do not add up.
    """
    result: ProfileResult = load_model_json(
        ProfileResult, read_text(path, "profile"), str(path)
    )
    return result


def _write_json(path: Path, text: str, what: str) -> Path:
    return atomic_write_text(path, text + "\n", what)


def plan_kv_cache(
    result: ProfileResult,
    spec: KVCacheSpec,
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
    max_model_len: int | None = None,
    *,
    max_num_batched_tokens: int | None = None,
    kv_cache_memory_bytes: int | None = None,
    num_gpu_blocks_override: int | None = None,
    allow_mismatch: bool = False,
) -> KVCachePlan:
    """Plan the KV cache of one rank from its profile (contract).

    The budget is ``int(total x gpu_memory_utilization) - non_kv_cache_memory``
    (vLLM's arithmetic), in whole blocks of ``block_size x bytes_per_token``.
    Either override replaces ``gpu_memory_utilization`` (with a WARNING on
    logger ``memacct``): ``kv_cache_memory_bytes`` sets the budget in bytes,
    ``num_gpu_blocks_override`` the block count. An override is refused when
    the instance would then need more than the device's free memory at the
    start of the profile, just as the utilization is. The report goes to
    logger ``memacct`` at INFO.

    Args:
        result: the profile of this rank.
        spec: the model's KV-cache geometry on this rank.
        gpu_memory_utilization: fraction of the device's total memory this
            instance may hold, in (0, 1].
        block_size: tokens per KV-cache block.
        max_model_len: longest request, tokens; defaults to the config's
            ``max_position_embeddings``.
        max_num_batched_tokens: the engine's prefill chunk; lets sliding-window
            layers hold only ``window + chunk`` tokens. ``None``: no chunked prefill.
        kv_cache_memory_bytes: KV-cache budget in bytes, overriding the utilization.
        num_gpu_blocks_override: block count, overriding the utilization.
        allow_mismatch: plan even when the profile recorded another model, layout
            or batch budget than ``spec`` (see :mod:`memacct.planner.guard`).

    Raises:
        InvalidInputError: an argument is out of range, or both overrides are given.
        InsufficientMemoryError: free memory at start is below the target
            (co-tenants named with their bytes where known); no memory is left
            for even one block; or one request of ``max_model_len`` does not
            fit (the message gives the largest length that does).
    """
    if not isinstance(result, ProfileResult):
        raise InvalidInputError(f"plan_kv_cache takes a ProfileResult, got {type(result).__name__}")
    if not isinstance(spec, KVCacheSpec):
        raise InvalidInputError(f"plan_kv_cache takes a KVCacheSpec, got {type(spec).__name__}")
    check_profile_matches(
        result, spec, max_num_batched_tokens=max_num_batched_tokens, allow_mismatch=allow_mismatch
    )
    utilization = _check_utilization(gpu_memory_utilization)
    block_size = _check_positive("block_size", block_size)
    max_len = _resolve_max_model_len(max_model_len, spec)
    chunk = _check_optional("max_num_batched_tokens", max_num_batched_tokens)
    kv_override = _check_optional("kv_cache_memory_bytes", kv_cache_memory_bytes)
    blocks_override = _check_optional("num_gpu_blocks_override", num_gpu_blocks_override)
    if kv_override is not None and blocks_override is not None:
        raise InvalidInputError(
            f"give kv_cache_memory_bytes ({kv_override}) or num_gpu_blocks_override "
            f"({blocks_override}), not both: each replaces gpu_memory_utilization"
        )

    total = result.after.total
    non_kv = result.non_kv_cache_memory
    block_bytes = spec.bytes_per_block(block_size)
    overrides: tuple[str, ...] = ()
    reserve = 0
    if kv_override is None and blocks_override is None:
        target = int(total * utilization)
        if result.baseline.free < target:
            raise InsufficientMemoryError(_free_at_start_message(result, utilization, target))
        kv_bytes = target - non_kv
        if kv_bytes < block_bytes:
            raise InsufficientMemoryError(
                _no_memory_message(result, utilization, target, block_size, block_bytes)
            )
        num_blocks, reserve = _fit_blocks(kv_bytes, spec, block_size, result)
        if num_blocks == 0:
            raise InsufficientMemoryError(
                _no_memory_message(result, utilization, target, block_size, block_bytes)
            )
    else:
        if kv_override is not None:
            overrides = (f"kv_cache_memory_bytes={kv_override}",)
            kv_bytes = kv_override
            num_blocks = kv_bytes // block_bytes
            if num_blocks == 0:
                raise InsufficientMemoryError(
                    f"kv_cache_memory_bytes={kv_override} is less than one block of "
                    f"{block_size} tokens ({block_bytes} bytes at {spec.bytes_per_token} bytes "
                    f"per token): give at least {block_bytes} bytes"
                )
        else:
            assert blocks_override is not None
            overrides = (f"num_gpu_blocks_override={blocks_override}",)
            num_blocks = blocks_override
            kv_bytes = num_blocks * block_bytes
        target = non_kv + kv_bytes
        _check_override_fits(result, overrides[0], kv_bytes, target)
        logger.warning(
            "%s overrides gpu_memory_utilization=%s: the KV cache gets %s (%d blocks)",
            overrides[0], utilization, format_gib(kv_bytes), num_blocks,
        )

    used = num_blocks * block_bytes
    request = spec.request_bytes(max_len, block_size, chunk)
    if request > used:
        raise InsufficientMemoryError(
            _max_len_message(spec, max_len, block_size, chunk, request, num_blocks, block_bytes)
        )
    baseline = result.baseline
    plan = KVCachePlan(
        total_memory=total,
        gpu_memory_utilization=utilization,
        target_allocation=target,
        non_kv_cache_memory=non_kv,
        weights_memory=result.weights_memory,
        activation_peak=result.activation_peak,
        non_allocator_increase=result.non_allocator_increase,
        cudagraph_memory=result.cudagraph_memory,
        retained_memory=result.retained_memory,
        kv_cache_bytes=kv_bytes,
        block_size=block_size,
        block_bytes=block_bytes,
        num_blocks=num_blocks,
        num_tokens=num_blocks * block_size,
        kv_cache_used_bytes=used,
        max_model_len=max_len,
        max_num_batched_tokens=chunk,
        request_bytes=request,
        max_concurrency=used / request,
        profile_duration_s=result.duration_s,
        spec=spec,
        allocator_reserve_bytes=reserve,
        provenance=Provenance(
            backend=result.backend,
            device=result.device,
            truth_source=result.truth_source,
            requested_truth_source=result.requested_truth_source,
            truth_source_reason=result.truth_source_reason,
            fragmentation=result.fragmentation,
            allocator_settings=dict(result.allocator_settings),
            free_at_start=baseline.free,
            other_processes_at_baseline=baseline.other_processes,
            memacct_version=__version__,
            created_at=time.time(),
            overrides=overrides,
            profile_warnings=result.warnings,
        ),
    )
    for warning in result.warnings:
        logger.warning("memacct: the profile behind this plan is doubtful: %s", warning)
    logger.info("%s", plan.report())
    return plan


# Allocators pad a request (torch_npu and MindSpore by 32 bytes) and round it to 512 bytes
# before rounding it to their growth granularity; one minimum block covers both.
_REQUEST_PADDING = 512


def kv_cache_reservation(
    spec: KVCacheSpec, num_blocks: int, block_size: int, granularity: int, rounding: str
) -> int:
    """Bytes an allocator reserves for a KV cache allocated one tensor per layer.

    Each layer's tensor holds ``num_blocks x block_size`` tokens. ``rounding``
    says how the allocator rounds a large tensor to ``granularity`` (see
    :class:`memacct.BackendQuirks`): ``multiple`` rounds each tensor up to a
    multiple; ``packed`` packs the tensors one after another and rounds their
    sum; ``doubling`` gives each a block of the granularity doubled until it
    fits, and equal tensors that fit together share a block. ``granularity``
    0 means unknown: no rounding.
    """
    tokens = num_blocks * block_size
    if granularity <= 0 or tokens == 0:
        return tokens * spec.bytes_per_token
    sizes = [
        (group.num_layers, tokens * group.bytes_per_token_per_layer + _REQUEST_PADDING)
        for group in spec.layer_groups
    ]
    if rounding == "packed":
        return -(-sum(count * size for count, size in sizes) // granularity) * granularity
    if rounding == "doubling":
        total = 0
        for count, size in sizes:
            block = granularity
            while block < size:
                block *= 2
            total += -(-count // (block // size)) * block
        return total
    return sum(count * (-(-size // granularity) * granularity) for count, size in sizes)


def _fit_blocks(
    kv_bytes: int, spec: KVCacheSpec, block_size: int, result: ProfileResult
) -> tuple[int, int]:
    """The most blocks whose per-layer tensors, as the allocator rounds them, fit the budget.

    The profile's fragmentation allowance is kept free first. Returns the
    block count and the bytes of the budget left to the allocator.
    """
    block_bytes = spec.bytes_per_block(block_size)
    budget = kv_bytes - result.fragmentation_allowance
    granularity = result.growth_granularity_bytes
    rounding = result.growth_rounding
    low, high = 0, max(0, budget) // block_bytes
    # The reservation only grows with the block count, so bisect.
    while low < high:
        mid = (low + high + 1) // 2
        if kv_cache_reservation(spec, mid, block_size, granularity, rounding) <= budget:
            low = mid
        else:
            high = mid - 1
    if low == 0:
        return 0, 0
    rounding_bytes = kv_cache_reservation(spec, low, block_size, granularity, rounding)
    return low, result.fragmentation_allowance + rounding_bytes - low * block_bytes


def _check_utilization(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(
            f"gpu_memory_utilization must be a number in (0, 1], got {value!r}"
        )
    utilization = float(value)
    if not (math.isfinite(utilization) and 0.0 < utilization <= 1.0):
        raise InvalidInputError(
            f"gpu_memory_utilization must be in (0, 1], got {value!r}: it is the fraction of "
            f"the device's total memory this instance may hold (vLLM's default is 0.9)"
        )
    return utilization


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_optional(name: str, value: object) -> int | None:
    return None if value is None else _check_positive(name, value)


def _resolve_max_model_len(value: object, spec: KVCacheSpec) -> int:
    if value is not None:
        return _check_positive("max_model_len", value)
    if spec.max_position_embeddings is None:
        raise InvalidInputError(
            f"the config of {spec.model_name} gives no max_position_embeddings: "
            f"pass max_model_len"
        )
    return spec.max_position_embeddings


def _device(result: ProfileResult) -> str:
    return f"{result.backend}:{result.device}"


def _co_tenants(result: ProfileResult) -> str:
    baseline = result.baseline
    if baseline.other_processes is not None:
        held = baseline.other_processes
        own = baseline.reserved + baseline.non_allocator
        return (
            f"other processes hold {format_gib(held)} ({held} bytes) and this process "
            f"held {format_gib(own)} ({own} bytes) at start"
        )
    return (
        f"{format_gib(baseline.used)} ({baseline.used} bytes) was in use at start; the "
        f"{result.backend} backend cannot attribute it to processes, so other processes' "
        f"share could not be determined"
    )


def _free_at_start_message(result: ProfileResult, utilization: float, target: int) -> str:
    free = result.baseline.free
    total = result.after.total
    most = math.floor(free / total * 1000) / 1000
    fix = "free memory on the device (stop or shrink the other processes)"
    if most > 0:
        fix = f"decrease gpu_memory_utilization to at most {most}, or {fix}"
    return (
        f"Free memory on device {_device(result)} at start ({format_gib(free)}, {free} bytes) "
        f"is less than desired memory utilization {utilization} ({format_gib(target)}, "
        f"{target} bytes of {format_gib(total)}); {_co_tenants(result)}: {fix}"
    )


def _no_memory_message(
    result: ProfileResult, utilization: float, target: int, block_size: int, block_bytes: int
) -> str:
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    need = non_kv + block_bytes
    suggestion = math.ceil(need / total * 1000) / 1000
    if int(total * suggestion) < need:
        suggestion = round(suggestion + 0.001, 3)
    fix = (
        f"Increase gpu_memory_utilization to at least {suggestion}, or"
        if suggestion <= 1.0
        else "The model does not fit this device at any utilization:"
    )
    return (
        f"No available memory for the cache blocks on {_device(result)}: the target allocation "
        f"is {format_gib(target)} ({target} bytes = {utilization} x {total}) and the model "
        f"needs {format_gib(non_kv)} ({non_kv} bytes) besides the cache (weights "
        f"{result.weights_memory} + activation peak {result.activation_peak} + non-allocator "
        f"increase {result.non_allocator_increase}), leaving {target - non_kv} bytes, less than "
        f"one block of {block_size} tokens ({block_bytes} bytes). {fix} reduce the model's "
        f"memory (quantize it, shard it with tensor or pipeline parallelism, or lower "
        f"max_num_batched_tokens)"
    )


def _check_override_fits(result: ProfileResult, override: str, kv_bytes: int, target: int) -> None:
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    if target > total:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache, but "
            f"{_device(result)} has {total} bytes in all and the model needs {non_kv} besides "
            f"the cache, so at most {total - non_kv} bytes can ever hold it: lower the override"
        )
    free = result.baseline.free
    if target > free:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache; with "
            f"{non_kv} bytes of non-KV memory this instance needs {target} bytes, more than "
            f"the {free} bytes ({format_gib(free)}) free on {_device(result)} at start; "
            f"{_co_tenants(result)}. Lower the override to at most {free - non_kv} bytes, or "
            f"free memory on the device"
        )


def _largest_fitting_len(
    spec: KVCacheSpec, limit: int, block_size: int, chunk: int | None, available: int
) -> int:
    """The largest length below ``limit`` whose request fits ``available`` bytes (0: none)."""
    low, high = 0, limit - 1
    while low < high:
        mid = (low + high + 1) // 2
        if spec.request_bytes(mid, block_size, chunk) <= available:
            low = mid
        else:
            high = mid - 1
    return low


def _max_len_message(
    spec: KVCacheSpec,
    max_len: int,
    block_size: int,
    chunk: int | None,
    request: int,
    num_blocks: int,
    block_bytes: int,
) -> str:
    available = num_blocks * block_bytes
    largest = _largest_fitting_len(spec, max_len, block_size, chunk, available)
    windows = ""
    if spec.has_sliding_window:
        windows = (
            f" (sliding-window layers counted with max_num_batched_tokens={chunk})"
            if chunk is not None
            else " (no max_num_batched_tokens given, so sliding-window layers hold every token)"
        )
    return (
        f"One request of max_model_len={max_len} tokens needs {format_gib(request)} "
        f"({request} bytes) of KV cache{windows}, more than the {format_gib(available)} "
        f"({available} bytes, {num_blocks} blocks of {block_size} tokens) this plan has. "
        f"The largest max_model_len that fits is {largest}: set max_model_len to at most "
        f"{largest}, or increase gpu_memory_utilization, or spread the model over more devices"
    )

