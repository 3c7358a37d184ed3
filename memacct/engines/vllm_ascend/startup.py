"""vllm-ascend's start-up, as it bears on memory (the NPU worker of vLLM's V1 engine).

vllm-ascend's ``NPUWorker.determine_available_memory`` (``vllm_ascend/worker/worker.py``)
computes ``total x gpu_memory_utilization - (weights + peak activation + non-torch
memory)``: vLLM's arithmetic without the CUDA-graph term (graph memory is only
deducted when ``VLLM_ASCEND_MEMORY_PROFILER_ESTIMATE_NPUGRAPHS`` asks for it,
vllm-project/vllm-ascend#8289). Its profile run samples without the sort-based
top-k/top-p buffers of vLLM's CUDA sampler: the sampler's peak is the logits in
float32 next to the model-dtype logits. The defaults come from vLLM's
``EngineArgs.get_batch_defaults`` (a 64 GB 910B is below its 70 GiB threshold:
2048 tokens, 256 sequences). Sources and measurements in ``docs/engines.md``.
"""

from __future__ import annotations

from memacct.engines.vllm.releases import NON_TORCH_TP_BYTES
from memacct.engines.vllm.startup import VllmStartup
from memacct.units import GiB

__all__ = ["STARTUP", "VllmAscendStartup"]


class VllmAscendStartup(VllmStartup):
    """vllm-ascend's start-up model."""

    name = "vllm-ascend"
    version = "0.33"
    sampler_bytes_per_logit = 4
    cuda_sampler = False
    # 0.13 GiB measured after the worker's baseline on a 910B at TP1 (vllm-ascend#8289);
    # HCCL buffers under TP are taken as vLLM's NCCL figure until a reading is found.
    non_torch = (round(0.13 * GiB), NON_TORCH_TP_BYTES)
    graphs = False


STARTUP = VllmAscendStartup()
"""vllm-ascend's start-up model, for ``Engine(startup=...)``."""
