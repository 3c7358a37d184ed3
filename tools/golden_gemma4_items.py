#!/usr/bin/env python3
"""Golden Gemma 4 dummy items: vLLM 0.33's processing info and transformers' image processor.

Run by hand in the throwaway vLLM environment (never in ``make test``)::

    /tmp/vllmenv/bin/python tools/golden_gemma4_items.py --vllm-src /tmp/vllm033/src

For the Gemma 4 configs of ``tools/golden_towers.py`` (``gemma-4-mm``, ``gemma-4-unified``)
it calls vLLM 0.33's own ``Gemma4ProcessingInfo`` / ``Gemma4UnifiedProcessingInfo``
(``get_mm_max_tokens_per_item`` under a few ``--limit-mm-per-prompt`` and
``--mm-processor-kwargs`` settings, ``_compute_num_soft_tokens`` of the 224-pixel dummy,
``_compute_audio_num_tokens`` of the dummy audio) on a stand-in context that holds the
config and the settings (no tokenizer is loaded: the processor's ``audio_seq_length`` is
transformers' ``Gemma4Processor`` default), and runs transformers' PIL image processor
(``Gemma4ImageProcessorPil``) on a 224 x 224 white image at 280 and 70 soft tokens for the
patches one item sends through the tower, and measures the peak of transformers' vision
encoder and of vLLM's Unified embedder on the CPU (:func:`layer_peak`,
:func:`unified_peak`). ``tests/test_gemma4_mm.py`` checks
:mod:`memacct.engines.vllm.mm.gemma4` against the table this writes
(``tests/data/golden/vllm-0.33-gemma4-items.json``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-gemma4-items.json"

SETTINGS: dict[str, dict[str, Any]] = {
    "default": {"limits": {}, "kwargs": {}},
    "video-8-frames": {"limits": {"video": {"count": 1, "num_frames": 8}}, "kwargs": {}},
    "max-soft-560": {"limits": {}, "kwargs": {"max_soft_tokens": 560}},
    "max-soft-unsupported": {"limits": {}, "kwargs": {"max_soft_tokens": 300}},
}
"""Multimodal settings: the size form of --limit-mm-per-prompt and --mm-processor-kwargs."""


def _info(cls: Any, config: Any, limits: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor

    audio = inspect.signature(Gemma4Processor.__init__).parameters["audio_seq_length"].default
    opts = {m: SimpleNamespace(num_frames=v.get("num_frames")) for m, v in limits.items()}
    mm_config = SimpleNamespace(limit_per_prompt=opts)
    ctx = SimpleNamespace(
        get_merged_mm_kwargs=lambda extra: {**kwargs, **extra},
        model_config=SimpleNamespace(get_multimodal_config=lambda: mm_config))
    info = cls.__new__(cls)
    info.ctx = ctx
    info.get_hf_config = lambda: config
    info.get_hf_processor = lambda **_: SimpleNamespace(audio_seq_length=audio)
    return info


def _pil_patches(max_soft: int) -> dict[str, int]:
    import numpy as np
    from PIL import Image
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    image = Image.fromarray(np.full((224, 224, 3), 255, dtype=np.uint8))
    out = Gemma4ImageProcessorPil()(images=[image], max_soft_tokens=max_soft, return_tensors="np")
    return {"patches": int(out["pixel_values"].shape[1]),
            "soft_tokens": int(out["num_soft_tokens_per_image"][0])}


def layer_peak(patches: int, real_side: int, items: int = 2) -> dict[str, Any]:
    """Peak live bytes of transformers' two-layer ``Gemma4VisionEncoder`` on the CPU (SDPA,
    bfloat16) over ``items`` padded items, the input embeddings allocated before, read from
    the profiler's memory events: the second layer's peak, with the first's output held."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4VisionModel

    torch.set_default_dtype(torch.bfloat16)
    config = Gemma4VisionConfig(num_hidden_layers=2)
    config._attn_implementation = "sdpa"
    model = Gemma4VisionModel(config).eval().to(torch.bfloat16)
    pos = torch.full((items, patches, 2), -1, dtype=torch.long)
    grid = torch.stack(torch.meshgrid(torch.arange(real_side), torch.arange(real_side),
                                      indexing="xy"), -1).reshape(-1, 2)
    pos[:, : real_side * real_side] = grid
    pad = (pos == -1).all(-1)
    with torch.no_grad():
        embeds = model.patch_embedder(torch.rand(items, patches, 768), pos, pad)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model.encoder(inputs_embeds=embeds, attention_mask=~pad, pixel_position_ids=pos)
            del out
    events = prof.profiler.kineto_results.events()
    live = peak = 0
    for e in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return {"items": items, "patches": patches, "peak_bytes": peak,
            "config": {k: getattr(config, k) for k in ("hidden_size", "intermediate_size",
                                                       "num_attention_heads", "head_dim")}}


