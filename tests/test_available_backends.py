"""What ``memacct.available_backends()`` says about the vendor backends, on any machine.

Needs the four backend distributions (``make install``); the core-alone run
skips it. A backend that cannot run must say specifically why: which
package, build, library, driver or device is missing, with the fix. Listing
imports no framework: each backend tells from package metadata, the import
system and device files (memacct.plugin); the framework is imported when the
backend is built, and its constructor refuses with the framework's own reason.
"""

from __future__ import annotations

import re

import pytest

import memacct
from memacct.testing import fresh_python

PLUGINS = ("cuda", "npu", "mindspore", "nvml")

# Every reason each backend gives when it cannot run; anything else is too vague.
NO_DEVICE = r"this machine has no (NVIDIA GPU|Ascend NPU|AMD GPU) \(no \w+.* in \S+\): .+"
SPECIFIC_REASONS = {
    "cuda": (
        r"torch \S+ is a CPU-only build \(torch\.cuda\.is_available\(\) is False\): "
        r"install a CUDA build",
        r"torch \S+ is installed but " + NO_DEVICE,
        r"torch \S+ is installed but CUDA_VISIBLE_DEVICES='.*' hides every GPU",
        r"torch is not installed \(pip install 'memacct-cuda\[torch\]'",
    ),
    "npu": (
        r"torch_npu is not installed \(pip install torch-npu; it needs Huawei's CANN toolkit\)$",
        r"torch_npu \S+ is installed but " + NO_DEVICE,
        r"torch is not installed \(pip install 'memacct-npu\[torch-npu\]'",
    ),
    "mindspore": (
        r"mindspore \S+ is installed but " + NO_DEVICE
        + r"; memacct-mindspore needs MindSpore on Ascend or GPU$",
        r"mindspore is not installed \(pip install 'memacct-mindspore\[mindspore\]'",
    ),
    "nvml": (
        r"nvidia-ml-py is installed but " + NO_DEVICE,
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


def test_listing_backends_imports_no_framework(infos: dict[str, memacct.BackendInfo]) -> None:
    # Before: mindspore's availability() imported mindspore (2.8 s here) and nvml's loaded
    # pynvml, on every `memacct backends` and every get_backend() without a name.
    code = (
        "import sys, memacct\n"
        "listed = {i.name: i.available for i in memacct.available_backends()}\n"
        "print(sorted(listed))\n"
        "print(' '.join(m for m in ('torch', 'mindspore', 'pynvml', 'torch_npu')"
        " if m in sys.modules))"
    )
    names, imported = ([*fresh_python(code), ""])[:2]
    assert all(f"'{name}'" in names for name in PLUGINS), names
    assert imported == ""


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
