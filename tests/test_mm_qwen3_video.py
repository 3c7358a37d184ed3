"""Qwen3-VL's video in vLLM 0.11/0.12 (memacct/engines/vllm/mm/qwen3_video.py), against the
figures vLLM 0.11.0 printed (tests/data/startup_logs/cases.json,
sipeed-qwen3-vl-30b-a3b-tp4-rtx3090)."""

from __future__ import annotations

import json
from pathlib import Path

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.qwen3_video import video_tokens
from memacct.engines.vllm.multimodal import EncoderProfile, encoder_profile

ROOT = Path(__file__).resolve().parents[1]
CASES = json.loads((ROOT / "tests/data/startup_logs/cases.json").read_text(encoding="utf-8"))
CONFIG = CASES["models"]["Qwen/Qwen3-VL-30B-A3B-Instruct"]["config"]


def _profile(version: tuple[int, int], mm: Multimodal | None = None) -> EncoderProfile:
    profile = encoder_profile(CONFIG, mm or Multimodal(), max_num_batched_tokens=2048,
                           max_num_seqs=256, max_model_len=65536, dtype_bytes=2,
                           version=version, tensor_parallel_size=4)  # fmt: skip
    assert profile is not None
    return profile


def test_the_video_budget_is_the_one_vllm_0_11_printed() -> None:
    # 'Encoder cache will be initialized with a budget of 153600 tokens, and profiled with 1
    # video items of the maximum feature size.' (vLLM 0.11.0, max_model_len 65536)
    assert video_tokens(4096, 65536) == (153600, 12288)


def test_0_11_profiles_the_video_and_holds_the_budget_rows() -> None:
    profile = _profile((0, 11))
    assert "1 dummy video(s) of 153,600 tokens (49,152 patches)" in profile.note
    # 153,600 rows of out_hidden_size x (1 + 3 deepstack) = 8,192 bf16 values held
    assert profile.held_bytes >= 153600 * 8192 * 2


def test_later_releases_and_image_only_limits_keep_the_image() -> None:
    for version in ((0, 13), (0, 33)):
        assert "dummy image(s) of 16,384 tokens" in _profile(version).note
    no_video = Multimodal(limit_mm_per_prompt={"image": 1, "video": 0})
    assert "dummy image(s)" in _profile((0, 11), no_video).note
