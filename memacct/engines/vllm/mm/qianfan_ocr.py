"""Qianfan-OCR (vLLM 0.33 ``qianfan_ocr.py``, ``QianfanOCRForConditionalGeneration``, an
``InternVLChatModel``): InternViT tiles through InternVL's processor, images only.

``QianfanOCRProcessingInfo.get_hf_processor`` builds ``InternVLChatImageProcessor`` from the
vision section's ``image_size`` and the config's ``min_dynamic_patch``,
``max_dynamic_patch``, ``dynamic_image_size`` and ``use_thumbnail`` (``--mm-processor-kwargs``
first), no video; ``_add_intern_vit_fields`` reads the HF-format vision section as InternViT
(the first of ``image_size`` / ``patch_size``, ``attention_bias`` as ``qkv_bias``,
``use_qk_norm`` as ``qk_normalization``). The tiling, the tile's patches and the layer's
working set are H2OVL's without the multi-scale crops (:mod:`.internvl_tiled`, :mod:`.tiles`).
"""

from __future__ import annotations

from memacct.engines.vllm.mm.family import EncoderFamily
from memacct.engines.vllm.mm.internvl_tiled import KEYS, accepts, tiled_item

__all__ = ["FAMILY"]

FAMILY = EncoderFamily(
    model_types=frozenset({"qianfan_ocr"}),
    modules={"qianfan_ocr": "Qianfan-OCR (InternViT, InternVL's tiles)"},
    processor_keys=tuple(k for k in KEYS["qianfan_ocr"] if k != "select_layer"),
    item=tiled_item,
    towers={"qianfan_ocr": ("InternViT (HF-format vision section) up to select_layer and "
                            "mlp1", "towers/internvit.py")},
    checked=frozenset({"qianfan_ocr"}),
    accepts=accepts,
)
"""Qianfan-OCR's encoder pass and tower."""
