"""Mistral-format Pixtral and LightOnOCR (memacct/engines/vllm/mm/pixtral.py, the Pixtral rules
of memacct/model/towers/clip.py).

Tower counts: vLLM 0.33's own classes built by tools/golden_towers.py from the published
``params.json`` (Mistral format, ``config_format="mistral"``) and LightOnOCR's ``config.json``.
Token figures derived by hand from ``pixtral.py`` and mistral_common's ``ImageEncoder``
(module notes of mm/pixtral.py): 64 x 64 for Pixtral-12B (1024 px, 16-px patches), 55 x 55
for Mistral Small 3.1 (1540 px, 14-px patches merged 2 x 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.pixtral import rotary_bytes
from memacct.engines.vllm.multimodal import EncoderProfile, encoder_profile, modelled
from memacct.model.towers import tower_params, tower_tensors
from memacct.planner.offline import plan_offline

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "vllm-0.33-towers.json")
                    .read_text(encoding="utf-8"))["rows"]  # fmt: skip

_TEXT_KEYS = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "head_dim": "head_dim",
              "hidden_dim": "intermediate_size", "n_heads": "num_attention_heads",
              "n_kv_heads": "num_key_value_heads", "rope_theta": "rope_theta",
              "norm_eps": "rms_norm_eps", "vocab_size": "vocab_size"}


def _remapped(name: str, layers: int = 1) -> dict[str, Any]:
    """The config vLLM builds from a params.json (``_remap_general_mistral_args`` renames the
    text keys, ``_remap_mistral_vision_args`` moves ``vision_encoder`` to ``vision_config``)."""
    params = GOLDEN[name]["config"]
    text = {new: params[old] for old, new in _TEXT_KEYS.items()}
    text.update(model_type="mistral", num_hidden_layers=layers, max_position_embeddings=131072)
    return {"architectures": ["PixtralForConditionalGeneration"], "model_type": "pixtral",
            "text_config": text, "vision_config": params["vision_encoder"]}


def _pass(cfg: dict[str, Any], **kw: Any) -> EncoderProfile:
    args = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 32768}
    args.update(kw)
    p = encoder_profile(cfg, Multimodal(), dtype_bytes=2, version=(0, 33), **args)
    assert p is not None
    return p


def test_the_towers_are_the_ones_vllm_builds() -> None:
    for name in ("pixtral-12b-2409", "mistral-small-3.1-24b-params"):
        assert tower_params(_remapped(name)) == GOLDEN[name]["tower_params"], name
        assert modelled(_remapped(name))
    lighton = GOLDEN["lightonocr-1b"]
    assert tower_params(lighton["config"]) == lighton["tower_params"]
    # The adapter is ReplicatedLinear: whole on every rank.
    adapter = [t for t in tower_tensors(_remapped("pixtral-12b-2409")) or ()
               if t.name.startswith("vision_language_adapter")]  # fmt: skip
    assert adapter and not any(t.split for t in adapter)


def test_pixtral_profiles_one_image_of_max_image_size() -> None:
    # Pixtral-12B: 1024 / 16 = 64 tokens a row, 4,096 embeddings (the row breaks carry
    # none) from 4,096 patches; 8192 // 4096 = 2 images.
    p = _pass(_remapped("pixtral-12b-2409"))
    assert "2 dummy image(s) of 4,096 tokens (4,096 patches)" in p.note
    # The rotary step: residual and norm (2 widths), qkv and the rotated q, k (5) in
    # bfloat16, q and k in float32 and their products (4 float32 widths): 30 bytes a width.
    per = max((2 + 5) * 1024 * 2 + 4 * 1024 * 4, (4 * 1024 + 3 * 4096) * 2) + 3 * 16 * 16 * 2
    assert p.peak_bytes == 2 * 4096 * per
    # Here the MLP's 4 widths and 3 intermediate ones (32 KiB a patch) pass the rotary
    # step's 30 bytes a width; with a narrower MLP the rotary step is the peak.
    assert rotary_bytes(1024, 4096, 2) == (4 * 1024 + 3 * 4096) * 2 > 30 * 1024
    assert rotary_bytes(1024, 2048, 2) == 30 * 1024
    # Mistral Small 3.1: ceil(1540 / 28) = 55, 3,025 tokens from 110 x 110 patches.
    small = _pass(_remapped("mistral-small-3.1-24b-params"))
    assert "2 dummy image(s) of 3,025 tokens (12,100 patches)" in small.note


def test_tensor_parallelism_splits_what_the_heads_hold() -> None:
    tp4 = rotary_bytes(1024, 4096, 2, tp=4)
    assert tp4 == max(2 * 1024 * 2 + 5 * 256 * 2 + 4 * 256 * 4, (4 * 1024 + 3 * 1024) * 2)


def test_lightonocr_is_read_as_mistral_3() -> None:
    # LightOnOCR-1B: the 1540-px Pixtral tower, merged 2 x 2: 55 x 55 tokens.
    p = _pass(GOLDEN["lightonocr-1b"]["config"])
    assert "2 dummy image(s) of 3,025 tokens (12,100 patches)" in p.note


def test_a_pixtral_plan_holds_the_tower_and_its_pass() -> None:
    plan = plan_offline(_remapped("pixtral-12b-2409", layers=40), device="h100",
                        max_model_len=32768)  # fmt: skip
    assert any("multimodal profile: 2 dummy image(s) of 4,096 tokens" in n for n in plan.notes)
