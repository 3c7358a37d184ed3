"""Looped models' weights are the physical layers vLLM 0.33 builds, not num_hidden_layers.

``tests/data/golden/vllm-0.33-looped-weights.json`` holds the parameters vLLM's own model
classes build on the meta device (``tools/golden_looped_weights.py``): HRM-Text's two stacks
of ``num_layers_per_stack`` layers (its ``num_hidden_layers``, 128, is a class default the
model never reads), Dory's layers that are attention or MLP as ``layer_types`` says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.model.weights.inventory import formula_tensors

ROOT = Path(__file__).parent.parent
GOLDEN = json.loads((ROOT / "tests/data/golden/vllm-0.33-looped-weights.json").read_text())


def _config(row: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((ROOT / row["config"]).read_text())
    return config


@pytest.mark.parametrize("name", sorted(GOLDEN["rows"]))
def test_parameters_are_the_ones_vllm_builds(name: str) -> None:
    row = GOLDEN["rows"][name]
    tensors = formula_tensors(_config(row))
    params = sum(t.nbytes for t in tensors if t.role != "buffers") // 2  # bf16
    assert params == row["params"]


def test_hrm_text_reads_the_stacks_not_num_hidden_layers() -> None:
    row = GOLDEN["rows"]["hrm-text-default"]
    config = _config(row)
    deeper = formula_tensors({**config, "num_hidden_layers": 4})
    assert sum(t.nbytes for t in deeper) == sum(t.nbytes for t in formula_tensors(config))
    shallow = formula_tensors({**config, "num_layers_per_stack": 8})
    assert sum(t.nbytes for t in shallow) < sum(t.nbytes for t in formula_tensors(config))


def test_hrm_text_splits_its_layers_across_ranks() -> None:
    config = _config(GOLDEN["rows"]["hrm-text-default"])
    one = sum(t.nbytes for t in formula_tensors(config) if t.role in ("attention", "mlp"))
    two = sum(t.nbytes for t in formula_tensors(config, tensor_parallel_size=2)
              if t.role in ("attention", "mlp"))
    assert two * 2 == one


def test_dory_mlp_layers_carry_no_attention() -> None:
    config = _config(GOLDEN["rows"]["dory-default"])
    tensors = formula_tensors(config)
    mlp_layers = [i for i, kind in enumerate(config["layer_types"]) if kind == "mlp"]
    assert mlp_layers
    names = {t.name for t in tensors if t.role == "attention"}
    assert not any(n.startswith(f"backbone.layers.{mlp_layers[0]}.") for n in names)
