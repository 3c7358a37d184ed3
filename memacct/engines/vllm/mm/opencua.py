"""OpenCUA (vLLM 0.33 ``opencua.py``, ``OpenCUAForConditionalGeneration``): Qwen2.5-VL's
tower and its image processing, images only.

* the tower: ``Qwen2_5_VisionTransformer`` (imported as ``OpenCUAVisionTransformer``), its
  weights by :mod:`memacct.model.towers.qwen` (the ``qwen25_vit`` rule);
* tokens per item: ``OpenCUAProcessingInfo`` subclasses ``Qwen2VLProcessingInfo`` (the
  largest image from ``max_pixels``, ``get_image_size_with_most_features``) and lists
  ``{"image": None}`` in ``get_supported_mm_limits``, so no video is profiled; its dummy
  inputs are ``Qwen2VLDummyInputsBuilder``'s images (``OpenCUADummyInputsBuilder``);
* the activation peak: the Qwen2.5-VL block's (:func:`memacct.engines.vllm.mm.qwen.qwen_item`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item
from memacct.engines.vllm.mm.qwen import qwen_item

__all__ = ["FAMILY"]


def _item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    return qwen_item(config, mm, ctx.seq_len, ctx.version, ctx.dtype_bytes,
                     ctx.tensor_parallel_size, modalities=("image",))  # fmt: skip


FAMILY = EncoderFamily(
    model_types=frozenset({"opencua"}),
    modules={"opencua": "OpenCUA (Qwen2.5-VL's tower, images)"},
    processor_keys=("max_pixels", "min_pixels"),
    item=_item,
    towers={"opencua": ("Qwen2.5-VL's ViT and merger (opencua.py builds "
                        "Qwen2_5_VisionTransformer)", "towers/qwen.py")},
    checked=frozenset({"opencua"}),
)
"""OpenCUA's encoder pass and tower."""
