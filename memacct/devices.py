"""Device presets: the usable memory of real accelerators, by name.

Offline planning (``memacct plan --device``) and the simulated device both size
a device from these figures. Sources of each figure are in ``docs/devices.md``.

A figure is the device total the runtime reports (``torch.cuda.mem_get_info()[1]``,
``torch.npu.mem_get_info()[1]``), below the marketed size because the driver
keeps part of the memory. ``reading`` figures were printed by a real device (a
vLLM start-up log or a PyTorch out-of-memory message); ``derived`` ones are the
``nvidia-smi``/``npu-smi`` total less the driver's typical share, or a spec
sheet's size times a sibling reading's share (:mod:`memacct.device_table`), where no
reading was found. :func:`resolve_device` also accepts short names (``h100``,
``rtx4090``, ``910b4``) and a size (``24GiB``) for any other device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from memacct.checks import check_int
from memacct.device_table import EXTRA_PRESETS
from memacct.errors import InvalidInputError
from memacct.units import GiB, format_gib, parse_size

__all__ = [
    "DEVICE_INFO",
    "DEVICE_PRESETS",
    "REFERENCE_DEVICE",
    "ROCM_QUANTIZATIONS",
    "VENDOR_RESOURCES",
    "DeviceInfo",
    "check_device",
    "check_quantization",
    "memory_notes",
    "parse_memory_size",
    "resolve_device",
]

_GIB = GiB


@dataclass(frozen=True)
class DeviceInfo:
    """One device preset.

    Attributes:
        name: the preset name (``<device>-<marketed size>gb``).
        total_bytes: the usable total the runtime reports.
        label: the device as people call it.
        kind: ``reading`` (printed by a real device) or ``derived``.
        source: where the figure comes from (details in ``docs/devices.md``).
        aliases: short names that select it.
        vendor: ``nvidia``, ``amd`` or ``ascend`` (whose engines and kernels run on it).
        compute_capability: an NVIDIA part's CUDA compute capability, ``(9, 0)`` for
            Hopper; ``None`` elsewhere. What the engines may run there follows from it
            (:attr:`fp8_weights`, :attr:`mxfp4_layout`), never from the device's name.
        unified_memory: the GPU's memory is the system memory its CPU and OS share (CUDA
            calls it integrated: DGX Spark, Jetson); engines read its free memory from the
            OS (:func:`memory_notes`).
        hbm_numa_node: the GPU has memory of its own that the OS also sees as a NUMA node
            (GH200, GB200: coherent NVLink-C2C), so the OS's page cache may take part of it.
        gfx_arch: an AMD part's gfx architecture as ROCm names it (``gfx942``); what vLLM's
            ROCm build does there follows from it (:attr:`fp8_dtype`, :attr:`fp8_weights`).
        multiprocessors: the GPU's SM count where it is 16 or fewer (Jetson AGX Orin), which
            keeps vLLM off FlashInfer's sampler (:attr:`flashinfer_sampler`); ``None``: more.
        plugin_resource: the Kubernetes device plugin's resource name for this part where it
            is not its vendor's (:attr:`device_resource`); ``""``: the vendor's.
    """

    name: str
    total_bytes: int
    label: str
    kind: str
    source: str
    aliases: tuple[str, ...] = ()
    vendor: str = "nvidia"
    compute_capability: tuple[int, int] | None = None
    unified_memory: bool = False
    hbm_numa_node: bool = False
    gfx_arch: str | None = None
    multiprocessors: int | None = None
    plugin_resource: str = ""

    @property
    def device_resource(self) -> str:
        """The resource a pod requests this device by: :attr:`plugin_resource`, else the
        vendor's device plugin's (:data:`VENDOR_RESOURCES`)."""
        return self.plugin_resource or VENDOR_RESOURCES[self.vendor]

    @property
    def mxfp4_layout(self) -> str:
        """vLLM's MXFP4 MoE kernel layout here: ``hopper`` (SM 9.x), ``blackwell`` (SM 10 and
        later) or ``marlin`` (every other part; see
        :func:`memacct.model.weights.estimate.mxfp4_padding`)."""
        cc = self.compute_capability or (0, 0)
        return "blackwell" if cc >= (10, 0) else ("hopper" if cc[0] == 9 else "marlin")

    @property
    def fp8_weights(self) -> bool:
        """Whether vLLM runs FP8 checkpoints here: natively from Ada/Hopper (SM 8.9) on,
        weight-only through its FP8 Marlin kernels on Ampere (SM 8.0, vLLM docs
        ``features/quantization/fp8.md``), on AMD CDNA and RDNA 3/4 parts (by ``gfx_arch``);
        not on Turing or Volta (T4, V100) nor on Ascend NPUs (vllm-ascend quantizes to int8)."""
        if self.vendor == "nvidia":
            return (self.compute_capability or (0, 0)) >= (8, 0)
        # vLLM's ROCm build (platforms/rocm.py supports_fp8): CDNA (gfx9) and RDNA 3/4.
        return self.vendor == "amd" and (self.gfx_arch or "gfx9").startswith(
            ("gfx9", "gfx11", "gfx12"))

    @property
    def fp8_dtype(self) -> str:
        """The FP8 type vLLM stores FP8 weights and KV cache in here (one byte either way):
        ``float8_e4m3fnuz`` on gfx94x (MI300X, MI325X: ``platforms/rocm.py`` is_fp8_fnuz),
        ``float8_e4m3fn`` on other CUDA and ROCm parts, ``""`` where there is none."""
        if not (self.fp8_weights or self.fp8_kv_cache):
            return ""
        return "float8_e4m3fnuz" if (self.gfx_arch or "").startswith("gfx94") else "float8_e4m3fn"

    @property
    def flashinfer_sampler(self) -> bool:
        """Whether vLLM 0.33 can sample with FlashInfer here: CUDA compute capability 8.0 to
        12.1 (``FlashInferBackend.supports_compute_capability``) and more than 16 SMs
        (``topk_topp_sampler.py`` flashinfer_sampler_supported); never on ROCm."""
        cc = self.compute_capability
        return (self.vendor == "nvidia" and cc is not None and (8, 0) <= cc <= (12, 1)
                and (self.multiprocessors or 17) > 16)

    @property
    def custom_allreduce(self) -> bool:
        """Whether vLLM's custom all-reduce (and its buffers) runs here under TP: every CUDA
        part; on ROCm only gfx94x/gfx95x (``platforms/rocm.py`` use_custom_allreduce)."""
        if self.vendor == "amd":
            return (self.gfx_arch or "").startswith(("gfx94", "gfx95"))
        return self.vendor == "nvidia"

    @property
    def fp8_kv_cache(self) -> bool:
        """Whether an FP8 KV cache (``--kv-cache-dtype fp8``) is possible: vLLM stores one on
        CUDA and ROCm parts; vllm-ascend has no FP8 KV cache."""
        return self.vendor in ("nvidia", "amd")


# The device plugins' resource names: NVIDIA's k8s-device-plugin and ROCm's (as vLLM's
# docs/deployment/k8s.md requests them), and Huawei MindCluster's Ascend Device Plugin
# (hiascend.com, MindCluster "Ascend Docker Runtime" user guide: huawei.com/Ascend910 for
# the 910 series, huawei.com/Ascend310P for 310P chips, set on those presets).
VENDOR_RESOURCES: dict[str, str] = {
    "nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "ascend": "huawei.com/Ascend910",
}
"""The resource name each vendor's Kubernetes device plugin gives its devices."""
_ASCEND_310P = "huawei.com/Ascend310P"


