"""vllm-mindspore's start-up, as it bears on memory: vllm-mindspore 0.2.0 on vLLM 0.7.3.

The release of the seed's profiling fix (mindspore-ai/vllm-mindspore at f2b96744, the
merge of PR !428, 2025-05-28; ``vllm_mindspore/version.txt`` 0.2.0) runs vLLM 0.7.3's V0
worker (``install_depend_pkgs.sh`` clones vLLM v0.7.3; ``vllm_mindspore/utils.py`` refuses
``VLLM_USE_V1``) on MindSpore 2.6, so one rank's KV budget is V0's
``Worker.determine_num_available_blocks``::

    kv = total x gpu_memory_utilization - (weights + activation + non-pool growth)
    num_gpu_blocks = kv // (block_size x bytes per token)

* **weights**: ``model_memory_usage``, the allocated bytes gained while ``get_model``
  builds and loads the model (vLLM's ``DeviceMemoryProfiler`` over vllm-mindspore's
  ``get_current_memory_usage``, ``platforms/ascend.py``: the allocated peak after a
  reset). The model's constructor builds its attention masks on the device (the native
  ``models/qwen2.py`` and MindFormers' ``mf_models/mf_model_base.py`` alike build
  ``LowerTriangularMask``: a 128 x 128 prefill mask and a ``max_model_len`` squared
  decode mask), so they are in the weights, with the rotary tables.
* **activation**, by the truth source: ``reserved`` (PR !428's ``ms_memory_profiling``:
  the increase of reserved memory over the profile, read before ``empty_cache``; the
  default) or ``allocated_peak`` (vLLM's own ``memory_profiling`` before the fix: the
  increase of ``allocated_bytes.all.peak``). The profile is V0's ``_dummy_run``: the
  prefill of ``max_num_batched_tokens`` tokens, here one sequence through the graph of
  :mod:`~memacct.engines.vllm_mindspore.qwen2_graph` or
  :mod:`~memacct.engines.vllm_mindspore.deepseek_graph`, whose allocated peak is exact
  (:func:`~memacct.trace.trace_peak`). Offline, the reserved increase is that
  peak rounded up to MindSpore's 2 MiB VMM pages: the holes MindSpore's pool leaves
  between buffers (the rest of the reserved-minus-allocated gap) are replayed on the
  simulated pool by the harness, not here (``docs/simulator.md``, "The seed's cases").
* **non-pool growth**: none (the seed's cases measure none at TP 1).

MindSpore's pool is capped at ``free x 15/16`` less 10 MiB (``AscendMemAdapter::Initialize``,
``docs/simulator.md``): a request above the cap is noted, as its KV cache would not fit.
Defaults as vLLM 0.7.3's V0 engine: ``max_num_seqs`` 256 and, without chunked prefill,
``max_num_batched_tokens`` ``max(max_model_len, 2048)`` (``vllm/config.py``
``SchedulerConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from memacct.checks import check_fraction, check_int
from memacct.engines.base import StartupEstimate, StartupModel, StartupRequest, StartupSettings
from memacct.engines.vllm_mindspore.deepseek_graph import (
    DeepseekV3Graph,
    deepseek_v3_load,
    deepseek_v3_prefill_trace,
)
from memacct.engines.vllm_mindspore.qwen2_graph import Qwen2Graph, qwen2_load, qwen2_prefill_trace
from memacct.errors import InvalidInputError
from memacct.model.config import ModelConfig
from memacct.model.weights.rules import WeightEstimate
from memacct.trace import trace_peak
from memacct.units import MiB

__all__ = [
    "STARTUP",
    "TRUTH_SOURCES",
    "VERSION",
    "VMM_PAGE_BYTES",
    "VllmMindsporeSettings",
    "VllmMindsporeStartup",
    "pool_budget",
]

VERSION = "0.2.0"
"""vllm-mindspore's ``version.txt`` at f2b96744 (PR !428 merged)."""

VMM_PAGE_BYTES = 2 * MiB
"""MindSpore's VMM page (``vmm_align_size``, ``ascend_vmm_adapter.h``)."""

TRUTH_SOURCES = ("reserved", "allocated_peak")
"""What the profile charges: PR !428's reserved increase (the default: master from
f2b96744, and v0.3.0) or, before it, vLLM's allocated-peak increase (the r0.2 release
branch, version 0.2.0 too, has no ``ms_memory_profiling``)."""

_V0_MAX_NUM_SEQS = 256
_V0_MIN_BATCHED_TOKENS = 2048
# MindSpore's pool budget (ascend_memory_adapter.cc): free x 15/16, rounded down to 2 MiB,
# less 10 MiB (docs/simulator.md, "MindSpore").
_POOL_RATIO = 15 / 16
_POOL_RESERVED = 10 * MiB
_ROLES = {"qwen2": "qwen2", "deepseek_v3": "deepseek_v3"}


def pool_budget(free_bytes: int) -> int:
    """MindSpore's pool budget on a device with ``free_bytes`` free at start."""
    return int(free_bytes * _POOL_RATIO) // (2 * MiB) * (2 * MiB) - _POOL_RESERVED


@dataclass(frozen=True)
class VllmMindsporeSettings(StartupSettings):
    """vllm-mindspore's settings: vLLM's plus the profile's truth source."""

    truth_source: str = "reserved"


