"""Weights of one rank from a checkpoint's tensor table (no tensor is read).

The table comes from safetensors headers (only the 8-byte length and the JSON
header of each file are read, through :mod:`memacct.io`, or
``model.safetensors.index.json`` plus the headers), from the same headers
fetched from the Hugging Face Hub by range requests (:mod:`memacct.model.sources.hub`),
or from a GGUF file's tensor table (:mod:`memacct.model.sources.gguf`). All of it
is untrusted input: a header length past the format's cap, a shard name outside
the checkpoint, or a malformed tensor entry is refused with one line.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from memacct.checks import check_int
from memacct.errors import ConfigError
from memacct.io import loads_json_object, read_json_object, read_prefix
from memacct.model.config import DTYPE_BYTES
from memacct.model.weights.quant import UnknownQuantizationError, parse_quantization
from memacct.model.weights.rules import (
    WeightEstimate,
    WeightTensor,
    config_kv_heads,
    dtype_bytes,
    rotary_tensor,
    shard_elements,
    tensor_role,
    text_section,
)

__all__ = [
    "MAX_HEADER_BYTES",
    "TensorInfo",
    "TensorTable",
    "checkpoint_table",
    "header_length",
    "header_tensors",
    "safetensors_weights",
    "shard_names",
    "table_tensors",
    "table_weights",
]

MAX_HEADER_BYTES = 100_000_000
"""The safetensors format's cap on its JSON header (``MAX_HEADER_SIZE`` in safetensors'
``safetensors/src/tensor.rs``: 100 MB); a longer declared header is not a safetensors file."""

_MAX_RANK = 8
_MAX_DIM = 1 << 40
_MAX_TENSORS = 1 << 20


class TensorInfo(NamedTuple):
    """One tensor of a checkpoint: its dtype as the file names it, its shape and, for
    formats whose blocks the dtype alone does not size (GGUF), its bytes in the file."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int | None = None


@dataclass(frozen=True)
class TensorTable:
    """A checkpoint's tensors by name (every file together), with the config they belong to.

    Attributes:
        config: the model's ``config.json`` (or the config read from a GGUF file).
        tensors: tensor name -> :class:`TensorInfo`.
        origin: where the table came from, for the estimate's ``source`` (``checkpoint``).
        notes: what the files contradict (a header declaring more bytes than its file holds),
            one sentence each, for the plan's notes.
    """

    config: Mapping[str, Any]
    tensors: Mapping[str, TensorInfo] = field(default_factory=dict)
    origin: str = "checkpoint"
    notes: tuple[str, ...] = ()


def header_length(prefix: bytes, source: str) -> int:
    """The JSON header's length from the first 8 bytes of a safetensors file, checked.

    Raises:
        ConfigError: fewer than 8 bytes, a zero length, or one past :data:`MAX_HEADER_BYTES`
            (refused before any of the header is read).
    """
    if len(prefix) < 8:
        raise ConfigError(f"{source} is shorter than 8 bytes: not a safetensors file")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length <= 0 or length > MAX_HEADER_BYTES:
        raise ConfigError(
            f"{source} declares a {length}-byte header, beyond the safetensors format's cap of "
            f"{MAX_HEADER_BYTES} bytes: not a safetensors file (check the file or the repository)"
        )
    return int(length)


def header_tensors(header: Mapping[str, Any], source: str) -> dict[str, TensorInfo]:
    """The tensors of one parsed safetensors header, each entry checked.

    Raises:
        ConfigError: an entry is not ``{"dtype": str, "shape": [int, ...]}`` with plausible sizes.
    """
    if len(header) > _MAX_TENSORS:
        raise ConfigError(f"{source} lists {len(header)} tensors: not a real checkpoint")
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, Mapping) else None
        shape = entry.get("shape") if isinstance(entry, Mapping) else None
        ok = (
            isinstance(dtype, str)
            and len(dtype) <= 16
            and isinstance(shape, list)
            and len(shape) <= _MAX_RANK
            and all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _MAX_DIM
                for d in shape
            )
        )
        if not ok:
            raise ConfigError(
                f"{source}: tensor {name[:80]!r} is not a safetensors entry "
                '({"dtype": ..., "shape": [...]}): the header is damaged or not safetensors'
            )
        assert isinstance(dtype, str) and isinstance(shape, list)
        tensors[name] = TensorInfo(dtype, tuple(shape))
    return tensors


def shard_names(index: Mapping[str, Any], source: str) -> list[str]:
    """The shard files a ``model.safetensors.index.json`` names, each inside the checkpoint.

    Raises:
        ConfigError: no ``weight_map``, or a shard name that is absolute, climbs out of the
            checkpoint (``..``), or is not a ``.safetensors`` file name.
    """
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise ConfigError(f"{source} has no weight_map: the checkpoint index is damaged")
    names = sorted({str(v) for v in weight_map.values()})
    for name in names:
        parts = PurePosixPath(name).parts
        bad = (
            not name
            or name.startswith(("/", "\\"))
            or "\\" in name
            or ":" in name
            or ".." in parts
            or not name.endswith(".safetensors")
        )
        if bad:
            raise ConfigError(
                f"{source} names the shard {name[:120]!r}, outside the checkpoint or not a "
                "safetensors file: the index is damaged or hostile; refusing it"
            )
    return names


