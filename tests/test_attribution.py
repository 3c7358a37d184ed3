"""Per-process attribution: a co-tenant's memory is not charged to this instance.

Two vLLM instances on one GPU, or a neighbour waking from sleep while this
one profiles (vLLM #17979, #55827, #55169): the device-wide delta of used
memory, minus what this process's allocator took, charges the neighbour's
allocation to this instance as non-allocator memory. A backend that reads
this process's own device memory (``process_memory``) keeps it out.
"""

from __future__ import annotations

from collections.abc import Callable

import memacct
from memacct import DeviceBackend, ProfileResult, TorchLikeBackend
from memacct.sim import SimDevice
from memacct.sim.backend import SimBackend
from memacct.units import GiB, MiB

WEIGHTS = 8 * GiB
ACTIVATIONS = 2 * GiB
OWN_RUNTIME = 512 * MiB  # this process's memory outside the allocator (NCCL, workspaces)
NEIGHBOUR = 6 * GiB  # another process allocates while this one profiles


def profile_with_a_busy_neighbour(
    make_backend: Callable[[SimDevice], DeviceBackend],
) -> ProfileResult:
    dev = SimDevice("h100-80gb", "torch-cuda")
    backend = make_backend(dev)
    baseline = memacct.snapshot(backend)
    dev.malloc(WEIGHTS)
    with memacct.memory_profiling(
        backend, baseline, weights_memory=WEIGHTS, truth_source="allocated_peak"
    ) as session:
        dev.free(dev.malloc(ACTIVATIONS))
        dev.external_malloc(OWN_RUNTIME)
        dev.other_process_malloc(NEIGHBOUR)
    return session.result


def attributed(dev: SimDevice) -> DeviceBackend:
    return SimBackend(dev)


def device_wide(dev: SimDevice) -> DeviceBackend:
    # The same device read without process_memory: what vLLM computes today.
    return TorchLikeBackend(dev.api, name="sim")


def test_per_process_attribution_keeps_the_neighbour_out_of_non_allocator_increase() -> None:
    result = profile_with_a_busy_neighbour(attributed)
    assert result.non_allocator_increase == OWN_RUNTIME
    assert result.non_kv_cache_memory == WEIGHTS + ACTIVATIONS + OWN_RUNTIME


def test_attributed_snapshot_reports_the_neighbour_as_other_processes() -> None:
    result = profile_with_a_busy_neighbour(attributed)
    assert result.baseline.other_processes == 0
    assert result.after.other_processes == NEIGHBOUR


def test_device_wide_delta_charges_the_neighbour_to_this_instance() -> None:
    result = profile_with_a_busy_neighbour(device_wide)
    assert result.after.other_processes is None
    assert result.non_allocator_increase == OWN_RUNTIME + NEIGHBOUR
    assert result.non_kv_cache_memory == WEIGHTS + ACTIVATIONS + OWN_RUNTIME + NEIGHBOUR


def test_device_wide_delta_is_used_delta_minus_allocator_delta() -> None:
    # vLLM's non-torch increase: (used after - used at baseline) - (reserved after - at baseline).
    result = profile_with_a_busy_neighbour(device_wide)
    used_delta = result.after.used - result.baseline.used
    reserved_delta = result.after.reserved - result.baseline.reserved
    assert used_delta - reserved_delta == result.non_allocator_increase == OWN_RUNTIME + NEIGHBOUR
