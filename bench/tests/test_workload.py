"""The simulated workload: a transformer's allocations, with real sizes and lifetimes."""

from __future__ import annotations

from typing import Any

import pytest
from memacct_bench.workload import TransformerWorkload, replay

from memacct.engines import get_engine
from memacct.engines.base import KVSettings
from memacct.errors import InvalidInputError
from memacct.planner import KVCacheSpec, load_model_preset
from memacct.sim import SimDevice
from memacct.units import GiB

# A dense model small enough to reason about by hand: bf16, H=256, I=1024, 4 heads of 64.
TINY: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 1024,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
    "vocab_size": 2048, "torch_dtype": "bfloat16", "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}


def workload(config: dict[str, Any] | str, **kwargs: Any) -> TransformerWorkload:
    cfg = load_model_preset(config) if isinstance(config, str) else config
    tp = kwargs.pop("tensor_parallel_size", 1)
    return TransformerWorkload.from_config(cfg, tensor_parallel_size=tp, **kwargs)


def _parameter_bytes(work: TransformerWorkload) -> int:
    """The inventory's bytes without the rotary cos/sin cache (a buffer, not a parameter)."""
    return sum(t.nbytes for t in work.weights if t.role != "buffers")


def test_parameters_of_qwen25_7b_add_up_to_its_published_count() -> None:
    # Qwen2.5-7B-Instruct has 7,615,616,512 parameters (QKV biases included), in bf16.
    assert _parameter_bytes(workload("qwen2.5-7b")) == 7_615_616_512 * 2


def test_parameters_of_llama31_8b_add_up_to_its_published_count() -> None:
    assert _parameter_bytes(workload("llama-3.1-8b")) == 8_030_261_248 * 2


def test_the_workload_loads_the_rotary_cache_with_the_weights() -> None:
    (rotary,) = [t for t in workload("llama-3.1-8b").weights if t.role == "buffers"]
    assert rotary.shape == (131072, 128) and rotary.nbytes == 131072 * 128 * 2


def test_tensor_parallelism_halves_linear_layers_and_splits_embeddings_by_vocabulary() -> None:
    one, two = workload("llama-3.1-8b"), workload("llama-3.1-8b", tensor_parallel_size=2)
    whole = (2 * 32 + 1) * 4096 * 2 + 131072 * 128 * 2  # norms and rotary cache on every rank
    # vLLM's VocabParallelEmbedding / ParallelLMHead: 128256 (a multiple of 64) / 2 per rank.
    assert two.parameter_tensors()[0] == 128256 // 2 * 4096 * 2
    assert sum(two.parameter_tensors()) - whole == (sum(one.parameter_tensors()) - whole) // 2


def test_weights_include_the_engines_persistent_input_buffers() -> None:
    work = workload(TINY, max_num_batched_tokens=512, max_num_seqs=8)
    buffers = sum(work.weight_tensors()) - sum(work.parameter_tensors())
    assert buffers >= 512 * (4 + 8 + 8)  # input ids (int32), positions and slot mapping (int64)


def test_a_step_frees_everything_it_allocates() -> None:
    work = workload("qwen2.5-7b")
    dev = SimDevice("h100-80gb")
    for n in work.weight_tensors():
        dev.malloc(n, persistent=True)
    before = dev.allocator.allocated
    replay(dev, work.step_trace(8192, 256))
    assert dev.allocator.allocated == before


def test_step_peak_is_the_mlp_of_a_dense_layer() -> None:
    t, s = 256, 16
    work = workload(TINY, max_num_batched_tokens=t, max_num_seqs=s)
    dev = SimDevice(None, total_bytes=1 * GiB)
    replay(dev, work.step_trace(t, s))
    metadata = s * 8 + (s + 1) * 4  # logits indices (int64), cu_seqlens (int32)
    residual_and_hidden = 2 * t * 256 * 2
    gate_up_and_act = t * 2 * 1024 * 2 + t * 1024 * 2  # gate_up still live when act is written
    peak = dev.memory_stats()["requested_bytes.all.peak"]
    assert peak == metadata + residual_and_hidden + gate_up_and_act


