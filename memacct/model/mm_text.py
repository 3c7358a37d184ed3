"""The text backbone each multimodal wrapper of vLLM 0.33 builds, read from its model file.

A multimodal model file builds its language model either by name
(``init_vllm_registered_model(..., hf_config=config.text_config,
architectures=["Gemma4ForCausalLM"])``, or a text class constructed directly, as
``Qwen3ForCausalLM(...)`` in ``qwen3_asr.py``) or from its text config's own
architecture (``architectures=config.text_config.architectures``, ``lfm2_vl.py``; or a
subclass of a wrapper that does so). :data:`MM_TEXT` records which, per module, with the
file and line it was read from (``vllm/model_executor/models/<module>.py`` of the vllm
0.33.0 wheel). The text part's KV cache is then planned by the rule of that text
architecture (:mod:`memacct.model.arch_rules`); the tower and the encoder's profile pass
are not, so such a row is partial. :data:`MM_REFUSED` names the wrappers whose text part
has no decoder-only rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memacct.model.vllm_tables import module_of

__all__ = ["MM_REFUSED", "MM_TEXT", "Backbone", "backbone_module"]

_M = "vllm/model_executor/models"


@dataclass(frozen=True)
class Backbone:
    """The text part of one multimodal module.

    Attributes:
        architecture: the text class the model file builds (a vLLM registry name), or
            ``""`` where it builds the text config's own architecture.
        source: the file (and line) of vLLM 0.33 this was read from.
    """

    architecture: str
    source: str


def _named(module: str, arch: str, line: int, how: str = "init_vllm_registered_model") -> Backbone:
    return Backbone(arch, f"{_M}/{module}.py:{line} ({how} builds {arch}; text part: that rule)")


def _own(module: str, line: int, how: str) -> Backbone:
    return Backbone("", f"{_M}/{module}.py:{line} ({how}; text part: its text config's "
                        f"architecture or model type)")


MM_TEXT: dict[str, Backbone] = {
    "gemma4_mm": _named("gemma4_mm", "Gemma4ForCausalLM", 1145),
    "gemma4_unified": _named("gemma4_unified", "Gemma4ForCausalLM", 296),
    "exaone4_5": _named("exaone4_5", "Exaone4ForCausalLM", 359),
    "funaudiochat": _named("funaudiochat", "Qwen3ForCausalLM", 789),
    "kanana_v": _named("kanana_v", "LlamaForCausalLM", 607),
    "llava_onevision2": _named("llava_onevision2", "Qwen3ForCausalLM", 2071),
    "moss_transcribe_diarize": _named("moss_transcribe_diarize", "Qwen3ForCausalLM", 712),
    "openpangu_vl": _named("openpangu_vl", "PanguEmbeddedForCausalLM", 860),
    "phi4siglip": _named("phi4siglip", "Phi3ForCausalLM", 274),
    "bailing_moe_v3_vl": _named("bailing_moe_v3_vl", "BailingMoeV3ForCausalLM", 371,
                                "the class"),
    "mimo_v2_omni": _named("mimo_v2_omni", "MiMoV2FlashForCausalLM", 1286, "the class"),
    "qwen3_asr": _named("qwen3_asr", "Qwen3ForCausalLM", 459, "the class"),
    "qwen3_asr_realtime": _named("qwen3_asr_realtime", "Qwen3ForCausalLM", 176,
                                 "a Qwen3ASRForConditionalGeneration subclass"),
    "fireredasr2": _named("fireredasr2", "Qwen2ForCausalLM", 147, "the class"),
    "funasr": _named("funasr", "Qwen3ForCausalLM", 662, "Qwen3Model"),
    "moss_audio": _named("moss_audio", "Qwen3ForCausalLM", 870, "a Qwen3ForCausalLM subclass"),
    "interns1_pro": _named("interns1_pro", "Qwen3MoeForCausalLM", 472,
                           "a Qwen3MoeForCausalLM subclass"),
    "granite4_vision": _named("granite4_vision", "GraniteForCausalLM", 300,
                              "a GraniteForCausalLM subclass"),
    "minicpmv4_6": _named("minicpmv4_6", "Qwen3_5ForCausalLM", 1252, "the class"),
    "minicpmv4_7": _named("minicpmv4_7", "Qwen3_5ForCausalLM", 124,
                          "a MiniCPMV4_6ForConditionalGeneration subclass"),
    "minicpm_ocr": _named("minicpm_ocr", "Qwen3_5ForCausalLM", 409,
                          "a MiniCPMV4_6ForConditionalGeneration subclass"),
    "interns2_preview": _named("interns2_preview", "Qwen3_5MoeForCausalLM", 32,
                               "a Qwen3_5MoeForConditionalGeneration subclass"),
    # Text models of their own whose layers are another class's, read (not run):
    "molmo2": Backbone("LlamaForCausalLM", f"{_M}/molmo2.py:951 and :1149 (Molmo2TextModel: "
                       "full attention in each of num_hidden_layers layers, "
                       "num_key_value_heads x head_dim read from the text config; text "
                       "part: LlamaForCausalLM's rule; read, not run)"),
    "cohere_compass": Backbone("LlamaForCausalLM", f"{_M}/cohere_compass.py:2106 and :2243 "
                               "(CohereCompassTextModel: one attention a layer, "
                               "sliding_window where layer_types says sliding_attention, no "
                               "+1 as commandr.py adds; text part: LlamaForCausalLM's rule; "
                               "read, not run)"),
    "lfm2_vl": _own("lfm2_vl", 713, "architectures=config.text_config.architectures"),
    "eagle2_5_vl": _own("eagle2_5_vl", 182, "init_vllm_registered_model(text_config)"),
    "deepseek_ocr2": _own("deepseek_ocr2", 304, "init_vllm_registered_model(text_config)"),
    "openvla": _own("openvla", 414, "init_vllm_registered_model(text_config)"),
    "step_vl": _own("step_vl", 526, "init_vllm_registered_model(text_config)"),
    "step3p7": _own("step3p7", 71, "init_vllm_registered_model(text_config)"),
    "alpamayo2_super": _own("alpamayo2_super", 69, "a Qwen3VLForConditionalGeneration subclass"),
    "cosmos3": _own("cosmos3", 27, "a Qwen3VLForConditionalGeneration subclass"),
    "glm_ocr": Backbone("Glm4ForCausalLM", f"{_M}/glm4_1v.py:1800 (GlmOcrForConditionalGeneration "
                        "subclasses Glm4vForConditionalGeneration, which builds "
                        "Glm4ForCausalLM for model_type glm_ocr; text part: that rule)"),
    "granite_speech_plus": _own("granite_speech_plus", 66,
                                "a GraniteSpeechForConditionalGeneration subclass"),
    "qianfan_ocr": _own("qianfan_ocr", 85, "an InternVLChatModel subclass"),
    "unlimited_ocr": _own("unlimited_ocr", 265, "a DeepseekOCRForCausalLM subclass"),
    "voxtral_realtime": _own("voxtral_realtime", 240,
                             "a VoxtralForConditionalGeneration subclass"),
}
"""Multimodal module -> the text backbone its vLLM 0.33 model file builds."""

MM_REFUSED: dict[str, str] = {
    "cosmos3_edge": "its dense text config rebuilt as Nemotron-H attention and MLP blocks "
                    "(cosmos3_edge.py:448); vLLM's golden rows hold half the KV of one "
                    "attention per text layer: not resolved, no rule yet",
    "dots3_note": "its text model (vllm/models/dots3_note/nvidia/model.py) pads MLA heads and "
                  "adds sliding layers of its own: no rule yet",
}
"""Multimodal modules whose text part no decoder rule reads, with the reason."""


def backbone_module(module: str, text_architectures: object,
                    model_type_module: str | None) -> str | None:
    """The vLLM module whose rule plans ``module``'s text part: the text class its file
    names, else the text config's ``architectures[0]``, else the module of its model type
    (``model_type_module``); ``None`` where none is known."""
    named = MM_TEXT[module].architecture
    if named:
        return module_of(named)
    if isinstance(text_architectures, Sequence) and not isinstance(text_architectures, str):
        first = text_architectures[0] if text_architectures else None
        found = module_of(first) if isinstance(first, str) else None
        if found is not None:
            return found
    return model_type_module