def _gib(value: float) -> int:
    return round(value * _GIB)


_INFO: tuple[DeviceInfo, ...] = (
    DeviceInfo(
        "h100-80gb",
        85_029_158_912,
        "NVIDIA H100 80GB (SXM)",
        "reading",
        "79.19 GiB in torch OOM messages; vLLM 0.11 logs print 79.18 GiB",
        ("h100", "h100-sxm", "h100-sxm-80gb", "h800"),
    ),
    DeviceInfo(
        "h100-pcie-80gb",
        85_029_158_912,
        "NVIDIA H100 PCIe 80GB",
        "derived",
        "the same 81559 MiB nvidia-smi total as the SXM part",
        ("h100-pcie",),
    ),
    DeviceInfo(
        "h200-141gb", 150_110_011_392, "NVIDIA H200 141GB", "reading", "139.80 GiB", ("h200",)
    ),
    DeviceInfo(
        "b200-192gb",
        _gib(178.35),
        "NVIDIA B200",
        "reading",
        "178.35 GiB total (unslothai/unsloth#3411)",
        ("b200",),
    ),
    DeviceInfo(
        "a100-80gb", 85_094_891_520, "NVIDIA A100 80GB", "reading", "79.25 GiB", ("a100-80g",)
    ),
    DeviceInfo(
        "a100-40gb",
        42_505_273_344,
        "NVIDIA A100 40GB",
        "reading",
        "39.59 GiB",
        ("a100", "a100-40g"),
    ),
    DeviceInfo(
        "l40s-48gb",
        _gib(44.39),
        "NVIDIA L40S",
        "derived",
        "nvidia-smi 46068 MiB less the driver's share",
        ("l40s",),
    ),
    DeviceInfo(
        "l4-24gb",
        23_580_639_232,
        "NVIDIA L4",
        "derived",
        "nvidia-smi 23034 MiB less the driver's share",
        ("l4",),
    ),
    DeviceInfo(
        "a10g-24gb",
        _gib(22.05),
        "NVIDIA A10G",
        "derived",
        "nvidia-smi 23028 MiB less the driver's share",
        ("a10g", "a10"),
    ),
    DeviceInfo(
        "t4-16gb",
        _gib(14.75),
        "NVIDIA T4",
        "reading",
        "14.75 GiB in torch OOM messages on T4",
        ("t4",),
    ),
    DeviceInfo(
        "rtx-3090-24gb",
        _gib(23.58),
        "NVIDIA GeForce RTX 3090",
        "reading",
        "total_gpu_memory=23.58GiB in vLLM's log (vllm-project/vllm#10517)",
        ("rtx3090", "3090", "rtx-3090"),
    ),
    DeviceInfo(
        "rtx-4090-24gb",
        _gib(23.64),
        "NVIDIA GeForce RTX 4090",
        "reading",
        "23.64 GiB in torch OOM messages (ali-vilab/VGen#104, 3DTopia/Phidias-Diffusion#8)",
        ("rtx4090", "4090", "rtx-4090"),
    ),
    DeviceInfo(
        "rtx-5090-32gb",
        _gib(31.36),
        "NVIDIA GeForce RTX 5090",
        "derived",
        "nvidia-smi 32607 MiB less the driver's share",
        ("rtx5090", "5090", "rtx-5090"),
    ),
    DeviceInfo(
        "mi300x-192gb",
        _gib(191.98),
        "AMD Instinct MI300X",
        "derived",
        "192 GiB HBM3, 191.98 GiB visible to torch (ROCm)",
        ("mi300x",),
    ),
    DeviceInfo(
        "ascend-910b-64gb",
        65_452_113_920,
        "Huawei Ascend 910B (64 GB)",
        "derived",
        "earlier memacct preset (60.96 GiB), kept for the scenarios that name it; a 910B "
        "log reads 61.27 GiB, which the 910B1-B3 presets carry",
        ("910b",),
    ),
    DeviceInfo(
        "ascend-910b1-64gb",
        _gib(61.27),
        "Huawei Ascend 910B1",
        "reading",
        "vllm-ascend's log: 'Free memory on device (60.86/61.27 GiB)' on a 64 GB 910B "
        "(vllm-project/vllm-ascend#8289)",
        ("910b1",),
    ),
    DeviceInfo(
        "ascend-910b2-64gb",
        _gib(61.27),
        "Huawei Ascend 910B2",
        "derived",
        "same 64 GB HBM as the 910B reading",
        ("910b2",),
    ),
    DeviceInfo(
        "ascend-910b3-64gb",
        _gib(61.27),
        "Huawei Ascend 910B3",
        "derived",
        "same 64 GB HBM as the 910B reading",
        ("910b3",),
    ),
    DeviceInfo(
        "ascend-910b-32gb",
        31_675_383_808,
        "Huawei Ascend 910B (32 GB)",
        "derived",
        "npu-smi 32768 MB HBM less the driver's share (29.50 GiB)",
        (),
    ),
    DeviceInfo(
        "ascend-910b4-32gb",
        31_675_383_808,
        "Huawei Ascend 910B4",
        "derived",
        "npu-smi 32768 MB HBM (vllm-project/vllm-ascend#5414) less the driver's share",
        ("910b4",),
    ),
    DeviceInfo(
        "ascend-310p-24gb",
        _gib(21.0),
        "Huawei Ascend 310P3 (one chip)",
        "derived",
        "24 GB per chip less the driver's share",
        ("310p", "310p3"),
        plugin_resource=_ASCEND_310P,
    ),
)

