"""``memacct plan``: a KV-cache plan from a saved profile, a budget, or offline for a device.

The flags are :class:`memacct.planner.options.PlanOptions`' fields, named as ``vllm serve``
names them: a new option is one field there and one ``click.option`` here (its
destination the field's name). The flags that choose the path (``--profile``, the
device, ``--kv-cache-memory-bytes``) and those of the CLI alone (``--json``,
``--plot``) are not options of the plan. An option that does not apply on a path is
refused there in one line that says why (:func:`_refuse`).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import click

from memacct.cli.flags import EngineSpelledCommand
from memacct.engines import engine_names
from memacct.errors import InvalidInputError
from memacct.planner.options import PlanOptions

__all__ = ["plan_cmd"]

_CLI_ONLY = ("profile_path", "model", "revision", "as_json", "allow_mismatch", "plot_path",
             "assume_full_attention", "min_concurrency", "emit")  # fmt: skip


@click.command("plan", cls=EngineSpelledCommand)
@click.option("--profile", "profile_path", default=None,
              help="A ProfileResult saved by an engine (JSON).")
@click.option("--device", default=None,
              help="Plan offline for this device (preset or short name: h100, rtx4090, 910b4, "
              "...); a comma list (h100,a100-80gb,l4) plans each: a capacity plan.")
@click.option("--device-memory", default=None,
              help="Plan offline for any other device of this total memory (e.g. 24GiB).")
@click.option("--model", required=True,
              help="Preset, config.json, checkpoint directory, .gguf file, Hugging Face Hub id "
              "(org/name[@revision]), or 'list'.")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit) of --model.")
@click.option("--gpu-memory-utilization", type=float, default=None,
              help="Default 0.9; offline SGLang: its own mem_fraction_static for the GPU.")
@click.option("--engine", type=click.Choice(list(engine_names())), default="vllm",
              show_default=True, help="Whose KV-cache manager sizes the cache (docs/engines.md).")
@click.option("--kv-cache-memory-bytes", default=None,
              help="KV-cache budget per rank (e.g. 20GiB, 512MiB, 21474836480); with a device: do "
              "the weights plus this cache fit? With neither --profile nor a device the plan "
              "needs no device.")
@click.option("--block-size", type=int, default=None,
              help="Default: the engine's (vLLM 16, SGLang 1).")
@click.option("--max-model-len", type=int, default=None,
              help="Longest request; -1: the longest the cache holds (vLLM's auto-fit).")
@click.option("--max-num-batched-tokens", type=int, default=None,
              help="Default: the profile's, else the engine's for the device.")
@click.option("--max-num-seqs", type=int, default=None,
              help="Default: the profile's, else the engine's for the device.")
@click.option("--tensor-parallel-size", default="1", show_default=True,
              help="Ranks a layer is split across; a comma list (1,2,4,8) plans each degree.")
@click.option("--min-concurrency", type=float, default=None,
              help="Capacity plan: mark the smallest configuration that serves this many "
              "requests of --max-model-len at once.")
@click.option("--pipeline-parallel-size", type=int, default=1, show_default=True)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--enforce-eager", is_flag=True, help="No CUDA graphs (offline plan).")
@click.option("--engine-version", default=None,
              help="Follow this engine release offline (e.g. 0.11.0); default: the newest "
              "modelled. An unmodelled release is refused with the modelled ones.")
@click.option("--sampler", type=click.Choice(["auto", "sort", "triton", "flashinfer"]),
              default="auto", show_default=True,
              help="vLLM's top-k/top-p path in its start-up sampler run (offline plan): auto "
              "follows the release and VLLM_USE_FLASHINFER_SAMPLER; the engine's log names it "
              "('Using FlashInfer for top-p & top-k sampling').")
@click.option("--swa-full-tokens-ratio", type=float, default=None,
              help="SGLang: sliding-window tokens per full-attention token of its split pool "
              "(gpt-oss, Llama 4), in (0, 1]; default 0.8.")
@click.option("--allow-long-max-model-len", is_flag=True,
              help="Accept a --max-model-len beyond the model's positions, as vLLM does with "
              "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
@click.option("--assume-full-attention", is_flag=True,
              help="Plan an architecture memacct has no rule for as full attention on every "
              "layer (a guess, said in the plan's notes); without it such a model is refused.")
@click.option("--quantization", default=None,
              help="vLLM: fp8 quantizes an unquantized checkpoint while loading; a quantized "
              "checkpoint's own method (awq, gptq_marlin, modelopt, ...) is accepted.")
@click.option("--dtype", default="auto", show_default=True,
              help="vLLM: the weights' and activations' dtype (auto, bfloat16, float16).")
@click.option("--enable-lora", is_flag=True, help="vLLM: preallocate LoRA adapter slots.")
@click.option("--max-loras", type=int, default=None, help="vLLM: adapters on the device (1).")
@click.option("--max-lora-rank", type=int, default=None, help="vLLM: the slots' rank (16).")
@click.option("--max-cpu-loras", type=int, default=None,
              help="vLLM: adapters cached in host memory (no device memory).")
@click.option("--lora-dtype", default="auto", show_default=True, help="vLLM: the slots' dtype.")
@click.option("--fully-sharded-loras", is_flag=True, help="vLLM: shard the LoRA stacks over TP.")
@click.option("--speculative-config", default=None,
              help="vLLM: JSON, e.g. '{\"method\": \"eagle\", \"model\": \"org/draft\", "
              "\"num_speculative_tokens\": 3}' (ngram, eagle, eagle3, mtp, draft models; the "
              "draft is read as --model is).")
@click.option("--enable-expert-parallel", is_flag=True,
              help="vLLM: whole MoE experts over TP x DP ranks.")
@click.option("--data-parallel-size", type=int, default=1, show_default=True,
              help="vLLM: engine replicas (MoE experts shared over them).")
@click.option("--cpu-offload-gb", type=float, default=0.0, show_default=True,
              help="vLLM: GiB of layer weights kept in host memory.")
@click.option("--limit-mm-per-prompt", default=None,
              help="vLLM: JSON items per prompt and modality, e.g. '{\"image\": 2, \"video\": 0}'.")
@click.option("--mm-processor-kwargs", default=None,
              help="vLLM: JSON processor overrides, e.g. '{\"max_pixels\": 1003520}'.")
@click.option("--skip-mm-profiling", is_flag=True,
              help="vLLM: no multimodal encoder pass in the profile run.")
@click.option("--max-running-requests", type=int, default=None,
              help="SGLang: the cap on running requests (default: its cap for the pool).")
@click.option("--emit", type=click.Choice(["vllm", "sglang", "k8s"]), default=None,
              help="Print the command that starts the plan (vllm serve, sglang.launch_server) "
              "or the pod's resources as YAML (k8s) instead of the plan; a capacity plan: one "
              "per fitting row. The engines' own spellings (-tp 8, --max-model-len 32k, "
              "SGLang's --mem-fraction-static) are read too.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the plan (one schema on every path, with format_version) as JSON.")
@click.option("--allow-mismatch", is_flag=True,
              help="Plan even if the profile recorded another model, layout or batch budget.")
@click.option("--plot", "plot_path", default=None,
              help="Draw the device's memory as a stacked bar (PNG or SVG).")
def plan_cmd(**flags: Any) -> None:
    """Plan the KV cache from a saved profile, or offline for a device.

    Offline (no --profile): the engine's start-up is estimated from the model
    (weights as the engine shards and quantizes them, the profile run, CUDA
    graphs) and the first line is the verdict: "fits: N concurrent requests of
    L tokens" or "does not fit: ..." with what to change (exit status 1).
    With --profile: the profiling report, a breakdown and the plan.
    """
    from memacct.cli.common import print_emitted
    from memacct.cli.render import print_plan
    from memacct.planner import model_presets

    if flags["model"] == "list":
        _list_presets(flags, model_presets())
        return
    if flags["plot_path"] is not None:
        _check_plot_path(flags["plot_path"])
    devices = _devices(flags["device"])
    degrees = _degrees(flags["tensor_parallel_size"])
    flags["device"] = devices[0] if devices else None
    flags["tensor_parallel_size"] = degrees[0]
    capacity = len(devices) > 1 or len(degrees) > 1 or flags["min_concurrency"] is not None
    path = _path(flags)
    if capacity:
        from memacct.cli.capacity import capacity_cmd

        _refuse_in_capacity(path, flags)
        _refuse("offline", flags)
        opts, config, notes = _options(flags, "offline")
        from memacct.planner.offline import default_device

        devices = devices or (default_device(opts.engine),)
        capacity_cmd(config, opts, devices, degrees, flags, notes=notes)
        return
    _refuse(path, flags)
    opts, config, notes = _options(flags, path)
    if path == "offline":
        from memacct.planner.offline import plan_offline

        plan = plan_offline(config, opts)
        result = None
    else:
        plan, result = _plan_kv(config, opts, flags, path)
    from memacct.planner.offline import with_source_notes

    plan = with_source_notes(plan, notes)
    if flags["emit"] is not None:
        print_emitted(flags, [("", plan, opts)])
        return
    print_plan(plan, result, as_json=flags["as_json"], plot_path=flags["plot_path"])
    if not plan.fits:
        raise click.exceptions.Exit(1)


def _list_presets(flags: dict[str, Any], names: Any) -> None:
    """``--model list``: the presets, one a line; any other flag beside it is refused, as it
    would be ignored (``--json`` too: every JSON ``memacct plan`` prints is a plan)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = [name for name in flags if name != "model"
             and ctx.get_parameter_source(name) is not ParameterSource.DEFAULT]  # fmt: skip
    if given:
        flag = {param.name: param.opts[0] for param in ctx.command.params}
        shown = ", ".join(flag.get(name, name) for name in given)
        raise InvalidInputError(
            f"--model list lists the model presets and plans nothing: drop {shown} (or give "
            "a model to plan)"
        )
    from memacct.model.sources.presets import NEEDS_CHECKPOINT

    for name in names:
        if name not in NEEDS_CHECKPOINT:
            click.echo(name)
    for name, why in NEEDS_CHECKPOINT.items():
        click.echo(f"not listed: {name}: {why}", err=True)


