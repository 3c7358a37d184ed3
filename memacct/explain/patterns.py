"""The memory lines of each engine family, release by release, as regular expressions.

Each :class:`Pattern` names the figures its groups capture: a group ``<figure>``
holds the printed number and ``<figure>_u`` its unit where the line prints one
(else the pattern's ``unit``). The wording of each line is quoted from real
logs (tests/data/explain/, each with the issue it comes from) and, where noted,
from the engine's code:

vLLM
    V0 0.5-0.6.4 (vllm/worker/worker.py): "Loading model weights took 14.9888 GB",
    "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=...
    peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB
    gpu_memory_utilization=0.90", "# GPU blocks: 1952, # CPU blocks: 2048";
    0.6.5 (vllm-project/vllm#10511): a "Memory profiling results:" table, one
    ``name value`` a line; 0.6.6-0.8 V0 and 0.8-0.9 V1: "Memory profiling takes X
    seconds / the current vLLM instance can use total_gpu_memory (23.58GiB) x
    gpu_memory_utilization (0.99) = 23.35GiB / model weights take 21.21GiB;
    non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the
    rest of the memory reserved for KV Cache is 1.57GiB."; V1: "Model loading took
    2.8871 GiB and 5.97 seconds" (later "... GiB memory and ... seconds"), "Available
    KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens", "Maximum
    concurrency for 40,960 tokens per request: 14.92x", "Graph capturing finished in
    3 secs, took 0.71 GiB", 0.11 on (vllm/v1/worker/gpu_worker.py): "Free memory on
    device (43.91/44.4 GiB) on startup. Desired GPU memory utilization is (0.9, 39.96
    GiB). Actual usage is 13.72 GiB for weight, 1.83 GiB for peak activation, 0.04 GiB
    for non-torch memory, and 0.0 GiB for CUDAGraph memory. Replace ... with
    `--kv-cache-memory=26017729126` ... Current kv cache memory in use is 24.38 GiB."
vllm-ascend
    "Loading model weights took 27.5376 GB" (vllm_ascend/worker/model_runner_v1.py),
    "Available KV cache memory: -0.87 GiB" (vllm_ascend/worker/worker.py), on 310P
    "Total non KV cache memory: 1.65GiB" and "... (halved for workspace)"
    (vllm_ascend/_310p/worker_310p.py), and "Free memory on device (60.86/61.27 GiB)
    ... Actual usage: 1.14 GiB for weights, 0.22 GiB for peak activation, 0.13 GiB for
    non-torch memory, 0.04 GiB for NPU graph memory" (vllm_ascend/worker/worker.py).
SGLang
    "Init torch distributed ends. mem usage=1.96 GB", "Load weight end. type=...,
    dtype=..., avail mem=63.49 GB, mem usage=15.09 GB." (newer: "quant=fp8, fmt=e4m3,
    avail mem=..."), "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size:
    8.23 GB" (newer: "dtype: torch.bfloat16, #tokens: ..."; MLA: "KV size: X GB"),
    "Memory pool end. avail mem=11.87 GB", "Capture cuda graph end. Time elapsed:
    19.50 s. mem usage=6.19 GB. avail mem=5.24 GB.", "max_total_num_tokens=N,
    chunked_prefill_size=..., max_prefill_tokens=..., max_running_requests=M,
    context_len=L".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["ERRORS", "SGLANG", "VERSIONS", "VLLM", "Pattern"]

_N = r"-?\d+(?:\.\d+)?"  # a printed size: vllm-ascend prints a negative budget
_C = r"\d[\d,]*"  # a printed count, with or without thousands separators
_U = r"(?:GiB|GB|MiB|MB)"


@dataclass(frozen=True)
class Pattern:
    """One log line's wording and the figures it carries.

    Attributes:
        regex: the compiled expression; group ``<figure>`` captures a number and
            ``<figure>_u`` (optional) its unit.
        unit: the unit of the groups that print none (``""``: a count or a ratio).
        units: per figure, a unit that replaces ``unit``.
    """

    regex: re.Pattern[str]
    unit: str = "GiB"
    units: dict[str, str] = field(default_factory=dict)


def _p(text: str, unit: str = "GiB", **units: str) -> Pattern:
    return Pattern(re.compile(text), unit, units)


VLLM: tuple[Pattern, ...] = (
    _p(rf"(?:Model loading took|Loading model weights took) (?P<weights_memory>{_N}) ?"
       rf"(?P<weights_memory_u>{_U})"),
    _p(rf"total_gpu_memory \((?P<total_memory>{_N}) ?GiB\) x gpu_memory_utilization "
       rf"\((?P<gpu_memory_utilization>{_N})\) = (?P<requested_memory>{_N}) ?GiB",
       gpu_memory_utilization=""),
    _p(rf"model weights take\s+(?P<weights_memory>{_N}) ?GiB"),
    _p(rf"non_torch_memory(?: takes|=|\s+)\s*(?P<non_allocator_increase>{_N}) ?GiB"),
    _p(rf"PyTorch activation peak memory(?: takes)?\s+(?P<activation_peak>{_N}) ?GiB"),
    _p(rf"the rest of the memory reserved for KV Cache is (?P<kv_cache_bytes>{_N}) ?GiB"),
    _p(rf"total_gpu_memory(?:=|\s+)(?P<total_memory>{_N}) ?GiB"),
    _p(rf"peak_torch_memory=(?P<peak_torch_memory>{_N}) ?GiB"),
    _p(rf"kv_cache_size=(?P<kv_cache_bytes>{_N}) ?GiB"),
    # Only the profiling block's own print (0.6.4: after kv_cache_size=; 0.6.5: the table),
    # never a command line's or a config line's setting.
    _p(r"(?:kv_cache_size=\S+ gpu_memory_utilization=|^gpu_memory_utilization\s+)"
       r"(?P<gpu_memory_utilization>\d\.\d+)\s*$", ""),
    _p(rf"the current vLLM instance can use\s+(?P<requested_memory>{_N}) ?GiB"),
    _p(rf"available_kv_cache_memory\s+(?P<kv_cache_bytes>{_N}) ?GiB"),
    _p(rf"Available KV cache memory: (?P<kv_cache_bytes>{_N}) ?GiB"),
    _p(rf"Total non KV cache memory: (?P<non_kv_cache_memory>{_N}) ?GiB"),
    _p(rf"Free memory on device \((?P<free_memory_at_start>{_N})/(?P<total_memory>{_N}) GiB\)"
       rf" on startup(?:\. Desired| is less than desired) GPU memory utilization(?: is)? "
       rf"\((?P<gpu_memory_utilization>{_N}), (?P<requested_memory>{_N}) GiB\)",
       gpu_memory_utilization=""),
    _p(rf"Actual usage(?: is|:) (?P<weights_memory>{_N}) GiB for weights?, "
       rf"(?P<activation_peak>{_N}) GiB for peak activation, (?P<non_allocator_increase>{_N})"
       rf" GiB for non-torch memory(?:, (?:and )?(?P<cudagraph_memory>{_N}) GiB for "
       rf"(?:CUDAGraph|NPU graph) memory)?"),
    _p(r"`--kv-cache-memory=(?P<suggested_kv_cache_memory_bytes>\d+)`", "B"),
    _p(rf"Current kv cache memory in use is (?P<kv_cache_bytes>{_N}) GiB"),
    _p(rf"Current KV cache memory: (?P<kv_cache_bytes>{_N}) GiB"),
    # vLLM: "Initial free memory 78.50 GiB, reserved 20.00 GiB memory for KV Cache as
    # specified by kv_cache_memory_bytes config and skipped memory profiling"; vllm-ascend
    # without "memory" (vllm_ascend/worker/worker.py).
    _p(rf"Initial free memory (?P<free_memory_at_start>{_N}) ?GiB, reserved "
       rf"(?P<kv_cache_given>{_N}) ?GiB (?:memory )?for KV Cache as specified by "
       r"kv_cache_memory_bytes"),
    _p(rf"GPU KV cache size: (?P<num_tokens>{_C}) tokens", ""),
    _p(rf"Maximum concurrency for (?P<max_model_len>{_C}) tokens per request: "
       rf"(?P<max_concurrency>{_N})x", ""),
    _p(r"#?\s*(?:GPU|cuda|npu|NPU) blocks: (?P<num_blocks>\d+)", ""),
    _p(r"num_gpu_blocks is: (?P<num_blocks>\d+)", ""),
    _p(rf"Graph capturing finished in \d+ secs?, took (?P<cudagraph_memory>{_N}) ?"
       rf"(?P<cudagraph_memory_u>{_U})"),
    _p(rf"Estimated CUDA graph memory: (?P<cudagraph_estimate>{_N}) ?"
       rf"(?P<cudagraph_estimate_u>{_U})"),
    _p(rf"CUDA graph pool memory: (?P<cudagraph_memory>{_N}) GiB \(actual\), "
       rf"(?P<cudagraph_estimate>{_N}) GiB \(estimated\)"),
    _p(rf"The current --gpu-memory-utilization=(?P<gpu_memory_utilization>{_N}) is equivalent",
       ""),
    _p(r"with num_gpu_blocks_override=(?P<num_blocks>\d+)", ""),
    _p(r"Using max model len (?P<max_model_len>\d+)", ""),
    _p(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<max_num_batched_tokens>\d+)",
       ""),
)
"""vLLM's lines, V0 and V1, and the vllm-ascend and vllm-mindspore workers' (which keep
vLLM's wording or extend it)."""

SGLANG: tuple[Pattern, ...] = (
    _p(rf"Init torch distributed ends\. mem usage=(?P<non_allocator_increase>{_N}) GB", "GB"),
    _p(rf"Load weight begin\. avail mem=(?P<free_memory_at_start>{_N}) GB", "GB"),
    _p(rf"Load weight end\..*?mem usage=(?P<weights_memory>{_N}) GB", "GB"),
    _p(rf"Load weight end\..*?avail mem=(?P<free_memory_after_load>{_N}) GB", "GB"),
    _p(rf"KV Cache is allocated\..*?#tokens: (?P<num_tokens>{_C}), K size: (?P<k_size>{_N}) GB,"
       rf" V size: (?P<v_size>{_N}) GB", "GB", num_tokens=""),
    _p(rf"KV Cache is allocated\..*?#tokens: (?P<num_tokens>{_C}), KV size: "
       rf"(?P<kv_cache_bytes>{_N}) GB", "GB", num_tokens=""),
    _p(rf"Memory pool end\. avail mem=(?P<free_memory_after_pool>{_N}) GB", "GB"),
    _p(rf"Capture cuda graph end\..*?mem usage=(?P<cudagraph_memory>{_N}) GB", "GB"),
    _p(r"max_total_num_tokens=(?P<num_tokens>\d+)", ""),
    _p(r"max_running_requests=(?P<max_running_requests>\d+)", ""),
    _p(r"context_len=(?P<max_model_len>\d+)", ""),
    _p(rf"available_gpu_mem=(?P<free_memory_after_start>{_N}) GB", "GB"),
)

ERRORS: tuple[Pattern, ...] = (
    # torch's out-of-memory message names the device's total (any engine).
    _p(rf"total capacity of (?P<total_memory>{_N}) (?P<total_memory_u>{_U}) of which "
       rf"(?P<free_memory_at_oom>{_N}) (?P<free_memory_at_oom_u>{_U}) is free"),
    _p(r"max seq len \((?P<max_model_len>\d+)\) is larger than the maximum number of tokens "
       r"that can be stored in KV cache \((?P<num_tokens>\d+)\)", ""),
    _p(rf"max seq len \((?P<max_model_len>\d+)\), \((?P<kv_cache_needed>{_N}) GiB KV cache is "
       rf"needed, which is larger than the available KV cache memory \((?P<kv_cache_bytes>{_N})"
       rf" GiB\)(?:\. Based on the available memory, the estimated maximum model length is "
       rf"(?P<estimated_max_model_len>\d+))?", "GiB", max_model_len="",
       estimated_max_model_len=""),
)
"""The refusals: the engine says which figure stopped it."""

VERSIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm", re.compile(r"vLLM API server version v?(?P<v>\d+\.\d+[\w.+]*)")),
    ("vllm", re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(?P<v>\d+\.\d+[\w.+]*)\)")),
    ("vllm", re.compile(r"vLLM Version\s*:\s*v?(?P<v>\d+\.\d+[\w.+]*)")),  # collect_env
    ("vllm", re.compile(r"vllm/vllm-openai:v(?P<v>\d+\.\d+[\w.]*)")),
    ("vllm", re.compile(r"(?<![\w-])vllm==(?P<v>\d+\.\d+[\w.+]*)")),
    ("vllm-ascend", re.compile(r"vLLM Ascend Version\s*:\s*v?(?P<v>\d+\.\d+[\w.+]*)")),
    ("vllm-ascend", re.compile(r"vllm-ascend:v(?P<v>\d+\.\d+[\w.]*)")),
    ("vllm-ascend", re.compile(r"vllm[-_]ascend==(?P<v>\d+\.\d+[\w.+]*)")),
    ("vllm-mindspore", re.compile(r"vllm[-_]mindspore[=: ]+v?(?P<v>\d+\.\d+[\w.]*)")),
    ("sglang", re.compile(r"lmsysorg/sglang:v(?P<v>\d+\.\d+[\w.]*)")),
    ("sglang", re.compile(r"sglang(?:==| version:? )v?(?P<v>\d+\.\d+[\w.]*)")),
    ("sglang", re.compile(r"(?m)^\s*sglang:\s*v?(?P<v>\d+\.\d+[\w.]*)")),  # check_env
)
"""Where a log names its release, in order: the engine's own lines, ``collect_env`` or
``check_env``, the container image, ``pip`` pins. A vLLM plugin (vllm-ascend,
vllm-mindspore) names its own release first, else the vLLM it runs on."""
