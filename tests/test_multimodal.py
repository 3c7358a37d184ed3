"""vLLM's multimodal start-up (memacct/engines/vllm/multimodal.py): the encoder's profile pass
of Qwen2/2.5-VL per release, the dummy-item budget, the vision tower's weights, and the note
every other multimodal model gets instead of a silent guess."""

from __future__ import annotations

from typing import Any

import pytest
from _configs import QWEN25_VL_3B

from memacct.engines.deployment import Deployment, Multimodal
from memacct.engines.vllm.multimodal import (
    attention_widths,
    encoder_profile,
    has_encoder,
    item_tokens,
    max_frames_per_video,
)
from memacct.model.weights.inventory import formula_tensors
from memacct.planner import load_model_preset
from memacct.planner.offline import plan_offline

QWEN2_VL_2B: dict[str, Any] = {
    # Qwen/Qwen2-VL-2B-Instruct's config.json (the Hub), the fields the plan reads.
    **QWEN25_VL_3B, "architectures": ["Qwen2VLForConditionalGeneration"],
    "model_type": "qwen2_vl", "hidden_size": 1536, "intermediate_size": 8960,
    "num_attention_heads": 12, "num_hidden_layers": 28, "max_position_embeddings": 32768,
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                      "in_chans": 3, "hidden_size": 1536, "patch_size": 14,
                      "spatial_merge_size": 2, "temporal_patch_size": 2},
}  # fmt: skip

GEMMA3_4B: dict[str, Any] = {
    # google/gemma-3-4b-it's config.json (the Hub), the fields the plan reads.
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "mm_tokens_per_image": 256, "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "num_hidden_layers": 34, "sliding_window": 1024, "sliding_window_pattern": 6,
        "vocab_size": 262208, "max_position_embeddings": 131072, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                      "image_size": 896, "intermediate_size": 4304,
                      "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14,
                      "vision_use_head": False},
}  # fmt: skip

MISTRAL_SMALL_31: dict[str, Any] = {
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json (the Hub), the fields read.
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
    "torch_dtype": "bfloat16", "spatial_merge_size": 2, "image_token_index": 10,
    "text_config": {
        "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "num_hidden_layers": 40, "vocab_size": 131072, "max_position_embeddings": 131072,
        "rope_theta": 1000000000.0, "sliding_window": None,
    },
    "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "image_size": 1540,
                      "intermediate_size": 4096, "num_attention_heads": 16,
                      "num_hidden_layers": 24, "patch_size": 14, "head_dim": 64},
}  # fmt: skip

