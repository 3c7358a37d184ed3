"""Models named by a Hugging Face Hub id, read with the real huggingface_hub client.

The Hub is :mod:`hubserver`, on 127.0.0.1: ``HF_ENDPOINT`` points the client at it and
``HF_HOME`` at a temporary cache. The repositories hold real ``config.json`` files (the
shipped Qwen2.5 preset, scaled down) and real safetensors files written by the
``safetensors`` library. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hubserver import FakeHub, Repo, serve

from memacct.cli import main
from memacct.errors import ConfigError, InvalidInputError, ModelSourceError
from memacct.model.sources.checkpoint import safetensors_weights, table_weights
from memacct.model.sources.presets import load_model_preset
from memacct.model.sources.resolve import resolve_model

pytest.importorskip("huggingface_hub")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

REPO = "acme/tiny-qwen"


def tiny_config() -> dict[str, Any]:
    """The shipped Qwen2.5-7B-Instruct config (memacct/model/configs/qwen2.5-7b.json),
    scaled down to a model whose tensors a test can write."""
    config = load_model_preset("qwen2.5-7b")
    config.update(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=512,
        torch_dtype="float16", tie_word_embeddings=False,
    )  # fmt: skip
    return config


def tiny_tensors(config: dict[str, Any], layers: range | None = None,
                 extra: int = 0) -> dict[str, np.ndarray]:  # fmt: skip
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    out: dict[str, np.ndarray] = {}
    for n in layers if layers is not None else range(config["num_hidden_layers"]):
        p = f"model.layers.{n}"
        for name, shape in {
            "self_attn.q_proj.weight": (h, h), "self_attn.q_proj.bias": (h,),
            "self_attn.k_proj.weight": (kv, h), "self_attn.k_proj.bias": (kv,),
            "self_attn.v_proj.weight": (kv, h), "self_attn.v_proj.bias": (kv,),
            "self_attn.o_proj.weight": (h, h), "mlp.gate_proj.weight": (i, h),
            "mlp.up_proj.weight": (i, h), "mlp.down_proj.weight": (h, i),
            "input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
        }.items():  # fmt: skip
            out[f"{p}.{name}"] = np.zeros(shape, dtype=np.float16)
    if layers is None or 0 in layers:
        out["model.embed_tokens.weight"] = np.zeros((v, h), dtype=np.float16)
        out["lm_head.weight"] = np.zeros((v, h), dtype=np.float16)
        out["model.norm.weight"] = np.zeros((h,), dtype=np.float16)
    for n in range(extra):  # many small tensors: a header longer than the first range
        out[f"model.extra_buffers.{n:05d}.a_rather_long_tensor_name_for_the_header.weight"] = (
            np.zeros((1,), dtype=np.float16)
        )
    return out


def st_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    data: bytes = safetensors_numpy.save(tensors)
    return data


def single_repo() -> Repo:
    config = tiny_config()
    return Repo({"config.json": json.dumps(config).encode(),
                 "model.safetensors": st_bytes(tiny_tensors(config))})  # fmt: skip


def sharded_repo() -> Repo:
    config = tiny_config()
    shard1 = tiny_tensors(config, range(0, 1))
    shard2 = tiny_tensors(config, range(1, 2), extra=1500)
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {t: names[0] for t in shard1} | {t: names[1] for t in shard2}
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    return Repo({
        "config.json": json.dumps(config).encode(),
        "model.safetensors.index.json": json.dumps(index).encode(),
        names[0]: st_bytes(shard1), names[1]: st_bytes(shard2),
        "README.md": b"tiny",
    })  # fmt: skip


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A local Hub with the client pointed at it, and empty Hugging Face and memacct caches."""
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE",
                 "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("MEMACCT_CACHE_DIR", str(tmp_path / "memacct-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
    # huggingface_hub keeps its agent registry under the HF_HOME it saw at import: not ours.
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH",
                        str(tmp_path / "hf" / ".agent_harnesses.json"), raising=False)  # fmt: skip
    state = FakeHub({REPO: single_repo()})
    for server in serve(state):
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        # huggingface_hub reads HF_ENDPOINT once, at import: the constant too, so that no
        # code path can reach any address but 127.0.0.1.
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE",
            server.url + "/{repo_id}/resolve/{revision}/{filename}",
        )  # fmt: skip
        yield server


