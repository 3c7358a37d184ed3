"""MiniCPM-V's encoder pass (memacct/engines/vllm/mm/minicpm.py) against vLLM 0.33's own
processing info over MiniCPM-V 2.6's image processor
(``tests/data/golden/vllm-0.33-minicpmv-items.json``, written by
``tools/golden_minicpmv_items.py``); the tower and resampler parameter counts are checked
against vLLM 0.33's model class in ``tests/test_multimodal_towers.py`` (golden rows
minicpm-v-2.6, minicpm-llama3-v-2.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import ItemContext
from memacct.engines.vllm.mm.items import layer_bytes
from memacct.engines.vllm.mm.minicpm import (
    budgets,
    image_slices,
    minicpmv_item,
    resampler_elements,
)
from memacct.engines.vllm.multimodal import encoder_profile, modelled, unapplied_notes
from memacct.model.towers import tower_params, tower_tensors

GOLDEN = Path(__file__).parent / "data" / "golden"
ROWS = json.loads((GOLDEN / "vllm-0.33-minicpmv-items.json").read_text(encoding="utf-8"))[
    "rows"]  # fmt: skip
ROW = ROWS["minicpm-v-2.6"]
RESAMPLER = json.loads((GOLDEN / "vllm-0.33-minicpmv-resampler.json").read_text(
    encoding="utf-8"))["rows"]  # fmt: skip
CFG: dict[str, Any] = ROW["config"]
SEQ = int(ROW["seq_len"])


@pytest.mark.parametrize("name", sorted(ROWS))
@pytest.mark.parametrize("slices", ["9", "4"])
def test_tokens_per_item_and_slices_are_vllms(name: str, slices: str) -> None:
    row = ROWS[name]
    mm = Multimodal(mm_processor_kwargs={"max_slice_nums": int(slices)})
    assert budgets(row["config"], mm, SEQ) == row["tokens"][slices]
    assert image_slices(448, 448 * 9, int(slices), 448, 14) == row["slices"][slices]
    # At 2,048 positions MiniCPM-o's audio (750 tokens) shortens the budget's video to 10
    # frames; MiniCPM-V's keeps 16. The audio itself is never a budget entry.
    assert budgets(row["config"], Multimodal(), 2048) == row["tokens_2048"]


def test_the_dummy_items() -> None:
    ctx = ItemContext(SEQ, 2)
    video = minicpmv_item(CFG, Multimodal(), ctx)
    assert video is not None and video.modality == "video" and video.tokens == 1024
    frames, frame = ROW["dummy_video_frames"], ROW["frame_slices"]
    assert video.patches == frames * sum(frame) and video.out_tokens == frames * 64
    image = minicpmv_item(CFG, Multimodal(limit_mm_per_prompt={"video": 0}), ctx)
    assert image is not None and image.modality == "image"
    slices = ROW["slices"]["9"]
    # Every slice is padded to the longest (get_vision_hidden_states, all_pixel_values).
    assert (image.tokens, image.patches) == (640, len(slices) * max(slices))
    assert image.out_tokens == len(slices) * 64


@pytest.mark.parametrize("row", RESAMPLER, ids=lambda r: f"{r['dim']}x{r['queries']}")
def test_the_resampler_term_is_vllms_measured_peak(row: dict[str, Any]) -> None:
    # vLLM's Resampler2_5 run on the CPU (the tower's output allocated before): the term
    # less that output is at most 2% under the measured peak, never over it.
    n = row["slices"] * row["patches"]
    term = (resampler_elements(row["dim"], row["width"], row["queries"], row["patches"])
            - row["width"]) * 2 * n  # fmt: skip
    assert term <= row["peak_bytes"] <= 1.02 * term
    assert row["at"] == "aten::baddbmm"


def test_the_working_set_is_the_resamplers_at_2_6() -> None:
    item = minicpmv_item(CFG, Multimodal(), ItemContext(SEQ, 2))
    assert item is not None
    # The tower's output, 6 text widths, 28 heads x 64 queries and the per-head mask, the
    # queries (3 x 64 x 3584 per 1,024-patch frame); the pixels and their padded copy.
    resampler = 1152 + 6 * 3584 + 28 * 64 + 28 + 3 * 64 * 3584 // 1024
    assert resampler > layer_bytes(1152, 4304)
    assert item.per_patch == (resampler + 2 * 588) * 2
    # The resampler is replicated: tensor parallelism does not shrink it.
    assert minicpmv_item(CFG, Multimodal(), ItemContext(SEQ, 2, 4)) == item


def test_profile_and_versions() -> None:
    prof = encoder_profile(CFG, Multimodal(), max_num_batched_tokens=8192, max_num_seqs=256,
                           max_model_len=SEQ, dtype_bytes=2)  # fmt: skip
    assert prof is not None and "8 dummy video(s) of 1,024 tokens" in prof.note
    assert modelled(CFG)
    # 2.5's image processor was not run, 4.5's temporal video is not modelled: no pass.
    for version in (2.5, 4.5):
        assert not modelled({**CFG, "version": version})
        assert tower_params({**CFG, "version": version}) == tower_params(CFG)
    assert tower_tensors({**CFG, "version": 2.0, "hidden_size": 2304}) == []
    notes = unapplied_notes(CFG, Multimodal(mm_processor_kwargs={"max_slice_num": 4}))
    assert len(notes) == 1 and "did you mean max_slice_nums" in notes[0]


def test_minicpm_o_profiles_its_vision_part() -> None:
    omni = ROWS["minicpm-o-2.6"]["config"]
    assert modelled(omni) and not modelled({**omni, "version": 4.5})
    ctx = ItemContext(SEQ, 2)
    assert minicpmv_item(omni, Multimodal(), ctx) == minicpmv_item(CFG, Multimodal(), ctx)
    # Its audio tower: Whisper-medium's encoder (1024 wide, 24 layers) and the projection.
    audio = [t for t in tower_tensors(omni) or () if t.name.startswith(("apm.", "audio_"))]
    assert tower_params(omni) - tower_params(CFG) == sum(t.numel for t in audio)
    assert not any(t.split for t in audio)


def test_tensor_parallelism_splits_the_tower_not_the_resampler() -> None:
    split = {t.name.split(".")[0] for t in tower_tensors(CFG) or () if t.split}
    assert split == {"vpm"}
    dropped = {**CFG, "drop_vision_last_layer": True}
    layer = 4 * 1152 + 3 * 1152 * 1152 + 3 * 1152 + 1152 * 1152 + 1152 + 2 * 1152 * 4304 + 4304
    assert tower_params(CFG) - tower_params(dropped) == layer + 1152  # and fc2's bias
