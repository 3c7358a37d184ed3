"""The encoder pass of Idefics3 and SmolVLM as vLLM 0.33 profiles it (``idefics3.py``,
``Idefics3ProcessingInfo``, ``Idefics3DummyInputsBuilder``; ``smolvlm.py`` reuses both).

* **the dummy image** is ``max_image_size["longest_edge"]`` square (``get_dummy_mm_data``);
* **its tiles** come from the image processor's ``get_number_of_image_patches``
  (transformers' ``Idefics3ImageProcessor``, SmolVLM's the same): with
  ``do_image_splitting`` the image is rescaled so its longest edge is ``size["longest_edge"]``
  (at most 4096), each side rounded up to whole tiles of ``max_image_size``; more than one
  tile gives ``rows x cols`` tiles and the global image, else one image (vLLM's
  ``get_num_patches`` takes at least 1);
* **tokens** are tiles x ``image_seq_len``, which the model derives as ``(image_size /
  patch_size)^2 / scale_factor^2`` (``Idefics3Model.__init__``; the published processors
  say the same: 169 for Idefics3-8B, 81 for SmolVLM2-2.2B, 64 for SmolVLM-256M);
* **the processor sizes** are not in ``config.json``: the tile is the tower's
  ``image_size`` (``Idefics3ImagePixelInputs`` requires tiles of that side) and
  ``size["longest_edge"]`` 4 tiles of it, as transformers' defaults (1456 and 364) and the
  published preprocessor configs (Idefics3-8B 1456 / 364, SmolVLM2-2.2B 1536 / 384,
  SmolVLM-256M 2048 / 512) give; ``--mm-processor-kwargs`` ``size``, ``max_image_size`` and
  ``do_image_splitting`` replace them (``get_merged_mm_kwargs``).

Every tile is ``(image_size / patch_size)^2`` patches through the tower (no class token);
the layer (``idefics2_vision_model.py``, ``Idefics2EncoderLayer``) holds SigLIP's working set
(``mm.items.layer_bytes``: 7 widths at the attention, 3 widths and 2 intermediate at the MLP),
plus the dummy pixel values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, layer_bytes

__all__ = ["FAMILY", "idefics3_item", "image_tiles"]

MAX_IMAGE_SIZE = 4096
"""transformers' ``image_processing_idefics3.py`` ``MAX_IMAGE_SIZE``: the largest rescaled side."""

TILES_PER_SIDE = 4
"""``size["longest_edge"]`` in tiles of ``max_image_size`` (module notes)."""


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _edge(value: Any, default: int) -> int:
    """The ``longest_edge`` of a processor size (a mapping as the processors take it)."""
    if isinstance(value, Mapping):
        return _int(value, "longest_edge", default)
    return default


def image_tiles(height: int, width: int, longest: int, tile: int, split: bool) -> int:
    """Tiles of an image through the tower (``get_number_of_image_patches``, at least 1)."""
    if not split:
        return 1
    if width >= height:
        height, width = int(longest / (width / height)), longest
        height += height % 2
    else:
        height, width = longest, int(longest * (width / height))
        width += width % 2
    if max(height, width) > MAX_IMAGE_SIZE:
        ratio = width / height
        if width >= height:
            height, width = int(MAX_IMAGE_SIZE / ratio), MAX_IMAGE_SIZE
        else:
            height, width = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE * ratio)
    rows, cols = math.ceil(max(height, 1) / tile), math.ceil(max(width, 1) / tile)
    return rows * cols + 1 if rows > 1 or cols > 1 else 1


def idefics3_item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    """The profile's largest dummy image of Idefics3 or SmolVLM (``None``: no image allowed)."""
    if mm.count("image") <= 0:
        return None
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    width = _int(vision, "hidden_size", 1152)
    inner = _int(vision, "intermediate_size", 4304)
    patch = _int(vision, "patch_size", 14)
    size = _int(vision, "image_size", 364)
    grid = size // patch
    scale = _int(config, "scale_factor", 2)
    kwargs = mm.mm_processor_kwargs
    tile = _edge(kwargs.get("max_image_size"), size)
    longest = _edge(kwargs.get("size"), TILES_PER_SIDE * tile)
    split = kwargs.get("do_image_splitting", True) is not False
    tiles = image_tiles(tile, tile, longest, tile, split)
    seq = int(grid * grid / (scale * scale))
    values = _int(vision, "num_channels", 3) * patch * patch
    per = (layer_bytes(width, inner, tp=ctx.tensor_parallel_size) + values) * ctx.dtype_bytes
    text = config.get("text_config")
    out_hidden = _int(text if isinstance(text, Mapping) else {}, "hidden_size", 4096)
    return Item("image", tiles * seq, tiles * grid * grid, per, values, out_hidden)


_TOWER = ("the Idefics3 vision transformer, post_layernorm and the pixel-shuffle connector's "
          "projection", "towers/idefics.py")

FAMILY = EncoderFamily(
    model_types=frozenset({"idefics3", "smolvlm"}),
    modules={"idefics3": "Idefics3 (tiles of longest_edge)",
             "smolvlm": "SmolVLM (Idefics3's tiles)"},
    processor_keys=("size", "max_image_size", "do_image_splitting"),
    item=idefics3_item,
    towers={"idefics3": _TOWER, "smolvlm": _TOWER},
    checked=frozenset({"idefics3", "smolvlm"}),
)
"""Idefics3's and SmolVLM's encoder pass and tower (``multimodal.PLUGGED_FAMILIES``)."""
