"""More device presets (issue 22): unified-memory parts, AMD Instinct and Radeon, and the
NVIDIA and Ascend parts users asked for, as rows :mod:`memacct.devices` turns into
:class:`~memacct.devices.DeviceInfo`.

Each row is data only. ``kind`` is ``reading`` where a real device printed the total
(a vLLM start-up log or a PyTorch out-of-memory message) and ``derived`` otherwise; a
derived total says how it was derived in its ``source``, from the spec sheet cited in
``docs/devices.md``:

* NVIDIA HBM parts: the spec sheet's size x 0.9899, the share of its 80 GB the H100 SXM
  reports (79.19 GiB); Blackwell HBM parts x 0.9908, the B200's 178.35 GiB of 180 GB;
  GDDR parts x 0.985, the RTX 4090's 23.64 GiB of 24 GB;
* integrated (unified-memory) NVIDIA parts: the LPDDR size x 0.9507, the share of its
  128 GB the GB10 reports (121.69 GiB);
* AMD parts: the spec size less 0.02 GiB, as ROCm shows the MI300X (191.98 of 192);
* Ascend parts: as the 910B reading (61.27 GiB of 64 GB), or the 310P's 21 of 24 GB.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXTRA_PRESETS"]


def _row(name: str, gib: float, label: str, kind: str, source: str,
         aliases: tuple[str, ...] = (), **data: Any) -> dict[str, Any]:
    return {"name": name, "gib": gib, "label": label, "kind": kind, "source": source,
            "aliases": aliases, **data}


_HOPPER = {"vendor": "nvidia", "compute_capability": (9, 0)}
_BLACKWELL = {"vendor": "nvidia", "compute_capability": (10, 0)}
_UMA = "unified memory the CPU and OS share"

EXTRA_PRESETS: tuple[dict[str, Any], ...] = (
    # NVIDIA parts users asked for.
    _row("h100-nvl-94gb", 93.05, "NVIDIA H100 NVL", "derived",
         "94 GB HBM3 x the H100 SXM's 0.9899", ("h100-nvl",), **_HOPPER),
    _row("h200-nvl-141gb", 139.80, "NVIDIA H200 NVL", "derived",
         "the H200 SXM's 141 GB HBM3e and total", ("h200-nvl",), **_HOPPER),
    _row("b300-288gb", 285.36, "NVIDIA B300", "derived",
         "288 GB HBM3e x the B200's 0.9908", ("b300",), vendor="nvidia",
         compute_capability=(10, 3)),
    _row("gb200-186gb", 184.29, "NVIDIA GB200 (one Blackwell GPU)", "derived",
         "186 GB HBM3e per GPU x the B200's 0.9908; the HBM is also a NUMA node of the "
         "Grace CPU's OS", ("gb200",), hbm_numa_node=True, **_BLACKWELL),
    _row("rtx-pro-6000-96gb", 94.56, "NVIDIA RTX PRO 6000 Blackwell", "derived",
         "96 GB GDDR7 x the RTX 4090's 0.985", ("rtx-pro-6000", "rtxpro6000"),
         vendor="nvidia", compute_capability=(12, 0)),
    _row("v100-16gb", 15.84, "NVIDIA V100 16GB", "derived", "16 GB HBM2 x 0.9899",
         ("v100", "v100-16g"), vendor="nvidia", compute_capability=(7, 0)),
    _row("v100-32gb", 31.68, "NVIDIA V100 32GB", "derived", "32 GB HBM2 x 0.9899",
         ("v100-32g",), vendor="nvidia", compute_capability=(7, 0)),
    # Unified memory: the GPU's memory is the system memory (CUDA: integrated).
    _row("gb10-128gb", 121.69, "NVIDIA DGX Spark (GB10)", "reading",
         f"121.69 GiB total in vLLM's start-up log ({_UMA}); another kernel printed 119.56",
         ("gb10", "dgx-spark", "spark"), unified_memory=True, vendor="nvidia",
         compute_capability=(12, 1)),
    _row("jetson-agx-orin-64gb", 60.85, "NVIDIA Jetson AGX Orin 64GB", "derived",
         f"64 GB LPDDR5 x the GB10's 0.9507 ({_UMA})", ("orin", "agx-orin", "jetson-orin"),
         unified_memory=True, vendor="nvidia", compute_capability=(8, 7), multiprocessors=16),
    _row("jetson-agx-orin-32gb", 30.42, "NVIDIA Jetson AGX Orin 32GB", "derived",
         f"32 GB LPDDR5 x the GB10's 0.9507 ({_UMA})", ("agx-orin-32gb",),
         unified_memory=True, vendor="nvidia", compute_capability=(8, 7), multiprocessors=14),
    _row("jetson-agx-thor-128gb", 121.69, "NVIDIA Jetson AGX Thor", "derived",
         f"the GB10's 128 GB LPDDR5X and total ({_UMA})", ("thor", "jetson-thor"),
         unified_memory=True, vendor="nvidia", compute_capability=(11, 0)),
    # Grace Hopper: HBM of its own, which the OS also sees as a NUMA node.
    _row("gh200-96gb", 95.03, "NVIDIA GH200 (96 GB HBM3)", "derived",
         "96 GB HBM3 x the H100 SXM's 0.9899", ("gh200",), hbm_numa_node=True, **_HOPPER),
    _row("gh200-144gb", 142.50, "NVIDIA GH200 (144 GB HBM3e)", "derived",
         "142.5 GiB total in the GH200 start-up error vLLM's #35356 quotes (the part is "
         "named by that PR, not by the log)", ("gh200-144g",), hbm_numa_node=True, **_HOPPER),
    # AMD Instinct and Radeon (vLLM's ROCm build; gfx architecture as ROCm names it).
    _row("mi325x-256gb", 255.98, "AMD Instinct MI325X", "derived", "256 GB HBM3E less 0.02 GiB",
         ("mi325x",), vendor="amd", gfx_arch="gfx942"),
    _row("mi355x-288gb", 287.98, "AMD Instinct MI355X", "derived",
         "288 GB HBM3E less 0.02 GiB; vLLM asks 273.6 GiB of it at utilization 0.95",
         ("mi355x",), vendor="amd", gfx_arch="gfx950"),
    _row("mi250x-64gb", 63.98, "AMD Instinct MI250X (one GCD)", "derived",
         "64 GB HBM2e per GCD (each of its two is one device) less 0.02 GiB",
         ("mi250x", "mi250"), vendor="amd", gfx_arch="gfx90a"),
    _row("mi210-64gb", 63.98, "AMD Instinct MI210", "derived", "64 GB HBM2e less 0.02 GiB",
         ("mi210",), vendor="amd", gfx_arch="gfx90a"),
    _row("rx-7900-xtx-24gb", 23.98, "AMD Radeon RX 7900 XTX", "derived",
         "24 GB GDDR6 less 0.02 GiB; a HIP out-of-memory message on a 24 GB card reads 23.98",
         ("rx7900xtx", "7900xtx", "rx-7900xtx"), vendor="amd", gfx_arch="gfx1100"),
    _row("radeon-pro-w7900-48gb", 47.98, "AMD Radeon PRO W7900", "derived",
         "48 GB GDDR6 less 0.02 GiB", ("w7900", "radeon-pro-w7900"), vendor="amd",
         gfx_arch="gfx1100"),
    _row("radeon-ai-pro-r9700-32gb", 31.98, "AMD Radeon AI PRO R9700", "derived",
         "32 GB GDDR6 less 0.02 GiB", ("r9700", "radeon-ai-pro-r9700"), vendor="amd",
         gfx_arch="gfx1201"),
    # Ascend.
    _row("ascend-910c-64gb", 61.27, "Huawei Ascend 910C (one die)", "derived",
         "64 GB HBM per die (each of its two is one device), as the 910B reading",
         ("910c",), vendor="ascend"),
    _row("ascend-300i-duo-48gb", 42.0, "Huawei Atlas 300I Duo (one chip)", "derived",
         "48 GB LPDDR4X per chip (96 GB per card) x the 310P's 21/24", ("300i-duo", "300iduo"),
         vendor="ascend", plugin_resource="huawei.com/Ascend310P"),
)
"""The presets after the first table of :mod:`memacct.devices`, one dict of fields each."""
