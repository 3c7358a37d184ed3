"""The command line through its real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memacct import BackendInfo, MemorySnapshot, __version__
from memacct.cli import main

BIN = Path(sys.executable).parent / "memacct"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed console script, as a user would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMACCT_")}
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_version_through_console_script() -> None:
    out = run("--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"memacct {__version__}")


def test_python_dash_m_works_the_same() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memacct", "--version"], capture_output=True, text=True, check=False
    )
    assert (out.returncode, out.stdout.strip()) == (0, f"memacct {__version__}")


def test_backends_json_lists_sim_available(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends", "--json"]) == 0
    infos = [BackendInfo.model_validate(item) for item in json.loads(capsys.readouterr().out)]
    by_name = {info.name: info for info in infos}
    assert by_name["sim"].available
    assert by_name["sim"].distribution == "memacct"


def test_backends_table_shows_each_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "sim" in out and "simulated device" in out


def test_snapshot_json_is_a_valid_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim", "--json"]) == 0
    snap = MemorySnapshot.model_validate_json(capsys.readouterr().out)
    assert snap.backend == "sim" and snap.free == snap.total


def test_snapshot_table_in_gib(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim"]) == 0
    out = capsys.readouterr().out
    assert "79.19" in out and "other processes" in out


def test_unknown_backend_is_one_line_and_exit_2() -> None:
    out = run("snapshot", "--backend", "nope")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "no memacct backend named 'nope'" in out.stderr
    assert "Traceback" not in out.stderr


def test_device_out_of_range_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--backend", "sim", "--device", "3"]) == 2
    assert "device 3 is out of range" in capsys.readouterr().err


def test_non_positive_watch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--watch", "0"]) == 2
    assert "--watch 0 is not a refresh interval: give at least 0.1 seconds" in (
        capsys.readouterr().err
    )


def test_unknown_command_is_a_usage_error() -> None:
    assert main(["nosuch"]) == 2


def test_offline_plan_json_keeps_the_plan_keys_and_adds_cudagraph_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--model", "qwen2.5-7b", "--device", "h100-80gb", "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    for key in ("weights_memory", "activation_peak", "non_allocator_increase", "kv_cache_bytes",
                "num_blocks", "kv_tokens", "max_concurrency", "cudagraph_memory"):  # fmt: skip
        assert key in plan, key
    assert plan["fits"] and plan["num_blocks"] > 0
    assert plan["num_blocks"] * plan["block_bytes"] <= plan["kv_cache_bytes"]
    assert plan["kv_tokens"] == plan["num_blocks"] * plan["block_size"]


def test_offline_plan_prints_the_verdict_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "qwen2.5-7b", "--device", "a100-40gb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("fits: ") and "concurrent requests of 32,768 tokens" in lines[0]
    assert "(KV cache " in lines[0]


def test_offline_plan_that_does_not_fit_says_what_to_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--model", "llama-3.1-70b", "--device", "l4-24gb"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("does not fit: the weights alone")
    assert any("--tensor-parallel-size to 8" in line for line in out)


def test_offline_plan_without_a_device_says_which_it_simulates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--model", "qwen2.5-7b"]) == 0
    assert "no device given: planned for an NVIDIA H100 80GB" in capsys.readouterr().out


def test_offline_plan_of_gpt_oss_works_with_kv_cache_dtype_auto(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--model", "gpt-oss-20b", "--device", "l4", "--kv-cache-dtype", "auto"]
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("fits: ")


def test_offline_plan_for_any_device_memory_and_eager(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "qwen2.5-7b", "--device-memory", "24GiB", "--enforce-eager",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["total_memory"] == 24 * 2**30 and plan["cudagraph_memory"] == 0


def test_plan_from_saved_profile_matches_the_library(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from _harness import simulate_engine_start

    from memacct import KVCachePlan, KVCacheSpec, load_model_preset, plan_kv_cache, save_profile

    config = load_model_preset("llama-3.1-8b")
    start = simulate_engine_start(config, device="h100-80gb", truth_source="reserved")
    save_profile(start.result, tmp_path / "profile.json")
    expected = plan_kv_cache(
        start.result, KVCacheSpec.from_hf_config(config), gpu_memory_utilization=0.8,
        max_num_batched_tokens=8192,
    )  # fmt: skip
    argv = ["plan", "--profile", str(tmp_path / "profile.json"), "--model", "llama-3.1-8b",
            "--gpu-memory-utilization", "0.8", "--json"]  # fmt: skip
    assert main(argv) == 0
    got = KVCachePlan.model_validate_json(capsys.readouterr().out)
    assert (got.num_blocks, got.kv_cache_bytes, got.target_allocation) == (
        expected.num_blocks, expected.kv_cache_bytes, expected.target_allocation,
    )  # fmt: skip


def test_plot_png_has_the_expected_size(tmp_path: Path) -> None:
    png = tmp_path / "plan.png"
    assert main(["plan", "--model", "qwen2.5-7b", "--device", "h100-80gb", "--plot", str(png)]) == 0
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert (width, height) == (1200, 540)


def test_plot_svg_labels_every_segment(tmp_path: Path) -> None:
    svg = tmp_path / "plan.svg"
    argv = ["plan", "--model", "qwen2.5-7b", "--device", "h100-80gb", "--plot", str(svg)]
    assert main(argv) == 0
    text = svg.read_text()
    for label in ("non-allocator", "weights", "activation peak", "CUDA graphs", "KV blocks",
                  "headroom"):  # fmt: skip
        assert label in text


def test_model_list_prints_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "list"]) == 0
    names = capsys.readouterr().out.split()
    assert "qwen2.5-7b" in names and "deepseek-v3" in names


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "missing.json"], "does not exist"),
        (["--model", "nosuch"], "neither a config.json file nor a model preset"),
        (["--model", "qwen2.5-7b", "--device", "h999"], "unknown device 'h999'"),
        (["--model", "qwen2.5-7b", "--gpu-memory-utilization", "0"], "got 0.0"),
        (["--model", "qwen2.5-7b", "--gpu-memory-utilization", "1.5"], "got 1.5"),
        (["--model", "qwen2.5-7b", "--gpu-memory-utilization", "nan"], "got nan"),
        (["--model", "qwen2.5-7b", "--block-size", "0"], "--block-size must be positive"),
        (["--model", "qwen2.5-7b", "--max-model-len", "10000000"], "position limit (32768"),
        (["--model", "qwen2.5-7b", "--kv-cache-dtype", "int3"], "unknown --kv-cache-dtype 'int3'"),
        (["--model", "qwen2.5-7b", "--plot", "x.gif"], "must end in .png or .svg"),
        (["--model", "qwen2.5-7b", "--device-memory", "lots"], "is not a size"),
        (["--model", "qwen2.5-7b", "--max-num-batched-tokens", "0"], "must be positive"),
    ],
)
def test_bad_plan_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memacct: error: ") and message in err
    assert err.count("\n") == 1


def test_invalid_profile_json_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "profile.json"
    bad.write_text("{bad")
    assert main(["plan", "--profile", str(bad), "--model", "qwen2.5-7b"]) == 2
    assert "is not a valid ProfileResult" in capsys.readouterr().err


def test_snapshot_watch_refreshes_until_interrupted() -> None:
    from _cli import watch_lines

    lines, err, returncode = watch_lines("snapshot", "--backend", "sim", "--json", "--watch", "0.1")
    snaps = [MemorySnapshot.model_validate_json(line) for line in lines]
    assert len({s.timestamp for s in snaps}) == 3
    assert returncode == 0 and "Traceback" not in err


@pytest.mark.parametrize(
    ("scaling", "derived"),
    [
        (None, (32768, "max_position_embeddings")),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
         (131072, "max_position_embeddings x rope_scaling.factor 4")),
        ({"type": "linear", "factor": 2},
         (65536, "max_position_embeddings x rope_scaling.factor 2")),
        ({"rope_type": "llama3", "factor": 8.0}, (32768, "max_position_embeddings")),
    ],
)  # fmt: skip
def test_derived_max_model_len_follows_rope_scaling(
    scaling: dict[str, object] | None, derived: tuple[int, str]
) -> None:
    from memacct.model.config import ModelConfig

    config = {"max_position_embeddings": 32768, "rope_scaling": scaling}
    assert ModelConfig(config, "config.json").position_limit == derived


def test_offline_plan_follows_an_older_engine_release(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "llama-3.1-8b", "--device", "h100", "--json"]
    # 0.11.1 samples by the sort (a larger peak than 0.33's FlashInfer; 0.9.0-0.11.0 take
    # FlashInfer as their vllm-openai image does: releases.default_sampler).
    assert main([*base, "--engine-version", "0.11.1"]) == 0
    old = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    new = json.loads(capsys.readouterr().out)
    assert old["engine_version"] == "0.11.1" and old["cudagraph_memory"] == 0
    assert old["budget"]["cudagraph_estimate"] > 0  # estimated, not charged before 0.21
    assert old["activation_peak"] > new["activation_peak"]
    assert main([*base, "--engine-version", "latest"]) == 2


# ---------------------------------------------------------------- external subcommands (lazy)


@pytest.fixture
def fresh_app(monkeypatch: pytest.MonkeyPatch) -> object:
    """The CLI group without any external command loaded yet (restored afterwards)."""
    from memacct.cli import app

    monkeypatch.delitem(app.commands, "bench", raising=False)
    return app


def _entry_points_spy(monkeypatch: pytest.MonkeyPatch, fake: list[object] | None) -> list[str]:
    """Replace importlib.metadata.entry_points for memacct's group; returns the calls."""
    import importlib.metadata as md

    from memacct.cli import CLI_GROUP

    real = md.entry_points
    calls: list[str] = []

    def spy(**kwargs: object) -> object:
        if kwargs.get("group") != CLI_GROUP:
            return real(**kwargs)  # type: ignore[arg-type]
        calls.append(str(kwargs))
        return real(**kwargs) if fake is None else fake  # type: ignore[arg-type]

    monkeypatch.setattr(md, "entry_points", spy)
    return calls


