"""The settings a start-up log states, under the names ``vllm serve`` gives them.

A log states its settings in several places, each release its own way: the
command line the user pasted beside it (``vllm serve M --tensor-parallel-size 4``,
``python -m sglang.launch_server --tp 4 --mem-fraction-static 0.93``), a Python
``LLM(...)`` call, vLLM's ``non-default args: {...}`` (0.10 on), its
``args: Namespace(...)`` (before), the engine's config line ("Initializing a V1
LLM engine (v0.9.2) with config: model='...', ..., max_seq_len=...") and SGLang's
``server_args=ServerArgs(...)``. :func:`read_settings` reads them all; a later,
more resolved source wins (the engine's config line over the command line).
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any

__all__ = ["SETTING_NAMES", "parse_value", "read_settings"]

SETTING_NAMES = (
    "block_size", "chunked_prefill_size", "cpu_offload_gb", "data_parallel_size",
    "disable_cuda_graph", "dtype", "enable_expert_parallel", "enable_lora",
    "enable_prefix_caching", "enforce_eager", "expert_parallel_size", "gpu_memory_utilization",
    "kv_cache_dtype", "kv_cache_memory_bytes", "limit_mm_per_prompt", "max_lora_rank",
    "max_loras", "max_model_len", "max_num_batched_tokens", "max_num_seqs",
    "max_running_requests", "max_total_tokens", "mem_fraction_static", "model",
    "pipeline_parallel_size", "quantization", "speculative_algorithm", "speculative_config",
    "swap_space", "tensor_parallel_size",
)
"""The settings a log may state, by their names (vLLM's; SGLang's own where vLLM has none)."""

_OTHER_SPELLINGS = {
    "model_path": "model", "model_name_or_path": "model",
    "tp": "tensor_parallel_size", "tp_size": "tensor_parallel_size",
    "pp": "pipeline_parallel_size", "pp_size": "pipeline_parallel_size",
    "dp": "data_parallel_size", "dp_size": "data_parallel_size",
    "ep_size": "expert_parallel_size",  # SGLang's; read by this spelling only
    "max_seq_len": "max_model_len", "context_length": "max_model_len",
    "page_size": "block_size", "kv_cache_memory": "kv_cache_memory_bytes",
}  # fmt: skip
_ALIASES = {**{name: name for name in SETTING_NAMES if name != "expert_parallel_size"},
            **_OTHER_SPELLINGS}  # fmt: skip
"""Each spelling a log uses -> the setting's name."""


_SHORT_FLAGS = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size",
                "-dp": "data_parallel_size", "-q": "quantization"}  # fmt: skip
_BOOLEAN_FLAGS = {"enforce_eager", "trust_remote_code", "enable_prefix_caching", "enable_lora",
                  "enable_expert_parallel", "disable_cuda_graph", "no_enable_prefix_caching",
                  "enable_chunked_prefill", "disable_log_requests", "enable_dp_attention",
                  "skip_mm_profiling", "disable_custom_all_reduce"}  # fmt: skip
_COMMAND = re.compile(
    r"(?:vllm\s+serve|vllm\s+bench\s+\w+|vllm\.entrypoints\.\S+|sglang\.launch_server|sglang\s+serve|"
    r"sglang\.bench_\w+|sglang_router\.launch_server)(?P<args>.*)"
)
_ASSIGNED = re.compile(
    r"(?<![\w.\-])([a-z_][a-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,\s)]*)"
)
_DICT_ITEM = re.compile(r"'([a-z_][a-z0-9_]*)'\s*:\s*('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,}]+)")


def parse_value(text: str) -> Any:
    """A printed value: quoted text unquoted, ``None``, booleans, numbers; ``torch.bfloat16``
    as ``bfloat16``; anything else as printed."""
    text = text.strip().rstrip(",")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("None", "null", ""):
        return None
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    return text.removeprefix("torch.")


