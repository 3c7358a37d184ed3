"""Serve options the engine would refuse, or that change nothing, are said so by the plan."""

from __future__ import annotations

import pytest
from _configs import QWEN25_VL_3B

from memacct import InvalidInputError
from memacct.engines.deployment import LORA_RANKS, Deployment, LoraSettings, Multimodal
from memacct.planner.offline import plan_offline


@pytest.mark.parametrize("rank", [2, 24, 100, 1024])
def test_lora_rank_outside_vllms_list_is_refused(rank: int) -> None:
    with pytest.raises(InvalidInputError, match=r"--max-lora-rank .* 320, 512"):
        LoraSettings(max_lora_rank=rank)


def test_every_rank_vllm_takes_is_accepted() -> None:
    assert [LoraSettings(max_lora_rank=r).max_lora_rank for r in LORA_RANKS] == list(LORA_RANKS)


def test_multimodal_limits_on_a_text_only_model_are_named_as_not_applied() -> None:
    plan = plan_offline("qwen2.5-7b", device="h100", deployment=Deployment(
        multimodal=Multimodal(limit_mm_per_prompt={"image": 2})))
    assert any("--limit-mm-per-prompt not applied" in n and "text-only" in n for n in plan.notes)
    assert not any("not applied" in n for n in plan_offline("qwen2.5-7b", device="h100").notes)


def test_a_misspelt_processor_kwarg_is_named_with_the_key_it_meant() -> None:
    misspelt = Deployment(multimodal=Multimodal(mm_processor_kwargs={"max_pixel": 1003520}))
    plan = plan_offline(QWEN25_VL_3B, device="h100", deployment=misspelt)
    assert any("max_pixel not applied" in n and "did you mean max_pixels" in n
               for n in plan.notes)
    right = Deployment(multimodal=Multimodal(mm_processor_kwargs={"max_pixels": 1003520}))
    plan = plan_offline(QWEN25_VL_3B, device="h100", deployment=right)
    assert not any("not applied" in n for n in plan.notes)


@pytest.mark.parametrize("method", ["eagle3", "eagle", "draft_model"])
def test_a_speculative_config_without_its_draft_says_to_add_model(
        method: str, capsys: pytest.CaptureFixture[str]) -> None:
    from memacct.cli import main

    config = f'{{"method": "{method}", "num_speculative_tokens": 3}}'
    argv = ["plan", "--model", "qwen2.5-7b", "--device", "h100", "--speculative-config", config]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert 'add "model"' in err and "--speculative-config" in err and "draft_config" not in err
