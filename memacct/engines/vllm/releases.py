"""vLLM's rules that changed between releases: the dummy sampler's top-k/top-p path, the
measured parts of the non-torch growth after vLLM's baseline snapshot (the sum of named terms
is :mod:`memacct.engines.vllm.nontorch`), and the release number itself.

Split from :mod:`memacct.engines.vllm.startup`; importers take these names from here. Sources and
measurements of each constant are in its docstring and in docs/engines.md.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from memacct.errors import InvalidInputError
from memacct.units import GiB, MiB

if TYPE_CHECKING:
    from memacct.devices import DeviceInfo

__all__ = [
    "ALLREDUCE_FUSION_SINCE",
    "FLASHINFER_CAPABILITY_CHECK_SINCE",
    "FLASHINFER_SAMPLER_DEFAULT_SINCE",
    "FLASHINFER_WHEN_INSTALLED",
    "NON_TORCH_TP1_BYTES",
    "NON_TORCH_TP1_BYTES_0_18",
    "NON_TORCH_TP1_RISE_SINCE",
    "NON_TORCH_TP_BYTES",
    "NON_TORCH_TP_FUSED_BYTES",
    "SAMPLERS",
    "SAMPLER_BYTES_PER_LOGIT",
    "SAMPLER_FLASHINFER_BYTES_PER_LOGIT",
    "SAMPLER_TRITON_BUFFER_BYTES",
    "SAMPLER_TRITON_BYTES_PER_LOGIT",
    "TRITON_SAMPLER_SINCE",
    "VERSION",
    "allreduce_fusion_on",
    "check_sampler",
    "default_sampler",
    "device_class",
    "flashinfer_allreduce_workspace_bytes",
    "parse_release",
    "parse_version",
    "sampler_note",
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
the GPU's compute capability is 7.5-12.1. 0.11.1-0.20 sample with FlashInfer only with
``VLLM_USE_FLASHINFER_SAMPLER=1`` (vllm-project/vllm#26859) although the wheel requires
``flashinfer-python`` from 0.11.1 on; 0.9-0.11.0: :data:`FLASHINFER_WHEN_INSTALLED`."""

FLASHINFER_WHEN_INSTALLED = ((0, 9, 0), (0, 11, 0))
"""The releases (first, last) whose V1 sampler takes FlashInfer whenever ``flashinfer.sampling``
imports and the variable is unset (``TopKTopPSampler.__init__`` in
``vllm/v1/sample/ops/topk_topp_sampler.py`` of 0.10.1.1 and 0.11.0: ``None`` reads as on,
logging "Using FlashInfer for top-p & top-k sampling."; the dummy run's top-k and top-p
tensors and empty ``generators`` keep ``forward_cuda`` on FlashInfer's kernel). Their wheels
list flashinfer only as the ``flashinfer`` extra (``Requires-Dist: flashinfer-python==0.2.11;
extra == "flashinfer"`` in 0.10.1.1, ``==0.3.1`` in 0.11.0), while the release's image
``vllm/vllm-openai`` installs it (``docker/Dockerfile``; flashinfer-ai/flashinfer#1180 shows
the image logging the line and ``lmcache/vllm-openai``, built without it, falling back).
memacct takes the image as the default install: FlashInfer on an NVIDIA GPU; a pip install
without the extra samples with the sort (``--sampler sort``)."""

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
"""The same under tensor parallelism without the all-reduce + RMSNorm fusion, measured:
0.54-0.55 GiB at TP2 on H100 by vLLM 0.11 (Qwen3-32B, Llama-3.3-70B). Charged whole on boards
whose NCCL sizes memacct does not derive (PCIe, NVLink bridges, Blackwell, AMD); on an
NVSwitch Hopper board the figure is the sum of named terms
(:func:`memacct.engines.vllm.nontorch.non_torch_terms`), which puts 0.60 GiB on those logs."""

NON_TORCH_TP_FUSED_BYTES = round(2.10 * GiB)
"""Under tensor parallelism with the all-reduce + RMSNorm fusion on
(:func:`allreduce_fusion_on`): 2.06-2.21 GiB (median 2.10) measured on H100 by vLLM 0.19
for Llama-3.1-8B, Qwen2.5-7B and Llama-3.3-70B-FP8 at TP2 and TP4. Charged whole where the
board is not derived (as :data:`NON_TORCH_TP_BYTES`); on an NVSwitch Hopper board the
fusion's own part is :data:`memacct.engines.vllm.nontorch.ALLREDUCE_FUSION_MEASURED_BYTES`.
FlashInfer's workspace (:func:`flashinfer_allreduce_workspace_bytes`) is 0.03-0.5 GiB and
does not follow the logged figure (TP4 with a 34 MiB workspace logs more than TP2 with a
514 MiB one), so the fusion's part is measured, not derived. Carried to 0.33 unmeasured."""

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

