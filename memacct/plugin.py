"""The plugins: the first-party ones declared, and helpers for writing one.

:data:`KNOWN_BACKENDS` names each first-party backend with the distribution that
owns the name and its install hint.

The helpers say whether a backend can run here without importing its framework.

A backend's ``availability()`` runs whenever backends are listed (``memacct
backends``, ``get_backend()`` with no name), so it must be cheap: importing
torch or MindSpore takes seconds. Everything it needs can be told without
that import: whether a package is installed (:func:`installed`, from
``importlib.util.find_spec``), which version and build (:func:`version`,
from the distribution's metadata: PyTorch tags a CPU-only wheel ``+cpu``),
and whether the machine has the device at all (:func:`missing_device`, from
the device files the driver creates). The framework is imported when the
backend is built; the backend's constructor checks it then and raises
:class:`~memacct.errors.BackendUnavailableError` with the specific reason.

Example, a backend for a framework ``acme`` on Ascend NPUs::

    @classmethod
    def availability(cls) -> Availability:
        if not installed("acme"):
            return Availability(False, "acme is not installed (pip install acme)")
        reason = missing_device("Ascend NPU")
        return Availability(reason is None, reason or "acme installed, an NPU present")
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from typing import NamedTuple

__all__ = [
    "DEVICE_FILES",
    "EXTRAS",
    "FIRST_PARTY",
    "KNOWN_BACKENDS",
    "DeviceKind",
    "KnownBackend",
    "device_files",
    "extra_hint",
    "install_hint",
    "installed",
    "missing_device",
    "version",
]

CORE_DISTRIBUTION = "memacct"


class KnownBackend(NamedTuple):
    """A first-party backend: the distribution that owns its name, what it serves, and the
    folder of this repository that holds it (``None``: the core's own)."""

    distribution: str
    serves: str
    directory: str | None = None

    @property
    def install(self) -> str:
        """How to install it today: no memacct distribution is on a package index yet, so
        from a checkout of memacct (or a wheel built from that folder: ``pip wheel``)."""
        if self.directory is None:
            return f"pip install . (in a memacct checkout: {self.distribution})"
        return f"pip install ./{self.directory} (in a memacct checkout: {self.distribution})"


KNOWN_BACKENDS: dict[str, KnownBackend] = {
    "sim": KnownBackend(CORE_DISTRIBUTION, "the simulated device"),
    "cuda": KnownBackend("memacct-cuda", "NVIDIA and AMD GPUs through torch.cuda",
                         "backends/cuda"),
    "npu": KnownBackend("memacct-npu", "Ascend NPUs through torch_npu", "backends/npu"),
    "mindspore": KnownBackend("memacct-mindspore", "MindSpore on Ascend or GPU",
                              "backends/mindspore"),
    "nvml": KnownBackend("memacct-nvml", "NVIDIA GPUs through NVML, no framework",
                         "backends/nvml"),
}
"""The first-party backends, declared as fsspec declares its known implementations
(``fsspec/registry.py``, ``known_implementations``): the install hint comes from here, not
from a guess (``pyproject.toml`` entry points of this repository; a test checks they agree)."""

FIRST_PARTY: dict[str, str] = {name: known.distribution for name, known in KNOWN_BACKENDS.items()}
"""Each first-party backend name and the distribution that owns it."""


EXTRAS: dict[str, str] = {
    "hf": "huggingface_hub transformers", "gguf": "gguf", "plot": "matplotlib",
}  # fmt: skip
"""The packages of each optional extra of memacct (``pyproject.toml``): the install hint
names them, which a package index has, rather than ``memacct[extra]``, which it has not yet."""


def extra_hint(extra: str) -> str:
    """``pip install <the extra's packages>`` for one of :data:`EXTRAS`."""
    return f"pip install {EXTRAS[extra]} (memacct's {extra} extra)"


def install_hint(name: str) -> str | None:
    """How to install a first-party backend (:attr:`KnownBackend.install`); ``None`` for
    other names.

    Names nobody publishes get no hint: guessing ``memacct-<name>`` would send a
    user to a distribution that does not exist (or to a squatter's).
    """
    known = KNOWN_BACKENDS.get(name)
    return known.install if known else None


DEVICE_DIR = "/dev"
"""Where the drivers create their device files (tests point it elsewhere)."""


class DeviceKind(NamedTuple):
    """The device files of one kind of device, and why a machine may have none."""

    pattern: str  # a regular expression the file names in /dev match in full
    shown: str  # the same, as a user reads it
    cause: str


DEVICE_FILES: dict[str, DeviceKind] = {
    "NVIDIA GPU": DeviceKind(
        r"nvidia\d+|dxg|nvhost-ctrl-gpu|nvgpu",
        "nvidia0, nvidia1, ..., dxg (WSL2), nvhost-ctrl-gpu or nvgpu (Jetson)",
        "no NVIDIA driver is loaded, or this container was started without its GPUs "
        "(docker run --gpus all)",
    ),
    "Ascend NPU": DeviceKind(
        r"davinci\d+",
        "davinci0, davinci1, ...",
        "the Ascend driver is not installed, or this container was started without "
        "/dev/davinci* (npu-smi info lists the NPUs)",
    ),
    "AMD GPU": DeviceKind("kfd", "kfd", "the ROCm driver (amdgpu) is not loaded"),
}
"""Each device kind: its device files in ``/dev`` and the usual cause when there are none.

The NVIDIA driver creates ``/dev/nvidia0`` ... per GPU (WSL2 exposes GPUs as ``/dev/dxg``,
Jetson's integrated GPU as ``/dev/nvhost-ctrl-gpu`` or ``/dev/nvgpu/``), Ascend's
``/dev/davinci0`` ..., ROCm one ``/dev/kfd``."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, asked of the import system without importing it.

    A submodule (``torch.cuda``) would import its parent: only top-level names are asked.
    """
    if "." in module:
        raise ValueError(f"installed() takes a top-level module name, got {module!r}")
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken entry in sys.path or sys.modules
        return False


def version(distribution: str) -> str | None:
    """The installed version of ``distribution`` from its metadata; ``None`` when not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def device_files(kind: str) -> list[str] | None:
    """The device files of ``kind`` (a key of :data:`DEVICE_FILES`), sorted.

    ``None`` where device files cannot tell (not Linux): the backend's constructor decides.
    """
    if not sys.platform.startswith("linux"):
        return None
    pattern = re.compile(DEVICE_FILES[kind].pattern)
    try:
        names = os.listdir(DEVICE_DIR)
    except OSError:
        return None
    return sorted(os.path.join(DEVICE_DIR, name) for name in names if pattern.fullmatch(name))


def missing_device(*kinds: str) -> str | None:
    """Why the machine has no device of any of ``kinds``; ``None`` when it has one (or cannot tell).

    The reason names the device files looked for and the usual cause of each.
    """
    found = [device_files(kind) for kind in kinds]
    if any(files is None or files for files in found):
        return None
    looked = "; ".join(
        f"no {kind} (no {DEVICE_FILES[kind].shown} in {DEVICE_DIR}): {DEVICE_FILES[kind].cause}"
        for kind in kinds
    )
    return f"this machine has {looked}"
