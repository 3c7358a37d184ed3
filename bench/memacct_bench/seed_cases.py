"""The seed's published cases, replayed on the simulated device: vllm-mindspore's two plans.

vllm-mindspore's PR !428/!437 published, for Qwen2.5-7B-Instruct on a 64 GB Ascend 910B
(``--max-num-batched-tokens 32768 --max-num-seqs 1``, ``gpu_memory_utilization`` 0.9),
the KV cache its worker planned with the allocated peak (37.85 GiB, 44292 blocks) and
with reserved memory (36.40 GiB, 42593 blocks), and an out-of-memory error on a 32 GB
910B4 with the first. For DeepSeek-V3 at TP16 it published 9.13 GiB (8719 blocks) and
8.54 GiB (8150); ``CASES["deepseek-v3-tp16"]`` replays one rank of the W8A8 TP16 graph of
:mod:`memacct.engines.vllm_mindspore.deepseek_graph`. :func:`run_seed_case` replays the
worker's start on a :class:`~memacct.sim.SimDevice` with the ``mindspore`` (VMM) pool, the
MindFormers graph of :mod:`memacct.engines.vllm_mindspore.qwen2_graph` (the graphs the
offline plan charges; their decode masks from :mod:`memacct_bench.traces`), and the worker's
own arithmetic (sources in
``docs/simulator.md``, "The seed's cases"):

* ``weights_memory``: the allocated bytes gained while the model loads;
* the profile: ``empty_cache``, reset of the peaks, one prefill of
  ``max_num_batched_tokens`` tokens; the *allocated-peak* plan charges the increase of
  ``allocated_bytes.all.peak``, the *reserved* plan the increase of the reserved memory
  read before ``empty_cache``;
* both add the growth of memory outside the pool since the start;
* ``kv = total x utilization - (weights + activation + non-pool)``,
  ``blocks = kv // (block_size x bytes per token)``.

:func:`serve_after_start` then allocates the planned KV cache (K and V per layer, as
vllm-mindspore's cache engine does) and serves one long prompt: the OOM check.

Run ``python -m memacct_bench.seed_cases`` (or ``make seed-cases``) for the table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memacct.engines.vllm_mindspore.deepseek_graph import (
    DeepseekV3Graph,
    deepseek_v3_load,
    deepseek_v3_prefill_trace,
)
from memacct.engines.vllm_mindspore.qwen2_graph import Qwen2Graph, qwen2_load, qwen2_prefill_trace
from memacct.model.spec import KVCacheSpec
from memacct.planner import load_model_preset
from memacct.sim import SimDevice, SimOutOfMemory
from memacct.trace import replay
from memacct.units import GiB
from memacct_bench.traces import deepseek_v3_mask_trace, qwen2_mask_trace

__all__ = [
    "CASES",
    "PUBLISHED",
    "SeedCase",
    "SeedPlan",
    "kv_cache_tensors",
    "main",
    "run_seed_case",
    "serve_after_start",
]

PUBLISHED = {
    ("qwen2.5-7b", "allocated_peak"): (37.85 * GiB, 44292),
    ("qwen2.5-7b", "reserved"): (36.40 * GiB, 42593),
    ("deepseek-v3-tp16", "allocated_peak"): (9.13 * GiB, 8719),
    ("deepseek-v3-tp16", "reserved"): (8.54 * GiB, 8150),
}
"""The seed's published KV-cache sizes and block counts (vllm-mindspore PR !437)."""

BLOCK_SIZE = 16


_Graph = Any  # Qwen2Graph | DeepseekV3Graph: each case's functions take its own graph


@dataclass(frozen=True)
class SeedCase:
    """One published case: the model preset, its rank's graph and its trace builders.

    Attributes:
        name: the case name in :data:`PUBLISHED`.
        model: model preset name.
        tensor_parallel_size: ranks; the case replays one.
        graph: builds the rank's graph from the preset's config.
        load: ``(parameters, masks)`` bytes of the graph.
        mask_trace: the decode mask's construction trace.
        prefill_trace: one prefill of ``n`` tokens.
    """

    name: str
    model: str
    tensor_parallel_size: int
    graph: Callable[[dict[str, object]], _Graph]
    load: Callable[[_Graph], tuple[list[int], list[int]]]
    mask_trace: Callable[[_Graph], list[int]]
    prefill_trace: Callable[[_Graph, int], list[int]]

    def spec(self) -> KVCacheSpec:
        """The rank's KV-cache spec (memacct's planner)."""
        return KVCacheSpec.from_hf_config(
            load_model_preset(self.model), tensor_parallel_size=self.tensor_parallel_size
        )


