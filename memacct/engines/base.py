"""The interface every engine implements: its KV-cache manager and its start-up model.

An engine is data plus small functions (:class:`Engine`). Its KV-cache manager
(:class:`KVManager`) turns a model's per-layer KV-cache geometry
(:class:`~memacct.model.spec.KVCacheSpec`) and a byte budget into the
engine's own numbers: the KV-cache groups (:class:`KVGroup`), the block count,
the tokens and the concurrency it would log (:class:`KVLayout`), or the
refusal it would raise, with its estimate of the largest length that fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt

from memacct.checks import FROZEN
from memacct.models import non_kv_sum

if TYPE_CHECKING:
    from memacct.engines.deployment import Deployment
    from memacct.model.config import ModelConfig
    from memacct.model.spec import KVCacheSpec
    from memacct.model.weights.estimate import WeightEstimate

__all__ = [
    "Engine",
    "KVBlock",
    "KVGroup",
    "KVLayout",
    "KVManager",
    "KVSettings",
    "StartupEstimate",
    "StartupModel",
    "StartupRequest",
    "StartupSettings",
    "reference_batch",
]


def reference_batch() -> tuple[int, int]:
    """``vllm serve``'s (max_num_batched_tokens, max_num_seqs) on the reference device
    (:data:`memacct.devices.REFERENCE_DEVICE`): what a KV plan with no device assumes."""
    from memacct.devices import DEVICE_INFO, REFERENCE_DEVICE
    from memacct.engines.vllm.defaults import batch_defaults

    reference = DEVICE_INFO[REFERENCE_DEVICE]
    return batch_defaults(reference.total_bytes, reference.name)


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
            then keep extra state blocks in vLLM; SGLang's radix cache).
        engine_options: engine-specific options, named as the engine's own
            flags are (SGLang: ``swa_full_tokens_ratio``, ``mamba_ssm_dtype``,
            ``max_running_requests``); the engine refuses a name it has not.
    """

    model_config = FROZEN

    block_size: int = Field(default=16, gt=0)
    max_model_len: int = Field(ge=-1)
    derived_max_model_len: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int = Field(default_factory=lambda: reference_batch()[0], gt=0)
    max_num_seqs: int = Field(default_factory=lambda: reference_batch()[1], gt=0)
    async_scheduling: bool = True
    enable_prefix_caching: bool = True
    engine_options: dict[str, float | int | str] = Field(default_factory=dict)


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
        max_running_requests: the engine's cap on running requests, where it
            has one (SGLang); ``max_concurrency`` never exceeds it.
        tensor_pages: bytes per block of each KV-cache tensor the engine
            allocates on the limiting rank (a tensor holds ``num_blocks`` of
            them); empty where the engine's tensors are not modelled (then
            one tensor per layer is assumed).
    """

    model_config = FROZEN

    engine: str
    engine_version: str
    budget_bytes: NonNegativeInt
    block_size: PositiveInt
    block_bytes: PositiveInt
    num_blocks: NonNegativeInt
    stage_blocks: tuple[int, ...] = ()
    max_model_len: PositiveInt
    blocks_per_request: PositiveInt
    kv_tokens: NonNegativeInt
    max_concurrency: float = Field(ge=0.0)
    groups: tuple[KVGroup, ...] = ()
    notes: tuple[str, ...] = ()
    tensor_pages: tuple[int, ...] = ()
    max_running_requests: PositiveInt | None = None

    @property
    def used_bytes(self) -> int:
        """Bytes of the budget the blocks take on the limiting rank."""
        return self.num_blocks * self.block_bytes

    @property
    def request_bytes(self) -> int:
        """Bytes one request of ``max_model_len`` takes from the pool."""
        return self.blocks_per_request * self.block_bytes


@dataclass(frozen=True)
class KVBlock:
    """One block of an engine's KV pool, whatever the budget (vLLM's ``page_size_bytes``).

    Attributes:
        block_size: tokens per block the engine uses (after any raise, e.g. vLLM's for
            Mamba hybrids).
        block_bytes: bytes one block takes on the rank that limits the pool (the widest
            pipeline stage): what a budget is divided by.
        tensor_pages: bytes per block of each KV-cache tensor the engine allocates on
            that rank (empty where its tensors are not modelled), as
            :attr:`KVLayout.tensor_pages`.
    """

    block_size: int
    block_bytes: int
    tensor_pages: tuple[int, ...] = ()


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

    def block(self, spec: KVCacheSpec, settings: KVSettings) -> KVBlock:
        """One block of the pool :meth:`plan` would build for ``spec`` under ``settings``:
        its tokens and bytes, the same for every budget."""
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
        startup: the engine's start-up model (see ``docs/engines.md``); every engine
            memacct plans has one.
        default_device: the device preset an offline plan that names none is made for
            (:data:`memacct.devices.REFERENCE_DEVICE`, an H100, for the GPU engines; an
            Ascend part for the Ascend-only engines), by a single plan and a capacity plan
            alike.
    """

    name: str
    version: str
    kv: KVManager
    startup: StartupModel
    default_device: str = "h100-80gb"


