"""Engine start-up models and device presets, offline."""

from __future__ import annotations

import pytest

from memacct.devices import DEVICE_INFO, parse_memory_size, resolve_device
from memacct.engines.base import StartupSettings
from memacct.engines.sglang.startup import (
    CONTEXT_BYTES,
    SglangSettings,
    default_batch,
    default_mem_fraction_static,
    prefill_graph_sizes,
)
from memacct.engines.sglang.startup import STARTUP as SGLANG
from memacct.engines.vllm.defaults import batch_defaults, capture_sizes, full_capture_sizes
from memacct.engines.vllm.releases import default_sampler, parse_version
from memacct.engines.vllm.startup import STARTUP as VLLM
from memacct.engines.vllm_ascend.startup import STARTUP as ASCEND
from memacct.errors import InvalidInputError
from memacct.planner import load_model_preset
from memacct.planner.offline import plan_offline, position_limit
from memacct.units import MiB

GIB = 2**30
H100 = DEVICE_INFO["h100-80gb"].total_bytes


@pytest.mark.parametrize(
    ("device", "expected"),
    [("h100-80gb", (8192, 1024)), ("h200-141gb", (8192, 1024)), ("a100-80gb", (2048, 256)),
     ("l4-24gb", (2048, 256)), ("rtx-4090-24gb", (2048, 256))],
)  # fmt: skip
def test_vllm_serve_defaults_follow_the_device_class(
    device: str, expected: tuple[int, int]
) -> None:
    assert batch_defaults(DEVICE_INFO[device].total_bytes, device) == expected


def test_capture_sizes_stop_at_twice_the_sequences_or_512() -> None:
    assert capture_sizes(4) == [1, 2, 4, 8]
    sizes = capture_sizes(1024)
    assert sizes[-1] == 512 and len(sizes) == 51
    # "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" at vLLM's 256-sequence default.
    assert (len(capture_sizes(256)), len(full_capture_sizes(256))) == (51, 35)


def test_the_sort_sampler_dominates_the_profile_run_and_is_not_split_by_tp() -> None:
    config = load_model_preset("llama-3.1-70b")
    one, two = (
        VLLM.estimate(config, total_memory=H100, device_name="h100-80gb",
                      settings=StartupSettings(tensor_parallel_size=tp, engine_version="0.11.1"))
        for tp in (4, 8)
    )  # fmt: skip
    # 1024 rows x 128256 logits x 38 bytes, on every rank.
    assert one.activation_peak == pytest.approx(1024 * 128256 * 38, rel=0.03)
    assert two.activation_peak == pytest.approx(one.activation_peak, rel=0.01)


@pytest.mark.parametrize(
    ("version", "env", "device", "expected"),
    [((0, 8), None, "", "sort"), ((0, 10), None, "", "flashinfer"),
     ((0, 11), None, "", "flashinfer"), ((0, 16), None, "", "sort"),
     ((0, 17), None, "", "triton"), ((0, 20), None, "", "triton"),
     ((0, 21), None, "", "flashinfer"), ((0, 33), None, "", "flashinfer"),
     (None, None, "", "flashinfer"), ((0, 10), True, "", "flashinfer"),
     ((0, 16), True, "", "flashinfer"), ((0, 33), False, "", "triton"),
     ((0, 10), False, "", "sort"), ((0, 11), False, "", "sort"),
     ((0, 33), None, "mi300x-192gb", "triton"), ((0, 10), None, "mi300x-192gb", "sort")],
)  # fmt: skip
def test_the_default_sampler_follows_the_release_and_the_environment(
    version: tuple[int, int] | None, env: bool | None, device: str, expected: str
) -> None:
    # vllm/v1/sample/ops/topk_topp_sampler.py and vllm/envs.py of each release; 0.9-0.11.0
    # with the vllm/vllm-openai image, which installs flashinfer.
    assert default_sampler(version, flashinfer_env=env, device_name=device) == expected


