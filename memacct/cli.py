"""The ``memacct`` command line: backends, snapshot, plan, bench.

Every user mistake ends as one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

import click
from rich.console import Console
from rich.table import Table

from memacct._version import __version__
from memacct.errors import InvalidInputError, MemacctError
from memacct.units import GiB, format_gib

__all__ = ["main"]

EXIT_USER_ERROR = 2


def _console() -> Console:
    # A pipe gets wide lines rather than a table folded into 80 columns.
    width = None if sys.stdout.isatty() else 160
    return Console(highlight=False, width=width)


def _fail(message: str) -> NoReturn:
    raise click.exceptions.Exit(_print_error(message))


def _print_error(message: str) -> int:
    click.echo(f"memacct: error: {message}", err=True)
    return EXIT_USER_ERROR


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


CLI_GROUP = "memacct.cli"
"""Entry-point group through which other distributions add subcommands (memacct-bench: bench)."""

_EXTERNAL_COMMANDS = {"bench": "memacct-bench (the evaluation harness: pip install -e ./bench)"}


def _external_command(name: str | None = None) -> dict[str, click.Command]:
    """The subcommands other distributions register (``name``: only that one).

    Reading the entry points scans every installed distribution's metadata (about 0.1-0.2 s),
    so :class:`_LazyGroup` does it only for a name that is not a core command, or to list
    them all for ``--help``. A plugin that fails to load is reported, never fatal.
    """
    from importlib.metadata import entry_points

    found: dict[str, click.Command] = {}
    for ep in entry_points(group=CLI_GROUP):
        if name is not None and ep.name != name:
            continue
        try:
            command = ep.load()
        except Exception as exc:  # a broken plugin must not break the core's commands
            _print_error(f"subcommand {ep.name!r} from {ep.value} failed to load: {exc}")
            continue
        if isinstance(command, click.Command):
            found.setdefault(ep.name, command)
    for known, dist in _EXTERNAL_COMMANDS.items():
        if known not in found and name in (None, known):
            found[known] = _missing_command(known, dist)
    return found


class _LazyGroup(click.Group):
    """The core's commands at once; other distributions' only when asked for by name or listed."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            command = _external_command(cmd_name).get(cmd_name)
            if command is not None:
                self.add_command(command, cmd_name)
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name, command in _external_command().items():
            if name not in self.commands:
                self.add_command(command, name)
        return super().list_commands(ctx)


def _missing_command(name: str, dist: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True}, add_help_option=False)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def missing(args: tuple[str, ...]) -> None:
        raise InvalidInputError(f"'memacct {name}' comes with {dist}; it is not installed here")

    missing.help = f"(not installed: {dist})"
    return missing


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", "-V", prog_name="memacct", message="%(prog)s %(version)s"
)
def app() -> None:
    """How much accelerator memory can the KV cache safely take?

    Measure a device, plan a KV-cache budget from a saved profile or a simulated
    device, and benchmark the truth sources.
    """


@app.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def backends_cmd(as_json: bool) -> None:
    """List every registered backend, whether it can run here, and why not."""
    from memacct.registry import available_backends

    if sys.stderr.isatty() and not as_json:
        # Plugins import their frameworks (seconds each): say what is happening meanwhile.
        with Console(stderr=True).status("probing backends (importing their frameworks) ..."):
            infos = available_backends()
    else:
        infos = available_backends()
    if as_json:
        _echo_json([info.model_dump() for info in infos])
        return
    table = Table(title="memacct backends")
    for col in ("name", "available", "default truth source", "distribution", "reason"):
        table.add_column(col, overflow="fold")
    for info in infos:
        dist = f"{info.distribution or '-'} {info.version or ''}".strip()
        table.add_row(
            info.name,
            "[green]yes[/green]" if info.available else "[red]no[/red]",
            info.default_truth_source or "-",
            dist,
            info.reason,
        )
    _console().print(table)


