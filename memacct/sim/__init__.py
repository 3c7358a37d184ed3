"""The simulated device: a model of the frameworks' caching allocators, for tests and offline plans.

Only the device lives here (allocator presets, :class:`SimDevice`, the ``sim``
backend). The allocator rules it follows and their sources are in
``docs/simulator.md``. The evaluation harness (serving scenarios, oracle,
benchmark) is the separate ``memacct-bench`` distribution in ``bench/``.
"""

from memacct.sim._blocks import PrivatePool
from memacct.sim.allocator import ALLOCATOR_PRESETS, SimOutOfMemory
from memacct.sim.device import DEVICE_PRESETS, SimDevice

__all__ = ["ALLOCATOR_PRESETS", "DEVICE_PRESETS", "PrivatePool", "SimDevice", "SimOutOfMemory"]
