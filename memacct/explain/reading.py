"""What one start-up log says: the engine, its release, the settings, every memory figure.

:func:`read_log` reads a log as a user pastes it (:mod:`memacct.explain.text`)
and returns a :class:`LogReading`. Where ranks log the same line, rank 0's
figure is taken (else the lowest rank named; a line without a rank counts as
rank 0's, as vLLM's driver worker logs without one). Each figure keeps the
printed digits, so its bytes are exact to the printed precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memacct.errors import InvalidInputError
from memacct.explain.patterns import ERRORS, SGLANG, VERSIONS, VLLM, Pattern
from memacct.explain.settings import read_settings
from memacct.explain.text import Figure, Line, clean_lines, figure

__all__ = ["LOGGED_TERMS", "Found", "LogReading", "NoMemoryLinesError", "Setup", "read_log",
           "read_setup"]

LOGGED_TERMS = ("weights_memory", "activation_peak", "non_allocator_increase",
                "cudagraph_memory", "kv_cache_bytes", "num_tokens", "num_blocks",
                "max_concurrency", "total_memory")  # fmt: skip
"""The terms of ``memacct explain --json``'s ``logged`` (contract), in order."""

_COUNTS = ("num_tokens", "num_blocks", "max_concurrency")
_MEMORY_FIGURES = frozenset(LOGGED_TERMS) | {
    "peak_torch_memory", "requested_memory", "non_kv_cache_memory", "k_size", "kv_cache_needed",
    "cudagraph_estimate", "free_memory_after_pool", "suggested_kv_cache_memory_bytes",
    "kv_cache_given", "free_memory_after_load", "free_memory_after_start",
}  # fmt: skip


class NoMemoryLinesError(InvalidInputError):
    """A log with no memory figure to explain."""


@dataclass(frozen=True)
class Found:
    """One figure found: which, as printed, where (line number, rank)."""

    name: str
    figure: Figure
    line: int
    rank: int | None

    def as_json(self) -> dict[str, Any]:
        """The figure with its printed text, bytes (or count) and where it was read."""
        return {"name": self.name, "printed": self.figure.printed, "unit": self.figure.unit,
                "value": self.figure.bytes if self.figure.unit else _number(self.figure),
                "line": self.line, "rank": self.rank}  # fmt: skip


def _number(fig: Figure) -> int | float:
    return int(fig.printed) if re.fullmatch(r"-?\d+", fig.printed) else fig.value


@dataclass(frozen=True)
class Setup:
    """What a log says before any memory figure: engine, release, era, settings, device."""

    engine: str
    engine_version: str | None
    era: str | None
    settings: dict[str, Any]
    settings_from: tuple[str, ...]
    device: str | None


