"""Random serving scenarios: the families a truth source must generalize to.

``memacct bench --generated N --seed S`` runs :func:`generate_scenarios`:
scenario ``i`` of seed ``S`` is drawn from ``random.Random(f"{S}:{i}")`` alone,
so any one of them can be rebuilt (``generate_scenario(S, i)``) without the
others. Each draws:

* a model family: full attention (Qwen2.5, Llama 3.1, Qwen3; layer counts
  varied), sliding window (Mistral, Gemma 2/3; window varied), mixture of
  experts (Mixtral, Qwen3-MoE, DeepSeek-V2-Lite's experts) and MLA
  (DeepSeek-V2-Lite; latent rank varied), bf16 or fp8 KV cache;
* one of the four allocators, on a device preset of its vendor (NVIDIA presets
  for torch-cuda and expandable segments, Ascend presets for npu and
  mindspore), with the tensor-parallel size that makes the weights fit;
* a co-tenant holding 2-15% of the device (in 30% of scenarios);
* the engine's budgets (``max_num_batched_tokens``, ``max_num_seqs``), its
  context outside the allocator, and ``gpu_memory_utilization`` in 0.85-1.0
  (at most what the co-tenant leaves);
* a serving mix: ragged (any tokens, any sequences), decode-only, prefill-only,
  or long prefills alternating with decodes. A decode-only mix is what a
  disaggregated decode instance serves and a prefill-only mix a prefill
  instance: the scenario declares that ``serving_role`` (the engine is deployed
  knowing it), which memacct's profile records; the others are ``mixed``.

The development seeds (``docs/results.md``) are 0-99; the targets are judged
on fresh seeds, never looked at while changing memacct.

Example::

    >>> a = generate_scenario(7, 3); b = generate_scenario(7, 3)
    >>> a == b, a.name
    (True, 'gen-7-3')
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from memacct.devices import DEVICE_PRESETS
from memacct.errors import MemacctError
from memacct.model.sources.presets import load_model_preset
from memacct.model.spec import KVCacheSpec
from memacct.units import GiB, MiB
from memacct_bench.scenario import Scenario
from memacct_bench.workload import TransformerWorkload

__all__ = ["DEVELOPMENT_SEEDS", "FAMILIES", "MIXES", "generate_scenario", "generate_scenarios"]

DEVELOPMENT_SEEDS = range(0, 100)
"""Seeds looked at while developing memacct; judge on others."""

NVIDIA_DEVICES = ("h100-80gb", "h200-141gb", "a100-80gb", "a100-40gb", "l4-24gb")
ASCEND_DEVICES = ("ascend-910b-64gb", "ascend-910b-32gb")
ALLOCATORS = {
    "torch-cuda": NVIDIA_DEVICES,
    "torch-cuda-expandable": NVIDIA_DEVICES,
    "npu": ASCEND_DEVICES,
    "mindspore": ASCEND_DEVICES,
}
MIXES = ("ragged", "decode-only", "prefill-only", "alternating")

# The weights may take at most this share of the device: the rest is for activations and
# a KV cache large enough for a few requests, whatever the utilization drawn.
_WEIGHTS_SHARE = 0.5


def _vary_layers(cfg: dict[str, Any], rng: random.Random) -> None:
    key = "num_hidden_layers"
    if key in cfg and not any(isinstance(v, list) and len(v) == cfg[key] for v in cfg.values()):
        cfg[key] = max(4, int(cfg[key] * rng.uniform(0.5, 1.25)))


def _full(rng: random.Random) -> dict[str, Any]:
    cfg = load_model_preset(rng.choice(["qwen2.5-7b", "llama-3.1-8b", "qwen3-8b", "llama-3.1-70b"]))
    _vary_layers(cfg, rng)
    return cfg


def _sliding(rng: random.Random) -> dict[str, Any]:
    cfg = load_model_preset(rng.choice(["mistral-7b", "gemma-2-9b", "gemma-3-12b"]))
    text = cfg.get("text_config", cfg)
    if isinstance(text.get("sliding_window"), int):
        text["sliding_window"] = rng.choice([512, 1024, 2048, 4096])
    return cfg


def _moe(rng: random.Random) -> dict[str, Any]:
    return load_model_preset(rng.choice(["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"]))


def _mla(rng: random.Random) -> dict[str, Any]:
    cfg = load_model_preset("deepseek-v2-lite")
    cfg["kv_lora_rank"] = rng.choice([256, 512])
    _vary_layers(cfg, rng)
    return cfg


FAMILIES: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "full": _full,
    "sliding": _sliding,
    "moe": _moe,
    "mla": _mla,
}


def _weights_bytes(cfg: dict[str, Any], tp: int, kv_dtype: str, mnbt: int, mns: int) -> int:
    spec = KVCacheSpec.from_hf_config(
        copy.deepcopy(cfg), kv_cache_dtype=kv_dtype, tensor_parallel_size=tp
    )
    work = TransformerWorkload(spec, cfg, max_num_batched_tokens=mnbt, max_num_seqs=mns)
    return sum(work.weight_tensors())


def _serving(rng: random.Random, mix: str, mnbt: int, mns: int) -> list[dict[str, int]]:
    steps: list[dict[str, int]] = []
    count = rng.randint(12, 40)
    for i in range(count):
        if mix == "decode-only" or (mix == "alternating" and i % 2):
            seqs = rng.randint(1, mns)
            tokens = seqs
        elif mix in {"prefill-only", "alternating"}:
            tokens = rng.randint(max(1, mnbt // 2), mnbt)
            seqs = rng.randint(1, min(8, mns, tokens))
        else:  # ragged
            tokens = rng.randint(1, mnbt)
            seqs = rng.randint(1, min(mns, tokens))
        steps.append({"num_tokens": tokens, "num_seqs": seqs})
    return steps


def generate_scenario(seed: int, index: int) -> Scenario:
    """Scenario ``index`` of ``seed``: a function of the two alone (see the module docstring)."""
    rng = random.Random(f"{seed}:{index}")
    family = rng.choice(sorted(FAMILIES))
    for _ in range(50):
        cfg = FAMILIES[family](rng)
        allocator = rng.choice(sorted(ALLOCATORS))
        device = rng.choice(ALLOCATORS[allocator])
        total = DEVICE_PRESETS[device]
        mnbt = rng.choice([2048, 4096, 8192, 16384])
        mns = min(mnbt, rng.choice([64, 128, 256, 512]))
        kv_dtype = "fp8" if rng.random() < 0.2 else "auto"
        try:
            tp = next(
                tp
                for tp in (1, 2, 4, 8, 16)
                if _weights_bytes(cfg, tp, kv_dtype, mnbt, mns) <= _WEIGHTS_SHARE * total
            )
        except (StopIteration, MemacctError):
            continue
        other = int(total * rng.uniform(0.02, 0.15)) if rng.random() < 0.3 else 0
        most = min(1.0, 1 - other / total - 0.005) if other else 1.0
        utilization = round(rng.uniform(0.85, max(0.85, most)), 4)
        if utilization > most:
            other = 0
        mix = rng.choice(MIXES)
        data: dict[str, Any] = {
            "name": f"gen-{seed}-{index}",
            "description": (
                f"{family} {cfg.get('model_type', 'model')}, {allocator} on {device}, "
                f"tp={tp}, {mix}, utilization {utilization}"
                + (f", co-tenant {other / GiB:.1f} GiB" if other else "")
            ),
            "device": device,
            "allocator": allocator,
            "model": cfg,
            "max_num_batched_tokens": mnbt,
            "max_num_seqs": mns,
            "block_size": 16,
            "gpu_memory_utilization": utilization,
            "other_process_bytes": other,
            "context_bytes": rng.choice([256, 512, 768, 1024]) * MiB,
            "serving": _serving(rng, mix, mnbt, mns),
            "seed": rng.randint(0, 2**31),
            "tensor_parallel_size": tp,
            "kv_cache_dtype": kv_dtype,
            "max_model_len": rng.choice([2048, 4096, 8192]),
            # Decode-only and prefill-only mixes are what disaggregated decode and prefill
            # instances serve, and such an instance is deployed knowing its role.
            "serving_role": {"decode-only": "decode", "prefill-only": "prefill"}.get(mix, "mixed"),
        }
        return Scenario.from_dict(data, source=f"generated scenario {seed}:{index}")
    raise MemacctError(f"no scenario fits after 50 draws for seed {seed}, index {index}")


def generate_scenarios(count: int, seed: int) -> list[Scenario]:
    """Scenarios ``0 .. count - 1`` of ``seed``."""
    return [generate_scenario(seed, i) for i in range(count)]