@cache
def _serve_flags() -> dict[str, Any]:
    """The ``vllm serve`` settings a deployment takes (:meth:`Deployment.from_serve_args`)
    that are not plan options, with their defaults: a click option named after one of them
    reaches the deployment with nothing else to write (read once: do not change it)."""
    import inspect

    from memacct.engines.deployment import Deployment

    return {
        name: param.default
        for name, param in inspect.signature(Deployment.from_serve_args).parameters.items()
        if name not in PlanOptions.names() and param.kind is param.KEYWORD_ONLY
    }


def _draft_config(speculative_config: str) -> dict[str, Any] | None:
    """The config of the draft model ``--speculative-config`` names, read as ``--model`` is
    (``None``: a method without a draft model, or none named)."""
    from memacct.engines.deployment import Speculative

    spec = Speculative.parse(speculative_config)
    if spec.method not in ("eagle", "eagle3", "draft_model") or not spec.model:
        return None
    config: dict[str, Any] = _model_source(spec.model, None)[0]
    return config


def _degrees(text: str) -> tuple[int, ...]:
    """``--tensor-parallel-size``: one degree or a comma list of them."""
    try:
        degrees = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        raise InvalidInputError(
            f"--tensor-parallel-size {text!r} is not a degree nor a comma list of them: give "
            "e.g. 2 or 1,2,4,8"
        ) from None
    return _distinct("--tensor-parallel-size", text, degrees)


