"""Eagle2.5-VL (vLLM 0.33 ``eagle2_5_vl.py``): SigLIP tiles through InternVL's processor, the
rule shared with H2OVL (:mod:`.internvl_tiled`, whose notes give the sources)."""

from __future__ import annotations

from memacct.engines.vllm.mm.family import EncoderFamily
from memacct.engines.vllm.mm.internvl_tiled import KEYS, accepts, tiled_item

__all__ = ["FAMILY"]

FAMILY = EncoderFamily(
    model_types=frozenset({"eagle_2_5_vl"}),
    modules={"eagle2_5_vl": "Eagle2.5-VL (SigLIP, InternVL's tiles)"},
    processor_keys=KEYS["eagle_2_5_vl"],
    item=tiled_item,
    towers={"eagle2_5_vl": ("SigLIP up to select_layer and InternVL's mlp1",
                            "towers/internvit.py")},
    checked=frozenset({"eagle2_5_vl"}),
    accepts=accepts,
)
"""Eagle2.5-VL's encoder pass and tower."""
