"""Structure as the engine reads it (issue 21): architecture rules, refusals, per-layer geometry.

Development configs are public copies: Jamba-v0.1 (ai21labs/Jamba-v0.1 config.json),
Falcon-H1-0.5B (tiiuae/Falcon-H1-0.5B-Instruct, as quoted in NVIDIA's Megatron-Bridge tests),
MiMo-V2-Flash (XiaomiMiMo/MiMo-V2-Flash's MiMoV2FlashConfig defaults), trimmed to the keys read.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.errors import ConfigError, InvalidInputError
from memacct.model.arch_rules import nearest_family
from memacct.model.config import ModelConfig
from memacct.model.layers import FullAttention, Mamba1State, Mamba2State, SlidingWindow
from memacct.planner import KVCacheSpec

ROOT = Path(__file__).resolve().parents[1]

JAMBA: dict[str, Any] = {
    "architectures": ["JambaForCausalLM"], "model_type": "jamba", "torch_dtype": "bfloat16",
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "attn_layer_period": 8, "attn_layer_offset": 4,
    "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "intermediate_size": 14336,
    "num_experts": 16, "num_experts_per_tok": 2, "vocab_size": 65536,
    "max_position_embeddings": 262144,
}  # fmt: skip
FALCON_H1: dict[str, Any] = {
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1",
    "torch_dtype": "bfloat16", "hidden_size": 1024, "num_hidden_layers": 36,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "mamba_d_conv": 4,
    "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
    "mamba_n_heads": 24, "mamba_d_ssm": 1536, "max_position_embeddings": 16384,
    "intermediate_size": 2048, "vocab_size": 32784,
}  # fmt: skip
MIMO: dict[str, Any] = {
    "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
    "torch_dtype": "bfloat16", "hidden_size": 4096, "num_hidden_layers": 8,
    "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
    "swa_num_attention_heads": 64, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
    "swa_v_head_dim": 128, "sliding_window_size": 128,
    "hybrid_layer_pattern": [0, 1, 1, 1, 0, 1, 1, 1], "max_position_embeddings": 262144,
}  # fmt: skip


def test_jamba_reads_transformers_layer_block_types_and_mamba1_state() -> None:
    spec = KVCacheSpec.from_hf_config(JAMBA)
    full = [x.layer for x in spec.layers if isinstance(x, FullAttention)]
    assert full == [4, 12, 20, 28]  # i % attn_layer_period == attn_layer_offset
    mamba = [x for x in spec.layers if isinstance(x, Mamba1State)]
    assert len(mamba) == 28
    inner = 2 * 4096
    assert mamba[0].state_bytes == (inner * (4 - 1) + inner * 16) * 2
    assert spec.bytes_per_token == 4 * 2 * 8 * 128 * 2
    tp2 = KVCacheSpec.from_hf_config(JAMBA, tensor_parallel_size=2).layers[0]
    assert tp2.state_bytes == (inner // 2 * 3 + inner // 2 * 16) * 2


def test_jamba_is_planned_with_its_state_and_is_not_32_full_layers() -> None:
    spec = KVCacheSpec.from_hf_config(JAMBA)
    layout = get_engine("vllm").kv.plan(spec, 20 * 2**30, KVSettings(max_model_len=8192))
    assert {g.kind for g in layout.groups} == {"full", "mamba"}
    assert layout.block_size > 16  # raised so an attention page holds a Mamba state


def test_jamba_does_not_need_transformers(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(JAMBA))
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from memacct.planner import KVCacheSpec\n"
        f"spec = KVCacheSpec.from_hf_config({str(path)!r})\n"
        "print(sum(x.state_bytes is not None for x in spec.layers))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.strip() == "28"


def test_falcon_h1_keeps_attention_and_a_mamba2_state_in_every_layer() -> None:
    spec = KVCacheSpec.from_hf_config(FALCON_H1)
    assert len(spec.layers) == 2 * 36
    assert [type(x) for x in spec.layers[:2]] == [FullAttention, Mamba2State]
    conv = (1536 + 2 * 1 * 128) * (4 - 1)
    ssm = 24 * 64 * 128
    assert spec.layers[1].state_bytes == (conv + ssm) * 2
    assert spec.bytes_per_token == 36 * 2 * 2 * 64 * 2
    pp2 = KVCacheSpec.from_hf_config(FALCON_H1, pipeline_parallel_size=2)
    assert len(pp2.stage_layers()) == 2 * 18


def test_full_and_sliding_layers_keep_their_own_heads_and_v_head_size() -> None:
    spec = KVCacheSpec.from_hf_config(MIMO, tensor_parallel_size=2)
    full = spec.layers[0]
    sliding = spec.layers[1]
    assert isinstance(full, FullAttention) and not isinstance(full, SlidingWindow)
    assert (full.kv_heads, full.head_size, full.head_size_v) == (2, 192, 128)
    assert isinstance(sliding, SlidingWindow)
    assert (sliding.kv_heads, sliding.head_size, sliding.head_size_v) == (4, 192, 128)
    assert sliding.window == 128
    assert spec.bytes_per_token == 2 * (2 * 320 * 2) + 6 * (4 * 320 * 2)
    assert {(g.sliding_window, g.bytes_per_token_per_layer) for g in spec.layer_groups} == {
        (None, 1280), (128, 2560)}


def test_an_architecture_without_a_rule_is_refused_naming_it() -> None:
    config = {**load("llama-3.1-8b"), "architectures": ["Plamo2ForCausalLM"],
              "model_type": "plamo2"}
    with pytest.raises(ConfigError, match=r"Plamo2ForCausalLM.*refused.*0\.26.*"
                                          r"--assume-full-attention.*docs/architectures.md"):
        KVCacheSpec.from_hf_config(config)
    unknown = {**config, "architectures": ["MadeUpForCausalLM"]}
    with pytest.raises(ConfigError, match="MadeUpForCausalLM.*not in the vLLM model registry"):
        KVCacheSpec.from_hf_config(unknown)


def test_a_refusal_is_one_line_under_300_characters_naming_module_and_family() -> None:
    config = {**load("llama-3.1-8b"), "architectures": ["Step5ForCausalLM"],
              "model_type": "step5"}
    with pytest.raises(ConfigError) as caught:
        KVCacheSpec.from_hf_config(config)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300, message
    for part in ("Step5ForCausalLM", "vLLM module step5", "no rule yet",
                 "--assume-full-attention", "docs/architectures.md"):
        assert part in message
    assert nearest_family("qwen3_5_mtp") == "qwen3_5"
    assert nearest_family("zzzz") is None


def test_the_override_plans_full_attention_and_says_so() -> None:
    config = {**load("llama-3.1-8b"), "architectures": ["Plamo2ForCausalLM"]}
    spec = KVCacheSpec.from_hf_config(config, assume_full_attention=True)
    assert {x.kind for x in spec.layers} == {"full"}
    assert any("assume_full_attention" in note for note in spec.notes)


def test_a_geometry_field_no_rule_reads_is_a_warning_naming_it() -> None:
    config = {**load("llama-3.1-8b"), "global_head_dim": 256}
    spec = KVCacheSpec.from_hf_config(config)
    assert any("global_head_dim" in note and "warning" in note for note in spec.notes)
    assert not any("warning" in n for n in KVCacheSpec.from_preset("llama-3.1-8b").notes)


def test_every_preset_resolves_to_a_rule_without_warnings() -> None:
    from memacct.planner import model_presets

    for name in model_presets():
        notes = KVCacheSpec.from_preset(name).notes
        assert not [n for n in notes if n.startswith("warning")], (name, notes)


@pytest.mark.parametrize(
    ("config", "limit"),
    [
        ({"model_type": "gemma3_text", "max_position_embeddings": 131072,
          "rope_scaling": {"rope_type": "linear", "factor": 8}}, 131072),
        ({"model_type": "qwen2_vl", "max_position_embeddings": 131072,
          "rope_scaling": {"type": "mrope", "factor": 2, "mrope_section": [16, 24, 24]}},
         262144),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic",
                                                            "factor": 2}}, 8192),
        ({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
          "rope_scaling": {"rope_type": "yarn", "factor": 32}}, 131072),
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "longrope",
                                                              "factor": 32}}, 131072),
        ({"max_position_embeddings": 8192, "seq_length": 4096}, 4096),
        ({"max_position_embeddings": 8192, "model_max_length": 16384}, 16384),
    ],
)  # fmt: skip
def test_position_limit_as_vllm_derives_it(config: dict[str, Any], limit: int) -> None:
    found = ModelConfig(config, "config.json").position_limit
    assert found is not None and found[0] == limit


def test_the_three_position_limit_readers_agree() -> None:
    from memacct.planner.offline import position_limit

    for name in ("gemma-3-12b", "gpt-oss-20b", "llama-4-scout", "deepseek-v3", "qwen3-8b"):
        config = load(name)
        derived = ModelConfig(config, "config.json").position_limit
        assert derived is not None
        assert derived[0] == position_limit(config) == KVCacheSpec.from_preset(name).position_limit


def test_the_position_limit_has_one_definition() -> None:
    pattern = re.compile(r"rope_type|rope_scaling\.get|\"longrope\"")
    owners = [
        str(path.relative_to(ROOT)) for path in (ROOT / "memacct").rglob("*.py")
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert owners == ["memacct/model/config.py"]


def load(name: str) -> dict[str, Any]:
    from memacct.planner import load_model_preset

    return load_model_preset(name)


def test_docs_architectures_is_generated_from_the_rules() -> None:
    tool = subprocess.run([sys.executable, "tools/architectures_doc.py", "--check"],
                          check=False, cwd=ROOT, capture_output=True, text=True)
    assert tool.returncode == 0, tool.stderr
    text = (ROOT / "docs" / "architectures.md").read_text(encoding="utf-8")
    for arch in ("JambaForCausalLM", "FalconH1ForCausalLM", "Olmo2ForCausalLM",
                 "Qwen2_5_VLForConditionalGeneration", "BertModel"):
        assert f"| `{arch}` |" in text


def test_every_registry_architecture_is_exact_partial_or_refused() -> None:
    from memacct.model.arch_rules import registry, status_of

    statuses = {status_of(module)[0] for table in registry().values() for module in table.values()}
    assert statuses == {"exact", "partial", "refused"}
    assert len({a for table in registry().values() for a in table}) > 250


def test_multimodal_configs_are_read_through_their_text_part() -> None:
    flat = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
            "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "torch_dtype": "bfloat16"}
    assert KVCacheSpec.from_hf_config(flat).bytes_per_token == 28 * 2 * 4 * 128 * 2
    nested = {"architectures": ["LlavaForConditionalGeneration"],
              "text_config": {"model_type": "plamo2", "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4}}
    with pytest.raises(ConfigError, match="LlavaForConditionalGeneration"):
        KVCacheSpec.from_hf_config(nested)


def test_falcon_multi_query_keeps_one_kv_head_as_vllm_does() -> None:
    falcon = {"architectures": ["FalconForCausalLM"], "model_type": "falcon",
              "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
              "num_kv_heads": 71, "multi_query": True, "new_decoder_architecture": False,
              "torch_dtype": "bfloat16"}
    assert KVCacheSpec.from_hf_config(falcon).num_kv_heads == 1
    new = {**falcon, "num_attention_heads": 128, "hidden_size": 8192, "num_kv_heads": 8,
           "new_decoder_architecture": True}
    assert KVCacheSpec.from_hf_config(new).num_kv_heads == 8


def test_a_field_outside_the_rule_refuses_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    # No rule of vLLM 0.33 refuses a field today (HunYuan's use_cla went with its native
    # module): the mechanism, on a rule that would.
    from dataclasses import replace

    from memacct.model import arch_rules

    monkeypatch.setitem(arch_rules.RULES, "transformers",
                        replace(arch_rules.RULES["transformers"], refuse_if="use_cla"))
    hunyuan = {"architectures": ["HunYuanDenseV1ForCausalLM"], "model_type": "hunyuan_v1_dense",
               "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "use_cla": False,
               "cla_share_factor": 2, "torch_dtype": "bfloat16"}
    assert KVCacheSpec.from_hf_config(hunyuan).bytes_per_token == 32 * 2 * 8 * 128 * 2
    with pytest.raises(ConfigError, match="HunYuanDenseV1ForCausalLM.*use_cla"):
        KVCacheSpec.from_hf_config({**hunyuan, "use_cla": True})


def test_the_transformers_backend_keeps_one_attention_per_layer() -> None:
    """vLLM 0.33 runs HunYuan, Olmo-2 ... through its Transformers backend: every layer its
    own cache (no CLA sharing), sliding only where layer_types says so."""
    hunyuan = {"architectures": ["HunYuanDenseV1ForCausalLM"], "model_type": "hunyuan_v1_dense",
               "hidden_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "use_cla": True,
               "cla_share_factor": 2, "torch_dtype": "bfloat16", "sliding_window": 4096}
    spec = KVCacheSpec.from_hf_config(hunyuan)
    assert [x.kind for x in spec.layers] == ["full"] * 4
    typed = {**hunyuan, "layer_types": ["sliding_attention", "full_attention"] * 2}
    assert [x.kind for x in KVCacheSpec.from_hf_config(typed).layers] == ["sliding", "full"] * 2


def test_an_architecture_vllm_removed_is_refused_naming_the_version() -> None:
    for arch in ("MiniMaxText01ForCausalLM", "BambaForCausalLM", "Plamo2ForCausalLM"):
        with pytest.raises(ConfigError, match=f"{arch}.*vLLM removed it.*0\\.2"):
            KVCacheSpec.from_hf_config({"architectures": [arch], "hidden_size": 64,
                                        "num_hidden_layers": 2, "num_attention_heads": 2})


def test_minimax_lightning_layers_keep_a_heads_x_d_x_d_state() -> None:
    # vLLM 0.33 removed MiniMaxText01ForCausalLM (refused); read by its model type.
    minimax = {"model_type": "minimax_text_01",
               "hidden_size": 6144, "num_hidden_layers": 8, "num_attention_heads": 64,
               "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16",
               "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1]}
    spec = KVCacheSpec.from_hf_config(minimax, tensor_parallel_size=4)
    assert [x.kind for x in spec.layers] == ["mamba"] * 7 + ["full"]
    assert spec.layers[0].state_kind == "linear"
    assert spec.layers[0].state_bytes == 64 // 4 * 128 * 128 * 2
    assert spec.bytes_per_token == 2 * 2 * 128 * 2


def test_zamba2_hybrid_layers_add_attention_and_keep_prefix_caching_states() -> None:
    """vLLM 0.33 keeps Mamba prefix caching on for Zamba2 too (3 state blocks per request,
    golden table vllm-0.33-new-archs.json), and refuses pipeline parallelism for it."""
    types = ["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"]
    zamba = {"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2",
             "hidden_size": 2560, "num_hidden_layers": 6, "num_attention_heads": 32,
             "attention_head_dim": 160, "layers_block_type": types, "mamba_expand": 2,
             "n_mamba_heads": 80, "mamba_headdim": 64, "mamba_ngroups": 1,
             "mamba_d_state": 64, "mamba_d_conv": 4, "torch_dtype": "bfloat16"}
    spec = KVCacheSpec.from_hf_config(zamba, tensor_parallel_size=2)
    kinds = [(x.layer, x.kind) for x in spec.layers]
    assert kinds.count((2, "full")) == 1 and sum(k == "mamba" for _, k in kinds) == 6
    full = next(x for x in spec.layers if isinstance(x, FullAttention))
    assert (full.kv_heads, full.head_size) == (16, 160)
    state = next(x for x in spec.layers if isinstance(x, Mamba2State))
    assert state.state_bytes == ((5120 + 2 * 2 * 64) // 2 * 3 + 80 // 2 * 64 * 64) * 2
    assert state.blocks_per_request(8192, 0, 16, prefix_caching=True) == 3
    with pytest.raises(InvalidInputError, match="Zamba2ForCausalLM.*pipeline parallelism"):
        KVCacheSpec.from_hf_config(zamba, pipeline_parallel_size=2)


def test_a_language_model_in_llm_config_is_read_by_its_model_type() -> None:
    internvl = {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
                "llm_config": {"model_type": "qwen2", "hidden_size": 3584,
                               "num_hidden_layers": 28, "num_attention_heads": 28,
                               "num_key_value_heads": 4, "torch_dtype": "bfloat16",
                               "max_position_embeddings": 32768},
                "vision_config": {"hidden_size": 1024}}
    spec = KVCacheSpec.from_hf_config(internvl)
    assert spec.bytes_per_token == 28 * 2 * 4 * 128 * 2
    assert spec.position_limit == 32768
    flat = {key: value for key, value in internvl.items() if key != "llm_config"}
    with pytest.raises(ConfigError, match="InternVLChatModel"):
        KVCacheSpec.from_hf_config({**flat, "hidden_size": 64, "num_hidden_layers": 2,
                                    "num_attention_heads": 4})


def test_the_cli_flag_plans_an_unruled_architecture_as_full_attention(tmp_path: Path) -> None:
    from memacct.cli import main

    config = {**load("llama-3.1-8b"), "architectures": ["Plamo2ForCausalLM"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    argv = ["plan", "--model", str(path), "--kv-cache-memory-bytes", "20GiB",
            "--max-model-len", "8192", "--json"]
    assert main(argv) == 2
    assert main([*argv, "--assume-full-attention"]) == 0


def test_kimi_linear_kda_layers_and_mla_layers() -> None:
    kimi = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
            "hidden_size": 2304, "num_hidden_layers": 4, "num_attention_heads": 32,
            "kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16",
            "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4],
                                   "num_heads": 32, "head_dim": 128,
                                   "short_conv_kernel_size": 4}}
    spec = KVCacheSpec.from_hf_config(kimi, tensor_parallel_size=2)
    assert [x.kind for x in spec.layers] == ["mamba", "mamba", "mamba", "mla"]
    assert spec.layers[0].state_kind == "kda"
    assert spec.layers[0].state_bytes == 3 * 32 * 128 // 2 * 3 * 2 + 16 * 128 * 128 * 4
    assert spec.bytes_per_token == (512 + 64) * 2


def test_nemotron_h_reads_transformers_5_layers_block_type() -> None:
    """transformers 5 writes layers_block_type (its NemotronHConfig derives the pattern
    nemotron_h.py reads from it)."""
    nemotron = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                "hidden_size": 2688, "num_hidden_layers": 4, "num_attention_heads": 32,
                "num_key_value_heads": 2, "head_dim": 128, "mamba_num_heads": 64,
                "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
                "torch_dtype": "bfloat16",
                "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"]}
    spec = KVCacheSpec.from_hf_config(nemotron)
    assert [x.kind for x in spec.layers if x.has_cache] == ["mamba", "full"]
    with pytest.raises(ConfigError, match="layers_block_type"):
        KVCacheSpec.from_hf_config({**nemotron, "layers_block_type": ["conv"] * 4})


NEW = ROOT / "tests" / "data" / "golden" / "models" / "new"


def new_config(name: str, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((NEW / f"{name}.json").read_text())
    return {**config, **changes}


def test_gemma4_full_layers_take_the_global_head_and_kv_heads() -> None:
    """Gemma4TextConfig: every 6th layer full, the last forced full; full layers take
    global_head_dim and, with attention_k_eq_v, num_global_key_value_heads."""
    config = new_config("gemma-4-default", num_hidden_layers=8, layer_types=None,
                        global_head_dim=512, attention_k_eq_v=True,
                        num_global_key_value_heads=1)
    layers = KVCacheSpec.from_hf_config(config).layers
    full = [x for x in layers if not isinstance(x, SlidingWindow)]
    assert [x.layer for x in full] == [5, 7]
    assert {(x.kv_heads, x.head_size) for x in full} == {(1, 512)}
    assert {(x.kv_heads, x.head_size, x.window) for x in layers
            if isinstance(x, SlidingWindow)} == {(4, 256, 512)}


def test_qwen3_5_states_follow_the_default_interval() -> None:
    config = new_config("qwen3.5-default", num_hidden_layers=8, layer_types=None)
    kinds = [type(x).__name__ for x in KVCacheSpec.from_hf_config(config).layers]
    assert kinds == ["GatedDeltaNetState"] * 3 + ["FullAttention"] + \
        ["GatedDeltaNetState"] * 3 + ["FullAttention"]


def test_step3_keeps_one_kv_head_and_plamo3_reads_per_layer_windows() -> None:
    step3 = KVCacheSpec.from_hf_config(new_config("step-3-text-default"),
                                       tensor_parallel_size=4)
    assert {(x.kv_heads, x.head_size) for x in step3.layers if isinstance(x, FullAttention)} \
        == {(1, 256)}
    plamo = {**load("llama-3.1-8b"), "architectures": ["Plamo3ForCausalLM"],
             "model_type": "plamo3", "num_hidden_layers": 4,
             "sliding_window": [2048, None, 2048, None]}
    layers = KVCacheSpec.from_hf_config(plamo).layers
    assert [x.window for x in layers] == [2048, None, 2048, None]


def test_exaone_moe_reads_per_layer_sliding_windows() -> None:
    config = new_config("exaone-moe-default", num_hidden_layers=4,
                        layer_types=["sliding_attention", "sliding_attention",
                                     "sliding_attention", "full_attention"],
                        sliding_windows=[128, 4096, None, None])
    layers = KVCacheSpec.from_hf_config(config).layers
    assert [x.window for x in layers] == [128, 4096, None, None]


def test_attention_free_models_are_planned_as_state_groups() -> None:
    """Mamba: one state per layer and no attention; vLLM runs it without prefix caching
    (attention-free, ModelConfig.is_prefix_caching_supported), one block a request."""
    spec = KVCacheSpec.from_hf_config(new_config("mamba-default"))
    assert spec.bytes_per_token == 0
    assert all(isinstance(x, Mamba1State) for x in spec.layers)
    assert spec.layers[0].blocks_per_request(8192, 16384, 16) == 1
    layout = get_engine("vllm").kv.plan(spec, 2 << 30, KVSettings(max_model_len=8192))
    assert layout.num_blocks == 1149 and layout.max_concurrency == 1149
    with pytest.raises(InvalidInputError, match="pipeline parallelism"):
        KVCacheSpec.from_hf_config(new_config("mamba2-default"), pipeline_parallel_size=2)


def test_sparse_mla_keeps_a_latent_and_an_indexer_cache_per_layer() -> None:
    """DeepSeek-V3.2: 576-element latent (656-byte fp8_ds_mla row under fp8) and the
    indexer's 128 fp8 values + one fp32 scale; with index_topk_freq 2 a layer keeps its
    indexer where max(i - 2 + 1, 0) % 2 == 0 (attention.py), so layer 2 reuses layer 1's."""
    config = new_config("deepseek-v3.2-default", num_hidden_layers=4)
    spec = KVCacheSpec.from_hf_config(config)
    assert spec.bytes_per_token == 4 * (576 * 2 + 132)
    assert KVCacheSpec.from_hf_config(config, kv_cache_dtype="fp8").bytes_per_token == \
        4 * (656 + 132)
    sparse = KVCacheSpec.from_hf_config({**config, "index_topk_freq": 2})
    assert [x.layer for x in sparse.layers if type(x).__name__ == "SparseIndexerCache"] \
        == [0, 1, 3]


