"""SGLang's start-up, as it bears on memory.

SGLang sizes its KV pool from the memory left after loading the weights
(``python/sglang/srt/model_executor/model_runner.py``, ``profile_max_num_token``)::

    rest = free memory after the weights - total x (1 - mem_fraction_static)
    max_total_num_tokens = rest // cell_size

(SGLang 0.5.23: ``python/sglang/srt/mem_cache/kv_cache_configurator.py``,
``_profile_available_bytes``: the free memory after loading less
``pre_model_load_memory x (1 - mem_fraction_static)``, where
``pre_model_load_memory`` is the free memory measured before loading, after the
CUDA context and NCCL exist), so the pool is ``(total - context) x
mem_fraction_static - weights``. Activations, CUDA graphs and the sampler live in
the ``1 - mem_fraction_static`` share, which SGLang does not profile; instead it
picks the fraction from the GPU's size (:func:`default_mem_fraction_static`).
Sources in ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from memacct.engines.base import StartupEstimate, StartupRequest, StartupSettings
from memacct.engines.deployment import Deployment
from memacct.engines.sglang.options import SGLANG_VERSION, check_kv_cache_dtype
from memacct.engines.sglang.speculative import (
    draft_kv_layers,
    draft_weight_bytes,
    sglang_algorithm,
    with_draft_pool,
)
from memacct.engines.vllm.startup import BatchDefaults
from memacct.errors import InvalidInputError
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import WeightEstimate, estimate_weights
from memacct.units import GiB, MiB

__all__ = [
    "CONTEXT_BYTES",
    "DEFAULT_MEM_FRACTION_STATIC",
    "STARTUP",
    "VLM_CACHE_BYTES",
    "SglangStartup",
    "default_batch",
    "default_mem_fraction_static",
    "prefill_graph_sizes",
]

DEFAULT_MEM_FRACTION_STATIC = 0.88
"""The fraction assumed only where the device's size is unknown (SGLang itself then takes
0.95 on CUDA); otherwise :func:`default_mem_fraction_static` computes SGLang's own."""

CONTEXT_BYTES = (round(0.5 * GiB), round(1.05 * GiB))
"""Memory SGLang's process holds before it measures ``pre_model_load_memory`` (CUDA
context; plus NCCL and custom all-reduce buffers under TP): estimates, not yet checked
against a log."""

VLM_CACHE_BYTES = 100 * MiB
"""``SGLANG_VLM_CACHE_SIZE_MB``'s default (``environ.py``), which ``mm_runtime_reservation_gb``
(``kv_cache_configurator.py``) takes out of a multimodal model's KV budget (the feature
transport's pool only with ``--mm-feature-transport cuda_ipc/cuda_vmm``, not modelled)."""

MiB_F = float(MiB)


def default_batch(gpu_mem_mib: float, tensor_parallel_size: int = 1) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, decode CUDA-graph max_bs) for a GPU of this many MiB.

    ``python/sglang/srt/arg_groups/memory_hook.py`` (``handle_gpu_memory_settings``,
    SGLang 0.5.23): below 20 GiB 2048 tokens and 8; below 35 GiB 4096 and 48 (160 at TP 4
    or more); below 60 GiB 4096 and 32 (160); below 90 GiB and below 160 GiB 8192 and 256
    (512); above, 16384 and 512.
    """
    wide = tensor_parallel_size >= 4
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 160 if wide else 48
    if gpu_mem_mib < 60 * 1024:
        return 4096, 160 if wide else 32
    if gpu_mem_mib < 160 * 1024:
        return 8192, 512 if wide else 256
    return 16384, 512


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang captures breakable prefill CUDA graphs for, up to ``max_tokens``.

    ``generate_prefill_cuda_graph_batch_sizes`` (``arg_groups/cuda_graph_hook.py``): every
    4 from 4 to 32, 16 to 256, 32 to 512, 64 to 1024, 256 to 4096, then every 512.
    """
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [x for x in sizes if x <= max_tokens]


