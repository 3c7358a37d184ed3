"""SGLang 0.5.23's server arguments that move its KV pool, as plan options.

Each option is named as ``sglang.launch_server`` names it (``--swa-full-tokens-ratio``
is ``swa_full_tokens_ratio``); sources in ``docs/engines.md`` ("SGLang 0.5.23's rules"):

* ``swa_full_tokens_ratio``: sliding-window tokens per full-attention token of the split
  pool, in (0, 1]; unset: 0.8 (``arg_groups/fields/schedule.py``, its ``fallback``);
* ``mamba_ssm_dtype``: the dtype of a Mamba/linear-attention layer's recurrent (SSM)
  state, ``float32``, ``bfloat16`` or ``float16``; unset: ``SGLANG_MAMBA_SSM_DTYPE``, else
  the config's ``mamba_ssm_dtype``, else float32 (``configs/mamba_utils.py``,
  ``mamba2_state_dtype``; the flag sets the variable, ``arg_groups/serving_hook.py``);
* ``max_running_requests``: the cap on running requests SGLang is given; unset: its
  default for the pool (``kv_cache_configurator.py``, ``resolve_max_num_reqs``), 48 under
  speculative decoding (``arg_groups/speculative_hook.py``, ``_handle_eagle_family``);
* ``speculative_algorithm``: SGLang's ``--speculative-algorithm`` (``EAGLE``, ``EAGLE3``,
  ``NEXTN``, ``STANDALONE``, ``NGRAM``); unset: none. The draft's weights and its layers
  in the cell come from the plan's ``--speculative-config``
  (:mod:`memacct.engines.sglang.speculative`).

The conv state is in ``SGLANG_MAMBA_CONV_DTYPE`` (default bfloat16), never the SSM dtype.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memacct.errors import InvalidInputError
from memacct.model.config import DTYPE_BYTES

__all__ = [
    "DEFAULT_SWA_FULL_TOKENS_RATIO",
    "KV_CACHE_DTYPES",
    "OPTIONS",
    "SGLANG_RELEASES",
    "SGLANG_VERSION",
    "SPECULATIVE_ALGORITHMS",
    "SPECULATIVE_RUNNING",
    "STATE_DTYPE_BYTES",
    "SglangOptions",
    "check_kv_cache_dtype",
]

SGLANG_VERSION = "0.5.23"
SGLANG_RELEASES: tuple[str, ...] = (SGLANG_VERSION,)
"""The SGLang releases whose pool code these rules were read from (an unmodelled release is
refused with this list, :func:`memacct.engines.accepts.check_release`)."""

DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8

SPECULATIVE_RUNNING = 48
"""``max_running_requests`` SGLang sets under speculative decoding when none is given."""

KV_CACHE_DTYPES: tuple[str, ...] = (
    "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16",
)  # fmt: skip
"""``--kv-cache-dtype``'s choices (``arg_groups/fields/model.py``): no ``fp8`` alias."""

# What "auto" resolves to (the model dtype): accepted beside the named choices.
_AUTO_RESOLVED = ("float16", "float32")

STATE_DTYPE_BYTES: dict[str, int] = {
    name: DTYPE_BYTES[name] for name in ("float32", "bfloat16", "float16")
}
"""``mamba2_state_dtype``'s ``dtype_map``: the state dtypes SGLang accepts."""

OPTIONS: dict[str, str] = {
    "swa_full_tokens_ratio": "--swa-full-tokens-ratio",
    "mamba_ssm_dtype": "--mamba-ssm-dtype",
    "max_running_requests": "--max-running-requests",
    "speculative_algorithm": "--speculative-algorithm",
}
"""Plan option -> the ``sglang.launch_server`` flag it stands for."""

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
"""The ``--speculative-algorithm`` values memacct plans (``speculative/spec_info.py``;
``NEXTN`` is ``EAGLE``'s alias)."""


