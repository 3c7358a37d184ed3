"""Why a logged term and memacct's plan of it differ, and what to change.

Each reason names the engine's own setting that moves the term and the figures
that show it; the rules behind them are the engines' start-up arithmetic as
docs/engines.md and docs/explain.md cite it (vLLM: ``requested = total x
gpu_memory_utilization``, ``kv = requested - weights - activation peak -
non-torch increase``, graphs charged where the release estimates them; SGLang:
the pool is what ``mem_fraction_static`` leaves after the weights).
"""

from __future__ import annotations

import math
from typing import Any

from memacct.explain.reading import LogReading
from memacct.explain.request import PlanRequest, run_plan
from memacct.explain.term import Term, gib

__all__ = ["suggestions", "why"]

_LABEL = {"weights_memory": "weights", "activation_peak": "activation peak",
          "non_allocator_increase": "non-torch increase", "cudagraph_memory": "CUDA graphs",
          "total_memory": "device total"}  # fmt: skip


def _release(reading: LogReading, plan: Any) -> str:
    """The release difference, where there is one."""
    if plan is None:
        return ""
    logged = reading.engine_version or "of an unnamed release"
    era = f" ({reading.era})" if reading.era else ""
    if reading.era == "V0":
        return (f"; the log is vLLM V0{'' if not reading.engine_version else ' ' + logged}, "
                f"planned with {plan.engine} {plan.engine_version}'s V1 rules (V0 profiled one "
                "prefill of max_model_len tokens and charged the CUDA context as non-torch)")
    if reading.engine_version is None or plan.engine_version.startswith(
            reading.engine_version.split("+")[0][:4]):  # fmt: skip
        return ""
    return (f"; the log is {reading.engine} {logged}{era}, planned with "
            f"{plan.engine_version}'s rules")


def _setting(reading: LogReading, plan: Any, name: str) -> str:
    value = reading.settings.get(name)
    if value is None and plan is not None:
        value = getattr(plan.spec if name == "tensor_parallel_size" else plan, name, None)
    return "default" if value is None else str(value)


def _weights(reading: LogReading, plan: Any) -> str:
    tp = _setting(reading, plan, "tensor_parallel_size")
    quant = plan.budget.quantization if plan is not None and plan.budget is not None else None
    return (f"the weights memacct reads for {plan.model if plan else 'the model'} against "
            f"what the engine loaded on one rank: a checkpoint or revision other than --model, "
            f"a quantization applied while loading (--quantization; the checkpoint's own: "
            f"{quant or 'none'}), weights kept in host memory (--cpu-offload-gb), or another "
            f"--tensor-parallel-size (read: {tp})")


def _activation(reading: LogReading, plan: Any) -> str:
    batched = _setting(reading, plan, "max_num_batched_tokens")
    seqs = _setting(reading, plan, "max_num_seqs")
    sampler = plan.budget.sampler if plan is not None and plan.budget is not None else ""
    peak = ("the reserved peak: vllm-mindspore charges its allocator's fragmentation too"
            if reading.engine == "vllm-mindspore" else
            "the allocated peak: fragmentation the allocator keeps beyond it is not charged")
    return (f"the profile run's peak follows --max-num-batched-tokens ({batched}) and "
            f"--max-num-seqs ({seqs}): the dummy sampler's logits for that many sequences, "
            f"by its top-k/top-p path (--sampler; planned: {sampler or 'the release default'}); "
            "a torch.compile spike inside the profile adds to it (none with --enforce-eager); "
            f"it is {peak}")


def _non_torch(reading: LogReading, plan: Any) -> str:
    tp = _setting(reading, plan, "tensor_parallel_size")
    free, total = reading.bytes("free_memory_at_start"), reading.bytes("total_memory")
    other = ""
    if free is not None and total is not None and total - free > 0.01 * total:
        other = (f"; {gib(total - free)} of the device was in use before the engine started "
                 "(another process, or an earlier instance)")
    return (f"memory outside PyTorch's allocator gained during start-up: NCCL and custom "
            f"all-reduce buffers under --tensor-parallel-size {tp} (--disable-custom-all-reduce "
            "drops the latter), cuBLAS workspaces, and any other process that allocated or "
            f"freed memory on the device while the engine profiled{other}")