def _qwen_graph(config: dict[str, object]) -> _Graph:
    return Qwen2Graph.from_config(config)


def _deepseek_graph(config: dict[str, object]) -> _Graph:
    # vllm-mindspore's predict_deepseek_r1_671b_w8a8.yaml: model_parallel 16, W8A8 (ptq),
    # seq_length 4096 (docs/simulator.md).
    return DeepseekV3Graph.from_config(config, tensor_parallel_size=16)


CASES: dict[str, SeedCase] = {
    "qwen2.5-7b": SeedCase(
        "qwen2.5-7b", "qwen2.5-7b", 1, _qwen_graph,
        qwen2_load, qwen2_mask_trace, qwen2_prefill_trace,
    ),
    "deepseek-v3-tp16": SeedCase(
        "deepseek-v3-tp16", "deepseek-v3", 16, _deepseek_graph,
        deepseek_v3_load, deepseek_v3_mask_trace, deepseek_v3_prefill_trace,
    ),
}
"""The seed's cases by name (a model name is accepted for its case too)."""


def _case(name: str) -> SeedCase:
    if name in CASES:
        return CASES[name]
    for case in CASES.values():
        if case.model == name:
            return case
    raise ValueError(f"unknown seed case {name!r}; use one of {sorted(CASES)}")


@dataclass(frozen=True)
class SeedPlan:
    """One plan of vllm-mindspore's worker, replayed.

    Attributes:
        model: seed case name.
        device: device preset name.
        policy: ``allocated_peak`` or ``reserved``.
        total: device total (bytes).
        weights: ``weights_memory`` (allocated bytes gained while loading).
        activation: the charged activation (peak allocated or reserved increase).
        non_pool: growth of memory outside the pool since the start.
        kv_bytes: the KV-cache budget.
        num_blocks: KV-cache blocks.
        allocated_peak_increase: increase of the allocated peak during the profile.
        reserved_increase: increase of reserved memory during the profile.
    """

    model: str
    device: str
    policy: str
    total: int
    weights: int
    activation: int
    non_pool: int
    kv_bytes: int
    num_blocks: int
    allocated_peak_increase: int
    reserved_increase: int


