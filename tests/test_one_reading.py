"""One offline plan reads its model once: ``ModelConfig`` and ``KVCacheSpec`` are built at the
top of the plan and handed down to the engine's start-up, the weights and the forward pass;
the KV manager answers a block's bytes without planning a probe budget."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memacct.cli import main
from memacct.engines import get_engine
from memacct.model.config import ModelConfig
from memacct.model.sources.presets import load_model_preset
from memacct.model.spec import KVCacheSpec
from memacct.units import GiB


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts of ``ModelConfig`` constructions and ``KVCacheSpec.from_hf_config`` calls."""
    counts = {"ModelConfig": 0, "KVCacheSpec.from_hf_config": 0}
    init = ModelConfig.__init__
    build = KVCacheSpec.from_hf_config.__func__  # type: ignore[attr-defined]

    def counted_init(self: ModelConfig, *args: Any, **kwargs: Any) -> None:
        counts["ModelConfig"] += 1
        init(self, *args, **kwargs)

    def counted_build(cls: type[KVCacheSpec], *args: Any, **kwargs: Any) -> KVCacheSpec:
        counts["KVCacheSpec.from_hf_config"] += 1
        spec: KVCacheSpec = build(cls, *args, **kwargs)
        return spec

    monkeypatch.setattr(ModelConfig, "__init__", counted_init)
    monkeypatch.setattr(KVCacheSpec, "from_hf_config", classmethod(counted_build))
    yield counts


def test_a_plan_reads_its_model_once(
    readings: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    # Before the reading was handed down: 11 ModelConfig and 2 specs for this command.
    assert main(["plan", "--model", "qwen2.5-7b", "--device", "h100-80gb"]) == 0
    assert "63,591 blocks" in capsys.readouterr().out
    assert readings["ModelConfig"] <= 2, readings
    assert readings["KVCacheSpec.from_hf_config"] == 1, readings


@pytest.mark.parametrize("name", ["qwen2.5-7b", "deepseek-v3", "gpt-oss-20b", "gemma-3-12b",
                                  "mixtral-8x7b", "llama-3.1-8b-fp8"])  # fmt: skip
def test_the_handed_down_reading_changes_no_term(name: str) -> None:
    """The start-up estimate with the plan's reading and spec equals the one that reads
    config.json itself, term by term."""
    config = load_model_preset(name)
    startup = get_engine("vllm").startup
    settings = startup.settings(tensor_parallel_size=2, max_model_len=8192)
    model = ModelConfig(config, "the model config")
    spec = KVCacheSpec.from_hf_config(model, tensor_parallel_size=2)
    alone = startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                             settings=settings)  # fmt: skip
    handed = startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                              settings=settings, model=model, spec=spec)  # fmt: skip
    assert handed == alone
    assert spec == KVCacheSpec.from_hf_config(dict(config), tensor_parallel_size=2)