@dataclass(frozen=True)
class LogReading(Setup):
    """A start-up log, read: its :class:`Setup` and its figures.

    Attributes:
        name: where the log came from (a path, ``-``).
        engine: ``vllm``, ``vllm-ascend``, ``vllm-mindspore`` or ``sglang``.
        engine_version: the release as the log prints it (``None``: not named).
        era: vLLM's engine, ``V0`` or ``V1``, where the log shows which (``None``: not shown
            or not vLLM).
        settings: the settings read (:func:`memacct.explain.settings.read_settings`).
        settings_from: where they were read.
        device: the device's name where the log names one.
        figures: every figure chosen, by name (rank 0's where ranks repeat a line).
        found: every figure matched, in log order.
        ranks: the ranks the log names.
        kv_pools: SGLang: the KV pools rank 0 allocated (a draft model's is the second).
        refusal: the engine's refusal line, where it refused to start.
    """

    name: str
    figures: dict[str, Figure]
    found: tuple[Found, ...]
    ranks: tuple[int, ...] = ()
    kv_pools: int = 0
    refusal: str | None = None

    def bytes(self, name: str) -> int | None:
        """Figure ``name`` in bytes (a count as an int), or None where the log lacks it."""
        fig = self.figures.get(name)
        return None if fig is None else fig.bytes

    @property
    def logged(self) -> dict[str, int | float | None]:
        """The contract's ``logged`` terms: bytes, counts, the concurrency; None where absent."""
        out: dict[str, int | float | None] = {}
        for term in LOGGED_TERMS:
            fig = self.figures.get(term)
            if term == "activation_peak" and fig is None:
                out[term] = self._v0_activation()
            elif term == LOGGED_TERMS[3] and fig is None:  # graphs: the estimate, if only that
                out[term] = self.bytes("cudagraph_estimate")
            elif fig is None:
                out[term] = None
            else:
                out[term] = fig.value if term == "max_concurrency" else fig.bytes
        return out

    def _v0_activation(self) -> int | None:
        """vLLM 0.6.4 printed the torch peak with the weights in it (kv_cache_size =
        total x utilization - peak_torch_memory - non_torch_memory, as its own figures add
        up): the activation peak is the peak less the weights."""
        peak, weights = self.bytes("peak_torch_memory"), self.bytes("weights_memory")
        return None if peak is None or weights is None else peak - weights

    @property
    def max_model_len(self) -> int | None:
        """The longest request the start-up planned for."""
        given = self.settings.get("max_model_len")
        if isinstance(given, int) and given > 0:
            return given
        fig = self.figures.get("max_model_len")
        return None if fig is None else int(fig.value)


def _rank_key(found: Found) -> tuple[int, int]:
    rank = 0 if found.rank is None else found.rank
    return rank, found.line


def _match(patterns: tuple[Pattern, ...], lines: list[Line]) -> list[Found]:
    found: list[Found] = []
    for line in lines:
        for pattern in patterns:
            match = pattern.regex.search(line.text)
            if match is None:
                continue
            for name, value in match.groupdict().items():
                if value is None or name.endswith("_u"):
                    continue
                unit = match.groupdict().get(name + "_u") or pattern.units.get(name, pattern.unit)
                found.append(Found(name, figure(value, unit), line.number, line.rank))
    return found


def _choose(found: list[Found]) -> dict[str, Figure]:
    chosen: dict[str, Found] = {}
    for item in found:
        best = chosen.get(item.name)
        if best is None or _rank_key(item) < _rank_key(best):
            chosen[item.name] = item
    return {name: item.figure for name, item in chosen.items()}


_SGLANG_LINES = re.compile(r"KV Cache is allocated|Load weight (?:begin|end)\.|"
                           r"max_total_num_tokens=|Capture cuda graph end|"
                           r"Init torch distributed ends")  # fmt: skip
_VLLM_LINES = re.compile(r"Model loading took|Loading model weights took|Available KV cache memory|"
                         r"GPU KV cache size|Maximum concurrency for|reserved for KV Cache|"
                         r"Memory profiling results|blocks: \d+|Free memory on device")  # fmt: skip
_SGLANG_WORDS = re.compile(r"ServerArgs\(|sglang\.launch_server|sglang serve|"
                           r"mem[-_]fraction[-_]static")  # fmt: skip


