"""The published configs tools/golden_towers.py builds in vLLM 0.33 (the tower's sections
verbatim, cited by Hub id; the language model cut to one layer, which the tower does not read)."""

from __future__ import annotations

from typing import Any

_SIGLIP_400M = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                "num_attention_heads": 16, "patch_size": 14}
_QWEN3_VIT = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
              "in_channels": 3, "num_position_embeddings": 2304, "hidden_act":
              "gelu_pytorch_tanh", "deepstack_visual_indexes": [8, 16, 24],
              "model_type": "qwen3_vl"}
_INTERNVIT_300M = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                   "num_attention_heads": 16, "image_size": 448, "patch_size": 14,
                   "qkv_bias": True, "qk_normalization": False, "norm_type": "layer_norm",
                   "layer_norm_eps": 1e-6, "hidden_act": "gelu", "use_flash_attn": False,
                   "drop_path_rate": 0.0, "dropout": 0.0, "attention_dropout": 0.0,
                   "initializer_factor": 1.0, "num_channels": 3,
                   "architectures": ["InternVisionModel"], "model_type": "intern_vit_6b"}


_PIXTRAL = {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096,
            "num_hidden_layers": 24, "num_attention_heads": 16, "head_dim": 64,
            "rope_theta": 10000.0, "hidden_act": "silu", "num_channels": 3}
_MISTRAL_TEXT = {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
                 "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 131072,
                 "rope_theta": 1000000000.0, "sliding_window": None}


_GEMMA4_TEXT = {"model_type": "gemma4_text", "hidden_size": 2304, "intermediate_size": 9216,
                "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 4,
                "head_dim": 256, "layer_types": ["full_attention"], "sliding_window": 512,
                "vocab_size": 262144, "hidden_size_per_layer_input": 256,
                "vocab_size_per_layer_input": 262144, "num_kv_shared_layers": 0,
                "max_position_embeddings": 131072}


_MINICPM_SIGLIP = {"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 980,
                   "intermediate_size": 4304, "num_attention_heads": 16,
                   "num_hidden_layers": 27, "patch_size": 14}


def _qwen_text(hidden: int, moe: bool = False) -> dict[str, Any]:
    text = {"hidden_size": hidden, "intermediate_size": 4 * hidden, "num_hidden_layers": 1,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "vocab_size": 151936, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
            "rope_theta": 5000000, "tie_word_embeddings": False,
            "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20],
                             "mrope_interleaved": True},
            "model_type": "qwen3_vl_moe_text" if moe else "qwen3_vl_text"}
    if moe:
        text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=768,
                    decoder_sparse_step=1, norm_topk_prob=True)
    return text


_QWEN25_VIT = {"depth": 32, "hidden_act": "silu", "hidden_size": 1280,
               "intermediate_size": 3420, "num_heads": 16, "in_chans": 3,
               "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
               "spatial_patch_size": 14, "window_size": 112,
               "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
               "temporal_patch_size": 2, "model_type": "qwen2_5_vl"}
_QWEN25_TEXT = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 1,
                "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0, "tie_word_embeddings": False,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}


# Both LLaVA checkpoints' tower: CLIP ViT-L/14 at 336 pixels (openai/clip-vit-large-patch14-336).
CLIP_L_336: dict[str, Any] = {
    "model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
    "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
    "projection_dim": 768,
}

# google/siglip-so400m-patch14-384's vision section, as the LLaVA-OneVision and
# LLaVA-Interleave checkpoints carry it (26 of its 27 layers kept by the HF conversion).
SIGLIP_SO400M_384: dict[str, Any] = {
    "model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
    "num_hidden_layers": 26, "num_attention_heads": 16, "image_size": 384, "patch_size": 14,
    "vision_use_head": False,
}

_QWEN2_7B_TEXT: dict[str, Any] = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 1, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152128, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
}