@pytest.mark.parametrize(
    ("release", "expected"),
    [("0.9.2", "flashinfer"), ("0.10.1.1", "flashinfer"), ("0.11.0", "flashinfer"),
     ("0.11.x", "flashinfer"), ("0.11.1", "sort"), ("0.11.2", "sort"), ("v0.12.0", "sort")],
)  # fmt: skip
def test_the_sampler_changes_within_0_11_at_the_patch_release(release: str, expected: str) -> None:
    # 0.11.0 still samples with FlashInfer when it is installed; 0.11.1 makes it opt-in
    # (VLLM_USE_FLASHINFER_SAMPLER=1) though its wheel requires flashinfer-python.
    version = parse_version(release)
    assert default_sampler(version, device_name="a100-80gb", release=release) == expected
    est = VLLM.estimate(load_model_preset("qwen2.5-7b"), total_memory=H100,
                        device_name="a100-80gb", settings=StartupSettings(engine_version=release))
    assert est.sampler == expected


@pytest.mark.parametrize(
    ("version", "device", "expected"),
    [((0, 20), "v100-32gb", "triton"), ((0, 21), "v100-32gb", "triton"),
     ((0, 25), "v100-16gb", "triton"), ((0, 25), "t4-16gb", "flashinfer"),
     ((0, 33), "t4-16gb", "triton"), ((0, 21), "a100-80gb", "flashinfer")],
)  # fmt: skip
def test_from_0_21_the_sampler_checks_the_gpu_s_compute_capability(
    version: tuple[int, int], device: str, expected: str
) -> None:
    # 0.21's TopKTopPSampler asks FlashInferBackend.supports_compute_capability (7.5-12.1)
    # and falls back to the native path below it; 0.33 raises the floor to 8.0.
    assert default_sampler(version, device_name=device) == expected
    if version >= (0, 21) and expected == "triton":
        with pytest.raises(InvalidInputError, match="VLLM_USE_FLASHINFER_SAMPLER=1"):
            default_sampler(version, flashinfer_env=True, device_name=device)


def test_each_sampler_path_holds_the_bytes_its_tensors_take() -> None:
    # Qwen2.5-7B on an A100: 256 rows x 152064 logits; the sampler dominates the forward.
    config = load_model_preset("qwen2.5-7b")
    total = DEVICE_INFO["a100-80gb"].total_bytes
    peaks = {}
    for sampler in ("sort", "flashinfer", "triton"):
        est = VLLM.estimate(config, total_memory=total, device_name="a100-80gb",
                            settings=StartupSettings(sampler=sampler))  # fmt: skip
        assert est.sampler == sampler
        peaks[sampler] = est.activation_peak
    logits = 256 * 152064
    hidden = 2048 * 3584 * 2
    # FlashInfer: bf16 logits (2) + float32 logits, masked logits and probs (3 x 4).
    assert peaks["flashinfer"] == hidden + logits * 14
    # The sort holds 24 bytes more per logit: int64 indices, sorted values, masks, scratch.
    assert peaks["sort"] - peaks["flashinfer"] == logits * 24
    # Triton: the same 14 bytes and the kernel's 80 MiB of buffers.
    assert peaks["triton"] - peaks["flashinfer"] == 80 * 2**20


def test_the_triton_path_takes_the_sort_below_eight_rows() -> None:
    config = load_model_preset("qwen2.5-7b")
    est = {
        sampler: VLLM.estimate(config, total_memory=H100, device_name="h100-80gb",
                               settings=StartupSettings(sampler=sampler, max_num_seqs=4,
                                                        max_num_batched_tokens=4))
        for sampler in ("sort", "triton")
    }  # fmt: skip
    assert est["triton"].activation_peak == est["sort"].activation_peak


