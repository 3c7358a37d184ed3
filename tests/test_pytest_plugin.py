"""The pytest plugin as a downstream project sees it."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_backend_markers_skip_unavailable_and_run_available(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cuda
        def test_on_gpu(memacct_backend):
            assert memacct_backend.name == "cuda"

        @pytest.mark.sim
        def test_on_sim(memacct_backend):
            assert memacct_backend.name == "sim"
            free, total = memacct_backend.mem_get_info(0)
            assert 0 < free <= total
        """
    )
    result = pytester.runpytest("--strict-markers", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*memacct backend 'cuda' not available: *"])


def test_every_known_backend_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers", "-p", "no:cacheprovider")
    for name in ("sim", "cuda", "npu", "mindspore", "nvml"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}: needs the memacct backend*"])


def test_unmarked_fixture_gives_the_simulated_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_default(memacct_backend):
            assert memacct_backend.name == "sim"
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
