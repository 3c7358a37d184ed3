"""Model configs several tests plan with (public Hub config.json files, the fields read)."""

from __future__ import annotations

from typing import Any

QWEN25_VL_3B: dict[str, Any] = {
    # Qwen/Qwen2.5-VL-3B-Instruct's config.json (the Hub), the fields the plan reads.
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16,
    "num_hidden_layers": 36, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 128000, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {
        "depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
        "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
        "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
}  # fmt: skip
