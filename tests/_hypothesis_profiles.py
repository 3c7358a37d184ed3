"""Hypothesis profiles for the property tests: ``default`` for CI, ``fuzz`` for ``make fuzz``.

``default`` is deterministic (``derandomize``: the same examples on every run,
so CI never flakes on a newly found case) and keeps the whole property suite
under a minute. ``fuzz`` runs twenty times as many examples from a fresh random
seed; select it with ``HYPOTHESIS_PROFILE=fuzz`` (the Makefile's ``fuzz``
target does). Neither keeps an example database: a failure prints its
reproduction (``@reproduce_failure`` blob) instead.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 50
FUZZ_FACTOR = 20

settings.register_profile(
    "default",
    max_examples=DEFAULT_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    max_examples=DEFAULT_EXAMPLES * FUZZ_FACTOR,
    deadline=None,
    derandomize=False,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
