"""The bytes of a model's weights on one tensor-parallel rank, as a serving engine holds them.

Three sources, best first (:func:`estimate_weights` picks):

1. a checkpoint directory: the tensor shapes and dtypes from the safetensors
   headers (only the 8-byte length and the JSON header of each file are read,
   never a tensor), or from ``model.safetensors.index.json`` plus the headers;
2. ``transformers`` (the optional ``memacct[hf]`` extra): the model built on
   the ``meta`` device from its config, no memory and no weights, each
   parameter sized by its role;
3. hand-written per-family formulas from ``config.json`` (dense, MoE, MLA,
   multimodal towers), the fallback without ``transformers``.

Every source applies the same per-rank rules, those of vLLM's layers (see
``docs/engines.md``): the embedding and the LM head are split by vocabulary
(padded to a multiple of 64) across ranks; column- and row-parallel linear
layers and MoE experts are split; norms, routers and the replicated KV heads
(fewer KV heads than ranks) are whole on every rank. Quantized linear layers
are sized by :mod:`memacct.model.weights.quant`; embeddings, the LM head, norms and
routers stay in the model's dtype.

Example::

    >>> from memacct.planner import load_model_preset
    >>> w = estimate_weights(load_model_preset("llama-3.1-8b"), tensor_parallel_size=2)
    >>> round(w.total_bytes / 2**30, 2)
    7.51
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from memacct.checks import check_int
from memacct.errors import ConfigError
from memacct.io import read_json_object
from memacct.model.config import ModelConfig
from memacct.model.sources.checkpoint import (
    TensorTable,
    checkpoint_files,
    checkpoint_table,
    safetensors_weights,
    table_tensors,
    table_weights,
)
from memacct.model.weights.inventory import formula_tensors
from memacct.model.weights.meta import meta_tensors, meta_weights
from memacct.model.weights.quant import parse_quantization
from memacct.model.weights.rules import VOCAB_PADDING, WeightEstimate, WeightTensor, dtype_bytes

__all__ = [
    "VOCAB_PADDING",
    "WeightEstimate",
    "WeightTensor",
    "dtype_bytes",
    "estimate_weights",
    "formula_tensors",
    "formula_weights",
    "meta_weights",
    "mxfp4_padding",
    "safetensors_weights",
    "weight_tensors",
]

Source = Literal["auto", "checkpoint", "transformers", "formula"]


def formula_weights(
    config: Mapping[str, Any] | ModelConfig,
    *,
    tensor_parallel_size: int = 1,
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> WeightEstimate:
    """Weights of one rank from per-family formulas over ``config.json``: the sum of
    :func:`memacct.model.weights.inventory.formula_tensors` (same arguments and errors)."""
    tensors = formula_tensors(
        config, tensor_parallel_size=tensor_parallel_size, mxfp4_pad=mxfp4_pad
    )
    quant = parse_quantization(config.root if isinstance(config, ModelConfig) else config)
    return WeightEstimate.of(
        tensors, "formula", quant.label if quant else None, tensor_parallel_size
    )


def mxfp4_padding(device_class: str) -> tuple[int, int]:
    """The (intermediate, hidden) alignment vLLM's MXFP4 MoE kernels pad expert weights to.

    ``hopper``: vLLM 0.11's Triton path on H100/H200 holds the expert intermediate
    dimension padded to 256 (measured from its "Model loading took" figures for gpt-oss-20b
    and -120b, docs/accuracy.md); ``blackwell``: FlashInfer pads both to 256; ``marlin``
    (GPUs without native FP4 support in older releases, Ampere/Ada): intermediate to 128,
    hidden to 256 (``vllm/model_executor/layers/quantization/mxfp4.py``).
    """
    return {"hopper": (256, 1), "blackwell": (256, 256), "marlin": (128, 256)}.get(
        device_class, (64, 1)
    )


def estimate_weights(
    model: Mapping[str, Any] | ModelConfig | str | os.PathLike[str] | TensorTable,
    *,
    tensor_parallel_size: int = 1,
    source: Source = "auto",
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> WeightEstimate:
    """Weights of one rank, from the best source available (see the module docstring).

    The sum of :func:`weight_tensors` with the same arguments.

    Args:
        model: a ``config.json`` dict (or its :class:`~memacct.model.config.ModelConfig`,
            already read), a checkpoint directory, or a checkpoint's tensor table
            (:class:`~memacct.model.sources.checkpoint.TensorTable`: safetensors headers
            read from the Hub, a GGUF file's tensors).
        tensor_parallel_size: ranks the model is split across.
        source: ``auto`` (checkpoint, else formulas), or one source by name.
            ``transformers`` is used only when asked: it is slower to import
            (about 2 s) and the formulas agree with it on every preset (tests).
        mxfp4_pad: MXFP4 expert padding (:func:`mxfp4_padding`).

    Raises:
        ConfigError: the source cannot be read, or lacks a size it needs.
        UnknownQuantizationError: the checkpoint's quantization method is unknown.
    """
    return _from_best_source(
        model, tensor_parallel_size, source, mxfp4_pad,
        table=table_weights, formula=formula_weights, meta=meta_weights,
    )  # fmt: skip


def weight_tensors(
    model: Mapping[str, Any] | str | os.PathLike[str] | TensorTable,
    *,
    tensor_parallel_size: int = 1,
    source: Source = "auto",
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> list[WeightTensor]:
    """Every weight tensor of one rank (role, shape, bytes), from the source
    :func:`estimate_weights` takes: the one inventory the offline estimate sums and
    the simulated engine allocates. Arguments and errors as :func:`estimate_weights`.

    Example::

        >>> from memacct.planner import load_model_preset
        >>> config = load_model_preset("gpt-oss-20b")
        >>> sum(t.nbytes for t in weight_tensors(config)) == estimate_weights(config).total_bytes
        True
    """
    return _from_best_source(
        model, tensor_parallel_size, source, mxfp4_pad,
        table=table_tensors, formula=formula_tensors, meta=meta_tensors,
    )  # fmt: skip


_T = TypeVar("_T")


def _from_best_source(
    model: Mapping[str, Any] | ModelConfig | str | os.PathLike[str] | TensorTable,
    tensor_parallel_size: int,
    source: Source,
    mxfp4_pad: tuple[int, int],
    *,
    table: Callable[..., _T],
    formula: Callable[..., _T],
    meta: Callable[..., _T],
) -> _T:
    """One choice of source for the estimate and the inventory: a checkpoint's tensor table,
    else the formulas, else (a size only transformers' defaults know) the meta device."""
    tp = tensor_parallel_size
    if isinstance(model, TensorTable) and source in ("auto", "checkpoint"):
        return table(model, tensor_parallel_size=tp)
    if isinstance(model, TensorTable):
        model = model.config
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if path.is_dir() and source in ("auto", "checkpoint") and checkpoint_files(path):
            check_int("tensor_parallel_size", tp)
            return table(checkpoint_table(path), tensor_parallel_size=tp)
        cfg_path = path / "config.json" if path.is_dir() else path
        config: Mapping[str, Any] = read_json_object(cfg_path, "config.json")
    else:
        config = model.root if isinstance(model, ModelConfig) else model
    if source == "checkpoint":
        raise ConfigError("source='checkpoint' needs a checkpoint directory with safetensors files")
    if source == "transformers":
        return meta(config, tensor_parallel_size=tp)
    try:
        # The formulas take the reading when the caller made one (a plan reads its model once).
        reading = model if isinstance(model, ModelConfig) else config
        return formula(reading, tensor_parallel_size=tp, mxfp4_pad=mxfp4_pad)
    except ConfigError as formula_error:
        if source == "formula":
            raise
        # A size the formulas need is missing from config.json (Gemma 3 leaves its
        # vocabulary to transformers' defaults): the meta-device model knows it.
        try:
            return meta(config, tensor_parallel_size=tp)
        except ConfigError:
            raise formula_error from None
