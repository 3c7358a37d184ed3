"""exclude() never shrinks the KV cache, on every allocator preset and truth source.

Done-when of issue 12: a spike wrapped in ``exclude()`` never gives fewer blocks than
the same spike not wrapped; where the allocator can give the spike's memory back, it
gives as many blocks as no spike at all. The profiled forward is a real model's
(qwen2.5-7b) on the simulated device.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from _harness import workload

import memacct
from memacct.planner import load_model_preset
from memacct.sim import SimDevice
from memacct.sim.backend import SimBackend
from memacct.trace import replay
from memacct.units import MiB

PRESETS = {
    "torch-cuda": "h100-80gb",
    "torch-cuda-expandable": "h100-80gb",
    "npu": "ascend-910b-64gb",
    "mindspore": "ascend-910b-32gb",
}
SOURCES = ("allocated_peak", "reserved", "auto")


@cache
def _model() -> tuple[memacct.KVCacheSpec, Any]:
    config = load_model_preset("qwen2.5-7b")
    spec = memacct.KVCacheSpec.from_hf_config(config)
    return spec, workload(spec, config, max_num_batched_tokens=8192, max_num_seqs=256)


def _spike(dev: SimDevice, kept_bytes: int) -> None:
    """A compile spike: small tensors in shared segments and large ones, all freed
    except ``kept_bytes`` (a compiled kernel's buffer that stays)."""
    ptrs = [dev.malloc(8 * MiB) for _ in range(100)] + [dev.malloc(700 * MiB)]
    if kept_bytes:
        dev.malloc(kept_bytes)
    for ptr in ptrs:
        dev.free(ptr)


def _loaded(
    allocator: str, backend_cls: type[SimBackend]
) -> tuple[memacct.KVCacheSpec, Any, SimDevice, SimBackend, memacct.MemorySnapshot]:
    """The model's weights loaded on a fresh device after the baseline, with a 512 MiB
    driver context: ``(spec, workload, device, backend, baseline)``."""
    spec, work = _model()
    dev = SimDevice(PRESETS[allocator], allocator)
    backend = backend_cls(dev)
    baseline = memacct.snapshot(backend)
    dev.external_malloc(512 * MiB)
    for n in work.weight_tensors():
        dev.malloc(n, persistent=True)
    return spec, work, dev, backend, baseline


EVERY_ALLOCATOR_AND_SOURCE = pytest.mark.parametrize(
    ("allocator", "source"), [(a, s) for a in sorted(PRESETS) for s in SOURCES]
)
"""The matrix the exclusion rules must hold on: every allocator preset x truth source."""


def blocks(
    allocator: str,
    source: str,
    spike: str,
    *,
    kept_bytes: int = 0,
    accounting: str | None = None,
    backend_cls: type[SimBackend] = SimBackend,
) -> tuple[int, memacct.ProfileResult]:
    spec, work, dev, backend, baseline = _loaded(allocator, backend_cls)
    with memacct.memory_profiling(
        backend, baseline, truth_source=source, accounting=accounting
    ) as session:
        replay(dev, work.step_trace(8192, 256))
        if spike == "excluded":
            with session.exclude("compile"):
                _spike(dev, kept_bytes)
        elif spike == "not wrapped":
            _spike(dev, kept_bytes)
        elif spike == "graphs":
            with session.graphs("cudagraphs"):
                _capture(dev)
    plan = memacct.plan_kv_cache(session.result, spec, gpu_memory_utilization=0.9)
    return plan.num_blocks, session.result


@EVERY_ALLOCATOR_AND_SOURCE
def test_an_excluded_spike_the_allocator_gives_back_costs_no_block(
    allocator: str, source: str
) -> None:
    excluded, result = blocks(allocator, source, "excluded")
    not_wrapped, _ = blocks(allocator, source, "not wrapped")
    none, _ = blocks(allocator, source, "none")
    assert excluded == none
    assert excluded >= not_wrapped
    assert result.excluded_regions[0].retained_bytes == 0


@EVERY_ALLOCATOR_AND_SOURCE
def test_an_excluded_spike_that_keeps_a_buffer_never_costs_more_than_not_excluding(
    allocator: str, source: str
) -> None:
    kept = 3 * MiB  # keeps a 20 MiB segment (2 MiB small-pool page) partly used
    excluded, result = blocks(allocator, source, "excluded", kept_bytes=kept)
    not_wrapped, _ = blocks(allocator, source, "not wrapped", kept_bytes=kept)
    assert excluded >= not_wrapped
    assert result.excluded_regions[0].allocated_kept >= kept


@pytest.mark.parametrize("accounting", ["components", "free_memory"])
def test_exclude_holds_under_both_accounting_formulas(accounting: str) -> None:
    excluded, _ = blocks("torch-cuda", "allocated_peak", "excluded", accounting=accounting)
    not_wrapped, _ = blocks("torch-cuda", "allocated_peak", "not wrapped", accounting=accounting)
    none, _ = blocks("torch-cuda", "allocated_peak", "none", accounting=accounting)
    assert excluded == none > not_wrapped


class _NeverReleases(SimBackend):
    """A pool that never gives memory back: its empty_cache() does nothing."""

    def empty_cache(self) -> None:
        return None


@pytest.mark.parametrize("source", SOURCES)
def test_memory_a_pool_never_gives_back_is_charged_and_named(source: str) -> None:
    excluded, result = blocks(
        "torch-cuda", source, "excluded", backend_cls=_NeverReleases
    )
    not_wrapped, _ = blocks("torch-cuda", source, "not wrapped", backend_cls=_NeverReleases)
    none, _ = blocks("torch-cuda", source, "none", backend_cls=_NeverReleases)
    region = result.excluded_regions[0]
    assert region.retained_bytes > 0  # named in the result
    assert not_wrapped <= excluded <= none


# --- graphs(): the graph pool is its own term --------------------------------------------------


def _capture(dev: SimDevice) -> None:
    """A graph capture: a transient spike, then the pool the graphs keep and their
    executable objects outside the allocator."""
    dev.free(dev.malloc(2048 * MiB))
    for _ in range(4):
        dev.malloc(64 * MiB)
    dev.external_malloc(40 * MiB)


@EVERY_ALLOCATOR_AND_SOURCE
def test_graph_pool_is_charged_as_cudagraph_memory_not_activations(
    allocator: str, source: str
) -> None:
    _, result = blocks(allocator, source, "graphs")
    pool = result.excluded_regions[0].held_bytes
    assert result.excluded_regions[0].kind == "graphs"
    assert result.cudagraph_memory == pool >= 4 * 64 * MiB + 40 * MiB
    assert result.non_kv_cache_memory == (
        result.weights_memory
        + result.activation_peak
        + result.non_allocator_increase
        + result.cudagraph_memory
        + result.retained_memory
    )
    # Charged once: the same profile without the capture has the same activation peak.
    without = blocks(allocator, source, "none")[1]
    assert result.activation_peak == without.activation_peak
    assert result.non_allocator_increase == without.non_allocator_increase


def test_the_plan_carries_the_graph_pool_in_its_non_kv_memory() -> None:
    num_blocks, result = blocks("torch-cuda", "allocated_peak", "graphs")
    spec, _ = _model()
    plan = memacct.plan_kv_cache(result, spec, gpu_memory_utilization=0.9)
    assert plan.cudagraph_memory == result.cudagraph_memory > 0
    assert plan.non_kv_cache_memory == result.non_kv_cache_memory
    assert num_blocks < blocks("torch-cuda", "allocated_peak", "none")[0]
