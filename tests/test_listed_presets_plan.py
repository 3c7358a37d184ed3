"""Every preset ``memacct plan --model list`` lists plans without a checkpoint; a preset
whose weights need the checkpoint is not listed, and the list says why on stderr."""

from __future__ import annotations

import importlib.util

import pytest

from memacct.cli import main
from memacct.model.sources.presets import NEEDS_CHECKPOINT, model_presets, offline_presets


def _listed(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    assert main(["plan", "--model", "list"]) == 0
    captured = capsys.readouterr()
    return captured.out.split(), captured.err


# Without the hf extra (the core-only environment), a preset whose layers only the meta
# device sizes (a hybrid's Mamba layers) is refused naming the extra: that is its plan there.
_HF = all(importlib.util.find_spec(m) is not None for m in ("transformers", "torch"))


def test_each_listed_preset_plans(capsys: pytest.CaptureFixture[str]) -> None:
    names, _ = _listed(capsys)
    assert names == offline_presets()
    refused = []
    for name in names:
        code = main(["plan", "--model", name, "--device", "h100"])
        err = capsys.readouterr().err
        needs_extra = not _HF and code == 2 and "memacct's hf extra" in err
        if code not in (0, 1) and not needs_extra:  # 1: planned, does not fit
            refused.append((name, err.strip()))
    assert not refused


def test_gemma_3n_is_named_with_why_and_how(capsys: pytest.CaptureFixture[str]) -> None:
    names, err = _listed(capsys)
    assert "gemma-3n-e4b" in model_presets() and "gemma-3n-e4b" not in names
    assert "gemma-3n-e4b" in NEEDS_CHECKPOINT
    assert "not listed: gemma-3n-e4b" in err and "google/gemma-3n-E4B-it" in err
    assert main(["plan", "--model", "gemma-3n-e4b", "--device", "h100"]) == 2
    assert "checkpoint" in capsys.readouterr().err