def quiet(name: str, revision: str | None = None) -> Any:
    return resolve_model(name, revision, status=None)


# ---------------------------------------------------------------- the Hub path


def test_hub_id_reads_config_and_header_without_tensor_data(hub: FakeHub) -> None:
    source = quiet(REPO)
    assert source.origin == "hub" and source.name == REPO
    assert source.revision == hub.repos[REPO].commit
    assert source.config == tiny_config()
    assert source.table is not None
    assert "model.layers.1.mlp.down_proj.weight" in source.table.tensors
    gets = [(p, r) for m, p, r in hub.requests if m == "GET" and p.endswith(".safetensors")]
    assert gets == [(f"/{REPO}/resolve/{hub.repos[REPO].commit}/model.safetensors",
                     "bytes=0-100000")]  # fmt: skip
    # the file list, config.json (HEAD + GET), one range request for the header
    assert hub.count() == 4, hub.requests


def test_hub_weights_equal_the_same_checkpoint_read_from_disk(
    hub: FakeHub, tmp_path: Path
) -> None:
    repo = hub.repos[REPO]
    local = tmp_path / "ckpt"
    local.mkdir()
    for name, data in repo.files.items():
        (local / name).write_bytes(data)
    source = quiet(REPO)
    assert source.table is not None
    for tp in (1, 2):
        remote = table_weights(source.table, tensor_parallel_size=tp)
        assert remote.by_role == safetensors_weights(local, tensor_parallel_size=tp).by_role
    tensors = tiny_tensors(tiny_config())
    expected = sum(a.nbytes for a in tensors.values())
    assert table_weights(source.table).total_bytes - table_weights(source.table).by_role[
        "buffers"
    ] == expected


def test_sharded_repo_costs_a_fixed_number_of_requests(hub: FakeHub) -> None:
    hub.repos[REPO] = sharded_repo()
    source = quiet(REPO)
    assert source.table is not None and len(source.table.tensors) == len(
        tiny_tensors(tiny_config())
    ) + 1500
    ranges = [r for m, p, r in hub.requests if p.endswith(".safetensors")]
    # shard 1: one range; shard 2's header is past 100,000 bytes: a second range for the rest
    assert ranges.count("bytes=0-100000") == 2 and len(ranges) == 3
    assert all(r is not None for r in ranges)
    # file list 1 + config.json 2 + index 2 + headers 3
    assert hub.count() == 8


def test_a_server_that_ignores_range_still_gives_each_header(hub: FakeHub) -> None:
    repo = sharded_repo()  # shard 2's header is past the first 100,000 bytes
    repo.ignore_range = True
    hub.repos[REPO] = repo
    source = quiet(REPO)
    assert source.table is not None
    assert len(source.table.tensors) == len(tiny_tensors(tiny_config())) + 1500


def test_second_run_asks_only_for_the_file_list(hub: FakeHub) -> None:
    hub.repos[REPO] = sharded_repo()
    first = quiet(REPO)
    hub.requests.clear()
    second = quiet(REPO)
    assert hub.requests == [("GET", f"/api/models/{REPO}/revision/main", None)]
    assert second.table == first.table and second.config == first.config


