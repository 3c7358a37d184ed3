"""The KV cache inside the allocator: what the allocator holds besides it, the room its limit
leaves, and the blocks whose tensors fit as the allocator rounds them.

A profile records how its allocator grows (``growth_granularity_bytes``,
``growth_rounding``) and the fragmentation allowance to keep free; a plan on it hands the
engine only what fits once each KV tensor is rounded (:func:`allocator_budget`,
:func:`kv_cache_reservation`), and never more than the allocator's limit leaves
(:func:`allocator_room`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from memacct.engines.base import KVBlock
from memacct.model.spec import KVCacheSpec
from memacct.models import ProfileResult

__all__ = ["allocator_budget", "allocator_held", "allocator_room", "kv_cache_reservation"]


def allocator_held(result: ProfileResult) -> int:
    """Bytes the allocator holds while serving, before its KV cache, as the profile charges them.

    What it held after the profile (weights, graph pools, retained memory; at
    least the baseline's reservation plus the charged terms), the activation
    peak on top, and the fragmentation allowance. The allowance's idle space
    inside the weights' segments (``weights_idle_memory``) is part of what the
    allocator held after the profile, so it counts once, there. Memory outside
    the allocator (``non_allocator_increase``) is not the allocator's.
    """
    idle = result.weights_idle_memory
    charged = (
        result.baseline.reserved + result.weights_memory + result.cudagraph_memory
        + result.retained_memory + idle
    )
    return (
        max(result.after.reserved, charged) + result.activation_peak
        + result.fragmentation_allowance - idle
    )


def allocator_room(result: ProfileResult) -> int | None:
    """The largest KV budget the profile's allocator limit allows, ``None`` without a limit.

    The budget still has the fragmentation allowance kept free inside it (by
    :func:`allocator_budget`), so the room is the limit less what the
    allocator holds besides the KV cache and that allowance.
    """
    if result.allocator_limit is None:
        return None
    return result.allocator_limit - allocator_held(result) + result.fragmentation_allowance


def allocator_budget(
    kv_bytes: int, spec: KVCacheSpec, block: KVBlock, result: ProfileResult
) -> tuple[int, int]:
    """The budget handed to the engine, and the bytes kept back for the allocator.

    The profile's fragmentation allowance is kept free. Where the engine's
    tensors on this rank are known (``block.tensor_pages``, or one block per
    layer: one group, one stage), the allocator's rounding of each tensor is
    kept free too.
    """
    if not (result.fragmentation_allowance or result.growth_granularity_bytes):
        return kv_bytes, 0
    pages = block.tensor_pages
    single = bool(pages) or (
        spec.pipeline_parallel_size <= 1
        and block.block_bytes == spec.bytes_per_block(block.block_size)
    )
    if single:
        blocks, _ = _fit_blocks(kv_bytes, spec, block.block_size, result, pages)
        budget = blocks * block.block_bytes
    else:
        budget = max(0, kv_bytes - result.fragmentation_allowance)
    return budget, kv_bytes - budget


# Allocators pad a request (torch_npu and MindSpore by 32 bytes) and round it to 512 bytes
# before rounding it to their growth granularity; one minimum block covers both.
_REQUEST_PADDING = 512


def kv_cache_reservation(
    spec: KVCacheSpec,
    num_blocks: int,
    block_size: int,
    granularity: int,
    rounding: str,
    tensor_pages: Sequence[int] = (),
) -> int:
    """Bytes an allocator reserves for a KV cache allocated one tensor per layer.

    Each layer's tensor holds ``num_blocks x block_size`` tokens. ``rounding``
    says how the allocator rounds a large tensor to ``granularity`` (see
    :class:`memacct.BackendQuirks`): ``multiple`` rounds each tensor up to a
    multiple; ``packed`` packs the tensors one after another and rounds their
    sum; ``doubling`` gives each a block of the granularity doubled until it
    fits, and equal tensors that fit together share a block. ``granularity``
    0 means unknown: no rounding. ``tensor_pages`` (the engine's tensors'
    bytes per block, :attr:`memacct.engines.base.KVLayout.tensor_pages`)
    replaces the one-tensor-per-layer layout where the engine's is known.
    """
    tokens = num_blocks * block_size
    if tensor_pages:
        counts = Counter(tensor_pages)
        if granularity <= 0 or num_blocks == 0:
            return num_blocks * sum(tensor_pages)
        sizes = [(count, num_blocks * page + _REQUEST_PADDING) for page, count in counts.items()]
    elif granularity <= 0 or tokens == 0:
        return tokens * spec.bytes_per_token
    else:
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
    kv_bytes: int,
    spec: KVCacheSpec,
    block_size: int,
    result: ProfileResult,
    tensor_pages: Sequence[int] = (),
) -> tuple[int, int]:
    """The most blocks whose per-layer tensors, as the allocator rounds them, fit the budget.

    The profile's fragmentation allowance is kept free first. Returns the
    block count and the bytes of the budget left to the allocator.
    """
    block_bytes = sum(tensor_pages) if tensor_pages else spec.bytes_per_block(block_size)
    budget = kv_bytes - result.fragmentation_allowance
    granularity = result.growth_granularity_bytes
    rounding = result.growth_rounding
    low, high = 0, max(0, budget) // block_bytes
    # The reservation only grows with the block count, so bisect.
    while low < high:
        mid = (low + high + 1) // 2
        reserved = kv_cache_reservation(spec, mid, block_size, granularity, rounding, tensor_pages)
        if reserved <= budget:
            low = mid
        else:
            high = mid - 1
    if low == 0:
        return 0, 0
    rounding_bytes = kv_cache_reservation(
        spec, low, block_size, granularity, rounding, tensor_pages)
    return low, result.fragmentation_allowance + rounding_bytes - low * block_bytes
