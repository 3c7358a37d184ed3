"""InternVL-style tiling through H2OVL's and Eagle2.5-VL's processors (memacct/engines/vllm/
mm/tiles.py, mm/internvl_tiled.py), checked against vLLM 0.33's own processing-info code
(tests/data/golden/vllm-0.33-internvl-tiles.json, tools/golden_internvl_tiles.py) and the
towers against vLLM's model classes (vllm-0.33-towers.json, tools/golden_towers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.tiles import TileRules, largest_image_tiles, target_ratios
from memacct.engines.vllm.multimodal import encoder_profile, modelled, unapplied_notes
from memacct.model.towers import tower_params

DATA = Path(__file__).parent / "data" / "golden"
TILES = json.loads((DATA / "vllm-0.33-internvl-tiles.json").read_text(encoding="utf-8"))
TOWERS = json.loads((DATA / "vllm-0.33-towers.json").read_text(encoding="utf-8"))["rows"]


@pytest.mark.parametrize("name", sorted(TILES["rows"]))
def test_the_largest_image_has_the_tokens_vllm_counts(name: str) -> None:
    row = TILES["rows"][name]
    case = {k: v for k, v in row["case"].items() if k != "kind"}
    rules = TileRules(**case)
    assert largest_image_tiles(rules) * TILES["image_seq_length"] == row["tokens"]


def test_target_grids_follow_get_internvl_target_ratios() -> None:
    # Every grid of 1 to 3 tiles, ordered by tiles (a set sorted by product, as vLLM's).
    grids = target_ratios(1, 3)
    assert set(grids) == {(1, 1), (1, 2), (2, 1), (1, 3), (3, 1)}
    assert [a * b for a, b in grids] == [1, 2, 2, 3, 3]
    assert set(target_ratios(3, 3)) == {(1, 3), (3, 1)}


def _profile(config: dict[str, Any], mm: Multimodal | None = None, tp: int = 1) -> Any:
    return encoder_profile(config, mm or Multimodal(), max_num_batched_tokens=2048,
                           max_num_seqs=256, max_model_len=32768, dtype_bytes=2,
                           version=(0, 33), tensor_parallel_size=tp)  # fmt: skip


def test_h2ovl_profiles_its_multi_scale_crops_of_internvit_tiles() -> None:
    cfg = TOWERS["h2ovl-2b"]["config"]
    assert tower_params(cfg) == TOWERS["h2ovl-2b"]["tower_params"]
    assert modelled(cfg)
    # max 6 tiles with MSAC: 13 tiles of 256 tokens (the golden row h2ovl-msac-6); each tile
    # 32 x 32 + 1 InternViT patches. The layer: 3 x 1024 + 2 x 4096 (fc1 and its GELU) + ls2.
    p = _profile(cfg)
    assert p.note.startswith("multimodal profile: 1 dummy image(s) of 3,328 tokens "
                             "(13,325 patches)")  # fmt: skip
    values = 3 * 14 * 14
    assert p.peak_bytes == 13 * 1025 * (4 * 1024 + 2 * 4096 + values) * 2
    # --mm-processor-kwargs turns the crops off: 6 tiles and the thumbnail (h2ovl-plain-6).
    off = _profile(cfg, Multimodal(mm_processor_kwargs={"use_msac": False}))
    assert "of 1,792 tokens" in off.note


def test_eagle_profiles_siglip_tiles_and_needs_its_tiling_keys() -> None:
    cfg = TOWERS["eagle2.5-8b"]["config"]
    assert tower_params(cfg) == TOWERS["eagle2.5-8b"]["tower_params"]
    # 12 tiles and the thumbnail (eagle-12): 13 x 256 tokens, 13 x 32 x 32 SigLIP patches.
    p = _profile(cfg, tp=2)
    assert p.note.startswith("multimodal profile: 1 dummy image(s) of 3,328 tokens "
                             "(13,312 patches)")  # fmt: skip
    # SigLIP-400M at TP 2: the MLP 3 x 1152 + 2 x 2152 = 7,760 > attention 3 x 1152 + 4 x 576.
    assert p.peak_bytes == 13 * 1024 * (7760 + 3 * 14 * 14) * 2
    # Eagle's processing info reads no use_msac (H2OVL's does).
    msac = Multimodal(mm_processor_kwargs={"use_msac": True})
    assert unapplied_notes(cfg, msac)[0].startswith("--mm-processor-kwargs use_msac not applied")
    assert unapplied_notes(TOWERS["h2ovl-2b"]["config"], msac) == ()
    lacking = {k: v for k, v in cfg.items() if k != "max_dynamic_patch"}
    assert not modelled(lacking)
    assert "is not modelled" in _profile(lacking).note


def test_qianfan_ocr_reads_its_hf_format_vision_section_as_internvit() -> None:
    cfg = TOWERS["qianfan-ocr"]["config"]
    assert tower_params(cfg) == TOWERS["qianfan-ocr"]["tower_params"]
    # InternVLChatProcessor's tiles at the vision section's 448 px (the golden row eagle-12's
    # settings): 12 tiles and the thumbnail, 13 x 256 tokens, 13 x (32 x 32 + 1) patches.
    p = _profile(cfg)
    assert p.note.startswith("multimodal profile: 1 dummy image(s) of 3,328 tokens "
                             "(13,325 patches)")  # fmt: skip
    assert TILES["rows"]["eagle-12"]["tokens"] == 3328
    # use_msac is H2OVL's: Qianfan-OCR's processor reads the four InternVL keys.
    msac = Multimodal(mm_processor_kwargs={"use_msac": True})
    assert unapplied_notes(cfg, msac)[0].startswith("--mm-processor-kwargs use_msac not applied")
    # Without select_layer vLLM's InternVLChatModel cannot build it: not modelled here.
    assert not modelled({k: v for k, v in cfg.items() if k != "select_layer"})
