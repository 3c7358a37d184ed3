"""The command line (or the pod's resources) that realises a plan: ``memacct plan --emit``.

Pure functions over a :class:`~memacct.planner.result.KVCachePlan` and the
:class:`~memacct.planner.options.PlanOptions` it was made with:

* :func:`emit` with ``"vllm"``: ``vllm serve MODEL ...`` (``vllm-mindspore serve`` for
  vllm-mindspore; vllm-ascend is a plugin of ``vllm serve``), every setting that moves
  memory in ``vllm serve``'s own spelling, the values the plan resolved (the
  ``--max-model-len`` an auto-fit found, the batch limits the engine's defaults gave) so
  the engine starts with what was planned whatever its defaults;
* ``"sglang"``: ``python -m sglang.launch_server --model-path MODEL ...`` in SGLang's
  spelling (:data:`memacct.engines.spellings.ENGINE_FLAGS`);
* ``"k8s"``: the YAML of a container's resources (:func:`pod_resources`).

The flags are spelt by the one table the CLI reads them with
(:mod:`memacct.engines.spellings`), so ``memacct plan`` parses what it emits and plans the
same numbers (tests/test_emit.py); tools/emit_check.py checks the vLLM line against vLLM's
own parser (tests/data/golden/emit-vllm-0.33.json).

Example::

    >>> from memacct.planner.offline import plan_offline
    >>> opts = PlanOptions(device="h100", tensor_parallel_size=2, max_model_len=8192)
    >>> plan = plan_offline("qwen2.5-7b", opts)
    >>> emit("vllm", plan, opts, model="Qwen/Qwen2.5-7B-Instruct").text  # doctest: +ELLIPSIS
    'vllm serve Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 2 --max-model-len 8192 ...'
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.engines.spellings import engine_flag
from memacct.errors import InvalidInputError
from memacct.planner.options import PlanOptions
from memacct.planner.result import KVCachePlan

__all__ = [
    "EMIT_TARGETS", "FLAG_SINCE", "KV_CACHE_DTYPE_SINCE", "LIMIT_MM_JSON_SINCE", "Emitted", "emit",
    "pod_resources", "release_key", "serve_argv",
]

EMIT_TARGETS = ("vllm", "sglang", "k8s")
"""What ``--emit`` writes: a ``vllm serve`` line, an SGLang launch line, a pod's resources."""

FLAG_SINCE: dict[str, tuple[int, ...]] = {
    "--speculative-config": (0, 8, 2),
    "--data-parallel-size": (0, 8, 3),
    "--skip-mm-profiling": (0, 10, 1),
    "--kv-cache-memory-bytes": (0, 10, 2),
}
"""The ``vllm serve`` flags the emitter writes that the oldest release memacct models (0.8.0)
lacks, with the first release whose ``vllm/engine/arg_utils.py`` registers each; every
other flag written is in every release from 0.8.0 to 0.33.0 (tools/emit_releases.py read
36 releases: tests/data/golden/emit-vllm-releases.json). An older release is refused."""

KV_CACHE_DTYPE_SINCE: dict[str, tuple[int, ...]] = {
    "fp8_inc": (0, 10, 0),
    "bfloat16": (0, 11, 0),
    "float16": (0, 18, 0),
}
"""``--kv-cache-dtype`` names newer than 0.8.0, from the release whose ``CacheDType``
(``vllm/config/cache.py``; before it ``arg_utils.py``'s ``choices``) first lists each (the
same 36 releases: 0.17.1 was not read, so ``float16`` is taken from 0.18.0)."""

LIMIT_MM_JSON_SINCE = (0, 8, 5)
"""``--limit-mm-per-prompt`` is parsed as JSON from 0.8.5; before it, as ``image=2,video=1``
(``arg_utils.py``'s ``nullable_kvs``), the form the emitter writes there."""

_SERVE = {"vllm": ("vllm", "serve"), "vllm-ascend": ("vllm", "serve"),
          "vllm-mindspore": ("vllm-mindspore", "serve")}  # fmt: skip
_SGLANG = ("python", "-m", "sglang.launch_server")


@dataclass(frozen=True)
class Emitted:
    """What ``--emit`` prints.

    Attributes:
        target: ``vllm``, ``sglang`` or ``k8s``.
        argv: the command's words (``vllm``, ``serve``, the model, the flags); empty for k8s.
        env: environment variables the command needs, ``(name, value)`` each.
        text: the shell line (the variables first), or the YAML.
        notes: what the command cannot say itself, one sentence each.
    """

    target: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    text: str
    notes: tuple[str, ...] = ()


