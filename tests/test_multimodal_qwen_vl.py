"""Qwen2.5-VL's tower and encoder pass reused (OpenCUA), and the 0.33 tensor-parallel split
of the Qwen2/2.5-VL and Gemma 3 encoder activations (memacct/engines/vllm/mm/qwen.py,
mm/opencua.py, memacct/model/towers/qwen.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _configs import QWEN25_VL_3B

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.multimodal import encoder_profile, modelled, unapplied_notes
from memacct.model.towers import tower_params, tower_tensors

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip
PIXEL_BYTES = 3 * 2 * 14 * 14 * 2  # one patch's dummy pixel values in bfloat16
IMAGE_PATCHES = 65536  # max_pixels 12,845,056: 128 x 128 merged tokens, 256 x 256 patches


def _profile(config: dict[str, Any], version: tuple[int, int] | None, tp: int = 1,
             mm: Multimodal | None = None, max_model_len: int = 128000) -> Any:  # fmt: skip
    return encoder_profile(config, mm or Multimodal(), max_num_batched_tokens=2048,
                           max_num_seqs=256, max_model_len=max_model_len, dtype_bytes=2,
                           version=version, tensor_parallel_size=tp)  # fmt: skip


def test_qwen25_vl_and_opencua_towers_are_the_tower_vllm_builds() -> None:
    # vLLM 0.33's Qwen2_5_VLForConditionalGeneration and OpenCUAForConditionalGeneration
    # (both Qwen2_5_VisionTransformer) built on the meta device: 676,550,144 elements.
    for name in ("qwen2.5-vl-7b", "opencua-7b"):
        assert tower_params(GOLDEN[name]["config"]) == GOLDEN[name]["tower_params"] == 676550144
    names = {t.name for t in tower_tensors(GOLDEN["opencua-7b"]["config"]) or ()}
    assert "visual.blocks.31.mlp.gate_up_proj.weight" in names
    assert "visual.patch_embed.proj.bias" not in names  # the Conv3d has no bias


def test_opencua_profiles_the_largest_image_never_a_video() -> None:
    cfg = {**GOLDEN["opencua-7b"]["config"], "text_config": {
        **GOLDEN["opencua-7b"]["config"]["text_config"], "max_position_embeddings": 128000}}
    assert modelled(cfg)
    # OpenCUAProcessingInfo.get_supported_mm_limits: {"image": None}. Qwen2.5-VL at 128k
    # profiles a 14-frame video (114,688 tokens); OpenCUA the 16,384-token image.
    p = _profile(cfg, (0, 33))
    assert p.note.startswith("multimodal profile: 1 dummy image(s) of 16,384 tokens "
                             "(65,536 patches)")  # fmt: skip
    assert _profile(QWEN25_VL_3B, (0, 33)).note.startswith(
        "multimodal profile: 1 dummy video(s) of 114,688 tokens")
    # The MLP's peak: 3 widths + gate_up and act (3 x 3420) and cos / sin (80 values).
    assert p.peak_bytes == IMAGE_PATCHES * ((3 * 1280 + 3 * 3420) * 2 + 80 * 2 + PIXEL_BYTES)
    assert unapplied_notes(cfg, Multimodal(mm_processor_kwargs={"max_pixel": 1})) == (
        "--mm-processor-kwargs max_pixel not applied: the opencua processor's encoder pass "
        "reads max_pixels, min_pixels (did you mean max_pixels?)",)


def test_qwen25_vl_encoder_activations_split_by_tp_from_0_33() -> None:
    video = 7 * 256 * 256
    # 0.33 at TP 2: attention 3 x 1280 whole + 8 x 640 split = 8960; MLP 3 x 1280 + 3 x 1710
    # = 8970, the larger; 0.11's 20 whole widths stay as they were at any TP.
    assert _profile(QWEN25_VL_3B, (0, 33), tp=2).peak_bytes == video * (
        8970 * 2 + 80 * 2 + PIXEL_BYTES)
    assert _profile(QWEN25_VL_3B, (0, 11), tp=2).peak_bytes == _profile(
        QWEN25_VL_3B, (0, 11)).peak_bytes == video * (20 * 1280 * 2 + 3 * 40 * 4 + PIXEL_BYTES)


def test_gemma3_siglip_activations_split_by_tp_from_0_33() -> None:
    cfg = GOLDEN["gemma-3-4b"]["config"]
    patches = 8 * 64 * 64  # 2048 batched tokens hold 8 images of 256 tokens
    # SigLIP-400M (1152 wide, MLP 4304): at TP 1 the MLP 3 x 1152 + 2 x 4304 = 12,064 widths;
    # at TP 4, 3 x 1152 + 2 x 1076 = 5,608 > attention 3 x 1152 + 4 x 288 = 4,608.
    values = 3 * 14 * 14
    assert _profile(cfg, (0, 33)).peak_bytes == patches * (12064 + values) * 2
    assert _profile(cfg, (0, 33), tp=4).peak_bytes == patches * (5608 + values) * 2
    assert _profile(cfg, (0, 11), tp=4).peak_bytes == patches * (12064 + values) * 2
