"""Multimodal towers tensor by tensor (memacct/model/towers.py) and the encoder profile pass of
Qwen3-VL, LLaVA, PaliGemma and InternVL (memacct/engines/vllm/mm/items.py, multimodal.py).

Tower counts are checked against ``tests/data/golden/vllm-0.33-towers.json``: vLLM 0.33's
own model classes built on the meta device by ``tools/golden_towers.py`` (published
configs, cited there), and against published parameter counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.multimodal import encoder_profile, modelled, unapplied_notes
from memacct.errors import ConfigError
from memacct.model.towers import tower_params, tower_tensors
from memacct.model.weights.inventory import formula_tensors

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip


def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = GOLDEN[name]["config"]
    return config


# Mistral-format rows (a params.json's vision_encoder) are read in the form vLLM remaps them
# to: tests/test_mm_pixtral.py checks them.
@pytest.mark.parametrize("name", sorted(n for n, r in GOLDEN.items() if "tower_params" in r
                                        and "vision_encoder" not in r["config"]))
def test_tower_weights_match_the_tower_vllm_builds(name: str) -> None:
    assert tower_params(_config(name)) == GOLDEN[name]["tower_params"]


def test_clip_vit_l_336_matches_its_published_count() -> None:
    # openai/clip-vit-large-patch14-336: 427,944,193 parameters in all, of which the text
    # tower (123,060,480), visual_projection (1024 x 768), text_projection (768 x 768) and
    # logit_scale (1) leave the vision model its 303,507,456. Every layer built
    # (vision_feature_layer -1), projector excluded; vLLM's LLaVA never builds the tower's
    # post_layernorm (llava.py passes require_post_norm=False), 2 x 1024 of those.
    cfg = {**_config("llava-1.5-7b"), "vision_feature_layer": -1}
    vision = sum(t.numel for t in tower_tensors(cfg) or () if t.name.startswith("vision_"))
    assert vision == 427_944_193 - 123_060_480 - 1024 * 768 - 768 * 768 - 1 - 2 * 1024
    # LLaVA builds 23 of the 24 layers (vision_feature_layer -2).
    full = tower_params(cfg)
    # One layer: attention 4h^2 + 4h, two LayerNorms 4h, MLP 2hi + i + h.
    assert full - tower_params(_config("llava-1.5-7b")) == 12 * 1024**2 + 9 * 1024 + 4096


def test_whisper_large_v3_encoder_matches_its_published_count() -> None:
    # openai/whisper-large-v3: 1,543,490,560 parameters; its decoder (51,866 x 1280 tokens,
    # 448 positions, 32 layers of self and cross attention, MLP of 5120, 3 LayerNorms each,
    # a final LayerNorm) is 906,521,600, leaving the encoder 636,968,960.
    h, f = 1280, 5120
    layer = 2 * (4 * h * h + 3 * h) + 2 * h * f + f + h + 3 * 2 * h
    decoder = 51866 * h + 448 * h + 32 * layer + 2 * h
    cfg = _config("qwen2-audio-7b")
    encoder = sum(t.numel for t in tower_tensors(cfg) or () if t.name.startswith("audio_"))
    assert encoder == 1_543_490_560 - decoder


def test_gemma3_and_internvit_match_their_published_sizes() -> None:
    # Gemma 3 technical report (arXiv 2503.19786, table 1): a 417M-parameter vision encoder.
    gemma = sum(t.numel for t in tower_tensors(_config("gemma-3-4b")) or ()
                if t.name.startswith("vision_"))  # fmt: skip
    assert round(gemma / 1e6) == 417
    # OpenGVLab/InternViT-300M-448px-V2_5: InternViT-300M (InternVL 2.5 report, 0.3B).
    vit = sum(t.numel for t in tower_tensors(_config("internvl3-8b")) or ()
              if t.name.startswith("vision_"))  # fmt: skip
    assert 300e6 <= vit < 310e6


def test_tensor_parallelism_splits_the_linear_layers_and_keeps_the_rest_whole() -> None:
    cfg = {**_config("qwen3-vl-8b"), "text_config": {**_config("qwen3-vl-8b")["text_config"],
                                                     "num_hidden_layers": 2}}  # fmt: skip
    tower = [t for t in formula_tensors(cfg) if t.role == "vision"]
    halves = [t for t in formula_tensors(cfg, tensor_parallel_size=2) if t.role == "vision"]
    whole = sum(t.numel for t in tower_tensors(cfg) or () if not t.split)
    one, two = sum(t.nbytes for t in tower), sum(t.nbytes for t in halves)
    assert one == 2 * tower_params(cfg)  # bfloat16
    assert two == pytest.approx(whole * 2 + (one - whole * 2) / 2, abs=1024)
    # Qwen2-Audio's encoder is transformers' Qwen2AudioEncoder (nn.Linear): whole per rank.
    audio = {**_config("qwen2-audio-7b")}
    audio["text_config"] = {**audio["text_config"], "num_hidden_layers": 2}
    a1 = sum(t.nbytes for t in formula_tensors(audio) if t.role == "vision")
    a2 = sum(t.nbytes for t in formula_tensors(audio, tensor_parallel_size=2)
             if t.role == "vision")  # fmt: skip
    assert a1 == a2


def test_a_bad_tower_size_names_the_key() -> None:
    cfg = _config("paligemma-3b-224")
    bad = {**cfg, "vision_config": {**cfg["vision_config"], "hidden_size": "1152"}}
    with pytest.raises(ConfigError, match="hidden_size"):
        tower_tensors(bad)
    assert tower_tensors({"model_type": "chameleon"}) is None


def _pass(cfg: dict[str, Any], mm: Multimodal | None = None, **kw: int) -> Any:
    args = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 32768}
    args.update(kw)
    return encoder_profile(cfg, mm or Multimodal(), dtype_bytes=2, version=(0, 33), **args)


def test_qwen3_vl_profiles_one_image_of_its_longest_edge() -> None:
    # longest_edge 16,777,216 px over 32 x 32 merged units: 16,384 tokens, a 4096 x 4096
    # image of 65,536 16-px patches; the budget max(8192, 16384) holds one.
    cfg = _config("qwen3-vl-8b")
    p = _pass(cfg)
    assert "1 dummy image(s) of 16,384 tokens (65,536 patches)" in p.note
    per = max(11 * 1152, 3 * 1152 + 2 * 4304) + 72 + 1536 + 3 * 4096 // 4
    assert p.peak_bytes == 65536 * per * 2
    # The deepstack features make each output token 4 x out_hidden_size wide.
    assert p.held_bytes == 16384 * 4 * 4096 * 2 + 65536 * 1536 * 2
    smaller = _pass(cfg, Multimodal(mm_processor_kwargs={"max_pixels": 1024 * 1024}))
    assert "1,024 tokens" in smaller.note
    assert _pass(cfg, Multimodal(limit_mm_per_prompt={"image": 4}),
                 max_num_batched_tokens=65536).note.startswith("multimodal profile: 4 ")


def test_qwen3_5_profiles_qwen3_vl_s_image_without_deepstack() -> None:
    cfg = _config("qwen3.5-vision")
    p = _pass(cfg)
    assert "1 dummy image(s) of 16,384 tokens (65,536 patches)" in p.note
    assert p.held_bytes == 16384 * 4096 * 2 + 65536 * 1536 * 2


def test_llava_and_paligemma_encode_fixed_size_images() -> None:
    # LLaVA 1.5: 577 CLIP patches, 576 tokens (class token dropped); 8192 // 576 = 14 images.
    p = _pass(_config("llava-1.5-7b"))
    assert "14 dummy image(s) of 576 tokens (577 patches)" in p.note
    assert p.peak_bytes == 14 * 577 * (3 * 1024 + 2 * 4096 + 3 * 14 * 14) * 2
    pg = _pass(_config("paligemma-3b-224"))
    assert "32 dummy image(s) of 256 tokens (256 patches)" in pg.note
    assert modelled(_config("llava-1.5-7b"))
    other = {**_config("llava-1.5-7b"), "vision_config": {"model_type": "dinov2"}}
    assert not modelled(other)


def test_mistral3_and_pixtral_encode_one_image_of_the_largest_size() -> None:
    # Mistral Small 3.1: 1540 px, 14-px patches merged 2 x 2: 55 x 55 = 3,025 tokens (the row
    # breaks carry no embedding), 110 x 110 patches; 8192 // 3025 = 2 images.
    p = _pass(_config("mistral-small-3.1-24b"))
    assert "2 dummy image(s) of 3,025 tokens (12,100 patches)" in p.note
    assert p.peak_bytes == 2 * 12100 * (3 * 1024 + 3 * 4096 + 3 * 14 * 14) * 2
    # Pixtral-12B as LLaVA: 1024 px of 16-px patches, no merge, the "full" strategy keeps all.
    assert "2 dummy image(s) of 4,096 tokens (4,096 patches)" in _pass(_config("pixtral-12b")).note


def test_llama4_profiles_sixteen_tiles_and_a_global_one() -> None:
    # Llama 4 Scout: a 16:1 image of 336-px tiles plus the global tile: 17 chunks of 577
    # patches, 144 tokens each (24^2 / 4): 2,448 tokens; 8192 // 2448 = 3 images.
    p = _pass(_config("llama-4-scout"))
    assert "3 dummy image(s) of 2,448 tokens (9,809 patches)" in p.note
    assert p.peak_bytes == 3 * 9809 * (3 * 1408 + 2 * 5632 + 3 * 14 * 14) * 2
    assert p.held_bytes == 3 * 2448 * 5120 * 2 + 3 * 9809 * 3 * 14 * 14 * 2
    # TP 4: qkv, the rotary q/k and the attention output (6 of 9 widths) and fc1's output
    # and GELU split over the ranks; the residual, norm and fc2's output whole.
    tp4 = _pass(_config("llama-4-scout"), tensor_parallel_size=4)
    per4 = max(3 * 1408 + 6 * 352, 3 * 1408 + 2 * 1408) + 3 * 14 * 14
    assert tp4.peak_bytes == 3 * 9809 * per4 * 2
    one = _pass(_config("llama-4-scout"), Multimodal(mm_processor_kwargs={"max_patches": 1}))
    assert "of 144 tokens (577 patches)" in one.note


def test_llava_next_profiles_its_pinpoint_with_the_most_tokens() -> None:
    # 672 x 672: 2 x 2 tiles of 576 features, 48 newline rows, the 576-token base: 2,928
    # tokens (1008 x 336 gives 2,376); 5 tiles of 577 CLIP patches; 8192 // 2928 = 2.
    p = _pass(_config("llava-v1.6-mistral-7b"))
    assert "2 dummy image(s) of 2,928 tokens (2,885 patches)" in p.note


def test_internvl_profiles_video_frames_where_its_tokenizer_has_a_video_token() -> None:
    cfg = _config("internvl3-8b")  # Qwen2.5 language model: <|video_pad|>
    p = _pass(cfg)
    # The budget's video: (32768 - 13 x 256) // 256 = 115 frames; the dummy: 128 frames.
    assert "1 dummy video(s) of 29,440 tokens (131,200 patches)" in p.note
    image = _pass(cfg, Multimodal(limit_mm_per_prompt={"video": 0}))
    # 12 tiles and a thumbnail of 448 px: 13 x 256 tokens, 13 x 1025 patches.
    assert "2 dummy image(s) of 3,328 tokens (13,325 patches)" in image.note
    fewer = _pass(cfg, Multimodal(limit_mm_per_prompt={"video": 0},
                                  mm_processor_kwargs={"max_dynamic_patch": 6}))  # fmt: skip
    assert "of 1,792 tokens" in fewer.note
    internlm = {**cfg, "llm_config": {**cfg["llm_config"], "model_type": "internlm2"}}
    assert "image(s) of 3,328 tokens" in _pass(internlm).note
    notes = unapplied_notes(cfg, Multimodal(mm_processor_kwargs={"max_dynamic_patches": 6}))
    assert notes and "max_dynamic_patch" in notes[0]


def test_skywork_and_nvlm_reuse_internvl_tiles_without_video() -> None:
    cfg = _config("internvl3-8b")
    # vLLM's SkyworkR1VChatConfig says model_type internvl_chat; the architecture differs.
    sky = {**cfg, "architectures": ["SkyworkR1VChatModel"]}
    assert "image(s) of 3,328 tokens (13,325 patches)" in _pass(sky).note
    assert tower_params(sky) == tower_params(cfg)
    nvlm = {**cfg, "architectures": ["NVLM_D"], "model_type": "NVLM_D"}
    # nvlm_d.py's mlp1: LayerNorm(4096) and bias-free 4096 -> 18944 -> 3584 linears.
    mlp1 = sum(t.numel for t in tower_tensors(nvlm) or () if t.name.startswith("mlp1"))
    assert mlp1 == 2 * 4096 + 4096 * 18944 + 18944 * 3584
    # A non-negative select_layer builds that many layers plus one.
    five = {**cfg, "select_layer": 4}
    assert sum(1 for t in tower_tensors(five) or () if t.name.endswith("ls1")) == 5