def _snapshot_table(snap: Any) -> Table:
    table = Table(title=f"{snap.backend}:{snap.device}")
    table.add_column("memory")
    table.add_column("GiB", justify="right")
    table.add_column("bytes", justify="right")
    rows = [
        ("total", snap.total),
        ("free", snap.free),
        ("used", snap.used),
        ("reserved (allocator)", snap.reserved),
        ("allocated (tensors)", snap.allocated),
        ("allocated peak", snap.allocated_peak),
        ("reserved peak", snap.reserved_peak),
        ("non-allocator", snap.non_allocator),
        ("other processes", snap.other_processes),
    ]
    for label, value in rows:
        if value is None:
            table.add_row(label, "n/a", "not attributable on this backend")
        else:
            table.add_row(label, f"{value / 2**30:.2f}", f"{value:,}")
    return table


@app.command("snapshot")
@click.option(
    "--backend", "backend_name", default=None, help="Backend name (default: best available)."
)
@click.option("--device", default=0, show_default=True, type=int, help="Device index.")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as JSON.")
@click.option(
    "--watch",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Refresh every SECONDS (at least 0.1) until interrupted; one line per refresh when "
    "the output is not a terminal.",
)
@click.option(
    "--demo",
    is_flag=True,
    help="Show a simulated device in use (weights, cache, a co-tenant) instead of a fresh one.",
)
def snapshot_cmd(
    backend_name: str | None, device: int, as_json: bool, watch: float | None, demo: bool
) -> None:
    """Show the device's memory split into other processes, allocator and the rest."""
    from memacct.measure import snapshot
    from memacct.registry import get_backend

    if watch is not None and not (math.isfinite(watch) and watch >= MIN_WATCH_S):
        raise InvalidInputError(
            f"--watch {watch:g} is not a refresh interval: give at least {MIN_WATCH_S:g} seconds"
        )
    if demo:
        if backend_name not in (None, "sim"):
            raise InvalidInputError(
                f"--demo shows a simulated device in use; it cannot be combined with "
                f"--backend {backend_name} (drop one of the two)"
            )
        backend = get_backend("sim", device=_demo_device())
    else:
        backend = get_backend(backend_name)
    note = _sim_note(backend.name, demo, as_json)
    if watch is None:
        snap = snapshot(backend, device)
        if as_json:
            click.echo(snap.model_dump_json(indent=2))
        else:
            _console().print(_snapshot_table(snap))
            if note:
                click.echo(note)
        return
    try:
        if as_json or not sys.stdout.isatty():
            # A pipe or a log gets one line per refresh, flushed, instead of a live table.
            while True:
                snap = snapshot(backend, device)
                click.echo(snap.model_dump_json() if as_json else _snapshot_line(snap))
                sys.stdout.flush()
                time.sleep(watch)
        from rich.live import Live

        if note:
            click.echo(note)
        with Live(_snapshot_table(snapshot(backend, device)), console=_console()) as live:
            while True:
                time.sleep(watch)
                live.update(_snapshot_table(snapshot(backend, device)))
    except KeyboardInterrupt:
        return


MIN_WATCH_S = 0.1
"""Shortest ``--watch`` interval: faster only spins a core without showing anything new."""


def _snapshot_line(snap: Any) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(snap.timestamp))
    other = "n/a" if snap.other_processes is None else format_gib(snap.other_processes)
    return (
        f"{stamp} {snap.backend}:{snap.device} used {format_gib(snap.used)} of "
        f"{format_gib(snap.total)} (free {format_gib(snap.free)}): reserved "
        f"{format_gib(snap.reserved)}, allocated {format_gib(snap.allocated)}, non-allocator "
        f"{format_gib(snap.non_allocator)}, other processes {other}"
    )


def _sim_note(name: str, demo: bool, as_json: bool) -> str | None:
    if name != "sim" or as_json:
        return None
    if demo:
        return (
            "note: a demo state of the simulated device: 14.00GiB of weights, 2.00GiB of cached "
            "blocks, 0.50GiB outside the allocator (a driver context) and a 6.00GiB co-tenant"
        )
    return (
        "note: this simulated device is fresh, so it holds nothing; "
        "'memacct snapshot --demo' shows one in use"
    )