def _graphs(reading: LogReading, plan: Any) -> str:
    charged = bool(plan is not None and plan.budget is not None and plan.budget.cudagraph_memory)
    where = ("taken off the KV budget (the estimate)" if charged else
             "not taken off the KV budget by the release planned: it comes out of the "
             "headroom left by --gpu-memory-utilization")  # fmt: skip
    knob = ("--cuda-graph-max-bs, --disable-cuda-graph" if reading.engine == "sglang" else
            "--max-num-seqs and --compilation-config's cudagraph_capture_sizes, --enforce-eager")
    return (f"graph memory grows with the batch sizes captured ({knob}); planned {where}; the "
            "logged figure is the pool captured, the planned one the engine's estimate")


def _kv(term: Term, terms: list[Term], reading: LogReading, plan: Any) -> str:
    diff = term.difference
    if reading.engine == "sglang":
        frac = _setting(reading, plan, "mem_fraction_static")
        head = (f"SGLang's pool is what --mem-fraction-static ({frac}) of the device leaves "
                "after the weights, graphs and activations")
    else:
        util = _setting(reading, plan, "gpu_memory_utilization")
        head = (f"the budget is the device total x --gpu-memory-utilization ({util}) less the "
                "terms above")
    # A term the log does not print moves the budget by all of its planned value.
    # (The device total only where the log prints it: else the budget has no logged base.)
    parts = [(t, t.difference if t.logged is not None else t.planned) for t in terms
             if t.term in _LABEL and (t.difference or (t.logged is None and t.planned))
             and not (t.term == "total_memory" and t.logged is None)]
    if diff is None or not parts:
        return head + "; the log prints none of those terms, so the difference lies in them"
    shares = []
    share = float(plan.gpu_memory_utilization or 1.0) if plan is not None else 1.0
    for t, d in sorted(parts, key=lambda p: -abs(p[1] or 0)):
        # A term's growth shrinks the budget; the total's grows it by its utilized share.
        moved = (d or 0) * share if t.term == "total_memory" else -(d or 0)
        unlogged = " (not in the log)" if t.logged is None else ""
        shares.append(f"{_LABEL[t.term]}{unlogged} {'+' if moved >= 0 else '-'}{gib(abs(moved))}")
    total = next((t for t in terms if t.term == "total_memory"), None)
    unknown = ""
    if total is not None and total.logged is None and total.planned:
        unknown = (f"; the log prints no device total, planned for {gib(total.planned)}: pass "
                   "the run's --device or --device-memory")  # fmt: skip
    return f"{head}: of the {gib(diff)} difference, " + ", ".join(shares[:4]) + unknown


def _counts(term: Term, terms: list[Term], reading: LogReading, plan: Any) -> str:
    kv = next(t for t in terms if t.term == "kv_cache_bytes")
    spec = "" if plan is None else f" ({plan.block_bytes:,} bytes a block of {plan.block_size})"
    if kv.logged is None:
        return ("the log prints no KV budget: tokens and blocks are the budget over the bytes a "
                f"token takes on this rank{spec}; --kv-cache-dtype and --tensor-parallel-size "
                "move those bytes")
    rel = kv.relative
    moved = "" if rel is None else f" (the KV budget differs by {rel:+.1%})"
    length = ("" if term.term != "max_concurrency" else
              f"; concurrency is over --max-model-len {reading.max_model_len}")  # fmt: skip
    if term.term == "num_tokens" and plan is not None and plan.fits:
        from memacct.explain.prints import block_print_tokens

        older = block_print_tokens(plan)
        if older != plan.kv_tokens:
            length = (f"; releases before the concurrency print showed these blocks as "
                      f"{older:,} tokens (num_blocks // groups x block_size), this plan as "
                      f"{plan.kv_tokens:,} (concurrency x max_model_len)")  # fmt: skip
    return f"follows the KV budget{moved} through the engine's blocks{spec}{length}"


_BY_TERM = {"weights_memory": _weights, "activation_peak": _activation,
            "non_allocator_increase": _non_torch, "cudagraph_memory": _graphs}


def why(term: Term, terms: list[Term], reading: LogReading, plan: Any) -> str:
    """Why ``term`` differs from its plan (``terms``: all of them, for the KV budget's split)."""
    if plan is None:
        return "not planned (see notes)"
    if term.term == "total_memory":
        text = (f"the device planned has {gib(term.planned)}, the log's {gib(term.logged)}: pass "
                f"--device-memory {term.logged} or the --device it ran on")
    elif term.term in _BY_TERM:
        text = _BY_TERM[term.term](reading, plan)
    elif term.term == "kv_cache_bytes":
        text = _kv(term, terms, reading, plan)
    else:
        text = _counts(term, terms, reading, plan)
    return text + _release(reading, plan)