def detect_engine(text: str) -> str:
    """The engine family whose log ``text`` is: by the memory lines only it prints (a vLLM
    issue quoting an SGLang command stays vLLM's), else by its words."""
    sglang, vllm = len(_SGLANG_LINES.findall(text)), len(_VLLM_LINES.findall(text))
    if sglang > vllm or (not vllm and _SGLANG_WORDS.search(text)):
        return "sglang"
    # vllm-mindspore binds each worker to CPUs and says so ("bind process %d in rank %d to
    # cpu: %s", vllm_mindspore/worker/worker.py); its module paths name it too.
    if re.search(r"vllm[_-]mindspore|\bmindspore\.|bind process \d+ in rank \d+ to cpu", text):
        return "vllm-mindspore"
    v1 = re.search(r"Available KV cache memory|GPU KV cache size|EngineCore", text)
    # vllm-ascend's V1 model runner prints "Loading model weights took %.4f GB" and nothing
    # after (vllm_ascend/worker/model_runner_v1.py); vLLM's V1 prints "Model loading took".
    # vLLM 0.7's V1 printed the same words from gpu_model_runner.py (vllm-project/vllm#12569),
    # but not "Available KV cache memory".
    ascend_load = v1 and re.search(r"(?m)Loading model weights took [\d.]+ GB\s*$", text) and (
        "model_runner_v1.py" in text
        or ("Available KV cache memory" in text and "gpu_model_runner" not in text))
    # model_runner_v1.py is vllm-ascend's model runner (vllm_ascend/worker/); vLLM's V1 one is
    # gpu_model_runner.py.
    if ascend_load or re.search(r"vllm[_-]ascend|NPU graph memory|NPUWorker|npu blocks|"
                                r"\bmodel_runner_v1\.py|Ascend ?(?:9\d0|310)|torch_npu",
                                text):  # fmt: skip
        return "vllm-ascend"
    return "vllm"


def _era(text: str, engine: str) -> str | None:
    if engine == "sglang":
        return None
    if re.search(r"V1 LLM engine|EngineCore|Available KV cache memory|GPU KV cache size|"
                 r"gpu_model_runner|model_runner_v1\.py|v1/worker|estimated maximum model length|"
                 r"Desired GPU memory utilization|CUDA graph memory profiling|"
                 r"Estimated CUDA graph memory|CUDA graph pool memory",
                 text):  # fmt: skip
        return "V1"
    if re.search(r"V0 LLM engine|Initializing an LLM engine|GPU blocks:|cuda blocks:|"
                 r"total_gpu_memory=|VllmWorkerProcess|\bworker\.py|model_runner\.py|"
                 r"Memory profiling results:", text):  # fmt: skip
        return "V0"
    return None


def _version(text: str, engine: str) -> str | None:
    """The release a log names for ``engine`` (a vLLM plugin's own, else its vLLM's)."""
    own = [regex for family, regex in VERSIONS if family == engine]
    if engine in ("vllm-ascend", "vllm-mindspore"):
        own += [regex for family, regex in VERSIONS if family == "vllm"]
    for regex in own:
        match = regex.search(text)
        if match is not None:
            return match.group("v").rstrip(".-")
    return None


_DEVICE = re.compile(
    r"(?:GPU \d+(?:-\d+)?:\s*|device name[:=]\s*|Device:\s*)"
    r"(?P<name>(?:NVIDIA|AMD|Ascend|Tesla)[\w \-]*?|Ascend\w+)(?:\s*\(x\d+\)|\s*$|,|\))",
    re.MULTILINE,
)


def read_setup(text: str, lines: list[Line] | None = None) -> Setup:
    """The engine, release, vLLM era, settings and device a log states (no figures);
    ``lines``: the log's :func:`~memacct.explain.text.clean_lines`, where already cleaned."""
    lines = clean_lines(text) if lines is None else lines
    engine = detect_engine(text)
    settings, sources = read_settings([line.text for line in lines], text)
    if re.search(r"Using FlashInfer for top-p & top-k sampling", text):
        settings.setdefault("sampler", "flashinfer")
    return Setup(engine, _version(text, engine), _era(text, engine), settings, tuple(sources),
                 _device_name(text))  # fmt: skip


# vLLM's fused-MoE config lookup names the device: "...,device_name=NVIDIA_L4.json".
_MOE_DEVICE = re.compile(r"device_name=(?P<name>(?:NVIDIA|AMD)_[A-Za-z0-9_\-]+?)(?:\.json|[,\s]|$)")


def _device_name(text: str) -> str | None:
    """The device a log names (collect_env's "GPU 0: ...", a MoE config file name)."""
    found = _DEVICE.search(text)
    if found is not None:
        return found.group("name").strip()
    found = _MOE_DEVICE.search(text)
    return None if found is None else found.group("name").replace("_", " ")


