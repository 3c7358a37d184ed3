"""GLM-4V (GLM-4V-9B): the EVA2-CLIP tower against vLLM 0.33's own GLM4VForCausalLM
(tests/data/golden/vllm-0.33-towers.json) and the encoder pass of glm4v.py's processing
(memacct/engines/vllm/mm/glm4v.py, memacct/model/towers/glm.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.multimodal import encoder_profile, modelled
from memacct.model.towers import tower_params, tower_tensors

TOWERS = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip
CFG: dict[str, Any] = TOWERS["glm-4v-9b"]["config"]


def _profile(config: dict[str, Any], batched: int = 2048, seqs: int = 256, tp: int = 1) -> Any:
    return encoder_profile(config, Multimodal(), max_num_batched_tokens=batched,
                           max_num_seqs=seqs, max_model_len=8192, dtype_bytes=2,
                           version=(0, 33), tensor_parallel_size=tp)  # fmt: skip


def test_the_eva2clip_tower_is_the_tower_vllm_builds() -> None:
    assert tower_params(CFG) == TOWERS["glm-4v-9b"]["tower_params"] == 4506369536
    # A ChatGLM text config (no vision section) has no tower and no encoder pass.
    text = {k: v for k, v in CFG.items() if k not in ("vision_config", "architectures")}
    assert tower_tensors(text) == [] and tower_params(text) == 0
    assert not modelled(text) and _profile(text) is None


def test_one_1120_pixel_image_is_1602_tokens_through_6401_patches() -> None:
    assert modelled(CFG)
    # (1120 / 14 / 2)^2 = 1600 image tokens, boi and eoi; 80 x 80 patches and the class token.
    p = _profile(CFG)
    assert p.note.startswith("multimodal profile: 1 dummy image(s) of 1,602 tokens "
                             "(6,401 patches)")  # fmt: skip
    # The MLP's peak: 3 x 1792 + 2 x 15360 widths, the pixel values 3 x 14 x 14.
    assert p.peak_bytes == 6401 * (3 * 1792 + 2 * 15360 + 588) * 2
    # TP 4 splits fc1 and its GELU: 3 x 1792 + 2 x 3840.
    assert _profile(CFG, tp=4).peak_bytes == 6401 * (3 * 1792 + 2 * 3840 + 588) * 2


def test_one_image_a_prompt_bounds_the_profiled_batch() -> None:
    # get_supported_mm_limits {"image": 1}: 16,384 batched tokens hold 10 images, but 4
    # sequences of one image each give 4 (vLLM's allowed_mm_limits takes the lesser).
    p = _profile(CFG, batched=16384, seqs=4)
    assert p.note.startswith("multimodal profile: 4 dummy image(s)")
    assert _profile(CFG, batched=16384, seqs=256).note.startswith(
        "multimodal profile: 10 dummy image(s)")
