"""Where a model comes from: one resolver for every way a user names one.

:func:`resolve_model` turns what a user wrote (``--model``, or a name given to
the Python API) into a :class:`ModelSource`: the config dict, a display name,
the checkpoint's tensor table when one can be read without any tensor data,
and where it all came from. It accepts, in this order:

1. ``list`` is not a model (the command line lists the presets for it);
2. a model preset (``qwen2.5-7b``, :func:`~memacct.model.sources.presets.model_presets`);
3. a path that exists: a ``config.json`` file, a checkpoint directory (its
   ``config.json`` plus, when it has them, the safetensors headers), or a
   ``.gguf`` file (:mod:`memacct.model.sources.gguf`);
4. a Hugging Face Hub id ``org/name``, optionally ``org/name@revision`` or with
   ``revision=``: read from the Hub, or offline from the local Hub cache
   (:mod:`memacct.model.sources.hub`).

A path that looks like one (``.json``/``.gguf``, ``./``, ``/``, ``~``) but does
not exist is reported as a missing file, never sent to the Hub. When the Hub
cannot be reached or is offline and the model is not cached, a Hub id that a
shipped preset copies is planned from that preset, with a note saying so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memacct.errors import ConfigError
from memacct.model.sources.checkpoint import TensorTable, checkpoint_files, checkpoint_table

__all__ = ["ModelSource", "Origin", "resolve_model"]

Origin = Literal["preset", "config", "checkpoint", "gguf", "hub", "hub-cache"]

# The Hub repositories whose published config.json the presets ship (presets.py's table).
PRESET_REPOS: dict[str, str] = {
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
    "nvidia/llama-3.1-8b-instruct-fp8": "llama-3.1-8b-fp8",
    "meta-llama/llama-4-scout-17b-16e-instruct": "llama-4-scout",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen/qwen3-8b": "qwen3-8b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b",
    "mistralai/mistral-7b-v0.1": "mistral-7b",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
    "google/gemma-2-9b-it": "gemma-2-9b",
    "google/gemma-3-12b-it": "gemma-3-12b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v2-lite-chat": "deepseek-v2-lite",
    "coherelabs/c4ai-command-r7b-12-2024": "cohere2-7b",
    "google/gemma-3n-e4b-it": "gemma-3n-e4b",
    "qwen/qwen3-next-80b-a3b-instruct": "qwen3-next-80b-a3b",
    "ibm-granite/granite-4.0-h-small": "granite-4.0-h-small",
}


@dataclass(frozen=True)
class ModelSource:
    """A model as memacct read it.

    Attributes:
        config: its ``config.json`` (for a GGUF file, the config its metadata maps to).
        name: a display name (the preset, the directory, the file or the Hub id).
        origin: ``preset``, ``config``, ``checkpoint``, ``gguf``, ``hub`` or ``hub-cache``.
        location: the path, or ``org/name@commit`` for the Hub.
        table: the checkpoint's tensor table (safetensors headers or GGUF), when read;
            the weights then come from it (:func:`~memacct.model.sources.checkpoint.table_weights`).
        revision: the commit a Hub revision resolved to.
        notes: what was assumed, for the plan's notes.
    """

    config: dict[str, Any]
    name: str
    origin: Origin
    location: str
    table: TensorTable | None = None
    revision: str | None = None
    notes: tuple[str, ...] = ()


def _looks_like_path(name: str) -> bool:
    name = name.split("@", 1)[0]  # a Hub revision may hold slashes (refs/pr/1)
    low = name.lower()
    return (
        low.endswith((".json", ".gguf", ".safetensors"))
        or name.startswith(("./", "../", "/", "~", ".\\"))
        or os.sep in name.rstrip("/").split("/", 1)[-1]
        or name.count("/") > 1
    )


def resolve_model(
    name: str | os.PathLike[str], revision: str | None = None, *, status: Any = "stderr"
) -> ModelSource:
    """Read the model ``name`` names (see the module docstring for the forms accepted).

    Args:
        name: a preset, a ``config.json`` path, a checkpoint directory, a ``.gguf`` file,
            or a Hub id ``org/name`` / ``org/name@revision``.
        revision: the Hub revision (branch, tag or commit); only for a Hub id.
        status: for the Hub, ``"stderr"`` (one line on stderr before it is asked), ``None``
            (silent) or a callable taking the line.

    Raises:
        ConfigError: a missing or unreadable file, a name that is none of the forms.
        ModelSourceError: a Hub id that cannot be read (gated, missing, private, offline),
            one line naming the cause and the fix.
    """
    from memacct.model.sources.presets import load_model_preset, model_presets

    if not isinstance(name, (str, os.PathLike)):
        raise ConfigError(
            f"a model is named by a string or a path, got {name!r} ({type(name).__name__}): "
            "give a preset, a config.json path, a checkpoint directory, a .gguf file or a Hub "
            "id (or pass the config as a dict)"
        )
    text = os.fspath(name)
    if not isinstance(text, str):
        raise ConfigError(f"a model is named by a string or a path, got {type(name).__name__}")
    key = text.strip().lower()
    if not key:
        raise ConfigError(
            f"model {text!r} is empty: give a preset (memacct plan --model list), a "
            "config.json path, a checkpoint directory, a .gguf file or a Hub id (org/name)"
        )
    if key in model_presets() and not Path(text).exists():
        _no_revision(text, revision)
        return ModelSource(load_model_preset(key), key, "preset", f"preset {key}")
    path = Path(text).expanduser()
    if path.exists():
        _no_revision(text, revision)
        return _local(path)
    if _looks_like_path(text) or "/" not in text:
        if _looks_like_path(text):
            raise ConfigError(
                f"{'GGUF file' if key.endswith('.gguf') else 'config.json'} {text!r} does not "
                "exist: check the path"
            )
        raise ConfigError(
            f"model {text!r} is neither a config.json file nor a model preset, nor a Hugging "
            f"Face Hub id (org/name); presets: {', '.join(model_presets())} "
            "(or 'memacct plan --model list')"
        )
    return _hub(text, revision, status)


def _no_revision(name: str, revision: str | None) -> None:
    if revision is not None:
        raise ConfigError(
            f"revision {revision!r} applies to a Hugging Face Hub id, and {name!r} is a local "
            "model or a preset: drop the revision"
        )


def _local(path: Path) -> ModelSource:
    from memacct.model.sources.local import read_config_file

    if path.is_file() and path.suffix.lower() == ".gguf":
        from memacct.model.sources.gguf import read_gguf

        table = read_gguf(path)
        note = (
            f"{path.name}: config from its GGUF metadata, weights from its tensor table "
            "(as stored, quantized)"
        )
        return ModelSource(
            dict(table.config), path.stem, "gguf", str(path), table, notes=(note,)
        )
    if path.is_dir():
        config = read_config_file(path)
        if checkpoint_files(path):
            table = checkpoint_table(path)
            return ModelSource(config, path.name, "checkpoint", str(path), table,
                               notes=table.notes)
        return ModelSource(config, path.name, "config", str(path / "config.json"))
    config = read_config_file(path)
    return ModelSource(config, config_file_name(config, path), "config", str(path))


def config_file_name(config: Mapping[str, Any], path: Path) -> str:
    """How a bare config file is named (``config.json`` names nothing): its ``_name_or_path``,
    else the directory holding it, else its architecture."""
    named = config.get("_name_or_path")
    if isinstance(named, str) and named.strip():
        return named.strip()
    parent = path.resolve().parent.name
    if path.stem.lower() != "config":
        return path.stem
    if parent:
        return parent
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return str(config.get("model_type") or path.stem)


def _hub(text: str, revision: str | None, status: Any) -> ModelSource:
    from memacct.model.sources.hub import (
        HubUnavailableError,
        load_hub_model,
        parse_hub_id,
        stderr_status,
    )

    repo_id, rev = parse_hub_id(text, revision)
    callback = stderr_status if status == "stderr" else status
    try:
        model = load_hub_model(repo_id, rev, status=callback)
    except HubUnavailableError as exc:
        preset = PRESET_REPOS.get(repo_id.lower())
        if preset is None or rev not in (None, "main"):
            raise
        from memacct.model.sources.presets import load_model_preset

        note = (
            f"{repo_id} could not be read from the Hub, so it was planned from the shipped "
            f"preset {preset}, a copy of its published config.json (the reason: {exc})"
        )
        return ModelSource(
            load_model_preset(preset), repo_id, "preset", f"preset {preset}", notes=(note,)
        )
    return ModelSource(
        model.config,
        repo_id,
        "hub-cache" if model.from_cache else "hub",
        f"{repo_id}@{model.commit}",
        model.table,
        model.commit,
        model.notes,
    )

