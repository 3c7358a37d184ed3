"""Device presets: the usable memory of real accelerators, by name.

Offline planning (``memacct plan --device``) and the simulated device both size
a device from these figures. Sources of each figure are in ``docs/devices.md``.
"""

from __future__ import annotations

__all__ = ["DEVICE_PRESETS"]

# Visible capacity in bytes: what the runtime reports as the device total
# (torch.cuda.mem_get_info()[1] / torch.npu.mem_get_info()[1]), which is below
# the marketing size because the driver keeps part of the memory. These are
# typical readings (they move by a few MiB between driver versions), rounded
# to the figures torch prints in its OOM messages: "79.19 GiB" on an H100 SXM,
# "39.59 GiB" on an A100 40GB. Ascend figures are typical torch_npu readings.
DEVICE_PRESETS: dict[str, int] = {
    "h100-80gb": 85_029_158_912,  # 79.19 GiB
    "h200-141gb": 150_110_011_392,  # 139.80 GiB
    "a100-80gb": 85_094_891_520,  # 79.25 GiB
    "a100-40gb": 42_505_273_344,  # 39.59 GiB
    "l4-24gb": 23_580_639_232,  # 21.96 GiB
    "ascend-910b-64gb": 65_452_113_920,  # 60.96 GiB
    "ascend-910b-32gb": 31_675_383_808,  # 29.50 GiB
}
"""Device presets: visible capacity in bytes by name."""
