"""A plugin's own exception in any call the profiler makes is a BackendError (issue 23, row 2).

``snapshot()`` names the plugin and what failed; the profiling session's calls (start,
regions, stop) go through the same wrapper, ``memacct.backend_calls.call_backend``.
"""

from __future__ import annotations

from typing import Any

import pytest

import memacct
from memacct.errors import BackendError
from memacct.sim import SimDevice


class FlakyDriverError(Exception):
    """The plugin's own exception type."""


class FlakyBackend(memacct.TorchLikeBackend):
    """Over the simulated device; the ``nth`` call of ``member`` raises, once armed."""

    name = "flaky"

    def __init__(self, dev: SimDevice, member: str, nth: int) -> None:
        super().__init__(dev.api)
        self.member, self.nth, self.armed, self.calls = member, nth, False, 0

    def _maybe_raise(self, member: str) -> None:
        if self.armed and member == self.member:
            self.calls += 1
            if self.calls == self.nth:
                raise FlakyDriverError("the driver lost the device")

    def empty_cache(self) -> None:
        self._maybe_raise("empty_cache")
        super().empty_cache()

    def reset_peak_memory_stats(self, device: int) -> None:
        self._maybe_raise("reset_peak_memory_stats")
        super().reset_peak_memory_stats(device)

    def synchronize(self, device: int) -> None:
        self._maybe_raise("synchronize")
        super().synchronize(device)

    def memory_stats(self, device: int) -> Any:
        self._maybe_raise("memory_stats")
        return super().memory_stats(device)


def _profile(backend: FlakyBackend, *, region: bool) -> None:
    baseline = memacct.snapshot(backend)
    backend.armed = True
    with memacct.memory_profiling(backend, baseline, weights_memory=0) as session:
        if region:
            with session.exclude("compile"):
                pass


@pytest.mark.parametrize(
    ("member", "nth", "region", "call"),
    [
        ("empty_cache", 1, False, r"empty_cache\(\)"),  # start
        ("empty_cache", 2, False, r"empty_cache\(\)"),  # stop
        ("empty_cache", 2, True, r"empty_cache\(\)"),  # end of a region
        ("reset_peak_memory_stats", 1, False, r"reset_peak_memory_stats\(0\)"),  # start
        ("reset_peak_memory_stats", 2, True, r"reset_peak_memory_stats\(0\)"),  # a region
        ("synchronize", 1, False, r"synchronize\(0\)"),  # start
    ],
)
def test_a_plugins_exception_in_profiling_is_a_backend_error_naming_the_call(
    member: str, nth: int, region: bool, call: str
) -> None:
    backend = FlakyBackend(SimDevice("h100-80gb"), member, nth)
    with pytest.raises(BackendError, match=rf"'flaky' failed in {call}: FlakyDriverError") as info:
        _profile(backend, region=region)
    assert "test_backend_call_errors.FlakyBackend" in str(info.value)
    assert isinstance(info.value.__cause__, FlakyDriverError)
    # The failed session released the device: the next one runs.
    backend.armed = False
    _profile(backend, region=region)


def test_snapshot_keeps_its_message_through_the_shared_wrapper() -> None:
    backend = FlakyBackend(SimDevice("h100-80gb"), "synchronize", 1)
    backend.armed = True
    with pytest.raises(BackendError, match="'flaky' failed to read device 0: FlakyDriverError"):
        memacct.snapshot(backend)


class _NoIdentity(FlakyBackend):
    def device_identity(self, device: int) -> object:
        raise FlakyDriverError("no bus id")


def test_a_failing_device_identity_is_a_backend_error_before_the_session() -> None:
    backend = _NoIdentity(SimDevice("h100-80gb"), "", 0)
    baseline = memacct.snapshot(backend)
    expected = r"'flaky' failed in device_identity\(0\): FlakyDriverError"
    with pytest.raises(BackendError, match=expected):
        with memacct.memory_profiling(backend, baseline, weights_memory=0):
            pass
