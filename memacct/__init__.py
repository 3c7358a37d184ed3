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

from typing import TYPE_CHECKING, Any

from memacct._version import __version__
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

if TYPE_CHECKING:
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

# The planner is imported on first use: most engines import memacct for a snapshot.
_PLANNER_NAMES = {
    "KVCachePlan",
    "KVCacheSpec",
    "ModelConfig",
    "agree",
    "load_model_preset",
    "load_profile",
    "model_presets",
    "plan_kv_cache",
    "save_profile",
}


# The offline plan (an engine's start-up estimated from the model), also on first use.
_OFFLINE_NAMES = frozenset({"PlanOptions", "plan_capacity", "plan_offline"})


def __getattr__(name: str) -> Any:
    if name in _PLANNER_NAMES:
        from memacct import planner

        return getattr(planner, name)
    if name == "PlanOptions":
        from memacct.planner.options import PlanOptions

        return PlanOptions
    if name in _OFFLINE_NAMES:
        from memacct.planner import offline

        return getattr(offline, name)
    raise AttributeError(f"module 'memacct' has no attribute {name!r}")


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
