#!/usr/bin/env python3
"""Golden audio items: vLLM 0.33's own processing code sizes the largest dummy audio.

Run by hand in the throwaway vLLM environment (never in ``make test``)::

    /tmp/vllmenv/bin/python tools/golden_audio.py --vllm-src /tmp/vllm033/src

For each model of :data:`MODELS` (the published ``config.json`` audio section and
``preprocessor_config.json`` feature-extractor settings, cited by Hub id), vLLM's
processing info class gives the budget's tokens per item
(``get_mm_max_tokens_per_item``) and its dummy-inputs builder the profile's dummy audio
(``get_dummy_mm_data``, plain and with the size form's ``length``); the feature extractor
pads it as the model's processor does, and the model's audio encoder runs it on the meta
device: the input features' shape, the encoder's positions and the tokens each clip
leaves. The tokenizer-bound parts of the processor (the Hub is not reachable here) are
replaced by the feature extractor built from the published settings.
``tests/test_multimodal_audio.py`` checks :mod:`memacct.engines.vllm.mm.audio` against
the table this writes (``tests/data/golden/vllm-0.33-audio-items.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-audio-items.json"

MODELS: dict[str, dict[str, Any]] = {
    # Qwen/Qwen2-Audio-7B-Instruct: config.json audio_config, preprocessor_config.json
    "qwen2-audio-7b": {
        "audio_config": {"model_type": "qwen2_audio_encoder", "d_model": 1280,
                         "encoder_layers": 32, "encoder_attention_heads": 20,
                         "encoder_ffn_dim": 5120, "num_mel_bins": 128,
                         "max_source_positions": 1500},
        "feature_extractor": {"feature_size": 128, "sampling_rate": 16000,
                              "hop_length": 160, "chunk_length": 30, "n_fft": 400},
        "lengths": [None, 80000],
    },
    # nvidia/audio-flamingo-3-hf: AudioFlamingo3EncoderConfig's sizes, the
    # WhisperFeatureExtractor of 128 mel bins, AudioFlamingo3Processor's max_audio_len
    "audioflamingo3-7b": {
        "audio_config": {"model_type": "audioflamingo3_encoder", "hidden_size": 1280,
                         "num_hidden_layers": 32, "num_attention_heads": 20,
                         "intermediate_size": 5120, "num_mel_bins": 128,
                         "max_source_positions": 1500},
        "feature_extractor": {"feature_size": 128, "sampling_rate": 16000,
                              "hop_length": 160, "chunk_length": 30, "n_fft": 400},
        "max_audio_len": 600,
        "lengths": [None, 1000000, 80000],
    },
    # zai-org/GLM-ASR-Nano-2512: the WhisperFeatureExtractor of 128 mel bins
    "glm-asr-nano": {
        "feature_extractor": {"feature_size": 128, "sampling_rate": 16000,
                              "hop_length": 160, "chunk_length": 30, "n_fft": 400},
        "lengths": [None, 1000000, 80000],
    },
    # Qwen/Qwen2.5-Omni-7B: config.json thinker_config (as tools/golden_towers.py cites),
    # preprocessor_config.json (WhisperFeatureExtractor, Qwen2VLImageProcessor's pixels)
    "qwen2.5-omni-7b": {
        "thinker_config": "golden_towers:qwen2.5-omni-7b",
        "feature_extractor": {"feature_size": 128, "sampling_rate": 16000,
                              "hop_length": 160, "chunk_length": 30, "n_fft": 400},
        "image_processor": {"max_pixels": 12845056, "min_pixels": 3136, "patch_size": 14,
                            "merge_size": 2, "temporal_patch_size": 2},
        "seq_lens": [32768, 8192],
    },
}
"""Published settings (Hub ids above) and the dummy lengths tried (None: the default)."""


def qwen2_audio_row(spec: dict[str, Any]) -> dict[str, Any]:
    """Tokens per item, and per dummy length the features, positions and held tokens."""
    import torch
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_audio import Qwen2AudioEncoder, Qwen2AudioEncoderConfig
    from vllm.config.multimodal import AudioDummyOptions
    from vllm.model_executor.models import qwen2_audio as mod

    extractor = WhisperFeatureExtractor(**spec["feature_extractor"])
    info = mod.Qwen2AudioProcessingInfo.__new__(mod.Qwen2AudioProcessingInfo)
    info.get_feature_extractor = lambda **kw: extractor  # type: ignore[method-assign]
    row: dict[str, Any] = {
        "tokens_per_item": info.get_mm_max_tokens_per_item(4096, {"audio": 1})["audio"]}
    builder = mod.Qwen2AudioDummyInputsBuilder(info)
    with torch.device("meta"):
        encoder = Qwen2AudioEncoder(Qwen2AudioEncoderConfig(**spec["audio_config"]))
    dummies = []
    for length in spec["lengths"]:
        options = {"audio": AudioDummyOptions(length=length)} if length else {}
        audio = builder.get_dummy_mm_data(4096, {"audio": 1}, options)["audio"][0]
        feats = extractor(audio, sampling_rate=extractor.sampling_rate, padding="max_length",
                          truncation=True, return_attention_mask=True, return_tensors="pt")
        mask = feats["attention_mask"]
        _, held = mod._get_feat_extract_output_lengths(mask.sum(-1))
        x = feats["input_features"].to("meta")
        positions = encoder.conv2(encoder.conv1(x)).shape[-1]
        out = encoder(x).last_hidden_state
        dummies.append({"length": length, "samples": int(audio.shape[0]),
                        "input_features": list(feats["input_features"].shape),
                        "encoder_positions": positions,
                        "encoder_output": list(out.shape), "held_tokens": int(held[0])})
    row["dummies"] = dummies
    return row


def flamingo_row(spec: dict[str, Any]) -> dict[str, Any]:
    """Audio Flamingo 3: the budget's tokens are the dummy item's (no
    ``get_mm_max_tokens_per_item``); per dummy length its windows, features and tokens."""
    import torch
    from transformers import WhisperFeatureExtractor
    from transformers.models.audioflamingo3 import (
        AudioFlamingo3EncoderConfig,
        AudioFlamingo3Processor,
    )
    from vllm.config.multimodal import AudioDummyOptions
    from vllm.model_executor.models import audioflamingo3 as mod

    extractor = WhisperFeatureExtractor(**spec["feature_extractor"])
    processor = AudioFlamingo3Processor.__new__(AudioFlamingo3Processor)
    processor.feature_extractor = extractor
    processor.max_audio_len = spec["max_audio_len"]
    processor.audio_token = "<sound>"
    info = mod.AudioFlamingo3ProcessingInfo.__new__(mod.AudioFlamingo3ProcessingInfo)
    info.get_hf_processor = lambda **kw: processor  # type: ignore[method-assign]
    info.get_feature_extractor = lambda **kw: extractor  # type: ignore[method-assign]
    builder = mod.AudioFlamingo3DummyInputsBuilder(info)
    with torch.device("meta"):
        encoder = mod.AudioFlamingo3Encoder(AudioFlamingo3EncoderConfig(**spec["audio_config"]))
    row: dict[str, Any] = {"supported_limit": info.get_supported_mm_limits()["audio"]}
    dummies = []
    for length in spec["lengths"]:
        options = {"audio": AudioDummyOptions(length=length)} if length else {}
        audio = builder.get_dummy_mm_data(4096, {"audio": 1}, options)["audio"][0]
        feats, _ = processor._process_audio([audio], sampling_rate=extractor.sampling_rate,
                                            return_attention_mask=True, padding="max_length",
                                            return_tensors="pt")
        windows = int(feats["input_features"].shape[0])
        tokens = mod._count_audio_tokens_from_mask(feats["input_features_mask"], [windows], 0)
        x = feats["input_features"].to("meta")
        positions = encoder.conv2(encoder.conv1(x)).shape[-1]
        dummies.append({"length": length, "samples": int(audio.shape[0]),
                        "input_features": list(feats["input_features"].shape),
                        "encoder_positions": windows * positions, "tokens": tokens,
                        "processor_tokens": int(feats["num_audio_tokens"][0])})
    row["dummies"] = dummies
    return row


def omni_row(spec: dict[str, Any]) -> dict[str, Any]:
    """Qwen2.5-Omni's thinker: the budget's tokens per item of each modality per
    ``max_model_len``, and the dummy audio, image and video of the profile."""
    from types import SimpleNamespace

    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_5_omni import Qwen2_5OmniThinkerConfig
    from transformers.models.qwen2_vl import Qwen2VLImageProcessor
    from vllm.model_executor.models import qwen2_5_omni_thinker as mod

    thinker = Qwen2_5OmniThinkerConfig(**spec["thinker_config"])
    extractor = WhisperFeatureExtractor(**spec["feature_extractor"])
    images = Qwen2VLImageProcessor(**spec["image_processor"])
    info = mod.Qwen2_5OmniThinkerProcessingInfo.__new__(mod.Qwen2_5OmniThinkerProcessingInfo)
    info.get_hf_config = lambda: thinker  # type: ignore[method-assign]
    info.get_hf_processor = lambda **kw: SimpleNamespace(  # type: ignore[method-assign]
        image_processor=images, feature_extractor=extractor)
    info.get_feature_extractor = lambda **kw: extractor  # type: ignore[method-assign]
    info.get_image_processor = lambda **kw: images  # type: ignore[method-assign]
    # No --mm-processor-kwargs: the merge with the model config's kwargs is the identity.
    info._merge_and_resolve_mm_processor_kwargs = dict  # type: ignore[method-assign]
    counts = {"audio": 1, "image": 1, "video": 1}
    row: dict[str, Any] = {"tokens_per_item": {
        str(n): dict(info.get_mm_max_tokens_per_item(n, counts)) for n in spec["seq_lens"]}}
    builder = mod.Qwen2_5OmniThinkerDummyInputsBuilder(info)
    dummies = {}
    for n in spec["seq_lens"]:
        data = builder.get_dummy_mm_data(n, counts, {})
        video = data["video"][0]
        video = video[0] if isinstance(video, tuple) else video
        dummies[str(n)] = {"audio_samples": int(data["audio"][0].shape[0]),
                           "image_size": list(data["image"][0].size),
                           "video_frames": len(video)}
    row["dummies"] = dummies
    return row


def glmasr_row(spec: dict[str, Any]) -> dict[str, Any]:
    """GLM-ASR: the budget's tokens are the dummy item's, as vLLM's prompt update counts
    them; per dummy length its windows, features, encoder positions and tokens."""
    import torch
    from transformers import WhisperFeatureExtractor
    from transformers.models.glmasr import GlmAsrProcessor
    from vllm.config.multimodal import AudioDummyOptions
    from vllm.model_executor.models import glmasr as mod
    from vllm.model_executor.models import glmasr_utils as utils

    extractor = WhisperFeatureExtractor(**spec["feature_extractor"])
    processor = GlmAsrProcessor.__new__(GlmAsrProcessor)
    processor.feature_extractor = extractor
    processor.max_audio_len = utils.DEFAULT_MAX_AUDIO_LEN_S
    processor.audio_token = "<|pad|>"
    info = mod.GlmAsrProcessingInfo.__new__(mod.GlmAsrProcessingInfo)
    info.get_hf_processor = lambda **kw: processor  # type: ignore[method-assign]
    info.get_feature_extractor = lambda **kw: extractor  # type: ignore[method-assign]
    builder = mod.GlmAsrDummyInputsBuilder(info)
    row: dict[str, Any] = {"max_audio_len": utils.DEFAULT_MAX_AUDIO_LEN_S}
    dummies = []
    for length in spec["lengths"]:
        options = {"audio": AudioDummyOptions(length=length)} if length else {}
        audio = builder.get_dummy_mm_data(4096, {"audio": 1}, options)["audio"][0]
        feats, _ = processor._process_audio([audio], sampling_rate=extractor.sampling_rate,
                                            return_attention_mask=True, padding="max_length",
                                            return_tensors="pt")
        mask = feats["input_features_mask"]
        tokens = utils._get_audio_output_lengths_from_mask(
            mask, utils.DEFAULT_MERGE_FACTOR, utils.DEFAULT_CONV_PARAMS)
        positions = torch.tensor([mask.shape[-1]])
        for padding, kernel, stride in utils.DEFAULT_CONV_PARAMS:
            positions = utils._calculate_conv_output_length(positions, padding, kernel, stride)
        dummies.append({"length": length, "samples": int(audio.shape[0]),
                        "input_features": list(feats["input_features"].shape),
                        "encoder_positions": int(mask.shape[0] * positions[0]),
                        "tokens": int(tokens.sum())})
    row["dummies"] = dummies
    return row


_ROWS = {"qwen2-audio-7b": qwen2_audio_row, "audioflamingo3-7b": flamingo_row,
         "glm-asr-nano": glmasr_row, "qwen2.5-omni-7b": omni_row}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    from golden_towers import MODELS as TOWER_MODELS

    rows = {}
    for name, spec in MODELS.items():
        run = dict(spec)
        if isinstance(run.get("thinker_config"), str):
            run["thinker_config"] = TOWER_MODELS[run["thinker_config"].split(":")[1]][
                "thinker_config"]
        rows[name] = {"settings": spec, **_ROWS[name](run)}
    for name, row in rows.items():
        print(name, row["dummies"], flush=True)
    OUT.write_text(json.dumps({"vllm": version, "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
