"""``memacct plan --emit vllm|sglang|k8s``: the command that realises a plan, and the pod's
resources. Each emitted command, read back by ``memacct plan`` itself, plans the same numbers."""

from __future__ import annotations

import itertools
import json
import re
import shlex
from typing import Any

import pytest

from memacct.cli import main
from memacct.errors import InvalidInputError
from memacct.planner.emit import emit
from memacct.planner.offline import plan_offline
from memacct.planner.options import PlanOptions

# The numbers a plan is compared on after the round trip.
_FIGURES = ("kv_cache_bytes", "num_blocks", "kv_tokens", "max_model_len", "max_concurrency",
            "max_num_seqs", "max_num_batched_tokens", "weights_memory", "activation_peak",
            "cudagraph_memory", "block_size", "gpu_memory_utilization", "max_running_requests")


def _run(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> tuple[str, str]:
    assert main(argv) == code, capsys.readouterr().err
    captured = capsys.readouterr()
    return captured.out, captured.err


def _plan_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    out, _ = _run(capsys, [*argv, "--json"])
    data: dict[str, Any] = json.loads(out)
    return data


def as_memacct_argv(command: str, device: list[str]) -> list[str]:
    """An emitted command line as ``memacct plan`` arguments: the engine's launcher words
    become ``plan --model``, ``device`` adds the device (and the vLLM plugin, which the
    device decides, not the command line)."""
    words = shlex.split(command)
    env = [word for word in words if "=" in word and not word.startswith("-")
           and words.index(word) < words.index(next(w for w in words if "=" not in w))]
    words = words[len(env):]
    if words[:3] == ["python", "-m", "sglang.launch_server"]:
        return ["plan", "--engine", "sglang", *device, *words[3:]]
    assert words[0] in ("vllm", "vllm-mindspore") and words[1] == "serve", words
    return ["plan", *device, "--model", words[2], *words[3:]]


ROUND_TRIPS = [
    ["--model", "qwen2.5-7b", "--device", "h100", "--tensor-parallel-size", "2"],
    ["--model", "llama-3.1-8b", "--device", "l4", "--max-model-len", "-1"],
    ["--model", "llama-3.1-8b", "--device", "h100", "--quantization", "fp8", "--enable-lora",
     "--max-lora-rank", "64", "--max-loras", "4", "--kv-cache-dtype", "fp8"],
    ["--model", "qwen3-8b", "--device", "a100-80gb", "--speculative-config",
     '{"method": "ngram", "num_speculative_tokens": 4}', "--enforce-eager", "--block-size", "32"],
    ["--model", "qwen3-8b", "--device", "h100", "--kv-cache-memory-bytes", "20GiB",
     "--max-num-seqs", "64", "--max-model-len", "16384"],
    ["--model", "qwen3-30b-a3b", "--device", "h100", "--tensor-parallel-size", "2",
     "--enable-expert-parallel", "--gpu-memory-utilization", "0.85"],
    ["--model", "gemma-3-12b", "--device", "h100", "--limit-mm-per-prompt", '{"image": 2}'],
    ["--model", "llama-3.1-70b", "--device", "h100", "--tensor-parallel-size", "2",
     "--cpu-offload-gb", "8", "--pipeline-parallel-size", "2"],
    ["--model", "qwen2.5-7b", "--device", "910b", "--engine", "vllm-ascend"],
    ["--model", "qwen2.5-7b", "--device", "910b", "--engine", "vllm-mindspore",
     "--max-model-len", "8192"],
    ["--model", "qwen2.5-7b", "--device", "h100", "--engine", "sglang"],
    ["--model", "gpt-oss-20b", "--device", "h100", "--engine", "sglang",
     "--gpu-memory-utilization", "0.8", "--swa-full-tokens-ratio", "0.5"],
    ["--model", "qwen3-8b", "--device", "h100", "--engine", "sglang", "--max-running-requests",
     "48", "--block-size", "16", "--kv-cache-dtype", "fp8_e4m3", "--max-model-len", "8192",
     "--enforce-eager"],
]  # fmt: skip


@pytest.mark.parametrize("argv", ROUND_TRIPS, ids=lambda argv: " ".join(argv[1:6]))
def test_the_emitted_command_plans_the_same_numbers(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    target = "sglang" if "sglang" in argv else "vllm"
    at = argv.index("--device")
    device = argv[at:at + 2]
    for plugin in ("vllm-ascend", "vllm-mindspore"):
        if plugin in argv:
            device += ["--engine", plugin]
    command, _ = _run(capsys, ["plan", *argv, "--emit", target])
    assert command.count("\n") == 1, command  # one line, as pasted
    again = as_memacct_argv(command.strip(), device)
    before = _plan_json(capsys, ["plan", *argv])
    after = _plan_json(capsys, again)
    assert {key: after[key] for key in _FIGURES} == {key: before[key] for key in _FIGURES}


def test_the_vllm_line_carries_every_setting_that_moves_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command, err = _run(capsys, ["plan", "--model", "llama-3.1-8b", "--device", "h100", "-tp",
                                 "2", "--max-model-len", "8192", "--enable-lora",
                                 "--max-lora-rank", "32", "--quantization", "fp8",
                                 "--emit", "vllm"])  # fmt: skip
    words = shlex.split(command)
    assert words[:3] == ["vllm", "serve", "llama-3.1-8b"]
    pairs = dict(itertools.pairwise(words))
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--max-model-len"] == "8192"
    assert pairs["--max-lora-rank"] == "32" and pairs["--quantization"] == "fp8"
    assert pairs["--gpu-memory-utilization"] == "0.9" and "--enable-lora" in words
    # The batch limits vLLM's defaults gave on an H100 are pinned, as planned.
    assert pairs["--max-num-seqs"] == "1024" and pairs["--max-num-batched-tokens"] == "8192"
    assert "preset" in err  # a preset is no checkpoint: said on stderr, not in the line


def test_the_sglang_line_is_spelt_as_sglang_spells_it(capsys: pytest.CaptureFixture[str]) -> None:
    command, _ = _run(capsys, ["plan", "--model", "qwen2.5-7b", "--device", "h100", "--engine",
                               "sglang", "--gpu-memory-utilization", "0.85", "--max-model-len",
                               "8192", "--emit", "sglang"])  # fmt: skip
    words = shlex.split(command)
    assert words[:5] == ["python", "-m", "sglang.launch_server", "--model-path", "qwen2.5-7b"]
    pairs = dict(itertools.pairwise(words))
    assert pairs["--tp-size"] == "1" and pairs["--context-length"] == "8192"
    assert pairs["--mem-fraction-static"] == "0.85" and "--max-running-requests" in pairs
    assert "--gpu-memory-utilization" not in words and "--max-model-len" not in words


def test_what_the_engine_reads_from_its_environment_comes_first() -> None:
    opts = PlanOptions(device="h100", max_model_len=65536, allow_long_max_model_len=True,
                       sampler="flashinfer")  # fmt: skip
    out = emit("vllm", plan_offline("qwen2.5-7b", opts), opts, model="org/m")
    assert out.text.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 VLLM_USE_FLASHINFER_SAMPLER=1 "
                               "vllm serve org/m ")  # fmt: skip
    assert out.argv[:3] == ("vllm", "serve", "org/m") and "--max-model-len" in out.argv


@pytest.mark.parametrize(
    ("release", "settings", "refused"),
    [("0.8", {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}'},
      "no --speculative-config (its argument parser takes it from 0.8.2)"),
     ("0.10.1", {"kv_cache_memory_bytes": 10 * 1024**3}, "from 0.10.2"),
     ("0.10", {"kv_cache_dtype": "bfloat16"}, "--kv-cache-dtype bfloat16"),
     ("0.8.3", {"data_parallel_size": 2}, None), ("0.8.2", {"data_parallel_size": 2}, "0.8.3")],
)  # fmt: skip
def test_a_flag_the_planned_release_lacks_is_refused(
    release: str, settings: dict[str, Any], refused: str | None
) -> None:
    opts = PlanOptions.from_kwargs(device="h100", engine_version=release, max_model_len=8192,
                                   **settings)  # fmt: skip
    plan = plan_offline("qwen3-30b-a3b", opts)
    if refused is None:
        assert "--data-parallel-size 2" in emit("vllm", plan, opts, model="m").text
        return
    with pytest.raises(InvalidInputError, match=re.escape(refused)):
        emit("vllm", plan, opts, model="m")


def test_before_0_8_5_the_multimodal_limits_are_written_as_vllm_read_them() -> None:
    opts = PlanOptions.from_kwargs(device="h100", engine_version="0.8.4", max_model_len=8192,
                                   limit_mm_per_prompt='{"image": 2, "video": 0}')  # fmt: skip
    words = emit("vllm", plan_offline("gemma-3-12b", opts), opts, model="m").argv
    assert words[words.index("--limit-mm-per-prompt") + 1] == "image=2,video=0"
    later = PlanOptions.from_kwargs(opts, engine_version="0.8.5")
    words = emit("vllm", plan_offline("gemma-3-12b", later), later, model="m").argv
    assert json.loads(words[words.index("--limit-mm-per-prompt") + 1]) == {"image": 2, "video": 0}


def test_vllm_mindspore_has_its_own_launcher() -> None:
    opts = PlanOptions(engine="vllm-mindspore", device="910b", max_model_len=8192)
    out = emit("vllm", plan_offline("qwen2.5-7b", opts), opts, model="org/m", revision="v1")
    assert out.argv[:5] == ("vllm-mindspore", "serve", "org/m", "--revision", "v1")


def test_an_auto_fit_length_is_emitted_as_the_length_found(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["plan", "--model", "llama-3.1-8b", "--device", "l4", "--max-model-len", "-1"]
    found = _plan_json(capsys, base)["max_model_len"]
    command, _ = _run(capsys, [*base, "--emit", "vllm"])
    words = shlex.split(command)
    assert words[words.index("--max-model-len") + 1] == str(found) != "-1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--model", "llama-3.1-70b", "--device", "l4", "--emit", "vllm"], "does not fit"),
     (["--model", "qwen2.5-7b", "--device", "h100", "--emit", "sglang"], "--engine sglang"),
     (["--model", "qwen2.5-7b", "--device", "h100", "--engine", "sglang", "--emit", "vllm"],
      "--engine vllm"),
     (["--model", "qwen2.5-7b", "--device", "h100", "--emit", "vllm", "--json"], "--json"),
     (["--model", "qwen2.5-7b", "--device", "h100,l4", "--emit", "k8s", "--plot", "p.svg"],
      "--plot draws the plan"),
     (["--model", "qwen2.5-7b", "--device-memory", "24GiB", "--emit", "k8s"], "--device ("),
     (["--model", "qwen2.5-7b", "--device", "h100", "--engine-version", "0.10",
       "--kv-cache-memory-bytes", "10GiB", "--emit", "vllm"], "0.10 has no --kv-cache-memory")],
)  # fmt: skip
def test_what_cannot_be_emitted_is_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = _run(capsys, ["plan", *argv], code=2)
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_capacity_plan_emits_one_command_per_fitting_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command, _ = _run(capsys, ["plan", "--model", "llama-3.1-70b", "--device", "h100,l4",
                               "--tensor-parallel-size", "1,2,4", "--emit", "vllm"])
    lines = command.strip().splitlines()
    heads = [line for line in lines if line.startswith("# ")]
    serve = [line for line in lines if line.startswith("vllm serve")]
    out, _ = _run(capsys, ["plan", "--model", "llama-3.1-70b", "--device", "h100,l4",
                           "--tensor-parallel-size", "1,2,4", "--json"])
    fitting = [row for row in json.loads(out) if row["fits"]]
    assert 0 < len(serve) == len(heads) == len(fitting) < 6
    for line, row in zip(serve, fitting, strict=True):
        assert f"--tensor-parallel-size {row['tensor_parallel_size']} " in line