def _devices(text: str | None) -> tuple[str, ...]:
    """``--device``: one device or a comma list of them; an empty item is refused, as
    ``--tensor-parallel-size`` refuses one (it would plan something else than was typed)."""
    if text is None:
        return ()
    devices = tuple(part.strip() for part in text.split(","))
    if not all(devices):
        raise InvalidInputError(
            f"--device {text!r} has an empty device name: give a preset (h100) or a comma "
            "list of them (h100,a100-80gb,l4), or leave --device out for the engine's "
            "reference device"
        )
    return _distinct("--device", text, devices)


def _distinct(flag: str, text: str, items: tuple[Any, ...]) -> tuple[Any, ...]:
    """``items``, refused when one is listed twice (a capacity plan's rows would repeat)."""
    twice = sorted({str(item) for item in items if items.count(item) > 1})
    if twice:
        raise InvalidInputError(
            f"{flag} {text!r} lists {', '.join(twice)} more than once: list each once"
        )
    return items


def _refuse_in_capacity(path: str, flags: dict[str, Any]) -> None:
    if path == "profile" or flags["device_memory"] is not None:
        raise InvalidInputError(
            "a capacity plan (a list of devices or degrees, or --min-concurrency) plans "
            "presets offline: drop --profile and --device-memory, or give one device and degree"
        )


