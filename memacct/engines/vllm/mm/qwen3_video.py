"""Qwen3-VL's video in vLLM 0.11 and 0.12: the budget item the profile run encodes.

Read off vLLM 0.11.0 and 0.12.0 (``vllm/model_executor/models/qwen3_vl.py``):

* ``Qwen3VLProcessingInfo.get_max_video_tokens`` sizes the largest video at the image's
  largest size (``get_image_size_with_most_features``) with as many frames as
  ``max_model_len`` holds (``get_num_frames_with_most_features``, at most
  ``_MAX_FRAMES_PER_VIDEO`` = 24,576), resized by the video processor's ``smart_resize``
  (``video_processing_qwen3_vl.py``: frames x height x width within the published
  ``size`` of 4,096 to 25,165,824 pixels), and counts each soft token 12.5 times ("one video
  token is converted to '<{timestamp} seconds>' ... + vision_start + video + vision_end").
  A 12,288-token video is a 153,600-token budget item, more than the image's 16,384, so the
  video is the profiled modality wherever videos are allowed (vLLM 0.13 drops the 12.5, 0.15
  sizes the video at two frames: :func:`memacct.engines.vllm.multimodal._qwen3_item`).
* ``Qwen3VLDummyInputsBuilder.get_dummy_mm_data`` builds that many frames at the resized
  size, so the tower encodes ``soft tokens x spatial_merge_size**2`` patches.

The same releases' ``GPUModelRunner.profile_run`` (``vllm/v1/worker/gpu_model_runner.py``)
then holds each encoder output widened to the encoder budget's rows
(``output.new_zeros((encoder_budget, hidden))`` where the output has fewer rows): 153,600
rows of ``out_hidden_size x (1 + deepstack)`` during the text dummy run. 0.10.2 and 0.13.0
on do not (:data:`BUDGET_ROWS_HELD`).
"""

from __future__ import annotations

import math

__all__ = ["BUDGET_ROWS_HELD", "FORMATTED_TOKENS_PER_TOKEN", "QWEN3_VIDEO_PIXELS", "video_tokens"]

FORMATTED_TOKENS_PER_TOKEN = 12.5
"""``get_max_video_tokens``'s factor in vLLM 0.11 and 0.12 (``formatted_video_soft_tokens``)."""

QWEN3_VIDEO_PIXELS = (4096, 25165824)
"""Qwen3-VL's published ``video_preprocessor_config.json`` ``size``: (``shortest_edge``,
``longest_edge``), pixels over all frames."""

MAX_FRAMES_PER_VIDEO = 24576
"""vLLM 0.11's ``qwen3_vl._MAX_FRAMES_PER_VIDEO``."""

BUDGET_ROWS_HELD = frozenset({(0, 11), (0, 12)})
"""Releases whose profile run widens each dummy encoder output to the budget's rows."""


def _resize(frames: int, side: int, factor: int, temporal: int) -> tuple[int, int]:
    """The video processor's ``smart_resize`` for ``frames`` square frames of ``side``."""
    low, high = QWEN3_VIDEO_PIXELS
    bar = max(factor, round(side / factor) * factor)
    t_bar = round(frames / temporal) * temporal
    if t_bar * bar * bar > high:
        beta = math.sqrt(frames * side * side / high)
        bar = max(factor, math.floor(side / beta / factor) * factor)
    elif t_bar * bar * bar < low:
        beta = math.sqrt(low / (frames * side * side))
        bar = math.ceil(side * beta / factor) * factor
    return bar, bar


def _soft_tokens(frames: int, side: int, patch: int, merge: int, temporal: int) -> int:
    h, w = _resize(frames, side, patch * merge, temporal)
    grid_t = max((frames + frames % temporal) // temporal, 1)
    return grid_t * (h // patch) * (w // patch) // (merge * merge)


def video_tokens(image_side: int, seq_len: int, patch: int = 16, merge: int = 2,
                 temporal: int = 2) -> tuple[int, int]:  # fmt: skip
    """(budget tokens, soft tokens) of the largest video: frames added from two while the
    video's soft tokens fit ``seq_len`` (``Qwen2VLProcessingInfo._get_max_video_frames``),
    at most :data:`MAX_FRAMES_PER_VIDEO`, one video (``image_side``: the largest image's
    side, 4,096 for the published 16,777,216 pixels)."""
    frames = 2
    while frames < MAX_FRAMES_PER_VIDEO:
        if _soft_tokens(frames + 1, image_side, patch, merge, temporal) > seq_len:
            break
        frames += 1
    soft = _soft_tokens(frames, image_side, patch, merge, temporal)
    return int(soft * FORMATTED_TOKENS_PER_TOKEN), soft