# --------------------------------------------------------------------------- k8s


def _k8s(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    out, _ = _run(capsys, ["plan", "--model", "qwen2.5-7b", *argv, "--emit", "k8s"])
    return out


def test_the_pod_asks_for_each_rank_and_shared_memory_for_tensor_parallelism(
    capsys: pytest.CaptureFixture[str],
) -> None:
    four = _k8s(capsys, "--device", "h100", "--tensor-parallel-size", "4")
    assert 'nvidia.com/gpu: "4"' in four and "mountPath: /dev/shm" in four
    assert "medium: Memory" in four and "sizeLimit: 2Gi" in four
    one = _k8s(capsys, "--device", "h100")
    assert 'nvidia.com/gpu: "1"' in one and "/dev/shm" not in one
    amd = _k8s(capsys, "--device", "mi300x", "--tensor-parallel-size", "2")
    assert 'amd.com/gpu: "2"' in amd and "sizeLimit: 8Gi" in amd


@pytest.mark.parametrize(("device", "resource"), [("910b", "huawei.com/Ascend910"),
                                                  ("ascend-310p-24gb", "huawei.com/Ascend310P"),
                                                  ("300i-duo", "huawei.com/Ascend310P")])
def test_the_ascend_device_plugin_resource(
    device: str, resource: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _k8s(capsys, "--device", device, "--engine", "vllm-ascend", "--max-model-len", "4096")
    assert f'{resource}: "1"' in out


def test_host_memory_counts_the_weights_and_the_cpu_offload() -> None:
    opts = PlanOptions(device="h100", max_model_len=8192)
    plan = plan_offline("qwen2.5-7b", opts)
    plain = emit("k8s", plan, opts, model="m").text
    offload = PlanOptions.from_kwargs(opts, cpu_offload_gb=10)
    with_offload = emit("k8s", plan_offline("qwen2.5-7b", offload), offload, model="m").text

    def memory(text: str) -> int:
        line = next(line for line in text.splitlines() if line.strip().startswith("memory:"))
        return int(line.split(":")[1].strip().removesuffix("Gi"))

    assert memory(plain) == -(-plan.weights_memory // 1024**3)
    assert 9 <= memory(with_offload) - memory(plain) <= 10  # the offloaded 10 GiB, moved


def test_a_unified_memory_device_asks_the_host_for_the_engine_too() -> None:
    opts = PlanOptions(device="gb10-128gb", max_model_len=8192)
    plan = plan_offline("qwen2.5-7b", opts)
    text = emit("k8s", plan, opts, model="m").text
    assert "unified memory" in text
    line = next(line for line in text.splitlines() if line.strip().startswith("memory:"))
    assert int(line.split(":")[1].strip().removesuffix("Gi")) * 1024**3 >= (
        plan.weights_memory + (plan.target_allocation or 0))


def test_an_unknown_target_is_refused() -> None:
    opts = PlanOptions(device="h100")
    with pytest.raises(InvalidInputError, match="not a target"):
        emit("docker", plan_offline("qwen2.5-7b", opts), opts, model="m")
