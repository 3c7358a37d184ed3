"""The interface every engine implements: its KV-cache manager and its start-up model.

An engine is data plus small functions (:class:`Engine`). Its KV-cache manager
(:class:`KVManager`) turns a model's per-layer KV-cache geometry
(:class:`~memacct.planner.spec.KVCacheSpec`) and a byte budget into the
engine's own numbers: the KV-cache groups (:class:`KVGroup`), the block count,
the tokens and the concurrency it would log (:class:`KVLayout`), or the
refusal it would raise, with its estimate of the largest length that fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from memacct.checks import FROZEN

if TYPE_CHECKING:
    from memacct.planner.spec import KVCacheSpec

__all__ = ["Engine", "KVGroup", "KVLayout", "KVManager", "KVSettings", "StartupModel"]



class KVSettings(BaseModel):
    """The engine options a KV-cache plan depends on.

    Attributes:
        block_size: tokens per block as asked for (engines may raise it, e.g.
            vLLM for Mamba hybrids).
        max_model_len: the longest request, tokens; ``-1`` asks the engine to
            fit the longest length the budget holds (vLLM's auto-fit).
        derived_max_model_len: the model's own longest length (the config's
            ``max_position_embeddings``); the ceiling of an auto-fit.
        max_num_batched_tokens: tokens one scheduler step may process.
        max_num_seqs: sequences one step may hold (no effect on vLLM's plan).
        async_scheduling: whether the scheduler runs one step ahead.
        enable_prefix_caching: whether prefix caching is on (Mamba groups
            then keep extra state blocks in vLLM).
    """

    model_config = FROZEN

    block_size: int = Field(default=16, gt=0)
    max_model_len: int = Field(ge=-1)
    derived_max_model_len: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    max_num_seqs: int = Field(default=1024, gt=0)
    async_scheduling: bool = True
    enable_prefix_caching: bool = True


class KVGroup(BaseModel):
    """One KV-cache group: layers that share a block table.

    Attributes:
        kind: ``"full"``, ``"sliding"``, ``"chunked"``, ``"mla"``, ``"mamba"``
            (Mamba, gated delta net and other linear-attention state) or
            ``"swa_pool"``/``"full_pool"`` for SGLang's pools.
        layers: the model's layer indices in the group (all stages).
        page_bytes: bytes of one block of one layer of the group, on one rank.
        block_size: tokens per block of the group.
        window: the sliding window, tokens (``None`` for other kinds).
        chunk: the attention chunk, tokens (chunked local attention only).
        blocks_per_request: blocks one request of ``max_model_len`` takes
            from the shared pool for this group.
    """

    model_config = FROZEN

    kind: str
    layers: tuple[int, ...]
    page_bytes: int = Field(ge=0)
    block_size: int = Field(gt=0)
    window: int | None = Field(default=None, gt=0)
    chunk: int | None = Field(default=None, gt=0)
    blocks_per_request: int = Field(ge=0)


class KVLayout(BaseModel):
    """An engine's KV cache for one budget: what it allocates and what it logs.

    Attributes:
        engine: the engine's name.
        engine_version: the release its rules come from.
        budget_bytes: the KV-cache budget of each rank, bytes.
        block_size: tokens per block the engine uses (after any raise).
        block_bytes: bytes one block takes on the rank that limits the pool.
        num_blocks: the engine's block count (vLLM's ``num_gpu_blocks``, the
            minimum over pipeline stages; SGLang: pool tokens / page size).
        stage_blocks: each pipeline stage's block count before the minimum.
        max_model_len: the longest request, tokens (after an auto-fit).
        blocks_per_request: blocks one request of ``max_model_len`` takes.
        kv_tokens: the tokens the engine logs ("GPU KV cache size: N tokens").
        max_concurrency: requests of ``max_model_len`` that fit at once, as logged.
        groups: the KV-cache groups.
        notes: rules applied that a reader would not guess, one sentence each.
        tensor_pages: bytes per block of each KV-cache tensor the engine
            allocates on the limiting rank (a tensor holds ``num_blocks`` of
            them); empty where the engine's tensors are not modelled (then
            one tensor per layer is assumed).
    """

    model_config = FROZEN

    engine: str
    engine_version: str
    budget_bytes: int = Field(ge=0)
    block_size: int = Field(gt=0)
    block_bytes: int = Field(gt=0)
    num_blocks: int = Field(ge=0)
    stage_blocks: tuple[int, ...] = ()
    max_model_len: int = Field(gt=0)
    blocks_per_request: int = Field(gt=0)
    kv_tokens: int = Field(ge=0)
    max_concurrency: float = Field(ge=0.0)
    groups: tuple[KVGroup, ...] = ()
    notes: tuple[str, ...] = ()
    tensor_pages: tuple[int, ...] = ()

    @property
    def used_bytes(self) -> int:
        """Bytes of the budget the blocks take on the limiting rank."""
        return self.num_blocks * self.block_bytes

    @property
    def request_bytes(self) -> int:
        """Bytes one request of ``max_model_len`` takes from the pool."""
        return self.blocks_per_request * self.block_bytes


@runtime_checkable
class KVManager(Protocol):
    """An engine's KV-cache manager, as rules plus small functions.

    ``plan`` raises :class:`~memacct.errors.InsufficientMemoryError` (with
    ``estimated_max_model_len`` set to the engine's own estimate) exactly when
    the engine would refuse to start.
    """

    name: str
    version: str
    default_block_size: int

    def plan(self, spec: KVCacheSpec, budget_bytes: int, settings: KVSettings) -> KVLayout:
        """The engine's KV cache for ``budget_bytes`` of cache on each rank."""
        ...

    def resize(self, layout: KVLayout, num_blocks: int) -> KVLayout:
        """``layout`` with ``num_blocks`` blocks (ranks agreeing on the fewest)."""
        ...

    def log_lines(self, layout: KVLayout) -> list[str]:
        """The lines the engine logs about this KV cache, in its words."""
        ...


@dataclass(frozen=True)
class Engine:
    """One serving engine, as data plus small functions.

    Attributes:
        name: the engine's name (``"vllm"``, ``"vllm-ascend"``, ``"sglang"``).
        version: the engine release whose code the rules were taken from.
        kv: the engine's KV-cache manager (see ``docs/engines.md``).
        startup: the engine's start-up model (see ``docs/engines.md``), or
            ``None`` where memacct does not model it.
    """

    name: str
    version: str
    kv: KVManager
    startup: Any = None


class StartupModel(Protocol):
    """An engine's start-up as it bears on memory (``engines/<name>/startup.py``)."""

    name: str
    version: str

    def defaults(self, total_memory: int, device_name: str) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine picks on this device."""
        ...

    def estimate(
        self,
        config: Mapping[str, Any],
        *,
        total_memory: int,
        device_name: str = "",
        settings: Any = None,
        weights: Any = None,
    ) -> Any:
        """One rank before the KV cache: weights, activation, non-torch, graphs, KV budget."""
        ...
