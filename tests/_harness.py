"""The evaluation harness (``bench/``, module ``memacct_bench``) for core tests that simulate
an engine: its start on the simulated device and the workload it allocates.

The core-only pass (``make test-core``) installs no harness: the tests that need one skip
there, saying so, and run in the full pass (``make test-all``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

_REASON = "the evaluation harness (bench/, memacct-bench) is not installed: the core-only pass"


def harness(module: str = "memacct_bench") -> ModuleType:
    """The harness module ``module``; the calling test skips where it is not installed."""
    return pytest.importorskip(module, reason=_REASON)


def simulate_engine_start(*args: Any, **kwargs: Any) -> Any:
    """:func:`memacct_bench.simulate_engine_start`."""
    return harness().simulate_engine_start(*args, **kwargs)


def workload(*args: Any, **kwargs: Any) -> Any:
    """A :class:`memacct_bench.workload.TransformerWorkload`."""
    return harness("memacct_bench.workload").TransformerWorkload(*args, **kwargs)


def workload_from_config(*args: Any, **kwargs: Any) -> Any:
    """:meth:`memacct_bench.workload.TransformerWorkload.from_config`."""
    return harness("memacct_bench.workload").TransformerWorkload.from_config(*args, **kwargs)