def test_an_unknown_sampler_is_refused_with_the_choices() -> None:
    with pytest.raises(InvalidInputError, match="sampler 'topk' .* sort, triton, flashinfer"):
        VLLM.estimate(load_model_preset("qwen3-8b"), total_memory=H100,
                      settings=StartupSettings(sampler="topk"))  # fmt: skip
    with pytest.raises(InvalidInputError, match="--sampler flashinfer .* vllm-ascend"):
        plan_offline(load_model_preset("qwen3-8b"), engine="vllm-ascend", sampler="flashinfer")


def test_the_plan_notes_the_default_sampler_and_how_to_change_it() -> None:
    plan = plan_offline(load_model_preset("qwen3-8b"), device="a100-80gb", engine_version="0.10.1")
    assert plan.budget is not None and plan.budget.sampler == "flashinfer"
    assert any("flashinfer (vLLM 0.10.1's default with its vllm/vllm-openai image" in n
               and "--sampler sort" in n for n in plan.notes)  # fmt: skip
    env = plan_offline(load_model_preset("qwen3-8b"), device="a100-80gb", engine_version="0.10.1",
                       flashinfer_sampler_env=False)  # fmt: skip
    assert env.budget is not None and env.budget.sampler == "sort"
    assert env.kv_cache_bytes < plan.kv_cache_bytes
    pip = plan_offline(load_model_preset("qwen3-8b"), device="a100-80gb", engine_version="0.10.1",
                       sampler="sort")  # fmt: skip
    assert pip.kv_cache_bytes == env.kv_cache_bytes


def test_releases_with_the_triton_sampler_hold_less_and_charge_graphs() -> None:
    config = load_model_preset("llama-3.1-8b")
    old = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb",
                        settings=StartupSettings(engine_version="0.11.1"))  # fmt: skip
    new = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb",
                        settings=StartupSettings(engine_version="0.17.0"))  # fmt: skip
    assert new.sampler == "triton" and old.sampler == "sort"
    assert new.activation_peak < 0.5 * old.activation_peak
    newest = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb")
    assert newest.cudagraph_charged and not new.cudagraph_charged and not old.cudagraph_charged


def test_non_torch_growth_rises_under_tensor_parallelism() -> None:
    config = load_model_preset("qwen3-8b")
    one = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb")
    two = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb",
                        settings=StartupSettings(tensor_parallel_size=2))  # fmt: skip
    assert one.non_allocator_increase < two.non_allocator_increase


def test_cuda_graphs_are_charged_unless_eager() -> None:
    config = load_model_preset("qwen2.5-7b")
    graphs = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb")
    eager = VLLM.estimate(config, total_memory=H100, device_name="h100-80gb",
                          settings=StartupSettings(enforce_eager=True))  # fmt: skip
    assert graphs.cudagraph_memory > 0 and graphs.cudagraph_charged
    assert eager.cudagraph_memory == 0
    assert eager.kv_cache_bytes - graphs.kv_cache_bytes == graphs.cudagraph_memory


def test_the_kv_budget_is_the_engines_arithmetic() -> None:
    est = VLLM.estimate(load_model_preset("qwen3-8b"), total_memory=H100, device_name="h100-80gb")
    assert est.kv_cache_bytes == int(H100 * 0.9) - est.non_kv_cache_memory


def test_vllm_ascend_samples_without_sort_buffers_and_plans_graphs_it_does_not_charge() -> None:
    config = load_model_preset("qwen2.5-7b")
    total = DEVICE_INFO["ascend-910b-64gb"].total_bytes
    npu = ASCEND.estimate(config, total_memory=total, device_name="ascend-910b-64gb")
    gpu = VLLM.estimate(config, total_memory=total, device_name="ascend-910b-64gb")
    assert npu.activation_peak < gpu.activation_peak
    assert (npu.max_num_batched_tokens, npu.max_num_seqs) == (2048, 256)
    # vllm-ascend's worker captures ACL graphs after the KV cache (compile_or_warm_up_model),
    # at vLLM's capture sizes, and never takes them off the budget.
    assert npu.cudagraph_memory == gpu.cudagraph_memory > 0
    assert not npu.cudagraph_charged
    assert npu.kv_cache_bytes == npu.requested_memory - (
        npu.weights_memory + npu.activation_peak + npu.non_allocator_increase)
    assert any(n.startswith("ACL graphs: ") and "not taken off it" in n for n in npu.notes)
    eager = ASCEND.estimate(config, total_memory=total, device_name="ascend-910b-64gb",
                            settings=StartupSettings(enforce_eager=True))  # fmt: skip
    assert eager.cudagraph_memory == 0 and eager.kv_cache_bytes == npu.kv_cache_bytes
    assert not any(n.startswith("ACL graphs") for n in eager.notes)


