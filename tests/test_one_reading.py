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


@pytest.mark.parametrize(("engine", "device"), [("sglang", "h100-80gb"),
                                                ("vllm-ascend", "ascend-910b-64gb")])  # fmt: skip
def test_every_engines_plan_reads_its_model_once(
    engine: str, device: str, readings: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--model", "qwen2.5-7b", "--device", device, "--engine", engine]) == 0
    capsys.readouterr()
    assert readings == {"ModelConfig": 1, "KVCacheSpec.from_hf_config": 1}


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


_PRESETS = ("qwen2.5-7b", "deepseek-v3", "gpt-oss-20b", "gemma-3-12b", "llama-4-scout",
            "granite-4.0-h-small", "qwen3-next-80b-a3b", "cohere2-7b", "mistral-7b")  # fmt: skip


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("name", _PRESETS)
def test_a_block_is_the_block_of_every_budget(engine: str, name: str) -> None:
    """The KV manager's block (tokens, bytes, tensor pages) is the one its plan divides any
    budget by: the same as a plan of a budget no request exceeds, the probe it replaces."""
    from memacct.engines.base import KVSettings

    kv = get_engine(engine).kv
    config = load_model_preset(name)
    for tp, pp, block_size in ((1, 1, kv.default_block_size), (2, 2, 32), (1, 2, 64)):
        spec = KVCacheSpec.from_hf_config(config, tensor_parallel_size=tp,
                                          pipeline_parallel_size=pp)  # fmt: skip
        for options in ({}, {"swa_full_tokens_ratio": 0.5}) if engine == "sglang" else ({},):
            settings = KVSettings(block_size=block_size, max_model_len=4096,
                                  engine_options=options)  # fmt: skip
            block = kv.block(spec, settings)
            layout = kv.plan(spec, 1 << 62, settings)
            assert (block.block_size, block.block_bytes, block.tensor_pages) == (
                layout.block_size, layout.block_bytes, layout.tensor_pages), (tp, pp, options)
            # And for a budget a device holds: the block does not move with the budget.
            small = kv.plan(spec, 30 * GiB, settings)
            assert small.block_bytes == block.block_bytes


@pytest.mark.parametrize("deployment", [{"quantization": "fp8"}, {"dtype": "float16"},
                                        {"pipeline_parallel_size": 2}])  # fmt: skip
def test_a_deployment_that_changes_the_config_does_not_take_the_plans_reading(
    deployment: dict[str, Any],
) -> None:
    """``--quantization``/``--dtype`` serve another config than the one the plan read: its
    start-up reads that config itself, and comes out as if nothing had been handed down."""
    from memacct.engines.deployment import Deployment

    config = load_model_preset("llama-3.1-8b")
    startup = get_engine("vllm").startup
    settings = startup.settings(max_model_len=8192, deployment=Deployment(**deployment))
    model = ModelConfig(config, "the model config")
    spec = KVCacheSpec.from_hf_config(model)
    alone = startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                             settings=settings)  # fmt: skip
    handed = startup.estimate(config, total_memory=80 * GiB, device_name="h100-80gb",
                              settings=settings, model=model, spec=spec)  # fmt: skip
    assert handed == alone


def test_a_plan_holds_its_budget_and_layout_and_shows_their_figures() -> None:
    """One result type: the plan nests the budget and the engine's layout; the figures
    plans always had (weights_memory, num_blocks ...) are read from them, not stored twice."""
    import json

    from memacct import plan_offline
    from memacct.planner.plan_json import BUDGET_VIEWS, FLAT_KEYS, LAYOUT_VIEWS
    from memacct.planner.result import KVCachePlan

    plan = plan_offline("qwen2.5-7b", device="h100-80gb")
    assert plan.budget is not None
    assert not set(KVCachePlan.model_fields) & {*BUDGET_VIEWS, *LAYOUT_VIEWS}
    assert plan.layout.tensor_pages  # the manager's own layout, tensors and all
    assert (plan.weights_memory, plan.non_kv_cache_memory, plan.total_memory) == (
        plan.budget.weights_memory, plan.budget.non_kv_cache_memory, plan.budget.total_memory)
    assert (plan.num_blocks, plan.max_concurrency, plan.engine_notes) == (
        plan.layout.num_blocks, plan.layout.max_concurrency, plan.layout.notes)
    data = json.loads(plan.model_dump_json())
    # The JSON readers know, key for key and in order, then the layout itself.
    assert list(data) == [*FLAT_KEYS, "layout"]
    assert data["format_version"] == 4 and data["num_blocks"] == 63591
    assert KVCachePlan.model_validate_json(plan.model_dump_json()) == plan


def test_a_format_3_plan_loads_and_an_edited_budget_figure_is_refused() -> None:
    import json

    from memacct import plan_offline
    from memacct.errors import ConfigError
    from memacct.models import load_model_json
    from memacct.planner.result import KVCachePlan

    plan = plan_offline("qwen2.5-7b", device="h100-80gb")
    data = json.loads(plan.model_dump_json())
    del data["layout"]
    data["format_version"] = 3
    old = load_model_json(KVCachePlan, json.dumps(data), "plan.json")
    assert (old.num_blocks, old.kv_tokens, old.weights_memory, old.groups) == (
        plan.num_blocks, plan.kv_tokens, plan.weights_memory, plan.groups)
    data["weights_memory"] += 1
    with pytest.raises(ConfigError, match="weights_memory .* inconsistent"):
        load_model_json(KVCachePlan, json.dumps(data), "plan.json")
