"""The encoder pass of Whisper-style audio encoders (memacct/engines/vllm/mm/audio.py).

Tokens per item, the dummy audio and the encoder's positions are checked against
``tests/data/golden/vllm-0.33-audio-items.json``: vLLM 0.33's own processing info and
dummy-inputs classes, and transformers' encoder run on the meta device, by
``tools/golden_audio.py`` (published configs, cited there); the tower's weights against
``vllm-0.33-towers.json`` (``tools/golden_towers.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.audio import qwen2_audio_item
from memacct.engines.vllm.mm.family import ItemContext
from memacct.engines.vllm.mm.flamingo import flamingo_item
from memacct.engines.vllm.mm.glmasr import glmasr_item
from memacct.engines.vllm.mm.omni import omni_audio_item, omni_vision_item
from memacct.engines.vllm.multimodal import encoder_profile, modelled, unapplied_notes
from memacct.model.towers import tower_params

_GOLDEN = Path(__file__).parent / "data" / "golden"
ITEMS = json.loads((_GOLDEN / "vllm-0.33-audio-items.json").read_text(encoding="utf-8"))["rows"]
TOWERS = json.loads((_GOLDEN / "vllm-0.33-towers.json").read_text(encoding="utf-8"))["rows"]


def _qwen2_audio() -> dict[str, Any]:
    config: dict[str, Any] = TOWERS["qwen2-audio-7b"]["config"]
    assert config["audio_config"] == {
        k: v for k, v in ITEMS["qwen2-audio-7b"]["settings"]["audio_config"].items()}
    return config


def _pass(cfg: dict[str, Any], mm: Multimodal | None = None, **kw: int) -> Any:
    args = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 8192}
    args.update(kw)
    return encoder_profile(cfg, mm or Multimodal(), dtype_bytes=2, version=(0, 33), **args)


def test_qwen2_audio_item_is_the_one_vllm_sizes() -> None:
    golden = ITEMS["qwen2-audio-7b"]
    ctx = ItemContext(8192, 2)
    for dummy in golden["dummies"]:
        length = dummy["length"]
        mm = Multimodal(limit_mm_per_prompt={"audio": {"count": 1, "length": length}}
                        if length else {})  # fmt: skip
        item = qwen2_audio_item(_qwen2_audio(), mm, ctx)
        assert item is not None and item.modality == "audio"
        assert item.tokens == golden["tokens_per_item"]
        assert item.patches == dummy["encoder_positions"]
        _, mels, frames = dummy["input_features"]
        assert item.values * item.patches == mels * frames
        assert (item.out_tokens or item.tokens) == dummy["held_tokens"]
    assert qwen2_audio_item(_qwen2_audio(), Multimodal(limit_mm_per_prompt={"audio": 0}),
                            ctx) is None  # fmt: skip


def test_qwen2_audio_profiles_the_budget_s_audios_through_the_encoder_s_mlp_peak() -> None:
    cfg = _qwen2_audio()
    assert modelled(cfg)
    p = _pass(cfg)
    # max(8192, 750) // 750 = 10 clips of 1,500 positions; the MLP (2 x 1280 + 2 x 5120)
    # is the widest stage, plus 256 input-feature values per position, in bfloat16.
    assert "10 dummy audio(s) of 750 tokens (1,500 patches)" in p.note
    assert p.peak_bytes == 10 * 1500 * (2 * 1280 + 2 * 5120 + 256) * 2
    # Held: 10 x 750 projected tokens of the text width and the 128 x 3000 features each.
    assert p.held_bytes == 10 * 750 * 4096 * 2 + 10 * 128 * 3000 * 2
    short = _pass(cfg, Multimodal(limit_mm_per_prompt={"audio": {"count": 2, "length": 80000}}))
    assert "10 dummy audio(s)" in short.note and short.peak_bytes == p.peak_bytes
    assert short.held_bytes == 10 * 125 * 4096 * 2 + 10 * 128 * 3000 * 2
    one = _pass(cfg, max_num_batched_tokens=512, max_num_seqs=1,
                max_model_len=1000)  # fmt: skip
    assert one.note.startswith("multimodal profile: 1 dummy audio(s)")
    assert _pass(cfg, Multimodal(limit_mm_per_prompt={"audio": 0})).peak_bytes == 0
    notes = unapplied_notes(cfg, Multimodal(mm_processor_kwargs={"chunk_length": 10}))
    assert notes and "chunk_length not applied" in notes[0]


def test_qwen2_audio_tower_is_vllm_s_count() -> None:
    assert tower_params(_qwen2_audio()) == TOWERS["qwen2-audio-7b"]["tower_params"]


def _flamingo() -> dict[str, Any]:
    config: dict[str, Any] = TOWERS["audioflamingo3-7b"]["config"]
    assert config["audio_config"] == ITEMS["audioflamingo3-7b"]["settings"]["audio_config"]
    return config


def test_audio_flamingo3_items_are_the_windows_vllm_cuts() -> None:
    golden = ITEMS["audioflamingo3-7b"]
    assert golden["supported_limit"] == 1
    for dummy in golden["dummies"]:
        length = dummy["length"]
        mm = Multimodal(limit_mm_per_prompt={"audio": {"count": 1, "length": length}}
                        if length else {})  # fmt: skip
        item = flamingo_item(_flamingo(), mm, ItemContext(32768, 2))
        assert item is not None
        assert item.tokens == dummy["tokens"] == dummy["processor_tokens"]
        assert item.patches == dummy["encoder_positions"]
        windows, mels, frames = dummy["input_features"]
        assert item.values * item.patches == windows * mels * frames
    # max_audio_len 90 s: three full windows, 2,250 tokens.
    three = flamingo_item(_flamingo(), Multimodal(mm_processor_kwargs={"max_audio_len": 90}),
                          ItemContext(32768, 2))  # fmt: skip
    assert three is not None and (three.tokens, three.patches) == (2250, 4500)


def test_audio_flamingo3_profiles_one_ten_minute_audio() -> None:
    cfg = _flamingo()
    assert modelled(cfg) and tower_params(cfg) == TOWERS["audioflamingo3-7b"]["tower_params"]
    p = _pass(cfg, max_model_len=32768)
    # The budget max(8192, 15000) holds one item: 20 windows, 30,000 positions at the MLP.
    assert "1 dummy audio(s) of 15,000 tokens (30,000 patches)" in p.note
    assert p.peak_bytes == 30000 * (2 * 1280 + 2 * 5120 + 256) * 2
    assert p.held_bytes == 15000 * 3584 * 2 + 20 * 128 * 3000 * 2
    assert not unapplied_notes(cfg, Multimodal(mm_processor_kwargs={"max_audio_len": 60}))


def _omni() -> dict[str, Any]:
    config: dict[str, Any] = TOWERS["qwen2.5-omni-7b"]["config"]
    return config


def test_qwen2_5_omni_items_are_the_ones_vllm_sizes() -> None:
    golden = ITEMS["qwen2.5-omni-7b"]
    thinker = _omni()["thinker_config"]
    for seq_len, tokens in golden["tokens_per_item"].items():
        ctx = ItemContext(int(seq_len), 2, version=(0, 33))
        for modality, want in tokens.items():
            if modality == "audio":
                item = omni_audio_item(thinker, Multimodal(), ctx)
            else:
                item = omni_vision_item(thinker, Multimodal(), ctx, modality)
            assert item.tokens == want, (seq_len, modality)
        dummy = golden["dummies"][seq_len]
        video = omni_vision_item(thinker, Multimodal(), ctx, "video")
        # The dummy video's frames, two per temporal patch, of the largest image's patches.
        width, height = dummy["image_size"]
        assert video.patches == -(-dummy["video_frames"] // 2) * (width // 14) * (height // 14)
        assert dummy["audio_samples"] == 30 * 16000


def test_qwen2_5_omni_profiles_its_video_image_or_audio() -> None:
    cfg = _omni()
    assert modelled(cfg) and tower_params(cfg) == TOWERS["qwen2.5-omni-7b"]["tower_params"]
    p = _pass(cfg, max_model_len=32768)
    assert "1 dummy video(s) of 32,768 tokens (131,072 patches)" in p.note
    # Qwen2.5-VL's block in 0.33: max(11 x 1280, 3 x 1280 + 3 x 3420) widths, cos/sin (80)
    # and 1,176 pixel values per patch.
    per = max(11 * 1280, 3 * 1280 + 3 * 3420) + 80 + 1176
    assert p.peak_bytes == 131072 * per * 2
    assert p.held_bytes == 32768 * 3584 * 2 + 131072 * 1176 * 2
    # The same tower as a Qwen2.5-VL config plans the same pass.
    vl = {"model_type": "qwen2_5_vl", "hidden_size": 3584,
          "vision_config": cfg["thinker_config"]["vision_config"]}  # fmt: skip
    assert _pass(vl, max_model_len=32768).peak_bytes == p.peak_bytes
    image = _pass(cfg, Multimodal(limit_mm_per_prompt={"video": 0}), max_model_len=32768)
    assert "1 dummy image(s) of 16,384 tokens (65,536 patches)" in image.note
    audio = _pass(cfg, Multimodal(limit_mm_per_prompt={"video": 0, "image": 0}))
    # 10 clips of 1,500 positions; the MLP's residual, fc1 and its activation (1280 + 2 x
    # 5120) is the widest stage; 750 tokens of output_dim 3584 held per clip.
    assert "10 dummy audio(s) of 750 tokens (1,500 patches)" in audio.note
    assert audio.peak_bytes == 10 * 1500 * (1280 + 2 * 5120 + 256) * 2
    assert audio.held_bytes == 10 * 750 * 3584 * 2 + 10 * 1500 * 256 * 2


def test_glmasr_items_are_the_windows_vllm_counts() -> None:
    golden = ITEMS["glm-asr-nano"]
    cfg: dict[str, Any] = TOWERS["glm-asr-nano"]["config"]
    assert tower_params(cfg) == TOWERS["glm-asr-nano"]["tower_params"] and modelled(cfg)
    for dummy in golden["dummies"]:
        length = dummy["length"]
        mm = Multimodal(limit_mm_per_prompt={"audio": {"count": 1, "length": length}}
                        if length else {})  # fmt: skip
        item = glmasr_item(cfg, mm, ItemContext(32768, 2))
        assert item is not None
        assert (item.tokens, item.patches) == (dummy["tokens"], dummy["encoder_positions"])
        windows, mels, frames = dummy["input_features"]
        assert item.values * item.patches == windows * mels * frames


def test_glmasr_profiles_its_windows_through_the_split_encoder() -> None:
    cfg: dict[str, Any] = TOWERS["glm-asr-nano"]["config"]
    p = _pass(cfg, max_model_len=32768)
    # max(8192, 7875) // 7875 = 1 item: 21 windows, 31,500 positions; the MLP (2 x 1280 +
    # 2 x 5120) is the widest stage, plus 256 input-feature values.
    assert "1 dummy audio(s) of 7,875 tokens (31,500 patches)" in p.note
    assert p.peak_bytes == 31500 * (2 * 1280 + 2 * 5120 + 256) * 2
    assert p.held_bytes == 7875 * 2048 * 2 + 21 * 128 * 3000 * 2
    # TP 2: qkv (1,920 of 3,840), the attention output (640) and the MLP's intermediate
    # (2,560) halve on each rank; the residual, the norms and the row outputs stay whole.
    tp2 = _pass(cfg, max_model_len=32768, tensor_parallel_size=2)
    widest = max(3 * 1280 + 1920 + 640, 2 * 1280 + 2 * 2560, 3 * 1280 + 2560)
    assert tp2.peak_bytes == 31500 * (widest + 256) * 2
