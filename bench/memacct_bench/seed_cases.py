"""The seed's published cases, replayed on the simulated device: vllm-mindspore's two plans.

vllm-mindspore's PR !428/!437 published, for Qwen2.5-7B-Instruct on a 64 GB Ascend 910B
(``--max-num-batched-tokens 32768 --max-num-seqs 1``, ``gpu_memory_utilization`` 0.9),
the KV cache its worker planned with the allocated peak (37.85 GiB, 44292 blocks) and
with reserved memory (36.40 GiB, 42593 blocks), and an out-of-memory error on a 32 GB
910B4 with the first. :func:`run_seed_case` replays the worker's start on a
:class:`~memacct.sim.SimDevice` with the ``mindspore`` (VMM) pool, the MindFormers graph
of :mod:`memacct.sim.traces.mindformers`, and the worker's own arithmetic (sources in
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
from dataclasses import dataclass

from memacct.engines.forward import replay
from memacct.planner import load_model_preset
from memacct.planner.spec import KVCacheSpec
from memacct.sim import SimDevice, SimOutOfMemory
from memacct.sim.traces.mindformers import (
    Qwen2Graph,
    qwen2_load,
    qwen2_mask_trace,
    qwen2_prefill_trace,
)
from memacct.units import GiB

__all__ = [
    "PUBLISHED",
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


@dataclass(frozen=True)
class SeedPlan:
    """One plan of vllm-mindspore's worker, replayed.

    Attributes:
        model: model preset name.
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


def _load(dev: SimDevice, graph: Qwen2Graph) -> list[int]:
    params, _masks = qwen2_load(graph)
    ptrs = [dev.malloc(n, persistent=True) for n in params]
    # The masks come from device ops in the common pool: the decode mask's input is freed.
    ptrs += [dev.malloc(_masks[0]), dev.malloc(_masks[2])]
    mask_ops = qwen2_mask_trace(graph)
    cast = dev.malloc(mask_ops[0])
    ptrs.append(dev.malloc(mask_ops[1]))
    dev.free(cast)
    return ptrs


def start(
    model: str = "qwen2.5-7b",
    device: str = "ascend-910b-64gb",
    *,
    max_num_batched_tokens: int = 32768,
    context_bytes: int = 0,
    max_model_len: int | None = None,
) -> tuple[SimDevice, Qwen2Graph, dict[str, int]]:
    """Start vllm-mindspore's worker on a fresh device; return it, the graph and the readings."""
    config = load_model_preset(model)
    graph = Qwen2Graph.from_config(config, max_model_len=max_model_len)
    dev = SimDevice(device, "mindspore")
    api = dev.api
    free0, total = api.mem_get_info()
    base_nonpool = (total - free0) - api.memory_reserved()
    if context_bytes:
        dev.external_malloc(context_bytes)
    alloc0 = api.memory_allocated()
    _load(dev, graph)
    weights = api.memory_allocated() - alloc0
    api.empty_cache()
    api.reset_peak_memory_stats()
    reserved_before = api.memory_reserved()
    peak_before = api.max_memory_allocated()
    replay(dev, qwen2_prefill_trace(graph, max_num_batched_tokens))
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
    _dev, graph, r = start(
        model, device, max_num_batched_tokens=max_num_batched_tokens,
        context_bytes=context_bytes,
    )
    return _plan(model, device, policy, graph, r, gpu_memory_utilization)


def _plan(
    model: str, device: str, policy: str, graph: Qwen2Graph, r: dict[str, int], util: float
) -> SeedPlan:
    if policy == "reserved":
        activation, non_pool = r["reserved_increase"], r["non_pool_reserved_flavour"]
    elif policy == "allocated_peak":
        activation, non_pool = r["allocated_peak_increase"], r["non_pool_allocated_flavour"]
    else:
        raise ValueError(f"policy must be allocated_peak or reserved, got {policy!r}")
    kv = int(r["total"] * util) - (r["weights"] + activation + non_pool)
    per_block = BLOCK_SIZE * 2 * graph.layers * graph.kv_bytes_per_token
    return SeedPlan(
        model, device, policy, r["total"], r["weights"], activation, non_pool,
        kv, max(0, kv) // per_block, r["allocated_peak_increase"], r["reserved_increase"],
    )


def serve_after_start(
    plan: SeedPlan,
    *,
    prompt_tokens: int = 32768,
    max_num_batched_tokens: int = 32768,
    context_bytes: int = 0,
) -> bool:
    """Start, allocate ``plan``'s KV cache (K and V per layer), serve one long prompt.

    Returns whether the device ran out of memory.
    """
    dev, graph, _ = start(
        plan.model, plan.device, max_num_batched_tokens=max_num_batched_tokens,
        context_bytes=context_bytes,
    )
    spec = KVCacheSpec.from_hf_config(load_model_preset(plan.model))
    try:
        for nbytes in kv_cache_tensors(spec, plan.num_blocks):
            dev.malloc(nbytes)
        done = 0
        while done < prompt_tokens:
            chunk = min(max_num_batched_tokens, prompt_tokens - done)
            replay(dev, qwen2_prefill_trace(graph, chunk))
            done += chunk
    except SimOutOfMemory:
        return True
    return False


def table() -> list[tuple[str, str, str, float, int, float, int]]:
    """Rows ``(case, policy, device, published GiB, published blocks, memacct GiB, blocks)``."""
    rows = []
    dev, graph, r = start("qwen2.5-7b", "ascend-910b-64gb")
    del dev
    for policy in ("allocated_peak", "reserved"):
        plan = _plan("qwen2.5-7b", "ascend-910b-64gb", policy, graph, r, 0.9)
        pub_bytes, pub_blocks = PUBLISHED[("qwen2.5-7b", policy)]
        rows.append(("qwen2.5-7b", policy, "ascend-910b-64gb", pub_bytes / GiB, pub_blocks,
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
        pub_bytes, pub_blocks = PUBLISHED[("deepseek-v3-tp16", policy)]
        print(f"| deepseek-v3-tp16 | {policy} | {pub_bytes / GiB:.2f} GiB / {pub_blocks} | "
              "not reproduced (docs/simulator.md) | - |")
    for policy in ("allocated_peak", "reserved"):
        plan = run_seed_case("qwen2.5-7b", "ascend-910b-32gb", policy)
        oom = serve_after_start(plan)
        print(f"910B4 (32 GB), {policy}: {plan.kv_bytes / GiB:.2f} GiB / {plan.num_blocks} "
              f"blocks, a 32768-token prompt after start: {'OOM' if oom else 'served'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
