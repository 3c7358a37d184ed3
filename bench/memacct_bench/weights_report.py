"""The weights of every preset, offline plan beside simulated start, term by term.

``memacct plan --model X --device h100`` (:func:`memacct.planner.offline.plan_offline`)
charges the model's weight inventory as ``weights_memory``, as vLLM 0.33's
``model_memory_usage`` does; the harness's simulated start
(:func:`memacct_bench.start.simulate_engine_start`) measures what its allocator gained
before the profile, which also holds the model runner's persistent step buffers and the
allocator's rounding. :class:`~memacct_bench.start.WeightsTerms` names the three terms;
this report shows, for each preset and tensor-parallel size, that the inventory is the
offline figure to the byte and what the other two terms add::

    .venv/bin/python -m memacct_bench.weights_report [--device h100] [--truth-source auto]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from memacct.errors import MemacctError
from memacct.model.sources.presets import load_model_preset, model_presets
from memacct.planner.offline import plan_offline
from memacct.units import MiB
from memacct_bench.start import simulate_engine_start

__all__ = ["WeightsRow", "main", "weights_rows"]

_SIM_DEVICE = {"h100": "h100-80gb", "a100": "a100-80gb", "b200": "b200-192gb"}


@dataclass(frozen=True)
class WeightsRow:
    """One preset at one tensor-parallel size: the offline weights and the simulated terms."""

    model: str
    tensor_parallel_size: int
    offline: int
    parameters: int
    step_buffers: int
    allocator_rounding: int
    measured: int


def weights_rows(
    device: str = "h100", tensor_parallel_sizes: tuple[int, ...] = (1, 2),
    truth_source: str = "auto",
) -> tuple[list[WeightsRow], list[str]]:  # fmt: skip
    """Every preset that starts on ``device`` at each size, and why the others did not."""
    rows: list[WeightsRow] = []
    skipped: list[str] = []
    for model in model_presets():
        for tp in tensor_parallel_sizes:
            try:
                plan = plan_offline(model, device=device, tensor_parallel_size=tp)
                if plan.max_num_batched_tokens is None or plan.max_num_seqs is None:
                    skipped.append(f"{model} TP{tp}: the offline plan has no batch budgets")
                    continue
                start = simulate_engine_start(
                    load_model_preset(model), device=_SIM_DEVICE.get(device, device),
                    tensor_parallel_size=tp, truth_source=truth_source,
                    max_num_batched_tokens=plan.max_num_batched_tokens,
                    max_num_seqs=plan.max_num_seqs, max_model_len=plan.max_model_len,
                )  # fmt: skip
            except MemacctError as exc:
                skipped.append(f"{model} TP{tp}: {str(exc).splitlines()[0][:100]}")
                continue
            terms = start.weights_terms
            assert terms is not None  # simulate_engine_start always sets them
            rows.append(WeightsRow(
                model, tp, plan.weights_memory, terms.parameters, terms.step_buffers,
                terms.allocator_rounding, start.result.weights_memory,
            ))  # fmt: skip
    return rows, skipped


def _mib(n: int) -> str:
    return f"{n / MiB:,.1f}"


def render(rows: list[WeightsRow], skipped: list[str]) -> str:
    """The rows as a Markdown table (MiB), then the presets that did not start."""
    lines = [
        "| model | TP | offline weights | inventory | step buffers | allocator rounding "
        "| simulated weights |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.tensor_parallel_size} | {_mib(r.offline)} | {_mib(r.parameters)} "
            f"| {_mib(r.step_buffers)} | {_mib(r.allocator_rounding)} | {_mib(r.measured)} |"
        )
    lines += [f"- not started: {s}" for s in skipped]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 where an inventory differs from the offline weights."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h100")
    parser.add_argument("--truth-source", default="auto")
    args = parser.parse_args(argv)
    rows, skipped = weights_rows(args.device, truth_source=args.truth_source)
    print(render(rows, skipped))
    return 0 if all(r.parameters == r.offline for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
