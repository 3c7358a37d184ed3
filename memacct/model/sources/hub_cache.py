"""The local caches a Hub model is read from offline: the Hugging Face cache (its refs
and snapshots, as ``huggingface_hub`` lays them out) and memacct's own cache of tensor
tables per commit, which spares a second run the safetensors range requests."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError
from memacct.io import (
    atomic_write_text,
    loads_json_object,
    read_json_object,
    read_text,
    user_cache_dir,
)
from memacct.model.sources.checkpoint import (
    TensorTable,
    checkpoint_table,
    header_tensors,
    shard_names,
)
from memacct.units import MiB

__all__ = [
    "COMMIT",
    "INDEX",
    "SINGLE",
    "cached_commit",
    "cached_table",
    "hub_cache_dir",
    "snapshot_table",
    "storage",
    "store_ref",
    "store_table",
]

COMMIT = re.compile(r"[0-9a-f]{40}")
"""A full commit id."""
INDEX = "model.safetensors.index.json"
"""The shard index of a sharded safetensors checkpoint."""
SINGLE = "model.safetensors"
"""The one file of an unsharded safetensors checkpoint."""
_TABLE_CACHE_LIMIT = 256 * MiB


def hub_cache_dir() -> Path:
    """The Hugging Face cache (``HF_HUB_CACHE``, else ``$HF_HOME/hub``), read now."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def storage(repo_id: str) -> Path:
    """Where the Hugging Face cache keeps ``repo_id`` (``models--org--name``)."""
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def cached_commit(repo_id: str, revision: str | None) -> str | None:
    """The commit ``revision`` (default ``main``) names in the Hugging Face cache, offline;
    ``None`` when the cache has no such ref."""
    if revision is not None and COMMIT.fullmatch(revision):
        commit: str | None = revision
    else:
        ref = storage(repo_id) / "refs" / (revision or "main")
        try:
            commit = read_text(ref, "Hugging Face cache ref", limit=4096).strip()
        except ConfigError:
            return None
    if commit is None or not COMMIT.fullmatch(commit):
        return None
    return commit


def store_ref(repo_id: str, revision: str, commit: str) -> None:
    """Point ``refs/<revision>`` of the Hugging Face cache at ``commit``, as huggingface_hub
    does for a download by branch name, so an offline run finds the snapshot."""
    if revision == commit:
        return
    with contextlib.suppress(ConfigError):
        atomic_write_text(storage(repo_id) / "refs" / revision, commit, "cache ref",
                          make_parents=True)  # fmt: skip


def snapshot_table(snapshot: Path, config: Mapping[str, Any]) -> TensorTable | None:
    """The tensor table of safetensors files downloaded into the snapshot (by vLLM, say)."""
    has_files = (snapshot / SINGLE).is_file() or (
        (snapshot / INDEX).is_file()
        and all(
            (snapshot / n).is_file()
            for n in shard_names(read_json_object(snapshot / INDEX, INDEX), str(snapshot))
        )
    )
    if not has_files:
        return None
    table = checkpoint_table(snapshot)
    return TensorTable(config, table.tensors)


def _table_path(repo_id: str, commit: str) -> Path | None:
    base = user_cache_dir("hub", "models--" + repo_id.replace("/", "--"))
    return None if base is None else base / f"{commit}.json"


def cached_table(repo_id: str, commit: str, config: Mapping[str, Any]) -> TensorTable | None:
    path = _table_path(repo_id, commit)
    if path is None or not path.is_file():
        return None
    try:
        data = loads_json_object(
            read_text(path, "cached tensor table", _TABLE_CACHE_LIMIT), str(path)
        )
        tensors = data.get("tensors")
        if not isinstance(tensors, Mapping):
            return None
        header = {
            name: {"dtype": entry[0], "shape": entry[1]}
            for name, entry in tensors.items()
            if isinstance(entry, list) and len(entry) == 2
        }
        return TensorTable(config, header_tensors(header, str(path)))
    except ConfigError:
        return None  # a damaged cache entry is read again from the Hub


def store_table(repo_id: str, commit: str, table: TensorTable) -> None:
    path = _table_path(repo_id, commit)
    if path is None:
        return
    tensors = {name: [info.dtype, list(info.shape)] for name, info in table.tensors.items()}
    text = json.dumps({"repo_id": repo_id, "commit": commit, "tensors": tensors})
    # An unwritable cache costs the next run the range requests, nothing more.
    with contextlib.suppress(ConfigError):
        atomic_write_text(path, text, "tensor table cache", make_parents=True)
