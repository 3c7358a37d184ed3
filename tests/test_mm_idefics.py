"""Idefics3 and SmolVLM (memacct/engines/vllm/mm/idefics.py, memacct/model/towers/idefics.py).

Tower counts: vLLM 0.33's model classes built by tools/golden_towers.py. Tile counts:
transformers' ``Idefics3ImageProcessorPil.get_number_of_image_patches`` (the method vLLM's
``Idefics3ProcessingInfo`` calls), run in the vLLM environment: 17 tiles (4 x 4 and the
global image) for the dummy square of the tile's side with ``size`` 4 tiles long, 5 with 2;
``image_tiles`` agreed with it on 3,000 random image and processor sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.idefics import image_tiles
from memacct.engines.vllm.multimodal import (
    EncoderProfile,
    encoder_profile,
    modelled,
    unapplied_notes,
)
from memacct.model.towers import tower_params, tower_tensors

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip


def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = GOLDEN[name]["config"]
    return config


def _pass(cfg: dict[str, Any], mm: Multimodal | None = None, **kw: Any) -> EncoderProfile:
    args = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 32768}
    args.update(kw)
    p = encoder_profile(cfg, mm or Multimodal(), dtype_bytes=2, version=(0, 33), **args)
    assert p is not None
    return p


@pytest.mark.parametrize("name", ["idefics3-8b-llama3", "smolvlm2-2.2b", "smolvlm-256m"])
def test_the_tower_is_the_one_vllm_builds(name: str) -> None:
    assert tower_params(_config(name)) == GOLDEN[name]["tower_params"]
    assert modelled(_config(name))


def test_the_connector_is_one_bias_free_projection_whole_on_every_rank() -> None:
    proj = [t for t in tower_tensors(_config("idefics3-8b-llama3")) or ()
            if t.name.startswith("model.connector")]  # fmt: skip
    assert [(t.shape, t.split) for t in proj] == [((4096, 1152 * 4), False)]


def test_idefics3_profiles_sixteen_tiles_and_the_global_image() -> None:
    # 364 px tiles of 26 x 26 patches, 676 / 2^2 = 169 tokens each; 17 tiles: 2,873 tokens,
    # 11,492 patches; 8192 // 2873 = 2 images.
    p = _pass(_config("idefics3-8b-llama3"))
    assert "2 dummy image(s) of 2,873 tokens (11,492 patches)" in p.note
    assert p.peak_bytes == 2 * 11492 * (3 * 1152 + 2 * 4304 + 3 * 14 * 14) * 2
    assert p.held_bytes == 2 * 2873 * 4096 * 2 + 2 * 11492 * 3 * 14 * 14 * 2
    half = _pass(_config("idefics3-8b-llama3"),
                 Multimodal(mm_processor_kwargs={"size": {"longest_edge": 728}}))  # fmt: skip
    assert "of 845 tokens (3,380 patches)" in half.note  # 2 x 2 tiles and the global: 5
    whole = _pass(_config("idefics3-8b-llama3"),
                  Multimodal(mm_processor_kwargs={"do_image_splitting": False}))  # fmt: skip
    assert "of 169 tokens (676 patches)" in whole.note


def test_smolvlm_reads_its_tile_and_scale_factor() -> None:
    # SmolVLM2-2.2B: 384 px, 27^2 = 729 patches / 3^2 = 81 tokens, 17 tiles: 1,377 tokens.
    assert "5 dummy image(s) of 1,377 tokens (12,393 patches)" in _pass(
        _config("smolvlm2-2.2b")).note  # fmt: skip
    # SmolVLM-256M: 512 px of 16-px patches, 1024 / 4^2 = 64 tokens: 1,088 tokens a image.
    assert "7 dummy image(s) of 1,088 tokens (17,408 patches)" in _pass(
        _config("smolvlm-256m")).note  # fmt: skip
    notes = unapplied_notes(_config("smolvlm-256m"),
                            Multimodal(mm_processor_kwargs={"max_image_sizes": 512}))  # fmt: skip
    assert notes and "max_image_size" in notes[0]


def test_image_tiles_follows_the_image_processor() -> None:
    assert image_tiles(364, 364, 1456, 364, True) == 17
    assert image_tiles(1000, 3000, 1456, 364, True) == 2 * 4 + 1  # 486 x 1456
    assert image_tiles(100, 100, 364, 364, True) == 1
    assert image_tiles(364, 364, 1456, 364, False) == 1
