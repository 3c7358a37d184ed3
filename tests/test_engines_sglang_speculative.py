"""SGLang 0.5.23's speculative decoding (memacct.engines.sglang.speculative).

The pool's figures (draft layers in the cell, tokens, max_running_requests) are checked
against SGLang's own code in tests/test_engines_sglang.py (the golden "spec" rows); here the
draft's weights, tensor by tensor from SGLang's model classes, and the plan's wiring.
"""

from __future__ import annotations

from typing import Any

import pytest

from memacct.engines import get_engine
from memacct.engines.base import StartupSettings
from memacct.engines.deployment import Deployment, Speculative
from memacct.engines.sglang.speculative import (
    draft_kv_layers,
    draft_weight_bytes,
    sglang_algorithm,
    with_draft_pool,
)
from memacct.errors import InvalidInputError
from memacct.planner import KVCacheSpec, load_model_preset
from memacct.planner.offline import plan_offline
from memacct.units import GiB

# yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config.json (LlamaForCausalLMEagle3): one layer.
EAGLE3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "draft_vocab_size": 32000,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5,
    "max_position_embeddings": 2048, "hidden_act": "silu", "rope_theta": 500000.0,
}  # fmt: skip


def _eagle3_by_hand(tp: int) -> int:
    """LlamaForCausalLMEagle3 (models/llama_eagle3.py) on one rank, module by module, bf16."""
    h, inter, heads, kv, hd = 4096, 14336, 32, 8, 128
    embed = 128256 // tp * h  # VocabParallelEmbedding (128256 is a multiple of 64)
    qkv = 2 * h * (heads // tp + 2 * max(1, kv // tp)) * hd  # layer 0 reads [embeds; hidden]
    o = heads // tp * hd * h
    mlp = 3 * h * (inter // tp)
    norms = 3 * h  # input_layernorm, post_attention_layernorm, hidden_norm
    fc = 3 * h * h  # nn.Linear over three target hidden states, whole on each rank
    final = h
    head = 32000 // tp * h  # ParallelLMHead over draft_vocab_size (a multiple of 64)
    return 2 * (embed + qkv + o + mlp + norms + fc + final + head)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_eagle3_draft_weights_follow_sglangs_module_list(tp: int) -> None:
    target = load_model_preset("llama-3.1-8b")
    spec = Speculative("eagle3", 3, draft_config=EAGLE3_8B)
    got = draft_weight_bytes(target, spec, tensor_parallel_size=tp)
    # RotaryEmbedding's cos_sin_cache, float32 on CUDA (layers/rotary_embedding/base.py).
    rotary = 2048 * 128 * 4
    assert got == _eagle3_by_hand(tp) + rotary


def test_the_embedding_placeholder_is_the_published_figure() -> None:
    """sgl-project/sglang#32468: an MTP draft of vocab 248,320 and hidden 5,120 at TP 2 holds
    "two un-shared bf16 placeholders (124,160 x 5,120 x 2 B each)" when the pool is sized."""
    config = {**EAGLE3_8B, "vocab_size": 248320, "hidden_size": 5120, "num_attention_heads": 40,
              "tie_word_embeddings": True, "draft_vocab_size": None}
    spec = Speculative("eagle3", 3, draft_config=config)
    untied = Speculative("eagle3", 3, draft_config={**config, "tie_word_embeddings": False})
    extra = (draft_weight_bytes(load_model_preset("llama-3.1-8b"), untied, tensor_parallel_size=2)
             - draft_weight_bytes(load_model_preset("llama-3.1-8b"), spec, tensor_parallel_size=2))
    assert extra == 124160 * 5120 * 2


def test_eagle_and_standalone_drafts_hold_every_weight_of_their_own() -> None:
    target = load_model_preset("llama-3.1-8b")
    draft = {**target, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLMEagle"]}
    eagle = draft_weight_bytes(target, Speculative("eagle", 3, draft_config=draft),
                               tensor_parallel_size=1)
    whole = draft_weight_bytes(target, Speculative("draft_model", 3, draft_config=draft),
                               tensor_parallel_size=1)
    # fc (2 x hidden -> hidden, with bias); no final norm, no input norm in layer 0.
    assert eagle - whole == (2 * 4096 * 4096 + 4096 - 2 * 4096) * 2
    assert whole > 128256 * 4096 * 2 * 2  # its own embedding and LM head (untied)


def test_mtp_is_deepseek_v3s_one_nextn_layer() -> None:
    config = load_model_preset("deepseek-v3")
    spec = Speculative("mtp", 1)
    assert draft_kv_layers(config, spec) == 1
    w = draft_weight_bytes(config, spec, tensor_parallel_size=8)
    vocab_rows = 129280 // 8 * 7168 * 2  # its own embedding and LM head, bf16
    assert w > 2 * vocab_rows + 2 * 7168 * 7168 * 2
    with pytest.raises(InvalidInputError, match="MTP head of DeepseekV3ForCausalLM"):
        draft_kv_layers(load_model_preset("llama-3.1-8b"), spec)


@pytest.mark.parametrize(
    ("model", "words"),
    [("gpt-oss-20b", "split sliding-window"), ("qwen3-next-80b-a3b", "Mamba hybrid"),
     ("gemma-2-9b", "kind sliding")],
)
def test_pools_sglang_sizes_another_way_are_refused(model: str, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        with_draft_pool(KVCacheSpec.from_preset(model), 1)


def test_pipeline_parallel_and_a_draft_tp_and_suffix_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="pipeline-parallel"):
        with_draft_pool(KVCacheSpec.from_preset("llama-3.1-8b", pipeline_parallel_size=2), 1)
    target = load_model_preset("llama-3.1-8b")
    with pytest.raises(InvalidInputError, match="draft over the target's TP"):
        draft_weight_bytes(target, Speculative("eagle3", 3, draft_tensor_parallel_size=1,
                                               draft_config=EAGLE3_8B), tensor_parallel_size=2)
    with pytest.raises(InvalidInputError, match="no such algorithm"):
        sglang_algorithm(Speculative("suffix", 3))


def test_the_startup_adds_the_draft_and_its_layer() -> None:
    startup = get_engine("sglang").startup
    config = load_model_preset("llama-3.1-8b")
    d = Deployment(speculative=Speculative("eagle3", 3, draft_config=EAGLE3_8B))
    base = startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                            settings=StartupSettings(max_model_len=8192))
    est = startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                           settings=StartupSettings(max_model_len=8192, deployment=d))
    draft = draft_weight_bytes(config, d.speculative, tensor_parallel_size=1)  # type: ignore[arg-type]
    assert est.weights.by_role["draft"] == draft
    assert base.kv_cache_bytes - est.kv_cache_bytes == draft
    assert est.kv_spec is not None and est.kv_spec.total_num_layers == 33
    with pytest.raises(InvalidInputError, match="--quantization"):
        startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                         settings=StartupSettings(deployment=Deployment(quantization="fp8")))