def test_vllm_ascend_enforce_eager_is_taken_and_graphs_beyond_the_headroom_are_flagged() -> None:
    config = load_model_preset("qwen2.5-7b")
    plan = plan_offline(config, engine="vllm-ascend", device="ascend-910b-64gb",
                        enforce_eager=True)  # fmt: skip
    assert plan.kv_cache_bytes > 0
    # Llama-3.1-70B at TP4: 86 graphs of 80 layers hold 1.9 GiB, more than the profile's
    # activations (0.37 GiB) and the 2% above the utilization (1.2 GiB) leave.
    tight = ASCEND.estimate(load_model_preset("llama-3.1-70b"),
                            total_memory=DEVICE_INFO["ascend-910b-64gb"].total_bytes,
                            device_name="ascend-910b-64gb",
                            settings=StartupSettings(tensor_parallel_size=4,
                                                     gpu_memory_utilization=0.98))  # fmt: skip
    headroom = tight.total_memory - tight.requested_memory
    assert tight.cudagraph_memory > tight.activation_peak + headroom
    assert any("the capture may run out of memory" in n for n in tight.notes)


def test_vllm_ascend_names_its_releases_and_their_vllm_beside_a_refusal() -> None:
    from memacct.engines.accepts import check_release

    check_release("vllm-ascend", "0.23.0")
    for release in ("0.18.0", "0.33"):
        pins = r"main \(vLLM v0\.27\.1\).*v0\.23\.0 \(vLLM v0\.23\.0\)"
        with pytest.raises(InvalidInputError, match=pins):
            check_release("vllm-ascend", release)


def test_sglang_pool_is_the_static_fraction_less_weights_and_context() -> None:
    est = SGLANG.estimate(load_model_preset("llama-3.1-8b"), total_memory=H100,
                          settings=SglangSettings(mem_fraction_static=0.8))  # fmt: skip
    assert est.kv_cache_bytes == int(H100 * 0.8) - est.weights_memory - est.non_allocator_increase


def test_devices_resolve_by_short_names_and_sizes() -> None:
    assert resolve_device("RTX4090").name == "rtx-4090-24gb"
    assert resolve_device("910b4").name == "ascend-910b4-32gb"
    assert resolve_device("h100").name == "h100-80gb"
    assert parse_memory_size("24GiB") == 24 * GIB
    assert parse_memory_size("80 GB") == 80 * 10**9
    with pytest.raises(InvalidInputError, match="unknown device 'tpu'"):
        resolve_device("tpu")


def test_every_preset_names_its_source() -> None:
    for info in DEVICE_INFO.values():
        assert info.kind in ("reading", "derived") and info.source


def test_position_limit_as_vllm_derives_it() -> None:
    assert position_limit(load_model_preset("gpt-oss-20b")) == 131072  # yarn 4096 x 32
    assert position_limit(load_model_preset("qwen3-8b")) == 40960
    assert position_limit(load_model_preset("llama-3.1-8b")) == 131072  # llama3: stated


def test_max_model_len_beyond_the_position_limit_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="beyond qwen3-8b's position limit"):
        plan_offline(load_model_preset("qwen3-8b"), model_name="qwen3-8b", max_model_len=50000)


