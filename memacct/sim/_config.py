"""The allocator's settings: ``PYTORCH_CUDA_ALLOC_CONF`` parsed and checked, and the rounding
rule of ``roundup_power2_divisions`` (torch's ``CUDAAllocatorConfig``,
c10/cuda/CUDAAllocatorConfig.cpp, and its ``round_size``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple, TypeVar

from memacct.errors import InvalidInputError
from memacct.sim._blocks import LARGE_BUFFER, MIN_BLOCK_SIZE, PrivatePool
from memacct.sim._errors import InvalidTypeError
from memacct.sim._memory import DeviceMemory
from memacct.units import MiB

__all__ = [
    "MAX_SPLIT_FLOOR_MB",
    "NO_LIMIT",
    "AllocatorSettings",
    "Settings",
    "check_divisions",
    "check_gc_threshold",
    "check_max_split",
    "parse_settings",
    "roundup",
    "split_fits",
]

MAX_SPLIT_FLOOR_MB = LARGE_BUFFER // MiB
"""``max_split_size_mb`` must be larger than this (torch's check)."""
_T = TypeVar("_T")

NO_LIMIT = 1 << 127
"""``max_split_size`` when unset (torch's ``SIZE_MAX``)."""
KNOWN = frozenset({
    "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
    "expandable_segments",
})
"""The keys :func:`parse_settings` accepts."""


class Settings(NamedTuple):
    """The settings one ``configure`` call leaves (every key not named at its default)."""

    max_split: int
    """Bytes from which a block is never split (:data:`NO_LIMIT` when unset)."""
    gc_threshold: float
    """``garbage_collection_threshold`` (0.0: off)."""
    divisions: int
    """``roundup_power2_divisions`` as one number (0: off or per size)."""
    buckets: dict[int, int]
    """Divisions by log2 of the size in MiB (``-1``: above the last interval); empty: one number."""


def parse_settings(settings: str, *, expandable: bool, preset: str) -> Settings:
    """``settings`` as ``PYTORCH_CUDA_ALLOC_CONF`` spells them, for an allocator of ``preset``.

    Raises:
        InvalidInputError: an unknown key, an invalid value, or ``expandable_segments``
            other than ``expandable`` (named, with what to change).
    """
    values: dict[str, str] = {}
    for item in _split_settings(settings):
        key, sep, value = item.partition(":")
        key = key.strip()
        if not sep or not key:
            raise InvalidInputError(
                f"allocator setting {item!r} is not key:value; e.g. max_split_size_mb:128"
            )
        values[key] = value.strip()
    unknown = sorted(set(values) - KNOWN)
    if unknown:
        raise InvalidInputError(
            f"Unrecognized allocator setting {unknown[0]!r}; known: {', '.join(sorted(KNOWN))}"
        )
    if "expandable_segments" in values:
        wanted = values["expandable_segments"] == "True"
        if wanted != expandable:
            raise InvalidInputError(
                f"expandable_segments:{values['expandable_segments']} does not match the "
                f"{preset} preset; choose the preset with(out) -expandable instead"
            )
    max_split = check_max_split(
        _int_setting(values, "max_split_size_mb") if "max_split_size_mb" in values else None
    )
    gc_threshold = check_gc_threshold(
        _float_setting(values, "garbage_collection_threshold")
        if "garbage_collection_threshold" in values else None
    )
    divisions = 0
    buckets: dict[int, int] = {}
    text = values.get("roundup_power2_divisions")
    if text is not None and text.startswith("["):
        buckets = _parse_buckets(text)
    elif text is not None:
        divisions = check_divisions(_int_setting(values, "roundup_power2_divisions"))
    return Settings(max_split, gc_threshold, divisions, buckets)


def split_fits(block_size: int, rounded: int, max_split: int) -> bool:
    """torch's ``max_split_size`` rule: may a cached block of ``block_size`` bytes serve a
    request of ``rounded`` bytes? An oversize block serves only requests within
    ``LARGE_BUFFER`` (20 MiB) of its size, and never a request below ``max_split``."""
    if rounded < max_split and block_size >= max_split:
        return False
    return not (rounded >= max_split and block_size >= rounded + LARGE_BUFFER)


def roundup(n: int, rounded: int, divisions: int, buckets: dict[int, int]) -> int:
    """Block size of a (padded) request of ``n`` bytes under ``roundup_power2_divisions``;
    ``rounded`` is its size rounded to 512 bytes (torch's ``round_size``)."""
    if buckets:
        bucket = max(0, n.bit_length() - 1 - 20)  # log2 of the size in MiB
        divisions = buckets.get(bucket, buckets.get(-1, 0))
    if divisions > 1:
        return _roundup_power2(n, divisions, rounded)
    return rounded


def check_max_split(value: object) -> int:
    if value is None:
        return NO_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value <= MAX_SPLIT_FLOOR_MB:
        raise InvalidInputError(
            f"max_split_size_mb too small, must be > {MAX_SPLIT_FLOOR_MB} (an int of MiB), "
            f"got {value!r}; leave it unset for no limit"
        )
    return value * MiB


def check_divisions(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (
        value > 1 and value & (value - 1)
    ):
        raise InvalidInputError(
            f"roundup_power2_divisions must be a power of 2 (or 0/1 for off), got {value!r}"
        )
    return value


def check_gc_threshold(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise InvalidInputError(
            f"garbage_collection_threshold must be a number strictly between 0.0 and 1.0, "
            f"got {value!r}"
        )
    return float(value)


def _split_settings(text: str) -> list[str]:
    """Split ``a:1,b:[x:1,y:2]`` at the commas outside brackets."""
    items: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        items.append(current)
    return [item for item in items if item.strip()]


def _int_setting(values: dict[str, str], key: str) -> int:
    return _setting(values, key, int, "an int")


def _float_setting(values: dict[str, str], key: str) -> float:
    return _setting(values, key, float, "a number")


def _setting(values: dict[str, str], key: str, parse: Callable[[str], _T], what: str) -> _T:
    """``values[key]`` read by ``parse``, or an error naming the key, the value and ``what``."""
    try:
        return parse(values[key])
    except ValueError:
        raise InvalidInputError(
            f"allocator setting {key} must be {what}, got {values[key]!r}"
        ) from None


def _parse_buckets(text: str) -> dict[int, int]:
    """``[64:8,128:2,>:1]`` -> divisions by log2(size in MiB); ``-1`` for ``>``."""
    buckets: dict[int, int] = {}
    last = 0
    for item in text.strip("[]").split(","):
        key, _, value = item.partition(":")
        divisions = check_divisions(int(value))
        if key.strip() == ">":
            buckets[-1] = divisions
            continue
        mib = int(key)
        if mib <= 0 or mib & (mib - 1):
            raise InvalidInputError(
                f"roundup_power2_divisions interval {mib} MiB must be a power of 2"
            )
        bucket = mib.bit_length() - 1
        for b in range(last, bucket + 1):
            buckets.setdefault(b, divisions)
        last = bucket + 1
    if -1 in buckets:
        for b in range(last, 40):
            buckets.setdefault(b, buckets[-1])
    return buckets


def _roundup_power2(size: int, divisions: int, rounded: int) -> int:
    """torch's ``roundup_power2_next_division`` for sizes above ``512 x divisions``."""
    if size <= MIN_BLOCK_SIZE * divisions:
        return rounded
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    base = size & ~(step - 1)
    return size if base == size else base + step


class AllocatorSettings:
    """The settings of an allocator: ``PYTORCH_CUDA_ALLOC_CONF`` (:meth:`configure`) and the
    memory fraction, and whether they send requests down the slow path.

    A base of :class:`~memacct.sim._core.CachingAllocator`, which reads the settings as
    plain attributes on its hot path.
    """

    name: ClassVar[str]
    _pad: ClassVar[int]
    _refit: ClassVar[bool]
    _device: DeviceMemory
    _capture: PrivatePool | None

    def _init_settings(
        self, max_split_size_mb: object, roundup_power2_divisions: object,
        garbage_collection_threshold: object,
    ) -> None:
        self._max_split = check_max_split(max_split_size_mb)
        self._divisions = check_divisions(roundup_power2_divisions)
        self._gc_threshold = check_gc_threshold(garbage_collection_threshold)
        self._division_buckets: dict[int, int] = {}
        self._slow_rounding = self._divisions > 1
        self._allowed: int | None = None
        self._slow = self._slow_rounding
        """Requests take the slow path (rounding, a private pool in use, garbage collection)."""
        self._fraction = 1.0

    def round_size(self, size: int) -> int:
        """The block size a request of ``size`` bytes (> 0) needs before any split rule."""
        rounded = (size + self._pad + MIN_BLOCK_SIZE - 1) & -MIN_BLOCK_SIZE
        if self._slow_rounding:
            return self._roundup(size, rounded)
        return rounded

    def configure(self, settings: str) -> None:
        """Apply allocator settings as ``PYTORCH_CUDA_ALLOC_CONF`` spells them.

        Like ``torch.cuda.memory._set_allocator_settings``, every call starts from
        the defaults: keys not named are reset. Keys: ``max_split_size_mb``,
        ``roundup_power2_divisions`` (``4`` or ``[64:8,128:2,>:1]``, sizes in MiB),
        ``garbage_collection_threshold``, ``expandable_segments`` (must match the
        preset).

        Raises:
            InvalidInputError: an unknown key or an invalid value (named).
        """
        chosen = parse_settings(settings, expandable=self._refit is True, preset=self.name)
        self._max_split = chosen.max_split
        self._gc_threshold = chosen.gc_threshold
        self._divisions = chosen.divisions
        self._division_buckets = chosen.buckets
        self._slow_rounding = self._divisions > 1 or bool(self._division_buckets)
        self._set_slow()

    def _roundup(self, size: int, rounded: int) -> int:
        """Rounding under ``roundup_power2_divisions`` (torch's ``round_size``)."""
        return roundup(size + self._pad, rounded, self._divisions, self._division_buckets)

    def set_memory_fraction(self, fraction: float) -> None:
        """Cap this allocator's reservation at ``fraction`` of the device (``0.0``-``1.0``).

        Raises:
            InvalidInputError: ``fraction`` is not a float in [0, 1] (torch's
                ``set_per_process_memory_fraction`` checks).
        """
        if not isinstance(fraction, float):
            raise InvalidTypeError(
                f"Invalid type for fraction argument, must be float, got {fraction!r}: "
                "pass e.g. 0.5"
            )
        if not 0.0 <= fraction <= 1.0:
            raise InvalidInputError(
                f"Invalid fraction value: {fraction}. Allowed range: 0~1; pass a fraction "
                "of the device between 0 and 1"
            )
        self._allowed = int(fraction * self._device.total)
        self._set_slow()
        self._fraction = fraction

    @property
    def memory_fraction(self) -> float:
        """The cap set by :meth:`set_memory_fraction` (1.0 when unset)."""
        return self._fraction

    def _gc_active(self) -> bool:
        return bool(self._gc_threshold) and self._allowed is not None

    def _set_slow(self) -> None:
        self._slow = self._slow_rounding or self._capture is not None or self._gc_active()