def default_mem_fraction_static(
    gpu_mem_mib: float,
    *,
    tensor_parallel_size: int = 1,
    chunked_prefill_size: int | None = None,
    cuda_graphs: bool = True,
    mla: bool = False,
    vision_config: Mapping[str, Any] | None = None,
) -> float:
    """The ``mem_fraction_static`` SGLang picks when none is given (SGLang 0.5.23, CUDA).

    ``handle_gpu_memory_settings`` reserves, in MiB, 512 + 1.5 x max(chunked_prefill_size,
    2048) for activations, TP / 8 x 1024 for parallel buffers, and for CUDA graphs 2 x the
    decode max_bs plus 8 per captured prefill size (1.5 GiB instead with MLA attention);
    at least 10 GiB on a GPU above 60 GiB. The fraction is ``round((gpu_mem - reserved) /
    gpu_mem, 3)``, scaled down for a vision tower (``adjust_mem_fraction_for_vlm``).
    Pipeline parallelism, DP attention, DeepEP and post-capture KV sizing (off by default)
    are not modelled.

    Args:
        gpu_mem_mib: the GPU's memory in MiB (SGLang reads ``nvidia-smi``'s total).
        tensor_parallel_size: TP degree.
        chunked_prefill_size: the prefill chunk; ``None``: SGLang's default for the GPU.
        cuda_graphs: graphs on (``--disable-cuda-graph`` off).
        mla: the model uses multi-head latent attention (DeepSeek-V2/V3 style).
        vision_config: the model's ``vision_config``, if it has one.
    """
    chunk_default, decode_max_bs = default_batch(gpu_mem_mib, tensor_parallel_size)
    chunk = chunked_prefill_size or chunk_default
    reserved = 512 + max(chunk, 2048) * 1.5 + tensor_parallel_size / 8 * 1024
    if cuda_graphs:
        reserved += decode_max_bs * 2
        prefill_max = min(8192, chunk) if mla else chunk
        reserved += 1.5 * 1024 if mla else len(prefill_graph_sizes(prefill_max)) * 8
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    if vision_config is not None:
        layers = int(vision_config.get("num_hidden_layers", 24))
        width = int(vision_config.get("hidden_size", 1024))
        ratio = layers * width**2 / (24 * 1024**2)
        factor = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
        fraction *= 0.95 * factor
    return fraction


@dataclass(frozen=True)
class SglangSettings(StartupSettings):
    """SGLang's settings: ``gpu_memory_utilization`` is ignored, ``mem_fraction_static`` used."""

    mem_fraction_static: float | None = None


