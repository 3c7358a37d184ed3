"""SGLang's start-up, as it bears on memory.

SGLang sizes its KV pool from the memory left after loading the weights
(``python/sglang/srt/model_executor/model_runner.py``, ``profile_max_num_token``)::

    rest = free memory after the weights - total x (1 - mem_fraction_static)
    max_total_num_tokens = rest // cell_size

so the pool is ``total x mem_fraction_static - weights - what else the process
holds at that point`` (its CUDA context, NCCL buffers). Activations, CUDA graphs
and the sampler live in the ``1 - mem_fraction_static`` share, which SGLang
does not profile. Sources in ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.engines.vllm.startup import StartupEstimate, StartupSettings, batch_defaults
from memacct.errors import InvalidInputError
from memacct.planner.weights import WeightEstimate, estimate_weights
from memacct.units import GiB

__all__ = ["CONTEXT_BYTES", "DEFAULT_MEM_FRACTION_STATIC", "STARTUP", "SglangStartup"]

DEFAULT_MEM_FRACTION_STATIC = 0.88
"""The fraction memacct assumes when none is given: SGLang picks it per GPU size and TP
degree at start; 0.88 is its choice for 80 GB-class GPUs (pass the value SGLang logs)."""

CONTEXT_BYTES = (round(0.5 * GiB), round(1.05 * GiB))
"""Memory SGLang's process holds besides weights when it measures (CUDA context; plus NCCL
and custom all-reduce buffers under TP): estimates, not yet checked against a log."""


@dataclass(frozen=True)
class SglangSettings(StartupSettings):
    """SGLang's settings: ``gpu_memory_utilization`` is ignored, ``mem_fraction_static`` used."""

    mem_fraction_static: float | None = None


class SglangStartup:
    """SGLang's start-up model."""

    name = "sglang"
    version = "0.5"

    def defaults(self, total_memory: int, device_name: str) -> tuple[int, int]:
        """(chunked prefill size, max running requests) memacct assumes for the profile."""
        return batch_defaults(total_memory, device_name)

    def estimate(
        self,
        config: Mapping[str, Any],
        *,
        total_memory: int,
        device_name: str = "",
        settings: StartupSettings | None = None,
        weights: WeightEstimate | None = None,
    ) -> StartupEstimate:
        """The KV pool SGLang allocates on one rank.

        Raises:
            InvalidInputError: ``mem_fraction_static`` out of (0, 1).
        """
        s = settings or SglangSettings()
        fraction = getattr(s, "mem_fraction_static", None) or DEFAULT_MEM_FRACTION_STATIC
        if not 0 < fraction < 1:
            raise InvalidInputError(f"mem_fraction_static must be in (0, 1), got {fraction!r}")
        if weights is None:
            weights = estimate_weights(config, tensor_parallel_size=s.tensor_parallel_size)
        context = CONTEXT_BYTES[0] if s.tensor_parallel_size == 1 else CONTEXT_BYTES[1]
        static = int(total_memory * fraction)
        tokens, seqs = self.defaults(total_memory, device_name)
        return StartupEstimate(
            engine=self.name,
            version=self.version,
            total_memory=total_memory,
            gpu_memory_utilization=fraction,
            requested_memory=static,
            weights_memory=weights.total_bytes,
            activation_peak=0,
            non_allocator_increase=context,
            cudagraph_memory=0,
            cudagraph_charged=False,
            kv_cache_bytes=static - weights.total_bytes - context,
            max_num_batched_tokens=s.max_num_batched_tokens or tokens,
            max_num_seqs=s.max_num_seqs or seqs,
            weights=weights,
            notes=(f"mem_fraction_static {fraction}: activations and graphs use the rest",),
        )


STARTUP = SglangStartup()
"""SGLang's start-up model, for ``Engine(startup=...)``."""
