"""Bytes of a quantized linear layer, from a checkpoint's ``quantization_config``.

:func:`parse_quantization` reads the ``quantization_config`` of a
``config.json`` into a :class:`QuantScheme`; :meth:`QuantScheme.linear_bytes`
gives the device bytes of one (per-rank) linear layer as the engine holds it:
the packed weight plus its scales, zero points and index tensors. Modules a
checkpoint leaves unquantized (``ignore``, ``modules_to_not_convert``,
embeddings, the LM head, routers) are sized in the model's dtype by
:mod:`memacct.model.weights.estimate`; :meth:`QuantScheme.skips` says which.

Methods and where their layouts come from are listed in ``docs/engines.md``
(start-up half). An unknown method raises :class:`UnknownQuantizationError`:
memacct never sizes a quantized checkpoint silently as bf16.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memacct.errors import ConfigError
from memacct.model.config import check_config_int

__all__ = [
    "KNOWN_METHODS",
    "QuantScheme",
    "UnknownQuantizationError",
    "parse_quantization",
]

FP32 = 4
FP16 = 2
_MAX_PARAMETER = 1 << 24  # bits, group sizes: far above any real one
FP8 = 1


class UnknownQuantizationError(ConfigError):
    """The checkpoint's ``quantization_config`` names a method memacct cannot size."""