def test_a_request_longer_than_the_cache_does_not_fit_and_says_the_longest() -> None:
    plan = plan_offline(load_model_preset("llama-3.1-8b"), device="rtx-4090-24gb")
    assert not plan.fits and "the longest that fits is" in plan.verdict
    assert any("--max-model-len" in s for s in plan.suggestions)


def test_quantized_gpt_oss_fits_on_an_l4() -> None:
    plan = plan_offline(load_model_preset("gpt-oss-20b"), device="l4")
    assert plan.fits and plan.weights_memory < 15 * GIB and plan.spec.kv_dtype == "bfloat16"


def test_sglang_plan_reads_the_utilization_as_mem_fraction_static() -> None:
    config = load_model_preset("qwen3-8b")
    low = plan_offline(config, engine="sglang", device="h100", gpu_memory_utilization=0.7)
    high = plan_offline(config, engine="sglang", device="h100", gpu_memory_utilization=0.8)
    # The pool is (total - context) x fraction - weights: the context is in SGLang's baseline.
    context = CONTEXT_BYTES[0]
    assert high.kv_cache_bytes - low.kv_cache_bytes == (
        int(H100 * 0.8) - round(context * 0.8) - int(H100 * 0.7) + round(context * 0.7)
    )


def test_an_unknown_engine_is_named() -> None:
    with pytest.raises(InvalidInputError, match="engine 'tgi' is not known"):
        plan_offline(load_model_preset("qwen3-8b"), engine="tgi")


@pytest.mark.parametrize(
    ("mib", "tp", "expected"),
    [(15360, 1, (2048, 8)), (24564, 1, (4096, 48)), (24564, 4, (4096, 160)),
     (40960, 1, (4096, 32)), (81559, 1, (8192, 256)), (81559, 8, (8192, 512)),
     (143771, 1, (8192, 256)), (183359, 1, (16384, 512))],
)  # fmt: skip
def test_sglang_batch_defaults_follow_the_gpu_size(
    mib: int, tp: int, expected: tuple[int, int]
) -> None:
    # python/sglang/srt/arg_groups/memory_hook.py, handle_gpu_memory_settings (0.5.23).
    assert default_batch(mib, tp) == expected


def test_sglang_default_mem_fraction_is_its_reserve_arithmetic() -> None:
    # H100 (nvidia-smi 81559 MiB), TP 1: 512 + 1.5 x 8192 + 1024 / 8 + 2 x 256 decode graphs
    # + 8 x 58 prefill graph sizes = 13904 MiB reserved.
    assert len(prefill_graph_sizes(8192)) == 58
    assert default_mem_fraction_static(81559) == round((81559 - 13904) / 81559, 3) == 0.83
    # A small chunk on a GPU above 60 GiB hits the 10 GiB floor.
    assert default_mem_fraction_static(81559, chunked_prefill_size=2048) == round(
        (81559 - 10240) / 81559, 3
    )
    # No graphs: no graph reserve (24 GiB GPU: 512 + 6144 + 128).
    assert default_mem_fraction_static(24564, cuda_graphs=False) == round(
        (24564 - 6784) / 24564, 3
    )
    # MLA attention reserves 1.5 GiB for prefill graphs instead of 8 MiB per size.
    assert default_mem_fraction_static(81559, mla=True) == round(
        (81559 - (512 + 12288 + 128 + 512 + 1536)) / 81559, 3
    )
    # A vision tower twice ViT-L/14's size takes 0.95 x 0.9 of the fraction.
    vit = {"num_hidden_layers": 48, "hidden_size": 1024}
    assert default_mem_fraction_static(81559, vision_config=vit) == pytest.approx(0.83 * 0.855)


