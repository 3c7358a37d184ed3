"""Gemma 4's encoder pass (memacct/engines/vllm/mm/gemma4.py) against vLLM 0.33's own processing
info and transformers' image processor (``tests/data/golden/vllm-0.33-gemma4-items.json``,
written by ``tools/golden_gemma4_items.py``); its towers' parameter counts are checked against
vLLM 0.33's model class in ``tests/test_multimodal_towers.py`` (golden rows gemma-4-mm,
gemma-4-unified)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import ItemContext
from memacct.engines.vllm.mm.gemma4 import budgets, gemma4_item, soft_tokens
from memacct.engines.vllm.multimodal import encoder_profile, modelled, unapplied_notes
from memacct.model.towers import tower_params, tower_tensors

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-gemma4-items.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip
SETTINGS = {
    "default": Multimodal(),
    "video-8-frames": Multimodal(limit_mm_per_prompt={"video": {"count": 1, "num_frames": 8}}),
    "max-soft-560": Multimodal(mm_processor_kwargs={"max_soft_tokens": 560}),
    "max-soft-unsupported": Multimodal(mm_processor_kwargs={"max_soft_tokens": 300}),
}
CTX = ItemContext(seq_len=32768, dtype_bytes=2)
PER_FRAME_PATCH = (3 * 768 + 3 * 3072 + 2 * 64) * 2 + 630 + 768 * 2


def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = GOLDEN[name]["config"]
    return config


@pytest.mark.parametrize("name", sorted(GOLDEN))
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_tokens_per_item_are_vllm_processing_infos(name: str, setting: str) -> None:
    assert budgets(_config(name), SETTINGS[setting]) == GOLDEN[name]["tokens"][setting]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_dummy_items_soft_tokens_are_vllms(name: str) -> None:
    for budget, tokens in GOLDEN[name]["soft_tokens_224"].items():
        assert soft_tokens(224, 224, 16, 3, int(budget)) == tokens


def test_the_tower_encodes_the_padded_patches_of_transformers_image_processor() -> None:
    cfg, pil = _config("gemma-4-mm"), GOLDEN["gemma-4-mm"]["pil_image_processor"]
    video = gemma4_item(cfg, Multimodal(), CTX)
    assert video is not None and video.modality == "video" and video.tokens == 2496
    assert video.patches == 32 * pil["70"]["patches"]  # 32 frames of 630 patches
    assert video.out_tokens == 32 * pil["70"]["soft_tokens"]
    image = gemma4_item(cfg, Multimodal(limit_mm_per_prompt={"video": 0, "audio": 0}), CTX)
    assert image is not None and image.modality == "image"
    assert (image.tokens, image.patches, image.out_tokens) == (
        280, pil["280"]["patches"], pil["280"]["soft_tokens"])  # fmt: skip
    audio = gemma4_item(cfg, Multimodal(limit_mm_per_prompt={"video": 0}), CTX)
    assert audio is not None and audio.modality == "audio" and audio.tokens == 750
    assert audio.out_tokens == GOLDEN["gemma-4-mm"]["audio_tokens_512_samples"]


def test_the_vision_layer_working_set_per_patch() -> None:
    # The MLP's input, residual, normed input, three intermediate widths and the rotary
    # cos / sin (3 x 768 + 3 x 3072 + 2 x 64) in bf16 with one mask byte per patch pair (630
    # per frame) and 768 pixel values.
    video = gemma4_item(_config("gemma-4-mm"), Multimodal(), CTX)
    assert video is not None
    assert video.per_patch == PER_FRAME_PATCH
    # Every tower linear is replicated: tensor parallelism leaves the working set whole.
    tp4 = gemma4_item(_config("gemma-4-mm"), Multimodal(), ItemContext(32768, 2, 4))
    assert tp4 == video
    assert not any(t.split for t in tower_tensors(_config("gemma-4-mm")) or ())


@pytest.mark.parametrize("row", GOLDEN["gemma-4-mm"]["layer_peak"], ids=lambda r: str(r["patches"]))
def test_the_working_set_is_transformers_measured_encoder_peak(row: dict[str, Any]) -> None:
    # transformers' two-layer vision encoder on the CPU: its peak is the modelled working set
    # less the pixel values (not in the measured call) plus the inverted padding mask the
    # call builds (one byte per patch).
    values = 3 * 16 * 16 * 2
    per_item = row["patches"] // 9  # max_soft_tokens x 3^2 patches
    cfg = {**_config("gemma-4-mm"), "vision_config": {**_config("gemma-4-mm")["vision_config"],
                                                      **row["config"]}}  # fmt: skip
    mm = Multimodal(limit_mm_per_prompt={"video": 0, "audio": 0},
                    mm_processor_kwargs={"max_soft_tokens": per_item})
    item = gemma4_item(cfg, mm, CTX)
    assert item is not None and item.patches == row["patches"]
    n = row["items"] * row["patches"]
    assert row["peak_bytes"] == n * (item.per_patch - values + 1)


def test_unified_items_are_merged_patches_padded_to_the_budget() -> None:
    cfg = _config("gemma-4-unified")
    image = gemma4_item(cfg, Multimodal(limit_mm_per_prompt={"video": 0, "audio": 0}), CTX)
    assert image is not None and (image.patches, image.values) == (280, 48 * 48 * 3)
    assert image.per_patch == (6912 + 5 * 3840) * 2  # the pixels and 5 widths at pos_norm
    # vLLM's embedder on the CPU: the same less the pixels (allocated before), plus the
    # position padding mask (4 bytes per merged patch: the negative test and its widening).
    row = GOLDEN["gemma-4-unified"]["embedder_peak"]
    assert row["peak_bytes"] == row["items"] * row["patches"] * (5 * row["dim"] * 2 + 4)
    split = [t.name for t in tower_tensors(cfg) or () if t.split]
    assert split == ["vision_embedder.patch_dense.weight", "vision_embedder.patch_dense.bias"]


def test_profile_batch_budget_and_notes() -> None:
    cfg = _config("gemma-4-mm")
    assert modelled(cfg) and not modelled({**cfg, "vision_config": None})
    prof = encoder_profile(cfg, Multimodal(), max_num_batched_tokens=8192, max_num_seqs=256,
                           max_model_len=32768, dtype_bytes=2)  # fmt: skip
    assert prof is not None and "3 dummy video(s) of 2,496 tokens" in prof.note
    assert prof.peak_bytes == 3 * 32 * 630 * PER_FRAME_PATCH
    assert prof.held_bytes == 3 * (32 * 64 * 2304 + 32 * 630 * 768) * 2
    none = encoder_profile(cfg, Multimodal(limit_mm_per_prompt={"image": 0, "video": 0,
                                                                "audio": 0}),
                           max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=32768,
                           dtype_bytes=2)  # fmt: skip
    assert none is not None and none.peak_bytes == 0
    assert unapplied_notes(cfg, Multimodal(mm_processor_kwargs={"max_soft_tokens": 560})) == ()
    notes = unapplied_notes(cfg, Multimodal(mm_processor_kwargs={"max_soft_token": 560}))
    assert len(notes) == 1 and "did you mean max_soft_tokens" in notes[0]


def test_no_audio_section_no_audio_tower_and_no_audio_item() -> None:
    cfg = {k: v for k, v in _config("gemma-4-mm").items() if k != "audio_config"}
    assert "audio" not in budgets(cfg, Multimodal())
    full = tower_params(_config("gemma-4-mm"))
    assert tower_params(cfg) < full
    assert not any(t.name.startswith(("audio_", "embed_audio")) for t in tower_tensors(cfg) or ())
