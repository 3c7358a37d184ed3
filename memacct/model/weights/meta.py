"""Weights of one rank from the model ``transformers`` builds on the ``meta`` device.

No memory and no weights: each parameter is sized by its role and shape. Needs
the ``memacct[hf]`` extra, imported inside :func:`meta_weights`, never at import time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from memacct.checks import check_int
from memacct.errors import ConfigError
from memacct.model.weights.quant import QuantScheme, parse_quantization
from memacct.model.weights.rules import (
    COLUMN_PARALLEL,
    WeightEstimate,
    WeightTensor,
    ceil_div,
    config_kv_heads,
    dtype_bytes,
    shard_elements,
    tensor_role,
)

__all__ = ["meta_tensors", "meta_weights"]


def meta_weights(config: Mapping[str, Any], *, tensor_parallel_size: int = 1) -> WeightEstimate:
    """Weights of one rank from the model built by ``transformers`` on the ``meta`` device.

    Needs the ``memacct[hf]`` extra (``transformers`` and ``torch``), imported here, never at
    import time. Quantized linear layers are sized from their shapes by the checkpoint's
    quantization scheme. The model's parameter list is kept per config in the user's cache
    directory (:mod:`memacct.model.weights.meta_cache`): a config built before answers in
    milliseconds, without importing torch or transformers.

    Raises:
        ConfigError: ``transformers`` is missing or does not know the architecture.
    """
    tp = check_int("tensor_parallel_size", tensor_parallel_size)
    return _count(config, tp)


def _count(config: Mapping[str, Any], tp: int) -> WeightEstimate:
    quant = parse_quantization(config)
    tensors = meta_tensors(config, tensor_parallel_size=tp)
    return WeightEstimate.of(tensors, "transformers", quant.label if quant else None, tp)


def meta_tensors(config: Mapping[str, Any], *, tensor_parallel_size: int = 1) -> list[WeightTensor]:
    """Every weight tensor of one rank of the model ``transformers`` builds on the meta device,
    in its parameters' order (a tied LM head left out); arguments and errors as
    :func:`meta_weights`. The model's parameter list is built once per config per process."""
    tp = check_int("tensor_parallel_size", tensor_parallel_size)
    # The quantization changes no parameter's shape: one model serves every scheme.
    unquantized = {k: v for k, v in config.items() if k != "quantization_config"}
    params, tied = _parameters(json.dumps(unquantized, sort_keys=True, default=str))
    quant = parse_quantization(config)
    dt = dtype_bytes(config)
    kv = config_kv_heads(config)
    tensors: list[WeightTensor] = []
    for name, shape in params:
        role = tensor_role(name)
        if role == "lm_head" and tied:
            continue
        elems = shard_elements(name, shape, tp, kv)
        nbytes = elems * dt
        module = name.rsplit(".", 1)[0]
        fused_expert = role == "experts" and len(shape) == 3
        if quant is not None and (name.endswith("weight") or fused_expert) and not quant.skips(
            module
        ):
            if role == "experts" and len(shape) == 3:
                nbytes = _quantized_experts(quant, name, shape, tp)
            elif role in ("attention", "mlp") and len(shape) == 2 and not quant.experts_only:
                out_f, in_f = shape
                if COLUMN_PARALLEL.search(name.lower()):
                    out_f = ceil_div(out_f, tp)
                else:
                    in_f = ceil_div(in_f, tp)
                nbytes = quant.linear_bytes(out_f, in_f)
        tensors.append(WeightTensor(name, role, shape, nbytes))
    return tensors


@lru_cache(maxsize=8)
def _parameters(config_json: str) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], bool]:
    """The (name, shape) of every parameter of the meta-device model, and whether it ties its
    LM head to the embedding; from the user's cache when this config was built before."""
    from memacct.model.weights.meta_cache import cached_parameters

    return cached_parameters(config_json, lambda: _build_parameters(config_json))


def _build_parameters(config_json: str) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], bool]:
    config = json.loads(config_json)
    try:
        import torch
        import transformers
    except ImportError as exc:
        from memacct.plugin import extra_hint

        raise ConfigError(
            f"sizing from the architecture needs transformers ({exc.name} is missing): "
            f"{extra_hint('hf')}"
        ) from None
    cfg_dict = dict(config)
    model_type = cfg_dict.get("model_type")
    try:
        hf_config = transformers.AutoConfig.for_model(
            str(model_type), **{k: v for k, v in cfg_dict.items() if k != "model_type"}
        )
        causal_lm: Any = transformers.AutoModelForCausalLM
        any_model: Any = transformers.AutoModel
        with torch.device("meta"):
            try:
                model = causal_lm.from_config(hf_config)
            except ValueError:
                model = any_model.from_config(hf_config)
    except Exception as exc:  # transformers raises many kinds for an unknown architecture
        raise ConfigError(
            f"transformers cannot build model_type {model_type!r} ({type(exc).__name__}: {exc}); "
            "memacct falls back to its own formulas"
        ) from None
    params = tuple(
        (name, tuple(int(d) for d in param.shape)) for name, param in model.named_parameters()
    )
    return params, bool(getattr(model.config, "tie_word_embeddings", False))


def _quantized_experts(quant: QuantScheme, name: str, shape: tuple[int, ...], tp: int) -> int:
    experts, a, b = shape
    # transformers keeps fused experts as (experts, in, out); tensor parallelism splits the
    # intermediate dimension, the larger one of gate_up and the smaller one of down.
    inter_first = "down" in name
    out_f, in_f = (b, a)
    if inter_first:
        in_f = ceil_div(in_f, tp)
    else:
        out_f = ceil_div(out_f, tp)
    return quant.experts_bytes(experts, out_f, in_f, mxfp4_pad=(1, 1))
