"""vllm-ascend's start-up, as it bears on memory (the NPU worker of vLLM's V1 engine).

vllm-ascend's ``NPUWorker.determine_available_memory`` (``vllm_ascend/worker/worker.py``,
the releases of :mod:`memacct.engines.vllm_ascend.releases`) computes ``total x
gpu_memory_utilization - (weights + peak activation + non-torch memory)``: vLLM's
``memory_profiling`` with the torch peak read before any graph is captured, and no
graph term. Its profile run samples without the sort-based top-k/top-p buffers of
vLLM's CUDA sampler: the sampler's peak is the logits in float32 next to the
model-dtype logits. The defaults come from vLLM's ``EngineArgs.get_batch_defaults``
(a 64 GB 910B is below its 70 GiB threshold: 2048 tokens, 256 sequences).

ACL graphs: unless ``--enforce-eager``, ``NPUWorker.compile_or_warm_up_model`` captures
them after the KV cache is allocated, through vLLM's ``GPUModelRunner.capture_model``
(``NPUModelRunner.capture_model`` in ``vllm_ascend/worker/model_runner_v1.py``), at vLLM's
capture sizes and modes (``FULL_AND_PIECEWISE`` by default, kept by
``_update_compilation_modes`` in ``vllm_ascend/platform.py``), into one graph pool. vLLM
logs "Graph capturing finished in N secs, took X GiB" and the worker "Actual usage: ...
X GiB for NPU graph memory. Replace gpu_memory_utilization with --kv-cache-memory=N". The
pool is memacct's CUDA-graph estimate (the largest captured batch's forward plus each
graph's buffers, :meth:`VllmStartup.cudagraph_memory`), planned but never taken off the
budget: it must fit in what the profile run's activations left free plus the memory
above ``gpu_memory_utilization``. Sources and measurements in ``docs/engines.md``.
"""

from __future__ import annotations

from dataclasses import replace

from memacct.engines.base import StartupEstimate, StartupRequest
from memacct.engines.vllm.releases import NON_TORCH_TP_BYTES
from memacct.engines.vllm.startup import VllmStartup
from memacct.engines.vllm_ascend.releases import MAIN_PIN
from memacct.units import GiB

__all__ = ["MAIN_PIN", "STARTUP", "VllmAscendStartup"]


class VllmAscendStartup(VllmStartup):
    """vllm-ascend's start-up model."""

    name = "vllm-ascend"
    version = "0.27"
    """vllm-ascend main, verified against vLLM v0.27.1 (:data:`MAIN_PIN`); the KV-cache
    manager stays vLLM's newest rules (``memacct.engines.vllm.kv``)."""
    sampler_bytes_per_logit = 4
    cuda_sampler = False
    # 0.13 GiB measured after the worker's baseline on a 910B at TP1 (vllm-ascend#8289);
    # HCCL buffers under TP are taken as vLLM's NCCL figure until a reading is found.
    non_torch = (round(0.13 * GiB), NON_TORCH_TP_BYTES)
    graphs = True

    def start(self, request: StartupRequest) -> StartupEstimate:
        """vLLM's start-up of one NPU rank, with the ACL graphs planned but not charged
        (``charge_cudagraphs=True`` charges them, for a worker patched to deduct them)."""
        est = super().start(request)
        s = request.settings
        charged = bool(s is not None and s.charge_cudagraphs) and est.cudagraph_memory > 0
        notes = list(est.notes)
        if est.cudagraph_memory > 0 and not charged:
            notes.append(self.graph_note(est))
        return replace(est, cudagraph_charged=charged, notes=tuple(notes))

    @staticmethod
    def graph_note(est: StartupEstimate) -> str:
        """Where the ACL graphs go: the room the profile's activations leave, then the
        memory above the utilization; a warning when they need more than both."""
        headroom = est.total_memory - est.requested_memory
        room = est.activation_peak + headroom
        gib = est.cudagraph_memory / GiB
        line = (
            f"ACL graphs: {gib:.2f} GiB captured after the KV cache is allocated and not taken "
            f"off it (vllm-ascend's worker); they fit in the profile's activation memory "
            f"({est.activation_peak / GiB:.2f} GiB) plus the {headroom / GiB:.2f} GiB above "
            "gpu_memory_utilization"
        )
        if est.cudagraph_memory > room:
            line = (
                f"ACL graphs: {gib:.2f} GiB captured after the KV cache is allocated need more "
                f"than the {room / GiB:.2f} GiB the profile's activations and the memory above "
                "gpu_memory_utilization leave: the capture may run out of memory; lower "
                "gpu_memory_utilization, or give --enforce-eager"
            )
        return line


STARTUP = VllmAscendStartup()
"""vllm-ascend's start-up model, for ``Engine(startup=...)``."""