def parse_version(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a release such as ``0.11.0``, ``0.11.x`` or ``v0.6.5.dev``; else None."""
    if not isinstance(text, str):
        return None
    match = re.match(r"\s*v?(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_release(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release string; a patch that is not a number (``0.11.x``) or
    is missing reads as 0, the minor's first release. None where :func:`parse_version` is."""
    version = parse_version(text)
    if version is None or text is None:
        return None
    match = re.match(r"\s*v?\d+\.\d+\.(\d+)", text)
    return (*version, int(match.group(1)) if match else 0)


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
    return device_class(device_name) in ("hopper", "blackwell")


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


def default_sampler(
    version: tuple[int, int] | None,
    *,
    flashinfer_env: bool | None = None,
    device_name: str = "",
    release: str | None = None,
) -> str:
    """The top-k/top-p path vLLM's dummy sampler takes by default in a release (:data:`SAMPLERS`).

    ``vllm/v1/sample/ops/topk_topp_sampler.py`` (``TopKTopPSampler.__init__``) and
    ``vllm/envs.py`` per release, with the release's default install:

    * 0.8.x: the sort (its check turns FlashInfer off for flashinfer 0.2.3 and later);
    * 0.9.0-0.11.0: FlashInfer, which the release's ``vllm/vllm-openai`` image installs
      (:data:`FLASHINFER_WHEN_INSTALLED`; a bare ``pip install vllm`` lacks it: the sort);
    * 0.11.1-0.16: the sort; 0.17-0.20: the Triton kernel (FlashInfer is opt-in);
    * 0.21 on: FlashInfer (on by default, a dependency) on NVIDIA GPUs; the Triton
      kernel on AMD (ROCm takes the native path unless AITER is on);
    * 0.21 on, the Triton kernel on an NVIDIA GPU FlashInfer's sampler refuses
      (:data:`FLASHINFER_CAPABILITY_CHECK_SINCE`: below compute capability 7.5, e.g. V100;
      0.33: below 8.0 or 16 SMs or fewer, :attr:`memacct.devices.DeviceInfo.flashinfer_sampler`:
      T4, V100, Jetson AGX Orin), and ``VLLM_USE_FLASHINFER_SAMPLER=1`` there is refused, as
      vLLM raises.

    On AMD GPUs (``current_platform.is_cuda()`` is false on ROCm) every release before 0.17
    takes the sort.

    Args:
        version: the release, ``(major, minor)``; ``None``: memacct's :data:`VERSION`.
        flashinfer_env: ``VLLM_USE_FLASHINFER_SAMPLER`` as set (``True`` for ``1``,
            ``False`` for ``0``), ``None`` when unset. ``1`` selects FlashInfer (in
            0.9-0.11.0 it must also be installed); ``0`` the native path.
        device_name: the device's name; AMD devices (a preset of vendor ``amd``, or a name
            ``mi…``) take the native path.
        release: the release as written (``0.11.1``), for the rules that changed within a
            minor (0.11.0 to 0.11.1); ``None`` or no patch: the minor's first release.
    """
    version = version or parse_version(VERSION)
    assert version is not None
    full = parse_release(release) if parse_version(release) == version else None
    full = full or (*version, 0)
    native = "triton" if version >= TRITON_SAMPLER_SINCE else "sort"
    from memacct.devices import DEVICE_INFO

    info = DEVICE_INFO.get(device_name)
    amd = info.vendor == "amd" if info is not None else device_name.lower().startswith("mi")
    unsupported, needs = _flashinfer_refused(info, version)
    if flashinfer_env is True and unsupported and not amd:
        assert info is not None
        raise InvalidInputError(
            f"VLLM_USE_FLASHINFER_SAMPLER=1: vLLM {version[0]}.{version[1]} refuses FlashInfer's "
            f"sampler on the {info.label} (compute capability {info.compute_capability}, it "
            f"needs {needs}); unset it"
        )
    if flashinfer_env is False or amd or unsupported:
        return native
    if flashinfer_env is True:
        return "flashinfer"
    first, last = FLASHINFER_WHEN_INSTALLED
    if first <= full <= last or version >= FLASHINFER_SAMPLER_DEFAULT_SINCE:
        return "flashinfer"
    return native


FLASHINFER_CAPABILITY_CHECK_SINCE = (0, 21)
"""From 0.21 ``TopKTopPSampler.__init__`` asks ``FlashInferBackend.supports_compute_capability``
(``vllm/v1/attention/backends/flashinfer.py``: 7.5-12.1 in 0.21.0) and falls back to the
native path where it says no, raising instead when ``VLLM_USE_FLASHINFER_SAMPLER=1`` is set;
0.33 raises the floor to 8.0 and adds the SM count
(:attr:`memacct.devices.DeviceInfo.flashinfer_sampler`). 0.22-0.32 were not read: they take
0.21's range."""


def _flashinfer_refused(info: DeviceInfo | None, version: tuple[int, int]) -> tuple[bool, str]:
    """Whether the release's sampler refuses FlashInfer on this preset, and what it needs."""
    if info is None or info.vendor != "nvidia" or version < FLASHINFER_CAPABILITY_CHECK_SINCE:
        return False, ""
    if version >= (0, 33):
        return not info.flashinfer_sampler, "8.0-12.1 and more than 16 SMs"
    cc = info.compute_capability
    return cc is not None and not (7, 5) <= cc <= (12, 1), "7.5-12.1"


def sampler_note(sampler: str, version: tuple[int, int], flashinfer_env: bool | None = None,
                 release: str | None = None) -> str:
    """One line saying which top-k/top-p path is charged, why, and how to change it."""
    name = release or ".".join(map(str, version))
    if flashinfer_env is not None:
        why = f"VLLM_USE_FLASHINFER_SAMPLER={int(flashinfer_env)}"
    else:
        why = f"vLLM {name}'s default"
        full = parse_release(release) or (*version, 0)
        first, last = FLASHINFER_WHEN_INSTALLED
        if first <= full <= last and sampler == "flashinfer":
            why += (" with its vllm/vllm-openai image, which installs flashinfer; a pip install"
                    " without the flashinfer extra takes the sort (--sampler sort)")
    return f"{sampler} ({why}); --sampler if the engine's log names another path"


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


def device_class(device_name: str) -> str:
    name = device_name.lower()
    if any(k in name for k in ("h100", "h200", "h800", "h20")):
        return "hopper"
    if any(k in name for k in ("b200", "b100", "gb200", "rtx-5090", "blackwell")):
        return "blackwell"
    return "marlin"