def unified_peak(items: int = 4) -> dict[str, Any]:
    """Peak live bytes of vLLM's ``Gemma4UnifiedVisionEmbedder`` (default config, bfloat16) on
    the CPU over ``items`` 224-pixel images of 280 merged patches (256 real), the pixel
    values allocated before, read from the profiler's memory events."""
    import torch
    from golden_vllm_standins import patch_parallel_groups
    from torch.profiler import ProfilerActivity, profile
    from transformers.models.gemma4_unified.configuration_gemma4_unified import (
        Gemma4UnifiedVisionConfig,
    )
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.models.gemma4_unified import Gemma4UnifiedVisionEmbedder

    patch_parallel_groups(1)
    torch.set_default_dtype(torch.bfloat16)
    config = Gemma4UnifiedVisionConfig()
    with set_current_vllm_config(VllmConfig()):
        embedder = Gemma4UnifiedVisionEmbedder(config).eval().to(torch.bfloat16)
    raw = 3 * (config.patch_size * config.pooling_kernel_size) ** 2
    pos = torch.full((items, 280, 2), -1, dtype=torch.long)
    pos[:, :256] = torch.stack(torch.meshgrid(torch.arange(16), torch.arange(16),
                                              indexing="xy"), -1).reshape(-1, 2)
    pixels = torch.rand(items, 280, raw)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = embedder(pixels, pos)
        del out
    events = prof.profiler.kineto_results.events()
    live = peak = 0
    for e in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return {"items": items, "patches": 280, "raw": raw, "dim": config.mm_embed_dim,
            "peak_bytes": peak}


def rows() -> dict[str, Any]:
    from golden_towers import MODELS
    from transformers import AutoConfig
    from vllm.model_executor.models.gemma4_mm import Gemma4ProcessingInfo
    from vllm.model_executor.models.gemma4_unified import Gemma4UnifiedProcessingInfo

    table: dict[str, Any] = {}
    for name, cls in (("gemma-4-mm", Gemma4ProcessingInfo),
                      ("gemma-4-unified", Gemma4UnifiedProcessingInfo)):
        raw = MODELS[name]
        config = AutoConfig.for_model(**raw)
        row: dict[str, Any] = {"config": raw, "tokens": {}}
        for label, s in SETTINGS.items():
            info = _info(cls, config, s["limits"], s["kwargs"])
            row["tokens"][label] = dict(info.get_mm_max_tokens_per_item(4096, {}))
        info = _info(cls, config, {}, {})
        row["soft_tokens_224"] = {str(n): info._compute_num_soft_tokens(224, 224, n)
                                  for n in (70, 280, 560)}
        row["audio_tokens_512_samples"] = Gemma4ProcessingInfo._compute_audio_num_tokens(
            512, 16000, 750)
        table[name] = row
    table["gemma-4-mm"]["pil_image_processor"] = {str(n): _pil_patches(n) for n in (70, 280)}
    table["gemma-4-mm"]["layer_peak"] = [layer_peak(630, 24), layer_peak(2520, 48)]
    table["gemma-4-unified"]["embedder_peak"] = unified_peak()
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    OUT.write_text(json.dumps({"vllm": version, "rows": rows()}, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
