"""``--model file.gguf``: the config from the GGUF metadata, the weights from its tensor table.

The files are written here with the ``gguf`` package's own writer (the one llama.cpp's
converters use), with a quantized (Q8_0) tensor beside 16-bit ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memacct.cli import main
from memacct.errors import ConfigError
from memacct.model.sources.checkpoint import table_weights
from memacct.model.sources.resolve import resolve_model
from memacct.planner import KVCacheSpec

gguf = pytest.importorskip("gguf")


def write_gguf(path: Path, arch: str = "qwen2", layers: int = 2) -> dict[str, int]:
    """A small model in GGUF; returns each tensor's bytes in the file, by GGUF name."""
    from gguf.quants import quantize

    h, i, heads, kv, vocab = 64, 128, 4, 2, 256
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    writer.add_block_count(layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(h)
    writer.add_feed_forward_length(i)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_key_length(h // heads)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-6)
    sizes: dict[str, int] = {}

    def add(name: str, shape: tuple[int, ...], quantized: bool = False) -> None:
        data = np.zeros(shape, dtype=np.float32 if quantized else np.float16)
        if quantized:
            q8 = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, quantize(data, q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, data)
        sizes[name] = 0

    add("token_embd.weight", (vocab, h))
    add("output.weight", (vocab, h))
    add("output_norm.weight", (h,))
    for n in range(layers):
        add(f"blk.{n}.attn_q.weight", (h, h), quantized=True)
        add(f"blk.{n}.attn_k.weight", (kv * h // heads, h), quantized=True)
        add(f"blk.{n}.attn_v.weight", (kv * h // heads, h), quantized=True)
        add(f"blk.{n}.attn_output.weight", (h, h), quantized=True)
        add(f"blk.{n}.ffn_gate.weight", (i, h), quantized=True)
        add(f"blk.{n}.ffn_up.weight", (i, h), quantized=True)
        add(f"blk.{n}.ffn_down.weight", (h, i), quantized=True)
        add(f"blk.{n}.attn_norm.weight", (h,))
        add(f"blk.{n}.ffn_norm.weight", (h,))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(path))
    return {t.name: int(t.n_bytes) for t in reader.tensors}


def test_gguf_metadata_maps_to_the_config_keys(tmp_path: Path) -> None:
    path = tmp_path / "tiny-q8_0.gguf"
    write_gguf(path)
    source = resolve_model(str(path))
    assert source.origin == "gguf" and source.name == "tiny-q8_0"
    config = source.config
    assert config["model_type"] == "qwen2"
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["num_key_value_heads"], config["head_dim"], config["vocab_size"],
            config["max_position_embeddings"]) == (2, 64, 4, 2, 16, 256, 4096)  # fmt: skip
    assert config["tie_word_embeddings"] is False  # output.weight is in the file


def test_gguf_kv_spec_reads_the_geometry(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path, layers=3)
    spec = KVCacheSpec.from_hf_config(path)
    assert spec.num_layers == 3 and spec.num_kv_heads == 2 and spec.head_dim == 16


def test_gguf_weights_are_the_tensor_bytes_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    sizes = write_gguf(path)
    source = resolve_model(str(path))
    assert source.table is not None
    weights = table_weights(source.table)
    assert weights.source == "gguf"
    assert weights.total_bytes - weights.by_role["buffers"] == sum(sizes.values())
    # Q8_0 stores 34 bytes per 32 weights: the attention is sized quantized, not as bf16
    attention = sum(v for k, v in sizes.items() if ".attn_" in k and "norm" not in k)
    bf16 = 2 * 2 * (64 * 64 + 32 * 64 + 32 * 64 + 64 * 64)  # 2 layers of q, k, v, o in 2 bytes
    assert weights.by_role["attention"] == attention < bf16 / 1.8


def test_cli_plans_a_gguf_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.gguf"
    sizes = write_gguf(path)
    assert main(["plan", "--model", str(path), "--device", "h100", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["weights_memory"] >= sum(sizes.values())


def test_unmapped_gguf_architecture_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "rwkv.gguf"
    write_gguf(path, arch="rwkv6")
    with pytest.raises(ConfigError, match=r"architecture 'rwkv6', which memacct does not map.*"
                       r"supported are llama, mistral, qwen2"):  # fmt: skip
        resolve_model(str(path))


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"{}" * 20)
    with pytest.raises(ConfigError, match="is not a readable GGUF file"):
        resolve_model(str(path))


def test_missing_gguf_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GGUF file .* does not exist"):
        resolve_model(str(tmp_path / "nope.gguf"))
