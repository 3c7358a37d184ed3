"""What ``memacct.available_backends()`` says about the vendor backends, on any machine.

Needs the four backend distributions (``make install``); the core-alone run
skips it. A backend that cannot run must say specifically why: which
package, build, library, driver or device is missing, with the fix.
"""

from __future__ import annotations

import re

import pytest

import memacct

PLUGINS = ("cuda", "npu", "mindspore", "nvml")

# Every reason each backend gives when it cannot run; anything else is too vague.
SPECIFIC_REASONS = {
    "cuda": (
        r"torch \S+ is a CPU-only build \(torch\.cuda\.is_available\(\) is False\): "
        r"install a CUDA build",
        r"torch \S+ is built with (CUDA|ROCm) \S+ but torch\.cuda\.is_available\(\) is False: .+",
        r"torch is not installed \(pip install 'memacct-cuda\[torch\]'",
        r"import torch failed: \w+: .+",
    ),
    "npu": (
        r"torch_npu is not installed \(pip install torch-npu; it needs Huawei's CANN toolkit\)$",
        r"torch_npu is installed but failed to import: \w+: .+ \(source CANN's set_env\.sh",
        r"torch_npu \S+ imported but torch\.npu\.is_available\(\) is False: "
        r"no Ascend NPU is visible",
        r"torch is not installed \(pip install 'memacct-npu\[torch-npu\]'",
    ),
    "mindspore": (
        r"mindspore \S+ runs on device target \w+: it finds no Ascend or GPU device",
        r"mindspore \S+ targets \w+ but (sees no|cannot count)",
        r"mindspore is not installed \(pip install 'memacct-mindspore\[mindspore\]'",
        r"import mindspore failed: \w+: .+",
    ),
    "nvml": (
        r"NVML cannot start: .+ \(NVML: .+\)$",
        r"NVML works \(driver \S+\) but sees no NVIDIA GPU$",
        r"nvidia-ml-py is not installed \(pip install nvidia-ml-py\)$",
    ),
}


@pytest.fixture
def infos() -> dict[str, memacct.BackendInfo]:
    listed = {info.name: info for info in memacct.available_backends()}
    missing = [name for name in PLUGINS if name not in listed]
    if missing:
        pytest.skip(f"backend distributions not installed for {', '.join(missing)} (make install)")
    return listed


def test_each_vendor_backend_comes_from_its_own_distribution(
    infos: dict[str, memacct.BackendInfo],
) -> None:
    assert {name: infos[name].distribution for name in PLUGINS} == {
        "cuda": "memacct-cuda",
        "npu": "memacct-npu",
        "mindspore": "memacct-mindspore",
        "nvml": "memacct-nvml",
    }


@pytest.mark.parametrize("name", PLUGINS)
def test_unavailable_backend_says_specifically_why(
    infos: dict[str, memacct.BackendInfo], name: str
) -> None:
    info = infos[name]
    if info.available:
        pytest.skip(f"backend {name!r} is available here: {info.reason}")
    assert any(re.match(pattern, info.reason) for pattern in SPECIFIC_REASONS[name]), info.reason


def test_machine_without_accelerators_never_gets_the_simulator_unasked(
    infos: dict[str, memacct.BackendInfo],
) -> None:
    available = sorted(name for name in PLUGINS if infos[name].available)
    if available:
        pytest.skip(f"this machine has an accelerator backend: {', '.join(available)}")
    assert infos["sim"].available
    with pytest.raises(memacct.BackendUnavailableError) as caught:
        memacct.get_backend()
    message = str(caught.value)
    for name in PLUGINS:
        assert f"{name}: {infos[name].reason}" in message
    assert "MEMACCT_BACKEND=sim" in message
    assert memacct.get_backend("sim").name == "sim"


def test_priorities_prefer_framework_backends_and_never_pick_nvml(
    infos: dict[str, memacct.BackendInfo],
) -> None:
    priorities = {name: infos[name].priority for name in PLUGINS}
    assert priorities == {"cuda": 100, "npu": 100, "mindspore": 90, "nvml": 0}
