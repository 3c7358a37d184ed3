"""memacct-example: a memacct backend for the Example accelerator (a template to copy).

Replace "example" everywhere with your device's name. A backend only reads;
memacct computes every derived number. If your framework's memory module has
the shape of ``torch.cuda`` (``mem_get_info``, ``memory_stats`` with torch's
key names, ``reset_peak_memory_stats``, ``empty_cache``, ``synchronize``),
subclass :class:`memacct.TorchLikeBackend` as below and you are done.
Otherwise subclass :class:`memacct.BaseBackend` and implement the six readings
of :class:`memacct.DeviceBackend` yourself (``memacct_mindspore`` maps a
framework with other key names). ``BaseBackend`` declares every optional member
(``priority``, ``availability``, ``quirks``, ``process_memory``,
``consistent_reading``, ``device_identity``) with its default: override the
ones your device supports.

Keep the framework import out of module level and out of ``availability()``:
memacct lists every installed backend, and listing must not import every
framework (seconds each). ``availability()`` tells what it can from package
metadata, the import system and device files (:mod:`memacct.plugin`); the
constructor imports the framework, checks it, and raises
:class:`memacct.BackendUnavailableError` with the specific reason.
"""

from __future__ import annotations

import importlib
from typing import Any

from memacct import (
    Availability,
    BackendQuirks,
    BackendUnavailableError,
    TorchLikeBackend,
    TruthSource,
)
from memacct.plugin import installed, missing_device

__version__ = "0.1.0"

__all__ = ["EXAMPLE_QUIRKS", "ExampleBackend"]

FRAMEWORK = "example_framework"  # the module your backend imports
INSTALL_HINT = "pip install 'memacct-example[framework]'"

EXAMPLE_QUIRKS = BackendQuirks(
    # Set what is true of your device; the core acts on it, not on your backend's name.
    empty_cache_releases_runtime_memory=False,
    unified_memory=False,
    has_allocator_stats=True,
    allocator_settings_env=("EXAMPLE_ALLOC_CONF",),
    growth_granularity_bytes=2 * 1024 * 1024,
)
"""What is particular to the Example allocator."""


class ExampleBackend(TorchLikeBackend):
    """The Example accelerator through ``example_framework.device`` (registered as ``example``).

    Args:
        module: a ``torch.cuda``-shaped memory module; the framework's when
            omitted. Tests pass the simulated device's ``.api``.
    """

    name = "example"
    # allocated_peak suits an allocator that reuses its cached blocks; a pool
    # that fragments (MindSpore's) needs reserved.
    default_truth_source = TruthSource.ALLOCATED_PEAK
    quirks = EXAMPLE_QUIRKS
    # Among available backends, get_backend() without a name picks the highest;
    # 0 means "never pick me automatically".
    priority = 50

    def __init__(self, module: Any | None = None) -> None:
        if module is None:
            # Here the framework is imported, and asked what availability() could not tell.
            try:
                module = importlib.import_module(FRAMEWORK).device
            except Exception as exc:
                raise BackendUnavailableError(
                    f"{FRAMEWORK} failed to import: {type(exc).__name__}: {exc}"
                ) from exc
            if not module.is_available():
                raise BackendUnavailableError(
                    f"{FRAMEWORK} sees no Example device (is its driver loaded?)"
                )
        super().__init__(module)

    @classmethod
    def availability(cls) -> Availability:
        """Cheap and specific, without importing the framework: what is missing, and the fix."""
        if not installed(FRAMEWORK):
            return Availability(False, f"{FRAMEWORK} is not installed ({INSTALL_HINT})")
        # Your driver's device files, if memacct.plugin.DEVICE_FILES knows them.
        no_device = missing_device("NVIDIA GPU")
        if no_device is not None:
            return Availability(False, f"{FRAMEWORK} is installed but {no_device}")
        return Availability(True, f"{FRAMEWORK} is installed and a device is present")
