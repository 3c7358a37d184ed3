"""The simulated device: a faithful model of the caching allocators, for tests and benchmarks.

See ``SIMULATOR.md`` facts reproduced in :mod:`memacct.sim.allocator`.
"""

from memacct.sim.allocator import ALLOCATOR_PRESETS, SimOutOfMemory
from memacct.sim.device import DEVICE_PRESETS, SimDevice

__all__ = ["ALLOCATOR_PRESETS", "DEVICE_PRESETS", "SimDevice", "SimOutOfMemory"]

# Serving scenarios (memacct.sim.scenario) pull in the planner: imported on first use, so the
# ``sim`` backend stays cheap to load.
_SCENARIO_NAMES = ("Scenario", "ScenarioOutcome", "run_scenario")
__all__ += ["Scenario", "ScenarioOutcome", "run_scenario"]


def __getattr__(name: str) -> object:
    if name in _SCENARIO_NAMES:
        from memacct.sim import scenario

        return getattr(scenario, name)
    raise AttributeError(f"module 'memacct.sim' has no attribute {name!r}")
