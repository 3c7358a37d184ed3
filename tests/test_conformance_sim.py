"""The shipped conformance suite, run against the core's simulated backend."""

from __future__ import annotations

import pytest

from memacct.sim import SimDevice
from memacct.sim.backend import SimBackend
from memacct.testing import Allocator, BackendConformance


class TestSimConformance(BackendConformance):
    @pytest.fixture
    def sim_device(self) -> SimDevice:
        return SimDevice("h100-80gb", "torch-cuda")

    @pytest.fixture
    def backend(self, sim_device: SimDevice) -> SimBackend:
        return SimBackend(sim_device)

    @pytest.fixture
    def allocator(self, sim_device: SimDevice) -> Allocator:
        return Allocator(allocate=sim_device.malloc, release=sim_device.free)


class TestSimConformanceWithoutAllocator(BackendConformance):
    """A subclass that cannot drive memory still runs every reading check."""

    @pytest.fixture
    def backend(self) -> SimBackend:
        return SimBackend(SimDevice(total_bytes=16 * 2**30))
