"""memacct: how many bytes can the KV cache have without running out of device memory later?

memacct measures a device through a pluggable backend, profiles a dummy
forward pass, and plans the KV-cache budget in bytes and blocks. Importing it
imports no framework; backends import theirs when they are built.

Example, on the simulated device::

    >>> import memacct
    >>> from memacct.sim import SimDevice
    >>> dev = SimDevice("h100-80gb")
    >>> backend = memacct.get_backend("sim", device=dev)
    >>> baseline = memacct.snapshot(backend)
    >>> weights = dev.malloc(15 * 2**30)
    >>> with memacct.memory_profiling(backend, baseline) as session:
    ...     dev.free(dev.malloc(3 * 2**30))
    >>> session.result.non_kv_cache_memory == 18 * 2**30
    True
"""

from __future__ import annotations

from memacct._version import __version__

# Not typing's TYPE_CHECKING: importing typing is most of what importing memacct would cost.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from memacct.backend import (
        AllocatorModel,
        Availability,
        BackendQuirks,
        BaseBackend,
        DeviceBackend,
        validate_backend,
    )
    from memacct.errors import (
        AgreementError,
        BackendError,
        BackendNotFoundError,
        BackendUnavailableError,
        ConfigError,
        InsufficientMemoryError,
        InvalidInputError,
        MemacctError,
        ProfilingError,
        ProfilingOutOfMemoryError,
    )
    from memacct.measure import snapshot
    from memacct.models import (
        ExcludedRegion,
        MemoryDelta,
        MemorySnapshot,
        ProfiledSetup,
        ProfileResult,
        TruthSource,
    )
    from memacct.planner import (
        KVCachePlan,
        KVCacheSpec,
        ModelConfig,
        agree,
        load_model_preset,
        load_profile,
        model_presets,
        plan_kv_cache,
        save_profile,
    )
    from memacct.planner.offline import plan_capacity, plan_offline
    from memacct.planner.options import PlanOptions
    from memacct.profiling import ProfilingSession, memory_profiling
    from memacct.registry import (
        BackendInfo,
        available_backends,
        get_backend,
        register_backend,
        unregister_backend,
    )
    from memacct.torchlike import TorchLikeBackend, torch_allocator_model, with_allocator_settings
    from memacct.units import GiB, MiB

# Every other name is imported on first use, from the module that defines it: importing
# memacct costs its version only (the command line starts in a few milliseconds,
# and a Ctrl-C while it starts meets the command line's own handler, not an import).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("AgreementError", "BackendError", "BackendNotFoundError",
                     "BackendUnavailableError", "ConfigError", "InsufficientMemoryError",
                     "InvalidInputError", "MemacctError", "ProfilingError",
                     "ProfilingOutOfMemoryError"), "memacct.errors"),
    **dict.fromkeys(("GiB", "MiB"), "memacct.units"),
    **dict.fromkeys(("AllocatorModel", "Availability", "BackendQuirks", "BaseBackend",
                     "DeviceBackend", "validate_backend"), "memacct.backend"),
    "snapshot": "memacct.measure",
    **dict.fromkeys(("ExcludedRegion", "MemoryDelta", "MemorySnapshot", "ProfiledSetup",
                     "ProfileResult", "TruthSource"), "memacct.models"),
    **dict.fromkeys(("ProfilingSession", "memory_profiling"), "memacct.profiling"),
    **dict.fromkeys(("BackendInfo", "available_backends", "get_backend", "register_backend",
                     "unregister_backend"), "memacct.registry"),
    **dict.fromkeys(("TorchLikeBackend", "torch_allocator_model", "with_allocator_settings"),
                    "memacct.torchlike"),
    # The planner: most engines import memacct for a snapshot only.
    **dict.fromkeys(("KVCachePlan", "KVCacheSpec", "ModelConfig", "agree", "load_model_preset",
                     "load_profile", "model_presets", "plan_kv_cache", "save_profile"),
                    "memacct.planner"),
    "PlanOptions": "memacct.planner.options",
    **dict.fromkeys(("plan_capacity", "plan_offline"), "memacct.planner.offline"),
}  # fmt: skip


# The submodules importing memacct eagerly used to make attributes of the package.
_SUBMODULES = frozenset(
    {*_LAZY.values(), "memacct.cli", "memacct.engines", "memacct.model", "memacct.plot",
     "memacct.sim", "memacct.testing"}
)  # fmt: skip


def __getattr__(name: str) -> Any:
    from importlib import import_module

    # Only the constant tables above name what is imported: an attribute name never does.
    module = _LAZY.get(name)
    submodule = module is None and f"memacct.{name}" in _SUBMODULES
    if module is None and not submodule:
        raise AttributeError(f"module 'memacct' has no attribute {name!r}")
    loaded = import_module(f"memacct.{name}" if submodule else str(module))
    if submodule:
        return loaded
    value = getattr(loaded, name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AgreementError",
    "AllocatorModel",
    "Availability",
    "BackendError",
    "BackendInfo",
    "BackendNotFoundError",
    "BackendQuirks",
    "BackendUnavailableError",
    "BaseBackend",
    "ConfigError",
    "DeviceBackend",
    "ExcludedRegion",
    "GiB",
    "InsufficientMemoryError",
    "InvalidInputError",
    "KVCachePlan",
    "KVCacheSpec",
    "MemacctError",
    "MemoryDelta",
    "MemorySnapshot",
    "MiB",
    "ModelConfig",
    "PlanOptions",
    "ProfileResult",
    "ProfiledSetup",
    "ProfilingError",
    "ProfilingOutOfMemoryError",
    "ProfilingSession",
    "TorchLikeBackend",
    "TruthSource",
    "__version__",
    "agree",
    "available_backends",
    "get_backend",
    "load_model_preset",
    "load_profile",
    "memory_profiling",
    "model_presets",
    "plan_capacity",
    "plan_kv_cache",
    "plan_offline",
    "register_backend",
    "save_profile",
    "snapshot",
    "torch_allocator_model",
    "unregister_backend",
    "validate_backend",
    "with_allocator_settings",
]
