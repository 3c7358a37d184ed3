"""A rule reads the keys the engine reads.

``memacct/model/vllm_config_keys.json`` (``tools/vllm_config_keys.py``) lists the config keys
each vLLM 0.33 model module reads; every layer-shaping one (``config_keys.is_layer_shaping``)
must be read by the module's rule, or be named with a reason as shaping no cache there. A
config carrying a layer-shaping key its rule does not read is planned with a warning naming
the key; a key a config class derives layers from (AFMoE's period) is read by the rule.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memacct.model.arch_rules import RULES, engine_keys, registry, rule_keys
from memacct.model.config_keys import (
    MODULE_NOT_CACHE_SHAPING,
    NOT_CACHE_SHAPING,
    is_layer_shaping,
)
from memacct.model.layers import FullAttention, SlidingWindow
from memacct.planner import KVCacheSpec, load_model_preset

ROOT = Path(__file__).parent.parent
TABLE = ROOT / "memacct" / "model" / "vllm_config_keys.json"


def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text())
    return data


def unread(module: str) -> list[str]:
    return sorted(engine_keys(module) - rule_keys(RULES[module]))


def test_the_table_covers_every_ruled_module_and_names_its_generator() -> None:
    data = table()
    assert data["vllm_version"].startswith("0.33")
    assert data["generator"] == "tools/vllm_config_keys.py"
    registry_modules = {m for rows in registry().values() for m in rows.values()}
    assert not registry_modules - {*data["modules"], *data["not_found"]}
    assert "layer_types" in data["modules"]["afmoe"]


# The ruled modules vLLM 0.33 ships a file for (others are vLLM's older names, read by the
# rule of the module they came from).
SHIPPED = sorted(set(RULES) & set(table()["modules"]))


def test_most_rules_are_checked() -> None:
    assert len(SHIPPED) >= 70, len(SHIPPED)


@pytest.mark.parametrize("module", SHIPPED)
def test_every_layer_shaping_key_the_model_file_reads_is_read_by_its_rule(module: str) -> None:
    assert not unread(module), (
        f"vLLM's {module} reads {unread(module)}, which memacct's rule does not read: "
        f"read them in the rule, or name why they shape no cache (config_keys.py)")


def test_the_check_fails_when_a_rule_misses_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping a key a rule reads makes the check name it."""
    rule = RULES["qwen3_next"]
    monkeypatch.setitem(RULES, "qwen3_next", type(rule)(
        rule.layout, rule.status, rule.source,
        frozenset(rule.reads - {"linear_value_head_dim"})))
    assert unread("qwen3_next") == ["linear_value_head_dim"]


def test_the_reasons_for_keys_that_shape_no_cache_are_sentences() -> None:
    reasons = [*NOT_CACHE_SHAPING.values(),
               *(r for keys in MODULE_NOT_CACHE_SHAPING.values() for r in keys.values())]
    assert all(len(reason.split()) >= 3 for reason in reasons)
    assert is_layer_shaping("global_attn_every_n_layers")
    assert not is_layer_shaping("q_lora_rank") and not is_layer_shaping("rope_theta")


def test_a_period_instead_of_layer_types_is_read_as_the_config_class_derives_it() -> None:
    """AfmoeConfig: sliding unless (i + 1) % global_attn_every_n_layers == 0, window 1024."""
    config = {**load_model_preset("llama-3.1-8b"), "architectures": ["AfmoeForCausalLM"],
              "model_type": "afmoe", "num_hidden_layers": 8, "global_attn_every_n_layers": 4}
    config.pop("sliding_window", None)
    layers = KVCacheSpec.from_hf_config(config).layers
    full = [x.layer for x in layers if not isinstance(x, SlidingWindow)]
    assert full == [3, 7]
    assert {x.window for x in layers if isinstance(x, SlidingWindow)} == {1024}
    assert all(isinstance(x, FullAttention) for x in layers)


def test_a_layer_shaping_key_the_rule_ignores_is_a_warning_naming_it() -> None:
    # Exaone-4.0 (exaone4.py) reads no global_attn_every_n_layers: a config writing it is
    # not planned silently.
    config = {**load_model_preset("llama-3.1-8b"), "global_attn_every_n_layers": 4,
              "sliding_window": 4096}
    notes = KVCacheSpec.from_hf_config(config).notes
    assert any("warning" in n and "global_attn_every_n_layers" in n for n in notes), notes


def test_the_tool_finds_the_keys_both_spellings_read(tmp_path: Path) -> None:
    """Regenerating the table needs vLLM's source (the golden environment); the tool's
    patterns, applied to a snippet, find attribute reads and getattr reads alike."""
    sys.path.insert(0, str(ROOT / "tools"))
    import vllm_config_keys

    path = tmp_path / "model.py"
    path.write_text('x = config.sliding_window\ny = getattr(config, "layer_types", None)\n'
                    'z = hf_config.linear_num_key_heads\nw = config.get_text_config()\n')
    assert vllm_config_keys.keys_read([path]) == ["layer_types", "linear_num_key_heads",
                                                  "sliding_window"]
