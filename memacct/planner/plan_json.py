"""A :class:`~memacct.planner.result.KVCachePlan` as a file and as keywords: flat, as ever.

The plan holds its non-KV budget (:class:`~memacct.planner.budget.MemoryBudget`) and the
engine's layout (:class:`~memacct.engines.base.KVLayout`) as they are, and shows their
figures under the names plans have always had (``weights_memory``, ``num_blocks`` ...).
Its JSON keeps every one of those names, in their order, for the programs that read plans;
since version 4 the layout itself follows them under ``layout``. Reading one back (or
building a plan from those names, as the planner does):

* the layout's figures given by name win over a ``layout`` given beside them (a file
  edited by hand is then checked by the plan's own consistency checks);
* the budget's figures given by name must be the budget's;
* a version-2 plan made from a profile, which has no ``budget``, gets the budget its
  figures describe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memacct.models import non_kv_sum

if TYPE_CHECKING:
    from memacct.engines.base import KVGroup, KVLayout
    from memacct.planner.budget import MemoryBudget

__all__ = ["BUDGET_VIEWS", "FLAT_KEYS", "LAYOUT_VIEWS", "PlanFigures", "flat_plan", "nested_plan"]

LAYOUT_VIEWS: dict[str, str] = {
    "block_size": "block_size", "block_bytes": "block_bytes", "num_blocks": "num_blocks",
    "kv_tokens": "kv_tokens", "max_model_len": "max_model_len",
    "blocks_per_request": "blocks_per_request", "max_concurrency": "max_concurrency",
    "max_running_requests": "max_running_requests", "groups": "groups",
    "stage_blocks": "stage_blocks", "engine_notes": "notes",
}  # fmt: skip
"""The plan's name of each figure it shows from its layout -> the layout's name."""

BUDGET_VIEWS = ("total_memory", "gpu_memory_utilization", "non_kv_cache_memory",
                "weights_memory", "activation_peak", "non_allocator_increase",
                "cudagraph_memory", "retained_memory")  # fmt: skip
"""The figures the plan shows from its budget (0, or ``None`` for the first two, without)."""

FLAT_KEYS = (
    "format_version", "engine", "engine_version", "total_memory", "gpu_memory_utilization",
    "target_allocation", "non_kv_cache_memory", "weights_memory", "activation_peak",
    "non_allocator_increase", "kv_cache_bytes", "block_size", "block_bytes", "num_blocks",
    "num_tokens", "kv_tokens", "kv_cache_used_bytes", "max_model_len",
    "max_num_batched_tokens", "max_num_seqs", "async_scheduling", "blocks_per_request",
    "request_bytes", "max_concurrency", "max_running_requests", "groups", "stage_blocks",
    "engine_notes", "profile_duration_s", "spec", "provenance", "agreement",
    "allocator_reserve_bytes", "cudagraph_memory", "retained_memory", "allocator_limit",
    "notes", "model", "budget", "fits", "verdict", "suggestions", "shortfall_bytes",
)  # fmt: skip
"""A plan's JSON keys, in the order format 3 wrote them (``layout`` follows them)."""


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    dumped: dict[str, Any] = value.model_dump()
    return dumped


def _budget_figures(budget: Mapping[str, Any] | None) -> dict[str, Any]:
    """The figures a budget (as a mapping) shows under the plan's names."""
    if budget is None:
        return {"total_memory": None, "gpu_memory_utilization": None,
                **{name: 0 for name in BUDGET_VIEWS[2:]}}  # fmt: skip
    terms = {name: budget.get(name, 0) for name in BUDGET_VIEWS[3:]}
    return {"total_memory": budget.get("total_memory"),
            "gpu_memory_utilization": budget.get("gpu_memory_utilization"),
            "non_kv_cache_memory": non_kv_sum(*terms.values()), **terms}  # fmt: skip


def nested_plan(data: Mapping[str, Any]) -> dict[str, Any]:
    """A plan's fields from its flat form (a file of any version, or the planner's keywords).

    Raises:
        ValueError: a budget figure given by name that is not the budget's.
    """
    out = dict(data)
    given = {name: out.pop(name) for name in BUDGET_VIEWS if name in out}
    budget = _as_dict(out.get("budget"))
    if budget is None and given.get("total_memory") is not None:
        # A version-2 plan of a profile: its figures are its budget's.
        budget = {"source": "profile", "target_allocation": out.get("target_allocation"),
                  "max_num_batched_tokens": out.get("max_num_batched_tokens"),
                  "max_num_seqs": out.get("max_num_seqs"),
                  **{k: v for k, v in given.items() if k != "non_kv_cache_memory"}}  # fmt: skip
        out["budget"] = budget
    shown = _budget_figures(budget)
    for name, value in given.items():
        if value != shown[name] and not (value is None and shown[name] == 0):
            raise ValueError(f"{name} ({value}) is inconsistent: expected {shown[name]} "
                             "(its budget's)")  # fmt: skip
    layout = _as_dict(out.pop("layout", None)) or {}
    for name, field in LAYOUT_VIEWS.items():
        if name in out:
            layout[field] = out.pop(name)
    kv, reserve = out.get("kv_cache_bytes", 0), out.get("allocator_reserve_bytes", 0)
    layout.setdefault("engine", out.get("engine", "vllm"))
    layout.setdefault("engine_version", out.get("engine_version"))
    if isinstance(kv, int) and isinstance(reserve, int):
        layout.setdefault("budget_bytes", max(0, kv - reserve))
    out["layout"] = layout
    return out


