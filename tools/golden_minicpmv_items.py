#!/usr/bin/env python3
"""Golden MiniCPM-V dummy items: vLLM 0.33's processing info over the checkpoint's image processor.

Run by hand in the throwaway vLLM environment (never in ``make test``), handing it the
checkpoint's remote-code image processor (``image_processing_minicpmv.py`` of a MiniCPM-V
2.6 / MiniCPM-o 2.6 checkpoint; not vendored here)::

    /tmp/vllmenv/bin/python tools/golden_minicpmv_items.py --vllm-src /tmp/vllm033/src \\
        --processor /path/to/image_processing_minicpmv.py

For the MiniCPM-V 2.6 and MiniCPM-o 2.6 configs of ``tools/golden_towers.py`` it builds that
processor with the checkpoint's slicing (``slice_config``: ``max_slice_nums``, ``scale_resolution``,
``patch_size``; ``image_feature_size`` the config's ``query_num``), calls vLLM 0.33's own
``MiniCPMVProcessingInfo`` (``MiniCPMOProcessingInfo``) on a stand-in context holding the config
(``get_mm_max_tokens_per_item`` with one item per modality, as ``encoder_budget.py`` asks,
and ``get_num_frames_with_most_features`` with ``{"video": 1}``, as the profile's dummy
asks), and runs the processor on the dummy image (``get_image_size_with_most_features``) and
a dummy video frame, writing the patches of each slice (``tgt_sizes``).
``tests/test_minicpmv_mm.py`` checks :mod:`memacct.engines.vllm.mm.minicpm` against the
table this writes (``tests/data/golden/vllm-0.33-minicpmv-items.json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-minicpmv-items.json"
SEQ_LEN = 32768


def _processor(path: str, raw: dict[str, Any], max_slices: int | None = None) -> Any:
    spec = importlib.util.spec_from_file_location("minicpmv_image_processing", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sc = raw.get("slice_config", {})
    return module.MiniCPMVImageProcessor(
        max_slice_nums=max_slices or sc.get("max_slice_nums", 9),
        scale_resolution=sc.get("scale_resolution", 448), patch_size=sc.get("patch_size", 14),
        image_feature_size=raw["query_num"], version=raw.get("version"))


def _info(raw: dict[str, Any], processor: Any) -> Any:
    from vllm.model_executor.models.minicpmo import MiniCPMOProcessingInfo
    from vllm.model_executor.models.minicpmv import MiniCPMVProcessingInfo

    config = SimpleNamespace(**{k: v for k, v in raw.items() if k != "vision_config"})
    cls = MiniCPMOProcessingInfo if raw["model_type"] == "minicpmo" else MiniCPMVProcessingInfo
    info = cls.__new__(cls)
    info.get_hf_config = lambda: config
    info.get_image_processor = lambda **_: processor
    return info


def _slices(processor: Any, width: int, height: int, max_slices: int) -> list[int]:
    from PIL import Image

    image = Image.new("RGB", (width, height), (255, 255, 255))
    out = processor.preprocess([image], max_slice_nums=max_slices)
    return [int(h) * int(w) for h, w in out["tgt_sizes"][0]]


def rows(path: str) -> dict[str, Any]:
    from golden_towers import MODELS

    table: dict[str, Any] = {}
    for name in ("minicpm-v-2.6", "minicpm-o-2.6"):
        raw = MODELS[name]
        row: dict[str, Any] = {"config": raw, "seq_len": SEQ_LEN, "tokens": {}, "slices": {}}
        for max_slices in (9, 4):
            processor = _processor(path, raw, max_slices)
            info = _info(raw, processor)
            counts = {m: 1 for m in info.get_supported_mm_limits()}
            row["tokens"][str(max_slices)] = dict(info.get_mm_max_tokens_per_item(SEQ_LEN, counts))
            size = info.get_image_size_with_most_features()
            row["slices"][str(max_slices)] = _slices(processor, size.width, size.height,
                                                     max_slices)
        info = _info(raw, _processor(path, raw))
        row["tokens_2048"] = dict(info.get_mm_max_tokens_per_item(
            2048, {m: 1 for m in info.get_supported_mm_limits()}))
        if "video" in info.get_supported_mm_limits():
            frame = info.get_video_frame_size_with_most_features()
            row["dummy_video_frames"] = info.get_num_frames_with_most_features(
                SEQ_LEN, {"video": 1})
            row["frame_slices"] = _slices(_processor(path, raw), frame.width, frame.height,
                                          info.get_video_max_slice_num())
        table[name] = row
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    parser.add_argument("--processor", required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    OUT.write_text(json.dumps({"vllm": version, "rows": rows(args.processor)}, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