KNOWN_METHODS = (
    "fp8",
    "fbgemm_fp8",
    "compressed-tensors",
    "modelopt",
    "modelopt_fp4",
    "mxfp4",
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "bitsandbytes",
)
"""The ``quant_method`` values :func:`parse_quantization` accepts."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class QuantScheme:
    """How the linear layers of a checkpoint are stored on the device.

    Attributes:
        method: the ``quant_method`` as the checkpoint spells it.
        weight_bits: bits per weight element.
        group_size: input elements per scale (``None``: per output channel
            or per tensor, see ``per_channel``).
        scale_bytes: bytes of one scale.
        zero_bits: bits of one zero point per group (0: symmetric).
        per_channel: one scale per output channel (``group_size`` None).
        block: FP8 block quantization ``(rows, cols)`` of one scale.
        tensor_scales: bytes of per-tensor scales held per linear layer.
        g_idx: an int32 group index per input element (GPTQ).
        experts_only: only MoE experts are quantized (MXFP4 checkpoints).
        skip: module-name patterns left in the model's dtype.
        label: a short human description (``"fp8 (per-channel)"``).
    """

    method: str
    weight_bits: float
    group_size: int | None = None
    scale_bytes: int = 0
    zero_bits: float = 0.0
    per_channel: bool = False
    block: tuple[int, int] | None = None
    tensor_scales: int = 0
    g_idx: bool = False
    experts_only: bool = False
    skip: tuple[str, ...] = field(default=())
    label: str = ""

    def skips(self, module: str) -> bool:
        """Whether the module ``module`` (``model.layers.0.self_attn.q_proj``) stays unquantized."""
        for pattern in self.skip:
            if fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*"):
                return True
            if pattern.startswith("re:") and re.search(pattern[3:], module):
                return True
            # Plain names match any module path that contains them as a component.
            if "*" not in pattern and not pattern.startswith("re:"):
                if module == pattern or module.endswith("." + pattern) or f".{pattern}." in module:
                    return True
                if module.startswith(pattern + "."):
                    return True
        return False

    def linear_bytes(self, out_features: int, in_features: int) -> int:
        """Device bytes of one ``out_features x in_features`` linear layer (this rank's shard)."""
        elems = out_features * in_features
        total = _ceil_div(int(elems * self.weight_bits), 8)
        if self.block is not None:
            rows, cols = self.block
            total += _ceil_div(out_features, rows) * _ceil_div(in_features, cols) * self.scale_bytes
        elif self.group_size:
            groups = _ceil_div(in_features, self.group_size) * out_features
            total += groups * self.scale_bytes
            total += _ceil_div(int(groups * self.zero_bits), 8)
        elif self.per_channel:
            total += out_features * self.scale_bytes
        if self.g_idx:
            total += in_features * 4
        return total + self.tensor_scales

    def experts_bytes(
        self, num_experts: int, out_features: int, in_features: int, *, mxfp4_pad: tuple[int, int]
    ) -> int:
        """Bytes of one fused expert weight ``num_experts x out x in`` (this rank's shard).

        ``mxfp4_pad`` rounds (out, in) up for MXFP4 kernels: the engine pads
        the expert matrices to its kernel's alignment before loading.
        """
        if self.method == "mxfp4":
            out_p = _ceil_div(out_features, mxfp4_pad[0]) * mxfp4_pad[0]
            in_p = _ceil_div(in_features, mxfp4_pad[1]) * mxfp4_pad[1]
            per = out_p * in_p // 2 + out_p * (in_p // 32)  # E2M1 pairs + one E8M0 scale per 32
            return num_experts * per
        return num_experts * self.linear_bytes(out_features, in_features)


def _method(quant: Mapping[str, Any]) -> str:
    method = quant.get("quant_method") or quant.get("quantization") or ""
    if not isinstance(method, str):
        raise ConfigError(f"quantization_config.quant_method must be a string, got {method!r}")
    return method.strip().lower()


def _skip_list(quant: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        value = quant.get(key)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, Sequence):
            out.extend(str(v) for v in value if isinstance(v, str))
    return tuple(out)


def _int(quant: Mapping[str, Any], key: str, default: int) -> int:
    value = quant.get(key)
    if value is None:
        return default
    # -1 is a group size meaning "per channel" (AWQ, GPTQ).
    return check_config_int("quantization_config", key, value, low=-1, high=_MAX_PARAMETER)


def _block_fp8(method: str, block: Sequence[Any], skip: tuple[str, ...], label: str) -> QuantScheme:
    """FP8 weights with one FP32 scale per ``block[0] x block[1]`` tile (DeepSeek-V3's layout)."""
    return QuantScheme(
        method, 8, block=(int(block[0]), int(block[1])), scale_bytes=FP32, skip=skip, label=label
    )


def _grouped_int(
    method: str,
    bits: int,
    group: int,
    *,
    zero_bits: int,
    skip: tuple[str, ...],
    label: str,
    g_idx: bool = False,
) -> QuantScheme:
    """Integer weights with an FP16 scale per ``group`` inputs (per output channel when
    ``group <= 0``), as AWQ and GPTQ store them."""
    return QuantScheme(
        method,
        bits,
        group_size=group if group > 0 else None,
        per_channel=group <= 0,
        scale_bytes=FP16,
        zero_bits=zero_bits,
        g_idx=g_idx,
        skip=skip,
        label=label,
    )


def _compressed_tensors(quant: Mapping[str, Any]) -> QuantScheme:
    groups = quant.get("config_groups")
    skip = _skip_list(quant, "ignore")
    if not isinstance(groups, Mapping) or not groups:
        raise UnknownQuantizationError(
            "compressed-tensors quantization_config has no config_groups: memacct cannot tell "
            "the weight format; add the checkpoint's config_groups or give --weights-memory"
        )
    weights = None
    for group in groups.values():
        if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping):
            weights = group["weights"]
            break
    if weights is None:
        raise UnknownQuantizationError(
            "compressed-tensors config_groups carry no weights scheme: memacct cannot size them"
        )
    bits = _int(weights, "num_bits", 8)
    kind = str(weights.get("type", "int"))
    strategy = str(weights.get("strategy", "tensor"))
    group_size = weights.get("group_size")
    symmetric = bool(weights.get("symmetric", True))
    block = weights.get("block_structure")
    if kind == "float" and bits == 4:
        # NVFP4: FP8 scale per 16 elements plus a global FP32 scale.
        return QuantScheme(
            "compressed-tensors",
            4,
            group_size=int(group_size or 16),
            scale_bytes=FP8,
            tensor_scales=2 * FP32,
            skip=skip,
            label="compressed-tensors nvfp4",
        )
    if kind == "float":
        if strategy == "block" and isinstance(block, Sequence) and len(block) == 2:
            return _block_fp8("compressed-tensors", block, skip, "compressed-tensors fp8 (block)")
        return QuantScheme(
            "compressed-tensors",
            bits,
            per_channel=strategy == "channel",
            scale_bytes=FP32,
            tensor_scales=FP32 * (2 if strategy != "channel" else 0),
            skip=skip,
            label=f"compressed-tensors fp8 ({strategy})",
        )
    if strategy == "group" and isinstance(group_size, int) and group_size > 0:
        actorder = weights.get("actorder")
        return QuantScheme(
            "compressed-tensors",
            bits,
            group_size=group_size,
            scale_bytes=FP16,
            zero_bits=0 if symmetric else bits,
            g_idx=actorder == "group",
            skip=skip,
            label=f"compressed-tensors int{bits} (group {group_size})",
        )
    return QuantScheme(
        "compressed-tensors",
        bits,
        per_channel=strategy == "channel",
        scale_bytes=FP32,
        zero_bits=0 if symmetric else bits,
        tensor_scales=0 if strategy == "channel" else FP32,
        skip=skip,
        label=f"compressed-tensors int{bits} ({strategy})",
    )


def parse_quantization(config: Mapping[str, Any]) -> QuantScheme | None:
    """The quantization scheme of a ``config.json`` (``None``: not quantized).

    Reads ``quantization_config`` (or ``text_config.quantization_config``).

    Raises:
        UnknownQuantizationError: the method is not one of :data:`KNOWN_METHODS`,
            or its parameters are not ones memacct can size.
        ConfigError: a parameter has the wrong type.
    """
    quant = config.get("quantization_config")
    text = config.get("text_config")
    if quant is None and isinstance(text, Mapping):
        quant = text.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, Mapping):
        raise ConfigError(f"quantization_config must be an object, got {type(quant).__name__}")
    method = _method(quant)
    reader = _READERS.get(method)
    if reader is not None:
        return reader(method, quant)
    raise UnknownQuantizationError(
        f"quantization method {method!r} is not one memacct can size ({', '.join(KNOWN_METHODS)}): "
        "give the checkpoint itself (--model with its directory or Hub id) so memacct reads "
        "each tensor's bytes from its safetensors headers, or plan from a profile measured "
        "on the device (--profile)"
    )


