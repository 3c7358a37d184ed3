"""The ``memacct plan`` a log's start-up amounts to: its flags, and the plan they give.

:func:`plan_request` turns a :class:`~memacct.explain.reading.LogReading` (and
the user's ``--model``, ``--device`` or ``--device-memory``) into the flags of
``memacct plan`` (named as ``vllm serve`` names them); :func:`run_plan` plans
them through :func:`memacct.planner.offline.plan_offline`, the function ``memacct
plan`` runs, with the options it would build from the same flags. So the plan
``memacct explain`` shows is the plan ``memacct plan <its command>`` prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memacct.errors import MemacctError
from memacct.explain.reading import LogReading

__all__ = ["PlanRequest", "plan_request", "release", "run_plan"]

_SERVE = ("quantization", "dtype", "enable_lora", "max_loras", "max_lora_rank",
          "enable_expert_parallel", "data_parallel_size", "cpu_offload_gb")  # fmt: skip
"""Settings that reach ``memacct plan`` as ``vllm serve`` flags of a deployment (vLLM only)."""

_COPIED = ("tensor_parallel_size", "pipeline_parallel_size", "max_num_batched_tokens",
           "max_num_seqs", "block_size")  # fmt: skip


@dataclass(frozen=True)
class PlanRequest:
    """``memacct plan``'s flags for a log (dest -> value), and what choosing them noted."""

    flags: dict[str, Any]
    notes: tuple[str, ...] = ()
    model: str | None = None

    @property
    def argv(self) -> list[str]:
        """The flags as ``memacct plan`` takes them (``--flag value``, a boolean alone)."""
        out = ["--model", str(self.model)] if self.model else []
        for dest, value in self.flags.items():
            flag = "--" + dest.replace("_", "-")
            if value is True:
                out.append(flag)
            elif value is not False and value is not None:
                out += [flag, str(value)]
        return out

    @property
    def command(self) -> str:
        """The ``memacct plan`` command line."""
        import shlex

        return "memacct plan " + " ".join(shlex.quote(part) for part in self.argv)


def release(version: str | None) -> str | None:
    """``major.minor.patch`` of a printed release (``0.10.2.dev378+g4d7f`` -> ``0.10.2``)."""
    if version is None:
        return None
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    return ".".join(part for part in match.groups() if part is not None)


def _engine_version(reading: LogReading, notes: list[str]) -> str | None:
    from memacct.engines import get_engine
    from memacct.engines.accepts import check_release

    chosen = release(reading.engine_version)
    newest = get_engine(reading.engine).version
    if chosen is None:
        notes.append(f"the log names no {reading.engine} release: planned with {newest}'s rules")
        return None
    try:
        check_release(reading.engine, chosen)
    except MemacctError:
        notes.append(f"{reading.engine} {reading.engine_version} is not a release memacct "
                     f"models: planned with {newest}'s rules")  # fmt: skip
        return None
    return chosen


def _named_device(name: str) -> Any:
    """The preset a device name resolves to (``"NVIDIA A100-SXM4-40GB"``: its size first),
    or None."""
    from memacct.devices import resolve_device

    size = re.search(r"(\d+)\s*GB", name)
    for word in re.findall(r"[A-Za-z]*\d+[A-Za-z]*", name):
        for guess in ([f"{word}-{size.group(1)}gb"] if size else []) + [word]:
            try:
                return resolve_device(guess)
            except MemacctError:
                continue
    return None


def _device(reading: LogReading, device: str | None, device_memory: str | None,
            notes: list[str]) -> dict[str, Any]:  # fmt: skip
    """The device flag: the user's, else the device the log names where its total agrees
    with the log's (within 1%: the preset also carries the engine's defaults for it, such
    as vLLM's batch sizes on H100-class parts), else the log's total, else its name."""
    if device is not None:
        return {"device": device}
    if device_memory is not None:
        return {"device_memory": device_memory}
    total = reading.bytes("total_memory")
    named = _named_device(reading.device or "")
    if named is not None and (total is None or abs(named.total_bytes - total) <= 0.01 * total):
        notes.append(f"device: {named.name}, as the log names it ({reading.device})")
        return {"device": named.name}
    if total is not None and total > 0:
        notes.append(f"device: the log's total memory, {reading.figures['total_memory'].text()}")
        return {"device_memory": str(total)}
    notes.append("the log gives neither the device's total nor its name: pass --device or "
                 "--device-memory (planned for the engine's reference device)")  # fmt: skip
    return {}


