"""The CLI's words for the API's, and the engines' words for the CLI's.

The library's messages name its keywords (``allow_mismatch=True``, ``name='sim'``,
``block_size must be positive``); at the CLI boundary (:func:`memacct.cli.main`)
:func:`cli_wording` rewrites each keyword that is a ``memacct plan`` or
``memacct snapshot`` option into its flag, once, for every message.

The other way, ``memacct plan`` reads the engines' own spellings (``-tp 8``,
``--max-model-len 32k``, SGLang's ``--mem-fraction-static`` under ``--engine sglang``)
through :class:`EngineSpelledCommand`, which hands its arguments to
:func:`memacct.engines.spellings.normalize_argv` before click parses them.
"""

from __future__ import annotations

import re
from functools import cache

import click

__all__ = ["EngineSpelledCommand", "cli_flags", "cli_wording"]


class EngineSpelledCommand(click.Command):
    """A click command that also takes the engines' spellings of its flags."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from memacct.engines.spellings import normalize_argv

        parsed: list[str] = super().parse_args(ctx, normalize_argv(args))
        return parsed


def _flags() -> dict[str, str]:
    from memacct.planner.options import PlanOptions

    names = {name: "--" + name.replace("_", "-") for name in PlanOptions.names()}
    names.pop("model_name")
    names.pop("flashinfer_sampler_env")
    names.pop("checkpoint")
    names.update(allow_mismatch="--allow-mismatch",
                 name="--backend", kv_cache_memory_bytes="--kv-cache-memory-bytes",
                 min_concurrency="--min-concurrency", model="--model", revision="--revision",
                 tensor_parallel_sizes="--tensor-parallel-size", devices="--device")  # fmt: skip
    return names


@cache
def _wording() -> tuple[dict[str, str], re.Pattern[str], re.Pattern[str]]:
    """:func:`cli_flags` and the two patterns of :func:`cli_wording`, built on the first
    message (a command that succeeds never words one)."""
    flags = _flags()
    # `allow_mismatch=True`, `name='sim'`, `gpu_memory_utilization=0.9`: a keyword and its value.
    assigned = re.compile(r"(?<![\w-])([a-z][a-z_]*)=(True|'[^']*'|\"[^\"]*\"|[\w.+-]+)")
    # A keyword on its own (`block_size must be positive`), not inside a longer name or a path.
    # Only keywords with an underscore: `device` or `engine` alone are ordinary words.
    underscored = sorted((key for key in flags if "_" in key), key=len, reverse=True)
    bare = re.compile(r"(?<![\w./=-])(" + "|".join(underscored) + r")(?![\w/=-])")
    return flags, assigned, bare


def cli_flags() -> dict[str, str]:
    """Keyword of the API -> the CLI's flag for it (built on first use; do not change it)."""
    return _wording()[0]


def cli_wording(message: str) -> str:
    """``message`` with the API's keywords written as the CLI's flags."""
    flags, assigned_keyword, bare_keyword = _wording()

    def assigned(match: re.Match[str]) -> str:
        key, value = match.group(1), match.group(2)
        flag = flags.get(key)
        if flag is None:
            return match.group(0)
        if value == "True":
            return flag
        return f"{flag} {value.strip(chr(39) + chr(34))}"

    def bare(match: re.Match[str]) -> str:
        return flags[match.group(1)]

    worded = bare_keyword.sub(bare, assigned_keyword.sub(assigned, message))
    # "pass --allow-mismatch (memacct plan --allow-mismatch)": the flag once.
    return re.sub(r"(--[a-z-]+) \(memacct [a-z]+ \1\)", r"\1", worded)