def _path(flags: dict[str, Any]) -> str:
    """``profile``, ``budget`` (a KV-cache budget alone) or ``offline``."""
    device = flags["device"] is not None or flags["device_memory"] is not None
    if flags["profile_path"] is not None:
        if device:
            raise InvalidInputError("give either --profile or --device/--device-memory, not both")
        return "profile"
    if flags["kv_cache_memory_bytes"] is not None and not device:
        return "budget"
    return "offline"


_ENGINE_ONLY = ("engine_version", "sampler", "enforce_eager")


def _refuse(path: str, flags: dict[str, Any]) -> None:
    """Refuse, in one line, an option that does not apply on ``path``."""
    given = [name for name in _ENGINE_ONLY if flags[name] not in (None, False, "auto")]
    given += [name for name, default in _serve_flags().items()
              if name in flags and flags[name] != default]  # fmt: skip
    if path != "offline" and given:
        shown = " and ".join("--" + name.replace("_", "-") for name in given)
        why = ("a saved profile already measured the engine (drop --profile to plan offline)"
               if path == "profile" else
               "with --kv-cache-memory-bytes alone nothing is estimated (add --device to ask "
               "whether the weights and that cache fit)")  # fmt: skip
        raise InvalidInputError(f"{shown} shape{'s' if len(given) == 1 else ''} the offline "
                                f"start-up estimate; {why}")
    if flags["kv_cache_memory_bytes"] is not None and flags["gpu_memory_utilization"] is not None:
        raise InvalidInputError(
            "--gpu-memory-utilization does not apply with --kv-cache-memory-bytes: the cache "
            "is given in bytes and replaces the utilization (vLLM ignores it then too); drop one"
        )
    if flags["allow_mismatch"] and path != "profile":
        raise InvalidInputError(
            "--allow-mismatch lets a saved profile plan another model, layout or batch than "
            "it recorded; without --profile there is nothing to mismatch: drop it"
        )
    if path == "budget" and flags["plot_path"] is not None:
        raise InvalidInputError(
            "--plot draws the device's memory, and --kv-cache-memory-bytes alone names no "
            "device: add --device (or --device-memory), or drop --plot"
        )


def _options(
    flags: dict[str, Any], path: str
) -> tuple[PlanOptions, dict[str, Any], tuple[str, ...]]:
    """The plan's options from the flags, the model's config and what reading it assumed
    (the model source's notes, for the plan's)."""
    from memacct.devices import parse_memory_size

    config, name, table, notes = _model_source(flags["model"], flags["revision"])
    if flags["assume_full_attention"]:
        from memacct.model.arch_rules import ASSUME_FULL_ATTENTION

        config = {**config, ASSUME_FULL_ATTENTION: True}
    fields = {key: value for key, value in flags.items() if key not in _CLI_ONLY}
    serve = {key: fields.pop(key) for key in list(fields) if key in _serve_flags()}
    if any(value != _serve_flags()[key] for key, value in serve.items()):
        from memacct.engines.deployment import Deployment

        if serve.get("speculative_config"):
            serve["draft_config"] = _draft_config(serve["speculative_config"])
        fields["deployment"] = Deployment.from_serve_args(**serve)
    if fields["kv_cache_memory_bytes"] is not None:
        fields["kv_cache_memory_bytes"] = _parse_bytes(fields["kv_cache_memory_bytes"])
    if fields["device_memory"] is not None:
        fields["device_memory"] = parse_memory_size(fields["device_memory"])
    if fields["sampler"] == "auto":
        fields["sampler"] = None
    util = fields["gpu_memory_utilization"]
    if util is not None and not 0 < util <= 1:  # NaN fails both comparisons
        raise InvalidInputError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    extra: dict[str, Any] = {}
    if path == "offline":
        extra = {"checkpoint": table, "flashinfer_sampler_env": _flashinfer_sampler_env()}
    return PlanOptions(model_name=name, **fields, **extra), config, notes