def test_core_commands_never_read_the_entry_points(
    fresh_app: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _entry_points_spy(monkeypatch, None)
    assert main(["plan", "--model", "qwen2.5-7b", "--device", "h100-80gb"]) == 0
    assert main(["backends", "--json"]) == 0
    assert calls == []
    assert "bench" not in fresh_app.commands  # type: ignore[attr-defined]
    capsys.readouterr()


def test_bench_comes_from_memacct_bench_when_installed(
    fresh_app: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    calls = _entry_points_spy(monkeypatch, None)
    if importlib.util.find_spec("memacct_bench") is None:
        # The core alone (make test-core): the one-line error names the distribution.
        assert main(["bench"]) == 2
        assert "memacct-bench" in capsys.readouterr().err
        return
    assert main(["bench", "--help"]) == 0
    assert "truth-source accuracy benchmark" in capsys.readouterr().out
    assert len(calls) == 1  # looked up once, by name, then kept
    assert main(["--help"]) == 0
    assert "bench" in capsys.readouterr().out


def test_bench_without_memacct_bench_is_one_line_naming_the_distribution(
    fresh_app: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _entry_points_spy(monkeypatch, [])
    assert main(["bench", "--output", "x.md"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'memacct bench' comes with memacct-bench" in err and "not installed" in err
    assert main(["--help"]) == 0
    assert "not installed: memacct-bench" in capsys.readouterr().out


def test_a_broken_plugin_is_reported_and_the_rest_still_works(
    fresh_app: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken:
        name = "bench"
        value = "broken_pkg:command"

        def load(self) -> object:
            raise ImportError("no module named broken_pkg")

    _entry_points_spy(monkeypatch, [Broken()])
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "failed to load: no module named broken_pkg" in err
    assert "comes with memacct-bench" in err
    assert main(["backends", "--json"]) == 0


def test_an_unknown_command_still_reads_as_one(
    fresh_app: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _entry_points_spy(monkeypatch, [])
    assert main(["nosuch"]) == 2
    assert "No such command 'nosuch'" in capsys.readouterr().err
    assert len(calls) == 1
