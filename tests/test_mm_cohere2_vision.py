"""Command A Vision (memacct/engines/vllm/mm/cohere2_vision.py; its SigLIP tower and projector
in memacct/model/towers/clip.py). The tower count is vLLM 0.33's own class built by
tools/golden_towers.py; the tiles and tokens are derived by hand from ``cohere2_vision.py``
and transformers' ``Cohere2VisionImageProcessor`` (module notes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.cohere2_vision import projector_elements
from memacct.engines.vllm.multimodal import EncoderProfile, encoder_profile, modelled
from memacct.model.towers import tower_params, tower_tensors

ROW = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                 .read_text(encoding="utf-8"))["rows"]["command-a-vision"]  # fmt: skip
CONFIG: dict[str, Any] = ROW["config"]


def _pass(mm: Multimodal | None = None, **kw: Any) -> EncoderProfile:
    args = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 32768}
    args.update(kw)
    p = encoder_profile(CONFIG, mm or Multimodal(), dtype_bytes=2, version=(0, 33), **args)
    assert p is not None
    return p


def test_the_tower_is_the_one_vllm_builds() -> None:
    assert tower_params(CONFIG) == ROW["tower_params"]
    assert modelled(CONFIG)
    shapes = {t.name: t.shape for t in tower_tensors(CONFIG) or ()}
    # SwiGLU halves of 18,432 over the 2 x 2 shuffled 1152-wide features.
    assert shapes["multi_modal_projector.linear_1.weight"] == (36864, 4 * 1152)
    assert shapes["multi_modal_projector.linear_2.weight"] == (12288, 18432)
    assert "vision_tower.post_layernorm.weight" in shapes  # every layer built


def test_twelve_tiles_and_the_thumbnail_at_the_projector_s_peak() -> None:
    # 6144 x 512: one column of 12 tiles of 512 px and the thumbnail; 32 x 32 patches a
    # tile shuffled 2 x 2: 256 tokens; 13 tiles: 3,328 tokens, 13,312 patches; 2 images.
    p = _pass()
    assert "2 dummy image(s) of 3,328 tokens (13,312 patches)" in p.note
    # The projector (2 x 1152 + (36864 + 18432) / 4 = 16,128) passes the SigLIP layer's
    # 3 x 1152 + 2 x 4304 = 12,064 elements a patch.
    assert projector_elements(1152, 36864, 12288, 2) == 16128
    assert p.peak_bytes == 2 * 13312 * (16128 + 3 * 16 * 16) * 2
    assert p.held_bytes == 2 * 3328 * 12288 * 2 + 2 * 13312 * 3 * 16 * 16 * 2
    fewer = _pass(Multimodal(mm_processor_kwargs={"max_patches": 4}))
    assert "of 1,280 tokens (5,120 patches)" in fewer.note
    one = _pass(Multimodal(mm_processor_kwargs={"crop_to_patches": False}))
    assert "of 256 tokens (1,024 patches)" in one.note


def test_tensor_parallelism_splits_the_projector_s_intermediate() -> None:
    # TP 4: linear_1's 9,216 and the SwiGLU's 4,608 a rank; linear_2's output (the whole
    # 12,288) with the SwiGLU is then the larger stage.
    assert projector_elements(1152, 36864, 12288, 2, tp=4) == 2 * 1152 + (4608 + 12288) // 4
