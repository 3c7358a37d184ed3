"""The engines' own spellings of the settings memacct plans, both ways: read and written.

``memacct plan`` names its flags as ``vllm serve`` names them; users also type the
engines' other spellings, and ``memacct plan --emit`` writes a command line in them.
One table per engine serves both directions (sources in docs/cli.md, "The engines'
spellings"):

* vLLM 0.33 (``vllm/engine/arg_utils.py``, ``EngineArgs.add_cli_args``): the short
  options ``-tp``, ``-pp``, ``-dp``, ``-q``, ``-ep``, ``-sc``; ``--device-memory-utilization``
  for ``--gpu-memory-utilization``; human-readable integers for ``--max-model-len``
  (also ``auto``), ``--max-num-batched-tokens`` and ``--kv-cache-memory-bytes``
  (``vllm/utils/argparse_utils.py``, ``human_readable_int``: ``k m g t`` decimal,
  ``K M G T`` binary and whole numbers only);
* SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``, each field's flag and aliases):
  ``--model-path``, ``--tp-size``, ``--pp-size``, ``--dp-size``, ``--mem-fraction-static``,
  ``--context-length``, ``--chunked-prefill-size``, ``--page-size``,
  ``--max-running-requests``; CUDA graphs off with ``--disable-cuda-graph`` (deprecated,
  ``server_args.py``) or both ``--disable-decode-cuda-graph`` and
  ``--disable-prefill-cuda-graph`` (``cuda_graph_hook.py``); human-readable integers for
  ``--context-length`` (``sglang/srt/utils/common.py``, ``human_readable_int``: SI
  ``k M G T`` decimal, IEC ``Ki Mi Gi Ti`` binary, case-sensitive).

Example::

    >>> normalize_argv(["-tp", "8", "--max-model-len", "32k"])
    ['--tensor-parallel-size', '8', '--max-model-len', '32000']
    >>> normalize_argv(["--engine", "sglang", "--mem-fraction-static", "0.85"])
    ['--engine', 'sglang', '--gpu-memory-utilization', '0.85']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memacct.errors import InvalidInputError

__all__ = [
    "ENGINE_FLAGS",
    "HUMAN_READABLE",
    "engine_flag",
    "normalize_argv",
    "parse_engine_int",
    "sglang_speculative_argv",
]

ENGINE_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "tensor_parallel_size": ("--tensor-parallel-size", "-tp"),
        "pipeline_parallel_size": ("--pipeline-parallel-size", "-pp"),
        "data_parallel_size": ("--data-parallel-size", "-dp"),
        "quantization": ("--quantization", "-q"),
        "enable_expert_parallel": ("--enable-expert-parallel", "-ep"),
        "speculative_config": ("--speculative-config", "-sc"),
        "gpu_memory_utilization": ("--gpu-memory-utilization", "--device-memory-utilization"),
    },
    "sglang": {
        "model": ("--model-path", "--model"),
        "tensor_parallel_size": ("--tp-size", "--tensor-parallel-size"),
        "pipeline_parallel_size": ("--pp-size", "--pipeline-parallel-size"),
        "data_parallel_size": ("--dp-size", "--data-parallel-size"),
        "gpu_memory_utilization": ("--mem-fraction-static",),
        "max_model_len": ("--context-length",),
        "max_num_batched_tokens": ("--chunked-prefill-size",),
        "block_size": ("--page-size",),
        "max_running_requests": ("--max-running-requests",),
        "enforce_eager": ("--disable-cuda-graph",),
    },
}
"""Per engine, a plan option (its keyword) -> the engine's flag for it, then the engine's
other spellings. An option not listed is spelt as ``memacct plan`` spells it
(``--kv-cache-dtype``). vllm-ascend and vllm-mindspore parse ``vllm serve``'s flags."""

_SGLANG_GRAPH_PHASES = ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")

HUMAN_READABLE: dict[str, tuple[str, ...]] = {
    "vllm": ("max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes"),
    "sglang": ("max_model_len",),
}
"""The options whose values an engine's parser takes as human-readable integers."""

