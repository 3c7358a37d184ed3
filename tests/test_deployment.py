"""Deployment settings of ``vllm serve`` that move memory (issue 22): validation and each term."""

from __future__ import annotations

from typing import Any

import pytest

from memacct.engines.base import StartupEstimate, StartupSettings
from memacct.engines.deployment import Deployment, LoraSettings, Multimodal, Speculative
from memacct.engines.vllm.lora import lora_buffer_bytes
from memacct.engines.vllm.multimodal import item_tokens
from memacct.engines.vllm.parallel import local_experts, rank_weights, serving_config
from memacct.engines.vllm.speculative import draft_weight_bytes, rejection_sampler_bytes
from memacct.engines.vllm.startup import STARTUP
from memacct.errors import InvalidInputError
from memacct.model.weights.estimate import formula_weights
from memacct.planner import load_model_preset

GIB = 2**30


def _estimate(name: str, d: Deployment | None, tp: int = 1, total: int = 80 * GIB,
              **kw: Any) -> StartupEstimate:  # fmt: skip
    s = StartupSettings(tensor_parallel_size=tp, max_model_len=8192, deployment=d, **kw)
    return STARTUP.estimate(load_model_preset(name), total_memory=total,
                            device_name="h100-80gb", settings=s)  # fmt: skip


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"quantization": "a w q"}, ["--quantization", "'a w q'", "fp8"]),
        ({"dtype": "float32"}, ["--dtype", "'float32'", "bfloat16"]),
        ({"dtype": "int8"}, ["--dtype", "'int8'"]),
        ({"cpu_offload_gb": -1}, ["--cpu-offload-gb", "-1"]),
        ({"data_parallel_size": 0}, ["--data-parallel-size"]),
        ({"max_loras": 4}, ["--enable-lora"]),
        ({"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, ["--max-cpu-loras", "2"]),
        ({"enable_lora": True, "lora_dtype": "fp8"}, ["--lora-dtype", "'fp8'"]),
        ({"speculative_config": "{not json"}, ["--speculative-config", "JSON"]),
        ({"speculative_config": '{"method": "medusa2", "num_speculative_tokens": 2}'},
         ["method", "'medusa2'", "eagle"]),
        ({"speculative_config": '{"method": "eagle"}'}, ["num_speculative_tokens"]),
        ({"speculative_config": '{"method": "ngram", "num_speculative_tokens": 2, "x": 1}'},
         ["(x)"]),
        ({"speculative_config": '{"method": "medusa", "num_speculative_tokens": 2}'},
         ["'medusa'", "eagle"]),
        ({"limit_mm_per_prompt": '{"imag": 2}'}, ["--limit-mm-per-prompt", "'imag'"]),
        ({"limit_mm_per_prompt": '{"image": {"count": 1, "depth": 3}}'}, ["'depth'"]),
        ({"mm_processor_kwargs": '{"max_pixels": 0}'}, ["max_pixels"]),
    ],
)
def test_bad_settings_are_refused_naming_the_value_and_the_fix(
    kwargs: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(InvalidInputError) as err:
        Deployment.from_serve_args(**kwargs)
    for word in words:
        assert word in str(err.value)


def test_serve_args_parse_as_vllm_names_them() -> None:
    d = Deployment.from_serve_args(
        enable_lora=True, max_loras=4, max_lora_rank=64,
        speculative_config='{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
                           '"num_speculative_tokens": 3}',
        limit_mm_per_prompt='{"image": {"count": 2, "width": 512, "height": 512}, "video": 0}',
        mm_processor_kwargs='{"max_pixels": 1003520}',
    )  # fmt: skip
    assert d.lora == LoraSettings(max_loras=4, max_lora_rank=64)
    # Keys that move no memory term are taken, as vLLM takes them.
    spec = Speculative.parse('{"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "method": "eagle",'
                             ' "num_speculative_tokens": 3, "disable_logprobs": false,'
                             ' "disable_by_batch_size": 30}')  # fmt: skip
    assert (spec.method, spec.num_speculative_tokens) == ("eagle", 3)
    assert d.speculative is not None and d.speculative.method == "eagle3"
    assert d.multimodal.count("image") == 2 and d.multimodal.count("video") == 0
    assert d.multimodal.size("image") == {"width": 512, "height": 512}
    assert Deployment.from_serve_args().is_default and not d.is_default
    # Frozen and hashable, as the plan options that carry it.
    from memacct.planner.options import PlanOptions

    assert hash(PlanOptions(deployment=d)) == hash(PlanOptions(deployment=d))


# ------------------------------------------------------------------ weights terms


def test_online_fp8_quantizes_linear_layers_and_keeps_embeddings_in_bf16() -> None:
    config = load_model_preset("llama-3.1-8b")
    bf16 = formula_weights(config)
    fp8 = formula_weights(serving_config(config, Deployment(quantization="fp8")))
    for role in ("embedding", "lm_head", "norms"):
        assert fp8.by_role[role] == bf16.by_role[role]
    for role in ("attention", "mlp"):
        assert abs(fp8.by_role[role] / bf16.by_role[role] - 0.5) < 0.001
    # A checkpoint already quantized another way is refused, as vLLM refuses it.
    awq = {**config, "quantization_config": {"quant_method": "awq", "bits": 4,
                                             "group_size": 128, "zero_point": True}}  # fmt: skip
    with pytest.raises(InvalidInputError, match="awq"):
        serving_config(awq, Deployment(quantization="fp8"))
    # The checkpoint's own method, with or without vLLM's kernel suffix, is accepted as is.
    for name in ("awq", "awq_marlin"):
        assert serving_config(awq, Deployment(quantization=name)) == awq
    # Online quantization other than FP8 is refused, naming what is sized.
    with pytest.raises(InvalidInputError, match="fp8"):
        serving_config(config, Deployment(quantization="awq"))


def test_pipeline_stages_split_layers_and_place_embedding_and_lm_head() -> None:
    config = load_model_preset("llama-3.1-70b")  # 80 layers, untied LM head
    whole = formula_weights(config, tensor_parallel_size=2)
    d = Deployment(pipeline_parallel_size=2)
    first = rank_weights(config, d, tensor_parallel_size=2, stage=0)
    last = rank_weights(config, d, tensor_parallel_size=2, stage=1)
    assert "lm_head" not in first.by_role and "embedding" in first.by_role
    assert "embedding" not in last.by_role and "lm_head" in last.by_role
    for role in ("attention", "mlp"):
        assert first.by_role[role] + last.by_role[role] == whole.by_role[role]
    # The stages hold everything once, except the rotary table each stage keeps.
    assert first.total_bytes + last.total_bytes - whole.by_role["buffers"] == whole.total_bytes


def test_expert_parallel_splits_whole_experts_over_tp_times_dp() -> None:
    config = load_model_preset("qwen3-30b-a3b")  # 128 experts
    tp1 = formula_weights(config).by_role["experts"]
    ep = rank_weights(config, Deployment(enable_expert_parallel=True, data_parallel_size=2),
                      tensor_parallel_size=2)  # fmt: skip
    assert ep.by_role["experts"] == tp1 * 32 // 128
    plain = rank_weights(config, Deployment(), tensor_parallel_size=2)
    assert plain.by_role["attention"] == ep.by_role["attention"]  # attention stays TP-sharded
    assert local_experts(10, 4) == 3


def test_lora_stacks_follow_vllm_s_shapes() -> None:
    config = load_model_preset("llama-3.1-8b")
    lora = LoraSettings(max_loras=4, max_lora_rank=64)
    h, i, kv, r, n = 4096, 14336, 1024, 64, 4
    per_layer = (
        3 * n * r * h + n * r * (h + 2 * kv)  # qkv_proj: 3 A slices, B over q, k, v
        + n * r * (h + h)  # o_proj
        + 2 * n * r * h + n * r * 2 * i  # gate_up_proj
        + n * r * (i + h)  # down_proj
    )
    assert lora_buffer_bytes(config, lora, tensor_parallel_size=1) == 32 * per_layer * 2
    # Twice the rank, twice the stacks; TP shards the outputs and inputs but not the rank.
    double = LoraSettings(max_loras=4, max_lora_rank=128)
    assert lora_buffer_bytes(config, double, tensor_parallel_size=1) == 2 * 32 * per_layer * 2
    assert lora_buffer_bytes(config, lora, tensor_parallel_size=2) < 32 * per_layer * 2


def test_lora_costs_weights_and_graphs_not_for_cpu_loras() -> None:
    base = _estimate("llama-3.1-8b", None)
    lora = _estimate("llama-3.1-8b", Deployment.from_serve_args(enable_lora=True, max_loras=4,
                                                              max_lora_rank=64))  # fmt: skip
    cpu = _estimate("llama-3.1-8b", Deployment.from_serve_args(
        enable_lora=True, max_loras=4, max_lora_rank=64, max_cpu_loras=64))  # fmt: skip
    assert lora.weights.by_role["lora"] > 0
    assert lora.cudagraph_memory > base.cudagraph_memory
    assert cpu.kv_cache_bytes == lora.kv_cache_bytes < base.kv_cache_bytes


def test_ngram_costs_no_weights_but_the_rejection_sampler_pass() -> None:
    base = _estimate("llama-3.1-8b", None)
    ngram = _estimate("llama-3.1-8b", Deployment(speculative=Speculative("ngram", 4)))
    assert ngram.weights_memory == base.weights_memory
    rows = min(base.max_num_seqs, base.max_num_batched_tokens)
    extra = rejection_sampler_bytes(rows, 128256, 2)
    assert ngram.activation_peak == max(base.activation_peak, ngram.activation_peak)
    assert ngram.activation_peak - base.activation_peak <= extra
    assert ngram.activation_peak > base.activation_peak


def test_mtp_adds_its_layers_to_weights_and_to_the_kv_pool() -> None:
    d = Deployment.from_serve_args(speculative_config='{"method": "mtp", '
                                                      '"num_speculative_tokens": 1}')  # fmt: skip
    est = _estimate("deepseek-v3", d, tp=8, total=141 * GIB)
    base = _estimate("deepseek-v3", None, tp=8, total=141 * GIB)
    assert est.weights.by_role["draft"] > 0
    assert est.kv_spec is not None and est.kv_spec.total_num_layers == 62
    assert est.kv_spec.bytes_per_token == base_bytes_per_token("deepseek-v3", 8) * 62 // 61
    assert est.kv_cache_bytes < base.kv_cache_bytes
    # A model with no MTP layers is refused with the fix.
    with pytest.raises(InvalidInputError, match="num_nextn_predict_layers"):
        _estimate("llama-3.1-8b", d)


def base_bytes_per_token(name: str, tp: int) -> int:
    from memacct.model.spec import KVCacheSpec

    return KVCacheSpec.from_preset(name, tensor_parallel_size=tp).bytes_per_token


def test_eagle_needs_the_draft_config_and_shares_embedding_and_lm_head() -> None:
    target = load_model_preset("llama-3.1-8b")
    with pytest.raises(InvalidInputError, match="draft model's config.json"):
        _estimate("llama-3.1-8b", Deployment(speculative=Speculative("eagle", 3)))
    draft = {**target, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLMEagle"]}
    spec = Speculative("eagle", 3, draft_config=draft)
    w = draft_weight_bytes(target, spec, tensor_parallel_size=1)
    layer = (formula_weights(target).total_bytes - formula_weights(draft).total_bytes) // 31
    fc = 2 * 4096 * 4096 * 2
    own = formula_weights(draft).by_role
    # One layer, the fc and the draft's own rotary table and final norm; no embedding, no head.
    assert w == layer + fc + own["buffers"] + 4096 * 2
    est = _estimate("llama-3.1-8b", Deployment(speculative=spec))
    assert est.kv_spec is not None and est.kv_spec.total_num_layers == 33


def test_cpu_offload_moves_layer_weights_only() -> None:
    base = _estimate("llama-3.1-8b", None)
    off = _estimate("llama-3.1-8b", Deployment(cpu_offload_gb=4))
    moved = base.weights_memory - off.weights_memory
    gate_up = 2 * 14336 * 4096 * 2  # the largest parameter of a layer
    assert 4 * GIB <= moved < 4 * GIB + gate_up  # whole parameters, in vLLM's order
    # TheBuccaneer/vllm-offload-profiles (vLLM 0.17.1): "Model loading took 2.91 GiB memory"
    # for Llama-3.1-8B with --cpu-offload-gb 12 (14.99 GiB without).
    twelve = _estimate("llama-3.1-8b", Deployment(cpu_offload_gb=12))
    assert round(twelve.weights_memory / GIB, 2) == 2.91
    huge = _estimate("llama-3.1-8b", Deployment(cpu_offload_gb=1000))
    # The embedding, LM head, rotary table and final norm stay: they are no decoder layer's.
    kept = sum(base.weights.by_role[r] for r in ("embedding", "lm_head", "buffers")) + 4096 * 2
    assert huge.weights_memory == kept


# ------------------------------------------------------------------ multimodal


from _configs import QWEN25_VL_3B  # noqa: E402


def test_dummy_item_tokens_follow_the_processor_defaults() -> None:
    mm = Multimodal()
    # vLLM's own warning for Qwen2.5-VL at max_model_len 128000 (vllm-project/vllm#12604):
    # "{'image': 16384, 'video': 114688} are reserved for multi-modal embeddings".
    assert item_tokens(QWEN25_VL_3B, mm, "image", 128000)[0] == 16384
    assert item_tokens(QWEN25_VL_3B, mm, "video", 128000)[0] == 114688
    # get_image_size_with_most_features factors max_pixels // 28**2 merged tokens into the
    # closest height x width pair: 1280 = 32 x 40 (a square side would give 35 x 35 = 1225).
    small = Multimodal(mm_processor_kwargs={"max_pixels": 1280 * 28 * 28})
    assert item_tokens(QWEN25_VL_3B, small, "image", 128000)[0] == 32 * 40
    sized = Multimodal(limit_mm_per_prompt={"image": {"count": 1, "width": 512,
                                                      "height": 512}})  # fmt: skip
    assert item_tokens(QWEN25_VL_3B, sized, "image", 128000)[0] == (504 // 28) ** 2


def test_video_profiling_off_frees_most_of_the_encoder_pass() -> None:
    def est(d: Deployment | None) -> StartupEstimate:
        s = StartupSettings(max_model_len=128000, deployment=d)
        return STARTUP.estimate(QWEN25_VL_3B, total_memory=round(39.39 * GIB),
                                device_name="a100-40gb", settings=s)  # fmt: skip

    default = est(None)
    no_video = est(Deployment.from_serve_args(limit_mm_per_prompt='{"image": 1, "video": 0}'))
    skipped = est(Deployment.from_serve_args(skip_mm_profiling=True))
    assert default.activation_peak > no_video.activation_peak > skipped.activation_peak
    assert no_video.kv_cache_bytes - default.kv_cache_bytes > 10 * GIB
    assert any("dummy video" in n for n in default.notes)


def test_the_offline_plan_takes_the_deployment_and_pipeline_stages() -> None:
    from memacct.planner.offline import plan_offline

    config = load_model_preset("llama-3.1-70b")
    tp4 = plan_offline(config, device="h100", tensor_parallel_size=4, max_model_len=8192)
    pp = plan_offline(config, device="h100", tensor_parallel_size=2, pipeline_parallel_size=2,
                      max_model_len=8192)  # fmt: skip
    fp8 = plan_offline(config, device="h100", tensor_parallel_size=4, max_model_len=8192,
                       deployment=Deployment(quantization="fp8"))  # fmt: skip
    assert pp.fits and pp.num_blocks > 0
    assert fp8.num_blocks > 1.3 * tp4.num_blocks
    with pytest.raises(InvalidInputError, match="--engine vllm"):
        plan_offline(config, engine="sglang", device="h100", tensor_parallel_size=4,
                     deployment=Deployment(quantization="fp8"))  # fmt: skip


def test_pipeline_plan_gives_every_stage_the_fewest_blocks_any_stage_has_room_for() -> None:
    from memacct.model.spec import KVCacheSpec
    from memacct.planner.offline import plan_offline

    config = load_model_preset("llama-3.1-8b")  # 32 layers: 16 per stage
    plan = plan_offline(config, device="h100", pipeline_parallel_size=2, max_model_len=8192)
    total = plan.total_memory
    assert total is not None
    d = Deployment(pipeline_parallel_size=2)
    est = STARTUP.estimate(config, total_memory=total, device_name="h100-80gb",
                           settings=StartupSettings(max_model_len=8192, deployment=d))  # fmt: skip
    # The last stage holds the LM head and samples: it has the least room, and sets the blocks.
    assert est.weights == rank_weights(config, d, tensor_parallel_size=1, stage=1)
    first = rank_weights(config, d, tensor_parallel_size=1, stage=0)
    assert "lm_head" not in first.by_role and first.total_bytes < est.weights_memory
    block = KVCacheSpec.from_hf_config(config, pipeline_parallel_size=2).bytes_per_block(16)
    assert plan.num_blocks == est.kv_cache_bytes // block
    # Half the layers per stage: about twice the blocks of one GPU holding them all.
    one = plan_offline(config, device="h100", max_model_len=8192)
    assert 1.9 * one.num_blocks < plan.num_blocks < 2.3 * one.num_blocks


def test_speculative_decoding_captures_graphs_for_1_plus_k_tokens_per_request() -> None:
    # max_num_seqs 64: without a drafter vLLM captures up to 128 tokens; with 4 speculative
    # tokens up to min(64 x 5 x 2, 512) = 512 (vllm/config/vllm.py, _set_cudagraph_sizes).
    base = _estimate("llama-3.1-8b", None, max_num_seqs=64)
    ngram = _estimate("llama-3.1-8b", Deployment(speculative=Speculative("ngram", 4)),
                      max_num_seqs=64)  # fmt: skip
    as_many = _estimate("llama-3.1-8b", None, max_num_seqs=64 * 5)
    assert ngram.cudagraph_memory > base.cudagraph_memory
    assert ngram.cudagraph_memory == as_many.cudagraph_memory


def test_every_pipeline_stage_builds_the_vision_tower_and_splits_only_decoder_layers() -> None:
    d = Deployment(pipeline_parallel_size=2)
    whole = formula_weights(QWEN25_VL_3B)
    stages = [rank_weights(QWEN25_VL_3B, d, tensor_parallel_size=1, stage=i) for i in (0, 1)]
    for w in stages:
        assert w.by_role["vision"] == whole.by_role["vision"]
    assert sum(w.by_role["mlp"] for w in stages) == whole.by_role["mlp"]


def test_pipeline_stages_of_sliding_window_models_are_planned() -> None:
    from memacct.planner.offline import plan_offline

    for name in ("gemma-2-9b", "gpt-oss-20b"):
        plan = plan_offline(load_model_preset(name), device="h100", max_model_len=8192,
                            pipeline_parallel_size=2)  # fmt: skip
        assert plan.fits and plan.num_blocks > 0, name
