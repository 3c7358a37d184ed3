"""What ``vllm serve`` picks when the user sets nothing, shared by every start-up path.

The plain start-up (:mod:`memacct.engines.vllm.startup`), the start-up under a deployment
(:mod:`memacct.engines.vllm.deploy`), the KV settings' reference batch
(:class:`memacct.engines.base.KVSettings`) and the offline planner read these; this module
imports neither of them:

* the batch per device class (``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``);
* the KV-cache dtype ``auto`` resolves to for a config that names no dtype;
* the batch sizes CUDA graphs are captured for by default (``vllm/config/compilation.py``)
  and each captured graph's own buffers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.model.config import ModelConfig
from memacct.units import GiB

__all__ = [
    "GRAPH_BYTES_PER_LAYER_WIDTH",
    "LARGEST_BATCH_TIER_SINCE",
    "batch_defaults",
    "capture_sizes",
    "full_capture_sizes",
    "serving_kv_cache_dtype",
]

LARGEST_BATCH_TIER_SINCE = (0, 28)
"""vLLM's batch-default tier for devices of at least 160 GiB (``arg_utils.py``, "for GPUs
like B200/B300 with >= 160GB memory"): in 0.33's wheel; added in 0.28.0 (not in 0.27.0)."""


def batch_defaults(total_memory: int, device_name: str,
                   version: tuple[int, int] | None = None) -> tuple[int, int]:
    """``vllm serve``'s (max_num_batched_tokens, max_num_seqs) for a device.

    ``vllm/engine/arg_utils.py`` (``EngineArgs.get_batch_defaults``): 16384 tokens and
    1024 sequences on a device of at least 160 GiB (B200, B300, MI300X; from
    :data:`LARGEST_BATCH_TIER_SINCE`, ``version`` ``None``: the newest release modelled),
    8192 and 1024 on one of at least 70 GiB that is not an A100 (H100, H200), else 2048 and
    256. A DGX Spark (GB10, compute capability 12.1, as its preset records it) stays on the
    small tier.
    """
    from memacct.devices import DEVICE_INFO

    info = DEVICE_INFO.get(device_name)
    gb10 = info is not None and info.compute_capability == (12, 1)
    newest = version is None or version >= LARGEST_BATCH_TIER_SINCE
    if newest and total_memory >= 160 * GiB:
        return 16384, 1024
    if total_memory >= 70 * GiB and "a100" not in device_name.lower() and not gb10:
        return 8192, 1024
    return 2048, 256


def capture_sizes(max_num_seqs: int) -> list[int]:
    """The batch sizes vLLM captures piecewise CUDA graphs for by default.

    1, 2, 4, then every 8 up to 256 and every 16 above, up to
    ``min(2 x max_num_seqs, 512)`` (``vllm/config/compilation.py``). vLLM logs them as
    "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)".
    """
    largest = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return [s for s in sizes if s <= largest]


def full_capture_sizes(max_num_seqs: int) -> list[int]:
    """The decode batch sizes captured as full graphs (``FULL_AND_PIECEWISE``, the default).

    The piecewise sizes that do not exceed ``max_num_seqs`` (a decode step has one
    token per request): 35 sizes for 256 sequences, as vLLM logs them.
    """
    return [s for s in capture_sizes(max_num_seqs) if s <= max_num_seqs]


GRAPH_BYTES_PER_LAYER_WIDTH = 36
"""Per captured graph, bytes per (layer x hidden unit): its kernels' parameter buffers and
the outputs it keeps. Qwen3-0.6B (28 x 1024) grew 0.10 GiB capturing 102 graphs in vLLM 0.11;
vLLM 0.21 estimated 0.52 GiB for Qwen3-8B (36 x 4096) and 86 graphs: 35-40 bytes each."""


def serving_kv_cache_dtype(config: Mapping[str, Any] | ModelConfig, kv_cache_dtype: str) -> str:
    """vLLM's ``auto`` for a config that names no dtype: it serves such models in bfloat16."""
    if kv_cache_dtype.strip().lower() != "auto":
        return kv_cache_dtype
    cfg = ModelConfig.of(config, "config.json")
    if cfg.get("torch_dtype") is None and cfg.get("dtype") is None:
        quant = cfg.get("quantization_config")
        if isinstance(quant, Mapping) and quant.get("kv_cache_quant_algo"):
            return kv_cache_dtype
        return "bfloat16"
    if str(cfg.get("torch_dtype") or cfg.get("dtype")).lower() in (
        "float32",
        "torch.float32",
    ):
        return "bfloat16"
    return kv_cache_dtype