def test_sampling_takes_float32_logits_of_every_sequence_over_the_padded_vocabulary() -> None:
    work = workload("qwen2.5-7b")
    vocab = 152064  # already a multiple of 64
    assert 200 * vocab * 4 in work.step_trace(4096, 200)


def test_vocabulary_is_padded_to_a_multiple_of_64() -> None:
    cfg = dict(TINY, vocab_size=2001)
    assert workload(cfg).shape.vocab_size == 2048


def test_more_tokens_need_more_memory() -> None:
    work = workload("llama-3.1-8b")
    peaks = []
    for tokens in (256, 2048, 8192):
        dev = SimDevice("h100-80gb")
        replay(dev, work.step_trace(tokens, 1))  # one sequence: the forward pass dominates
        peaks.append(dev.memory_stats()["requested_bytes.all.peak"])
    assert peaks == sorted(peaks) and len(set(peaks)) == 3


def test_kv_cache_is_one_tensor_per_layer_for_a_uniform_model() -> None:
    work = workload("qwen2.5-7b")
    spec = KVCacheSpec.from_preset("qwen2.5-7b")
    tensors = work.kv_cache_tensors(1000)
    assert len(tensors) == spec.num_layers
    assert sum(tensors) == 1000 * spec.bytes_per_block(16)


@pytest.mark.parametrize(("model", "groups"), [("gemma-2-9b", 2), ("gemma-3-12b", 6)])
def test_a_hybrid_shares_one_tensor_per_layer_of_its_widest_group(model: str, groups: int) -> None:
    # vLLM's hybrid layout: sliding and full layers in groups of equal width, one tensor per
    # slot shared by a layer of every group: the cache takes num_blocks x the engine's block
    # bytes, not num_blocks x every layer's page (which would double gemma-2's cache).
    work = workload(model)
    spec = KVCacheSpec.from_preset(model)
    layout = get_engine("vllm").kv.plan(spec, 8 * GiB, KVSettings(max_model_len=4096))
    tensors = work.kv_cache_tensors(1000)
    assert len(tensors) == spec.num_layers // groups
    assert sum(tensors) == 1000 * layout.block_bytes
    assert sum(tensors) * groups == 1000 * spec.bytes_per_block(16)


@pytest.mark.parametrize(("tokens", "seqs"), [(8193, 1), (256, 257), (4, 8), (0, 1)])
def test_steps_an_engine_never_schedules_are_refused(tokens: int, seqs: int) -> None:
    with pytest.raises(InvalidInputError):
        workload("qwen2.5-7b").step_trace(tokens, seqs)


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "mixtral-8x7b", "gemma-2-9b"])
@pytest.mark.parametrize("tokens", [256, 8192])
def test_moe_mla_and_gemma_steps_free_everything_they_allocate(model: str, tokens: int) -> None:
    dev = SimDevice(None, total_bytes=64 * GiB)
    replay(dev, workload(model).step_trace(tokens, 256))
    assert dev.allocator.allocated == 0


def test_mla_decompresses_the_latent_for_prefill_only() -> None:
    work = workload("deepseek-v2-lite")
    shape = work.shape

    def keys_and_values(tokens: int) -> int:  # kv_b_proj's output: per-head keys and values
        return tokens * shape.num_heads * (shape.head_dim - shape.qk_rope_head_dim
                                           + shape.v_head_dim) * 2

    assert keys_and_values(1024) in work.step_trace(1024, 256)
    assert keys_and_values(256) not in work.step_trace(256, 256)  # decode attends the latent


def test_step_traces_are_built_once_per_shape() -> None:
    work = workload(TINY)
    assert work.step_trace(64, 4) is work.step_trace(64, 4)