class SglangStartup(BatchDefaults):
    """SGLang's start-up model."""

    name = "sglang"
    version = SGLANG_VERSION

    def settings(self, **common: Any) -> SglangSettings:
        """SGLang's settings: its one budget knob, ``mem_fraction_static``, is the common
        ``gpu_memory_utilization`` (``None``: SGLang's own fraction for the GPU)."""
        fraction = common.pop("gpu_memory_utilization", None)
        return SglangSettings(mem_fraction_static=fraction, **common)

    # sampler_peak: StartupModel's 0, as SGLang does not profile a sampler run (its
    # activations live outside the pool).

    def start(self, request: StartupRequest) -> StartupEstimate:
        """The KV pool SGLang allocates on one rank.

        Raises:
            InvalidInputError: ``mem_fraction_static`` out of (0, 1), or a KV dtype SGLang
                has no name for (``fp8``).
        """
        config, total_memory = request.config, request.total_memory
        device_name = request.device_name
        s = request.settings or SglangSettings()
        check_kv_cache_dtype(s.kv_cache_dtype)
        tp = s.tensor_parallel_size
        gpu_mem = total_memory / MiB_F
        chunk_default, _max_bs = default_batch(gpu_mem, tp)
        fraction = getattr(s, "mem_fraction_static", None)
        notes: list[str] = []
        if fraction is None:
            vision = config.get("vision_config")
            fraction = default_mem_fraction_static(
                gpu_mem,
                tensor_parallel_size=tp,
                chunked_prefill_size=s.max_num_batched_tokens,
                cuda_graphs=not s.enforce_eager,
                mla=config.get("kv_lora_rank") is not None,
                vision_config=vision if isinstance(vision, Mapping) else None,
            )
            notes.append(
                f"SGLang's default mem_fraction_static on this GPU: {fraction:.3f} (from its "
                "size, chunked prefill and CUDA graphs; pass the value SGLang logs if it differs)"
            )
        if not 0 < fraction < 1:
            raise InvalidInputError(
                f"gpu_memory_utilization (SGLang's mem_fraction_static) must be in (0, 1) "
                f"for SGLang, got {fraction!r}: give e.g. 0.85"
            )
        weights = request.weights
        if weights is None:
            weights = estimate_weights(request.model or config, tensor_parallel_size=tp)
        context = CONTEXT_BYTES[0] if tp == 1 else CONTEXT_BYTES[1]
        # The pool is (free before loading) x fraction - weights, and the free memory before
        # loading is the total less the context: total x fraction - weights - context x fraction.
        held = round(context * fraction)
        if isinstance(config.get("vision_config"), Mapping):
            # mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB of the KV budget is kept for
            # the multimodal embedding cache allocated after the pool is sized.
            held += VLM_CACHE_BYTES
            notes.append(
                f"multimodal: {VLM_CACHE_BYTES // MiB} MiB of the KV budget kept for the "
                "embedding cache (SGLANG_VLM_CACHE_SIZE_MB)"
            )
        _tokens, seqs = self.defaults(total_memory, device_name)
        notes.append(f"mem_fraction_static {fraction:.3f}: activations and graphs use the rest")
        weights, kv_spec = _with_draft(request, s, weights, notes)
        return StartupEstimate(
            engine=self.name,
            version=self.version,
            total_memory=total_memory,
            gpu_memory_utilization=fraction,
            activation_peak=0,
            non_allocator_increase=held,
            cudagraph_memory=0,
            cudagraph_charged=False,
            max_num_batched_tokens=s.max_num_batched_tokens or chunk_default,
            max_num_seqs=s.max_num_seqs or seqs,
            weights=weights,
            notes=tuple(notes),
            kv_spec=kv_spec,
        )


def _with_draft(
    request: StartupRequest, s: StartupSettings, weights: WeightEstimate, notes: list[str]
) -> tuple[WeightEstimate, KVCacheSpec | None]:
    """The weights with the draft's, and the KV spec with its layers in the cell
    (:mod:`memacct.engines.sglang.speculative`); ``(weights, None)`` without a draft.

    Raises:
        InvalidInputError: a deployment setting other than ``--speculative-config``, or a
            draft memacct does not plan for SGLang.
    """
    d = s.deployment
    if d is None or d.is_default:
        return weights, None
    plain = Deployment()
    other = [f.name for f in fields(d) if f.name != "speculative"
             and getattr(d, f.name) != getattr(plain, f.name)]  # fmt: skip
    if other or d.speculative is None:
        raise InvalidInputError(
            f"{', '.join('--' + n.replace('_', '-') for n in other)}: memacct plans SGLang "
            "with --speculative-config only among these settings: drop them"
        )
    spec, config, tp = d.speculative, request.config, s.tensor_parallel_size
    algorithm = sglang_algorithm(spec)
    target = request.spec or KVCacheSpec.from_hf_config(
        dict(config), kv_cache_dtype=s.kv_cache_dtype, tensor_parallel_size=tp)
    layers = draft_kv_layers(config, spec)
    kv_spec = with_draft_pool(target, layers)
    draft = draft_weight_bytes(config, spec, tensor_parallel_size=tp)
    roles = {**weights.by_role, "draft": draft}
    weights = replace(weights, by_role=roles, total_bytes=weights.total_bytes + draft)
    notes.append(
        f"speculative decoding ({algorithm}): the draft's weights ({draft / GiB:.2f} GiB, "
        f"its own embedding and LM head still held when the pool is sized) and {layers} "
        "draft layer(s) in the KV cell; max_running_requests 48 unless given"
    )
    return weights, (kv_spec if layers else None)


STARTUP = SglangStartup()
"""SGLang's start-up model, for ``Engine(startup=...)``."""
