"""Replay the real start-up logs of tests/data/startup_logs/ through memacct's offline model.

Writes docs/accuracy.md (``make accuracy``): per case, what the engine logged and
what memacct estimates for the same model, device and settings, and the per-field
error table. tests/test_startup_logs.py replays the same cases through
:func:`replay` and checks the targets.

Run: ``python tools/accuracy.py [--output docs/accuracy.md]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memacct.engines.vllm.startup import StartupSettings
from memacct.io import atomic_write_text, read_json_object
from memacct.planner import load_model_preset
from memacct.planner.weights import estimate_weights, mxfp4_padding

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "startup_logs" / "cases.json"
GIB = 2**30
FIELDS = ("weights", "activation", "non_torch", "cudagraph", "kv_cache")


@dataclass(frozen=True)
class Replayed:
    """One log case and memacct's estimate of each logged figure (GiB; None: not replayed)."""

    case: dict[str, Any]
    logged: dict[str, float | None]
    estimated: dict[str, float | None]
    reason: str = ""

    def error(self, name: str) -> float | None:
        """Relative error of field ``name`` (estimate / logged - 1), or None."""
        got, want = self.estimated.get(name), self.logged.get(name)
        if got is None or want is None or want == 0:
            return None
        return got / want - 1


def load_cases(path: Path = DATA) -> dict[str, Any]:
    """The development set."""
    return read_json_object(path, "start-up log cases")


def _config(models: dict[str, Any], name: str | None) -> dict[str, Any] | None:
    entry = models.get(name or "")
    if entry is None:
        return None
    if "preset" in entry:
        return load_model_preset(entry["preset"])
    return dict(entry["config"])


def _startup(engine: str) -> Any:
    if engine == "vllm-ascend":
        from memacct.engines.vllm_ascend.startup import STARTUP as ascend

        return ascend
    if engine == "sglang":
        from memacct.engines.sglang.startup import STARTUP as sglang

        return sglang
    from memacct.engines.vllm.startup import STARTUP as vllm

    return vllm


def replay(case: dict[str, Any], models: dict[str, Any]) -> Replayed:
    """memacct's estimate for one logged start-up."""
    logged_raw = case["logged"]
    logged: dict[str, float | None] = {
        "weights": logged_raw["weights_gib"],
        "activation": logged_raw["activation_gib"],
        "non_torch": logged_raw["non_torch_gib"],
        "kv_cache": logged_raw["kv_cache_gib"],
        "cudagraph": logged_raw["cudagraph_gib"] if case["kv_includes_cudagraph"] else None,
    }
    estimated: dict[str, float | None] = dict.fromkeys(FIELDS)
    config = _config(models, case["model"])
    s = case["settings"]
    tp = s["tensor_parallel_size"]
    layout = s.get("mxfp4_layout") or (
        "marlin" if case["engine_version"] == "0.10.1" else "hopper"
    )
    if config is None:
        return Replayed(case, logged, estimated, "config.json not recorded")
    weights = estimate_weights(config, tensor_parallel_size=tp, mxfp4_pad=mxfp4_padding(layout))
    estimated["weights"] = weights.total_bytes / GIB
    total = case["device_total_gib"]
    if total is None:
        return Replayed(case, logged, estimated, "device total not logged: weights only")
    settings = StartupSettings(
        tensor_parallel_size=tp,
        gpu_memory_utilization=s["gpu_memory_utilization"],
        max_model_len=s["max_model_len"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        max_num_seqs=s["max_num_seqs"],
        enforce_eager=s["enforce_eager"],
        kv_cache_dtype=s["kv_cache_dtype"],
        block_size=s["block_size"],
        charge_cudagraphs=case["kv_includes_cudagraph"],
        mxfp4_layout=layout,
        engine_version=case["engine_version"],
    )
    est = _startup(case["engine"]).estimate(
        config,
        total_memory=round(total * GIB),
        device_name=case["device"],
        settings=settings,
        weights=weights,
    )
    estimated["activation"] = est.activation_peak / GIB
    estimated["non_torch"] = est.non_allocator_increase / GIB
    estimated["cudagraph"] = est.cudagraph_memory / GIB if est.cudagraph_charged else None
    estimated["kv_cache"] = est.kv_cache_bytes / GIB
    return Replayed(case, logged, estimated)


def replay_all(data: dict[str, Any] | None = None) -> list[Replayed]:
    """Every case of the development set, replayed."""
    data = data or load_cases()
    return [replay(case, data["models"]) for case in data["cases"]]


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:+.1f}%"


def summary(rows: list[Replayed], name: str, *, v1_only: bool) -> tuple[int, float, float, int]:
    """(cases, median |error|, worst |error|, cases within 5%) for one field."""
    errs = [
        abs(e)
        for r in rows
        if (not v1_only or r.case["v1"] is True) and (e := r.error(name)) is not None
    ]
    if not errs:
        return 0, 0.0, 0.0, 0
    return len(errs), statistics.median(errs), max(errs), sum(e <= 0.05 for e in errs)


def _status(rows: list[Replayed]) -> str:
    n, median, _worst, within = summary(rows, "kv_cache", v1_only=True)
    wn, _wmed, wworst, _wwithin = summary(rows, "weights", v1_only=False)
    share = within / n if n else 0.0
    return (
        f"Status: KV cache within 5% on {within} of {n} V1-era cases ({100 * share:.0f}%: "
        f"{'meets' if share >= 0.8 else 'below'} the 80% target), median {100 * median:.1f}% "
        f"({'meets' if median <= 0.03 else 'misses'} the 3% target); weights within "
        f"{100 * wworst:.1f}% on all {wn} cases with a known checkpoint "
        f"({'meets' if wworst <= 0.02 else 'misses'} the 2% target)."
    )