@dataclass(frozen=True)
class StartupRequest:
    """What an engine's start-up estimate is asked about: one rank of ``config`` on a device
    of ``total_memory`` bytes named ``device_name``, under ``settings`` (``None``: the
    engine's defaults), with ``weights`` when known already (e.g. from a checkpoint), and
    the plan's own reading of the model (``model``, ``spec``: the KV-cache spec for these
    settings' TP and KV dtype) so the estimate does not read it again."""

    config: Mapping[str, Any]
    total_memory: int
    device_name: str = ""
    settings: StartupSettings | None = None
    weights: WeightEstimate | None = None
    model: ModelConfig | None = None
    spec: KVCacheSpec | None = None


@dataclass(frozen=True)
class StartupSettings:
    """The engine settings a start-up depends on (``None``: the engine's default)."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    charge_cudagraphs: bool | None = None
    mxfp4_layout: str | None = None
    engine_version: str | None = None
    sampler: str | None = None
    """The dummy sampler's top-k/top-p path (:data:`memacct.engines.vllm.releases.SAMPLERS`);
    ``None``: the release's default (:func:`memacct.engines.vllm.releases.default_sampler`)."""
    flashinfer_sampler_env: bool | None = None
    """``VLLM_USE_FLASHINFER_SAMPLER`` as the engine sees it (``None``: unset); used only
    when ``sampler`` is ``None``."""
    deployment: Deployment | None = None
    """The ``vllm serve`` settings beyond these (quantization, LoRA, speculative decoding,
    expert/data/pipeline parallelism, CPU offload, multimodal limits); ``None``: defaults."""


@dataclass(frozen=True)
class StartupEstimate:
    """One rank right before the KV cache is allocated, and the KV budget the engine computes.

    All sizes in bytes. ``kv_cache_bytes`` may be negative: the engine then
    refuses to start.
    """

    engine: str
    version: str
    total_memory: int
    gpu_memory_utilization: float
    activation_peak: int
    non_allocator_increase: int
    cudagraph_memory: int
    cudagraph_charged: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    weights: WeightEstimate
    notes: tuple[str, ...] = field(default=())
    sampler: str = ""
    """The top-k/top-p path charged for the dummy sampler run
    (:data:`memacct.engines.vllm.releases.SAMPLERS`; vllm-ascend: ``native``; ``""``: the
    engine has no such choice)."""
    kv_spec: KVCacheSpec | None = None
    """The KV-cache spec the engine builds when it differs from the model's own (a drafter's
    layers in the pool, a pipeline stage's layers); ``None``: the model's."""

    @property
    def requested_memory(self) -> int:
        """What the engine lets this rank hold in all, bytes: ``total_memory x
        gpu_memory_utilization`` (vLLM's and vllm-mindspore's requested memory; SGLang's
        ``mem_fraction_static`` share), the one rule of every engine here."""
        return int(self.total_memory * self.gpu_memory_utilization)

    @property
    def weights_memory(self) -> int:
        """The weights on this rank."""
        return self.weights.total_bytes

    @property
    def kv_cache_bytes(self) -> int:
        """The engine's KV budget: the requested memory less everything else it holds."""
        return self.requested_memory - self.non_kv_cache_memory

    @property
    def non_kv_cache_memory(self) -> int:
        """Weights + activation peak + non-torch growth (+ graphs where charged)."""
        graphs = self.cudagraph_memory if self.cudagraph_charged else 0
        return non_kv_sum(self.weights_memory, self.activation_peak, self.non_allocator_increase,
                          graphs)