def test_sglang_takes_its_own_fraction_unless_one_is_given() -> None:
    config = load_model_preset("llama-3.1-8b")
    est = SGLANG.estimate(config, total_memory=H100)
    assert est.gpu_memory_utilization == default_mem_fraction_static(H100 / 2**20)
    assert est.max_num_batched_tokens == 8192
    assert est.kv_cache_bytes == int(H100 * est.gpu_memory_utilization) - est.weights_memory - (
        est.non_allocator_increase
    )
    plan = plan_offline(config, engine="sglang", device="h100-80gb", max_model_len=8192)
    assert plan.gpu_memory_utilization == est.gpu_memory_utilization
    given = plan_offline(config, engine="sglang", device="h100-80gb", max_model_len=8192,
                         gpu_memory_utilization=0.9)  # fmt: skip
    assert given.gpu_memory_utilization == 0.9 and given.kv_cache_bytes > plan.kv_cache_bytes


def test_an_activation_that_does_not_fit_asks_for_a_smaller_batch_not_more_ranks() -> None:
    config = load_model_preset("qwen2.5-7b")
    plan = plan_offline(config, device="h100-80gb", max_num_batched_tokens=100_000_000)
    assert not plan.fits and "activation peak" in plan.verdict
    first = plan.suggestions[0]
    assert first.startswith("lower --max-num-batched-tokens to ")
    assert not any("--tensor-parallel-size" in s for s in plan.suggestions)
    # The suggested budget fits, and twice it does not (the search halves from the request).
    tokens = int(first.split(" to ")[1].split(" ")[0].replace(",", ""))
    assert plan_offline(config, device="h100-80gb", max_num_batched_tokens=tokens).fits
    assert not plan_offline(config, device="h100-80gb", max_num_batched_tokens=2 * tokens).fits


def test_weights_that_do_not_fit_still_ask_for_more_ranks() -> None:
    plan = plan_offline(load_model_preset("llama-3.1-70b"), device="rtx-4090-24gb")
    assert not plan.fits and "weights alone" in plan.verdict
    assert any(s.startswith("raise --tensor-parallel-size") for s in plan.suggestions)
    assert not any("--max-num-batched-tokens" in s for s in plan.suggestions)


def test_non_torch_growth_follows_release_tp_and_device() -> None:
    from memacct.engines.vllm.nontorch import non_torch_bytes
    from memacct.engines.vllm.releases import (
        NON_TORCH_TP1_BYTES,
        NON_TORCH_TP1_BYTES_0_18,
        NON_TORCH_TP_BYTES,
        NON_TORCH_TP_FUSED_BYTES,
        flashinfer_allreduce_workspace_bytes,
    )

    assert non_torch_bytes((0, 11), 1, "h100-sxm") == NON_TORCH_TP1_BYTES
    assert non_torch_bytes((0, 17), 1, "h100-sxm") == NON_TORCH_TP1_BYTES
    assert non_torch_bytes((0, 18), 1, "h100-sxm") == NON_TORCH_TP1_BYTES_0_18
    assert non_torch_bytes(None, 1, "h100-sxm") == NON_TORCH_TP1_BYTES_0_18  # 0.33
    # Boards whose NCCL sizes are not derived keep the measured TP figures.
    assert non_torch_bytes((0, 11), 2, "h100-pcie") == NON_TORCH_TP_BYTES
    assert non_torch_bytes((0, 19), 2, "h100-pcie") == NON_TORCH_TP_FUSED_BYTES
    assert non_torch_bytes(None, 4, "b200") == NON_TORCH_TP_FUSED_BYTES
    # The fusion needs compute capability 9.0 or 10.x: not an A100, L40S or RTX 5090.
    for device in ("a100-80gb", "l40s", "rtx-5090"):
        assert non_torch_bytes((0, 19), 2, device) == NON_TORCH_TP_BYTES, device
    # FlashInfer 0.6.6's workspace at Llama-3.1-8B's sizes: TP2 x 8192 tokens, TP4 x 256.
    assert flashinfer_allreduce_workspace_bytes(2, 4096, 8192) == 514 * MiB
    assert flashinfer_allreduce_workspace_bytes(4, 4096, 256) == 34 * MiB