def emit(target: str, plan: KVCachePlan, options: PlanOptions, *, model: str,
         revision: str | None = None) -> Emitted:
    """The command line (``vllm``, ``sglang``) or pod resources (``k8s``) of ``plan``.

    Args:
        target: one of :data:`EMIT_TARGETS`.
        plan: a plan that fits (one that does not has no command that starts).
        options: the options ``plan`` was made with.
        model: the model as given to ``memacct plan --model`` (a Hub id or a path the
            engine loads; a memacct preset is named in the notes).
        revision: ``--revision``, if one was given.

    Raises:
        InvalidInputError: an unknown target, a plan that does not fit, a target of
            another engine than the plan's, or a flag the planned release lacks.
    """
    if target not in EMIT_TARGETS:
        raise InvalidInputError(
            f"--emit {target!r} is not a target: give one of {', '.join(EMIT_TARGETS)}"
        )
    if not plan.fits:
        raise InvalidInputError(
            f"--emit {target}: the plan does not fit ({plan.verdict}), so no command starts "
            "it: change what the plan suggests first"
        )
    if target == "k8s":
        return pod_resources(plan, options)
    engine = options.engine
    if (target == "sglang") != (engine == "sglang"):
        want = "--engine sglang" if target == "sglang" else "--engine vllm (or vllm-ascend)"
        raise InvalidInputError(
            f"--emit {target} writes the command of a {target} plan and this plan is "
            f"{engine}'s: plan with {want}, or emit {'sglang' if engine == 'sglang' else 'vllm'}"
        )
    argv, env, notes = serve_argv(plan, options, model=model, revision=revision)
    words = [f"{name}={shlex.quote(value)}" for name, value in env]
    text = " ".join([*words, *(shlex.quote(word) for word in argv)])
    return Emitted(target, argv, env, text, notes)