def _with(request: PlanRequest, **flags: Any) -> Any:
    """The plan of ``request`` with ``flags`` replaced (None: the planner refused it)."""
    from dataclasses import replace

    changed = {k: v for k, v in request.flags.items()
               if k not in flags and not (k in ("gpu_memory_utilization", "kv_cache_memory_bytes")
                                          and ({"gpu_memory_utilization", "kv_cache_memory_bytes"}
                                               & set(flags)))}  # fmt: skip
    changed.update({k: v for k, v in flags.items() if v is not None})
    return run_plan(replace(request, flags=changed)).plan


def _figure(plan: Any) -> str:
    if plan is None:
        return "refused by the planner"
    if not plan.fits:
        return f"a start the engine refuses ({plan.verdict})"
    return (f"{plan.kv_tokens:,} tokens, {plan.max_concurrency:.2f} requests of "
            f"{plan.max_model_len:,} tokens at once")


def _fitting_utilization(reading: LogReading, plan: Any) -> tuple[float, str] | None:
    """The utilization at which one request of the plan's ``max_model_len`` fits, and whose
    arithmetic says so: the log's own (total x utilization - the logged KV budget is what
    the engine charged besides the cache) where it prints those, else memacct's plan."""
    total, kv = reading.bytes("total_memory"), reading.bytes("kv_cache_bytes")
    util = reading.figures.get("gpu_memory_utilization")
    if total and kv is not None and util is not None:
        non_kv = int(total * util.value) - kv
        source = "by the log's own figures"
    elif plan.budget is not None and plan.total_memory:
        total, non_kv = plan.total_memory, plan.budget.non_kv_cache_memory
        source = "by memacct's plan"
    else:
        return None
    need = math.ceil(100 * (non_kv + plan.request_bytes) / total) / 100
    return (need, source) if need <= 0.98 else None


def suggestions(reading: LogReading, request: PlanRequest, plan: Any) -> tuple[str, ...]:
    """What to pass next: the budget that reproduces the run, and the utilization or
    ``--max-model-len`` that fits what the log asked for, each with the figure it gives."""
    out: list[str] = []
    kv = reading.bytes("kv_cache_bytes")
    if reading.engine == "sglang":
        tokens = reading.bytes("num_tokens")
        if tokens:
            out.append(f"--max-total-tokens {tokens} reproduces this run's pool of {tokens:,} "
                       "tokens (SGLang's own override of the budget)")
    elif kv is not None and kv > 0:
        again = _with(request, kv_cache_memory_bytes=kv) if plan is not None else None
        figure = "" if again is None else f": memacct plans {_figure(again)}"
        out.append(f"--kv-cache-memory-bytes {kv} reproduces this run's KV cache of {gib(kv)} "
                   f"whatever else holds the device (vllm-project/vllm#21489){figure}")
    if plan is None:
        return tuple(out)
    refused = reading.refusal is not None or (kv is not None and kv <= 0) or not plan.fits
    if not refused:
        if reading.max_model_len is not None:
            out.append(f"as logged, memacct plans {_figure(plan)}")
        return tuple(out)
    fitting = _fitting_utilization(reading, plan)
    current = plan.gpu_memory_utilization or 0.0
    if fitting is not None and fitting[0] <= current:
        # The refused start fits as planned: the log's terms differ from the plan's (the
        # terms above say which); a lower utilization is no advice for the run that failed.
        out.append(f"memacct's plan fits one request at --gpu-memory-utilization {current:g} "
                   "where the engine did not: the terms that differ above are the cause")
    elif fitting is not None:
        util, source = fitting
        out.append(f"--gpu-memory-utilization {util:.2f} fits one request of "
                   f"{plan.max_model_len:,} tokens ({source}); memacct plans "
                   f"{_figure(_with(request, gpu_memory_utilization=util))}")
    # The longest request the run's own budget holds (else the planned budget's).
    budget = {"kv_cache_memory_bytes": kv} if kv is not None and kv > 0 else {}
    if not budget and plan.fits:  # as planned it fits already: no length to give up
        return tuple(out)
    fitted = _with(request, max_model_len=-1, **budget)
    if fitted is not None and fitted.fits:
        where = "this run's KV cache" if budget else "this utilization, as planned"
        out.append(f"--max-model-len {fitted.max_model_len} is the longest that fits in "
                   f"{where}: {_figure(fitted)}")
    return tuple(out)
