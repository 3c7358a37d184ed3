"""Real configs that name their keys as their config class does (GPT-2's n_embd, ChatGLM's
padded_vocab_size) are read as transformers and vLLM read them: every reading, the weight
inventory included, so the CLI plans every config the API plans (memacct/model/key_names.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct import ConfigError
from memacct.cli import main
from memacct.model.config import ModelConfig
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import estimate_weights
from memacct.model.weights.rules import dtype_bytes

DATA = Path(__file__).parent / "data" / "key_names"

# Parameters of the published checkpoints (their model cards / safetensors totals); the
# formulas add the vocabulary padding and rotary tables vLLM holds, well under 1%.
PARAMETERS = {
    "gpt2.json": 124_439_808, "bloom560m.json": 559_214_592, "opt125m.json": 125_239_296,
    "gptj6b.json": 6_053_381_344, "neox20b.json": 20_554_567_680,
    "falcon7b.json": 6_921_720_704, "chatglm3.json": 6_243_584_000,
}  # fmt: skip


def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((DATA / name).read_text())
    return config


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_the_weights_of_real_configs_are_their_parameters(name: str) -> None:
    config = _config(name)
    params = estimate_weights(config).total_bytes / dtype_bytes(config)
    assert params == pytest.approx(PARAMETERS[name], rel=0.005)


def test_gpt2_reads_n_embd_n_head_n_layer_n_positions_and_derives_n_inner() -> None:
    cfg = ModelConfig(_config("gpt2.json"), "gpt2")
    assert [cfg.get(k) for k in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                 "max_position_embeddings", "intermediate_size")] == [
        768, 12, 12, 1024, 4 * 768]  # fmt: skip
    assert any("4 x n_embd" in note for note in cfg.notes)
    assert ModelConfig({**_config("gpt2.json"), "n_inner": 1000}, "x").get(
        "intermediate_size") == 1000  # fmt: skip


def test_chatglm_reads_its_own_names() -> None:
    cfg = ModelConfig(_config("chatglm3.json"), "chatglm3")
    assert [cfg.get(k) for k in ("vocab_size", "intermediate_size", "num_hidden_layers",
                                 "head_dim", "max_position_embeddings")] == [
        65024, 13696, 28, 128, 8192]  # fmt: skip
    # Multi-query attention: two KV groups of 128 in fp16, over 28 layers.
    assert KVCacheSpec.from_hf_config(_config("chatglm3.json")).bytes_per_token == \
        28 * 2 * 2 * 128 * 2


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")
                                        if p.name not in ("sources.json", "mpt7b.json")))
def test_the_cli_plans_every_real_config(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", str(DATA / name), "--device", "h200", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = json.loads(out)
    assert plan["fits"] and plan["weights_memory"] > 0


def test_a_model_vllm_removed_is_still_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="MPTForCausalLM"):
        KVCacheSpec.from_hf_config(_config("mpt7b.json"))