_VLLM_NUMBER = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_SGLANG_NUMBER = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_NUMBER_RULES: dict[str, tuple[re.Pattern[str], dict[str, int], dict[str, int], str]] = {
    "vllm": (_VLLM_NUMBER, _DECIMAL, _BINARY, "vllm/utils/argparse_utils.py"),
    "sglang": (_SGLANG_NUMBER, _SI, _IEC, "sglang/srt/utils/common.py"),
}
"""Each parser's number pattern, decimal and binary suffixes, and where it defines them."""


def _family(engine: str) -> str:
    """``sglang``, or ``vllm`` for vLLM and its plugins (they parse ``vllm serve``'s flags)."""
    return "sglang" if engine == "sglang" else "vllm"


def engine_flag(engine: str, option: str) -> str:
    """The engine's own flag for a plan option (``sglang``, ``max_model_len``:
    ``--context-length``); an option without one is ``--`` and its name with dashes."""
    spellings = ENGINE_FLAGS[_family(engine)].get(option)
    return spellings[0] if spellings else "--" + option.replace("_", "-")


def parse_engine_int(engine: str, option: str, text: str) -> int | None:
    """``text`` as the engine's parser reads a human-readable integer for ``option``
    (``None``: not one, so the plain integer rules apply).

    Raises:
        InvalidInputError: a binary suffix with a decimal number, which the engine refuses.
    """
    value = text.strip()
    family = _family(engine)
    if option not in HUMAN_READABLE[family]:
        return None
    if option == "max_model_len" and family == "vllm" and value.lower() == "auto":
        return -1
    flag = engine_flag(engine, option)
    pattern, decimal, binary, scale = _NUMBER_RULES[family]
    match = pattern.fullmatch(value)
    if match is None:
        return None
    number, suffix = match.groups()
    if suffix in decimal:
        return int(float(number) * decimal[suffix])
    if "." in number:
        raise InvalidInputError(
            f"{flag} {text!r}: {engine} takes no decimals with the binary suffix {suffix} "
            f"({scale}): give a whole number ({int(float(number))}{suffix}) or the decimal "
            f"suffix ({number}{suffix[0].lower() if family == 'vllm' else suffix[0]})"
        )
    return int(number) * binary[suffix]


def _engine_of(argv: Sequence[str]) -> str:
    """The ``--engine`` an argument list names (the last one, as click takes it)."""
    engine = "vllm"
    for i, arg in enumerate(argv):
        if arg == "--engine" and i + 1 < len(argv):
            engine = argv[i + 1]
        elif arg.startswith("--engine="):
            engine = arg.split("=", 1)[1]
    return engine


def _reverse(engine: str) -> dict[str, str]:
    """The engine's other spellings -> the option's ``memacct plan`` flag."""
    table: dict[str, str] = {}
    for option, spellings in ENGINE_FLAGS[_family(engine)].items():
        ours = "--" + option.replace("_", "-")
        table.update({spelling: ours for spelling in spellings if spelling != ours})
    return table


_SGLANG_SPEC_FLAGS = {
    "--speculative-algorithm": "algorithm", "--speculative-draft-model-path": "model",
    "--speculative-draft-model": "model", "--speculative-num-steps": "steps",
    "--speculative-eagle-topk": "topk", "--speculative-num-draft-tokens": "tokens",
}  # fmt: skip
"""SGLang 0.5.23's speculative flags (``sglang/srt/arg_groups/fields/spec.py``) memacct reads."""

_SGLANG_METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp",
                   "STANDALONE": None, "NGRAM": "ngram"}  # fmt: skip
"""``--speculative-algorithm`` -> ``--speculative-config``'s method (``None``: a draft named
by its model alone)."""


