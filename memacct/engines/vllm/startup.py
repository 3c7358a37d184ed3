"""vLLM's start-up, as it bears on memory: what one rank holds before the KV cache.

vLLM (V1 engine; rules of the release in :data:`VERSION`) sizes the KV cache
of each worker as (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``)::

    kv_cache_bytes = total x gpu_memory_utilization
                     - weights - activation peak - non-torch growth - CUDA-graph estimate

:func:`estimate_startup` computes every term offline, without a device:

* **weights**: :func:`memacct.planner.weights.estimate_weights` (the engine's
  per-rank sharding and quantized layouts);
* **activation peak** of the profile run (``gpu_model_runner.py``,
  ``profile_run``): a dummy forward over ``max_num_batched_tokens`` tokens,
  then the dummy sampler over ``max_num_seqs`` rows of logits with top-k and
  top-p on. The sampler's peak is a number of bytes per (row x vocabulary
  entry) on every rank (the logits are gathered whole under TP), which is why
  it grows with the vocabulary, not the model. How many depends on the
  top-k/top-p implementation the release picks (:data:`SAMPLERS`,
  :func:`default_sampler`): PyTorch's sort, vLLM's Triton kernel or FlashInfer;
* **non-torch growth**: memory outside PyTorch's allocator that appears after
  the engine's own baseline snapshot (NCCL and custom all-reduce buffers
  under TP, FlashInfer's all-reduce fusion workspace), by release and TP:
  :func:`non_torch_bytes`;
* **CUDA graphs**: the pool of the largest captured batch, charged by
  default as vLLM 0.33 does and zero with ``enforce_eager``.

Defaults follow ``vllm serve`` per device class when the user sets none
(``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``). Sources and
measurements of each term are in ``docs/engines.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memacct.checks import check_fraction, check_int
from memacct.engines.forward import ForwardPass
from memacct.engines.trace import trace_peak
from memacct.errors import InvalidInputError
from memacct.planner.config import _Config
from memacct.planner.spec import KVCacheSpec
from memacct.planner.weights import WeightEstimate, estimate_weights, mxfp4_padding
from memacct.units import GiB, MiB

__all__ = [
    "ALLREDUCE_FUSION_SINCE",
    "CUDAGRAPH_CHARGED_SINCE",
    "FLASHINFER_SAMPLER_DEFAULT_SINCE",
    "NON_TORCH_TP1_BYTES",
    "NON_TORCH_TP1_BYTES_0_18",
    "NON_TORCH_TP1_RISE_SINCE",
    "NON_TORCH_TP_BYTES",
    "NON_TORCH_TP_FUSED_BYTES",
    "SAMPLERS",
    "SAMPLER_BYTES_PER_LOGIT",
    "SAMPLER_FLASHINFER_BYTES_PER_LOGIT",
    "SAMPLER_TRITON_BYTES_PER_LOGIT",
    "TRITON_SAMPLER_SINCE",
    "VERSION",
    "StartupEstimate",
    "StartupSettings",
    "VllmStartup",
    "allreduce_fusion_on",
    "batch_defaults",
    "capture_sizes",
    "default_sampler",
    "flashinfer_allreduce_workspace_bytes",
    "full_capture_sizes",
    "non_torch_bytes",
    "parse_version",
    "trace_peak",
]

VERSION = "0.33"

SAMPLER_BYTES_PER_LOGIT = 36
"""Bytes per logit the dummy sampler holds at its peak, besides the model-dtype logits.