def _header(path: Path, notes: list[str] | None = None) -> dict[str, TensorInfo]:
    """One file's tensors; where its header declares more data than the file holds (a file
    cut short, a Git LFS pointer, a crafted header), a note in ``notes``."""
    source = f"safetensors file {str(path)!r}"
    length = header_length(read_prefix(path, "safetensors file", 0, 8), source)
    text = read_prefix(path, "safetensors file", 8, length).decode("utf-8", errors="replace")
    header = loads_json_object(text, f"safetensors header of {path.name}")
    tensors = header_tensors(header, source)
    declared = 8 + length + _data_end(header)
    held = path.stat().st_size
    if notes is not None and declared > held:
        notes.append(
            f"{path.name} declares {declared:,} bytes of tensors and header but holds {held:,}: "
            "the weights were sized from what the headers declare, not from data on disk "
            "(a download cut short, a Git LFS pointer, or not the weights it names)"
        )
    return tensors


def _data_end(header: Mapping[str, Any]) -> int:
    """The end of the data the header's entries declare (``data_offsets``), 0 if none."""
    ends = [entry["data_offsets"][1] for entry in header.values()
            if isinstance(entry, Mapping) and isinstance(entry.get("data_offsets"), list)
            and len(entry["data_offsets"]) == 2 and isinstance(entry["data_offsets"][1], int)]
    return max(ends, default=0)


def checkpoint_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        data = read_json_object(index, "model.safetensors.index.json")
        return [directory / n for n in shard_names(data, str(index))]
    return sorted(directory.glob("*.safetensors"))


def checkpoint_table(directory: str | os.PathLike[str]) -> TensorTable:
    """The tensor table of a checkpoint directory's safetensors headers (no tensor is read).

    Raises:
        ConfigError: no ``config.json`` or no safetensors file, or a damaged header.
    """
    root = Path(directory)
    config = read_json_object(root / "config.json", "config.json")
    files = checkpoint_files(root)
    if not files:
        raise ConfigError(
            f"{str(root)!r} holds no *.safetensors file: give a checkpoint directory in "
            "safetensors format, or the config.json alone for an estimate from the architecture"
        )
    notes: list[str] = []
    tensors = merge_tensors([_header(path, notes) for path in files])
    return TensorTable(config, tensors, notes=tuple(notes))


def merge_tensors(parts: Iterable[Mapping[str, TensorInfo]]) -> dict[str, TensorInfo]:
    """Every file's tensors in one table."""
    merged: dict[str, TensorInfo] = {}
    for part in parts:
        merged.update(part)
    return merged


def table_tensors(table: TensorTable, *, tensor_parallel_size: int = 1) -> list[WeightTensor]:
    """Every weight tensor of one rank from a checkpoint's tensor table, in the table's order,
    then the rotary cos/sin cache; a tied LM head is left out (the embedding serves it)."""
    tp = check_int("tensor_parallel_size", tensor_parallel_size)
    config = table.config
    kv = config_kv_heads(config)
    dt = dtype_bytes(config)
    tied = bool(text_section(config).get("tie_word_embeddings", True))
    tensors: list[WeightTensor] = []
    for name, info in table.tensors.items():
        shape = info.shape
        role = tensor_role(name)
        if role == "lm_head" and tied:
            continue
        shard = shard_elements(name, shape, tp, kv)
        if info.nbytes is not None:
            elems = 1
            for d in shape:
                elems *= d
            nbytes = info.nbytes * shard // elems if elems else 0
        else:
            size = DTYPE_BYTES.get(info.dtype.lower(), 2)
            # The engine casts unquantized float tensors to the serving dtype.
            if size == 4 and info.dtype.upper() == "F32" and not name.endswith("scale"):
                size = dt
            nbytes = shard * size
        tensors.append(WeightTensor(name, role, tuple(shape), nbytes))
    tensors.append(rotary_tensor(config))
    return tensors


def table_weights(table: TensorTable, *, tensor_parallel_size: int = 1) -> WeightEstimate:
    """Weights of one rank from a checkpoint's tensor table: the sum of :func:`table_tensors`."""
    tensors = table_tensors(table, tensor_parallel_size=tensor_parallel_size)
    try:
        quant = parse_quantization(table.config)
        label = quant.label if quant else None
    except UnknownQuantizationError:
        # The headers give every tensor's bytes as stored: a method memacct has no layout
        # for is sized from them as it is (only its label is the method's name).
        label = str(_quant_method(table.config) or "unknown")
    return WeightEstimate.of(tensors, table.origin, label, tensor_parallel_size)


def _quant_method(config: Mapping[str, Any]) -> object:
    quant = config.get("quantization_config") or text_section(config).get("quantization_config")
    return quant.get("quant_method") if isinstance(quant, Mapping) else None


def safetensors_weights(
    directory: str | os.PathLike[str], *, tensor_parallel_size: int = 1
) -> WeightEstimate:
    """Weights of one rank from a checkpoint directory's safetensors headers (no tensor is read).

    Raises:
        ConfigError: no ``config.json`` or no safetensors file, or a damaged header.
    """
    check_int("tensor_parallel_size", tensor_parallel_size)
    return table_weights(checkpoint_table(directory), tensor_parallel_size=tensor_parallel_size)
