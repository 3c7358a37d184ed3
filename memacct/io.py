"""Reading and writing files: the one module every reader and writer of memacct goes through.

Three rules, kept in one place so no caller gets them wrong:

* **Bounded reads.** A file is read up to a limit (:data:`MAX_FILE_BYTES` by
  default) and refused beyond it, so a wrong path to a huge file never
  exhausts memory.
* **Strict JSON.** ``NaN``/``Infinity`` are refused (they are not JSON and
  break every byte count they reach), and so is nesting deeper than
  :data:`MAX_JSON_DEPTH` (no real config nests that deep; Python's parser
  would otherwise die with ``RecursionError``).
* **Atomic writes.** Data goes to a fresh temporary file created exclusively
  (``mkstemp``: unpredictable name, ``O_EXCL``, never following a planted
  link) in the target's directory, is flushed and ``fsync``-ed, then renamed
  over the target. A full disk, a crash or a concurrent writer leaves either
  the old file or a complete new one, never half of one.

Every failure is a :class:`~memacct.errors.ConfigError` naming the path and
what to change.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError
from memacct.units import MiB, format_size

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "atomic_write_bytes",
    "atomic_write_text",
    "loads_json",
    "loads_json_object",
    "read_bytes_bounded",
    "read_json_object",
    "read_prefix",
    "read_text",
    "user_cache_dir",
]

MAX_FILE_BYTES = 16 * MiB
"""Largest file memacct reads by default: far above any config, profile, plan or scenario."""

MAX_JSON_DEPTH = 64
"""Deepest JSON nesting accepted (a model config nests 3-4 levels)."""


def user_cache_dir(*parts: str) -> Path | None:
    """memacct's cache directory (``parts`` below it), or ``None`` when caching is off.

    ``MEMACCT_CACHE_DIR`` if set (an empty value or ``off`` turns caching off), else
    ``$XDG_CACHE_HOME/memacct``, else ``~/.cache/memacct``. Nothing is created here: a
    writer makes the directory it needs (``atomic_write_bytes(..., make_parents=True)``).
    """
    override = os.environ.get("MEMACCT_CACHE_DIR")
    if override is not None:
        if override.strip() in ("", "off", "0"):
            return None
        base = Path(override).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "memacct"
    return base.joinpath(*parts)


def _describe(path: Path) -> str:
    return repr(str(path))


def read_bytes_bounded(
    path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_BYTES
) -> bytes:
    """Read a regular file of at most ``limit`` bytes.

    Args:
        path: the file.
        what: what the file should be (``"config.json"``, ``"profile"``), for messages.
        limit: the largest size accepted, in bytes.

    Raises:
        ConfigError: missing, not a regular file, larger than ``limit``, or unreadable.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{what}: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{what} {_describe(p)} does not exist: check the path")
    if not p.is_file():
        kind = "a directory" if p.is_dir() else "not a regular file"
        raise ConfigError(f"{what} {_describe(p)} is {kind}: give the path of a file")
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {_describe(p)}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ConfigError(
            f"{what} {_describe(p)} is larger than {format_size(limit)} ({limit} bytes), "
            "far more than any "
            f"real one: check that it is the right file"
        )
    return data


def read_prefix(path: str | os.PathLike[str], what: str, offset: int, size: int) -> bytes:
    """Read ``size`` bytes at ``offset`` of a regular file (a safetensors header), never more.

    Raises:
        ConfigError: missing, not a regular file, unreadable, or shorter than asked.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} {_describe(p)} is not a readable file: check the path")
    try:
        with p.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(size)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {_describe(p)}: {exc.strerror or exc}") from None
    if len(data) != size:
        raise ConfigError(
            f"{what} {_describe(p)} ends after {offset + len(data)} bytes, expected at least "
            f"{offset + size}: the file is truncated or not of that kind"
        )
    return data


def read_text(path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_BYTES) -> str:
    """Read a UTF-8 text file of at most ``limit`` bytes (see :func:`read_bytes_bounded`).

    Raises:
        ConfigError: as :func:`read_bytes_bounded`, or the file is not UTF-8.
    """
    data = read_bytes_bounded(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {_describe(Path(path))} is not UTF-8 text (bad byte at offset "
            f"{exc.start}): is it the right file?"
        ) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (write a number or null)")


def _depth_ok(text: str) -> bool:
    # Counted over the raw text, outside strings, before json.loads recurses.
    depth = 0
    in_string = False
    escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def loads_json(text: str, source: str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, nesting at most :data:`MAX_JSON_DEPTH`.

    Args:
        text: the JSON text.
        source: where it came from, for messages (a path or a description).

    Raises:
        ConfigError: not valid JSON, a NaN/Infinity constant, or nested too deeply.
    """
    if not _depth_ok(text):
        raise ConfigError(
            f"{source} nests deeper than {MAX_JSON_DEPTH} levels: no memacct file does; "
            f"check that it is the right file"
        )
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{source} is not valid JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - _depth_ok refuses such text first
        raise ConfigError(f"{source} nests too deeply") from None


def loads_json_object(text: str, source: str, expected: str = "a JSON object") -> dict[str, Any]:
    """:func:`loads_json`, and the value must be a JSON object.

    Raises:
        ConfigError: as :func:`loads_json`, or the value is not an object.
    """
    value = loads_json(text, source)
    if not isinstance(value, dict):
        raise ConfigError(
            f"{source} must hold {expected}, got a JSON {type(value).__name__}"
        )
    return value


def read_json_object(
    path: str | os.PathLike[str], what: str, expected: str = "a JSON object"
) -> dict[str, Any]:
    """Read a bounded UTF-8 file holding one JSON object.

    Raises:
        ConfigError: see :func:`read_text` and :func:`loads_json_object`.
    """
    return loads_json_object(read_text(path, what), str(path), expected)


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, what: str = "file", *, make_parents: bool = False
) -> Path:
    """Replace ``path`` with ``data`` atomically; returns the path.

    The data goes to a temporary file created exclusively beside the target
    (an unpredictable name; an existing file or link there is never
    followed), is ``fsync``-ed, then renamed over the target. On any failure
    the temporary file is removed and the old target is left as it was.
    ``make_parents``: create the target's directory first (a cache's).

    Raises:
        ConfigError: the directory is missing or not writable, the disk is
            full, or the target is a directory.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ConfigError(f"cannot write {what} to {_describe(target)}: it is a directory")
    try:
        if make_parents:
            directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ConfigError(
            f"cannot write {what} to {_describe(target)}: {exc.strerror or exc}"
        ) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):
            # mkstemp makes the file 0600; results are meant to be shared like any report.
            os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise ConfigError(
            f"cannot write {what} to {_describe(target)}: {exc.strerror or exc} "
            f"(the previous file, if any, is unchanged)"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return target


def atomic_write_text(
    path: str | os.PathLike[str], text: str, what: str = "file", *, make_parents: bool = False
) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"), what, make_parents=make_parents)
