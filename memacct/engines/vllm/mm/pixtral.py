"""The encoder pass of Pixtral in Mistral's format (``pixtral.py``,
``PixtralForConditionalGeneration``), as vLLM 0.33 profiles it, and the LightOnOCR record.

vLLM reads a Mistral-format checkpoint's ``params.json`` as ``model_type`` "pixtral", its
``vision_encoder`` section as ``vision_config`` (``transformers_utils/configs/mistral.py``,
``_remap_mistral_vision_args``); memacct reads that form.

* **the dummy image** is ``max_image_size`` square, the tokenizer's ``mm_config``
  (``PixtralProcessingInfo.get_image_size_with_most_features``); the published
  ``params.json`` carry the same size as ``max_image_size`` or ``image_size`` (Pixtral-12B
  1024, Mistral Small 3.1 1540), which this reads, ``max_image_size`` first;
* **tokens**: mistral_common's ``ImageEncoder`` cuts it into ``ceil(side / (patch_size x
  spatial_merge_size))`` rows and columns of tokens (``get_number_of_image_patches``); each
  row ends in a break (the last in an end) token, which carries no embedding
  (``_get_prompt_updates``, ``select_token_id``), and the budget counts embeddings
  (``encoder_budget.py``, ``get_num_embeds``): ``rows x cols`` tokens from ``(rows x merge)
  x (cols x merge)`` patches;
* **the layer's working set** (``TransformerBlock``, ``Attention``, ``FeedForward``): at the
  rotary step (``_apply_rotary_emb_vit_complex``, the eager path: ``compile_mm_encoder``
  is off by default) the residual, ``attention_norm``'s output, ``qkv`` (3 widths), q and k
  as float32 (``.float()``, no copy in a float32 model) and their float32 complex products,
  and the rotated q and k back in the model dtype (2 widths), all held until the function
  returns; at the MLP the block input, the attention output ``r`` (still bound),
  ``h``, ``ffn_norm``'s output and ``down_proj``'s (4 widths while the activation is
  computed) with ``gate_up_proj``'s output and its activation (3 intermediate widths). The
  residual, the norms and the row-parallel outputs are whole on every rank, the rest split
  by tensor parallelism.

LightOnOCR (``lightonocr.py``, ``LightOnOCRForConditionalGeneration``) subclasses Mistral 3
and reads Mistral 3's config attributes (``image_token_index``, ``projector_hidden_act``,
``multimodal_projector_bias``, ``spatial_merge_size``), so its published configs say
``model_type`` "mistral3" and Mistral 3's pass reads them: the Pixtral tower's
``image_size`` square (``LightOnOCRProcessingInfo.get_vision_encoder_info`` keeps
``vision_config.image_size``) and Mistral 3's tower and projector.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Multimodal
from memacct.engines.vllm.mm.family import EncoderFamily, ItemContext
from memacct.engines.vllm.mm.items import Item

__all__ = ["FAMILY", "pixtral_mistral_item", "rotary_bytes"]


def _int(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def rotary_bytes(width: int, inner: int, dtype_bytes: int, tp: int = 1) -> int:
    """Bytes per patch at the layer's peak on one rank (module notes)."""
    part = -(-width // tp)
    fp32_copies = 2 if dtype_bytes < 4 else 0  # q.float() and k.float()
    attention = (2 * width + 5 * part) * dtype_bytes + (fp32_copies + 2) * part * 4
    mlp = (4 * width + 3 * -(-inner // tp)) * dtype_bytes
    return max(attention, mlp)


def pixtral_mistral_item(config: Mapping[str, Any], mm: Multimodal,
                         ctx: ItemContext) -> Item | None:  # fmt: skip
    """The profile's largest dummy image of Mistral-format Pixtral (``None``: no image)."""
    if mm.count("image") <= 0:
        return None
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    width = _int(vision, "hidden_size", 1024)
    inner = _int(vision, "intermediate_size", 4096)
    patch = _int(vision, "patch_size", 16)
    merge = _int(vision, "spatial_merge_size", 1)
    side = _int(vision, "max_image_size", _int(vision, "image_size", 1024))
    rows = math.ceil(side / (patch * merge))
    values = _int(vision, "num_channels", 3) * patch * patch
    per = rotary_bytes(width, inner, ctx.dtype_bytes, ctx.tensor_parallel_size)
    per += values * ctx.dtype_bytes
    text = config.get("text_config")
    out_hidden = _int(text if isinstance(text, Mapping) else {}, "hidden_size", 5120)
    return Item("image", rows * rows, (rows * merge) ** 2, per, values, out_hidden)


FAMILY = EncoderFamily(
    model_types=frozenset({"pixtral"}),
    modules={"pixtral": "Pixtral (Mistral format)",
             "lightonocr": "LightOnOCR (Mistral 3's pass: its configs say mistral3)"},
    processor_keys=(),
    item=pixtral_mistral_item,
    towers={
        "pixtral": ("Pixtral's VisionTransformer, the optional pre-projector norm and patch "
                    "merger, and the vision-language adapter", "towers/clip.py"),
        "lightonocr": ("Mistral 3's: Pixtral, the patch merger and the projector",
                       "towers/clip.py"),
    },
    checked=frozenset({"pixtral", "lightonocr"}),
)
"""Mistral-format Pixtral's encoder pass and LightOnOCR's record (``PLUGGED_FAMILIES``)."""
