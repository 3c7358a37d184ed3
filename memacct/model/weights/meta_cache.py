"""The meta-device model's parameter list, kept per config in the user's cache directory.

Building a model on the ``meta`` device costs seconds (importing ``torch`` and
``transformers``, then constructing every module); the list of its parameters'
names and shapes depends only on the config and the ``transformers`` release.
So :func:`cached_parameters` keys that list by a hash of both and keeps it as
JSON under :func:`memacct.io.user_cache_dir` (``MEMACCT_CACHE_DIR``,
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
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError
from memacct.io import atomic_write_text, loads_json_object, read_text, user_cache_dir
from memacct.units import MiB

__all__ = ["Parameters", "cache_path", "cached_parameters"]

Parameters = tuple[tuple[tuple[str, tuple[int, ...]], ...], bool]
"""The meta-device model's (name, shape) of every parameter, and whether its LM head is tied."""

_SCHEMA = 2
_LIMIT = 256 * MiB


def _transformers_release() -> str | None:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def cache_path(config_json: str) -> Path | None:
    """Where the parameters of ``config_json`` (a config as sorted JSON) are kept; ``None``:
    no cache (caching off, or transformers not installed)."""
    release = _transformers_release()
    base = user_cache_dir("meta-parameters")
    if release is None or base is None:
        return None
    key = json.dumps([_SCHEMA, release, config_json])
    return base / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _load(path: Path) -> Parameters | None:
    try:
        data = loads_json_object(read_text(path, "meta-parameters cache", _LIMIT), str(path))
    except ConfigError:
        return None
    refusal = data.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise ConfigError(refusal)  # transformers could not build it last time either
    params, tied = data.get("parameters"), data.get("tied")
    if not isinstance(params, list) or not isinstance(tied, bool):
        return None
    out: list[tuple[str, tuple[int, ...]]] = []
    for entry in params:
        ok = (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], list)
            and all(type(d) is int and d >= 0 for d in entry[1])
        )
        if not ok:
            return None
        out.append((entry[0], tuple(entry[1])))
    return tuple(out), tied


def cached_parameters(config_json: str, build: Callable[[], Parameters]) -> Parameters:
    """The kept parameters of ``config_json``, else ``build()`` (then kept for the next run).

    Raises:
        ConfigError: ``build`` refused the config (now, or on the run that kept the refusal).
    """
    path = cache_path(config_json)
    if path is not None and path.is_file():
        hit = _load(path)
        if hit is not None:
            return hit
    try:
        params = build()
    except ConfigError as exc:
        if path is not None and not str(exc).startswith("sizing from the architecture needs"):
            _store(path, {"refusal": str(exc)})
        raise
    if path is not None:
        _store(path, {"parameters": [[n, list(shape)] for n, shape in params[0]],
                      "tied": params[1]})  # fmt: skip
    return params


def _store(path: Path, entry: dict[str, Any]) -> None:
    # An unwritable cache costs the next run the meta-device build, nothing more.
    with contextlib.suppress(ConfigError):
        atomic_write_text(path, json.dumps(entry), "meta-parameters cache", make_parents=True)
