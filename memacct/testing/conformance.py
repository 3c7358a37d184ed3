"""The conformance suite: what every :class:`memacct.DeviceBackend` must do.

Subclass :class:`BackendConformance` in a class whose name starts with
``Test`` and give it a ``backend`` fixture; pytest then runs every check below
against that backend. Give it an ``allocator`` fixture as well and the checks
that need to put memory on the device run too; without one they are skipped
with a reason saying so.

The suite only reads differences it caused itself, so it runs on a busy real
device as well as on the simulated one. Beyond the protocol's signatures it
expects what memacct's own backends do: an ``availability()`` classmethod
that always gives a reason, and a device index out of range refused with a
:class:`memacct.MemacctError` whose message says "out of range".

Checks that need allocator statistics are skipped for a backend that declares
``has_allocator_stats=False`` (NVML), which is checked instead for reporting
none and refusing to profile.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from memacct.backend import (
    REQUIRED_METHODS,
    Availability,
    BackendQuirks,
    BaseBackend,
    DeviceBackend,
    as_base_backend,
    factory_availability,
    get_quirks,
    validate_backend,
)
from memacct.errors import MemacctError, ProfilingError
from memacct.measure import ALLOCATED, ALLOCATED_PEAK, RESERVED, RESERVED_PEAK, snapshot
from memacct.models import TruthSource
from memacct.profiling import memory_profiling
from memacct.units import MiB

__all__ = [
    "STAT_KEYS",
    "Allocator",
    "BackendConformance",
    "HardwareConformance",
    "SimulatedConformance",
    "fresh_python",
    "torch_allocator",
]

STAT_KEYS = (ALLOCATED, ALLOCATED_PEAK, RESERVED, RESERVED_PEAK)
"""The torch-style statistics every backend with an allocator must report."""


@dataclass(frozen=True)
class Allocator:
    """How the suite puts memory into the backend's caching allocator and takes it out.

    Attributes:
        allocate: ``allocate(nbytes) -> handle``: allocate ``nbytes`` on the
            device under test (device ``0`` of the backend unless the subclass's
            ``device`` fixture says otherwise) through the framework's caching
            allocator; the memory stays live until released.
        release: ``release(handle)``: free what ``allocate`` returned. For a
            framework that frees on the last reference (torch), keep the tensor
            in a dict under a key, return the key, and pop it here.
    """

    allocate: Callable[[int], Any]
    release: Callable[[Any], None]


def torch_allocator(device: str) -> Allocator:
    """An :class:`Allocator` that allocates ``uint8`` torch tensors on ``device``.

    For running the suite on real hardware through a torch-like backend::

        @pytest.fixture
        def allocator(self):
            return torch_allocator("cuda:0")

    torch is imported here, on first use.

    Args:
        device: a torch device string (``"cuda:0"``, ``"npu:0"``).
    """
    import torch

    live: dict[int, Any] = {}

    def allocate(nbytes: int) -> int:
        tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
        live[id(tensor)] = tensor
        return id(tensor)

    def release(key: int) -> None:
        # The last reference goes here, so the caching allocator frees the block now.
        del live[key]

    return Allocator(allocate, release)


def fresh_python(code: str) -> list[str]:
    """The lines ``code`` prints in a fresh interpreter (this one's executable), which must
    exit 0: for checking what importing a package loads, e.g. that a plugin's availability
    check imports no framework (``'torch' in sys.modules``).
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


class BackendConformance:
    """Checks of the backend protocol; subclass it in a ``Test...`` class.

    Fixtures a subclass provides:
        backend: the backend under test (required).
        allocator: an :class:`Allocator` for that backend's device, or
            ``None`` (the default) to skip the checks that allocate.
        device: the device index to test (default ``0``).

    Attributes:
        allocation_bytes: the size the suite allocates; a multiple of 2 MiB so
            no allocator rounds it.
        allocation_slack_bytes: the most the allocator adds to a request by
            padding (the Ascend and MindSpore pools pad 32 bytes and round to
            512, so they count 512 bytes more); 0 demands the exact size.
    """

    allocation_bytes: int = 64 * MiB
    allocation_slack_bytes: int = 0

    @pytest.fixture
    def backend(self) -> DeviceBackend:
        """The backend under test; a subclass must override this fixture."""
        pytest.fail(
            f"{type(self).__name__} subclasses BackendConformance but defines no `backend` "
            "fixture: add one that returns the backend to test"
        )

    @pytest.fixture
    def allocator(self) -> Allocator | None:
        """How to allocate on the device; ``None`` skips the checks that allocate."""
        return None

    @pytest.fixture
    def device(self) -> int:
        """The device index under test."""
        return 0

    # -- helpers -----------------------------------------------------------------

    @staticmethod
    def _require_allocator(allocator: Allocator | None, backend: DeviceBackend) -> Allocator:
        if allocator is None:
            pytest.skip(
                f"the conformance subclass for backend {backend.name!r} provides no `allocator` "
                "fixture, so the suite cannot put memory on the device"
            )
        return allocator

    @staticmethod
    def _require_stats(backend: DeviceBackend) -> None:
        if not get_quirks(backend).has_allocator_stats:
            pytest.skip(f"backend {backend.name!r} declares that it has no allocator statistics")

    def _allocator_with_stats(
        self, backend: DeviceBackend, allocator: Allocator | None
    ) -> Allocator:
        """The ``allocator`` fixture; skips where the backend has no statistics or no allocator."""
        self._require_stats(backend)
        return self._require_allocator(allocator, backend)

    @staticmethod
    def _allocated_after_reset(backend: DeviceBackend, device: int) -> int:
        """Reset the peaks and read ``allocated_bytes.all.current``."""
        backend.reset_peak_memory_stats(device)
        return backend.memory_stats(device)[ALLOCATED]

    def _assert_about(self, measured: int, requested: int, what: str) -> None:
        high = requested + self.allocation_slack_bytes
        assert requested <= measured <= high, (
            f"{what} grew by {measured} bytes for a {requested}-byte allocation "
            f"(expected {requested}..{high})"
        )

    # -- the protocol's shape ----------------------------------------------------

    def test_backend_implements_the_protocol(self, backend: DeviceBackend) -> None:
        assert validate_backend(backend, origin="the conformance fixture") is backend
        for method in REQUIRED_METHODS:
            assert callable(getattr(backend, method, None)), f"{method} is not callable"

    def test_name_is_one_word(self, backend: DeviceBackend) -> None:
        assert backend.name and backend.name == backend.name.strip()
        assert not any(c.isspace() for c in backend.name)

    def test_default_truth_source_is_a_truth_source(self, backend: DeviceBackend) -> None:
        assert TruthSource.parse(backend.default_truth_source) in set(TruthSource)

    def test_backend_subclasses_base_backend(self, backend: DeviceBackend) -> None:
        assert isinstance(backend, BaseBackend), (
            f"{type(backend).__name__} does not subclass memacct.BaseBackend, which declares "
            "every optional member with its default"
        )

    def test_quirks_are_declared_as_data(self, backend: DeviceBackend) -> None:
        quirks = as_base_backend(backend).quirks
        assert isinstance(quirks, BackendQuirks)
        assert all(isinstance(var, str) and var for var in quirks.allocator_settings_env)
        assert quirks.growth_granularity_bytes > 0

    def test_availability_explains_itself(self, backend: DeviceBackend) -> None:
        result = factory_availability(type(backend))
        assert isinstance(result, Availability)
        assert result.reason.strip(), "availability() must say why, also when available"

    # -- readings ----------------------------------------------------------------

    def test_device_count_is_at_least_one(self, backend: DeviceBackend) -> None:
        count = backend.device_count()
        assert isinstance(count, int) and count >= 1

    def test_mem_get_info_gives_free_within_total(
        self, backend: DeviceBackend, device: int
    ) -> None:
        free, total = backend.mem_get_info(device)
        assert isinstance(free, int) and isinstance(total, int)
        assert total > 0
        assert 0 <= free <= total

    def test_device_out_of_range_is_refused(self, backend: DeviceBackend) -> None:
        with pytest.raises(MemacctError, match="out of range"):
            backend.mem_get_info(backend.device_count())

    def test_allocator_stats_carry_the_torch_keys(
        self, backend: DeviceBackend, device: int
    ) -> None:
        self._require_stats(backend)
        stats = backend.memory_stats(device)
        missing = [key for key in STAT_KEYS if key not in stats]
        assert not missing, f"memory_stats lacks {', '.join(missing)}"

    def test_allocator_stats_are_non_negative_ints(
        self, backend: DeviceBackend, device: int
    ) -> None:
        self._require_stats(backend)
        stats = backend.memory_stats(device)
        # torch reports an unset max_split_size as -1 (SIZE_MAX as an int64 statistic).
        bad = {
            k: v for k, v in stats.items()
            if not isinstance(v, int) or (v < 0 and not (k == "max_split_size" and v == -1))
        }
        assert not bad, f"memory_stats values must be non-negative ints: {bad}"

    def test_backend_without_allocator_reports_no_stats(
        self, backend: DeviceBackend, device: int
    ) -> None:
        if get_quirks(backend).has_allocator_stats:
            pytest.skip(f"backend {backend.name!r} has allocator statistics")
        # Zeros would read as "nothing allocated": absent is the honest answer.
        assert dict(backend.memory_stats(device)) == {}

    def test_peaks_equal_current_after_reset(
        self, backend: DeviceBackend, device: int, allocator: Allocator | None
    ) -> None:
        self._require_stats(backend)
        if allocator is not None:
            allocator.release(allocator.allocate(self.allocation_bytes))  # a peak above current
        backend.reset_peak_memory_stats(device)
        stats = backend.memory_stats(device)
        assert stats[ALLOCATED_PEAK] == stats[ALLOCATED]
        assert stats[RESERVED_PEAK] == stats[RESERVED]

    def test_allocation_raises_allocated_and_its_peak(
        self, backend: DeviceBackend, device: int, allocator: Allocator | None
    ) -> None:
        alloc = self._allocator_with_stats(backend, allocator)
        start = self._allocated_after_reset(backend, device)
        handle = alloc.allocate(self.allocation_bytes)
        try:
            stats = backend.memory_stats(device)
        finally:
            alloc.release(handle)
        self._assert_about(stats[ALLOCATED] - start, self.allocation_bytes, "allocated")
        assert stats[ALLOCATED_PEAK] == stats[ALLOCATED]
        assert stats[RESERVED] >= stats[ALLOCATED]

    def test_release_lowers_current_but_not_peak(
        self, backend: DeviceBackend, device: int, allocator: Allocator | None
    ) -> None:
        alloc = self._allocator_with_stats(backend, allocator)
        start = self._allocated_after_reset(backend, device)
        alloc.release(alloc.allocate(self.allocation_bytes))
        stats = backend.memory_stats(device)
        assert stats[ALLOCATED] == start
        self._assert_about(stats[ALLOCATED_PEAK] - start, self.allocation_bytes, "allocated peak")

    def test_empty_cache_and_synchronize_run(self, backend: DeviceBackend, device: int) -> None:
        backend.synchronize(device)
        backend.empty_cache()
        free, total = backend.mem_get_info(device)
        assert 0 <= free <= total

    def test_process_memory_is_none_or_within_used(
        self, backend: DeviceBackend, device: int
    ) -> None:
        own = as_base_backend(backend).process_memory(device)
        free, total = backend.mem_get_info(device)
        assert own is None or (isinstance(own, int) and 0 <= own <= total - free)

    # -- snapshots ---------------------------------------------------------------

    def test_snapshot_splits_used_memory_into_the_three_kinds(
        self, backend: DeviceBackend, device: int
    ) -> None:
        snap = snapshot(backend, device)
        assert snap.backend == backend.name and snap.device == device
        assert snap.used == snap.total - snap.free
        assert snap.used == snap.reserved + snap.non_allocator + (snap.other_processes or 0)
        assert min(snap.reserved, snap.non_allocator, snap.other_processes or 0) >= 0

    def test_snapshot_agrees_with_the_backend_readings(
        self, backend: DeviceBackend, device: int
    ) -> None:
        snap = snapshot(backend, device)
        _, total = backend.mem_get_info(device)
        assert snap.total == total
        if get_quirks(backend).has_allocator_stats:
            stats = backend.memory_stats(device)
            assert (snap.allocated, snap.reserved) == (stats[ALLOCATED], stats[RESERVED])
        else:
            assert (snap.allocated, snap.reserved) == (0, 0)

    def test_snapshot_counts_a_held_allocation(
        self, backend: DeviceBackend, device: int, allocator: Allocator | None
    ) -> None:
        alloc = self._allocator_with_stats(backend, allocator)
        before = snapshot(backend, device)
        handle = alloc.allocate(self.allocation_bytes)
        try:
            held = snapshot(backend, device)
        finally:
            alloc.release(handle)
        self._assert_about(held.allocated - before.allocated, self.allocation_bytes, "allocated")
        assert held.reserved >= held.allocated

    # -- profiling ---------------------------------------------------------------

    def test_profiling_an_idle_block_measures_no_activation(
        self, backend: DeviceBackend, device: int
    ) -> None:
        self._require_stats(backend)
        baseline = snapshot(backend, device)
        with memory_profiling(
            backend, baseline, weights_memory=0, truth_source="allocated_peak", device=device
        ) as session:
            pass
        result = session.result
        assert (result.activation_peak, result.allocated_peak_increase) == (0, 0)
        assert result.backend == backend.name

    def test_profiling_measures_a_known_allocation(
        self, backend: DeviceBackend, device: int, allocator: Allocator | None
    ) -> None:
        alloc = self._allocator_with_stats(backend, allocator)
        baseline = snapshot(backend, device)
        with memory_profiling(
            backend, baseline, weights_memory=0, truth_source="allocated_peak", device=device
        ) as session:
            alloc.release(alloc.allocate(self.allocation_bytes))
        result = session.result
        self._assert_about(result.activation_peak, self.allocation_bytes, "activation peak")
        assert result.truth_source is TruthSource.ALLOCATED_PEAK
        assert result.reserved_peak_increase >= 0

    def test_profiling_without_allocator_stats_is_refused(
        self, backend: DeviceBackend, device: int
    ) -> None:
        if get_quirks(backend).has_allocator_stats:
            pytest.skip(f"backend {backend.name!r} has allocator statistics")
        baseline = snapshot(backend, device)
        with pytest.raises(ProfilingError, match=f"backend {backend.name!r} has no allocator"):
            with memory_profiling(backend, baseline, device=device):
                pass


class SimulatedConformance(BackendConformance):
    """The suite on a simulated device: a subclass gives a ``dev`` fixture (a
    :class:`memacct.sim.SimDevice`) and a ``backend`` over it; the suite allocates on ``dev``."""

    @pytest.fixture
    def allocator(self, dev: Any) -> Allocator:
        """Allocations straight on the simulated device."""
        return Allocator(dev.malloc, dev.free)


class HardwareConformance(BackendConformance):
    """The suite on the real device the ``memacct_backend`` fixture of memacct's pytest plugin
    gives (skipped with the backend's reason where there is none); a subclass adds an
    ``allocator`` where the framework can allocate (:func:`torch_allocator`)."""

    @pytest.fixture
    def backend(self, memacct_backend: DeviceBackend) -> DeviceBackend:
        """The plugin's backend on this machine."""
        return memacct_backend