def sglang_speculative_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with SGLang's speculative flags as one ``--speculative-config``: the algorithm
    as the method (``EAGLE`` or ``NEXTN`` without a draft path: the target's MTP head, the
    draft SGLang then loads from the target, ``_handle_eagle_family``), the draft path as the
    model, ``--speculative-num-steps`` as ``num_speculative_tokens`` (the pool does not
    depend on the steps, ``topk`` or draft tokens; 3 if not given, SGLang's usual choice).

    Raises:
        InvalidInputError: an algorithm memacct does not plan, or ``NEXTN`` with a draft path.
    """
    out: list[str] = []
    given: dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag in _SGLANG_SPEC_FLAGS:
            if not eq and i + 1 < len(args):
                i += 1
                value = args[i]
            given[_SGLANG_SPEC_FLAGS[flag]] = value
        else:
            out.append(args[i])
        i += 1
    if not given:
        return out
    algorithm = given.get("algorithm", "").upper()
    if algorithm not in _SGLANG_METHODS:
        raise InvalidInputError(
            f"--speculative-algorithm {given.get('algorithm')!r}: memacct plans SGLang's "
            f"{', '.join(_SGLANG_METHODS)}"
        )
    model = given.get("model")
    method = _SGLANG_METHODS[algorithm]
    if method == "mtp" and model is not None:
        raise InvalidInputError(
            "--speculative-algorithm NEXTN with --speculative-draft-model-path: memacct sizes "
            "the MTP head the target itself holds only: drop the draft path"
        )
    if method == "eagle" and model is None:
        method = "mtp"
    steps = given.get("steps", "3")
    obj: dict[str, object] = {} if method is None else {"method": method}
    if model is not None:
        obj["model"] = model
    obj["num_speculative_tokens"] = int(steps) if steps.isdigit() else steps
    import json

    return [*out, "--speculative-config", json.dumps(obj)]


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """``memacct plan``'s arguments with the engine's spellings written as its own flags
    and the engine's human-readable integers as plain ones (``--engine`` decides whose).

    ``--flag=value`` and ``--flag value`` both, and ``--max_model_len`` for ``--max-model-len``
    (vLLM's ``FlexibleArgumentParser`` takes either); anything else passes unchanged.

    Raises:
        InvalidInputError: only one of SGLang's two CUDA-graph switches (memacct plans
            graphs on or off as a whole), or a number the engine itself refuses.
    """
    engine = _engine_of(argv)
    family = _family(engine)
    if family == "sglang":
        argv = sglang_speculative_argv(argv)
    reverse = _reverse(engine)
    options = {"--" + name.replace("_", "-"): name for name in HUMAN_READABLE[family]}
    phases = [arg for arg in argv if arg in _SGLANG_GRAPH_PHASES] if family == "sglang" else []
    if phases and len(set(phases)) != len(_SGLANG_GRAPH_PHASES):
        raise InvalidInputError(
            f"{phases[0]}: memacct plans SGLang's CUDA graphs on or off as a whole: give both "
            f"{' and '.join(_SGLANG_GRAPH_PHASES)}, or --disable-cuda-graph"
        )
    out: list[str] = []
    pending: str | None = None  # the option whose value comes next
    graphs_off = False
    for arg in argv:
        if pending is not None:
            parsed = parse_engine_int(engine, pending, arg)
            out.append(arg if parsed is None else str(parsed))
            pending = None
            continue
        flag, eq, value = arg.partition("=") if arg.startswith("-") else (arg, "", "")
        if flag.startswith("--"):  # vLLM's FlexibleArgumentParser: --max_model_len too
            flag = flag.replace("_", "-")
        if flag in _SGLANG_GRAPH_PHASES and family == "sglang":
            if not graphs_off:
                out.append("--enforce-eager")
                graphs_off = True
            continue
        flag = reverse.get(flag, flag)
        if flag == "--enforce-eager" and family == "sglang":
            if graphs_off:
                continue
            graphs_off = True
        option = options.get(flag)
        if eq:
            parsed = None if option is None else parse_engine_int(engine, option, value)
            out.append(f"{flag}={value if parsed is None else parsed}")
        else:
            out.append(flag)
            pending = option
    return out
