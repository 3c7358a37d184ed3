"""Benchmark: how long ``memacct plan --model X --device h100`` takes on each way of naming X.

The paths: a preset; a local ``config.json`` (one the per-family formulas size, and
one they do not, whose weights come from transformers on the meta device and then
from memacct's cache); a checkpoint directory (four safetensors shards of
Qwen2.5-7B-Instruct's real tensor table, sparse files: the headers are real, the data
zeros); a ``.gguf`` file; and a Hugging Face Hub id served by ``tests/hubserver.py`` on
127.0.0.1 (the real ``huggingface_hub`` client; nothing else is contacted), cold (an
empty cache, with the requests counted) and warm (the file-list request only).

Each figure is the whole command in a fresh interpreter, the median of ``--runs``
warm runs (after one run that fills the caches), as wall time and as CPU time (user +
system, which does not depend on how busy the machine is). Target: under 1 s warm.

Run from the repository root::

    .venv/bin/python benchmarks/bench_model_paths.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from memacct.planner import load_model_preset  # noqa: E402

REPO = "bench/qwen2.5-7b"


def qwen_tensors(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Qwen2.5-7B-Instruct's tensor names and shapes, as its published checkpoint has them."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    kv_dim = kv * h // heads
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}"
        out |= {
            f"{p}.self_attn.q_proj.weight": (h, h), f"{p}.self_attn.q_proj.bias": (h,),
            f"{p}.self_attn.k_proj.weight": (kv_dim, h), f"{p}.self_attn.k_proj.bias": (kv_dim,),
            f"{p}.self_attn.v_proj.weight": (kv_dim, h), f"{p}.self_attn.v_proj.bias": (kv_dim,),
            f"{p}.self_attn.o_proj.weight": (h, h), f"{p}.mlp.gate_proj.weight": (i, h),
            f"{p}.mlp.up_proj.weight": (i, h), f"{p}.mlp.down_proj.weight": (h, i),
            f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
        }  # fmt: skip
    out |= {"model.norm.weight": (h,), "lm_head.weight": (v, h)}
    return out


def header_bytes(tensors: dict[str, tuple[int, ...]]) -> tuple[bytes, int]:
    """A safetensors header (8-byte length + JSON, padded as the format pads it) and the
    data size it describes."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        size = 2
        for d in shape:
            size *= d
        entries[name] = {"dtype": "BF16", "shape": list(shape),
                         "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_checkpoint(root: Path, config: dict[str, Any], shards: int = 4) -> dict[str, bytes]:
    """A checkpoint directory of sparse shards; returns the Hub's files (headers only)."""
    root.mkdir(parents=True)
    tensors = list(qwen_tensors(config).items())
    per = -(-len(tensors) // shards)
    hub_files: dict[str, bytes] = {"config.json": json.dumps(config).encode()}
    weight_map: dict[str, str] = {}
    for k in range(shards):
        part = dict(tensors[k * per : (k + 1) * per])
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        header, data_size = header_bytes(part)
        with (root / name).open("wb") as fh:
            fh.write(header)
            fh.truncate(len(header) + data_size)  # sparse: no disk used for the zeros
        hub_files[name] = header  # the Hub serves the header; nothing past it is asked for
        weight_map |= dict.fromkeys(part, name)
    index = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    (root / "config.json").write_bytes(hub_files["config.json"])
    (root / "model.safetensors.index.json").write_bytes(index)
    hub_files["model.safetensors.index.json"] = index
    return hub_files


def write_gguf(path: Path) -> bool:
    try:
        import gguf
        import numpy as np
    except ImportError:
        return False
    writer = gguf.GGUFWriter(str(path), "qwen2")
    for key, value in (("block_count", 28), ("context_length", 32768),
                       ("embedding_length", 3584), ("feed_forward_length", 18944),
                       ("head_count", 28), ("head_count_kv", 4)):  # fmt: skip
        getattr(writer, f"add_{key}")(value)
    writer.add_tensor("token_embd.weight", np.zeros((1024, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return True


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, check=False, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.returncode


def serving(hub: Any) -> Iterator[Any]:
    from hubserver import serve

    yield from serve(hub)


def main() -> int:
    """Print one line per path and the slowest warm command."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    memacct = str(Path(sys.executable).with_name("memacct"))
    from hubserver import FakeHub, Repo

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "MEMACCT_CACHE_DIR": str(tmp / "memacct"),
               "HF_HOME": str(tmp / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}  # fmt: skip
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
            env.pop(name, None)
        qwen = load_model_preset("qwen2.5-7b")
        (tmp / "qwen-config.json").write_text(json.dumps(qwen))
        (tmp / "granite-config.json").write_text(
            json.dumps(load_model_preset("granite-4.0-h-small"))
        )
        hub_files = write_checkpoint(tmp / "Qwen2.5-7B-Instruct", qwen)
        paths: list[tuple[str, str]] = [
            ("preset", "qwen2.5-7b"),
            ("local config.json (formulas)", str(tmp / "qwen-config.json")),
            ("local config.json (meta device, cached)", str(tmp / "granite-config.json")),
            ("checkpoint directory (4 shards)", str(tmp / "Qwen2.5-7B-Instruct")),
        ]
        if write_gguf(tmp / "qwen2.gguf"):
            paths.append((".gguf file", str(tmp / "qwen2.gguf")))
        hub = FakeHub({REPO: Repo(hub_files)})
        slowest = 0.0
        for server in serving(hub):
            # The endpoint is read at import by huggingface_hub: the child gets it from its env.
            env["HF_ENDPOINT"] = server.url
            cold = run([memacct, "plan", "--model", REPO, "--device", "h100", "--json"], env)
            cold_requests = hub.count()
            paths.append(("Hub id (local server, warm)", REPO))
            for label, model in paths:
                command = [memacct, "plan", "--model", model, "--device", "h100", "--json"]
                run(command, env)  # fills the caches
                hub.requests.clear()
                figures = [run(command, env) for _ in range(opts.runs)]
                codes = {code for _, _, code in figures}
                wall = statistics.median(w for w, _, _ in figures)
                cpu = statistics.median(c for _, c, _ in figures)
                slowest = max(slowest, wall)
                extra = f", {hub.count() // opts.runs} request(s) per run" if model == REPO else ""
                print(f"{label}: {1000 * wall:.0f} ms wall / {1000 * cpu:.0f} ms CPU (median of "
                      f"{opts.runs}, exit {sorted(codes)}){extra}")  # fmt: skip
            print(f"Hub id (local server, cold, empty caches): {1000 * cold[0]:.0f} ms wall / "
                  f"{1000 * cold[1]:.0f} ms CPU, {cold_requests} requests, exit {cold[2]}")
        print(f"slowest warm command: {1000 * slowest:.0f} ms wall (target < 1000 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