def _fp8(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """vLLM's ``fp8``: per-tensor scales, or DeepSeek-style blocks (``weight_block_size``)."""
    block = quant.get("weight_block_size")
    skip = _skip_list(quant, "ignored_layers", "modules_to_not_convert")
    if isinstance(block, Sequence) and len(block) == 2:
        return _block_fp8("fp8", block, skip, f"fp8 (block {block[0]}x{block[1]})")
    return QuantScheme("fp8", 8, tensor_scales=2 * FP32, skip=skip, label="fp8 (per-tensor)")


def _fbgemm_fp8(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """FBGEMM's fp8: one scale per output channel."""
    return QuantScheme(
        "fbgemm_fp8",
        8,
        per_channel=True,
        scale_bytes=FP32,
        tensor_scales=FP32,
        skip=_skip_list(quant, "modules_to_not_convert"),
        label="fbgemm fp8 (per-channel)",
    )


def _modelopt(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """NVIDIA ModelOpt: NVFP4 (16-weight groups, fp8 scales) or FP8."""
    algo = str(quant.get("quant_algo") or quant.get("quantization", {}).get("quant_algo", ""))
    skip = _skip_list(quant, "exclude_modules", "ignore")
    if "fp4" in algo.lower() or method == "modelopt_fp4":
        return QuantScheme(
            method,
            4,
            group_size=_int(quant, "group_size", 16),
            scale_bytes=FP8,
            tensor_scales=2 * FP32,
            skip=skip,
            label="modelopt nvfp4",
        )
    if algo.upper() == "FP8":
        return QuantScheme(method, 8, tensor_scales=2 * FP32, skip=skip, label="modelopt fp8")
    raise UnknownQuantizationError(
        f"modelopt quant_algo {algo!r} is not one memacct can size (FP8, NVFP4)"
    )


def _mxfp4(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """OCP MX fp4 of the experts (gpt-oss): 32-weight groups, one byte of scale each."""
    return QuantScheme(
        "mxfp4",
        4,
        group_size=32,
        scale_bytes=1,
        experts_only=True,
        skip=_skip_list(quant, "modules_to_not_convert"),
        label="mxfp4 (experts)",
    )


def _awq(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """AWQ: grouped integers, with zero points unless ``zero_point`` is false."""
    bits = _int(quant, "bits", _int(quant, "w_bit", 4))
    group = _int(quant, "group_size", _int(quant, "q_group_size", 128))
    zero = bool(quant.get("zero_point", True))
    return _grouped_int(
        method,
        bits,
        group,
        zero_bits=bits if zero else 0,
        skip=_skip_list(quant, "modules_to_not_convert"),
        label=f"awq int{bits} (group {group})",
    )


def _gptq(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """GPTQ: grouped integers with zero points and a ``g_idx`` per input channel."""
    bits = _int(quant, "bits", 4)
    group = _int(quant, "group_size", 128)
    sym = bool(quant.get("sym", True))
    return _grouped_int(
        method,
        bits,
        group,
        zero_bits=bits,
        g_idx=True,
        skip=_skip_list(quant, "modules_to_not_convert", "dynamic"),
        label=f"gptq int{bits} (group {group}{', sym' if sym else ''})",
    )


def _bitsandbytes(method: str, quant: Mapping[str, Any]) -> QuantScheme:
    """bitsandbytes: NF4 (``load_in_4bit``) or LLM.int8 (``load_in_8bit``)."""
    skip = _skip_list(quant, "llm_int8_skip_modules")
    if quant.get("load_in_4bit") or quant.get("_load_in_4bit"):
        double = bool(quant.get("bnb_4bit_use_double_quant", False))
        # One absmax per 64 weights: FP32, or uint8 plus FP32 per 256 absmax when nested.
        return QuantScheme(
            "bitsandbytes",
            4,
            group_size=64,
            scale_bytes=1 if double else FP32,
            skip=skip,
            label="bitsandbytes nf4",
        )
    if quant.get("load_in_8bit") or quant.get("_load_in_8bit"):
        return QuantScheme(
            "bitsandbytes",
            8,
            per_channel=True,
            scale_bytes=FP32,
            skip=skip,
            label="bitsandbytes int8",
        )
    raise UnknownQuantizationError(
        "bitsandbytes quantization_config sets neither load_in_4bit nor load_in_8bit"
    )


_READERS: dict[str, Callable[[str, Mapping[str, Any]], QuantScheme]] = {
    "fp8": _fp8,
    "fbgemm_fp8": _fbgemm_fp8,
    "compressed-tensors": lambda method, quant: _compressed_tensors(quant),
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
    "mxfp4": _mxfp4,
    "awq": _awq,
    "awq_marlin": _awq,
    "gptq": _gptq,
    "gptq_marlin": _gptq,
    "bitsandbytes": _bitsandbytes,
}
"""The scheme reader of each method :func:`parse_quantization` sizes."""