def test_offline_run_reads_the_cache_without_a_request(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = quiet(REPO)
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    second = quiet(REPO)
    assert hub.requests == []
    assert second.origin == "hub-cache" and second.table == first.table
    assert any("offline" in note for note in second.notes)


def test_offline_without_cache_is_one_line_naming_the_fix(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match=r"HF_HUB_OFFLINE is set .* not in the Hugging Face "
                       r"cache .*unset HF_HUB_OFFLINE") as info:  # fmt: skip
        quiet(REPO)
    assert "\n" not in str(info.value) and hub.requests == []


def test_model_downloaded_by_another_tool_is_found_offline(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import hf_hub_download

    for name in hub.repos[REPO].files:  # as vLLM or transformers leave a download
        hf_hub_download(REPO, name, cache_dir=str(tmp_path / "hf" / "hub"), endpoint=hub.url)
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = quiet(REPO)
    assert hub.requests == [] and source.origin == "hub-cache"
    assert source.table is not None and "lm_head.weight" in source.table.tensors


def test_hf_hub_cache_is_where_the_files_go(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    commit = hub.repos[REPO].commit
    quiet(REPO)
    snapshot = tmp_path / "elsewhere" / "models--acme--tiny-qwen" / "snapshots" / commit
    assert (snapshot / "config.json").is_file()
    assert not (tmp_path / "hf" / "hub").exists()


def test_local_checkpoint_whose_index_climbs_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(tiny_config()))
    index = {"weight_map": {"w": "../outside.safetensors"}}
    (tmp_path / "ckpt" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="outside the checkpoint"):
        resolve_model(str(tmp_path / "ckpt"))


def test_unreachable_hub_is_one_line(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(ModelSourceError, match="cannot reach http://127.0.0.1"):
        quiet(REPO)


def test_unreachable_hub_falls_back_to_the_preset_a_repo_copies(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = quiet("Qwen/Qwen2.5-7B-Instruct")
    assert source.origin == "preset" and source.config == load_model_preset("qwen2.5-7b")
    assert any("shipped preset qwen2.5-7b" in note for note in source.notes)


def test_without_huggingface_hub_a_hub_id_asks_for_it_or_uses_the_preset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "huggingface_hub"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails, as uninstalled
    needs = r"needs huggingface_hub: pip install huggingface_hub"
    with pytest.raises(ModelSourceError, match=needs):
        quiet(REPO)
    source = quiet("meta-llama/Llama-3.1-8B-Instruct")
    assert source.origin == "preset" and source.config == load_model_preset("llama-3.1-8b")


# ---------------------------------------------------------------- access and names


def test_gated_repo_names_the_cause_and_the_fix(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.repos[REPO].gated = True
    with pytest.raises(ModelSourceError, match=r"gated model: request access .* set HF_TOKEN"):
        quiet(REPO)
    monkeypatch.setenv("HF_TOKEN", hub.token)
    assert quiet(REPO).origin == "hub"


def test_private_repo_without_token_asks_for_one(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.repos[REPO].private = True
    with pytest.raises(ModelSourceError, match="private and no token is set: .* set HF_TOKEN"):
        quiet(REPO)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(ModelSourceError, match="token in use cannot read it"):
        quiet(REPO)
    monkeypatch.setenv("HF_TOKEN", hub.token)
    assert quiet(REPO).config == tiny_config()


def test_missing_repo_revision_and_config(hub: FakeHub) -> None:
    with pytest.raises(ModelSourceError, match="acme/nothing was not found"):
        quiet("acme/nothing")
    with pytest.raises(ModelSourceError, match="has no revision 'v9'"):
        quiet(f"{REPO}@v9")
    del hub.repos[REPO].files["config.json"]
    with pytest.raises(ModelSourceError, match="has no config.json"):
        quiet(REPO)


def test_revision_from_the_name_or_the_keyword(hub: FakeHub) -> None:
    hub.repos[REPO].branches = ("main", "v1")
    assert quiet(f"{REPO}@v1").revision == hub.repos[REPO].commit
    assert quiet(REPO, revision="v1").revision == hub.repos[REPO].commit
    assert ("GET", f"/api/models/{REPO}/revision/v1", None) in hub.requests
    with pytest.raises(ModelSourceError, match="give the revision once"):
        quiet(f"{REPO}@v1", revision="main")


@pytest.mark.parametrize("name", ["acme/na--me", "acme/-name", "acme/name.git", "ac me/name"])
def test_repo_id_that_is_not_org_name_is_refused_without_a_request(
    hub: FakeHub, name: str
) -> None:
    with pytest.raises(ModelSourceError, match="is not a Hugging Face Hub id"):
        quiet(name)
    assert hub.requests == []


# ---------------------------------------------------------------- hostile content


def test_header_length_past_the_format_cap_is_refused_before_the_body(hub: FakeHub) -> None:
    files = hub.repos[REPO].files
    files["model.safetensors"] = struct.pack("<Q", 100_000_001) + b"{" * 64
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="beyond the safetensors format's cap"):
        quiet(REPO)
    assert time.perf_counter() - start < 5
    assert [r for _, p, r in hub.requests if p.endswith(".safetensors")] == ["bytes=0-100000"]


def test_header_longer_than_the_file_is_refused(hub: FakeHub) -> None:
    hub.repos[REPO].files["model.safetensors"] = struct.pack("<Q", 5000) + b"{}"
    with pytest.raises(ModelSourceError, match="more than the file's 10"):
        quiet(REPO)


@pytest.mark.parametrize(
    "shard", ["../../outside.safetensors", "/etc/absolute.safetensors", "a\\b.safetensors",
              "model.bin"],
)  # fmt: skip
def test_index_naming_a_shard_outside_the_repo_is_refused(hub: FakeHub, shard: str) -> None:
    repo = sharded_repo()
    index = json.loads(repo.files["model.safetensors.index.json"])
    index["weight_map"]["model.norm.weight"] = shard
    repo.files["model.safetensors.index.json"] = json.dumps(index).encode()
    hub.repos[REPO] = repo
    with pytest.raises(ConfigError, match="outside the checkpoint or not a safetensors file"):
        quiet(REPO)
    assert not [p for _, p, _ in hub.requests if p.endswith(".safetensors")]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 100 + b"]" * 100, "nests deeper than"),
        (b'{"hidden_size": NaN}', "NaN is not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_hostile_config_is_refused_by_the_io_rules(
    hub: FakeHub, body: bytes, message: str
) -> None:
    hub.repos[REPO].files["config.json"] = body
    with pytest.raises(ConfigError, match=message):
        quiet(REPO)


def test_damaged_tensor_entry_is_refused(hub: FakeHub) -> None:
    header = json.dumps({"w": {"dtype": "F16", "shape": ["a"], "data_offsets": [0, 2]}}).encode()
    hub.repos[REPO].files["model.safetensors"] = struct.pack("<Q", len(header)) + header + b"00"
    with pytest.raises(ConfigError, match="is not a safetensors entry"):
        quiet(REPO)


# ---------------------------------------------------------------- the command line


def test_cli_plans_a_hub_id_with_a_status_line(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--model", REPO, "--device", "h100", "--json"]) == 0
    captured = capsys.readouterr()
    assert f"memacct: reading {REPO}@main from {hub.url}" in captured.err
    plan = json.loads(captured.out)
    table = quiet(REPO).table
    assert table is not None and plan["weights_memory"] == table_weights(table).total_bytes


def test_cli_revision_option(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", REPO, "--revision", "v2", "--device", "h100"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "has no revision 'v2'" in errors[0]


def test_cli_gated_is_one_line_exit_2(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    hub.repos[REPO].gated = True
    assert main(["plan", "--model", REPO, "--device", "h100"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(lines) == 1 and "gated model" in lines[0]


# ---------------------------------------------------------------- the Python API


def test_python_api_takes_the_hub_id_wherever_a_model_is_named(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    from memacct.planner import KVCacheSpec
    from memacct.planner.offline import plan_offline

    hub.repos[REPO].branches = ("main", "v1")
    spec = KVCacheSpec.from_hf_config(REPO, revision="v1")
    assert spec == KVCacheSpec.from_hf_config(tiny_config(), model_name=REPO)
    plan = plan_offline(f"{REPO}@v1", device="h100")
    table = quiet(REPO).table
    assert table is not None and plan.weights_memory == table_weights(table).total_bytes
    assert "memacct: reading acme/tiny-qwen@v1" in capsys.readouterr().err
    with pytest.raises(InvalidInputError, match="applies to a model named by its Hub id"):
        plan_offline(tiny_config(), revision="v1")