# Vendor and compute capability of each part (NVIDIA's CUDA GPUs page,
# developer.nvidia.com/cuda-gpus; docs/devices.md).
_CAPABILITY: dict[str, tuple[str, tuple[int, int] | None]] = {
    "h100-80gb": ("nvidia", (9, 0)), "h100-pcie-80gb": ("nvidia", (9, 0)),
    "h200-141gb": ("nvidia", (9, 0)), "b200-192gb": ("nvidia", (10, 0)),
    "a100-80gb": ("nvidia", (8, 0)), "a100-40gb": ("nvidia", (8, 0)),
    "l40s-48gb": ("nvidia", (8, 9)), "l4-24gb": ("nvidia", (8, 9)),
    "a10g-24gb": ("nvidia", (8, 6)), "t4-16gb": ("nvidia", (7, 5)),
    "rtx-3090-24gb": ("nvidia", (8, 6)), "rtx-4090-24gb": ("nvidia", (8, 9)),
    "rtx-5090-32gb": ("nvidia", (12, 0)), "mi300x-192gb": ("amd", None),
}
_INFO = tuple(
    replace(info, vendor=_CAPABILITY[info.name][0], compute_capability=_CAPABILITY[info.name][1])
    if info.name in _CAPABILITY else replace(info, vendor="ascend")
    for info in _INFO
)
_INFO = (
    *(replace(i, gfx_arch="gfx942") if i.name == "mi300x-192gb" else i for i in _INFO),
    *(DeviceInfo(row["name"], _gib(row["gib"]), **{k: v for k, v in row.items()
                                                    if k not in ("name", "gib")})
      for row in EXTRA_PRESETS),
)