def _plan_kv(config: dict[str, Any], opts: PlanOptions, flags: dict[str, Any],
             path: str) -> tuple[Any, Any]:
    """The plan of a saved profile or of a KV-cache budget alone, and the profile."""
    from memacct.planner import KVCacheSpec, load_profile, plan_kv_cache

    if opts.max_model_len not in (None, -1) and not opts.allow_long_max_model_len:
        _check_max_model_len(int(opts.max_model_len or 0), config)
    spec = KVCacheSpec.from_hf_config(
        config, kv_cache_dtype=opts.kv_cache_dtype,
        tensor_parallel_size=opts.tensor_parallel_size,
        pipeline_parallel_size=opts.pipeline_parallel_size,
    )  # fmt: skip
    result = load_profile(flags["profile_path"]) if path == "profile" else None
    plan = plan_kv_cache(
        result, spec, engine=opts.engine, kv_cache_memory_bytes=opts.kv_cache_memory_bytes,
        gpu_memory_utilization=opts.gpu_memory_utilization or 0.9, block_size=opts.block_size,
        max_model_len=opts.max_model_len, max_num_batched_tokens=opts.max_num_batched_tokens,
        max_num_seqs=opts.max_num_seqs, allow_mismatch=flags["allow_mismatch"],
        engine_options=opts.engine_options(),
    )  # fmt: skip
    return plan.model_copy(update={"model": opts.model_name}), result


def _check_plot_path(plot_path: str) -> None:
    """Refuse a plot path that cannot be written before any work is done (one line, exit 2)."""
    path = Path(plot_path)
    if path.suffix.lower() not in {".png", ".svg"}:
        raise InvalidInputError(f"--plot {plot_path!r} must end in .png or .svg")
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InvalidInputError(f"--plot {plot_path!r} is a directory: give a file name")
    if not parent.is_dir():
        raise InvalidInputError(
            f"--plot {plot_path!r}: {str(parent)!r} is not a directory: give a path in one"
        )


def _derived_max_model_len(config: dict[str, Any]) -> tuple[int, str] | None:
    """The longest sequence the config supports, as vLLM derives it, and the key it came from.

    One owner: :attr:`memacct.model.config.ModelConfig.position_limit`.
    """
    from memacct.model.config import ModelConfig

    return ModelConfig(config, "config.json").position_limit


def _check_max_model_len(max_model_len: int, config: dict[str, Any]) -> None:
    derived = _derived_max_model_len(config)
    if derived is not None and max_model_len > derived[0]:
        raise InvalidInputError(
            f"--max-model-len {max_model_len} is greater than the model's maximum length "
            f"{derived[0]} ({derived[1]} in its config): vLLM refuses it too, as positions past "
            "it give wrong outputs. Lower --max-model-len, or pass --allow-long-max-model-len "
            "(vLLM: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) if the model really handles longer inputs"
        )


def _parse_bytes(text: str) -> int:
    """``--kv-cache-memory-bytes``: ``20GiB``, ``512MiB`` or a plain byte count (at least 1)."""
    from memacct.units import parse_size

    try:
        value = parse_size(text)
    except ValueError as exc:
        raise InvalidInputError(f"--kv-cache-memory-bytes {exc}") from None
    if value < 1:
        raise InvalidInputError(
            f"--kv-cache-memory-bytes {text!r} is not a size the KV cache can have: give at "
            f"least one byte, e.g. 20GiB"
        )
    return value


def _model_source(
    model: str, revision: str | None = None
) -> tuple[dict[str, Any], str, Any, tuple[str, ...]]:
    """The config, a display name, the checkpoint's tensor table when one was read
    (:func:`memacct.model.sources.resolve.resolve_model`: preset, config.json, checkpoint
    directory, .gguf file or Hub id) and the source's notes (the plan carries them)."""
    from memacct.model.sources.resolve import resolve_model

    source = resolve_model(model, revision)
    return source.config, source.name, source.table, source.notes


def _flashinfer_sampler_env() -> bool | None:
    """``VLLM_USE_FLASHINFER_SAMPLER`` as vLLM reads it (``bool(int(value))``); None: unset."""
    value = os.environ.get("VLLM_USE_FLASHINFER_SAMPLER")
    if value is None:
        return None
    try:
        return bool(int(value))
    except ValueError:
        raise InvalidInputError(
            f"VLLM_USE_FLASHINFER_SAMPLER={value!r} is not an integer (vLLM reads it as one): "
            "set it to 1 or 0, or unset it"
        ) from None
