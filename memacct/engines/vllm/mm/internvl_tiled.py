"""H2OVL and Eagle2.5-VL: InternVL's tiles through their own processors (vLLM 0.33
``h2ovl.py``, ``eagle2_5_vl.py``), images only (``BaseInternVLProcessingInfo``).

* **H2OVL** (``H2OVLChatModel``, an ``InternVLChatModel``): InternViT up to
  ``select_layer`` and InternVL's ``mlp1`` (:mod:`memacct.model.towers.internvit`);
  ``H2OVLProcessingInfo.get_image_processor`` reads ``min_dynamic_patch``,
  ``max_dynamic_patch``, ``dynamic_image_size``, ``use_thumbnail`` and ``use_msac`` from the
  config (``--mm-processor-kwargs`` first); the profile's one dummy image is cropped twice
  where ``use_msac`` (:mod:`.tiles`). Each tile is ``(image_size / patch_size)^2 + 1``
  InternViT patches.
* **Eagle2.5-VL** (``Eagle2_5_VLForConditionalGeneration``): SigLIP up to ``select_layer``
  (``vision_use_head`` off) and the same ``mlp1``; ``Eagle2_5_VLProcessingInfo`` tiles at
  ``force_image_size`` (else the tower's ``image_size``) with ``InternVLChatProcessor``'s
  rule; each tile ``(size / patch_size)^2`` SigLIP patches.

A config that lacks one of the tiling keys vLLM reads (the checkpoint's remote-code config
class supplies them) is not modelled here, and the plan says so. The layer's working set is
InternViT's (8 attention widths with ``ls1``, 4 with ``ls2``) or SigLIP's (7 / 3), the
column-parallel ones split by TP (:func:`memacct.engines.vllm.mm.items.layer_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, layer_bytes
from memacct.engines.vllm.mm.tiles import TileRules, largest_image_tiles

__all__ = ["FAMILY", "KEYS", "accepts", "tiled_item"]

KEYS = {
    "h2ovl_chat": ("min_dynamic_patch", "max_dynamic_patch", "dynamic_image_size",
                   "use_thumbnail", "use_msac"),
    "eagle_2_5_vl": ("min_dynamic_patch", "max_dynamic_patch", "dynamic_image_size",
                     "use_thumbnail"),
    "qianfan_ocr": ("min_dynamic_patch", "max_dynamic_patch", "dynamic_image_size",
                    "use_thumbnail", "select_layer"),
}  # fmt: skip
"""The config keys each processing-info class reads (``get_image_processor``)."""


def _vision(config: Mapping[str, Any]) -> Mapping[str, Any]:
    vision = config.get("vision_config")
    return vision if isinstance(vision, Mapping) else {}


def accepts(config: Mapping[str, Any]) -> bool:
    """Whether the config carries every tiling key its processing-info class reads."""
    keys = KEYS.get(str(config.get("model_type")), ())
    vision = _vision(config)
    return bool(vision) and all(config.get(k) is not None for k in keys) and all(
        isinstance(_size(vision.get(k)), int) for k in ("hidden_size", "patch_size", "image_size"))


def _size(value: Any) -> Any:
    """A size the HF-format configs give as a pair (Qianfan-OCR's ``image_size``,
    ``patch_size``: vLLM's ``_add_intern_vit_fields`` takes the first)."""
    return value[0] if isinstance(value, (list, tuple)) and value else value


def _text_hidden(config: Mapping[str, Any]) -> int:
    for key in ("text_config", "llm_config"):
        section = config.get(key)
        if isinstance(section, Mapping) and isinstance(section.get("hidden_size"), int):
            return int(section["hidden_size"])
    return int(_vision(config)["hidden_size"])


def _rules(config: Mapping[str, Any], mm: Multimodal, size: int) -> TileRules:
    merged: dict[str, Any] = {k: config.get(k) for k in KEYS[str(config.get("model_type"))]
                              if k != "select_layer"}  # fmt: skip
    merged.update({k: v for k, v in mm.mm_processor_kwargs.items() if k in merged})
    return TileRules(size, int(merged["min_dynamic_patch"]), int(merged["max_dynamic_patch"]),
                     merged["dynamic_image_size"] is True, merged["use_thumbnail"] is True,
                     merged.get("use_msac") is True)  # fmt: skip


def tiled_item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    """The largest dummy image of H2OVL, Qianfan-OCR or Eagle2.5-VL (``None``: no image
    allowed)."""
    if mm.count("image") <= 0:
        return None
    vision = _vision(config)
    width, patch = int(vision["hidden_size"]), int(_size(vision["patch_size"]))
    inner = int(vision.get("intermediate_size", 4 * width))
    internvit = config.get("model_type") in ("h2ovl_chat", "qianfan_ocr")
    size = int(_size(vision["image_size"])) if internvit else int(
        config.get("force_image_size") or vision["image_size"])  # fmt: skip
    side = size // patch
    tile_tokens = int(side * side * float(config.get("downsample_ratio", 0.5)) ** 2)
    tiles = largest_image_tiles(_rules(config, mm, size))
    values = int(vision.get("num_channels", 3)) * patch * patch
    tp = ctx.tensor_parallel_size
    if internvit:  # InternViT: a class token a tile, the ls1 / ls2 products
        per, tile_patches = layer_bytes(width, inner, 8, 4, tp=tp), side * side + 1
    else:  # SigLIP
        per, tile_patches = layer_bytes(width, inner, tp=tp), side * side
    return Item("image", tiles * tile_tokens, tiles * tile_patches,
                (per + values) * ctx.dtype_bytes, values, _text_hidden(config))  # fmt: skip


FAMILY = EncoderFamily(
    model_types=frozenset({"h2ovl_chat"}),
    modules={"h2ovl": "H2OVL (InternViT, multi-scale adaptive tiles)"},
    processor_keys=KEYS["h2ovl_chat"],
    item=tiled_item,
    towers={"h2ovl": ("InternViT up to select_layer and mlp1", "towers/internvit.py")},
    checked=frozenset({"h2ovl"}),
    accepts=accepts,
)
"""H2OVL's encoder pass and tower (Eagle2.5-VL's: :mod:`.eagle2_5_vl`)."""
