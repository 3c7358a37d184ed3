"""Testing helpers shipped with memacct: the backend conformance suite.

Every backend, the core's ``sim`` and third-party plugins alike, proves it
speaks the :class:`memacct.DeviceBackend` protocol by subclassing
:class:`BackendConformance` in its own tests::

    import pytest
    from memacct.testing import Allocator, BackendConformance

    class TestMyDeviceConformance(BackendConformance):
        @pytest.fixture
        def backend(self):
            return MyDeviceBackend()

        @pytest.fixture
        def allocator(self):  # optional: lets the suite drive memory
            return Allocator(allocate=lambda n: my_framework.empty(n), release=lambda t: None)

This module imports pytest; ``import memacct`` never imports it.
"""

from memacct.testing.conformance import *  # noqa: F403  (the suite's public names)
from memacct.testing.conformance import __all__ as __all__