def serve_argv(
    plan: KVCachePlan, options: PlanOptions, *, model: str, revision: str | None = None
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The engine's command words, environment and notes for ``plan`` (see :func:`emit`)."""
    engine = options.engine
    notes = list(_model_notes(model))
    if engine == "sglang":
        flags, env = _sglang_flags(plan, options, notes)
        head: tuple[str, ...] = (*_SGLANG, engine_flag(engine, "model"), model)
    else:
        flags, env = _vllm_flags(plan, options, notes)
        flags = _for_release(plan.engine_version, flags)
        head = (*_SERVE[engine], model)
    if revision is not None:
        flags[:0] = ["--revision", revision]
    return (*head, *flags), tuple(env), tuple(notes)


def _model_notes(model: str) -> tuple[str, ...]:
    from memacct.model.sources.presets import model_presets

    if model in model_presets():
        return (f"{model} is memacct's preset: put the checkpoint's Hub id or directory in "
                "its place",)  # fmt: skip
    if model.endswith(".json"):
        return (f"{model} is a config file: the engine loads the checkpoint directory "
                "beside it",)  # fmt: skip
    return ()


def _number(value: float) -> str:
    """A float as the shortest text that reads back as the same float."""
    return repr(float(value))


def _common_flags(plan: KVCachePlan, options: PlanOptions, engine: str) -> list[str]:
    """The parallelism, length, batch and cache flags every engine spells."""
    flags = [engine_flag(engine, "tensor_parallel_size"), str(options.tensor_parallel_size)]
    if options.pipeline_parallel_size != 1:
        flags += [engine_flag(engine, "pipeline_parallel_size"),
                  str(options.pipeline_parallel_size)]  # fmt: skip
    flags += [engine_flag(engine, "max_model_len"), str(plan.max_model_len)]
    if plan.max_num_seqs is not None and engine != "sglang":
        flags += ["--max-num-seqs", str(plan.max_num_seqs)]
    if plan.max_num_batched_tokens is not None:
        flags += [engine_flag(engine, "max_num_batched_tokens"), str(plan.max_num_batched_tokens)]
    if options.kv_cache_dtype != "auto":
        flags += ["--kv-cache-dtype", options.kv_cache_dtype]
    if options.block_size is not None:
        flags += [engine_flag(engine, "block_size"), str(options.block_size)]
    return flags


def _vllm_flags(plan: KVCachePlan, options: PlanOptions,
                notes: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """``vllm serve``'s flags and environment for the plan."""
    flags = _common_flags(plan, options, "vllm")
    if options.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(options.kv_cache_memory_bytes)]
    else:
        flags += ["--gpu-memory-utilization", _number(plan.gpu_memory_utilization or 0.9)]
    if options.enforce_eager:
        flags.append("--enforce-eager")
    flags += _deployment_flags(options)
    env: list[tuple[str, str]] = []
    if options.allow_long_max_model_len:
        env.append(("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1"))
    sampler_env = options.flashinfer_sampler_env
    if options.sampler == "flashinfer":
        sampler_env = True
    if sampler_env is not None:
        env.append(("VLLM_USE_FLASHINFER_SAMPLER", "1" if sampler_env else "0"))
    if options.sampler in ("sort", "triton"):
        notes.append(f"--sampler {options.sampler}: vLLM has no flag for it; the release "
                     "picks its top-k/top-p path from the batch size")  # fmt: skip
    return flags, env


def _deployment_flags(options: PlanOptions) -> list[str]:
    """The flags of the plan's :class:`~memacct.engines.deployment.Deployment` (vLLM)."""
    d = options.deployment
    if d is None:
        return []
    flags: list[str] = []
    if d.quantization is not None:
        flags += ["--quantization", d.quantization]
    if d.dtype != "auto":
        flags += ["--dtype", d.dtype]
    if d.lora is not None:
        flags += ["--enable-lora", "--max-loras", str(d.lora.max_loras),
                  "--max-lora-rank", str(d.lora.max_lora_rank)]  # fmt: skip
        if d.lora.max_cpu_loras is not None:
            flags += ["--max-cpu-loras", str(d.lora.max_cpu_loras)]
        if d.lora.lora_dtype != "auto":
            flags += ["--lora-dtype", d.lora.lora_dtype]
        if d.lora.fully_sharded_loras:
            flags.append("--fully-sharded-loras")
    if d.speculative is not None:
        flags += ["--speculative-config", _json(speculative_flag_value(d.speculative))]
    if d.enable_expert_parallel:
        flags.append("--enable-expert-parallel")
    if d.data_parallel_size != 1:
        flags += ["--data-parallel-size", str(d.data_parallel_size)]
    if d.cpu_offload_gb:
        flags += ["--cpu-offload-gb", _number(d.cpu_offload_gb)]
    mm = d.multimodal
    if mm.limit_mm_per_prompt:
        flags += ["--limit-mm-per-prompt", _json(mm.limit_mm_per_prompt)]
    if mm.mm_processor_kwargs:
        flags += ["--mm-processor-kwargs", _json(mm.mm_processor_kwargs)]
    if mm.skip_mm_profiling:
        flags.append("--skip-mm-profiling")
    return flags


def speculative_flag_value(spec: Any) -> dict[str, Any]:
    """``--speculative-config``'s object for a :class:`~memacct.engines.deployment.Speculative`
    (``draft_model`` is memacct's name for a draft named by its model alone)."""
    obj: dict[str, Any] = {}
    if spec.method != "draft_model":
        obj["method"] = spec.method
    if spec.model is not None:
        obj["model"] = spec.model
    obj["num_speculative_tokens"] = spec.num_speculative_tokens
    if spec.draft_tensor_parallel_size is not None:
        obj["draft_tensor_parallel_size"] = spec.draft_tensor_parallel_size
    return obj


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), separators=(",", ":"))


