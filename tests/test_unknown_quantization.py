"""A quantization method memacct has no layout for: the refusal names only flags that exist,
and the checkpoint it points to plans from its safetensors headers."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from memacct.cli.plan import plan_cmd
from memacct.model.sources.presets import load_model_preset
from memacct.model.weights.quant import UnknownQuantizationError
from memacct.planner.offline import plan_offline


def _config() -> dict[str, object]:
    config = dict(load_model_preset("qwen2.5-7b"))
    config["quantization_config"] = {"quant_method": "hqq", "nbits": 4}
    return config


def test_the_refusal_names_only_flags_memacct_plan_has() -> None:
    with pytest.raises(UnknownQuantizationError) as caught:
        plan_offline(_config(), device="h100")
    named = set(re.findall(r"--[a-z][a-z-]+", str(caught.value)))
    flags = {opt for param in plan_cmd.params for opt in param.opts}
    assert named and named <= flags, named - flags


def test_a_checkpoint_of_an_unknown_method_plans_from_its_headers(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_config()))
    header = json.dumps({"model.embed_tokens.weight": {
        "dtype": "BF16", "shape": [1024, 4096], "data_offsets": [0, 1024 * 4096 * 2]}}).encode()
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 1024 * 4096 * 2)
    plan = plan_offline(str(tmp_path), device="h100")
    assert plan.budget is not None and plan.budget.quantization == "hqq"
    assert plan.weights_memory >= 1024 * 4096 * 2
