"""The ``memacct`` command line: backends, snapshot, plan, bench.

Every user mistake ends as one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from memacct._version import __version__
from memacct.errors import InvalidInputError, MemacctError
from memacct.units import format_gib

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    help="Refresh every SECONDS until interrupted.",
)
def snapshot_cmd(backend_name: str | None, device: int, as_json: bool, watch: float | None) -> None:
    """Show the device's memory split into other processes, allocator and the rest."""
    from memacct.measure import snapshot
    from memacct.registry import get_backend

    if watch is not None and not (math.isfinite(watch) and watch > 0):
        raise InvalidInputError(f"--watch must be a positive number of seconds, got {watch}")
    backend = get_backend(backend_name)
    if watch is None:
        snap = snapshot(backend, device)
        if as_json:
            click.echo(snap.model_dump_json(indent=2))
        else:
            _console().print(_snapshot_table(snap))
        return
    from rich.live import Live

    try:
        if as_json:
            while True:
                click.echo(snapshot(backend, device).model_dump_json())
                time.sleep(watch)
        with Live(_snapshot_table(snapshot(backend, device)), console=_console()) as live:
            while True:
                time.sleep(watch)
                live.update(_snapshot_table(snapshot(backend, device)))
    except KeyboardInterrupt:
        return


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
    type=click.Path(dir_okay=False),
    default=None,
    help="A ProfileResult saved by an engine (JSON).",
)
@click.option(
    "--device",
    "device_preset",
    default=None,
    help="Simulate the engine's start on this device preset (e.g. h100-80gb).",
)
@click.option("--allocator", default=None, help="Allocator preset of the simulated device.")
@click.option("--model", required=True, help="config.json path, a preset name, or 'list'.")
@click.option("--gpu-memory-utilization", "utilization", type=float, default=0.9, show_default=True)
@click.option("--block-size", type=int, default=16, show_default=True)
@click.option("--max-model-len", type=int, default=None)
@click.option("--max-num-batched-tokens", type=int, default=8192, show_default=True)
@click.option("--max-num-seqs", type=int, default=256, show_default=True)
@click.option("--tensor-parallel-size", type=int, default=1, show_default=True)
@click.option("--pipeline-parallel-size", type=int, default=1, show_default=True)
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--truth-source", default=None, help="allocated_peak, reserved or auto.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan with its provenance as JSON.")
@click.option(
    "--allow-mismatch",
    is_flag=True,
    help="Plan even if the profile recorded another model, layout or batch budget.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Draw the device's memory as a stacked bar (PNG or SVG).",
)
def plan_cmd(
    profile_path: str | None,
    device_preset: str | None,
    allocator: str | None,
    model: str,
    utilization: float,
    block_size: int,
    max_model_len: int | None,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    kv_cache_dtype: str,
    truth_source: str | None,
    as_json: bool,
    allow_mismatch: bool,
    plot_path: str | None,
) -> None:
    """Plan the KV cache from a saved profile or a simulated device.

    Prints the profiling report, a breakdown of the device's memory, and the
    plan (blocks, tokens, concurrency).
    """
    from memacct.planner import KVCacheSpec, load_profile, model_presets, plan_kv_cache

    if model == "list":
        for name in model_presets():
            click.echo(name)
        return
    if plot_path is not None and Path(plot_path).suffix.lower() not in {".png", ".svg"}:
        raise InvalidInputError(f"--plot {plot_path!r} must end in .png or .svg")
    if profile_path is not None and device_preset is not None:
        raise InvalidInputError("give either --profile or --device, not both")
    config, model_name = _model_config(model)
    spec = KVCacheSpec.from_hf_config(
        config,
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
    )
    if profile_path is not None:
        if truth_source is not None:
            raise InvalidInputError(
                "--truth-source applies when profiling; a saved profile already resolved "
                "its truth source (profile again to change it)"
            )
        result = load_profile(profile_path)
    else:
        from memacct.engines.start import simulate_engine_start

        start = simulate_engine_start(
            config,
            device=device_preset or "h100-80gb",
            allocator=allocator or "torch-cuda",
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            tensor_parallel_size=tensor_parallel_size,
            kv_cache_dtype=kv_cache_dtype,
            truth_source=truth_source or "auto",
            progress=not as_json and sys.stderr.isatty(),
        )
        result = start.result
    plan = plan_kv_cache(
        result,
        spec,
        gpu_memory_utilization=utilization,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        allow_mismatch=allow_mismatch,
    )
    if plot_path is not None:
        from memacct.plot import plot_plan

        plot_plan(
            plan, result, plot_path, title=f"{model_name} on {result.backend}:{result.device}"
        )
    if as_json:
        click.echo(plan.model_dump_json(indent=2))
        return
    console = _console()
    console.print(plan.report(), markup=False)
    console.print(_breakdown_table(plan, result))
    console.print(
        f"plan: {plan.num_blocks:,} blocks of {plan.block_size} tokens "
        f"({plan.num_tokens:,} tokens, {format_gib(plan.kv_cache_used_bytes)}); "
        f"maximum concurrency for {plan.max_model_len:,} tokens per request: "
        f"{plan.max_concurrency:.2f}x",
        markup=False,
    )
    if plot_path is not None:
        console.print(f"plot written to {plot_path}", markup=False)


def _breakdown_table(plan: Any, result: Any) -> Table:
    from memacct.plot import breakdown

    table = Table(title="device memory breakdown")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    table.add_column("share", justify="right")
    for label, value in breakdown(plan, result):
        table.add_row(label, f"{value / 2**30:.2f}", f"{value / plan.total_memory:.1%}")
    return table


CLI_GROUP = "memacct.cli"
"""Entry-point group through which other distributions add subcommands (memacct-bench: bench)."""

_EXTERNAL_COMMANDS = {"bench": "memacct-bench (the evaluation harness: pip install -e ./bench)"}


def _load_external_commands() -> None:
    """Add the subcommands other distributions register (a broken one is reported, never fatal)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=CLI_GROUP):
        if ep.name in app.commands:
            continue
        try:
            command = ep.load()
        except Exception as exc:  # a broken plugin must not break the core's commands
            _print_error(f"subcommand {ep.name!r} from {ep.value} failed to load: {exc}")
            continue
        if isinstance(command, click.Command):
            app.add_command(command, ep.name)
    for name, dist in _EXTERNAL_COMMANDS.items():
        if name not in app.commands:
            app.add_command(_missing_command(name, dist), name)


def _missing_command(name: str, dist: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True}, add_help_option=False)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def missing(args: tuple[str, ...]) -> None:
        raise InvalidInputError(f"'memacct {name}' comes with {dist}; it is not installed here")

    missing.help = f"(not installed: {dist})"
    return missing


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    _load_external_commands()
    try:
        code = app.main(
            args=list(argv) if argv is not None else None,
            prog_name="memacct",
            standalone_mode=False,
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
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
