"""What an engine can load on a device: the one check an offline plan consults before sizing.

A plan of weights the engine cannot load on the device is a wrong number, not an estimate:
it must be refused before it is made. :func:`check_loadable` asks the device's capability
table (:class:`memacct.devices.DeviceInfo`) and the engine's list of loaders, for every
quantization a plan names (the checkpoint's ``quantization_config``, ``--quantization``, a
GGUF file):

- FP8 weights need a device with :attr:`~memacct.devices.DeviceInfo.fp8_weights` (vLLM
  ``docs/features/quantization/fp8.md``: FP8 compute from SM 8.9, weight-only FP8 Marlin from
  SM 8.0; Turing and Volta have neither; Ascend 910 parts have no FP8 type);
- vllm-ascend loads only the methods of its platform's ``supported_quantization``
  (vllm-ascend ``vllm_ascend/platform.py``): ``ascend`` (ModelSlim), ``compressed-tensors``,
  ``fp8`` / ``deepseek_v4_fp8`` and the MXFP8 loaders; AWQ, GPTQ, MXFP4, bitsandbytes and
  GGUF are not among them, so vLLM's engine refuses them at start-up;
- vLLM's ROCm build runs only its own list (:func:`memacct.devices.check_quantization`).

Sources in ``docs/devices.md`` and ``docs/engines.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

from memacct.devices import DeviceInfo, check_quantization
from memacct.errors import InvalidInputError

__all__ = ["ASCEND_QUANTIZATIONS", "FP8_METHODS", "check_loadable", "fp8_weights"]

ASCEND_QUANTIZATIONS = (
    "ascend", "compressed-tensors", "fp8", "deepseek_v4_fp8", "modelopt_mxfp8", "mxfp8",
)  # fmt: skip
"""vllm-ascend's ``NPUPlatform.supported_quantization`` (``vllm_ascend/platform.py``)."""

FP8_METHODS = ("fp8", "fbgemm_fp8", "ptpc_fp8", "deepseek_v4_fp8", "fp8_per_tensor",
               "fp8_per_block", "fp8_per_channel")  # fmt: skip
"""``quant_method`` / ``--quantization`` names whose linear weights are stored in FP8."""


def fp8_weights(method: object) -> bool:
    """Whether a quantization (a ``--quantization`` name or a ``quantization_config``)
    stores the linear weights in FP8: the FP8 methods, ModelOpt's ``FP8`` algorithm and a
    compressed-tensors scheme whose weights are 8-bit floats."""
    if not isinstance(method, Mapping):
        return isinstance(method, str) and method.lower() in FP8_METHODS
    name = str(method.get("quant_method") or "").lower()
    if name in FP8_METHODS:
        return True
    if name == "modelopt":
        algo = method.get("quant_algo") or (method.get("quantization") or {}).get("quant_algo")
        return str(algo or "").upper() == "FP8"
    if name == "compressed-tensors":
        groups = method.get("config_groups")
        for group in (groups.values() if isinstance(groups, Mapping) else ()):
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and weights.get("type") == "float" \
                    and weights.get("num_bits", 8) == 8:
                return True
    return False


def _name(method: object) -> str:
    given = method.get("quant_method") if isinstance(method, Mapping) else method
    return str(given).lower() if isinstance(given, str) and given else ""


def check_loadable(info: DeviceInfo | None, engine: str, *methods: object) -> None:
    """Refuse a quantization the engine cannot load on the device (one line: the method,
    the device or engine, and what runs there). ``methods``: names, ``quantization_config``
    mappings or ``None`` (skipped). ``info`` ``None``: a device of no preset (a size),
    whose capabilities are unknown, is not checked.

    Raises:
        InvalidInputError: the first method that cannot load.
    """
    if info is None:
        return
    check_quantization(info, engine, *methods)
    given = [m for m in methods if _name(m)]
    for method in given:
        name = _name(method)
        if engine == "vllm-ascend" and name not in ASCEND_QUANTIZATIONS:
            raise InvalidInputError(
                f"{name} quantization: vllm-ascend does not load it (its platform supports "
                f"{', '.join(ASCEND_QUANTIZATIONS)}): plan a ModelSlim or compressed-tensors "
                "checkpoint of the model, or the unquantized one"
            )
        if fp8_weights(method) and not info.fp8_weights:
            raise InvalidInputError(
                f"{name} quantization stores the weights in FP8, which {engine} cannot "
                f"run on the {info.label}{_why(info)}: plan the unquantized checkpoint (or an "
                "AWQ/GPTQ int4 one), or a device that runs FP8 (NVIDIA Ampere or newer)"
            )


def _why(info: DeviceInfo) -> str:
    if info.compute_capability is not None:
        major, minor = info.compute_capability
        return (f" (compute capability {major}.{minor}; FP8 needs 8.0 for weight-only "
                "Marlin, 8.9 for FP8 compute)")
    return ""