def read_log(text: str, name: str = "log") -> LogReading:
    """Read a start-up log.

    Args:
        text: the log as pasted (any prefixes, other lines between, cut short).
        name: where it came from, for messages.

    Raises:
        NoMemoryLinesError: the log prints no memory figure; the message says which lines
            the engine prints and how to get them.
    """
    lines = clean_lines(text)
    setup = read_setup(text, lines)
    engine = setup.engine
    patterns = SGLANG if engine == "sglang" else VLLM
    found = _match(patterns + ERRORS, lines)
    if not any(item.name in _MEMORY_FIGURES for item in found):
        raise NoMemoryLinesError(_missing(name, setup, text))
    figures = _derived(_choose(found))
    pools = 0
    if engine == "sglang":
        figures, pools = _sglang_pool(figures, found)
    refusal = next((line.text for line in lines if re.search(
        r"ValueError|RuntimeError|larger than the maximum number of tokens|No available memory "
        r"for the cache blocks|Insufficient|leave no GPU memory", line.text)), None)  # fmt: skip
    return LogReading(
        name=name, engine=engine, engine_version=setup.engine_version, era=setup.era,
        settings=setup.settings, settings_from=setup.settings_from, device=setup.device,
        figures=figures,
        found=tuple(found), ranks=tuple(sorted({i.rank for i in found if i.rank is not None})),
        kv_pools=pools, refusal=refusal,
    )  # fmt: skip


def _derived(figures: dict[str, Figure]) -> dict[str, Figure]:
    """Figures a log gives only through others: SGLang's weights before it printed "mem
    usage=" (the free memory before the load less after it), and a KV budget given with
    ``kv_cache_memory_bytes`` (vLLM then prints no other)."""
    out = dict(figures)
    around = ("free_memory_at_start", "free_memory_after_load")
    if "weights_memory" not in out and all(name in out for name in around):
        before, after = out[around[0]], out[around[1]]
        out["weights_memory"] = Figure(_sum(before.printed, "-" + after.printed), before.unit)
    if "kv_cache_given" in out:
        out.setdefault("kv_cache_bytes", out["kv_cache_given"])
    return out


def _sglang_pool(figures: dict[str, Figure], found: list[Found]) -> tuple[dict[str, Figure], int]:
    """SGLang's KV budget: rank 0's first pool, K plus V (a second pool on the same rank is
    a draft model's, counted apart in ``kv_pools``)."""
    ks = [f for f in found if f.name == "k_size"]
    if not ks:
        return figures, len([f for f in found if f.name == "kv_cache_bytes"])
    rank = min(_rank_key(f)[0] for f in ks)
    mine = [f for f in ks if _rank_key(f)[0] == rank]
    first = mine[0]
    v = next(f for f in found if f.name == "v_size" and f.line == first.line)
    total = Figure(str(_sum(first.figure.printed, v.figure.printed)), first.figure.unit)
    return {**figures, "kv_cache_bytes": total}, len(mine)


def _sum(a: str, b: str) -> str:
    from decimal import Decimal

    return str(Decimal(a) + Decimal(b))


def _missing(name: str, setup: Setup, text: str) -> str:
    engine = setup.engine
    what = ("no memory lines: SGLang prints 'Load weight end. ... mem usage=X GB', 'KV Cache is "
            "allocated. #tokens: N, K size: ...' and 'max_total_num_tokens=N' at start"
            if engine == "sglang" else
            "no memory lines: vLLM prints 'Model loading took X GiB', 'Available KV cache "
            "memory: X GiB' (older: 'Memory profiling ... the rest of the memory reserved for "
            "KV Cache is X GiB'), 'GPU KV cache size: N tokens' at start")  # fmt: skip
    empty = ("it is empty" if not text.strip() else
             "paste the log from the start up to the first request")
    known = ""
    if setup.settings or setup.engine_version:
        release = f" {setup.engine_version}" if setup.engine_version else ""
        known = f" (read: {engine}{release}, {len(setup.settings)} settings)"
    return f"{name}{known}: {what}; {empty}"