def check_kv_cache_dtype(name: str) -> str:
    """``name`` if SGLang's ``--kv-cache-dtype`` takes it (or ``auto`` resolves to it).

    Raises:
        InvalidInputError: a name SGLang refuses, such as vLLM's ``fp8`` alias.
    """
    if name in KV_CACHE_DTYPES or name in _AUTO_RESOLVED:
        return name
    hint = " (SGLang has no fp8 alias: fp8_e4m3 is vLLM's fp8)" if name == "fp8" else ""
    raise InvalidInputError(
        f"kv_cache_dtype {name!r} is not one SGLang {SGLANG_VERSION} accepts{hint}: give one "
        f"of {', '.join(KV_CACHE_DTYPES)}"
    )


def _state_dtype(value: object, where: str) -> str:
    if not isinstance(value, str) or value not in STATE_DTYPE_BYTES:
        raise InvalidInputError(
            f"{where} {value!r} is not a state dtype SGLang accepts: give one of "
            f"{', '.join(STATE_DTYPE_BYTES)}"
        )
    return value


@dataclass(frozen=True)
class SglangOptions:
    """SGLang's plan options (see the module docstring); ``None``: SGLang's default."""

    swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO
    mamba_ssm_dtype: str | None = None
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> SglangOptions:
        """The options from a plan's ``engine_options``.

        Raises:
            InvalidInputError: an option SGLang has not, or a value out of range.
        """
        given = dict(options or {})
        unknown = sorted(set(given) - set(OPTIONS))
        if unknown:
            raise InvalidInputError(
                f"engine option(s) {', '.join(unknown)} are not SGLang options memacct models: "
                f"give {', '.join(OPTIONS)}"
            )
        ratio = given.get("swa_full_tokens_ratio")
        if ratio is None:
            ratio = DEFAULT_SWA_FULL_TOKENS_RATIO
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise InvalidInputError(
                f"swa_full_tokens_ratio {ratio!r} is out of range: SGLang takes a ratio in "
                f"(0, 1] (--swa-full-tokens-ratio; default {DEFAULT_SWA_FULL_TOKENS_RATIO})"
            )
        ssm = given.get("mamba_ssm_dtype")
        if ssm is not None:
            ssm = _state_dtype(ssm, "mamba_ssm_dtype")
        running = given.get("max_running_requests")
        if running is not None and (
            isinstance(running, bool) or not isinstance(running, int) or running < 1
        ):
            raise InvalidInputError(
                f"max_running_requests {running!r} must be a positive integer "
                f"(--max-running-requests)"
            )
        algorithm = given.get("speculative_algorithm")
        if algorithm is not None and algorithm not in SPECULATIVE_ALGORITHMS:
            raise InvalidInputError(
                f"speculative_algorithm {algorithm!r} is not one memacct plans for SGLang: give "
                f"{', '.join(SPECULATIVE_ALGORITHMS)} (--speculative-algorithm)"
            )
        return cls(float(ratio), ssm, running, algorithm)

    def running_requests(self) -> int | None:
        """The ``--max-running-requests`` SGLang resolves before sizing: the one given, else
        48 under speculative decoding (``_handle_eagle_family``, ``_handle_ngram``), else
        ``None`` (its default for the pool)."""
        if self.max_running_requests is not None or self.speculative_algorithm is None:
            return self.max_running_requests
        return SPECULATIVE_RUNNING

    def ssm_dtype(self, declared: str | None) -> tuple[str, str]:
        """The SSM state dtype SGLang takes, and where it came from.

        ``declared``: the config's ``mamba_ssm_dtype`` where SGLang reads it.
        """
        if self.mamba_ssm_dtype is not None:
            return self.mamba_ssm_dtype, "--mamba-ssm-dtype"
        env = os.environ.get("SGLANG_MAMBA_SSM_DTYPE")
        # An invalid value is only warned about and leaves the config's or the default.
        if env in STATE_DTYPE_BYTES:
            return env, "SGLANG_MAMBA_SSM_DTYPE"
        if declared in STATE_DTYPE_BYTES:
            return declared, "the config's mamba_ssm_dtype"
        return "float32", "SGLang's default"

    @staticmethod
    def conv_dtype() -> str:
        """The conv state's dtype: ``SGLANG_MAMBA_CONV_DTYPE``, default bfloat16."""
        env = os.environ.get("SGLANG_MAMBA_CONV_DTYPE")
        return env if env in STATE_DTYPE_BYTES else "bfloat16"
