"""memacct's evaluation harness: simulated serving scenarios, oracle and accuracy benchmark.

Not part of the installed core. It reaches memacct only through its public API
and the simulated device, and adds the ``memacct bench`` subcommand through the
``memacct.cli`` entry-point group. :func:`simulate_engine_start` starts one rank
of an engine on a simulated device and profiles it as the engine would
(:mod:`memacct_bench.start`); :mod:`memacct_bench.workload` is what that engine
allocates; :mod:`memacct_bench.traces` are framework graphs for the seed's cases.
"""

from memacct_bench.start import EngineStart, simulate_engine_start

__all__ = ["EngineStart", "simulate_engine_start"]
