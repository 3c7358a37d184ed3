"""The conformance suite itself: it fails backends that break the protocol."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

HEADER = """
import pytest
from memacct import Availability, TorchLikeBackend
from memacct.sim import SimDevice
from memacct.testing import Allocator, BackendConformance

dev = SimDevice(total_bytes=8 * 2**30)

class Backend(TorchLikeBackend):
    name = "acme"

    @classmethod
    def availability(cls):
        return Availability(True, "acme device present")
"""


def suite(backend: str, allocator: str | None = None) -> str:
    """The source of ``TestAcme``: the suite over ``backend`` (an expression) and, where
    given, the ``allocator`` fixture returning ``allocator``."""
    source = f"""
class TestAcme(BackendConformance):
    @pytest.fixture
    def backend(self):
        return {backend}
"""
    if allocator is not None:
        source += f"""
    @pytest.fixture
    def allocator(self):
        return {allocator}
"""
    return source


def run_suite(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makepyfile(test_acme=HEADER + body)
    return pytester.runpytest("-p", "no:cacheprovider", "-rfs")


def test_backend_missing_a_protocol_method_fails_the_suite(pytester: pytest.Pytester) -> None:
    result = run_suite(
        pytester,
        """
class NoStats:
    name = "acme"
    default_truth_source = "allocated_peak"
    def device_count(self): return 1
    def mem_get_info(self, device): return (1, 2)
"""
        + suite("NoStats()"),
    )
    result.stdout.fnmatch_lines(
        [
            "*test_backend_implements_the_protocol*",
            "*missing memory_stats, reset_peak_memory_stats*",
        ]
    )
    assert result.parseoutcomes()["failed"] >= 1


def test_subclass_without_backend_fixture_is_told_to_add_one(pytester: pytest.Pytester) -> None:
    result = run_suite(
        pytester,
        """
class TestAcme(BackendConformance):
    pass
""",
    )
    result.stdout.fnmatch_lines(
        ["*TestAcme subclasses BackendConformance but defines no `backend`*"]
    )


def test_peaks_that_do_not_reset_fail_the_suite(pytester: pytest.Pytester) -> None:
    result = run_suite(
        pytester,
        """
class StickyPeaks(Backend):
    def reset_peak_memory_stats(self, device):
        pass
"""
        + suite("StickyPeaks(dev.api)", "Allocator(dev.malloc, dev.free)"),
    )
    outcomes = result.parseoutcomes()
    result.stdout.fnmatch_lines(["FAILED *test_peaks_equal_current_after_reset*"])
    assert outcomes["failed"] >= 1


def test_checks_that_allocate_are_skipped_with_a_reason_without_allocator(
    pytester: pytest.Pytester,
) -> None:
    result = run_suite(pytester, suite("Backend(dev.api)"))
    assert "failed" not in result.parseoutcomes()
    result.stdout.fnmatch_lines(
        ["*SKIPPED*provides no `allocator` fixture, so the suite cannot put memory on the device*"]
    )


def test_allocation_larger_than_the_slack_fails_the_suite(pytester: pytest.Pytester) -> None:
    result = run_suite(
        pytester,
        # Allocates 2 MiB more than asked, as a careless adapter might.
        suite("Backend(dev.api)", "Allocator(lambda n: dev.malloc(n + 2**21), dev.free)"),
    )
    result.stdout.fnmatch_lines(
        ["*allocated grew by 69206016 bytes for a 67108864-byte allocation*"]
    )
