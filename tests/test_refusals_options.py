"""Serve options the engine would refuse, or that change nothing, are said so by the plan."""

from __future__ import annotations

import pytest

from memacct import InvalidInputError
from memacct.engines.deployment import LORA_RANKS, LoraSettings


@pytest.mark.parametrize("rank", [2, 24, 100, 1024])
def test_lora_rank_outside_vllms_list_is_refused(rank: int) -> None:
    with pytest.raises(InvalidInputError, match=r"--max-lora-rank .* 320, 512"):
        LoraSettings(max_lora_rank=rank)


def test_every_rank_vllm_takes_is_accepted() -> None:
    assert [LoraSettings(max_lora_rank=r).max_lora_rank for r in LORA_RANKS] == list(LORA_RANKS)
