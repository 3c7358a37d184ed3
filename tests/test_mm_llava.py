"""The LLaVA family's encoder pass (memacct/engines/vllm/mm/llava.py) and towers
(memacct/model/towers/clip.py): LLaVA and LLaVA-NeXT with CLIP or SigLIP towers,
LLaVA-OneVision, LLaVA-NeXT-Video.

The token counts were produced by running vLLM 0.33's own processing-info methods on these
configs in the vLLM environment (``LlavaProcessingInfo``, ``LlavaNextProcessingInfo``,
``LlavaOnevisionProcessingInfo`` and ``LlavaNextVideoProcessingInfo``:
``get_image_size_with_most_features``, ``get_num_image_tokens``,
``get_num_frames_with_most_features``, ``get_num_video_tokens``), the tile counts by
transformers' ``LlavaOnevisionImageProcessor`` / ``LlavaNextImageProcessor`` on the dummy
image (13 tiles of 384 px for 1153 x 944; 5 of 336 px for 672 x 672); the tower counts are
vLLM's model classes built by tools/golden_towers.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.llava import best_grid
from memacct.engines.vllm.multimodal import EncoderProfile, encoder_profile, modelled
from memacct.model.towers import tower_params, tower_tensors

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip
SIGLIP_PER_PATCH = 3 * 1152 + 2 * 4304 + 3 * 14 * 14  # the MLP's working set, pixel values


def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = GOLDEN[name]["config"]
    return config


def _pass(cfg: dict[str, Any], mm: Multimodal | None = None, **kw: Any) -> EncoderProfile:
    args = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 32768}
    args.update(kw)
    p = encoder_profile(cfg, mm or Multimodal(), dtype_bytes=2, version=(0, 33), **args)
    assert p is not None
    return p


def test_every_llava_tower_matches_the_tower_vllm_builds() -> None:
    for name in ("llava-interleave-qwen-7b", "llava-onevision-qwen2-7b", "llava-next-video-7b",
                 "llava-next-siglip-synthetic"):
        assert tower_params(_config(name)) == GOLDEN[name]["tower_params"], name
        assert modelled(_config(name)), name
    # OneVision is the SigLIP LLaVA plus one image_newline row of the text width (3584).
    assert (tower_params(_config("llava-onevision-qwen2-7b"))
            - tower_params(_config("llava-interleave-qwen-7b"))) == 3584  # fmt: skip
    names = {t.name for t in tower_tensors(_config("llava-onevision-qwen2-7b")) or ()}
    assert "vision_tower.post_layernorm.weight" not in names  # require_post_norm=False
    assert "vision_tower.embeddings.patch_embedding.bias" in names  # SigLIP's biased conv


def test_llava_with_siglip_keeps_every_patch_under_the_full_strategy() -> None:
    # 384 / 14 = 27: 729 patches, no class token; "full" keeps all: 8192 // 729 = 11 images.
    p = _pass(_config("llava-interleave-qwen-7b"))
    assert "11 dummy image(s) of 729 tokens (729 patches)" in p.note
    assert p.peak_bytes == 11 * 729 * SIGLIP_PER_PATCH * 2
    assert p.held_bytes == 11 * 729 * 3584 * 2 + 11 * 729 * 3 * 14 * 14 * 2


def test_llava_next_with_siglip_drops_the_first_patch_by_default() -> None:
    # vLLM 0.33: 768 x 768, 2 x 2 tiles of 729 features, 54 newlines, base 729 - 1: 3,698.
    p = _pass(_config("llava-next-siglip-synthetic"))
    assert "2 dummy image(s) of 3,698 tokens (3,645 patches)" in p.note


def test_onevision_profiles_its_1153_by_944_image_over_a_video() -> None:
    # vLLM 0.33: 8,748 tokens (7,938 unpadded, 81 newlines, 729 base; the ratio 1.0999 stays
    # under 1.1); the 1152 x 1536 pinpoint: 3 x 4 tiles and the base, 13 x 729 patches.
    cfg = _config("llava-onevision-qwen2-7b")
    p = _pass(cfg)
    assert "1 dummy image(s) of 8,748 tokens (9,477 patches)" in p.note
    assert p.peak_bytes == 9477 * SIGLIP_PER_PATCH * 2
    # Videos only: 16 frames (the cap) of 14 x 14 pooled tokens and a newline: 3,137 tokens,
    # 16 x 729 patches; 8192 // 3137 = 2 videos.
    video = _pass(cfg, Multimodal(limit_mm_per_prompt={"image": 0}))
    assert "2 dummy video(s) of 3,137 tokens (11,664 patches)" in video.note
    assert video.held_bytes == 2 * 3137 * 3584 * 2 + 2 * 11664 * 3 * 14 * 14 * 2
    assert best_grid(944, 1153, cfg["image_grid_pinpoints"], 384) == (3, 4)


def test_llava_next_video_fills_max_model_len_with_pooled_frames() -> None:
    # vLLM 0.33: 144 tokens a frame (24 / 2 = 12 squared), 28 frames in 4096 (4,032
    # tokens), 227 in 32768 (32,688); each frame 577 CLIP patches through the tower.
    cfg = _config("llava-next-video-7b")
    p = _pass(cfg, max_model_len=4096)
    assert "2 dummy video(s) of 4,032 tokens (16,156 patches)" in p.note
    long = _pass(cfg)
    assert "1 dummy video(s) of 32,688 tokens (130,979 patches)" in long.note
    assert "no image or video" in _pass(cfg, Multimodal(limit_mm_per_prompt={"video": 0})).note
