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

import click

__all__ = ["FLAGS", "EngineSpelledCommand", "cli_wording"]


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


FLAGS: dict[str, str] = _flags()
"""Keyword of the API -> the CLI's flag for it."""

# `allow_mismatch=True`, `name='sim'`, `gpu_memory_utilization=0.9`: a keyword and its value.
_ASSIGNED = re.compile(r"(?<![\w-])([a-z][a-z_]*)=(True|'[^']*'|\"[^\"]*\"|[\w.+-]+)")
# A keyword on its own (`block_size must be positive`), not inside a longer name or a path.
# Only keywords with an underscore: `device` or `engine` alone are ordinary words.
_UNDERSCORED = sorted((key for key in FLAGS if "_" in key), key=len, reverse=True)
_BARE = re.compile(r"(?<![\w./=-])(" + "|".join(_UNDERSCORED) + r")(?![\w/=-])")


def cli_wording(message: str) -> str:
    """``message`` with the API's keywords written as the CLI's flags."""

    def assigned(match: re.Match[str]) -> str:
        key, value = match.group(1), match.group(2)
        flag = FLAGS.get(key)
        if flag is None:
            return match.group(0)
        if value == "True":
            return flag
        return f"{flag} {value.strip(chr(39) + chr(34))}"

    def bare(match: re.Match[str]) -> str:
        return FLAGS[match.group(1)]

    worded = _BARE.sub(bare, _ASSIGNED.sub(assigned, message))
    # "pass --allow-mismatch (memacct plan --allow-mismatch)": the flag once.
    return re.sub(r"(--[a-z-]+) \(memacct [a-z]+ \1\)", r"\1", worded)
