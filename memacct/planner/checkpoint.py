"""Weights of one rank from a checkpoint's safetensors headers (no tensor is read).

Only the 8-byte length and the JSON header of each file are read, through
:mod:`memacct.io`, or ``model.safetensors.index.json`` plus the headers.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memacct.checks import check_int
from memacct.errors import ConfigError
from memacct.io import loads_json_object, read_json_object, read_prefix
from memacct.planner.quant import parse_quantization
from memacct.planner.weight_rules import (
    _DTYPE_BYTES,
    WeightEstimate,
    _num_kv_heads,
    _role,
    _rotary_bytes,
    _shard_elems,
    _text,
    dtype_bytes,
)

__all__ = ["safetensors_weights"]

_MAX_HEADER = 100 * 2**20  # safetensors caps its JSON header at 100 MB


def _header(path: Path) -> dict[str, Any]:
    (length,) = struct.unpack("<Q", read_prefix(path, "safetensors file", 0, 8))
    if length <= 0 or length > _MAX_HEADER:
        raise ConfigError(
            f"safetensors file {str(path)!r} declares a {length}-byte header: "
            "not a safetensors file"
        )
    text = read_prefix(path, "safetensors file", 8, length).decode("utf-8", errors="replace")
    return loads_json_object(text, f"safetensors header of {path.name}")


def _checkpoint_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        data = read_json_object(index, "model.safetensors.index.json")
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, Mapping) or not weight_map:
            raise ConfigError(f"{index} has no weight_map: the checkpoint index is damaged")
        names = sorted({str(v) for v in weight_map.values()})
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def safetensors_weights(
    directory: str | os.PathLike[str], *, tensor_parallel_size: int = 1
) -> WeightEstimate:
    """Weights of one rank from a checkpoint directory's safetensors headers (no tensor is read).

    Raises:
        ConfigError: no ``config.json`` or no safetensors file, or a damaged header.
    """
    tp = check_int("tensor_parallel_size", tensor_parallel_size)
    root = Path(directory)
    config = read_json_object(root / "config.json", "config.json")
    files = _checkpoint_files(root)
    if not files:
        raise ConfigError(
            f"{str(root)!r} holds no *.safetensors file: give a checkpoint directory in "
            "safetensors format, or the config.json alone for an estimate from the architecture"
        )
    kv = _num_kv_heads(config)
    dt = dtype_bytes(config)
    tied = bool(_text(config).get("tie_word_embeddings", True))
    by_role: dict[str, int] = {}
    for path in files:
        for name, entry in _header(path).items():
            if name == "__metadata__" or not isinstance(entry, Mapping):
                continue
            shape = tuple(int(d) for d in entry.get("shape", ()))
            size = _DTYPE_BYTES.get(str(entry.get("dtype", "")).lower(), 2)
            # The engine casts unquantized float tensors to the serving dtype.
            if (
                size == 4
                and str(entry.get("dtype", "")).upper() == "F32"
                and not name.endswith("scale")
            ):
                size = dt
            role = _role(name)
            if role == "lm_head" and tied:
                continue
            by_role[role] = by_role.get(role, 0) + _shard_elems(name, shape, tp, kv) * size
    by_role["buffers"] = by_role.get("buffers", 0) + _rotary_bytes(config)
    quant = parse_quantization(config)
    return WeightEstimate(
        sum(by_role.values()), by_role, "checkpoint", quant.label if quant else None, tp
    )
