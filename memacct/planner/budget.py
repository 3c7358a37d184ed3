"""The non-KV budget of one rank: what it holds besides its KV cache, and the batch it assumes.

:class:`MemoryBudget` is the one input of a plan's arithmetic (``kv_cache_bytes =
target_allocation - non_kv_cache_memory``). It is built from a measured profile
(:func:`profile_budget`) or from an engine's start-up estimated offline
(:meth:`MemoryBudget.from_estimate`, :mod:`memacct.planner.offline`), and
:func:`batch_defaults_for` gives the batch a plan assumes when none is given.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from memacct._attrs import same_named
from memacct.checks import FROZEN
from memacct.engines.base import Engine
from memacct.models import ProfileResult, non_kv_sum
from memacct.planner.refusals import device_of

__all__ = ["MemoryBudget", "batch_defaults_for", "profile_budget"]

_ESTIMATE_TERMS = (
    "total_memory", "gpu_memory_utilization", "weights_memory", "activation_peak",
    "non_allocator_increase", "sampler", "max_num_batched_tokens", "max_num_seqs",
)  # fmt: skip
"""The terms a budget takes from a start-up estimate under the same names."""


class MemoryBudget(BaseModel):
    """What one rank holds besides its KV cache, and what the engine lets it hold in all.

    The one input of a plan's arithmetic (``kv_cache_bytes = target_allocation -
    non_kv_cache_memory``), built either from a measured profile
    (``source="profile"``) or from an engine's start-up estimated offline
    (``source="estimate"``, :func:`memacct.planner.offline.plan_offline`). Sizes in bytes.

    Attributes:
        source: ``profile`` or ``estimate``.
        total_memory: the device's total memory.
        gpu_memory_utilization: the engine's fraction of it (SGLang: ``mem_fraction_static``).
        target_allocation: what the engine may hold: ``int(total x utilization)``.
        weights_memory: the weights on this rank.
        activation_peak: the profile run's activation peak.
        non_allocator_increase: memory outside the allocator gained since the engine's baseline.
        cudagraph_memory: the CUDA-graph memory charged to the budget.
        cudagraph_estimate: the graph memory estimated, charged or not (offline).
        retained_memory: memory a profile region kept after it ended.
        weights_source: where the weights' size came from.
        quantization: the weights' quantization, ``None`` for unquantized weights.
        sampler: the dummy sampler's top-k/top-p path charged (vLLM offline).
        max_num_batched_tokens: the profile run's token budget.
        max_num_seqs: the profile run's sequence budget.
        enforce_eager: whether CUDA graphs are off (offline).
        device: the device's preset name, ``custom``, or ``backend:index`` of a profile.
        device_label: the device as people call it.
        notes: how the budget's terms were chosen, one sentence each.
    """

    model_config = FROZEN

    source: Literal["profile", "estimate"]
    total_memory: int = Field(gt=0)
    gpu_memory_utilization: float = Field(gt=0.0, le=1.0)
    target_allocation: int = Field(ge=0)
    weights_memory: int = Field(ge=0)
    activation_peak: int = Field(ge=0)
    non_allocator_increase: int = 0
    cudagraph_memory: int = Field(default=0, ge=0)
    cudagraph_estimate: int = Field(default=0, ge=0)
    retained_memory: int = Field(default=0, ge=0)
    weights_source: str = ""
    quantization: str | None = None
    sampler: str = ""
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    enforce_eager: bool = False
    device: str = ""
    device_label: str = ""
    notes: tuple[str, ...] = ()

    @property
    def non_kv_cache_memory(self) -> int:
        """Everything charged besides the KV cache."""
        return non_kv_sum(self.weights_memory, self.activation_peak, self.non_allocator_increase,
                          self.cudagraph_memory, self.retained_memory)

    @property
    def kv_cache_bytes(self) -> int:
        """What the target leaves the KV cache; negative when the rest alone exceeds it."""
        return self.target_allocation - self.non_kv_cache_memory

    @classmethod
    def from_estimate(cls, est: Any, *, device: str, device_label: str,
                      enforce_eager: bool = False, notes: tuple[str, ...] = ()) -> MemoryBudget:
        """The budget of an engine's start-up estimate (``engines/<engine>/startup.py``)."""
        return cls(
            source="estimate",
            **same_named(est, *_ESTIMATE_TERMS),
            target_allocation=est.requested_memory,
            cudagraph_memory=est.cudagraph_memory if est.cudagraph_charged else 0,
            cudagraph_estimate=est.cudagraph_memory,
            weights_source=est.weights.source,
            quantization=est.weights.quantization,
            enforce_eager=enforce_eager,
            device=device,
            device_label=device_label,
            notes=(*notes, *est.notes),
        )


def batch_defaults_for(
    engine: Engine, result: ProfileResult | None, budget: MemoryBudget | None,
    max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
    max_model_len: int | None = None,
) -> tuple[int, int]:
    """The batch a plan assumes: the one given, else what the budget or the profile
    recorded, else the engine's own rule (:meth:`StartupModel.batch`, the one the offline
    start-up follows) for the profiled device, or for the device an offline plan of the
    engine takes when none is named (:attr:`Engine.default_device`)."""
    from memacct.devices import DEVICE_INFO

    startup = engine.startup
    if budget is not None:
        tokens, seqs = budget.max_num_batched_tokens, budget.max_num_seqs
        total, name = budget.total_memory, budget.device
    elif result is not None:
        tokens, seqs = result.profiled.max_num_batched_tokens, result.profiled.max_num_seqs
        total, name = result.after.total, ""
    else:
        tokens = seqs = None
        reference = DEVICE_INFO[engine.default_device]
        total, name = reference.total_bytes, reference.name
    return startup.batch(
        total, name, max_num_batched_tokens or tokens, max_num_seqs or seqs,
        max_model_len=max_model_len,
    )


_MEASURED_TERMS = ("weights_memory", "activation_peak", "non_allocator_increase",
                   "cudagraph_memory", "retained_memory")  # fmt: skip
"""The terms of a :class:`ProfileResult` its :class:`MemoryBudget` carries under the same names."""


def _copied(result: ProfileResult, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(result, name) for name in names}


def profile_budget(result: ProfileResult, target: int, utilization: float) -> MemoryBudget:
    return MemoryBudget(
        source="profile",
        total_memory=result.after.total,
        gpu_memory_utilization=utilization,
        target_allocation=target,
        **_copied(result, _MEASURED_TERMS),
        cudagraph_estimate=result.cudagraph_memory,
        weights_source=str(result.weights_source),
        max_num_batched_tokens=result.profiled.max_num_batched_tokens,
        max_num_seqs=result.profiled.max_num_seqs,
        device=device_of(result),
        device_label=device_of(result),
    )
