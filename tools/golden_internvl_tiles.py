#!/usr/bin/env python3
"""Golden InternVL-style tiling: vLLM 0.33's own processing-info code sizes the largest image.

Run by hand in the throwaway vLLM environment (never in ``make test``)::

    /tmp/vllmenv/bin/python tools/golden_internvl_tiles.py --vllm-src /tmp/vllm033/src

For each case (tiling settings of H2OVL's and Eagle2.5-VL's configs, and variations), vLLM's
``H2OVLProcessingInfo`` / ``Eagle2_5_VLProcessingInfo`` answer
``get_image_size_with_most_features`` and ``get_max_image_tokens`` over the image processor
vLLM builds (``H2OVLImageProcessor`` / ``InternVLChatImageProcessor``) and a processor
holding it and ``image_seq_length`` (no tokenizer: the token count does not read one).
``tests/test_multimodal_tiles.py`` checks :mod:`memacct.engines.vllm.mm.tiles` against the
table this writes (``tests/data/golden/vllm-0.33-internvl-tiles.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-internvl-tiles.json"

CASES: dict[str, dict[str, Any]] = {
    # H2OVL-Mississippi's tiling keys (max 6 tiles, thumbnail, multi-scale adaptive crops)
    "h2ovl-msac-6": {"kind": "h2ovl", "image_size": 448, "min_dynamic_patch": 1,
                     "max_dynamic_patch": 6, "dynamic_image_size": True,
                     "use_thumbnail": True, "use_msac": True},
    "h2ovl-msac-12": {"kind": "h2ovl", "image_size": 448, "min_dynamic_patch": 1,
                      "max_dynamic_patch": 12, "dynamic_image_size": True,
                      "use_thumbnail": True, "use_msac": True},
    "h2ovl-plain-6": {"kind": "h2ovl", "image_size": 448, "min_dynamic_patch": 1,
                      "max_dynamic_patch": 6, "dynamic_image_size": True,
                      "use_thumbnail": True, "use_msac": False},
    "h2ovl-msac-2": {"kind": "h2ovl", "image_size": 448, "min_dynamic_patch": 1,
                     "max_dynamic_patch": 2, "dynamic_image_size": True,
                     "use_thumbnail": False, "use_msac": True},
    # Eagle2.5-VL (InternVLChatImageProcessor's rule)
    "eagle-12": {"kind": "internvl", "image_size": 448, "min_dynamic_patch": 1,
                 "max_dynamic_patch": 12, "dynamic_image_size": True, "use_thumbnail": True},
    "eagle-static": {"kind": "internvl", "image_size": 448, "min_dynamic_patch": 1,
                     "max_dynamic_patch": 12, "dynamic_image_size": False,
                     "use_thumbnail": True},
    "eagle-7-nothumb": {"kind": "internvl", "image_size": 448, "min_dynamic_patch": 2,
                        "max_dynamic_patch": 7, "dynamic_image_size": True,
                        "use_thumbnail": False},
}
"""Tiling settings (``image_seq_length`` 256: 448-pixel tiles of 14-pixel patches, ratio 0.5)."""


def largest(case: dict[str, Any]) -> dict[str, Any]:
    """vLLM's largest image and its tokens for one case."""
    from vllm.model_executor.models.eagle2_5_vl import Eagle2_5_VLProcessingInfo
    from vllm.model_executor.models.h2ovl import H2OVLProcessingInfo
    from vllm.transformers_utils.processors.h2ovl import H2OVLImageProcessor, H2OVLProcessor
    from vllm.transformers_utils.processors.internvl import (
        InternVLChatImageProcessor,
        InternVLChatProcessor,
    )

    settings = {k: v for k, v in case.items() if k != "kind"}
    if case["kind"] == "h2ovl":
        info_cls, proc_cls = H2OVLProcessingInfo, H2OVLProcessor
        image_processor: Any = H2OVLImageProcessor(**settings)
    else:
        info_cls, proc_cls = Eagle2_5_VLProcessingInfo, InternVLChatProcessor
        image_processor = InternVLChatImageProcessor(**settings)
    processor = proc_cls.__new__(proc_cls)
    processor.image_processor = image_processor
    processor.image_seq_length = 256
    info = info_cls.__new__(info_cls)
    info.get_hf_processor = lambda **_: processor  # type: ignore[method-assign]
    size = info.get_image_size_with_most_features()
    return {"width": size.width, "height": size.height, "tokens": info.get_max_image_tokens()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    rows = {name: {"case": case, **largest(case)} for name, case in CASES.items()}
    for name, row in rows.items():
        print(name, row["width"], row["height"], row["tokens"])
    OUT.write_text(json.dumps({"vllm": version, "image_seq_length": 256, "rows": rows},
                              indent=1) + "\n")  # fmt: skip
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