def kv_cache_tensors(spec: KVCacheSpec, num_blocks: int, block_size: int = BLOCK_SIZE) -> list[int]:
    """Bytes of each KV-cache tensor vllm-mindspore's cache engine allocates, in order.

    MHA/GQA: a key and a value tensor per layer (``get_kv_cache_shape`` starts with 2,
    one tensor per entry); MLA: one latent tensor per layer (shape starts with 1).
    """
    per_layer = num_blocks * block_size * spec.bytes_per_token // spec.num_layers
    if spec.attention == "mla":
        return [per_layer] * spec.num_layers
    return [per_layer // 2] * (2 * spec.num_layers)


def _load(dev: SimDevice, case: SeedCase, graph: _Graph) -> None:
    params, masks = case.load(graph)
    for n in params:
        dev.malloc(n, persistent=True)
    # The masks come from device ops in the common pool: the decode mask's input is freed.
    dev.malloc(masks[0])
    dev.malloc(masks[2])
    mask_ops = case.mask_trace(graph)
    cast = dev.malloc(mask_ops[0])
    dev.malloc(mask_ops[1])
    dev.free(cast)


def start(
    model: str = "qwen2.5-7b",
    device: str = "ascend-910b-64gb",
    *,
    max_num_batched_tokens: int = 32768,
    context_bytes: int = 0,
) -> tuple[SimDevice, _Graph, dict[str, int]]:
    """Start vllm-mindspore's worker on a fresh device; return it, the graph and the readings.

    ``model`` is a seed case name (or its model preset).
    """
    case = _case(model)
    graph = case.graph(load_model_preset(case.model))
    dev = SimDevice(device, "mindspore")
    api = dev.api
    free0, total = api.mem_get_info()
    base_nonpool = (total - free0) - api.memory_reserved()
    if context_bytes:
        dev.external_malloc(context_bytes)
    alloc0 = api.memory_allocated()
    _load(dev, case, graph)
    weights = api.memory_allocated() - alloc0
    api.empty_cache()
    api.reset_peak_memory_stats()
    reserved_before = api.memory_reserved()
    peak_before = api.max_memory_allocated()
    replay(dev, case.prefill_trace(graph, max_num_batched_tokens))
    free1, _ = api.mem_get_info()
    reserved_after = api.memory_reserved()  # read before empty_cache, as !428 does
    peak_after = api.max_memory_allocated()
    nonpool_profile = (total - free1) - reserved_after - base_nonpool
    api.empty_cache()
    free2, _ = api.mem_get_info()
    nonpool_after = (total - free2) - api.memory_reserved() - base_nonpool
    readings = {
        "total": total,
        "weights": weights,
        "allocated_peak_increase": peak_after - peak_before,
        "reserved_increase": reserved_after - reserved_before,
        "non_pool_reserved_flavour": nonpool_profile,
        "non_pool_allocated_flavour": nonpool_after,
    }
    return dev, graph, readings


def run_seed_case(
    model: str = "qwen2.5-7b",
    device: str = "ascend-910b-64gb",
    policy: str = "allocated_peak",
    *,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 32768,
    context_bytes: int = 0,
) -> SeedPlan:
    """Plan as vllm-mindspore's worker does with ``policy`` (see the module docstring)."""
    _dev, _graph, r = start(
        model, device, max_num_batched_tokens=max_num_batched_tokens,
        context_bytes=context_bytes,
    )
    return _plan(model, device, policy, r, gpu_memory_utilization)


def _plan(model: str, device: str, policy: str, r: dict[str, int], util: float) -> SeedPlan:
    if policy == "reserved":
        activation, non_pool = r["reserved_increase"], r["non_pool_reserved_flavour"]
    elif policy == "allocated_peak":
        activation, non_pool = r["allocated_peak_increase"], r["non_pool_allocated_flavour"]
    else:
        raise ValueError(f"policy must be allocated_peak or reserved, got {policy!r}")
    kv = int(r["total"] * util) - (r["weights"] + activation + non_pool)
    per_block = _case(model).spec().bytes_per_block(BLOCK_SIZE)
    return SeedPlan(
        _case(model).name, device, policy, r["total"], r["weights"], activation, non_pool,
        kv, max(0, kv) // per_block, r["allocated_peak_increase"], r["reserved_increase"],
    )


def serve_after_start(
    plan: SeedPlan,
    *,
    prompt_tokens: int = 32768,
    max_num_batched_tokens: int = 32768,
    context_bytes: int = 0,
) -> bool:
    """Start, allocate ``plan``'s KV cache as vllm-mindspore does, serve one long prompt.

    Returns whether the device ran out of memory.
    """
    case = _case(plan.model)
    dev, graph, _ = start(
        plan.model, plan.device, max_num_batched_tokens=max_num_batched_tokens,
        context_bytes=context_bytes,
    )
    try:
        for nbytes in kv_cache_tensors(case.spec(), plan.num_blocks):
            dev.malloc(nbytes)
        done = 0
        while done < prompt_tokens:
            chunk = min(max_num_batched_tokens, prompt_tokens - done)
            replay(dev, case.prefill_trace(graph, chunk))
            done += chunk
    except SimOutOfMemory:
        return True
    return False


def table() -> list[tuple[str, str, str, float, int, float, int]]:
    """Rows ``(case, policy, device, published GiB, published blocks, memacct GiB, blocks)``."""
    rows = []
    for name in CASES:
        _dev, _graph, r = start(name, "ascend-910b-64gb")
        for policy in ("allocated_peak", "reserved"):
            plan = _plan(name, "ascend-910b-64gb", policy, r, 0.9)
            pub_bytes, pub_blocks = PUBLISHED[(name, policy)]
            rows.append((name, policy, "ascend-910b-64gb", pub_bytes / GiB, pub_blocks,
                         plan.kv_bytes / GiB, plan.num_blocks))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the seed-case table and the 910B4 OOM check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.parse_args(argv)
    print("| case | policy | published | memacct | deviation |")
    print("|---|---|---|---|---|")
    for case, policy, _device, pub_gib, pub_blocks, gib, blocks in table():
        dev_pct = (gib - pub_gib) / pub_gib * 100
        print(f"| {case} | {policy} | {pub_gib:.2f} GiB / {pub_blocks} | "
              f"{gib:.2f} GiB / {blocks} | {dev_pct:+.1f}% |")
    for policy in ("allocated_peak", "reserved"):
        plan = run_seed_case("qwen2.5-7b", "ascend-910b-32gb", policy)
        oom = serve_after_start(plan)
        print(f"910B4 (32 GB), {policy}: {plan.kv_bytes / GiB:.2f} GiB / {plan.num_blocks} "
              f"blocks, a 32768-token prompt after start: {'OOM' if oom else 'served'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