The sort path (``sampler="sort"``; ``vllm/v1/sample/ops/topk_topp_sampler.py``,
``apply_top_k_top_p`` in vLLM 0.8-0.16): the float32 logits (4), the sorted values (4)
and their int64 indices (8), the top-k and top-p masks (1 + 1), the softmax over the
sorted values (4), and the sort's own scratch (14, the part measured rather than read:
seven vLLM 0.11 start-ups on H100 with max_num_seqs 1024 measured 37.4-38.9 bytes
per logit in all, docs/accuracy.md).
"""

SAMPLERS = ("sort", "triton", "flashinfer")
"""The top-k/top-p implementations vLLM's dummy sampler run can take (``sampler`` setting):
PyTorch's sort (``apply_top_k_top_p`` in PyTorch), vLLM's Triton kernel
(``apply_top_k_top_p_triton``, 0.17 on, for 8 rows or more) and FlashInfer's
``top_k_top_p_sampling_from_logits`` (``forward_cuda``)."""

SAMPLER_FLASHINFER_BYTES_PER_LOGIT = 12
"""The same on the FlashInfer path (``sampler="flashinfer"``): the sampler's float32 copy of
the logits (4; temperature divides it in place), and inside FlashInfer's
``top_k_top_p_sampling_from_logits`` (``flashinfer/sampling.py``, 0.2.11-0.7.x, order
``top_k_first``) the float32 masked logits ``top_k_mask_logits`` returns (4) and their
softmax (4), alive together while ``top_p_sampling_from_probs`` draws one int32 token per row.
No sort, no int64 indices."""

FLASHINFER_SAMPLER_DEFAULT_SINCE = (0, 21)
"""``VLLM_USE_FLASHINFER_SAMPLER`` defaults to on from vLLM 0.21 (``vllm/envs.py``;
vllm-project/vllm#40376), where FlashInfer is a dependency (``requirements/cuda.txt``) and
the GPU's compute capability is 7.5-12.1. In 0.9-0.11.0 vLLM sampled with FlashInfer
whenever it was installed (it was an optional extra, but vLLM's Docker image installs it);
0.11.1-0.20 only with ``VLLM_USE_FLASHINFER_SAMPLER=1`` (vllm-project/vllm#26859)."""

NON_TORCH_TP1_BYTES = round(0.13 * GiB)
"""Non-torch growth after vLLM's baseline on one GPU before 0.18 (kernel modules loaded on
first use, cuBLAS/attention workspaces; not a size in vLLM's code): 0.13 GiB measured on
H100 by vLLM 0.11 for five models of 0.6B-32B, and by 0.15-0.17 for Qwen3-14B."""

NON_TORCH_TP1_BYTES_0_18 = round(0.25 * GiB)
"""The same from vLLM 0.18 on (:data:`NON_TORCH_TP1_RISE_SINCE`): 0.24-0.25 GiB measured on
H100 by 0.18 (Qwen3-14B) and by 0.19 for four models of 7B-9B. Carried to 0.33 unmeasured."""

NON_TORCH_TP1_RISE_SINCE = (0, 18)
"""The first release logging the higher one-GPU figure (llm-d-planner's release table)."""

NON_TORCH_TP_BYTES = round(0.55 * GiB)
"""The same under tensor parallelism without the all-reduce + RMSNorm fusion (NCCL
connections set up by the profile run's first collectives): 0.54-0.55 GiB measured at
TP2 on H100 by vLLM 0.11 (Qwen3-32B, Llama-3.3-70B). NCCL's own buffers are no size in
vLLM's code; vLLM's custom all-reduce and symmetric-memory buffers are made before the
baseline snapshot (``init_worker_distributed_environment`` runs first in ``init_device``),
so they are not in it."""

NON_TORCH_TP_FUSED_BYTES = round(2.10 * GiB)
"""Under tensor parallelism with the all-reduce + RMSNorm fusion on
(:func:`allreduce_fusion_on`): 2.06-2.21 GiB (median 2.10) measured on H100 by vLLM 0.19
for Llama-3.1-8B, Qwen2.5-7B and Llama-3.3-70B-FP8 at TP2 and TP4. The fusion pass
creates FlashInfer's all-reduce workspace while the profile run compiles, after the
baseline; its own size (:func:`flashinfer_allreduce_workspace_bytes`) is 0.03-0.5 GiB and
does not follow the logged figure (TP4 with a 34 MiB workspace logs more than TP2 with a
514 MiB one), so the rest is measured, not derived. Carried to 0.33 unmeasured."""

ALLREDUCE_FUSION_SINCE = (0, 17)
"""The all-reduce + RMSNorm fusion (``fuse_allreduce_rms``) is on by default at the default
optimization level for TP > 1 on compute capability 9.0 and 10.x with FlashInfer installed
(``vllm/config/vllm.py``, ``enable_allreduce_rms_fusion``, in 0.17.0, 0.19.0 and 0.33; off
by default in 0.11.0 as ``enable_fi_allreduce_fusion``). Releases 0.12-0.16 were not read."""

SAMPLER_TRITON_BYTES_PER_LOGIT = 12
"""The same on the Triton top-k/top-p path (vllm-project/vllm#33538, from the February 2026
releases on, for batches of 8 or more): the kernel masks the float32 logits in place, then
``random_sample`` holds the float32 logits (4), their softmax (4) and the exponential draws
of the same shape (4), plus :data:`SAMPLER_TRITON_BUFFER_BYTES`."""

SAMPLER_TRITON_BUFFER_BYTES = 80 * MiB
"""The Triton top-k/top-p kernel's own buffers ("around ~80MiB of extra VRAM",
vllm-project/vllm#33538)."""

TRITON_SAMPLER_SINCE = (0, 17)
"""The first release whose ``apply_top_k_top_p`` routes 8 rows or more through the Triton
kernel (``vllm/v1/sample/ops/topk_topp_triton.py`` first ships in v0.17.0; v0.16.0 has none)."""

CUDAGRAPH_CHARGED_SINCE = (0, 21)
"""vLLM charges its CUDA-graph estimate by default since v0.21.0 (its start-up log says so)."""

GRAPH_BYTES_PER_LAYER_WIDTH = 36
"""Per captured graph, bytes per (layer x hidden unit): its kernels' parameter buffers and
the outputs it keeps. Qwen3-0.6B (28 x 1024) grew 0.10 GiB capturing 102 graphs in vLLM 0.11;
vLLM 0.21 estimated 0.52 GiB for Qwen3-8B (36 x 4096) and 86 graphs: 35-40 bytes each."""


def parse_version(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a release such as ``0.11.0``, ``0.11.x`` or ``v0.6.5.dev``; else None."""
    if not isinstance(text, str):
        return None
    match = re.match(r"\s*v?(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def allreduce_fusion_on(version: tuple[int, int] | None, tensor_parallel_size: int,
                        device_name: str) -> bool:
    """Whether vLLM turns its all-reduce + RMSNorm fusion on by default
    (:data:`ALLREDUCE_FUSION_SINCE`): TP > 1 on a Hopper (9.0) or data-centre Blackwell (10.x)
    GPU. The RTX 5090 (12.0) and earlier GPUs (A100, L40S, ...) do not get it."""
    if tensor_parallel_size <= 1 or (version is not None and version < ALLREDUCE_FUSION_SINCE):
        return False
    name = device_name.lower()
    if "5090" in name or "rtx" in name:
        return False
    return _device_class(device_name) in ("hopper", "blackwell")


def flashinfer_allreduce_workspace_bytes(
    tensor_parallel_size: int, hidden_size: int, max_tokens: int, dtype_bytes: int = 2
) -> int:
    """One rank's FlashInfer TRT-LLM all-reduce fusion workspace (``flashinfer/comm/trtllm_ar.py``,
    ``trtllm_create_ipc_workspace_for_all_reduce_fusion``, flashinfer 0.6.6 as vLLM 0.19 pins
    it): a buffer of TP x tokens x hidden x 2 bytes, a flag area of TP x 256 x 4 bytes and three
    Lamport buffers of TP x tokens x hidden x ``dtype_bytes``, each rounded up to 2 MiB.
    ``max_tokens`` is the fusion's cap (vLLM: its per-TP size limit over hidden x 2 bytes,
    at most max_num_batched_tokens). For reference: the measured TP figure exceeds it."""
    def up(n: int) -> int:
        return -(-n // (2 * MiB)) * 2 * MiB
    tp, tokens = tensor_parallel_size, max_tokens
    return (
        up(tp * tokens * hidden_size * 2)
        + up(tp * 256 * 4)
        + up(3 * min(tp * tokens * hidden_size * dtype_bytes, 2147483647 & ~(2 * MiB - 1)))
    )


def non_torch_bytes(version: tuple[int, int] | None, tensor_parallel_size: int,
                    device_name: str = "") -> int:
    """Non-torch growth after vLLM's baseline snapshot on one rank, by release and TP
    (``None``: :data:`VERSION`'s rules). See the constants' notes and docs/engines.md."""
    v = version if version is not None else parse_version(VERSION)
    if tensor_parallel_size > 1:
        if allreduce_fusion_on(v, tensor_parallel_size, device_name):
            return NON_TORCH_TP_FUSED_BYTES
        return NON_TORCH_TP_BYTES
    if v is not None and v >= NON_TORCH_TP1_RISE_SINCE:
        return NON_TORCH_TP1_BYTES_0_18
    return NON_TORCH_TP1_BYTES


def default_sampler(
    version: tuple[int, int] | None,
    *,
    flashinfer_env: bool | None = None,
    device_name: str = "",
) -> str:
    """The top-k/top-p path vLLM's dummy sampler takes by default in a release (:data:`SAMPLERS`).

    ``vllm/v1/sample/ops/topk_topp_sampler.py`` (``TopKTopPSampler.__init__``) and
    ``vllm/envs.py`` per release:

    * 0.8.x: the sort (its check turns FlashInfer off for flashinfer 0.2.3 and later);
    * 0.9-0.11.0: FlashInfer when the ``flashinfer`` package is installed, which a pip
      install of vLLM does not do (an optional extra): the sort;
    * 0.11.1-0.16: the sort; 0.17-0.20: the Triton kernel (FlashInfer is opt-in);
    * 0.21 on: FlashInfer (on by default, a dependency) on NVIDIA GPUs; the Triton
      kernel on AMD (ROCm takes the native path unless AITER is on).

    Args:
        version: the release, ``(major, minor)``; ``None``: memacct's :data:`VERSION`.
        flashinfer_env: ``VLLM_USE_FLASHINFER_SAMPLER`` as set (``True`` for ``1``,
            ``False`` for ``0``), ``None`` when unset. ``1`` selects FlashInfer (in
            0.9-0.11.0 it must also be installed); ``0`` the native path.
        device_name: the device's name; AMD devices (``mi…``) take the native path.
    """
    version = version or parse_version(VERSION)
    assert version is not None
    native = "triton" if version >= TRITON_SAMPLER_SINCE else "sort"
    if flashinfer_env is False or device_name.lower().startswith("mi"):
        return native
    if flashinfer_env is True:
        return "flashinfer"
    return "flashinfer" if version >= FLASHINFER_SAMPLER_DEFAULT_SINCE else native


def check_sampler(sampler: str | None) -> str | None:
    """``sampler`` as given, or ``None`` ("auto"); an unknown name raises InvalidInputError."""
    if sampler is None or sampler == "auto":
        return None
    if sampler not in SAMPLERS:
        raise InvalidInputError(
            f"sampler {sampler!r} is not one vLLM has: give one of "
            f"{', '.join(SAMPLERS)} or auto (the release's default)"
        )
    return sampler


def batch_defaults(total_memory: int, device_name: str) -> tuple[int, int]:
    """``vllm serve``'s (max_num_batched_tokens, max_num_seqs) for a device.

    ``vllm/engine/arg_utils.py`` (``EngineArgs.get_batch_defaults``): 8192
    tokens and 1024 sequences on a device of at least 70 GiB that is not an
    A100 (H100, H200, B200, MI300X), else 2048 and 256.
    """
    if total_memory >= 70 * GiB and "a100" not in device_name.lower():
        return 8192, 1024
    return 2048, 256


def capture_sizes(max_num_seqs: int) -> list[int]:
    """The batch sizes vLLM captures piecewise CUDA graphs for by default.

    1, 2, 4, then every 8 up to 256 and every 16 above, up to
    ``min(2 x max_num_seqs, 512)`` (``vllm/config/compilation.py``). vLLM logs them as
    "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)".
    """
    largest = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return [s for s in sizes if s <= largest]


def full_capture_sizes(max_num_seqs: int) -> list[int]:
    """The decode batch sizes captured as full graphs (``FULL_AND_PIECEWISE``, the default).

    The piecewise sizes that do not exceed ``max_num_seqs`` (a decode step has one
    token per request): 35 sizes for 256 sequences, as vLLM logs them.
    """
    return [s for s in capture_sizes(max_num_seqs) if s <= max_num_seqs]


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
    """The dummy sampler's top-k/top-p path (:data:`SAMPLERS`); ``None``: the release's
    default (:func:`default_sampler`)."""
    flashinfer_sampler_env: bool | None = None
    """``VLLM_USE_FLASHINFER_SAMPLER`` as the engine sees it (``None``: unset); used only
    when ``sampler`` is ``None``."""


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
    requested_memory: int
    activation_peak: int
    non_allocator_increase: int
    cudagraph_memory: int
    cudagraph_charged: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    weights: WeightEstimate
    notes: tuple[str, ...] = field(default=())
    sampler: str = ""
    """The top-k/top-p path charged for the dummy sampler run (:data:`SAMPLERS`; vllm-ascend:
    ``native``; ``""``: the engine has no such choice)."""

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
        return self.weights_memory + self.activation_peak + self.non_allocator_increase + graphs


def _device_class(device_name: str) -> str:
    name = device_name.lower()
    if any(k in name for k in ("h100", "h200", "h800", "h20")):
        return "hopper"
    if any(k in name for k in ("b200", "b100", "gb200", "rtx-5090", "blackwell")):
        return "blackwell"
    return "marlin"


class BatchDefaults:
    """``defaults``: vLLM's per-device batch defaults (:func:`batch_defaults`), which SGLang's
    chunked-prefill size and running-request cap follow too."""

    def defaults(self, total_memory: int, device_name: str) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine picks on this device."""
        return batch_defaults(total_memory, device_name)


class VllmStartup(BatchDefaults):
    """vLLM's start-up model (V1 engine).

    Attributes:
        name: the engine's name.
        version: the vLLM release whose rules this follows.
        sampler_bytes_per_logit: bytes per logit of the dummy sampler besides the
            model-dtype logits, where :attr:`cuda_sampler` is off.
        non_torch: (one GPU, tensor parallel) non-torch growth where fixed; ``None``:
            vLLM's rules per release and TP (:func:`non_torch_bytes`).
    """

    name = "vllm"
    version = VERSION
    sampler_bytes_per_logit = SAMPLER_BYTES_PER_LOGIT
    non_torch: tuple[int, int] | None = None
    graphs = True
    cuda_sampler = True
    """Whether the dummy sampler takes vLLM's CUDA top-k/top-p paths (:data:`SAMPLERS`);
    otherwise it holds :attr:`sampler_bytes_per_logit` per logit."""

    def estimate(
        self,
        config: Mapping[str, Any],
        *,
        total_memory: int,
        device_name: str = "",
        settings: StartupSettings | None = None,
        weights: WeightEstimate | None = None,
    ) -> StartupEstimate:
        """Estimate one rank's start-up on a device of ``total_memory`` bytes.

        Args:
            config: the model's ``config.json``.
            total_memory: the device's total memory as the runtime reports it.
            device_name: the device's name (selects the engine's defaults and
                the MXFP4 kernel layout).
            settings: the engine's settings; ``None`` fields take its defaults.
            weights: the weights when known already (e.g. from a checkpoint).

        Raises:
            InvalidInputError: a setting out of range.
            ConfigError: the config lacks a size the estimate needs.
        """
        s = settings or StartupSettings()
        check_fraction("gpu_memory_utilization", s.gpu_memory_utilization)
        check_int("total_memory", total_memory)
        notes: list[str] = []
        d_tokens, d_seqs = self.defaults(total_memory, device_name)
        tokens = s.max_num_batched_tokens or d_tokens
        seqs = s.max_num_seqs or d_seqs
        defaulted = [
            f"{name} {value}"
            for name, value, given in (
                ("max_num_batched_tokens", d_tokens, s.max_num_batched_tokens),
                ("max_num_seqs", d_seqs, s.max_num_seqs),
            )
            if given is None
        ]
        if defaulted:
            notes.append(f"{self.name} defaults on this device: {', '.join(defaulted)}")
        layout = s.mxfp4_layout or _device_class(device_name)
        if weights is None:
            weights = estimate_weights(
                config, tensor_parallel_size=s.tensor_parallel_size, mxfp4_pad=mxfp4_padding(layout)
            )
        spec = KVCacheSpec.from_hf_config(
            dict(config),
            kv_cache_dtype=_kv_dtype(config, s.kv_cache_dtype),
            tensor_parallel_size=s.tensor_parallel_size,
        )
        version = parse_version(s.engine_version) or parse_version(self.version)
        sampler = check_sampler(s.sampler) or default_sampler(
            version, flashinfer_env=s.flashinfer_sampler_env, device_name=device_name
        )
        if s.sampler is None and self.cuda_sampler:
            note = self.sampler_note(sampler, version, s.flashinfer_sampler_env)
            notes.append(f"dummy sampler: {note}")
        activation = self.activation_peak(config, spec, tokens, seqs, s, version, sampler)
        tp = s.tensor_parallel_size
        if self.non_torch is None:
            non_torch = non_torch_bytes(version, tp, device_name)
        else:
            non_torch = self.non_torch[0] if tp == 1 else self.non_torch[1]
        graphs = (
            0
            if (s.enforce_eager or not self.graphs)
            else self.cudagraph_memory(config, spec, seqs, tokens, s)
        )
        requested = int(total_memory * s.gpu_memory_utilization)
        charge = s.charge_cudagraphs
        if charge is None:
            charge = version is None or version >= CUDAGRAPH_CHARGED_SINCE
        charged = charge and graphs > 0
        return StartupEstimate(
            engine=self.name,
            version=s.engine_version or self.version,
            total_memory=total_memory,
            gpu_memory_utilization=s.gpu_memory_utilization,
            requested_memory=requested,
            activation_peak=activation,
            non_allocator_increase=non_torch,
            cudagraph_memory=graphs,
            cudagraph_charged=charged,
            max_num_batched_tokens=tokens,
            max_num_seqs=seqs,
            weights=weights,
            notes=tuple(notes),
            sampler=sampler if self.cuda_sampler else "native",
        )

    def _workload(
        self, config: Mapping[str, Any], spec: KVCacheSpec, tokens: int, seqs: int
    ) -> ForwardPass:
        return ForwardPass(spec, config, max_num_batched_tokens=tokens, max_num_seqs=seqs)

    def sampler_note(
        self, sampler: str, version: tuple[int, int] | None, flashinfer_env: bool | None = None
    ) -> str:
        """One line saying which top-k/top-p path is charged, why, and how to change it."""
        release = ".".join(map(str, version)) if version else self.version
        if flashinfer_env is not None:
            why = f"VLLM_USE_FLASHINFER_SAMPLER={int(flashinfer_env)}"
        else:
            why = f"vLLM {release}'s default"
            if version is not None and (0, 9) <= version <= (0, 11) and sampler == "sort":
                why += "; FlashInfer where flashinfer is installed, as in vLLM's Docker image"
        return f"{sampler} ({why}); --sampler if the engine's log names another path"

    def sampler_peak(
        self,
        spec: KVCacheSpec,
        config: Mapping[str, Any],
        seqs: int,
        version: tuple[int, int] | None = None,
        sampler: str | None = None,
    ) -> int:
        """Bytes the dummy sampler holds at its peak over ``seqs`` rows of the whole vocabulary.

        The model-dtype logits ``compute_logits`` returns stay referenced by the dummy run,
        so every path holds them plus its own bytes per logit: :data:`SAMPLER_BYTES_PER_LOGIT`
        (sort), :data:`SAMPLER_TRITON_BYTES_PER_LOGIT` and the kernel's buffers (Triton, 8
        rows or more; fewer rows take the sort) or :data:`SAMPLER_FLASHINFER_BYTES_PER_LOGIT`
        (FlashInfer). ``sampler`` ``None``: the release's default.
        """
        vocab = int(spec.vocab_size or 0)
        logits_dtype = spec.dtype_bytes or 2
        if not self.cuda_sampler:
            return seqs * vocab * (logits_dtype + self.sampler_bytes_per_logit)
        version = version or parse_version(self.version)
        sampler = sampler or default_sampler(version)
        per_logit, extra = SAMPLER_BYTES_PER_LOGIT, 0
        if sampler == "flashinfer":
            per_logit = SAMPLER_FLASHINFER_BYTES_PER_LOGIT
        elif sampler == "triton" and seqs >= 8:
            per_logit, extra = SAMPLER_TRITON_BYTES_PER_LOGIT, SAMPLER_TRITON_BUFFER_BYTES
        return seqs * vocab * (logits_dtype + per_logit) + extra

    def activation_peak(
        self,
        config: Mapping[str, Any],
        spec: KVCacheSpec,
        tokens: int,
        seqs: int,
        s: StartupSettings,
        version: tuple[int, int] | None = None,
        sampler: str | None = None,
    ) -> int:
        """The profile run's peak: the larger of the forward pass and the sampler after it."""
        work = self._workload(config, spec, tokens, seqs)
        forward = trace_peak(work.step_trace(tokens, min(seqs, tokens)))
        hidden = tokens * spec.hidden_size * (spec.dtype_bytes or 2)
        # The dummy run has one request per token at most: min(max_num_seqs, tokens) rows.
        rows = min(seqs, tokens)
        return max(forward, hidden + self.sampler_peak(spec, config, rows, version, sampler))

    def cudagraph_memory(
        self,
        config: Mapping[str, Any],
        spec: KVCacheSpec,
        seqs: int,
        tokens: int,
        s: StartupSettings,
    ) -> int:
        """The graph pool: the forward of the largest captured batch, plus each graph's overhead.

        Graphs are captured largest first into one shared pool, so the pool
        holds the activations of the largest batch; each graph, piecewise or
        full, adds its own small buffers. vLLM charges its own estimate of this
        by default since v0.21 ("CUDA graph memory profiling is enabled (default
        since v0.21.0)" in its start-up log).
        """
        sizes = capture_sizes(seqs)
        graphs = len(sizes) + len(full_capture_sizes(seqs))
        largest = min(max(sizes), tokens)
        work = self._workload(config, spec, max(tokens, largest), max(seqs, largest))
        pool = trace_peak(work.forward_trace(largest, largest))
        per_graph = GRAPH_BYTES_PER_LAYER_WIDTH * spec.num_layers * spec.hidden_size
        return pool + graphs * per_graph


def _kv_dtype(config: Mapping[str, Any], kv_cache_dtype: str) -> str:
    """vLLM's ``auto`` for a config that names no dtype: it serves such models in bfloat16."""
    if kv_cache_dtype.strip().lower() != "auto":
        return kv_cache_dtype
    cfg = _Config(config, "config.json")
    if cfg.get("torch_dtype") is None and cfg.get("dtype") is None:
        quant = cfg.get("quantization_config")
        if isinstance(quant, Mapping) and quant.get("kv_cache_quant_algo"):
            return kv_cache_dtype
        return "bfloat16"
    if str(cfg.get("torch_dtype") or cfg.get("dtype")).lower() in (
        "float32",
        "torch.float32",
    ):
        return "bfloat16"
    return kv_cache_dtype


STARTUP = VllmStartup()
"""vLLM's start-up model, for ``Engine(startup=...)``."""


def with_settings(settings: StartupSettings, **changes: Any) -> StartupSettings:
    """A copy of ``settings`` with ``changes`` applied."""
    return replace(settings, **changes)
