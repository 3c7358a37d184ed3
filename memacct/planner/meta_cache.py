"""The meta-device weight count, kept per config in the user's cache directory.

Building a model on the ``meta`` device costs seconds (importing ``torch`` and
``transformers``, then constructing every module); its answer depends only on
the config, the tensor-parallel size, the ``transformers`` release and
memacct's own per-rank rules. So :func:`cached` keys the
:class:`~memacct.planner.weight_rules.WeightEstimate` by a hash of all four and
keeps it as JSON under :func:`memacct.io.user_cache_dir` (``MEMACCT_CACHE_DIR``,
else ``$XDG_CACHE_HOME/memacct``; ``MEMACCT_CACHE_DIR=off`` turns it off),
written atomically. Finding the ``transformers`` release reads package
metadata only: a cached answer imports neither torch nor transformers.

A config transformers cannot build is kept too, as its refusal (the same message
again, at once). A damaged or foreign cache entry is ignored (the count is made
again), never trusted: it is read through :mod:`memacct.io` and every field is checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError
from memacct.io import atomic_write_text, loads_json_object, read_text, user_cache_dir
from memacct.planner.weight_rules import WeightEstimate

__all__ = ["cache_path", "cached"]

_SCHEMA = 1
# The modules whose rules shape the count: a change to any of them is a new key.
_RULE_MODULES = ("meta.py", "weight_rules.py", "quant.py", "meta_cache.py")


@lru_cache(maxsize=1)
def _rules_digest() -> str:
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in _RULE_MODULES:
        with contextlib.suppress(OSError):
            digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def _transformers_release() -> str | None:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def cache_path(config: Mapping[str, Any], tensor_parallel_size: int) -> Path | None:
    """Where the count of ``config`` at ``tensor_parallel_size`` is kept; ``None``: no cache
    (caching off, transformers not installed, or a config that is not plain JSON)."""
    release = _transformers_release()
    base = user_cache_dir("meta-weights")
    if release is None or base is None:
        return None
    try:
        text = json.dumps(
            [_SCHEMA, release, _rules_digest(), tensor_parallel_size, config],
            sort_keys=True, allow_nan=False,
        )  # fmt: skip
    except (TypeError, ValueError):
        return None
    return base / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def _load(path: Path, tp: int) -> WeightEstimate | None:
    try:
        data = loads_json_object(read_text(path, "meta-weights cache", 1 << 20), str(path))
    except ConfigError:
        return None
    refusal = data.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise ConfigError(refusal)  # transformers could not build it last time either
    by_role = data.get("by_role")
    quant = data.get("quantization")
    if not (
        isinstance(by_role, dict)
        and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in by_role.items())
        and (quant is None or isinstance(quant, str))
        and data.get("tensor_parallel_size") == tp
    ):
        return None
    return WeightEstimate(sum(by_role.values()), by_role, "transformers", quant, tp)


def cached(
    config: Mapping[str, Any], tensor_parallel_size: int, count: Callable[[], WeightEstimate]
) -> WeightEstimate:
    """The cached count of ``config``, else ``count()`` (then kept for the next run)."""
    path = cache_path(config, tensor_parallel_size)
    if path is not None and path.is_file():
        hit = _load(path, tensor_parallel_size)
        if hit is not None:
            return hit
    try:
        estimate = count()
    except ConfigError as exc:
        if path is not None and not str(exc).startswith("sizing from the architecture needs"):
            _store(path, {"refusal": str(exc)})
        raise
    if path is not None:
        _store(path, {
            "by_role": dict(estimate.by_role),
            "quantization": estimate.quantization,
            "tensor_parallel_size": estimate.tensor_parallel_size,
        })  # fmt: skip
    return estimate


def _store(path: Path, entry: dict[str, Any]) -> None:
    # An unwritable cache costs the next run the meta-device build, nothing more.
    with contextlib.suppress(ConfigError):
        atomic_write_text(path, json.dumps(entry), "meta-weights cache", make_parents=True)