class StartupModel:
    """An engine's start-up as it bears on memory (``engines/<name>/startup.py``): each
    engine subclasses it and implements :meth:`start`; :meth:`estimate` is the one
    signature every engine and caller share."""

    name: str
    version: str

    def defaults(self, total_memory: int, device_name: str,
                 version: tuple[int, int] | None = None) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine picks on this device (for the
        engine release ``version`` where its defaults change between releases)."""
        raise NotImplementedError

    def batch(
        self,
        total_memory: int,
        device_name: str,
        max_num_batched_tokens: int | None = None,
        max_num_seqs: int | None = None,
        version: tuple[int, int] | None = None,
        *,
        max_model_len: int | None = None,
    ) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine runs with on this device when
        it is given these (``None``: its default) for requests of ``max_model_len``: the one
        rule every plan path follows. Each unset one takes :meth:`defaults`'s value through
        :meth:`default_tokens` and :meth:`default_seqs`, which an engine whose defaults
        depend on each other or on the length overrides (vLLM clamps a defaulted
        ``max_num_seqs``; vllm-mindspore's V0 batch covers a request)."""
        d_tokens, d_seqs = self.defaults(total_memory, device_name, version)
        tokens = max_num_batched_tokens or self.default_tokens(d_tokens, max_model_len)
        return tokens, max_num_seqs or self.default_seqs(d_seqs, tokens)

    def default_tokens(self, tokens: int, max_model_len: int | None) -> int:
        """A defaulted ``max_num_batched_tokens`` from the device's default ``tokens``; here
        the default itself."""
        return tokens

    def default_seqs(self, seqs: int, tokens: int) -> int:
        """A defaulted ``max_num_seqs`` from the device's default ``seqs`` and the batch's
        ``tokens``; here the default itself."""
        return seqs

    def settings(self, **common: Any) -> StartupSettings:
        """The engine's settings from the common ones (``gpu_memory_utilization`` ``None``:
        the engine's default; SGLang reads it as ``mem_fraction_static``)."""
        raise NotImplementedError

    def sampler_cost(
        self, seqs: int, version: tuple[int, int] | None, sampler: str | None
    ) -> tuple[int, int] | None:
        """(bytes per logit besides the model-dtype logits, fixed bytes) the profile run's
        sampler holds over ``seqs`` rows; ``None`` here, for an engine whose profile run
        samples nothing (SGLang, vllm-mindspore)."""
        return None

    def sampler_peak(
        self,
        spec: KVCacheSpec,
        config: Mapping[str, Any] | ModelConfig,
        seqs: int,
        version: tuple[int, int] | None = None,
        sampler: str | None = None,
    ) -> int:
        """Bytes the profile run's sampler holds over ``seqs`` rows of the whole vocabulary:
        the model-dtype logits plus :meth:`sampler_cost`'s bytes per logit and fixed bytes
        (0 for an engine whose profile run samples nothing)."""
        cost = self.sampler_cost(seqs, version, sampler)
        if cost is None:
            return 0
        per_logit, extra = cost
        vocab = int(spec.vocab_size or 0)
        return seqs * vocab * ((spec.dtype_bytes or 2) + per_logit) + extra

    def estimate(
        self,
        config: Mapping[str, Any],
        *,
        total_memory: int,
        device_name: str = "",
        settings: StartupSettings | None = None,
        weights: WeightEstimate | None = None,
        model: ModelConfig | None = None,
        spec: KVCacheSpec | None = None,
    ) -> StartupEstimate:
        """One rank before the KV cache: weights, activation, non-torch, graphs, KV budget.

        Args:
            config: the model's ``config.json``.
            total_memory: the device's total memory as the runtime reports it.
            device_name: the device's name (selects the engine's defaults and
                the MXFP4 kernel layout).
            settings: the engine's settings; ``None`` fields take its defaults.
            weights: the weights when known already (e.g. from a checkpoint).
            model: ``config`` already read (:class:`~memacct.model.config.ModelConfig`).
            spec: the KV-cache spec of ``config`` for ``settings`` (TP, KV dtype), built.

        Raises:
            InvalidInputError: a setting out of range.
            ConfigError: the config lacks a size the estimate needs.
        """
        return self.start(StartupRequest(config, total_memory, device_name, settings, weights,
                                         model, spec))

    def start(self, request: StartupRequest) -> StartupEstimate:
        """The engine's own estimate of :meth:`estimate`'s ``request``."""
        raise NotImplementedError
