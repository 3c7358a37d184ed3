"""A model's start profiled on a fresh simulated H100, for the tests that plan from one."""

from __future__ import annotations

from typing import Any

import memacct
from memacct import ProfileResult
from memacct.sim import SimDevice


def simulated_start(
    weights: int, activation: int, *, other_processes: int = 0, **profiling: Any
) -> tuple[SimDevice, ProfileResult]:
    """Profile a start on a fresh simulated ``h100-80gb``: the baseline, ``weights`` bytes
    loaded, then inside the session an activation spike of ``activation`` bytes, freed.

    ``other_processes`` bytes are held by a co-tenant from the start; ``profiling`` goes to
    :func:`memacct.memory_profiling` (``weights_memory``, ``truth_source``, ``profiled``).
    Returns the device and the profile.
    """
    dev = SimDevice("h100-80gb")
    if other_processes:
        dev.other_process_malloc(other_processes)
    backend = memacct.get_backend("sim", device=dev)
    baseline = memacct.snapshot(backend)
    dev.malloc(weights)
    with memacct.memory_profiling(backend, baseline, **profiling) as session:
        dev.free(dev.malloc(activation))
    return dev, session.result