def render(rows: list[Replayed]) -> str:
    """docs/accuracy.md."""
    out = [
        "# Accuracy of the offline plan against real engine start-ups",
        "",
        "Generated by `make accuracy` (`tools/accuracy.py`) from the development set in",
        "`tests/data/startup_logs/cases.json`: start-up logs that users pasted in public",
        "GitHub issues and repositories (each case cites its source). memacct gets the model's",
        "config.json, the device's total and the settings of the log, nothing the engine",
        "measured, and estimates each figure the engine logged. `tests/test_startup_logs.py`",
        "replays the same cases and checks the targets below. The replay follows each log's",
        "own arithmetic for CUDA graphs: the vLLM 0.11 logs did not take the graph estimate",
        "off the KV budget (their KV figure is total x utilization - weights - activation -",
        "non-torch, exactly), so it is not charged for them; vLLM 0.33, which memacct plans",
        "for by default, charges it.",
        "",
        "## Summary",
        "",
        "| field | set | cases | median abs error | worst | within 5% |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name in FIELDS:
        for label, v1 in (("vLLM V1-era", True), ("all", False)):
            n, med, worst, within = summary(rows, name, v1_only=v1)
            if n:
                out.append(
                    f"| {name} | {label} | {n} | {100 * med:.1f}% | {100 * worst:.1f}% | "
                    f"{within}/{n} |"
                )
    kv = [r for r in rows if r.case["v1"] is True and r.error("kv_cache") is not None]
    if kv:
        gib_errors = [abs((r.estimated["kv_cache"] or 0) - (r.logged["kv_cache"] or 0)) for r in kv]
        agree = sum(
            ((r.estimated["kv_cache"] or 0) > 0) == ((r.logged["kv_cache"] or 0) > 0) for r in kv
        )
        out += [
            "",
            f"KV cache on V1-era logs in GiB: median absolute error "
            f"{statistics.median(gib_errors):.2f} GiB, worst {max(gib_errors):.2f} GiB; the "
            f"verdict (room for a KV cache or none) agrees on {agree} of {len(kv)} cases.",
        ]
    out += [
        "",
        "Targets (issue 11): on V1-era logs the KV-cache size within 5% on at least 80% of",
        "cases with a median absolute error of at most 3%; weights within 2% on every case",
        "with a known checkpoint.",
        "",
        _status(rows),
        "",
        "## Per case",
        "",
        "Figures in GiB, logged / memacct (error). Empty: the log does not give the figure,",
        "or memacct cannot replay it (the reason column says why).",
        "",
        "| case | engine | device | TP | weights | activation | non-torch | CUDA graphs | KV cache "
        "| note |",
        "| --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        c = r.case
        cells = []
        for name in FIELDS:
            want, got = r.logged.get(name), r.estimated.get(name)
            if want is None and got is None:
                cells.append("")
            else:
                cells.append(f"{_fmt(want)} / {_fmt(got)} {_pct(r.error(name))}".strip())
        era = "V1" if c["v1"] else ("V0" if c["v1"] is False else "")
        out.append(
            f"| [{c['id']}]({c['source']}) | {c['engine']} {c['engine_version']} {era} | "
            f"{c['device']} | {c['settings']['tensor_parallel_size']} | "
            + " | ".join(cells)
            + f" | {r.reason} |"
        )
    out += [
        "",
        "## Where the remaining error comes from",
        "",
        "- **V0 logs** (vLLM before 0.8) profiled one prefill of `max_model_len` tokens",
        "  and counted the whole CUDA context as non-torch memory; memacct models V1,",
        "  so their non-torch figure is off by design (kept to show it, not to tune to it).",
        "- **gpt-oss-120b (llm-d)**: the source's own numbers disagree: its activation",
        "  column repeats gpt-oss-20b's 7.38 GiB while its KV figure implies 3.42 GiB.",
        "- **Mistral-Small-3.2 (multimodal)**: no config.json was found for it; its",
        "  activation (2.12 GiB) is far below the dummy sampler's 38 bytes per logit,",
        "  which suggests that release profiled it with fewer sequences.",
        "- **CUDA graphs**: only the vLLM 0.21 log (LMCache#3430) gives the estimate vLLM",
        "  charges; the 0.11 logs' 'CUDAGraph memory' is the change of free memory during",
        "  capture (negative when capture frees cached blocks).",
        "- **Not independent**: the LMCache#3430 case (vLLM 0.21) informed two choices, the",
        "  per-graph bytes (with Qwen3-0.6B's capture) and the release from which the Triton",
        "  sampler is assumed (with vllm-project/vllm#33538's date); without it the V1 KV",
        "  figure is 7 of 9 within 5%.",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write docs/accuracy.md and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default=str(ROOT / "docs" / "accuracy.md"))
    args = parser.parse_args(argv)
    rows = replay_all()
    atomic_write_text(Path(args.output), render(rows), "accuracy report")
    for name in FIELDS:
        n, med, worst, within = summary(rows, name, v1_only=True)
        print(f"{name:>10} V1: {n} cases, median {100 * med:.1f}%, worst {100 * worst:.1f}%, "
              f"within 5%: {within}/{n}")  # fmt: skip
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