def _sglang_flags(plan: KVCachePlan, options: PlanOptions,
                  notes: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """``sglang.launch_server``'s flags for the plan."""
    flags = _common_flags(plan, options, "sglang")
    if options.gpu_memory_utilization is not None:
        flags += [engine_flag("sglang", "gpu_memory_utilization"),
                  _number(options.gpu_memory_utilization)]  # fmt: skip
    elif plan.gpu_memory_utilization is not None:
        notes.append(f"--mem-fraction-static left to SGLang, which picks "
                     f"{plan.gpu_memory_utilization:.3f} on this GPU as planned")  # fmt: skip
    if plan.max_running_requests is not None:
        flags += [engine_flag("sglang", "max_running_requests"), str(plan.max_running_requests)]
    if options.enforce_eager:
        flags += ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
    if options.swa_full_tokens_ratio is not None:
        flags += ["--swa-full-tokens-ratio", _number(options.swa_full_tokens_ratio)]
    if options.deployment is not None and options.deployment.speculative is not None:
        from memacct.engines.sglang.speculative import launch_flags

        flags += launch_flags(options.deployment.speculative)
    # sglang/srt/configs/model_config.py: a context past the model's positions needs this.
    env = [("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")] if (
        options.allow_long_max_model_len) else []  # fmt: skip
    return flags, env


def release_key(version: str) -> tuple[int, ...]:
    """``"0.10.1.1"`` -> ``(0, 10, 1, 1)``; ``"0.8"`` -> ``(0, 8)``, its first release."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("post", 1)[0]))


def _for_release(version: str, flags: list[str]) -> list[str]:
    """``flags`` as ``version`` of vLLM spells them; a flag or KV dtype it lacks is refused."""
    release = release_key(version)
    if not release:
        return flags

    def since(what: str, first: tuple[int, ...], fix: str) -> InvalidInputError:
        shown = ".".join(map(str, first))
        return InvalidInputError(
            f"--emit vllm: vLLM {version} has no {what} (its argument parser takes it "
            f"from {shown}): plan for --engine-version {shown} or later, or {fix}"
        )

    for flag, first in FLAG_SINCE.items():
        if flag in flags and release < first:
            raise since(flag, first, "without it")
    if "--kv-cache-dtype" in flags:
        dtype = flags[flags.index("--kv-cache-dtype") + 1]
        first = KV_CACHE_DTYPE_SINCE.get(dtype, ())
        if release < first:
            raise since(f"--kv-cache-dtype {dtype}", first, "with another --kv-cache-dtype")
    if "--limit-mm-per-prompt" in flags and release < LIMIT_MM_JSON_SINCE:
        at = flags.index("--limit-mm-per-prompt") + 1
        limits = json.loads(flags[at])
        if not all(isinstance(count, int) for count in limits.values()):
            raise since("size form of --limit-mm-per-prompt", LIMIT_MM_JSON_SINCE,
                        "with counts only ('{\"image\": 2}')")  # fmt: skip
        flags[at] = ",".join(f"{name}={count}" for name, count in limits.items())
    return flags


_SHM_BYTES = {"amd": 8 * 1024**3}
"""``/dev/shm`` for a pod of several ranks: vLLM's docs/deployment/k8s.md gives the
shared-memory ``emptyDir`` (medium Memory) "for tensor parallel inference" 2Gi on NVIDIA
GPUs and 8Gi on AMD's; the NVIDIA figure elsewhere."""
_SHM_DEFAULT = 2 * 1024**3


def _resource(device: str) -> tuple[str, Any]:
    """The device plugin's resource name for the plan's device, and the device preset."""
    from memacct.devices import resolve_device

    try:
        info = resolve_device(device)
    except InvalidInputError:
        raise InvalidInputError(
            "--emit k8s names the pod's device resource after a device preset: plan with "
            "--device (h100, 910b, ...) rather than --device-memory or a budget alone"
        ) from None
    return info.device_resource, info


def _gi(value: int) -> str:
    return f"{-(-value // 1024**3)}Gi"


def pod_resources(plan: KVCachePlan, options: PlanOptions) -> Emitted:
    """The container's resources and ``/dev/shm`` volume for ``plan``, as YAML.

    Devices: tensor x pipeline x data-parallel ranks. Host memory requested: the weights
    of every rank (those on the device and those offloaded), read through the page cache
    while loading, plus ``--cpu-offload-gb`` per rank kept in host memory after it; on a
    unified-memory device the engine's whole allocation too (its GPU memory is the
    system's). The process's own memory (Python,
    the framework, the driver) is not measured here and is not in it.
    """
    device = plan.budget.device if plan.budget is not None else ""
    name, info = _resource(device or options.device or "")
    d = options.deployment
    dp = d.data_parallel_size if d is not None else 1
    ranks = options.tensor_parallel_size * options.pipeline_parallel_size * dp
    offload = d.cpu_offload_bytes if d is not None else 0
    checkpoint = ranks * (plan.weights_memory + offload)
    memory = checkpoint + ranks * offload
    terms = [f"weights {_gi(checkpoint)} read while loading"]
    if offload:
        terms.append(f"--cpu-offload-gb {_gi(ranks * offload)} kept")
    if info.unified_memory:
        memory += ranks * (plan.target_allocation or 0)
        terms.append("the engine's device allocation (unified memory)")
    lines = [
        f"# memacct plan: {plan.model or 'model'}, {options.engine} {plan.engine_version}, "
        f"{info.name} x {ranks}",
        f"# host memory: {' + '.join(terms)}; add the process's own",
        "resources:",
        "  requests:",
        f'    {name}: "{ranks}"',
        f"    memory: {_gi(memory)}",
        "  limits:",
        f'    {name}: "{ranks}"',
    ]
    if ranks > 1:
        shm = _SHM_BYTES.get(info.vendor, _SHM_DEFAULT)
        lines += [
            "volumes:",
            "- name: dshm",
            "  emptyDir:",
            "    medium: Memory",
            f"    sizeLimit: {_gi(shm)}",
            "volumeMounts:",
            "- name: dshm",
            "  mountPath: /dev/shm",
        ]
    text = "\n".join(lines)
    return Emitted("k8s", (), (), text)