def test_a_plan_caps_running_requests_at_48_unless_given(tmp_path: Any) -> None:
    import json

    path = tmp_path / "draft.json"
    path.write_text(json.dumps(EAGLE3_8B))
    spec = json.dumps({"method": "eagle3", "model": str(path), "num_speculative_tokens": 3})
    plain = plan_offline("llama-3.1-8b", engine="sglang", device="h100-80gb",
                         max_model_len=8192)
    plan = plan_offline("llama-3.1-8b", engine="sglang", device="h100-80gb",
                        max_model_len=8192, speculative_config=spec)
    assert plan.max_running_requests == 48 and plain.max_running_requests > 48
    # One draft layer of the same size as the target's 32 in the cell, less room.
    assert plan.block_bytes * 32 == plain.block_bytes * 33
    assert plan.kv_tokens < plain.kv_tokens
    given = plan_offline("llama-3.1-8b", engine="sglang", device="h100-80gb",
                         max_model_len=8192, speculative_config=spec, max_running_requests=100)
    assert given.max_running_requests == 100
    with pytest.raises(InvalidInputError, match="--quantization"):
        plan_offline("llama-3.1-8b", engine="sglang", device="h100-80gb", quantization="fp8")


def test_sglangs_own_speculative_flags_read_as_one_config() -> None:
    import json

    from memacct.engines.spellings import normalize_argv

    argv = normalize_argv(["--engine", "sglang", "--speculative-algorithm", "EAGLE3",
                           "--speculative-draft-model-path", "org/draft",
                           "--speculative-num-steps=5", "--speculative-eagle-topk", "1"])
    assert argv[:2] == ["--engine", "sglang"] and argv[2] == "--speculative-config"
    assert json.loads(argv[3]) == {"method": "eagle3", "model": "org/draft",
                                   "num_speculative_tokens": 5}
    mtp = normalize_argv(["--engine", "sglang", "--speculative-algorithm", "EAGLE"])
    assert json.loads(mtp[-1]) == {"method": "mtp", "num_speculative_tokens": 3}
    with pytest.raises(InvalidInputError, match="DFLASH"):
        normalize_argv(["--engine", "sglang", "--speculative-algorithm", "DFLASH"])


def test_sglang_on_ascend_is_refused_as_not_modelled() -> None:
    with pytest.raises(InvalidInputError, match="SGLang's Ascend backend: its ModelSlim W8A8"):
        plan_offline("qwen3-8b", engine="sglang", device="ascend-910c-64gb")