LLAVA_UNRULED: dict[str, Any] = {
    # LLaVA over a vision section none of the rules reads (init_vision_tower_for_llava builds
    # CLIP, SigLIP and Pixtral only; memacct.engines.vllm.mm.llava reads those three).
    **MISTRAL_SMALL_31, "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
    "vision_config": {"model_type": "dinov2", "hidden_size": 1152,
                      "image_size": 384, "intermediate_size": 4304, "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14},
}  # fmt: skip

VIDEO_PATCHES = 7 * 256 * 256  # 14 frames of 3584 x 3584: 7 temporal patches of 256 x 256
PIXEL_BYTES = 3 * 2 * 14 * 14 * 2  # one patch's dummy pixel values in bfloat16


def _profile(version: tuple[int, int] | None, mm: Multimodal | None = None,
             **kw: int) -> Any:  # fmt: skip
    args = {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_model_len": 128000}
    args.update(kw)
    return encoder_profile(QWEN25_VL_3B, mm or Multimodal(), dtype_bytes=2, version=version,
                           **args)  # fmt: skip


def test_the_rotary_path_of_each_release_sets_the_vision_peak() -> None:
    # 0.11.0's Qwen2_5_VisionAttention.forward: input, norm1, qkv (3), contiguous q/k/v (3),
    # cat([q, k]) (2), t.float() (4), the float32 rotary output (4), .type_as (2) = 20
    # widths, plus the float32 rotary table, cos and sin (3 x 40 floats).
    old = _profile((0, 11))
    assert old.peak_bytes == VIDEO_PATCHES * (20 * 1280 * 2 + 3 * 40 * 4 + PIXEL_BYTES)
    # 0.33.0: input, norm1, qkv (3), contiguous q/k (2), rotary output (2), FA out, proj = 11
    # widths; the MLP at down_proj: 3 widths + gate_up and act (3 x 3420) = 14,100 > 11 x 1280.
    new = _profile((0, 33))
    assert new.peak_bytes == VIDEO_PATCHES * ((3 * 1280 + 3 * 3420) * 2 + 80 * 2 + PIXEL_BYTES)
    assert attention_widths(None) == attention_widths((0, 33)) == 11
    assert "1 dummy video(s) of 114,688 tokens (458,752 patches)" in old.note


def test_the_dummy_inputs_and_the_encoder_outputs_stay_held_during_the_text_run() -> None:
    p = _profile((0, 33))
    assert p.held_bytes == 114688 * 2048 * 2 + VIDEO_PATCHES * PIXEL_BYTES


def test_frames_per_video_follow_the_release_and_max_model_len() -> None:
    mm = Multimodal()
    # _MAX_FRAMES_PER_VIDEO: 14 from 0.11 (0.33 too), 16 in 0.10; not max_model_len's 600s.
    assert max_frames_per_video((0, 33)) == 14 and max_frames_per_video((0, 10)) == 16
    assert item_tokens(QWEN25_VL_3B, mm, "video", 10**7, (0, 33)) == (7 * 16384, VIDEO_PATCHES)
    assert item_tokens(QWEN25_VL_3B, mm, "video", 10**7, (0, 10))[0] == 8 * 16384
    # A short context holds fewer frames: 32768 tokens hold 2 temporal patches (4 frames).
    assert item_tokens(QWEN25_VL_3B, mm, "video", 32768, (0, 33))[0] == 2 * 16384


def test_items_per_batch_are_bounded_by_what_one_prompt_holds() -> None:
    # _get_max_items: per prompt max(1, min(limit, max_model_len // item)); 20000 tokens
    # hold one 16,384-token image, so 2 sequences give 2 items though the budget holds 6.
    mm = Multimodal(limit_mm_per_prompt={"image": 5, "video": 0})
    p = _profile((0, 33), mm, max_num_batched_tokens=100000, max_num_seqs=2,
                 max_model_len=20000)  # fmt: skip
    assert p.note.startswith("multimodal profile: 2 dummy image(s) of 16,384 tokens")


def test_qwen_vl_vision_towers_hold_what_transformers_builds() -> None:
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    for config, cls, config_cls in (
        (QWEN25_VL_3B, "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLConfig"),
        (QWEN2_VL_2B, "Qwen2VLForConditionalGeneration", "Qwen2VLConfig"),
    ):
        with torch.device("meta"):
            model = getattr(tf, cls)(getattr(tf, config_cls)(**config))
        visual = next(m for n, m in model.named_modules() if n.endswith("visual"))
        params = sum(p.numel() for p in visual.parameters())
        vision = sum(t.nbytes for t in formula_tensors(config) if t.role == "vision")
        assert vision == 2 * params, cls


def test_a_multimodal_model_without_an_encoder_rule_says_so_in_the_plan() -> None:
    plan = plan_offline(LLAVA_UNRULED, device="h100", max_model_len=8192)
    notes = [n for n in plan.notes if "LlavaForConditionalGeneration" in n]
    assert notes and "not modelled" in notes[0] and "upper bound" in notes[0]
    skip = Deployment(multimodal=Multimodal(skip_mm_profiling=True))
    skipped = plan_offline(LLAVA_UNRULED, device="h100", max_model_len=8192, deployment=skip)
    assert not any("not modelled" in n for n in skipped.notes)
    assert any("--skip-mm-profiling" in n for n in skipped.notes)
    none = Deployment(multimodal=Multimodal(limit_mm_per_prompt={"image": 0}))
    zeroed = plan_offline(LLAVA_UNRULED, device="h100", max_model_len=8192, deployment=none)
    assert any("allows no image item: no encoder pass" in n for n in zeroed.notes)
    text = plan_offline(load_model_preset("llama-3.1-8b"), device="h100", max_model_len=8192)
    assert not any(n.startswith("multimodal") for n in text.notes)


def test_gemma3_encodes_as_many_256_token_images_as_the_budget_holds() -> None:
    # H100 defaults: budget max(8192, 256) -> 32 images of 64 x 64 SigLIP patches; the SigLIP
    # MLP's 3 widths + 2 intermediate (3 x 1152 + 2 x 4304) beat the attention's 7 x 1152.
    p = encoder_profile(GEMMA3_4B, Multimodal(), max_num_batched_tokens=8192,
                        max_num_seqs=1024, max_model_len=8192, dtype_bytes=2)  # fmt: skip
    assert p is not None
    assert p.peak_bytes == 32 * 4096 * (3 * 1152 + 2 * 4304 + 3 * 14 * 14) * 2
    assert p.held_bytes == 32 * 256 * 2560 * 2 + 32 * 4096 * 3 * 14 * 14 * 2
    plain = plan_offline(GEMMA3_4B, device="h100", max_model_len=8192)
    skip = Deployment(multimodal=Multimodal(skip_mm_profiling=True))
    skipped = plan_offline(GEMMA3_4B, device="h100", max_model_len=8192, deployment=skip)
    assert skipped.num_blocks > plain.num_blocks
    assert any("32 dummy image(s) of 256 tokens" in n for n in plain.notes)


def test_the_registry_marks_a_multimodal_architecture_without_a_tower_key() -> None:
    assert has_encoder({"architectures": ["LlavaForConditionalGeneration"]})
    assert has_encoder({"audio_config": {"d_model": 1280}})
    assert not has_encoder({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
