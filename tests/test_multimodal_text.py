"""A multimodal wrapper's text part is planned by the rule of the text class its vLLM model
file builds (memacct/model/mm_text.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.errors import ConfigError
from memacct.model import mm_text
from memacct.model.arch_rules import REFUSED, RULES, status_of
from memacct.model.vllm_tables import module_of, registry
from memacct.planner import KVCacheSpec

NEW = Path(__file__).resolve().parent / "data" / "golden" / "models" / "new"


def _text(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((NEW / f"{name}.json").read_text())
    return config


def _layers(config: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Each layer's kind, KV heads and head size (0 for a state) as planned."""
    spec = KVCacheSpec.from_hf_config(config)
    return [(type(x).__name__, getattr(x, "kv_heads", 0), getattr(x, "head_size", 0))
            for x in spec.layers]


def test_gemma4_multimodal_text_part_is_read_by_gemma4s_rule() -> None:
    text = _text("gemma-4-default")
    wrapped = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
               "text_config": {k: v for k, v in text.items() if k != "architectures"}}
    assert _layers(wrapped) == _layers(text)
    kinds = {kind for kind, _, _ in _layers(wrapped)}
    assert "SlidingWindow" in kinds  # gemma4's interleave, not a plain decoder


def test_the_class_the_file_names_wins_over_the_text_model_type() -> None:
    """kanana_v.py builds LlamaForCausalLM whatever its text config's model type says."""
    text = {"model_type": "kanana_text", "hidden_size": 256, "num_hidden_layers": 3,
            "num_attention_heads": 8, "num_key_value_heads": 2, "torch_dtype": "bfloat16"}
    config = {"architectures": ["KananaVForConditionalGeneration"], "text_config": text}
    assert _layers(config) == [("FullAttention", 2, 32)] * 3


def test_a_wrapper_building_its_text_configs_architecture_reads_it() -> None:
    """lfm2_vl.py passes architectures=config.text_config.architectures."""
    text = {**_text("lfm2-1.2b"), "architectures": ["Lfm2ForCausalLM"], "num_hidden_layers": 4,
            "layer_types": ["conv", "full_attention", "conv", "full_attention"]}
    wrapped = {"architectures": ["Lfm2VlForConditionalGeneration"], "model_type": "lfm2_vl",
               "text_config": text}
    assert _layers(wrapped) == _layers(text)
    assert len({kind for kind, _, _ in _layers(wrapped)}) == 2  # attention and short conv


def test_every_named_text_class_has_a_rule() -> None:
    for module, backbone in mm_text.MM_TEXT.items():
        assert module in registry()["multimodal"].values(), module
        if backbone.architecture:
            text = module_of(backbone.architecture)
            assert text in RULES and text not in REFUSED, (module, backbone.architecture)
        assert status_of(module, "multimodal")[0] == "partial", module


def test_a_mapping_to_a_text_class_without_a_rule_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bad = mm_text.Backbone("Plamo2ForCausalLM", "test")
    monkeypatch.setitem(mm_text.MM_TEXT, "kanana_v", bad)
    config = {"architectures": ["KananaVForConditionalGeneration"],
              "text_config": {"model_type": "llama", "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4}}
    with pytest.raises(ConfigError, match="KananaVForConditionalGeneration"):
        KVCacheSpec.from_hf_config(config)


def test_a_wrapper_whose_text_part_has_no_rule_is_refused_with_its_reason() -> None:
    config = {"architectures": ["Dots3NoteForCausalLM"],
              "text_config": {"model_type": "dots3_note_text", "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4}}
    with pytest.raises(ConfigError, match="pads MLA heads"):
        KVCacheSpec.from_hf_config(config)


def test_cohere_compass_slides_by_its_window_without_cohere2s_extra_token() -> None:
    """cohere_compass.py passes sliding_window as written (commandr.py adds one)."""
    text = {"model_type": "cohere_compass_text", "hidden_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
            "sliding_window": 512, "layer_types": ["sliding_attention", "full_attention"],
            "torch_dtype": "bfloat16"}
    config = {"architectures": ["CohereCompassForConditionalGeneration"], "text_config": text}
    layers = KVCacheSpec.from_hf_config(config).layers
    assert [getattr(x, "window", None) for x in layers] == [512, None]


def test_a_text_config_of_an_unknown_model_type_is_refused_naming_the_wrapper() -> None:
    """step_vl.py builds its text config's own architecture: none named, none known."""
    config = {"architectures": ["StepVLForConditionalGeneration"],
              "text_config": {"model_type": "step_vl_text_unknown", "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4}}
    with pytest.raises(ConfigError, match=r"StepVLForConditionalGeneration \(vLLM module "
                                          r"step_vl\)"):
        KVCacheSpec.from_hf_config(config)
