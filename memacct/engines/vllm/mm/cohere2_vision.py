"""The encoder pass of Command A Vision (``cohere2_vision.py``,
``Cohere2VisionForConditionalGeneration``) as vLLM 0.33 profiles it; figures derived by hand
from that file and transformers' ``Cohere2VisionImageProcessor``.

* **the dummy image** is ``size["height"] x max_patches`` tall and ``size["width"]`` wide
  (``Cohere2VisionProcessingInfo.get_image_size_with_most_features``); the processor's tile
  ``size`` is the SigLIP tower's ``image_size`` (its position table is fixed), and
  ``max_patches`` is 12 (transformers' default and the published preprocessor config;
  ``--mm-processor-kwargs`` ``max_patches`` and ``crop_to_patches`` replace them);
* **its tiles** (``get_number_of_image_patches``): ``get_optimal_tiled_canvas`` picks the
  grid needing the least upscaling, for that image one column of ``max_patches`` tiles
  (the only grid of at most ``max_patches`` tiles that needs none), plus the thumbnail:
  ``max_patches + 1`` tiles, one where ``crop_to_patches`` is off or ``max_patches`` is 1;
* **tokens**: each tile's ``(image_size / patch_size)^2`` SigLIP patches are pixel-shuffled
  by ``downsample_factor`` (``Cohere2VisionMultiModalProjector.pixel_shuffle``) into
  ``(image_size / patch_size / downsample_factor)^2`` embeddings (the processor's
  ``patch_size^2`` image tokens a tile; the line breaks carry none);
* **the working set per patch** is the larger of the SigLIP layer's (``mm.items.layer_bytes``)
  and the projector's: the tower's output and its shuffled copy (2 widths, both held) with,
  per ``downsample_factor^2`` patches, ``linear_1``'s output (``alignment_intermediate_size``)
  and its SwiGLU (half that), split by tensor parallelism, or the SwiGLU and ``linear_2``'s
  output (the text width, whole).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, layer_bytes

__all__ = ["FAMILY", "cohere2_vision_item", "projector_elements"]

MAX_PATCHES = 12
"""``Cohere2VisionImageProcessor.max_patches`` (transformers' default, the published value)."""


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def projector_elements(width: int, align: int, text: int, factor: int, tp: int = 1) -> int:
    """Elements per tower patch at the projector's peak (module notes), rounded up."""
    half = -(-(align // 2) // tp)
    merged = max(-(-align // tp) + half, half + text)
    return 2 * width + -(-merged // (factor * factor))


def cohere2_vision_item(config: Mapping[str, Any], mm: Multimodal,
                        ctx: ItemContext) -> Item | None:  # fmt: skip
    """The profile's largest dummy image of Command A Vision (``None``: no image allowed)."""
    if mm.count("image") <= 0:
        return None
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    text = config.get("text_config")
    text = text if isinstance(text, Mapping) else {}
    width = _int(vision, "hidden_size", 1152)
    inner = _int(vision, "intermediate_size", 4304)
    patch = _int(vision, "patch_size", 16)
    grid = _int(vision, "image_size", 512) // patch
    factor = _int(config, "downsample_factor", 2)
    kwargs = mm.mm_processor_kwargs
    most = int(kwargs.get("max_patches", MAX_PATCHES))
    crop = kwargs.get("crop_to_patches", True) is not False
    tiles = most + 1 if crop and most > 1 else 1
    out_hidden = _int(text, "hidden_size", 12288)
    tp = ctx.tensor_parallel_size
    projector = projector_elements(width, _int(config, "alignment_intermediate_size", 36864),
                                   out_hidden, factor, tp)  # fmt: skip
    values = _int(vision, "num_channels", 3) * patch * patch
    per = (max(layer_bytes(width, inner, tp=tp), projector) + values) * ctx.dtype_bytes
    tokens = tiles * (grid // factor) ** 2
    return Item("image", tokens, tiles * grid * grid, per, values, out_hidden)


FAMILY = EncoderFamily(
    model_types=frozenset({"cohere2_vision"}),
    modules={"cohere2_vision": "Command A Vision (SigLIP tiles, pixel-shuffle projector)"},
    processor_keys=("max_patches", "crop_to_patches"),
    item=cohere2_vision_item,
    towers={"cohere2_vision": ("SigLIP with post_layernorm and the pixel-shuffle SwiGLU "
                               "projector", "towers/clip.py")},
    checked=frozenset({"cohere2_vision"}),
)
"""Command A Vision's encoder pass and tower (``multimodal.PLUGGED_FAMILIES``)."""
