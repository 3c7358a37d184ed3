"""A profile plans only what it profiled: refuse a spec that contradicts the profile's record.

A profile's activation peak holds for one model, one tensor/pipeline layout and
one batch budget. Planned against another (a 70B model on a 7B profile, TP=8 on
a TP=1 profile, a larger ``max_num_batched_tokens``) it gives a cache that runs
out of memory or wastes it, silently. :func:`check_profile_matches` compares
what the profile recorded (:class:`memacct.ProfiledSetup`) with the spec and
the engine's budgets, and refuses the first contradiction in one line naming
both values; ``allow_mismatch=True`` (CLI ``--allow-mismatch``) plans anyway.
Fields the profile did not record (profiles saved before they existed) are not
checked.

Example::

    >>> from memacct.planner.guard import mismatches
    >>> from memacct.models import ProfiledSetup
    >>> recorded = ProfiledSetup(architecture="qwen2", tensor_parallel_size=1)
    >>> mismatches(recorded, {"architecture": "llama", "tensor_parallel_size": 8})
    ['architecture: profiled qwen2, planned llama', 'tensor_parallel_size: profiled 1, planned 8']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from memacct.errors import InvalidInputError
from memacct.model.spec import KVCacheSpec
from memacct.models import ProfiledSetup, ProfileResult

__all__ = [
    "ProfileMismatchError", "check_profile_matches", "mismatches", "planned_setup",
    "unrecorded_notes",
]


class ProfileMismatchError(InvalidInputError):
    """The profile was measured for another model, layout or batch budget than the plan's."""


def _name(value: object) -> str:
    # "Qwen/Qwen2.5-7B-Instruct" and "qwen2.5-7b-instruct" name one model.
    return str(value).strip().rstrip("/").rsplit("/", 1)[-1].lower()


def _lower(value: object) -> str:
    return str(value).strip().lower().removeprefix("torch.")


def _same(value: object) -> object:
    return value


_NORMALIZE: dict[str, Callable[[object], object]] = {
    "architecture": _lower, "model_name": _name, "dtype": _lower,
}


_CLASS_NAME = re.compile(r"[A-Za-z0-9_]+For[A-Za-z]+")


def _fallback_name(spec: KVCacheSpec) -> bool:
    # A config without _name_or_path is named after its class ("Qwen2ForCausalLM") or its
    # model_type: that names the architecture, already compared, not the model.
    name = spec.model_name
    return name == spec.model_type or _CLASS_NAME.fullmatch(name) is not None


def planned_setup(
    spec: KVCacheSpec,
    *,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
) -> dict[str, object]:
    """What a plan of ``spec`` with these budgets assumes, in :class:`ProfiledSetup`'s names."""
    planned: dict[str, object] = {
        "architecture": spec.model_type,
        "model_name": None if _fallback_name(spec) else spec.model_name,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "pipeline_parallel_size": spec.pipeline_parallel_size,
        "dtype": spec.dtype,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
    }
    return {k: v for k, v in planned.items() if v is not None}


def mismatches(recorded: ProfiledSetup, planned: Mapping[str, object]) -> list[str]:
    """Each recorded field the plan contradicts, as ``field: profiled X, planned Y``."""
    found: list[str] = []
    for field, value in planned.items():
        have = getattr(recorded, field, None)
        if have is None or value is None:
            continue
        if field == "model_name" and _CLASS_NAME.fullmatch(str(have)):
            continue  # the profile recorded a class name: that is the architecture, compared
        norm = _NORMALIZE.get(field, _same)
        if norm(have) != norm(value):
            found.append(f"{field}: profiled {have}, planned {value}")
    return found


def check_profile_matches(
    result: ProfileResult | None,
    spec: KVCacheSpec,
    *,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    allow_mismatch: bool = False,
) -> None:
    """Refuse to plan ``spec`` from a profile of something else (one line, both values).

    Args:
        result: the profile (``None``: nothing to check).
        spec: the spec to plan.
        max_num_batched_tokens: the engine's token budget the plan assumes.
        max_num_seqs: the engine's sequence budget the plan assumes.
        allow_mismatch: plan anyway.

    Raises:
        ProfileMismatchError: a recorded field differs, unless ``allow_mismatch``.
    """
    if result is None or allow_mismatch:
        return
    planned = planned_setup(
        spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
    )
    found = mismatches(result.profiled, planned)
    if found:
        raise ProfileMismatchError(
            f"the profile does not match the plan ({'; '.join(found)}): profile this model "
            "with this layout and these budgets, or pass allow_mismatch=True "
            "(memacct plan --allow-mismatch) to plan anyway"
        )


# A layout or budget a plan can assume without the profile saying so: the figures the
# profile measured are the run's, whatever it was, so the plan says which it took on trust.
_TRUSTED = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
            "max_num_batched_tokens": None, "max_num_seqs": None}  # fmt: skip


def unrecorded_notes(
    result: ProfileResult | None,
    spec: KVCacheSpec,
    *,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
) -> tuple[str, ...]:
    """One note per layout or budget the plan assumes that the profile did not record (a
    profile saved without its setup), so that a plan at TP 2 from a profile of unknown TP,
    whose blocks double with the degree, says it took the degree on trust."""
    if result is None:
        return ()
    planned = planned_setup(
        spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
    )
    notes = []
    for field, default in _TRUSTED.items():
        value = planned.get(field)
        if value is None or value == default or getattr(result.profiled, field) is not None:
            continue
        notes.append(
            f"the profile recorded no {field}: planned with {value} as given, and its measured "
            f"figures are the profiled run's, whatever its {field} was (profile with the "
            "setup recorded, ProfiledSetup, to have it checked)"
        )
    return tuple(notes)
