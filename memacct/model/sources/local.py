"""A model's ``config.json`` on local disk: the file, or the model directory holding it.

:func:`read_config_file` is the one reader of a local config file (the resolver, the Hub
cache and :meth:`KVCacheSpec.from_hf_config <memacct.model.spec.KVCacheSpec.from_hf_config>`
call it); the checked reading of its values is :class:`~memacct.model.config.ModelConfig`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError
from memacct.io import read_json_object

__all__ = ["CONFIG_OBJECT", "read_config_file"]

CONFIG_OBJECT = "a JSON object (a model's config.json)"
"""What a config file must hold, as its refusal names it."""


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a Hugging Face ``config.json`` (or a model directory holding one).

    A ModelOpt ``hf_quant_config.json`` beside it is merged in as
    ``quantization_config`` when the config has none, as engines do, so a
    checkpoint's declared FP8 KV cache is seen. A ``.gguf`` file gives the
    config its metadata maps to (:func:`memacct.model.sources.gguf.read_gguf`).

    Raises:
        ConfigError: the file is missing, too large, not UTF-8, not JSON or
            not a JSON object.
    """
    if not str(path).strip():  # Path("") is ".", the working directory
        raise ConfigError(
            f"config path {str(path)!r} is empty: give the path of a model's config.json"
        )
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        from memacct.model.sources.gguf import read_gguf

        return dict(read_gguf(p).config)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ConfigError(
                f"model directory {str(p)!r} has no config.json: give the path of the "
                f"model's config.json"
            )
        p = p / "config.json"
    config = read_json_object(p, "config.json", CONFIG_OBJECT)
    sidecar = p.parent / "hf_quant_config.json"
    if "quantization_config" not in config and sidecar.is_file():
        config["quantization_config"] = read_json_object(
            sidecar, "hf_quant_config.json", CONFIG_OBJECT
        )
    return config