def _pages(nbytes: int) -> int:
    return -(-nbytes // VMM_PAGE_BYTES) * VMM_PAGE_BYTES


class VllmMindsporeStartup(StartupModel):
    """vllm-mindspore 0.2.0's start-up model (see the module docstring)."""

    name = "vllm-mindspore"
    version = VERSION

    def defaults(self, total_memory: int, device_name: str,
                 version: tuple[int, int] | None = None) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs): vLLM 0.7.3 V0's, before ``max_model_len``."""
        return _V0_MIN_BATCHED_TOKENS, _V0_MAX_NUM_SEQS

    def settings(self, **common: Any) -> VllmMindsporeSettings:
        """The settings from the common ones (``gpu_memory_utilization`` ``None``: 0.9)."""
        if common.get("gpu_memory_utilization") is None:
            common.pop("gpu_memory_utilization", None)
        if common.get("truth_source") is None:
            common.pop("truth_source", None)
        known = VllmMindsporeSettings.__dataclass_fields__
        return VllmMindsporeSettings(**{k: v for k, v in common.items() if k in known})

    def default_tokens(self, tokens: int, max_model_len: int | None) -> int:
        """vLLM 0.7.3 V0's batch without chunked prefill: a defaulted
        ``max_num_batched_tokens`` holds one request, ``max(max_model_len, 2048)``."""
        return max(max_model_len or 0, tokens)

    # sampler_peak: StartupModel's 0, as the graph's LM head runs on the last token only.

    def graph(self, config: Mapping[str, Any], s: StartupSettings, max_len: int) -> Any:
        """The rank's graph: the Qwen2 graph or MindFormers' DeepSeek-V3 graph.

        Raises:
            InvalidInputError: a model type vllm-mindspore 0.2.0's registry does not list
                (``model_executor/models/registry.py``: Qwen2, Llama natively; Qwen2,
                Qwen3, DeepSeek-V3 through MindFormers) or memacct has no graph for.
        """
        kind = _ROLES.get(str(config.get("model_type", "")))
        tp = s.tensor_parallel_size
        if kind == "qwen2":
            return Qwen2Graph.from_config(config, tensor_parallel_size=tp, max_model_len=max_len)
        if kind == "deepseek_v3":
            quantized = config.get("quantization_config") is not None
            return DeepseekV3Graph.from_config(
                config, tensor_parallel_size=tp, weight_bytes=1 if quantized else 2,
                mask_side=max_len,
            )
        raise InvalidInputError(
            f"vllm-mindspore {VERSION}: memacct models its Qwen2 and DeepSeek-V3 graphs, not "
            f"model_type {config.get('model_type')!r}; plan it with --engine vllm-ascend"
        )

    def start(self, request: StartupRequest) -> StartupEstimate:
        """One rank's start-up on a device of ``total_memory`` bytes.

        ``weights`` is ignored: the graph's own parameters and masks are what the worker
        measures.

        Raises:
            InvalidInputError: a setting out of range, an unknown truth source, or a
                model without a graph here.
        """
        config, total_memory = request.config, request.total_memory
        s = request.settings or VllmMindsporeSettings()
        check_fraction("gpu_memory_utilization", s.gpu_memory_utilization)
        check_int("total_memory", total_memory)
        truth = getattr(s, "truth_source", "reserved")
        if truth not in TRUTH_SOURCES:
            raise InvalidInputError(
                f"truth source {truth!r} is not one vllm-mindspore {VERSION} uses: give "
                f"{' or '.join(TRUTH_SOURCES)}"
            )
        # vLLM's default length (its V0 _get_and_verify_max_len reads the same keys and 2048).
        max_len = s.max_model_len or ModelConfig.of(request.model or config).default_max_model_len
        tokens, seqs = self.batch(total_memory, request.device_name, s.max_num_batched_tokens,
                                  s.max_num_seqs, max_model_len=max_len)  # fmt: skip
        graph = self.graph(config, s, max_len)
        load = deepseek_v3_load if isinstance(graph, DeepseekV3Graph) else qwen2_load
        trace = (
            deepseek_v3_prefill_trace if isinstance(graph, DeepseekV3Graph)
            else qwen2_prefill_trace
        )
        params, masks = load(graph)
        estimate = WeightEstimate(
            total_bytes=sum(params) + sum(masks),
            by_role={"parameters": sum(params), "masks": sum(masks)},
            source="formula",
            quantization="w8a8" if getattr(graph, "weight_bytes", 2) == 1 else None,
            tensor_parallel_size=s.tensor_parallel_size,
        )
        allocated = trace_peak(trace(graph, tokens))
        activation = _pages(allocated) if truth == "reserved" else allocated
        notes = [
            f"vllm-mindspore {VERSION} on vLLM 0.7.3's V0 worker; truth source {truth} "
            f"({'PR !428' if truth == 'reserved' else 'before PR !428'})",
            f"weights include the attention masks built in the model's constructor "
            f"({sum(masks) / MiB:.0f} MiB: the decode mask is {max_len} x {max_len})",
        ]
        if truth == "reserved":
            notes.append(
                "the reserved increase is the allocated peak in whole 2 MiB VMM pages: the "
                "pool's holes between buffers are not replayed offline"
            )
        est = StartupEstimate(
            engine=self.name,
            version=self.version,
            total_memory=total_memory,
            gpu_memory_utilization=s.gpu_memory_utilization,
            activation_peak=activation,
            non_allocator_increase=0,
            cudagraph_memory=0,
            cudagraph_charged=False,
            max_num_batched_tokens=tokens,
            max_num_seqs=seqs,
            weights=estimate,
            notes=tuple(notes),
        )
        cap = pool_budget(total_memory)
        if est.requested_memory <= cap:
            return est
        return replace(est, notes=(*est.notes, (
            f"{s.gpu_memory_utilization:g} of the device exceeds MindSpore's pool "
            f"({cap / MiB:.0f} MiB, free x 15/16): the KV cache would not fit in it"
        )))  # fmt: skip


STARTUP = VllmMindsporeStartup()
"""vllm-mindspore's start-up model, for ``Engine(startup=...)``."""
