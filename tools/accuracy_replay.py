"""The replay of tests/data/startup_logs/ through memacct's offline model, and its checks.

Per case: what the engine logged and what memacct estimates for the same model, device and
settings (:func:`replay`), and the per-field error, the tolerance the KV error allows the
token counts (:func:`token_bound`) and how the logged figures follow from the logged budget
(:func:`budget_agrees`). ``tools/accuracy.py`` writes docs/accuracy.md from these rows;
tests/test_startup_logs.py checks the targets on them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memacct.engines.base import StartupSettings
from memacct.engines.deployment import Deployment
from memacct.engines.vllm.defaults import serving_kv_cache_dtype
from memacct.errors import InsufficientMemoryError
from memacct.explain.prints import block_print_tokens
from memacct.io import read_json_object
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import estimate_weights, mxfp4_padding
from memacct.planner import load_model_preset, plan_kv_cache
from memacct.planner.result import KVCachePlan

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "startup_logs" / "cases.json"
GIB = 2**30
FIELDS = ("weights", "activation", "non_torch", "cudagraph", "kv_cache", "kv_tokens",
          "max_concurrency")
GIB_FIELDS = FIELDS[:5]
ROUNDING_GIB = 0.005
"""vLLM prints "Available KV cache memory" with two decimals of GiB (``%.2f GiB``): the
budget behind a logged figure lies within half a hundredth of a GiB of it."""


@dataclass(frozen=True)
class Replayed:
    """One log case and memacct's estimate of each logged figure (GiB; None: not replayed)."""

    case: dict[str, Any]
    logged: dict[str, float | None]
    estimated: dict[str, float | None]
    reason: str = ""
    from_budget: dict[str, tuple[float, float]] | None = None
    """What the engine's KV manager gives the logged budget minus / plus the print's rounding:
    ``tokens`` as vLLM 0.33 prints them, ``block_tokens`` as older releases did, ``concurrency``."""
    token_slack: int = 0
    """Tokens the print formula of older releases can add for uniform models (see render)."""
    refused: bool = False
    """memacct's plan says the engine refuses to start (one request does not fit)."""
    sampler: str = ""
    """The dummy sampler's top-k/top-p path charged ("log": the one the log names)."""

    @property
    def development(self) -> bool:
        """Whether this case informed one of memacct's constants (not an independent check)."""
        return bool(self.case.get("development"))

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


def _kv_plan(
    spec: KVCacheSpec, case: dict[str, Any], budget: int, batched: int | None, seqs: int | None
) -> KVCachePlan | None:
    """The engine's own KV manager on ``budget`` bytes (None: it refuses to start)."""
    s = case["settings"]
    try:
        return plan_kv_cache(
            None,
            spec,
            engine=case["engine"],
            kv_cache_memory_bytes=budget,
            block_size=s["block_size"],
            max_model_len=s["max_model_len"],
            max_num_batched_tokens=batched,
            max_num_seqs=seqs,
            async_scheduling=s.get("async_scheduling", True),
        )
    except InsufficientMemoryError:
        return None


def _token_slack(case: dict[str, Any], concurrency: float) -> int:
    """How far two releases' "GPU KV cache size" can differ for the same blocks.

    Older vLLM printed ``num_blocks x block_size``; the release memacct follows prints
    ``int(concurrency x max_model_len)`` (``memacct/engines/vllm/kv.py``). They agree when
    ``max_model_len`` is a multiple of the block size (1 token for the float product) and
    otherwise differ by less than ``concurrency x (block_size - 1)`` tokens.
    """
    if case["engine"] == "sglang":
        return 0
    block, length = case["settings"]["block_size"], case["settings"]["max_model_len"]
    return 1 if length % block == 0 else int(concurrency * (block - 1)) + 2


def _deployment(settings: dict[str, Any]) -> Deployment | None:
    """The log's ``vllm serve`` flags beyond the batch and cache sizes (``deployment`` in the
    case's settings, by vLLM's names), as memacct's :class:`Deployment`."""
    given = settings.get("deployment")
    return Deployment.from_serve_args(**given) if given else None