def flat_plan(
    dumped: Mapping[str, Any], view: Callable[[str], Any], wanted: Callable[[str], bool]
) -> dict[str, Any]:
    """A plan's dump (``layout`` and ``budget`` nested) with every figure under its flat
    name, in :data:`FLAT_KEYS`' order, then ``layout`` and any newer field; ``wanted`` says
    whether a figure's name was asked for (``model_dump``'s ``include`` and ``exclude``)."""
    layout = dumped.get("layout")
    out: dict[str, Any] = {}
    for key in FLAT_KEYS:
        if key in dumped:
            out[key] = dumped[key]
        elif key in LAYOUT_VIEWS and isinstance(layout, Mapping) and wanted(key):
            out[key] = layout.get(LAYOUT_VIEWS[key])
        elif key in BUDGET_VIEWS and wanted(key):
            out[key] = view(key)
    out.update((key, value) for key, value in dumped.items() if key not in out)
    return out


class PlanFigures:
    """The figures a plan shows from its budget and from the engine's layout, by the names
    plans have always had: read from the object that holds each, never stored twice."""

    if TYPE_CHECKING:
        budget: MemoryBudget | None
        layout: KVLayout

    def _budget_or(self, name: str, empty: Any) -> Any:
        return empty if self.budget is None else getattr(self.budget, name)

    @property
    def total_memory(self) -> int | None:
        """Device memory, bytes (the budget's; ``None`` without one)."""
        value: int | None = self._budget_or("total_memory", None)
        return value

    @property
    def gpu_memory_utilization(self) -> float | None:
        """The fraction of ``total_memory`` asked for (the budget's)."""
        value: float | None = self._budget_or("gpu_memory_utilization", None)
        return value

    @property
    def non_kv_cache_memory(self) -> int:
        """Everything charged besides the KV cache (the budget's one sum; 0 without)."""
        value: int = self._budget_or("non_kv_cache_memory", 0)
        return value

    @property
    def weights_memory(self) -> int:
        """The model's weights (the budget's)."""
        value: int = self._budget_or("weights_memory", 0)
        return value

    @property
    def activation_peak(self) -> int:
        """The profile run's activation peak (the budget's)."""
        value: int = self._budget_or("activation_peak", 0)
        return value

    @property
    def non_allocator_increase(self) -> int:
        """Memory outside the allocator gained since the baseline (the budget's)."""
        value: int = self._budget_or("non_allocator_increase", 0)
        return value

    @property
    def cudagraph_memory(self) -> int:
        """The CUDA-graph memory charged (the budget's)."""
        value: int = self._budget_or("cudagraph_memory", 0)
        return value

    @property
    def retained_memory(self) -> int:
        """Memory a profile region kept after it ended (the budget's)."""
        value: int = self._budget_or("retained_memory", 0)
        return value

    # ------------------------------------------- the engine's layout, shown, not copied

    @property
    def block_size(self) -> int:
        """Tokens per block (after any raise by the engine)."""
        return self.layout.block_size

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes on the rank that limits the pool."""
        return self.layout.block_bytes

    @property
    def num_blocks(self) -> int:
        """The engine's block count (vLLM's ``num_gpu_blocks``)."""
        return self.layout.num_blocks

    @property
    def kv_tokens(self) -> int:
        """The tokens the engine logs ("GPU KV cache size: N tokens")."""
        return self.layout.kv_tokens

    @property
    def max_model_len(self) -> int:
        """The longest request, tokens (after a ``-1`` auto-fit)."""
        return self.layout.max_model_len

    @property
    def blocks_per_request(self) -> int:
        """Blocks one request of ``max_model_len`` takes."""
        return self.layout.blocks_per_request

    @property
    def max_concurrency(self) -> float:
        """The engine's "Maximum concurrency" figure (0 for a plan that does not fit)."""
        return self.layout.max_concurrency

    @property
    def max_running_requests(self) -> int | None:
        """The engine's cap on running requests, where it has one (SGLang)."""
        return self.layout.max_running_requests

    @property
    def groups(self) -> tuple[KVGroup, ...]:
        """The engine's KV-cache groups."""
        return self.layout.groups

    @property
    def stage_blocks(self) -> tuple[int, ...]:
        """Each pipeline stage's block count before the minimum."""
        return self.layout.stage_blocks

    @property
    def engine_notes(self) -> tuple[str, ...]:
        """Rules the engine applied, one sentence each."""
        return self.layout.notes

