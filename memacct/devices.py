"""Device presets: the usable memory of real accelerators, by name.

Offline planning (``memacct plan --device``) and the simulated device both size
a device from these figures. Sources of each figure are in ``docs/devices.md``.

A figure is the device total the runtime reports (``torch.cuda.mem_get_info()[1]``,
``torch.npu.mem_get_info()[1]``), below the marketed size because the driver
keeps part of the memory. ``reading`` figures were printed by a real device (a
vLLM start-up log or a PyTorch out-of-memory message); ``derived`` ones are the
``nvidia-smi``/``npu-smi`` total less the driver's typical share, where no
reading was found. :func:`resolve_device` also accepts short names (``h100``,
``rtx4090``, ``910b4``) and a size (``24GiB``) for any other device.
"""

from __future__ import annotations

from dataclasses import dataclass

from memacct.errors import InvalidInputError
from memacct.units import parse_size

__all__ = ["DEVICE_INFO", "DEVICE_PRESETS", "DeviceInfo", "parse_memory_size", "resolve_device"]

_GIB = 2**30


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
    """

    name: str
    total_bytes: int
    label: str
    kind: str
    source: str
    aliases: tuple[str, ...] = ()


def _gib(value: float) -> int:
    return round(value * _GIB)


_INFO = (
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
    ),
)

DEVICE_INFO: dict[str, DeviceInfo] = {info.name: info for info in _INFO}
"""Every device preset with its source, by name."""

DEVICE_PRESETS: dict[str, int] = {info.name: info.total_bytes for info in _INFO}
"""Device presets: visible capacity in bytes by name."""

_ALIASES = {alias: info.name for info in _INFO for alias in info.aliases}
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