def test_a_modelopt_nvfp4_checkpoint_with_an_fp8_kv_scheme_stores_fp8() -> None:
    spec = KVCacheSpec.from_hf_config(new_config("llama-nvfp4-kv-fp8"))
    assert spec.kv_dtype == "fp8_e4m3" and spec.kv_dtype_bytes == 1


def test_decilm_block_configs_give_each_layer_its_kv_heads_or_no_cache() -> None:
    blocks = [{"attention": {"n_heads_in_group": 8, "no_op": False}, "ffn": {}},
              {"attention": {"no_op": True}, "ffn": {}},
              {"attention": {"n_heads_in_group": 4, "no_op": False}, "ffn": {}}]
    config = {**load("llama-3.1-8b"), "architectures": ["DeciLMForCausalLM"],
              "model_type": "nemotron-nas", "num_hidden_layers": 3, "block_configs": blocks}
    layers = KVCacheSpec.from_hf_config(config, tensor_parallel_size=2).layers
    assert [getattr(x, "kv_heads", None) for x in layers] == [2, None, 4]
    with pytest.raises(ConfigError, match="replace_with_linear"):
        KVCacheSpec.from_hf_config({**config, "block_configs": [
            {"attention": {"replace_with_linear": True}}] * 3})


def test_openpangu_cycles_its_windows_and_refuses_sink_attention() -> None:
    config = {**load("llama-3.1-8b"), "architectures": ["PanguEmbeddedForCausalLM"],
              "model_type": "openpangu", "num_hidden_layers": 4,
              "interleaved_sliding_window": [4096, None]}
    layers = KVCacheSpec.from_hf_config(config).layers
    assert [x.window for x in layers] == [4096, None, 4096, None]
    with pytest.raises(ConfigError, match="param_sink_number"):
        KVCacheSpec.from_hf_config({**config, "param_sink_number": 128})


def test_bailing_and_alice_hybrids_place_their_linear_layers_as_vllm_does() -> None:
    base = {**load("llama-3.1-8b"), "num_hidden_layers": 5, "kv_lora_rank": 512,
            "qk_rope_head_dim": 64, "head_dim": 128, "layer_group_size": 2}
    v25 = KVCacheSpec.from_hf_config({**base, "architectures": ["BailingMoeV2_5ForCausalLM"],
                                      "model_type": "bailing_moe_linear"})
    assert [x.kind for x in v25.layers] == ["mamba", "mla", "mamba", "mla", "mamba"]
    v3 = KVCacheSpec.from_hf_config({**base, "architectures": ["BailingMoeV3ForCausalLM"],
                                     "model_type": "bailing_moe_v3",
                                     "short_conv_kernel_size": 4})
    # _is_kda_layer: MLA every 2nd layer and past the last whole group (layer 4).
    assert [x.kind for x in v3.layers] == ["mamba", "mla", "mamba", "mla", "mla"]
    assert v3.layers[0].state_bytes == 3 * 32 * 128 * 3 * 2 + 32 * 128 * 128 * 4
