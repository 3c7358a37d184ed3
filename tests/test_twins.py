"""Numbers that two paths used to work out apart now have one owner each, and the paths
agree: the default batch (vLLM's max_num_seqs clamp), the device a plan that names none is
made for, and the default max_model_len of a config without a length key."""

from __future__ import annotations

import json
from typing import Any

import pytest

import memacct
from memacct.cli import main
from memacct.devices import REFERENCE_DEVICE
from memacct.engines import engine_names, get_engine
from memacct.model.config import NO_LENGTH_MAX_MODEL_LEN, ModelConfig
from memacct.model.sources.presets import load_model_preset
from memacct.model.spec import KVCacheSpec
from memacct.units import GiB


@pytest.mark.parametrize(("tokens", "seqs"), [(512, None), (768, None), (2048, None),
                                              (None, None), (512, 64), (8192, 2048)])  # fmt: skip
def test_the_kv_plan_and_the_offline_plan_pick_one_batch(
    tokens: int | None, seqs: int | None
) -> None:
    """vLLM clamps a defaulted max_num_seqs to max_num_batched_tokens (arg_utils.py,
    _set_default_max_num_seqs_and_batched_tokens_args); both paths ask the engine's
    StartupModel.batch. (Before: 1024 sequences from plan_kv_cache, 512 offline, at 512.)"""
    spec = KVCacheSpec.from_hf_config(load_model_preset("qwen2.5-7b"))
    given: dict[str, Any] = {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}
    kv = memacct.plan_kv_cache(None, spec, kv_cache_memory_bytes=20 * GiB, **given)
    offline = memacct.plan_offline("qwen2.5-7b", device="h100-80gb", **given)
    picked = (offline.max_num_batched_tokens, offline.max_num_seqs)
    assert (kv.max_num_batched_tokens, kv.max_num_seqs) == picked
    expected_tokens = tokens or 8192  # vLLM 0.33 on a device of 70 GiB or more, not an A100
    assert picked == (expected_tokens, seqs or min(1024, expected_tokens))


def _cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("engine", engine_names())
def test_a_capacity_plan_and_a_single_plan_pick_one_default_device(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --device: every row of a capacity plan is planned on the device a single plan takes,
    the engine's own (an Ascend part for vllm-mindspore, not the H100 every row refused)."""
    single = _cli_json(capsys, ["plan", "--model", "qwen2.5-7b", "--engine", engine])
    rows = _cli_json(capsys, ["plan", "--model", "qwen2.5-7b", "--engine", engine,
                              "--tensor-parallel-size", "1,2"])  # fmt: skip
    device = get_engine(engine).default_device
    assert single["budget"]["device"] == device
    assert [row["device"] for row in rows] == [device, device]
    assert all(row["refusal"] is None for row in rows), rows
    assert any(row["fits"] for row in rows)


def test_the_gpu_engines_default_to_the_reference_device() -> None:
    vendors = {name: get_engine(name).default_device for name in engine_names()}
    assert vendors["vllm"] == vendors["sglang"] == REFERENCE_DEVICE
    assert vendors["vllm-ascend"].startswith("ascend")


# vLLM 0.33's length keys (vllm/transformers_utils/model_arch_config_convertor.py, possible_keys).
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "model_max_length", "max_target_positions", "max_sequence_length",
                "max_seq_length", "seq_len")  # fmt: skip


def _without_length_keys() -> dict[str, Any]:
    config = dict(load_model_preset("qwen2.5-7b"))
    for key in _LENGTH_KEYS:
        config.pop(key, None)
    return config


def test_a_config_without_a_length_key_plans_vllms_2048_on_every_path() -> None:
    """vLLM assumes 2048 (_get_and_verify_max_len's default_max_len); before, plan_kv_cache
    refused, the offline plan took 32768 and the harness read another key list."""
    config = _without_length_keys()
    model = ModelConfig(config, "config.json")
    assert model.position_limit is None
    assert model.default_max_model_len == NO_LENGTH_MAX_MODEL_LEN == 2048
    spec = KVCacheSpec.from_hf_config(config)
    kv = memacct.plan_kv_cache(None, spec, kv_cache_memory_bytes=20 * GiB)
    offline = memacct.plan_offline(config, device="h100-80gb")
    assert kv.max_model_len == offline.max_model_len == 2048
    assert any("none of vLLM's length keys" in note for note in offline.notes)
    # A config with a length key keeps it.
    assert ModelConfig(load_model_preset("qwen2.5-7b"), "x").default_max_model_len == 32768


@pytest.mark.parametrize("engine", engine_names())
def test_a_kv_plan_without_a_device_takes_the_batch_the_engines_offline_plan_takes(
    engine: str,
) -> None:
    """Without a profile or a device, plan_kv_cache assumes the batch of the engine's own
    default device and length rule (vllm-ascend: an Ascend part's 2048/256, was the H100's
    8192/1024; vllm-mindspore: V0's max(max_model_len, 2048), was 2048)."""
    spec = KVCacheSpec.from_hf_config(load_model_preset("qwen2.5-7b"))
    kv = memacct.plan_kv_cache(None, spec, kv_cache_memory_bytes=20 * GiB, engine=engine)
    offline = memacct.plan_offline("qwen2.5-7b", engine=engine)
    assert (kv.max_num_batched_tokens, kv.max_num_seqs) == (
        offline.max_num_batched_tokens, offline.max_num_seqs)
