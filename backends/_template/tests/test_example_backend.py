"""The template backend: the conformance suite on the simulated device, and its availability.

Keep the conformance subclass when you copy the template: it is the proof
that your backend speaks memacct's protocol. Swap the simulated device for
your framework's own allocations in a test marked ``@pytest.mark.example``
to run it on the hardware.
"""

from __future__ import annotations

import pytest
from memacct_example import ExampleBackend

from memacct.sim import SimDevice
from memacct.testing import SimulatedConformance


@pytest.fixture
def dev() -> SimDevice:
    return SimDevice("h100-80gb")


class TestExampleConformance(SimulatedConformance):
    @pytest.fixture
    def backend(self, dev: SimDevice) -> ExampleBackend:
        return ExampleBackend(dev.api)


def test_availability_names_the_missing_framework_and_the_fix() -> None:
    avail = ExampleBackend.availability()
    assert (avail.available, avail.reason) == (
        False,
        "example_framework is not installed (pip install 'memacct-example[framework]')",
    )
