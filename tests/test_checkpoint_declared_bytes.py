"""A checkpoint whose safetensors headers declare far more bytes than its files hold is
planned from what the headers declare, and the plan says the files are not those weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from memacct.model.sources.checkpoint import checkpoint_table
from memacct.model.sources.presets import load_model_preset
from memacct.planner.offline import plan_offline

ROWS, COLS = 152064, 3584  # qwen2.5-7b's embedding: 1.09 GB in bf16


def _checkpoint(tmp_path: Path, *, data: bool) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(dict(load_model_preset("qwen2.5-7b"))))
    size = ROWS * COLS * 2
    header = json.dumps({"model.embed_tokens.weight": {
        "dtype": "BF16", "shape": [ROWS, COLS], "data_offsets": [0, size]}}).encode()
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        if data:
            f.truncate(8 + len(header) + size)  # sparse: the declared bytes are all there
        else:
            f.write(b"\0" * 40_000)  # 40 KB where the header declares 1.09 GB
    return tmp_path


def test_a_file_smaller_than_its_header_declares_is_named_in_the_plan(tmp_path: Path) -> None:
    plan = plan_offline(str(_checkpoint(tmp_path, data=False)), device="h100")
    note = next(n for n in plan.notes if "model.safetensors declares" in n)
    assert "holds 40," in note
    assert "not from data on disk" in note


def test_a_whole_checkpoint_has_no_such_note(tmp_path: Path) -> None:
    table = checkpoint_table(_checkpoint(tmp_path, data=True))
    assert table.notes == ()
    plan = plan_offline(str(tmp_path), device="h100")
    assert not any("declares" in n for n in plan.notes)
