"""GLM-4V (vLLM 0.33 ``glm4v.py``, ``GLM4VForCausalLM``: GLM-4V-9B, a ``chatglm`` config
with a ``vision_config`` section): one fixed-size image a prompt.

* tokens per item: ``GLM4VProcessingInfo.get_num_image_tokens`` is ``(image_size /
  patch_size / 2)^2`` and the prompt replacement adds ``boi`` and ``eoi``
  (``GLM4VMultiModalProcessor._get_prompt_updates``), all embeddings; the budget counts
  them off the processed dummy (``encoder_budget.py``, ``get_mm_max_toks_per_item``: the
  class gives no ``get_mm_max_tokens_per_item``): ``grid^2 + 2``; ``get_supported_mm_limits``
  allows one image a prompt;
* the dummy item (``GLM4VDummyInputsBuilder``): one ``image_size`` square image,
  ``(image_size / patch_size)^2 + 1`` patches through EVA2-CLIP (the class token);
* the layer's working set (``EVA2CLIPTransformerLayer``, norms after the attention and the
  MLP): the input, ``query_key_value`` (3 widths), the attention output, ``dense`` and its
  LayerNorm: 7 widths, 4 column-parallel; or the input, ``fc2`` and its LayerNorm (3)
  with ``fc1`` and its GELU (2 intermediate widths). The layers are always split by TP
  (no ``disable_tp``). The projector's GLU runs on a quarter as many tokens (GLM-4V-9B:
  about 14,400 elements a patch against the layer's 36,100), so the layer is the peak.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item, layer_bytes

__all__ = ["FAMILY"]


def _accepts(config: Mapping[str, Any]) -> bool:
    vision = config.get("vision_config")
    return isinstance(vision, Mapping) and all(
        isinstance(vision.get(k), int) for k in ("hidden_size", "patch_size", "image_size"))


def _item(config: Mapping[str, Any], mm: Multimodal, ctx: ItemContext) -> Item | None:
    if mm.count("image") <= 0:
        return None
    vision = config["vision_config"]
    width, patch = int(vision["hidden_size"]), int(vision["patch_size"])
    inner = int(vision.get("intermediate_size", 4 * width))
    side = int(vision["image_size"]) // patch
    values = int(vision.get("in_channels", 3)) * patch * patch
    per = (layer_bytes(width, inner, tp=ctx.tensor_parallel_size) + values) * ctx.dtype_bytes
    grid = side // 2
    return Item("image", grid * grid + 2, side * side + 1, per, values,
                int(config.get("hidden_size", width)))  # fmt: skip


FAMILY = EncoderFamily(
    model_types=frozenset({"chatglm"}),
    modules={"glm4v": "GLM-4V (EVA2-CLIP, one image a prompt)"},
    processor_keys=(),
    item=_item,
    towers={"glm4v": ("EVA2-CLIP, the 2 x 2 convolution and the GLU projector",
                      "towers/glm.py")},
    checked=frozenset({"glm4v"}),
    accepts=_accepts,
    max_per_prompt={"image": 1},
)
"""GLM-4V's encoder pass and tower."""
