"""What each engine accepts, keyed by engine name: the releases memacct models, the block
sizes, the ``--kv-cache-dtype`` names and the device vendors, with the checks that refuse the
rest in one line naming what the engine takes.
"""

from __future__ import annotations

from memacct.errors import InvalidInputError

__all__ = [
    "BLOCK_SIZES",
    "ENGINE_VENDORS",
    "KV_CACHE_DTYPES",
    "MODELLED_RELEASES",
    "UNPLANNED_VENDORS",
    "check_block_size",
    "check_kv_cache_dtype_name",
    "check_release",
]


MODELLED_RELEASES: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "vllm": ((0, 8), (0, 33)),
    "vllm-ascend": ((0, 21), (0, 27)),
}
"""The releases memacct models per engine, oldest and newest ``(major, minor)``: vLLM's V1
engine (the default since 0.8.0; V0's start-up is not modelled) up to the rules of
``engines/vllm``; vllm-ascend's own releases (numbered after the vLLM each pins) in
:data:`memacct.engines.vllm_ascend.releases.PINS`. An engine not listed models its own
:attr:`Engine.version` only."""


BLOCK_SIZES: dict[str, tuple[int, ...]] = {
    "vllm": (1, 8, 16, 32, 64, 128, 256),
    "vllm-ascend": (1, 8, 16, 32, 64, 128, 256),
}
"""The block sizes an engine accepts where it restricts them: vLLM 0.33's ``BlockSize``
literal (``vllm/config/cache.py``; the engine may raise it further for hybrid models)."""


_VLLM_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")


KV_CACHE_DTYPES: dict[str, tuple[str, ...]] = {
    "vllm": _VLLM_KV_CACHE_DTYPES,
    "vllm-ascend": _VLLM_KV_CACHE_DTYPES,
}
"""The ``--kv-cache-dtype`` names an engine's argument parser takes, of those memacct sizes:
vLLM 0.33's ``CacheDType`` literal (``vllm/config/cache.py``), which vllm-ascend parses too.
memacct's own aliases (``bf16``, ``half``, ``int8``, ``float32`` ...) are refused there, as
``vllm serve`` refuses them. SGLang checks its own list
(:func:`memacct.engines.sglang.options.check_kv_cache_dtype`)."""


def check_kv_cache_dtype_name(engine: str, kv_cache_dtype: str) -> str:
    """``kv_cache_dtype`` if ``engine``'s ``--kv-cache-dtype`` takes it (:data:`KV_CACHE_DTYPES`).

    Raises:
        InvalidInputError: a name the engine refuses at start.
    """
    from memacct.model.geometry import kv_dtype_bytes

    allowed = KV_CACHE_DTYPES.get(engine)
    if allowed is None or kv_cache_dtype in allowed:
        return kv_cache_dtype
    kv_dtype_bytes(kv_cache_dtype)  # a name memacct does not know at all: that error first
    hint = (" (vLLM keeps a float32 KV cache only for a model served in float32, "
            "--dtype float32, which memacct does not plan)"
            if kv_cache_dtype.lower() in ("float32", "fp32", "float") else "")  # fmt: skip
    raise InvalidInputError(
        f"kv_cache_dtype {kv_cache_dtype!r} is not one {engine} accepts{hint}: give one "
        f"of {', '.join(allowed)} (vllm/config/cache.py, CacheDType)"
    )


ENGINE_VENDORS: dict[str, tuple[str, ...]] = {
    "vllm": ("nvidia", "amd"),
    "vllm-ascend": ("ascend",),
    "vllm-mindspore": ("ascend",),
    "sglang": ("nvidia", "amd"),
}
"""The device vendors (:attr:`memacct.devices.DeviceInfo.vendor`) each engine's model covers:
vLLM runs on Ascend only through the vllm-ascend plugin, which runs nowhere else; SGLang's
Ascend backend is not modelled. An engine not listed is not checked."""

UNPLANNED_VENDORS: dict[tuple[str, str], str] = {
    ("sglang", "ascend"): "SGLang's Ascend backend: its ModelSlim W8A8 layout, 128-token page "
                          "and NPU memory settings are not modelled yet",
}  # fmt: skip
"""(engine, vendor) pairs the engine runs on that memacct does not plan yet, with why
(docs/engines.md, "SGLang on Ascend")."""


def _release(text: str) -> tuple[int, int] | None:
    from memacct.engines.vllm.releases import parse_version

    return parse_version(text)


def check_release(engine: str, version: str | None) -> None:
    """Refuse a release of ``engine`` memacct does not model, naming the modelled ones.

    Raises:
        InvalidInputError: not a release number, or one outside the modelled range.
    """
    if version is None:
        return
    from memacct.engines import get_engine

    chosen = get_engine(engine)
    parsed = _release(version)
    if parsed is None:
        raise InvalidInputError(
            f"engine version {version!r} is not a release number: give e.g. 0.11.0"
        )
    span = MODELLED_RELEASES.get(engine)
    if span is None:
        if version.strip().lstrip("v") == chosen.version:
            return
        modelled = chosen.version
    else:
        if span[0] <= parsed <= span[1]:
            return
        modelled = f"{span[0][0]}.{span[0][1]} to {span[1][0]}.{span[1][1]}"
    if engine == "vllm-ascend":
        from memacct.engines.vllm_ascend.releases import pins_text

        modelled += f" ({pins_text()})"
    raise InvalidInputError(
        f"{engine} {version} is not a release memacct models: it models {engine} {modelled} "
        f"(give one of those with --engine-version, or leave it out for {chosen.version})"
    )


def check_block_size(engine: str, block_size: int) -> int:
    """``block_size`` if ``engine`` accepts it (:data:`BLOCK_SIZES`).

    Raises:
        InvalidInputError: a block size the engine refuses at start.
    """
    allowed = BLOCK_SIZES.get(engine)
    if allowed is not None and block_size not in allowed:
        raise InvalidInputError(
            f"block_size {block_size} is not one {engine} accepts: give one of "
            f"{', '.join(map(str, allowed))} (vllm/config/cache.py, BlockSize)"
        )
    return block_size
