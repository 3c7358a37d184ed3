"""The simulated device: a faithful model of the caching allocators, for tests and benchmarks.

See ``SIMULATOR.md`` facts reproduced in :mod:`memacct.sim.allocator`.
"""

from memacct.sim.allocator import ALLOCATOR_PRESETS, SimOutOfMemory
from memacct.sim.device import DEVICE_PRESETS, SimDevice

__all__ = ["ALLOCATOR_PRESETS", "DEVICE_PRESETS", "SimDevice", "SimOutOfMemory"]
