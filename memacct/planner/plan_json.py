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

from memacct._attrs import ReadOnly
from memacct.engines.base import KVGroup
from memacct.models import non_kv_sum

if TYPE_CHECKING:
    from memacct.engines.base import KVLayout
    from memacct.planner.budget import MemoryBudget

__all__ = ["BUDGET_VIEWS", "FLAT_KEYS", "LAYOUT_VIEWS", "PlanFigures", "flat_plan", "nested_plan"]

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

    total_memory = ReadOnly[int | None](
        "budget.total_memory", "Device memory, bytes (the budget's; ``None`` without one)."
    )
    gpu_memory_utilization = ReadOnly[float | None](
        "budget.gpu_memory_utilization",
        "The fraction of ``total_memory`` asked for (the budget's).",
    )
    non_kv_cache_memory = ReadOnly[int](
        "budget.non_kv_cache_memory",
        "Everything charged besides the KV cache (the budget's one sum; 0 without).",
        empty=0,
    )
    weights_memory = ReadOnly[int](
        "budget.weights_memory", "The model's weights (the budget's).", empty=0
    )
    activation_peak = ReadOnly[int](
        "budget.activation_peak", "The profile run's activation peak (the budget's).", empty=0
    )
    non_allocator_increase = ReadOnly[int](
        "budget.non_allocator_increase",
        "Memory outside the allocator gained since the baseline (the budget's).",
        empty=0,
    )
    cudagraph_memory = ReadOnly[int](
        "budget.cudagraph_memory", "The CUDA-graph memory charged (the budget's).", empty=0
    )
    retained_memory = ReadOnly[int](
        "budget.retained_memory",
        "Memory a profile region kept after it ended (the budget's).",
        empty=0,
    )

    # ------------------------------------------- the engine's layout, shown, not copied

    block_size = ReadOnly[int](
        "layout.block_size", "Tokens per block (after any raise by the engine)."
    )
    block_bytes = ReadOnly[int](
        "layout.block_bytes", "Bytes one block takes on the rank that limits the pool."
    )
    num_blocks = ReadOnly[int](
        "layout.num_blocks", "The engine's block count (vLLM's ``num_gpu_blocks``)."
    )
    kv_tokens = ReadOnly[int](
        "layout.kv_tokens", 'The tokens the engine logs ("GPU KV cache size: N tokens").'
    )
    max_model_len = ReadOnly[int](
        "layout.max_model_len", "The longest request, tokens (after a ``-1`` auto-fit)."
    )
    blocks_per_request = ReadOnly[int](
        "layout.blocks_per_request", "Blocks one request of ``max_model_len`` takes."
    )
    max_concurrency = ReadOnly[float](
        "layout.max_concurrency",
        'The engine\'s "Maximum concurrency" figure (0 for a plan that does not fit).',
    )
    max_running_requests = ReadOnly[int | None](
        "layout.max_running_requests",
        "The engine's cap on running requests, where it has one (SGLang).",
    )
    groups = ReadOnly[tuple[KVGroup, ...]]("layout.groups", "The engine's KV-cache groups.")
    stage_blocks = ReadOnly[tuple[int, ...]](
        "layout.stage_blocks", "Each pipeline stage's block count before the minimum."
    )
    engine_notes = ReadOnly[tuple[str, ...]](
        "layout.notes", "Rules the engine applied, one sentence each."
    )


def _views(holder: str) -> dict[str, str]:
    """The figures :class:`PlanFigures` shows from its ``holder``: plan's name -> holder's."""
    return {name: figure.path[1] for name, figure in vars(PlanFigures).items()
            if isinstance(figure, ReadOnly) and figure.path[0] == holder}  # fmt: skip


LAYOUT_VIEWS: dict[str, str] = _views("layout")
"""The plan's name of each figure it shows from its layout -> the layout's name."""

BUDGET_VIEWS = tuple(_views("budget"))
"""The figures the plan shows from its budget (0, or ``None`` for the first two, without)."""