DEVICE_INFO: dict[str, DeviceInfo] = {info.name: info for info in _INFO}
"""Every device preset with its source, by name."""

DEVICE_PRESETS: dict[str, int] = {info.name: info.total_bytes for info in _INFO}
"""Device presets: visible capacity in bytes by name."""

_ALIASES = {alias: info.name for info in _INFO for alias in info.aliases}

REFERENCE_DEVICE = "h100-80gb"
"""The device a plan assumes when none is given (an offline plan says so in its notes)."""


def parse_memory_size(text: str) -> int:
    """Bytes of a device size such as ``24GiB``, ``80GB`` or ``25769803776`` (:func:`parse_size`).

    Raises:
        InvalidInputError: not a size, or below 1 GiB (no model fits).
    """
    try:
        value = parse_size(text) if isinstance(text, str) else -1
    except ValueError as exc:
        raise InvalidInputError(f"device memory: {exc}") from None
    if value < _GIB:
        raise InvalidInputError(
            f"device memory {text!r} is below 1 GiB: no model fits; give the device's total "
            "(e.g. 24GiB)"
        )
    return value


def resolve_device(name: str) -> DeviceInfo:
    """The preset called ``name`` (a preset name or a short alias, any case).

    Raises:
        InvalidInputError: no preset has that name; the message lists them.
    """
    key = name.strip().lower().replace("_", "-").replace(" ", "-") if isinstance(name, str) else ""
    key = _ALIASES.get(key, key)
    info = DEVICE_INFO.get(key)
    if info is None:
        raise InvalidInputError(
            f"unknown device {name!r}: use one of {', '.join(DEVICE_INFO)}, or give the device's "
            "total memory with --device-memory (e.g. 24GiB)"
        )
    return info


ROCM_QUANTIZATIONS = (
    "awq", "auto_awq", "awq_marlin", "gptq", "auto_gptq", "fp8", "deepseek_v4_fp8",
    "compressed-tensors", "fbgemm_fp8", "inc", "quark", "mxfp4", "mxfp8", "torchao", "modelopt",
    "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed", "fp8_per_tensor", "fp8_per_block",
    "fp8_per_channel", "online", "gpt_oss_mxfp4",
)  # fmt: skip
"""The quantization methods vLLM 0.33's ROCm build runs (``platforms/rocm.py``,
``RocmPlatform.supported_quantization``; ``verify_quantization`` refuses any other)."""