def plan_request(reading: LogReading, *, model: str | None = None, device: str | None = None,
                 device_memory: str | None = None) -> PlanRequest:  # fmt: skip
    """The ``memacct plan`` flags for the start-up ``reading`` records.

    ``model``, ``device`` and ``device_memory`` are the user's, replacing what the log says
    (the model it names, its total memory, its device's name).
    """
    s = reading.settings
    notes: list[str] = []
    flags: dict[str, Any] = {"engine": reading.engine}
    version = _engine_version(reading, notes)
    if version is not None:
        flags["engine_version"] = version
    flags.update(_device(reading, device, device_memory, notes))
    fraction = s.get("mem_fraction_static") if reading.engine == "sglang" else None
    util = fraction or s.get("gpu_memory_utilization") or _figure(reading, "gpu_memory_utilization")
    given = reading.bytes("kv_cache_given")  # "... as specified by kv_cache_memory_bytes"
    if s.get("kv_cache_memory_bytes") or given:
        flags["kv_cache_memory_bytes"] = s.get("kv_cache_memory_bytes") or given
    elif util is not None:
        flags["gpu_memory_utilization"] = float(util)
    for name in _COPIED:
        if isinstance(s.get(name), int) and not isinstance(s.get(name), bool):
            flags[name] = s[name]
    batched = _figure(reading, "max_num_batched_tokens")
    if "max_num_batched_tokens" not in flags and batched is not None:
        flags["max_num_batched_tokens"] = int(batched)
    if reading.max_model_len is not None:
        flags["max_model_len"] = reading.max_model_len
    kv_dtype = s.get("kv_cache_dtype")
    if isinstance(kv_dtype, str) and kv_dtype != "auto":
        flags["kv_cache_dtype"] = kv_dtype
    if s.get("enforce_eager") is True or s.get("disable_cuda_graph") is True:
        flags["enforce_eager"] = True
    if s.get("sampler"):
        flags["sampler"] = s["sampler"]
    if reading.engine == "vllm":
        flags.update(_serve_flags(s, notes))
    named = s.get("model")
    chosen = model or (named if isinstance(named, str) else None)
    if chosen is None:
        notes.append("the log names no model: pass --model (a preset, config.json or Hub id)")
    return PlanRequest(flags, tuple(notes), chosen)


def _figure(reading: LogReading, name: str) -> float | None:
    fig = reading.figures.get(name)
    return None if fig is None else fig.value


def _serve_flags(s: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The ``vllm serve`` flags beyond the plan's own: a quantization only where it is
    applied while loading (fp8; any other method comes with the checkpoint and is read
    from it), a dtype other than auto, LoRA, expert and data parallelism, CPU offload."""
    out: dict[str, Any] = {}
    for name in _SERVE:
        value = s.get(name)
        # vllm serve's defaults (checked by type: True == 1 in Python).
        if value is None or value is False or value == "auto" or (
                type(value) in (int, float) and value in (0, 1)):  # fmt: skip
            continue
        if name == "quantization" and value != "fp8":
            continue
        if name == "dtype":
            value = {"half": "float16", "bf16": "bfloat16"}.get(str(value), value)
            if value not in ("float16", "bfloat16"):
                continue
        out[name] = value
    if s.get("speculative_config") or s.get("speculative_algorithm"):
        notes.append("speculative decoding: the draft is not planned from a log (give "
                     "--speculative-config to memacct plan with the draft's model)")  # fmt: skip
    return out


@dataclass(frozen=True)
class PlannedRun:
    """The plan of a request, or why there is none."""

    plan: Any = None
    error: str = ""
    notes: tuple[str, ...] = field(default=())


def run_plan(request: PlanRequest) -> PlannedRun:
    """Plan ``request`` as ``memacct plan`` does; a model or option the planner refuses is
    recorded (``error``), not raised: the logged side still explains itself."""
    from memacct.devices import parse_memory_size
    from memacct.planner.offline import plan_offline
    from memacct.planner.options import PlanOptions

    if request.model is None:
        return PlannedRun(error="no model to plan: pass --model", notes=request.notes)
    fields = {k: v for k, v in request.flags.items() if k not in _SERVE}
    serve = {k: v for k, v in request.flags.items() if k in _SERVE}
    try:
        if "device_memory" in fields:
            fields["device_memory"] = parse_memory_size(str(fields["device_memory"]))
        if "kv_cache_memory_bytes" in fields:
            fields["kv_cache_memory_bytes"] = int(fields["kv_cache_memory_bytes"])
        if serve:
            from memacct.engines.deployment import Deployment

            fields["deployment"] = Deployment.from_serve_args(**serve)
        plan = plan_offline(request.model, PlanOptions(**fields))
    except MemacctError as exc:
        return PlannedRun(error=str(exc), notes=request.notes)
    return PlannedRun(plan=plan, notes=request.notes)