_ONEVISION_PINPOINTS = [[h, w] for h in range(384, 2305, 384) for w in range(384, 2305, 384)]
"""llava-hf/llava-onevision-qwen2-7b-ov-hf: 384 to 2304 pixels a side in steps of 384."""

MODELS: dict[str, dict[str, Any]] = {
    # llava-hf/llava-1.5-7b-hf config.json
    "llava-1.5-7b": {
        "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "image_token_index": 32000, "projector_hidden_act": "gelu",
        "vision_config": CLIP_L_336,
        "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "vocab_size": 32064, "max_position_embeddings": 4096},
    },
    # llava-hf/llava-v1.6-mistral-7b-hf config.json
    "llava-v1.6-mistral-7b": {
        "architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next",
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "image_token_index": 32000, "projector_hidden_act": "gelu",
        "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336],
                                 [336, 1008]],
        "vision_config": CLIP_L_336,
        "text_config": {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "vocab_size": 32064,
                        "max_position_embeddings": 32768},
    },
    # llava-hf/llava-interleave-qwen-7b-hf config.json (LLaVA with a SigLIP tower)
    "llava-interleave-qwen-7b": {
        "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
        "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
        "image_token_index": 151646, "projector_hidden_act": "gelu",
        "vision_config": SIGLIP_SO400M_384, "text_config": _QWEN2_7B_TEXT,
    },
    # llava-hf/llava-onevision-qwen2-7b-ov-hf config.json
    "llava-onevision-qwen2-7b": {
        "architectures": ["LlavaOnevisionForConditionalGeneration"],
        "model_type": "llava_onevision", "vision_feature_layer": -1,
        "vision_feature_select_strategy": "full", "vision_aspect_ratio": "anyres_max_9",
        "image_token_index": 151646, "video_token_index": 151647,
        "projector_hidden_act": "gelu", "use_image_newline_parameter": True,
        "image_grid_pinpoints": _ONEVISION_PINPOINTS,
        "vision_config": SIGLIP_SO400M_384, "text_config": _QWEN2_7B_TEXT,
    },
    # llava-hf/LLaVA-NeXT-Video-7B-hf config.json
    "llava-next-video-7b": {
        "architectures": ["LlavaNextVideoForConditionalGeneration"],
        "model_type": "llava_next_video", "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default", "image_token_index": 32001,
        "video_token_index": 32000, "projector_hidden_act": "gelu",
        "spatial_pool_mode": "average", "spatial_pool_stride": 2,
        "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336],
                                 [336, 1008]],
        "vision_config": CLIP_L_336,
        "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "vocab_size": 32064, "max_position_embeddings": 4096},
    },
    # Synthetic: llava-v1.6-mistral-7b's config with the SigLIP tower above (LLaVA-NeXT's
    # SigLIP branch of init_vision_tower_for_llava)
    "llava-next-siglip-synthetic": {
        "architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next",
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "image_token_index": 32000, "projector_hidden_act": "gelu",
        "image_grid_pinpoints": [[384, 768], [768, 384], [768, 768]],
        "vision_config": SIGLIP_SO400M_384,
        "text_config": {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "vocab_size": 32064,
                        "max_position_embeddings": 32768},
    },
    # HuggingFaceM4/Idefics3-8B-Llama3 config.json
    "idefics3-8b-llama3": {
        "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
        "image_token_id": 128257, "scale_factor": 2,
        "vision_config": {**_SIGLIP_400M, "model_type": "idefics3_vision", "image_size": 364},
        "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "vocab_size": 128259,
                        "max_position_embeddings": 131072, "rope_theta": 500000.0},
    },
    # HuggingFaceTB/SmolVLM2-2.2B-Instruct config.json
    "smolvlm2-2.2b": {
        "architectures": ["SmolVLMForConditionalGeneration"], "model_type": "smolvlm",
        "image_token_id": 49190, "scale_factor": 3,
        "vision_config": {**_SIGLIP_400M, "model_type": "smolvlm_vision", "image_size": 384},
        "text_config": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "num_key_value_heads": 32, "vocab_size": 49280,
                        "max_position_embeddings": 8192, "rope_theta": 130000.0},
    },
    # HuggingFaceTB/SmolVLM-256M-Instruct config.json
    "smolvlm-256m": {
        "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
        "image_token_id": 49190, "scale_factor": 4,
        "vision_config": {"model_type": "idefics3_vision", "hidden_size": 768,
                          "intermediate_size": 3072, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "image_size": 512, "patch_size": 16},
        "text_config": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                        "num_hidden_layers": 1, "num_attention_heads": 9,
                        "num_key_value_heads": 3, "vocab_size": 49280,
                        "max_position_embeddings": 8192, "rope_theta": 100000.0},
    },
    # mistralai/Pixtral-12B-2409 params.json (Mistral format: PixtralForConditionalGeneration)
    "pixtral-12b-2409": {
        "dim": 5120, "n_layers": 1, "head_dim": 128, "hidden_dim": 14336, "n_heads": 32,
        "n_kv_heads": 8, "rope_theta": 1000000000.0, "norm_eps": 1e-05, "vocab_size": 131072,
        "vision_encoder": {"hidden_size": 1024, "num_channels": 3, "image_size": 1024,
                           "patch_size": 16, "rope_theta": 10000.0, "intermediate_size": 4096,
                           "num_hidden_layers": 24, "num_attention_heads": 16,
                           "image_token_id": 10, "image_break_token_id": 12,
                           "image_end_token_id": 13, "adapter_bias": True},
    },
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 params.json (the patch merger and the
    # pre-projector norm)
    "mistral-small-3.1-24b-params": {
        "dim": 5120, "n_layers": 1, "head_dim": 128, "hidden_dim": 32768, "n_heads": 32,
        "n_kv_heads": 8, "rope_theta": 1000000000.0, "norm_eps": 1e-05, "vocab_size": 131072,
        "vision_encoder": {"hidden_size": 1024, "num_channels": 3, "image_size": 1540,
                           "max_image_size": 1540, "patch_size": 14, "rope_theta": 10000.0,
                           "intermediate_size": 4096, "num_hidden_layers": 24,
                           "num_attention_heads": 16, "image_token_id": 10,
                           "image_break_token_id": 12, "image_end_token_id": 13,
                           "adapter_bias": False, "spatial_merge_size": 2,
                           "mm_projector_id": "patch_merge",
                           "add_pre_mm_projector_layer_norm": True},
    },
    # lightonai/LightOnOCR-1B-1025 config.json (Mistral 3's config on a Qwen3 text model)
    "lightonocr-1b": {
        "architectures": ["LightOnOCRForConditionalGeneration"], "model_type": "mistral3",
        "image_token_index": 151655, "multimodal_projector_bias": False,
        "projector_hidden_act": "gelu", "spatial_merge_size": 2, "vision_feature_layer": -1,
        "vision_config": _PIXTRAL | {"image_size": 1540, "patch_size": 14},
        "text_config": {"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
                        "num_hidden_layers": 1, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                        "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    },
    # CohereLabs/command-a-vision-07-2025 config.json (a SigLIP2 so400m tower at 512 px)
    "command-a-vision": {
        "architectures": ["Cohere2VisionForConditionalGeneration"],
        "model_type": "cohere2_vision", "downsample_factor": 2,
        "alignment_intermediate_size": 36864, "image_token_id": 255036,
        "vision_config": {**_SIGLIP_400M, "model_type": "siglip_vision_model",
                          "image_size": 512, "patch_size": 16},
        "text_config": {"model_type": "cohere2", "architectures": ["Cohere2ForCausalLM"],
                        "hidden_size": 12288, "intermediate_size": 36864,
                        "num_hidden_layers": 1, "num_attention_heads": 96,
                        "num_key_value_heads": 8, "vocab_size": 256000,
                        "max_position_embeddings": 131072, "sliding_window": 4096,
                        "layer_types": ["sliding_attention"], "rope_theta": 50000,
                        "logit_scale": 0.25},
    },
    # google/paligemma-3b-pt-224 config.json
    "paligemma-3b-224": {
        "architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma",
        "image_token_index": 257152,
        "vision_config": {**_SIGLIP_400M, "model_type": "siglip_vision_model",
                          "image_size": 224, "projection_dim": 2048},
        "text_config": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
                        "num_hidden_layers": 1, "num_attention_heads": 8,
                        "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 257216},
    },
    # google/gemma-3-4b-it config.json
    "gemma-3-4b": {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "mm_tokens_per_image": 256, "image_token_index": 262144,
        "vision_config": {**_SIGLIP_400M, "model_type": "siglip_vision_model",
                          "image_size": 896, "vision_use_head": False},
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                        "intermediate_size": 10240, "num_hidden_layers": 1,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "vocab_size": 262208, "sliding_window": 1024},
    },
    # Qwen/Qwen3-VL-8B-Instruct config.json (vision_config; out_hidden_size 4096)
    "qwen3-vl-8b": {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "image_token_id": 151655, "video_token_id": 151656,
        "vision_config": {**_QWEN3_VIT, "out_hidden_size": 4096},
        "text_config": _qwen_text(4096),
    },
    # Qwen/Qwen3-VL-30B-A3B-Instruct config.json (out_hidden_size 2048)
    "qwen3-vl-30b-a3b": {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
        "image_token_id": 151655, "video_token_id": 151656,
        "vision_config": {**_QWEN3_VIT, "out_hidden_size": 2048, "model_type": "qwen3_vl_moe"},
        "text_config": _qwen_text(2048, moe=True),
    },
    # Qwen3.5 (qwen3_5.py builds Qwen3-VL's tower): Qwen3-VL's vision section, no deepstack
    # key, out_hidden_size 4096; a one-layer full-attention text part
    "qwen3.5-vision": {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "image_token_id": 248056, "video_token_id": 248057,
        "vision_config": {k: v for k, v in _QWEN3_VIT.items()
                          if k != "deepstack_visual_indexes"} | {
                              "model_type": "qwen3_5", "out_hidden_size": 4096},
        "text_config": {"model_type": "qwen3_5_text", "hidden_size": 4096,
                        "intermediate_size": 12288, "num_hidden_layers": 1,
                        "num_attention_heads": 16, "num_key_value_heads": 4,
                        "head_dim": 256, "vocab_size": 248320,
                        "layer_types": ["full_attention"], "full_attention_interval": 1,
                        "max_position_embeddings": 262144,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                            "partial_rotary_factor": 0.25,
                                            "mrope_section": [11, 11, 10],
                                            "mrope_interleaved": True}},
    },
    # OpenGVLab/InternVL3-8B config.json (InternViT-300M-448px-V2_5, Qwen2.5-7B)
    "internvl3-8b": {
        "architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
        "downsample_ratio": 0.5, "select_layer": -1, "template": "internvl2_5",
        "ps_version": "v2", "max_dynamic_patch": 12, "min_dynamic_patch": 1,
        "use_thumbnail": True, "dynamic_image_size": True, "force_image_size": 448,
        "vision_config": _INTERNVIT_300M,
        "llm_config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                       "hidden_size": 3584, "intermediate_size": 18944,
                       "num_hidden_layers": 1, "num_attention_heads": 28,
                       "num_key_value_heads": 4, "vocab_size": 151674,
                       "max_position_embeddings": 32768},
    },
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 config.json
    "mistral-small-3.1-24b": {
        "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
        "image_token_index": 10, "multimodal_projector_bias": False,
        "projector_hidden_act": "gelu", "spatial_merge_size": 2, "vision_feature_layer": -1,
        "vision_config": _PIXTRAL | {"image_size": 1540, "patch_size": 14},
        "text_config": _MISTRAL_TEXT,
    },
    # mistral-community/pixtral-12b config.json (LLaVA with a Pixtral tower)
    "pixtral-12b": {
        "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
        "image_token_index": 10, "projector_hidden_act": "gelu",
        "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
        "vision_config": _PIXTRAL | {"image_size": 1024, "patch_size": 16},
        "text_config": _MISTRAL_TEXT,
    },
    # meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (vision_config verbatim)
    "llama-4-scout": {
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
        "boi_token_index": 200080, "eoi_token_index": 200081, "image_token_index": 200092,
        "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                          "intermediate_size": 5632, "num_hidden_layers": 34,
                          "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                          "num_channels": 3, "pixel_shuffle_ratio": 0.5,
                          "projector_input_dim": 4096, "projector_output_dim": 4096,
                          "vision_output_dim": 4096, "multi_modal_projector_bias": False,
                          "rope_theta": 10000, "norm_eps": 1e-05, "hidden_act": "gelu",
                          "vision_feature_layer": -1,
                          "vision_feature_select_strategy": "default"},
        "text_config": {"model_type": "llama4_text", "hidden_size": 5120,
                        "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                        "num_hidden_layers": 1, "num_attention_heads": 40,
                        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
                        "num_local_experts": 16, "num_experts_per_tok": 1,
                        "interleave_moe_layer_step": 1, "no_rope_layers": [1],
                        "attention_chunk_size": 8192, "max_position_embeddings": 10485760,
                        "rope_theta": 500000.0, "use_qk_norm": True},
    },
    # Qwen/Qwen2-VL-2B-Instruct config.json (vision_config; the text keys flat, one layer)
    "qwen2-vl-2b": {
        "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
        "hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12,
        "num_hidden_layers": 1, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                          "in_chans": 3, "hidden_size": 1536, "patch_size": 14,
                          "spatial_merge_size": 2, "temporal_patch_size": 2},
    },
    # Qwen/Qwen2.5-VL-7B-Instruct config.json (vision_config verbatim)
    "qwen2.5-vl-7b": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
        "vision_config": _QWEN25_VIT,
        "text_config": _QWEN25_TEXT | {"model_type": "qwen2_5_vl_text"},
    },
    # xlangai/OpenCUA-7B: Qwen2.5-VL-7B's tower (its vision_config) over a Qwen2.5-7B text
    # model, model_type "opencua" (the checkpoint's remote-code OpenCUAConfig: stand-in below)
    "opencua-7b": {
        "architectures": ["OpenCUAForConditionalGeneration"], "model_type": "opencua",
        "media_placeholder_token_id": 151664,
        "vision_config": _QWEN25_VIT,
        "text_config": {k: v for k, v in _QWEN25_TEXT.items() if k != "rope_scaling"}
        | {"model_type": "qwen2"},
    },
    # H2OVL-Mississippi-2B's layout (h2oai/h2ovl-mississippi-2b: InternViT-300M-448px, a
    # Danube2 Llama text model; the tiling keys H2OVLProcessingInfo reads); the sizes are the
    # InternViT-300M section above, not read off that Hub file here
    "h2ovl-2b": {
        "architectures": ["H2OVLChatModel"], "model_type": "h2ovl_chat",
        "downsample_ratio": 0.5, "select_layer": -1, "ps_version": "v2",
        "max_dynamic_patch": 6, "min_dynamic_patch": 1, "use_thumbnail": True,
        "dynamic_image_size": True, "use_msac": True, "force_image_size": 448,
        "vision_config": _INTERNVIT_300M,
        "llm_config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                       "hidden_size": 2560, "intermediate_size": 6912,
                       "num_hidden_layers": 1, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "vocab_size": 32000,
                       "max_position_embeddings": 8192},
    },
    # Eagle2.5-8B's layout (nvidia/Eagle2.5-8B: SigLIP-so400m at 448 px over Qwen2.5-7B;
    # select_layer -1, InternVL tiling keys); sizes as the SigLIP-400M section above
    "eagle2.5-8b": {
        "architectures": ["Eagle2_5_VLForConditionalGeneration"], "model_type": "eagle_2_5_vl",
        "downsample_ratio": 0.5, "select_layer": -1, "force_image_size": 448,
        "max_dynamic_patch": 12, "min_dynamic_patch": 1, "use_thumbnail": True,
        "dynamic_image_size": True, "image_token_index": 151667,
        "vision_config": {**_SIGLIP_400M, "model_type": "siglip_vision_model",
                          "image_size": 448},
        "text_config": {k: v for k, v in _QWEN25_TEXT.items() if k != "rope_scaling"}
        | {"model_type": "qwen2"},
    },
    # THUDM/glm-4v-9b's layout (a chatglm config with a vision_config: EVA2-CLIP-E, 63
    # layers at 1120 px; architectures as vLLM's examples override them, GLM4VForCausalLM);
    # the sizes as recalled from that config, not read off the Hub file here
    "glm-4v-9b": {
        "architectures": ["GLM4VForCausalLM"], "model_type": "chatglm",
        "num_layers": 1, "padded_vocab_size": 151552, "hidden_size": 4096,
        "ffn_hidden_size": 13696, "kv_channels": 128, "num_attention_heads": 32,
        "multi_query_attention": True, "multi_query_group_num": 2, "seq_length": 8192,
        "add_qkv_bias": True, "rmsnorm": True, "boi_token_id": 151339,
        "eoi_token_id": 151340, "pad_token_id": 151329, "original_rope": True,
        "rope_ratio": 1, "tie_word_embeddings": False,
        "vision_config": {"dropout_prob": 0.0, "hidden_act": "gelu", "in_channels": 3,
                          "num_hidden_layers": 63, "hidden_size": 1792, "patch_size": 14,
                          "num_heads": 16, "intermediate_size": 15360,
                          "layer_norm_eps": 1e-06, "num_positions": 6401,
                          "image_size": 1120, "scaling_factor": 8},
    },
    # Qianfan-OCR's layout (baidu/Qianfan-OCR: transformers' QianfanOCRConfig, an HF-format
    # InternViT-300M section over a Qwen3 text model, the InternVL keys vLLM's
    # qianfan_ocr.py / internvl.py read); sizes as the InternViT-300M section above
    "qianfan-ocr": {
        "architectures": ["QianfanOCRForConditionalGeneration"], "model_type": "qianfan_ocr",
        "downsample_ratio": 0.5, "select_layer": -1, "ps_version": "v2",
        "force_image_size": 448, "max_dynamic_patch": 12, "min_dynamic_patch": 1,
        "use_thumbnail": True, "dynamic_image_size": True, "image_token_id": 151667,
        "vision_config": {"model_type": "qianfan_ocr_vision", "hidden_size": 1024,
                          "intermediate_size": 4096, "num_hidden_layers": 24,
                          "num_attention_heads": 16, "image_size": [448, 448],
                          "patch_size": [14, 14], "attention_bias": True,
                          "use_qk_norm": False, "norm_type": "layer_norm",
                          "layer_norm_eps": 1e-6, "hidden_act": "gelu",
                          "layer_scale_init_value": 0.1, "drop_path_rate": 0.0},
        "text_config": {"model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                        "max_position_embeddings": 32768},
    },
    # Qwen/Qwen2-Audio-7B-Instruct config.json (audio_config)
    "qwen2-audio-7b": {
        "architectures": ["Qwen2AudioForConditionalGeneration"], "model_type": "qwen2_audio",
        "audio_token_index": 151646,
        "audio_config": {"model_type": "qwen2_audio_encoder", "d_model": 1280,
                         "encoder_layers": 32, "encoder_attention_heads": 20,
                         "encoder_ffn_dim": 5120, "num_mel_bins": 128,
                         "max_source_positions": 1500},
        "text_config": {"model_type": "qwen2", "hidden_size": 4096, "intermediate_size": 11008,
                        "num_hidden_layers": 1, "num_attention_heads": 32,
                        "num_key_value_heads": 32, "vocab_size": 156032},
    },
    # Gemma 4 with its vision and audio towers: transformers 5.19's Gemma4Config defaults
    # (its docstring checkpoint google/gemma-4-e2b-it), the text part cut to one layer
    "gemma-4-mm": {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 768,
                          "intermediate_size": 3072, "num_hidden_layers": 16,
                          "num_attention_heads": 12, "num_key_value_heads": 12,
                          "head_dim": 64, "patch_size": 16, "pooling_kernel_size": 3,
                          "position_embedding_size": 10240, "default_output_length": 280},
        "audio_config": {"model_type": "gemma4_audio", "hidden_size": 1024,
                         "num_hidden_layers": 12, "num_attention_heads": 8,
                         "subsampling_conv_channels": [128, 32], "conv_kernel_size": 5,
                         "output_proj_dims": 1536},
        "text_config": _GEMMA4_TEXT,
    },
    # Gemma 4 Unified (no towers): transformers 5.19's Gemma4UnifiedConfig defaults
    # (docstring checkpoint google/gemma-4-12B-it), the text part cut to one layer
    "gemma-4-unified": {
        "architectures": ["Gemma4UnifiedForConditionalGeneration"],
        "model_type": "gemma4_unified",
        "vision_config": {"model_type": "gemma4_unified_vision", "patch_size": 16,
                          "pooling_kernel_size": 3, "mm_embed_dim": 3840,
                          "mm_posemb_size": 1120, "output_proj_dims": 3840,
                          "num_soft_tokens": 280},
        "audio_config": {"model_type": "gemma4_unified_audio", "audio_embed_dim": 640},
        "text_config": {**_GEMMA4_TEXT, "model_type": "gemma4_unified_text",
                        "hidden_size": 3840, "hidden_size_per_layer_input": 0},
    },
    # openbmb/MiniCPM-V-2_6: version 2.6, 64 queries, Qwen2-7B's width; the SigLIP section as
    # llama.cpp's minicpmv-convert-image-encoder-to-gguf.py gives it (default_vision_config)
    "minicpm-v-2.6": {
        "architectures": ["MiniCPMV"], "model_type": "minicpmv", "version": 2.6,
        "query_num": 64, "image_size": 448, "drop_vision_last_layer": False,
        "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448},
        "vision_config": _MINICPM_SIGLIP,
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 1,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151666,
        "max_position_embeddings": 32768,
    },
    # openbmb/MiniCPM-Llama3-V-2_5: version 2.5, 96 queries, Llama-3-8B's width
    "minicpm-llama3-v-2.5": {
        "architectures": ["MiniCPMV"], "model_type": "minicpmv", "version": 2.5,
        "query_num": 96, "image_size": 448, "drop_vision_last_layer": False,
        "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448},
        "vision_config": _MINICPM_SIGLIP,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 1,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192,
    },
    # openbmb/MiniCPM-o-2_6: MiniCPM-V 2.6's vision part, Whisper-medium's encoder (its model
    # card: SigLip-400M, Whisper-medium-300M, Qwen2.5-7B), audio_pool_step 2
    "minicpm-o-2.6": {
        "architectures": ["MiniCPMO"], "model_type": "minicpmo", "version": 2.6,
        "query_num": 64, "image_size": 448, "drop_vision_last_layer": False,
        "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448},
        "audio_pool_step": 2, "audio_chunk_length": 1.0,
        "vision_config": _MINICPM_SIGLIP,
        "audio_config": {"model_type": "whisper", "d_model": 1024, "encoder_layers": 24,
                         "encoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                         "num_mel_bins": 80, "max_source_positions": 1500},
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 1,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151700,
        "max_position_embeddings": 32768,
    },
    # nvidia/audio-flamingo-3-hf: AudioFlamingo3EncoderConfig's sizes (Whisper large-v3's
    # encoder, under the names its attribute_map gives) and Qwen2.5-7B's width
    "audioflamingo3-7b": {
        "architectures": ["AudioFlamingo3ForConditionalGeneration"],
        "model_type": "audioflamingo3", "audio_token_id": 151669,
        "projector_hidden_act": "gelu", "projector_bias": True,
        "audio_config": {"model_type": "audioflamingo3_encoder", "hidden_size": 1280,
                         "num_hidden_layers": 32, "num_attention_heads": 20,
                         "intermediate_size": 5120, "num_mel_bins": 128,
                         "max_source_positions": 1500},
        "text_config": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                        "num_hidden_layers": 1, "num_attention_heads": 28,
                        "num_key_value_heads": 4, "vocab_size": 152064},
    },
    # Qwen/Qwen2.5-Omni-7B config.json (thinker_config's audio and vision sections)
    "qwen2.5-omni-7b": {
        "architectures": ["Qwen2_5OmniModel"], "model_type": "qwen2_5_omni",
        "enable_audio_output": False,
        "thinker_config": {
            "model_type": "qwen2_5_omni_thinker", "audio_token_index": 151646,
            "image_token_index": 151655, "video_token_index": 151656,
            "audio_config": {"model_type": "qwen2_5_omni_audio_encoder", "d_model": 1280,
                             "encoder_layers": 32, "encoder_attention_heads": 20,
                             "encoder_ffn_dim": 5120, "num_mel_bins": 128,
                             "max_source_positions": 1500, "n_window": 100,
                             "output_dim": 3584},
            "vision_config": {"model_type": "qwen2_5_omni_vision_encoder", "depth": 32,
                              "embed_dim": 1280, "hidden_size": 1280, "hidden_act": "silu",
                              "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
                              "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
                              "spatial_merge_size": 2, "spatial_patch_size": 14,
                              "temporal_patch_size": 2, "window_size": 112,
                              "fullatt_block_indexes": [7, 15, 23, 31],
                              "tokens_per_second": 25},
            "text_config": {"model_type": "qwen2_5_omni_text", "hidden_size": 3584,
                            "intermediate_size": 18944, "num_hidden_layers": 1,
                            "num_attention_heads": 28, "num_key_value_heads": 4,
                            "vocab_size": 152064, "max_position_embeddings": 32768,
                            "rope_scaling": {"type": "default", "mrope_section": [16, 24, 24],
                                             "rope_type": "default"}},
        },
    },
    # zai-org/GLM-ASR-Nano-2512: transformers' GlmAsrConfig defaults (its encoder and
    # Llama text sizes; the config class ships with transformers 5)
    "glm-asr-nano": {
        "architectures": ["GlmAsrForConditionalGeneration"], "model_type": "glmasr",
        "audio_token_id": 59260, "projector_hidden_act": "gelu",
        "audio_config": {"model_type": "glmasr_encoder", "hidden_size": 1280,
                         "intermediate_size": 5120, "num_hidden_layers": 32,
                         "num_attention_heads": 20, "num_key_value_heads": 20,
                         "hidden_act": "gelu", "max_position_embeddings": 1500,
                         "num_mel_bins": 128,
                         "rope_parameters": {"rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.5,
                                             "rope_type": "default"}},
        "text_config": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 6144,
                        "num_hidden_layers": 1, "num_attention_heads": 16,
                        "num_key_value_heads": 4, "vocab_size": 59264},
    },
}
"""Published configs (the tower's sections verbatim, the language model cut to one layer)."""