def check_quantization(info: DeviceInfo | None, engine: str, *methods: object) -> None:
    """Refuse a quantization method the device's vLLM build does not run (on AMD parts, one
    outside :data:`ROCM_QUANTIZATIONS`: GGUF, bitsandbytes, ``gptq_marlin``...). A method is
    a name or a checkpoint's ``quantization_config`` (its ``quant_method``). Other engines'
    ROCm builds are not checked (their lists were not read).

    Raises:
        InvalidInputError: naming the method, the device and what runs there.
    """
    if info is None or info.vendor != "amd" or engine != "vllm":
        return
    for given in methods:
        method = given.get("quant_method") if isinstance(given, Mapping) else given
        if isinstance(method, str) and method and method.lower() not in ROCM_QUANTIZATIONS:
            raise InvalidInputError(
                f"{method} quantization: vLLM's ROCm build does not run it on the {info.label} "
                f"(platforms/rocm.py supports {', '.join(ROCM_QUANTIZATIONS[:8])}, ...): plan "
                "a checkpoint in one of those, or an NVIDIA device"
            )


def memory_notes(info: DeviceInfo, engine: str,
                 gpu_memory_utilization: float | None = None) -> tuple[str, ...]:
    """What a plan for ``engine`` on this device assumes about memory the engine shares with
    the CPU and OS, one sentence each (none on a discrete GPU). Sources: ``docs/devices.md``.

    ``gpu_memory_utilization`` ``None``: vLLM's default, 0.9.
    """
    total = format_gib(info.total_bytes, sep=" ")
    shared = info.unified_memory or info.hbm_numa_node
    guess = (
        (f"the {info.label}'s {total} is derived ({info.source}), not read on one: give the "
         "total yours reports with --device-memory",)
        if shared and info.kind == "derived" else ()
    )  # fmt: skip
    return _shared_memory_notes(info, engine, gpu_memory_utilization, total) + guess


def _shared_memory_notes(info: DeviceInfo, engine: str, gpu_memory_utilization: float | None,
                         total: str) -> tuple[str, ...]:
    if info.unified_memory and engine == "sglang":
        return (
            f"unified memory: the {info.label}'s {total} is the system memory its CPU and OS "
            "share; SGLang reads the free memory from the OS (MemAvailable) and sizes its pool "
            "from what is free at start, so what the OS and other processes hold comes off "
            f"the KV cache: memacct assumed all {total} free, which it cannot see",
        )
    if info.unified_memory:
        asked = format_gib(math.ceil(info.total_bytes * (gpu_memory_utilization or 0.9)), sep=" ")
        return (
            f"unified memory: the {info.label}'s {total} is the system memory its CPU and OS "
            "share; vLLM reads that total from CUDA and the free memory from the OS "
            f"(MemAvailable, page cache counted free) and starts only if {asked} "
            "(gpu_memory_utilization x total) is free then: memacct assumed the OS and the "
            "other processes leave that much, which it cannot see",
            "vLLM also counts as non-KV memory what MemAvailable loses during its profile run "
            "(its processes' host memory, the compiler's, a cold load's page cache: no size "
            "in vLLM's code); memacct counts the device's terms only: an upper bound",
        )
    if info.hbm_numa_node:
        return (
            f"the {info.label}'s HBM is also a NUMA node of the OS: page cache the OS keeps "
            f"there counts as used in the free memory {engine} reads, so a start can fail until "
            "the cache is dropped (vllm-project/vllm#35313): memacct assumed the HBM free",
        )
    return ()


def check_device(device: object) -> tuple[str | None, int | None, str | None]:
    """``(preset, total_bytes, name)`` of a device given as a preset name, ``{"total_bytes": N}``
    (optionally with ``"name"``) or a byte count: the one check of those three forms.

    A preset name is returned as given (the simulated device refuses an unknown one
    with the list of presets); a custom device has ``preset`` ``None``.

    Raises:
        InvalidInputError: none of the three forms, an unknown key, or a capacity that is
            not a positive number of bytes.
    """
    if isinstance(device, str):
        return device, None, None
    if isinstance(device, Mapping):
        extra = set(device) - {"total_bytes", "name"}
        if "total_bytes" not in device or extra:
            raise InvalidInputError(
                f'a custom device is {{"total_bytes": N}} (optionally with "name"), got '
                f"{dict(device)!r}"
            )
        name = device.get("name")
        total = check_int("total_bytes", device["total_bytes"])
        return None, total, name if isinstance(name, str) else None
    if isinstance(device, int) and not isinstance(device, bool):
        return None, check_int("device", device), None
    raise InvalidInputError(
        f'device must be a preset name, {{"total_bytes": N}} or a number of bytes, got {device!r}'
    )
