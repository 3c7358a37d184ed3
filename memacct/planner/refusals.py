"""The planner's refusals of a plan on a profile: each names the numbers and the fix.

The device's free memory at start below the target (:func:`free_at_start_message`, with
the co-tenants' share where the backend can attribute it, :func:`co_tenants`), no room
for one block (:func:`no_memory_message`), an override the device cannot hold
(:func:`check_override_fits`), and the allocator's own limit binding first
(:func:`limit_binds` and the messages built on it).
"""

from __future__ import annotations

import math

from memacct.errors import InsufficientMemoryError
from memacct.models import ProfileResult
from memacct.planner.allocator_fit import allocator_held
from memacct.units import format_gib

__all__ = [
    "LIMIT_FIX",
    "allocator_holds",
    "allocator_limit_note",
    "check_override_fits",
    "co_tenants",
    "device_of",
    "free_at_start_message",
    "limit_binds",
    "limit_too_small_message",
    "no_memory_message",
    "override_over_limit_message",
]


def device_of(result: ProfileResult) -> str:
    return f"{result.backend}:{result.device}"


def co_tenants(result: ProfileResult) -> str:
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


def free_at_start_message(result: ProfileResult, utilization: float, target: int) -> str:
    free = result.baseline.free
    total = result.after.total
    most = math.floor(free / total * 1000) / 1000
    fix = "free memory on the device (stop or shrink the other processes)"
    if most > 0:
        fix = f"decrease gpu_memory_utilization to at most {most}, or {fix}"
    return (
        f"Free memory on device {device_of(result)} at start ({format_gib(free)}, {free} bytes) "
        f"is less than desired memory utilization {utilization} ({format_gib(target)}, "
        f"{target} bytes of {format_gib(total)}); {co_tenants(result)}: {fix}"
    )


def no_memory_message(
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
        f"No available memory for the cache blocks on {device_of(result)}: the target allocation "
        f"is {format_gib(target)} ({target} bytes = {utilization} x {total}) and the model "
        f"needs {format_gib(non_kv)} ({non_kv} bytes) besides the cache (weights "
        f"{result.weights_memory} + activation peak {result.activation_peak} + non-allocator "
        f"increase {result.non_allocator_increase}), leaving {target - non_kv} bytes, less than "
        f"one block of {block_size} tokens ({block_bytes} bytes). {fix} reduce the model's "
        f"memory (quantize it, shard it with tensor or pipeline parallelism, or lower "
        f"max_num_batched_tokens)"
    )


def check_override_fits(result: ProfileResult, override: str, kv_bytes: int, target: int) -> None:
    total = result.after.total
    non_kv = result.non_kv_cache_memory
    if target > total:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache, but "
            f"{device_of(result)} has {total} bytes in all and the model needs {non_kv} besides "
            f"the cache, so at most {total - non_kv} bytes can ever hold it: lower the override"
        )
    free = result.baseline.free
    if target > free:
        raise InsufficientMemoryError(
            f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache; with "
            f"{non_kv} bytes of non-KV memory this instance needs {target} bytes, more than "
            f"the {free} bytes ({format_gib(free)}) free on {device_of(result)} at start; "
            f"{co_tenants(result)}. Lower the override to at most {free - non_kv} bytes, or "
            f"free memory on the device"
        )


LIMIT_FIX = (
    "Raise the allocator's limit (MindSpore: max_device_memory / mindspore.runtime.set_memory"
    "(max_size=...); torch: torch.cuda.set_per_process_memory_fraction, torch_npu: "
    "torch.npu.set_per_process_memory_fraction), or reduce the model's memory (quantize it, "
    "shard it, lower max_num_batched_tokens)"
)


def limit_binds(result: ProfileResult) -> str:
    limit = result.allocator_limit or 0
    return (
        f"the allocator's pool budget of {format_gib(limit)} ({limit} bytes, the most "
        f"the allocator on {device_of(result)} may reserve) binds before "
        f"gpu_memory_utilization"
    )


def allocator_holds(result: ProfileResult) -> str:
    """What the allocator holds besides the KV cache, with its parts, for a message."""
    held = allocator_held(result)
    return (
        f"the allocator holds {format_gib(held)} besides the KV cache ({held} bytes: weights "
        f"{result.weights_memory} + activation peak {result.activation_peak} + fragmentation "
        f"allowance {result.fragmentation_allowance}, graph and retained memory)"
    )


def allocator_limit_note(
    result: ProfileResult, utilization: float, kv_bytes: int, room: int
) -> str:
    return (
        f"{limit_binds(result)}: {allocator_holds(result)}, so the KV cache gets "
        f"{format_gib(room)} ({room} bytes) instead of the {format_gib(kv_bytes)} that "
        f"gpu_memory_utilization={utilization} leaves"
    )


def limit_too_small_message(
    result: ProfileResult, room: int, block_size: int, block_bytes: int
) -> str:
    return (
        f"No room for the KV cache within the allocator's limit on {device_of(result)}: "
        f"{limit_binds(result)}; {allocator_holds(result)}, leaving "
        f"{max(0, room - result.fragmentation_allowance)} bytes, less than one block of "
        f"{block_size} tokens ({block_bytes} bytes) as the allocator rounds it. {LIMIT_FIX}; "
        f"a lower gpu_memory_utilization does not help here"
    )


def override_over_limit_message(
    result: ProfileResult, override: str, kv_bytes: int, room: int
) -> str:
    return (
        f"{override} asks for {format_gib(kv_bytes)} ({kv_bytes} bytes) of KV cache, but "
        f"{limit_binds(result)} and leaves at most {max(0, room)} bytes for it beside what the "
        f"allocator already holds ({allocator_held(result)} bytes). Lower the override to at most "
        f"{max(0, room)} bytes, or raise the allocator's limit"
    )