def replay(
    case: dict[str, Any], models: dict[str, Any], *, logged_sampler: bool = True
) -> Replayed:
    """memacct's estimate for one logged start-up.

    ``logged_sampler``: charge the top-k/top-p path the log names (``sampler`` in the case,
    with its ``sampler_evidence``); otherwise the release's default, as ``memacct plan``
    without ``--sampler`` does.
    """
    logged_raw = case["logged"]
    logged: dict[str, float | None] = {
        "weights": logged_raw["weights_gib"],
        "activation": logged_raw["activation_gib"],
        "non_torch": logged_raw["non_torch_gib"],
        "kv_cache": logged_raw["kv_cache_gib"],
        "cudagraph": logged_raw["cudagraph_gib"] if case["kv_includes_cudagraph"] else None,
        "kv_tokens": logged_raw["kv_tokens"],
        "max_concurrency": logged_raw["max_concurrency"],
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
    spec = KVCacheSpec.from_hf_config(
        config, kv_cache_dtype=serving_kv_cache_dtype(config, s["kv_cache_dtype"]),
        tensor_parallel_size=tp,
    )
    from_budget: dict[str, tuple[float, float]] | None = None
    slack = 0
    kv_logged, tokens_logged = logged["kv_cache"], logged["kv_tokens"]
    if kv_logged is not None and kv_logged > 0 and tokens_logged is not None and s["max_model_len"]:
        # The engine's own KV manager on the logged budget, at both ends of the print's rounding.
        ends = [
            _kv_plan(spec, case, round((kv_logged + d) * GIB), s["max_num_batched_tokens"],
                     s["max_num_seqs"])
            for d in (-ROUNDING_GIB, ROUNDING_GIB)
        ]  # fmt: skip
        low, high = ends
        if low is not None and high is not None:
            from_budget = {
                "tokens": (low.kv_tokens, high.kv_tokens),
                "block_tokens": (block_print_tokens(low), block_print_tokens(high)),
                "concurrency": (low.max_concurrency, high.max_concurrency),
            }
            slack = _token_slack(case, high.max_concurrency)
    weights = estimate_weights(config, tensor_parallel_size=tp, mxfp4_pad=mxfp4_padding(layout))
    estimated["weights"] = weights.total_bytes / GIB
    total = case["device_total_gib"]
    if total is None:
        return Replayed(case, logged, estimated, "device total not logged: weights only",
                        from_budget, slack)  # fmt: skip
    deployment = _deployment(s)
    settings = StartupSettings(
        deployment=deployment,
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
        sampler=case.get("sampler") if logged_sampler else None,
    )
    est = _startup(case["engine"]).estimate(
        config,
        total_memory=round(total * GIB),
        device_name=case["device"],
        settings=settings,
        weights=weights,
    )
    spec = est.kv_spec or spec  # the drafter's layers, a pipeline stage's
    if deployment is not None:  # what the rank holds: offloaded, quantized, split, LoRA
        estimated["weights"] = est.weights_memory / GIB
    estimated["activation"] = est.activation_peak / GIB
    estimated["non_torch"] = est.non_allocator_increase / GIB
    estimated["cudagraph"] = est.cudagraph_memory / GIB if est.cudagraph_charged else None
    estimated["kv_cache"] = est.kv_cache_bytes / GIB
    sampler = est.sampler
    if logged_sampler and case.get("sampler"):
        # Named by a log line, or read off the logged activation where the log prints none.
        named = str(case.get("sampler_evidence", "")).startswith("log")
        sampler += " (log)" if named else " (activation)"
    if s["max_model_len"] and est.kv_cache_bytes > 0:
        # What `memacct plan` reports: the estimated budget through the engine's KV manager.
        plan = _kv_plan(spec, case, est.kv_cache_bytes, est.max_num_batched_tokens,
                        est.max_num_seqs)  # fmt: skip
        if plan is None:
            why = "memacct: the engine refuses this max_model_len"
            return Replayed(case, logged, estimated, why, from_budget, slack, refused=True,
                            sampler=sampler)  # fmt: skip
        estimated["kv_tokens"] = plan.kv_tokens
        estimated["max_concurrency"] = plan.max_concurrency
        slack = slack or _token_slack(case, plan.max_concurrency)
        row = Replayed(case, logged, estimated, "", from_budget, slack)
        if budget_agrees(row) == "blocks":
            # Compare like with like: the log printed tokens the older way.
            estimated["kv_tokens"] = block_print_tokens(plan)
    return Replayed(case, logged, estimated, "", from_budget, slack, sampler=sampler)


def replay_all(
    data: dict[str, Any] | None = None, *, logged_sampler: bool = True
) -> list[Replayed]:
    """Every case of the development set, replayed (``logged_sampler``: as :func:`replay`)."""
    data = data or load_cases()
    return [replay(case, data["models"], logged_sampler=logged_sampler) for case in data["cases"]]


def summary(
    rows: list[Replayed], name: str, *, v1_only: bool, held_out: bool = False
) -> tuple[int, float, float, int]:
    """(cases, median |error|, worst |error|, cases within 5%) for one field.

    ``held_out``: only the cases that shaped none of memacct's constants.
    """
    errs = [
        abs(e)
        for r in rows
        if (not v1_only or r.case["v1"] is True)
        and not (held_out and r.development)
        and (e := r.error(name)) is not None
    ]
    if not errs:
        return 0, 0.0, 0.0, 0
    return len(errs), statistics.median(errs), max(errs), sum(e <= 0.05 for e in errs)


def token_bound(row: Replayed, name: str) -> float | None:
    """The largest relative error of ``kv_tokens``/``max_concurrency`` the KV error allows.

    Blocks are ``floor(budget / block bytes)``, so tokens and concurrency move with the KV
    budget: when memacct's KV bytes are off by x, they are off by x too, plus the logged
    budget's own rounding (0.005 GiB, :data:`ROUNDING_GIB`), one block, and the print's
    rounding (concurrency two decimals, tokens :data:`Replayed.token_slack`).
    """
    kv = row.error("kv_cache")
    want = row.logged.get(name)
    kv_logged = row.logged["kv_cache"]
    if kv is None or not want or not kv_logged:
        return None
    block = int(row.case["settings"]["block_size"])
    base = abs(kv) + (1 + abs(kv)) * ROUNDING_GIB / abs(kv_logged)
    if name == "kv_tokens":
        return base + (block + row.token_slack) / want
    concurrency = row.logged["max_concurrency"] or 0.0
    return base + 0.005 / concurrency + block / (row.logged["kv_tokens"] or want)


def budget_agrees(row: Replayed) -> str | None:
    """How the logged tokens and concurrency follow from the logged budget: the print formula
    that reproduces them (``"0.33"`` or ``"blocks"``), ``""`` when neither does, None: no check.

    The tokens must lie within what the KV manager gives the two ends of the budget's rounding
    window (1 token of float rounding for the 0.33 print), and the logged concurrency within
    that window's concurrency, widened by its own two-decimal rounding and, for the older
    ``tokens / max_model_len`` concurrency, by :data:`Replayed.token_slack` tokens.
    ``"both"``: the two prints coincide here (one attention type, ``max_model_len`` a
    multiple of the block size).
    """
    if row.from_budget is None or row.logged["kv_tokens"] is None:
        return None
    tokens = row.logged["kv_tokens"]
    length = row.case["settings"]["max_model_len"]
    low, high = row.from_budget["concurrency"]
    concurrency = row.logged["max_concurrency"]
    widen = 0.005 + row.token_slack / length
    if concurrency is not None and not low - widen <= concurrency <= high + widen:
        return ""
    t_low, t_high = row.from_budget["tokens"]
    b_low, b_high = row.from_budget["block_tokens"]
    new = t_low - 1 <= tokens <= t_high + 1
    old = b_low <= tokens <= b_high
    return "both" if new and old else "0.33" if new else "blocks" if old else ""