def _named(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        name = _ALIASES.get(key)
        if name is not None and name not in out:
            out[name] = value
    return out


def _assigned(text: str) -> dict[str, Any]:
    """``key=value`` pairs of a config line or a ``ServerArgs(...)``/``Namespace(...)``."""
    return _named([(m.group(1), parse_value(m.group(2))) for m in _ASSIGNED.finditer(text)])


def _dict_items(text: str) -> dict[str, Any]:
    """``non-default args: {...}``, complete or cut short."""
    body = text[text.index("{"):] if "{" in text else text
    try:
        whole = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return _named([(str(k), v) for k, v in whole.items()])
    return _named([(m.group(1), parse_value(m.group(2))) for m in _DICT_ITEM.finditer(body)])


def _command(args: str) -> dict[str, Any]:
    """The flags of a ``vllm serve`` / ``sglang.launch_server`` command (``--flag value``,
    ``--flag=value``, ``--flag_with_underscores``; the positional model of ``vllm serve``)."""
    try:
        tokens = shlex.split(args)
    except ValueError:  # a quote left open by a cut paste
        tokens = args.split()
    pairs: list[tuple[str, Any]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            if not pairs and "=" not in token:  # `vllm serve MODEL`: the model comes first
                pairs.append(("model", token))
            continue
        flag, _, given = token.partition("=")
        key = _SHORT_FLAGS.get(flag) or flag.lstrip("-").replace("-", "_")
        if given:
            pairs.append((key, parse_value(given)))
        elif key in _BOOLEAN_FLAGS:
            pairs.append((key, True))
        elif i < len(tokens) and not tokens[i].startswith("--"):
            pairs.append((key, parse_value(tokens[i])))
            i += 1
    named = _named(pairs)
    if ("model" in named and pairs and pairs[0][0] == "model"
            and any(k == "model" for k, _ in pairs[1:])):  # fmt: skip
        named["model"] = next(v for k, v in pairs[1:] if k == "model")
    return named


def _python_call(lines: list[str]) -> dict[str, Any]:
    """``LLM(model=..., tensor_parallel_size=...)`` written over one or several lines."""
    found: dict[str, Any] = {}
    inside = False
    for line in lines:
        if re.search(r"\bLLM\(", line):
            inside = True
        if inside:
            found.update({k: v for k, v in _assigned(line).items() if k not in found})
            if line.strip().startswith(")") or line.rstrip().endswith(")"):
                inside = False
    return found


def read_settings(messages: list[str], whole: str) -> tuple[dict[str, Any], list[str]]:
    """The settings of a log and where they were read (``command``, ``python``,
    ``non-default args``, ``namespace``, ``server_args``, ``engine config``).

    ``messages`` are the cleaned lines (:func:`memacct.explain.text.clean_lines`), ``whole``
    the pasted text (a config line may run over several lines).
    """
    layers: list[tuple[str, dict[str, Any]]] = []
    for line in messages:
        if (match := _COMMAND.search(line)) is not None:
            layers.append(("command", _command(match.group("args"))))
    layers.append(("python", _python_call(messages)))
    for line in messages:
        if "non-default args:" in line:
            layers.append(("non-default args", _dict_items(line.split("non-default args:", 1)[1])))
        if "Namespace(" in line:
            layers.append(("namespace", _assigned(line.split("Namespace(", 1)[1])))
        if "ServerArgs(" in line:
            layers.append(("server_args", _assigned(line.split("ServerArgs(", 1)[1])))
    at = whole.find("with config")
    if at >= 0:
        body = re.sub(r"\n(?=[a-z_]+[=,])", "", whole[at:at + 8000])  # rejoin wrapped keys
        layers.append(("engine config", _assigned(body.split("\n~~~\n", 1)[-1])))
    settings: dict[str, Any] = {}
    sources: list[str] = []
    for name, layer in layers:
        given = {k: v for k, v in layer.items() if v is not None}
        if given:
            settings.update(given)
            sources.append(name)
    return settings, sources
