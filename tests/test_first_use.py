"""First use, as a newcomer meets it: the plot, the snapshot, --watch, error messages."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from memacct.cli import main

BIN = Path(sys.executable).parent / "memacct"
MODEL = ["--model", "qwen2.5-7b", "--device", "h100-80gb"]


@pytest.fixture(scope="module")
def svg(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("plot") / "plan.svg"
    assert main(["plan", *MODEL, "--plot", str(path)]) == 0
    return path.read_text()


def test_plot_title_names_the_device_not_the_backend_index(svg: str) -> None:
    assert "qwen2.5-7b on NVIDIA H100 80GB" in svg
    assert "sim:0" not in svg and "offline:" not in svg


def test_plot_marks_the_utilization_target(svg: str) -> None:
    assert re.search(r"target 71\.27 GiB \(gpu_memory_utilization 0\.9\)", svg)


def test_plot_shows_blocks_and_concurrency(svg: str) -> None:
    assert re.search(r"\d{2},\d{3} blocks of 16 tokens", svg)
    assert re.search(r"maximum concurrency \d+\.\d\dx at 32,768 tokens per request", svg)


def test_plot_zooms_into_the_parts_too_small_for_the_bar(svg: str) -> None:
    assert "zoom: the parts under 4% of the device" in svg
    for small in ("activation peak", "non-allocator"):
        assert small in svg
    assert re.search(r"0\.\d{3} GiB", svg)  # the small parts, readable to the MiB


def test_plot_png_has_no_blank_third(tmp_path: Path) -> None:
    import matplotlib.image

    png = tmp_path / "plan.png"
    assert main(["plan", *MODEL, "--plot", str(png)]) == 0
    pixels = matplotlib.image.imread(str(png))[:, :, :3]
    blank_rows = (pixels.min(axis=(1, 2)) > 0.99).sum()  # rows with nothing drawn
    assert blank_rows / pixels.shape[0] < 0.2


def test_snapshot_of_a_fresh_simulated_device_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim"]) == 0
    assert "memacct snapshot --demo" in capsys.readouterr().out


def test_snapshot_demo_shows_a_device_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--demo", "--json"]) == 0
    from memacct import MemorySnapshot

    snap = MemorySnapshot.model_validate_json(capsys.readouterr().out)
    assert snap.allocated == 14 * 2**30 and snap.reserved == 16 * 2**30
    assert snap.other_processes == 6 * 2**30 and snap.non_allocator == 2**29


def test_snapshot_demo_with_a_real_backend_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--demo", "--backend", "cuda"]) == 2
    assert "--demo shows a simulated device" in capsys.readouterr().err


def test_watch_piped_prints_one_line_per_refresh() -> None:
    from _cli import watch_lines

    lines, err, returncode = watch_lines("snapshot", "--demo", "--watch", "0.1")
    assert all(re.match(r"\d\d:\d\d:\d\d sim:0 used 22\.50GiB of 79\.19GiB", ln) for ln in lines)
    assert returncode == 0 and "Traceback" not in err


@pytest.mark.parametrize("interval", ["1e-9", "0.05", "nan", "inf", "-1"])
def test_watch_interval_below_the_minimum_is_refused(
    interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["snapshot", "--watch", interval]) == 2
    assert "give at least 0.1 seconds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--model", "qwen2.5-7b", "--block-size", "x"],
         "Invalid value for '--block-size': 'x' is not a valid integer"),
        (["plan"], "Missing option '--model'"),
        (["snapshot", "--nope"], "No such option '--nope'"),
        (["plan", "--model", "qwen2.5-7b", "--plot", "/tmp"], "--plot '/tmp' must end in .png"),
    ],
)  # fmt: skip
def test_click_errors_speak_memacct_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memacct: error: ") and message in err
    assert "Usage:" not in err and "Error: " not in err


def test_memacct_alone_shows_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) in (0, 2)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Usage: memacct" in text and "Commands:" in text
    assert "memacct: error" not in text


def test_one_kv_figure_everywhere_with_the_reserve_as_its_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from _harness import simulate_engine_start

    from memacct.planner import load_model_preset, save_profile

    config = load_model_preset("qwen2.5-7b")
    path = save_profile(simulate_engine_start(config, device="h100-80gb").result, tmp_path / "p")
    assert main(["plan", "--model", "qwen2.5-7b", "--profile", str(path)]) == 0
    out = capsys.readouterr().out
    reported = re.search(r"^kv_cache_size\s+(\d+\.\d\d)GiB$", out, re.M)
    in_table = re.search(r"│ kv_cache_size\s+│\s+(\d+\.\d\d) │", out)
    parts = [float(x) for x in re.findall(r"│\s{3}(?:blocks|allocator reserve|remainder)\s+│\s+"
                                          r"(\d+\.\d\d) │", out)]  # fmt: skip
    in_plan_line = re.search(r"of kv_cache_size (\d+\.\d\d)GiB", out)
    assert reported and in_table and in_plan_line and len(parts) == 3
    assert reported[1] == in_table[1] == in_plan_line[1]
    assert abs(sum(parts) - float(reported[1])) <= 0.015  # the parts sum to it (2-digit rounding)