def _demo_device() -> Any:
    """A simulated H100 in use: weights, cached blocks, a driver context and a co-tenant."""
    from memacct.sim import SimDevice

    dev = SimDevice("h100-80gb")
    dev.other_process_malloc(6 * GiB)
    dev.external_malloc(GiB // 2)
    for _ in range(14):
        dev.malloc(GiB)
    dev.free(dev.malloc(2 * GiB))  # freed, but kept cached by the allocator
    return dev


def _finite_positive(name: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InvalidInputError(f"{name} must be a positive finite number, got {value}")


def _model_config(model: str) -> tuple[dict[str, Any], str]:
    from memacct.planner import load_model_preset, model_presets

    path = Path(model)
    if path.suffix == ".json" or path.exists():
        from memacct.planner.config import read_config_file

        return read_config_file(path), path.stem
    if model not in model_presets():
        raise InvalidInputError(
            f"--model {model!r} is neither a config.json file nor a model preset; presets: "
            f"{', '.join(model_presets())} (or 'memacct plan --model list')"
        )
    return load_model_preset(model), model


@app.command("plan")
@click.option(
    "--profile",
    "profile_path",
    default=None,
    help="A ProfileResult saved by an engine (JSON).",
)
@click.option(
    "--device",
    "device_preset",
    default=None,
    help="Plan offline for this device (preset or short name: h100, rtx4090, 910b4, ...).",
)
@click.option(
    "--device-memory",
    default=None,
    help="Plan offline for any other device of this total memory (e.g. 24GiB).",
)
@click.option("--allocator", default=None, help="Allocator preset (simulated device only).")
@click.option(
    "--model", required=True, help="config.json path, checkpoint directory, preset, or 'list'."
)
@click.option(
    "--gpu-memory-utilization",
    "utilization",
    type=float,
    default=None,
    help="Default 0.9; offline SGLang: its own mem_fraction_static for the GPU.",
)
@click.option(
    "--engine",
    type=click.Choice(["vllm", "vllm-ascend", "sglang"]),
    default="vllm",
    show_default=True,
    help="Whose KV-cache manager sizes the cache (docs/engines.md).",
)
@click.option(
    "--kv-cache-memory-bytes",
    "kv_cache_memory",
    default=None,
    help="KV-cache budget per rank (e.g. 20GiB, 512MiB, 21474836480); with neither --profile "
    "nor --device the plan needs no device.",
)
@click.option(
    "--block-size", type=int, default=None, help="Default: the engine's (vLLM 16, SGLang 1)."
)
@click.option("--max-model-len", type=int, default=None)
@click.option(
    "--max-num-batched-tokens", type=int, default=None, help="Default: the engine's, per device."
)
@click.option("--max-num-seqs", type=int, default=None, help="Default: the engine's, per device.")
@click.option("--tensor-parallel-size", type=int, default=1, show_default=True)
@click.option("--pipeline-parallel-size", type=int, default=1, show_default=True)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--enforce-eager", is_flag=True, help="No CUDA graphs (offline plan).")
@click.option(
    "--engine-version",
    default=None,
    help="Follow this engine release offline (e.g. 0.11.0); default: the newest modelled.",
)
@click.option(
    "--sampler",
    type=click.Choice(["auto", "sort", "triton", "flashinfer"]),
    default="auto",
    show_default=True,
    help="vLLM's top-k/top-p path in its start-up sampler run (offline plan): auto follows "
    "the release and VLLM_USE_FLASHINFER_SAMPLER; the engine's log names it ('Using "
    "FlashInfer for top-p & top-k sampling').",
)
@click.option(
    "--truth-source",
    default=None,
    help="allocated_peak, reserved or auto (default: MEMACCT_TRUTH_SOURCE, else auto).",
)
@click.option(
    "--allow-long-max-model-len",
    is_flag=True,
    help="Accept a --max-model-len beyond the model's positions, as vLLM does with "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan with its provenance as JSON.")
@click.option(
    "--allow-mismatch",
    is_flag=True,
    help="Plan even if the profile recorded another model, layout or batch budget.",
)
@click.option(
    "--plot",
    "plot_path",
    default=None,
    help="Draw the device's memory as a stacked bar (PNG or SVG).",
)
def plan_cmd(
    profile_path: str | None,
    device_preset: str | None,
    device_memory: str | None,
    allocator: str | None,
    model: str,
    utilization: float | None,
    engine: str,
    kv_cache_memory: str | None,
    block_size: int | None,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    kv_cache_dtype: str,
    enforce_eager: bool,
    engine_version: str | None,
    sampler: str,
    truth_source: str | None,
    allow_long_max_model_len: bool,
    as_json: bool,
    allow_mismatch: bool,
    plot_path: str | None,
) -> None:
    """Plan the KV cache from a saved profile, or offline for a device.

    Offline (no --profile): the engine's start-up is estimated from the model
    (weights as the engine shards and quantizes them, the profile run, CUDA
    graphs) and the first line is the verdict: "fits: N concurrent requests of
    L tokens" or "does not fit: ..." with what to change (exit status 1).
    With --profile: the profiling report, a breakdown and the plan.
    """
    from memacct.models import TruthSource
    from memacct.planner import KVCacheSpec, load_profile, model_presets, plan_kv_cache
    from memacct.truth import requested_truth_source

    if model == "list":
        for name in model_presets():
            click.echo(name)
        return
    if plot_path is not None:
        _check_plot_path(plot_path)
    if profile_path is not None and (device_preset is not None or device_memory is not None):
        raise InvalidInputError("give either --profile or --device/--device-memory, not both")
    if profile_path is not None:
        _refuse_simulation_options()
    # The argument, else MEMACCT_TRUTH_SOURCE, else auto: a bad value's error names the variable.
    requested_truth_source(truth_source, TruthSource.AUTO)
    config, model_name, checkpoint = _model_source(model)
    kv_bytes = None if kv_cache_memory is None else _parse_bytes(kv_cache_memory)
    budget_only = kv_bytes is not None and device_preset is None and device_memory is None
    if profile_path is None and not budget_only:
        if kv_bytes is not None:
            raise InvalidInputError(
                "--kv-cache-memory-bytes gives the budget itself: drop --device/--device-memory "
                "(or drop --kv-cache-memory-bytes to have memacct estimate the budget)"
            )
        _plan_offline_cmd(
            config, model_name, checkpoint, device_preset, device_memory, allocator, utilization,
            block_size, max_model_len, max_num_batched_tokens, max_num_seqs,
            tensor_parallel_size, pipeline_parallel_size, kv_cache_dtype, enforce_eager,
            truth_source, as_json, plot_path, engine=engine, engine_version=engine_version,
            allow_long_max_model_len=allow_long_max_model_len, sampler=sampler,
        )  # fmt: skip
        return
    if max_model_len is not None and not allow_long_max_model_len:
        _check_max_model_len(max_model_len, config)
    spec = KVCacheSpec.from_hf_config(
        config,
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
    )
    if engine_version is not None or enforce_eager or sampler != "auto":
        raise InvalidInputError(
            "--engine-version, --sampler and --enforce-eager shape the offline plan; a saved "
            "profile already measured the engine (drop --profile to plan offline)"
        )
    if truth_source is not None:
        raise InvalidInputError(
            "--truth-source applies when profiling; a saved profile already resolved "
            "its truth source (profile again to change it)"
        )
    result = None if profile_path is None else load_profile(profile_path)
    plan = plan_kv_cache(
        result,
        spec,
        engine=engine,
        kv_cache_memory_bytes=kv_bytes,
        gpu_memory_utilization=0.9 if utilization is None else utilization,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens or 8192,
        allow_mismatch=allow_mismatch,
    )
    if result is None:
        if as_json:
            click.echo(plan.model_dump_json(indent=2))
        else:
            click.echo(plan.report())
        return
    if plot_path is not None:
        from memacct.plot import plot_plan

        plot_plan(
            plan, result, plot_path,
            title=f"{model_name} on {result.backend}:{result.device} (saved profile)",
        )  # fmt: skip
    if as_json:
        click.echo(plan.model_dump_json(indent=2))
        return
    console = _console()
    console.print(plan.report(), markup=False)
    console.print(_breakdown_table(plan, result))
    console.print(
        f"plan: {plan.num_blocks:,} blocks of {plan.block_size} tokens "
        f"({plan.num_tokens:,} tokens, {format_gib(plan.kv_cache_used_bytes)} of kv_cache_size "
        f"{format_gib(plan.kv_cache_bytes)}); "
        f"maximum concurrency for {plan.max_model_len:,} tokens per request: "
        f"{plan.max_concurrency:.2f}x",
        markup=False,
    )
    if plot_path is not None:
        console.print(f"plot written to {plot_path}", markup=False)


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


def _refuse_simulation_options() -> None:
    """Options that describe a simulated start make no sense with a saved profile."""
    ctx = click.get_current_context()
    given = [
        f"--{name.replace('_', '-')}"
        for name in ("allocator", "max_num_seqs")
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise InvalidInputError(
            f"{' and '.join(given)} {'describe' if len(given) > 1 else 'describes'} a simulated "
            "engine start, but --profile gives a "
            "saved one whose allocator and sequence budget are already in it: drop "
            f"{' and '.join(given)}, or plan with --device instead of --profile"
        )


def _derived_max_model_len(config: dict[str, Any]) -> tuple[int, str] | None:
    """The longest sequence the config supports, as vLLM derives it, and the key it came from.

    One owner: :attr:`memacct.planner.config.ModelConfig.position_limit`.
    """
    from memacct.planner.config import ModelConfig

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


def _model_source(model: str) -> tuple[dict[str, Any], str, Path | None]:
    """The config, a display name and, for a checkpoint directory, its path."""
    path = Path(model)
    if path.is_dir():
        from memacct.planner.config import read_config_file

        return read_config_file(path / "config.json"), path.name, path
    config, name = _model_config(model)
    return config, name, None


def _plan_offline_cmd(
    config: dict[str, Any],
    model_name: str,
    checkpoint: Path | None,
    device_preset: str | None,
    device_memory: str | None,
    allocator: str | None,
    utilization: float | None,
    block_size: int | None,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    kv_cache_dtype: str,
    enforce_eager: bool,
    truth_source: str | None,
    as_json: bool,
    plot_path: str | None,
    engine: str = "vllm",
    engine_version: str | None = None,
    allow_long_max_model_len: bool = False,
    sampler: str = "auto",
) -> None:
    from memacct.devices import parse_memory_size
    from memacct.engines.start import plan_offline

    if allocator is not None:
        raise InvalidInputError(
            f"--allocator {allocator!r} applies to the simulated device (memacct bench); the "
            "offline plan follows the engine's own arithmetic and needs no allocator"
        )
    if truth_source is not None:
        from memacct.models import TruthSource

        TruthSource.parse(truth_source)
    if pipeline_parallel_size != 1:
        raise InvalidInputError(
            f"--pipeline-parallel-size {pipeline_parallel_size}: the offline plan models one "
            "tensor-parallel group; plan each pipeline stage's layers with --profile"
        )
    if utilization is not None and not (math.isfinite(utilization) and 0 < utilization <= 1):
        raise InvalidInputError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    plan = plan_offline(
        config,
        model_name=model_name,
        engine=engine,
        device=device_preset,
        device_memory=parse_memory_size(device_memory) if device_memory is not None else None,
        gpu_memory_utilization=utilization,
        tensor_parallel_size=tensor_parallel_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        enforce_eager=enforce_eager,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        checkpoint=checkpoint,
        engine_version=engine_version,
        allow_long_max_model_len=allow_long_max_model_len,
        sampler=sampler,
        flashinfer_sampler_env=_flashinfer_sampler_env(),
    )
    if plot_path is not None:
        _plot_offline(plan, plot_path)
    if as_json:
        click.echo(plan.model_dump_json(indent=2))
    else:
        console = _console()
        console.print(plan.verdict, markup=False)
        for suggestion in plan.suggestions:
            console.print(f"  - {suggestion}", markup=False)
        for note in plan.notes:
            console.print(f"note: {note}", markup=False)
        console.print(_offline_table(plan))
        if plan.fits:
            console.print(
                f"plan: {plan.num_blocks:,} blocks of {plan.block_size} tokens "
                f"({plan.kv_tokens:,} tokens, {format_gib(plan.num_blocks * plan.block_bytes)}); "
                f"maximum concurrency for {plan.max_model_len:,} tokens per request: "
                f"{plan.max_concurrency:.2f}x",
                markup=False,
            )
        if plot_path is not None:
            console.print(f"plot written to {plot_path}", markup=False)
    if not plan.fits:
        raise click.exceptions.Exit(1)


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


def _offline_table(plan: Any) -> Table:
    table = Table(
        title=f"{plan.model} on {plan.device_label} ({plan.engine} {plan.engine_version}, "
        f"TP {plan.tensor_parallel_size}, per rank)"
    )
    table.add_column("part")
    table.add_column("GiB", justify="right")
    graphs = "CUDA graphs" + ("" if plan.cudagraph_charged else " (not charged)")
    rows = [
        ("device total", plan.total_memory),
        (f"engine budget ({plan.gpu_memory_utilization})", plan.requested_memory),
        (f"weights ({plan.quantization or 'unquantized'}, {plan.weights_source})",
         plan.weights_memory),
        (f"activation peak ({plan.max_num_batched_tokens} tokens, {plan.max_num_seqs} seqs"
         + (f", {plan.sampler} sampler)" if plan.sampler else ")"),
         plan.activation_peak),
        ("non-torch growth", plan.non_allocator_increase),
        (graphs, plan.cudagraph_memory),
        ("KV cache", plan.kv_cache_bytes),
    ]  # fmt: skip
    for label, value in rows:
        table.add_row(label, f"{value / 2**30:.2f}")
    return table


def _plot_offline(plan: Any, path: str) -> None:
    from types import SimpleNamespace

    from memacct.models import TruthSource
    from memacct.plot import plot_plan

    used = max(0, plan.num_blocks * plan.block_bytes)
    graphs = plan.cudagraph_memory if plan.cudagraph_charged else 0
    result = SimpleNamespace(
        baseline=SimpleNamespace(other_processes=0, non_allocator=0),
        non_allocator_increase=plan.non_allocator_increase,
        activation_peak=plan.activation_peak + graphs,
        allocated_peak_increase=plan.activation_peak + graphs,
        truth_source=TruthSource.ALLOCATED_PEAK,
        weights_memory=plan.weights_memory,
        backend="offline",
        device=plan.device,
    )
    # What the plot reads of a KVCachePlan, from the offline plan's figures.
    shim = SimpleNamespace(
        kv_cache_bytes=max(used, plan.kv_cache_bytes),
        kv_cache_used_bytes=used,
        allocator_reserve_bytes=0,
        total_memory=plan.total_memory,
        target_allocation=plan.requested_memory,
        gpu_memory_utilization=plan.gpu_memory_utilization,
        num_blocks=plan.num_blocks,
        block_size=plan.block_size,
        num_tokens=plan.kv_tokens,
        max_concurrency=plan.max_concurrency,
        max_model_len=plan.max_model_len,
    )
    plot_plan(shim, cast(Any, result), path, title=f"{plan.model} on {plan.device_label}")


def _breakdown_table(plan: Any, result: Any) -> Table:
    from memacct.plot import KV_CACHE_PARTS, KV_CACHE_SIZE, breakdown

    table = Table(title="device memory breakdown")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    table.add_column("share", justify="right")

    def row(label: str, value: int) -> None:
        table.add_row(label, f"{value / GiB:.2f}", f"{value / plan.total_memory:.1%}")

    for label, value in breakdown(plan, result):
        if label == KV_CACHE_PARTS[0]:
            # The report's one KV figure, then its parts (they sum to it).
            row(KV_CACHE_SIZE, plan.kv_cache_bytes)
        if label in KV_CACHE_PARTS:
            row("  " + label.removeprefix(KV_CACHE_SIZE + ": "), value)
        else:
            row(label, value)
    return table


# click >= 8.2 raises this for a group run without a command (older versions exit with the help).
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    cls for cls in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if cls is not None
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    code = _run(argv)
    from memacct.registry import unfinished_probes

    if argv is None and unfinished_probes():
        # A plugin still importing past its time limit (a hanging one, or a framework slower
        # than MEMACCT_PLUGIN_TIMEOUT) would run its exit hooks half-imported during the
        # interpreter's shutdown and may crash it: leave without a shutdown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(argv: Sequence[str] | None) -> int:
    try:
        code = app.main(
            args=list(argv) if argv is not None else None,
            prog_name="memacct",
            standalone_mode=False,
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        if isinstance(exc, _NO_ARGS_IS_HELP):  # `memacct` alone: the help, as click shows it
            exc.show()
            return EXIT_USER_ERROR
        # click's own "Usage: ... Error: Invalid value" becomes memacct's one line.
        message = " ".join(exc.format_message().split())
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            message += f" (see '{exc.ctx.command_path} --help')"
        _print_error(message)
        return EXIT_USER_ERROR if exc.exit_code in (1, 2) else exc.exit_code
    except click.exceptions.Abort:
        return 130
    except MemacctError as exc:
        return _print_error(str(exc))
    except KeyboardInterrupt:
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
