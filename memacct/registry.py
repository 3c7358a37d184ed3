"""Finding backends: the ``memacct.backends`` entry-point group and explicit registration.

Every backend, the core's own ``sim`` included, is an entry point in the
group ``memacct.backends`` naming a backend class (or factory). Loading is
lazy: listing names imports nothing; :func:`available_backends` imports each
plugin to ask ``availability()``; :func:`get_backend` imports only what it
builds. Entry points are the only code memacct loads.

A plugin that fails to import, whose ``availability()`` or factory raises,
or that gives something that is not a backend, is reported as unavailable
with the error; the others keep working.

Environment:
    MEMACCT_BACKEND: the backend :func:`get_backend` picks when given no name.
    MEMACCT_DISABLED_BACKENDS: comma-separated backend names to switch off;
        ``*`` switches off every plugin (the core's ``sim`` stays).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from memacct.backend import REQUIRED_METHODS, Availability, DeviceBackend, validate_backend
from memacct.errors import (
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    InvalidInputError,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "available_backends",
    "backend_names",
    "get_backend",
    "register_backend",
    "unregister_backend",
]

logger = logging.getLogger("memacct")

ENTRY_POINT_GROUP = "memacct.backends"
ENV_BACKEND = "MEMACCT_BACKEND"
ENV_DISABLED = "MEMACCT_DISABLED_BACKENDS"
CORE_DISTRIBUTION = "memacct"
# A plugin whose import takes longer than this is logged: it slows every start.
SLOW_IMPORT_S = 2.0

BackendFactory = Callable[..., Any]


class BackendInfo(BaseModel):
    """One registered backend as :func:`available_backends` lists it."""

    model_config = ConfigDict(frozen=True)

    name: str
    available: bool
    reason: str
    distribution: str | None
    version: str | None
    default_truth_source: str | None = None
    priority: int = 0


@dataclass
class _Entry:
    name: str
    origin: str  # "entry point memacct_cuda:CudaBackend from memacct-cuda 0.1.0", for messages
    distribution: str | None
    version: str | None
    loader: Callable[[], Any] | None
    factory: Any = None
    error: str | None = None
    loaded: bool = False

    def load(self) -> Any:
        # Under the registry's lock: a second thread must wait for the first one's import,
        # not see a half-loaded entry (it would report the backend as not loadable).
        with _lock:
            if not self.loaded:
                self._import()
            return None if self.error is not None else self.factory

    def _import(self) -> None:
        assert self.loader is not None
        start = time.perf_counter()
        try:
            factory = self.loader()
        # A broken plugin must not break the others; SystemExit too (a plugin that
        # exits when its driver is missing), but never KeyboardInterrupt.
        except (Exception, SystemExit) as exc:
            self.error = f"failed to import ({self.origin}): {type(exc).__name__}: {exc}"
            logger.warning("memacct backend %r %s", self.name, self.error)
        else:
            if callable(factory):
                self.factory = factory
            else:
                self.error = (
                    f"{self.origin} is not a memacct backend: it names a "
                    f"{type(factory).__name__}, not a backend class or factory"
                )
                logger.warning("memacct backend %r: %s", self.name, self.error)
        self.loaded = True
        elapsed = time.perf_counter() - start
        if elapsed > SLOW_IMPORT_S:
            logger.warning(
                "memacct backend %r took %.1f s to import (%s): every start that lists "
                "backends pays this; disable it with %s if unused",
                self.name, elapsed, self.origin, ENV_DISABLED,
            )


_lock = threading.RLock()
_discovered: dict[str, _Entry] | None = None
_explicit: dict[str, _Entry] = {}


def _discover() -> dict[str, _Entry]:
    entries: dict[str, _Entry] = {}
    eps = sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
        # The core's own entry points first, then by distribution: a stable winner
        # when two plugins claim one name.
        key=lambda ep: (
            (ep.dist.name if ep.dist else "") != CORE_DISTRIBUTION,
            ep.dist.name if ep.dist else "",
            ep.name,
        ),
    )
    for ep in eps:
        dist = ep.dist.name if ep.dist else None
        version = ep.dist.version if ep.dist else None
        origin = f"entry point {ep.value} from {dist or 'an unknown distribution'} {version or ''}"
        if ep.name in entries:
            kept = entries[ep.name]
            logger.warning(
                "memacct backend name %r is claimed twice: keeping %s, ignoring %s",
                ep.name,
                kept.origin,
                origin.strip(),
            )
            dup = _Entry(
                name=f"{ep.name} ({dist})",
                origin=origin.strip(),
                distribution=dist,
                version=version,
                loader=None,
                loaded=True,
                error=f"name {ep.name!r} is also claimed by {kept.distribution}; this one is"
                " ignored (uninstall one of the two distributions)",
            )
            entries[dup.name] = dup
            continue
        entries[ep.name] = _Entry(ep.name, origin.strip(), dist, version, ep.load)
    return entries


def _entries() -> dict[str, _Entry]:
    global _discovered
    with _lock:
        if _discovered is None:
            _discovered = _discover()
        merged = dict(_discovered)
        merged.update(_explicit)
        return merged


def refresh() -> None:
    """Forget discovered entry points; the next call looks them up again."""
    global _discovered
    with _lock:
        _discovered = None


def _disabled() -> set[str]:
    raw = os.environ.get(ENV_DISABLED, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def _is_disabled(entry: _Entry, disabled: set[str]) -> bool:
    if entry.name in disabled:
        return True
    return "*" in disabled and entry.distribution != CORE_DISTRIBUTION


def register_backend(name: str, factory: BackendFactory) -> None:
    """Register a backend under ``name`` (contract).

    Args:
        name: the backend's name; replaces an entry point of the same name.
        factory: a backend class or callable ``factory(**options) -> backend``;
            it may have a ``availability()`` classmethod returning
            :class:`memacct.Availability`.
    """
    if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
        raise InvalidInputError(f"backend name must be a non-empty word, got {name!r}")
    if not callable(factory):
        raise InvalidInputError(f"factory for backend {name!r} must be callable, got {factory!r}")
    module = getattr(factory, "__module__", "?")
    qualname = getattr(factory, "__qualname__", type(factory).__name__)
    with _lock:
        _explicit[name] = _Entry(
            name=name,
            origin=f"register_backend({name!r}, {module}.{qualname})",
            distribution=None,
            version=None,
            loader=None,
            factory=factory,
            loaded=True,
        )


def unregister_backend(name: str) -> None:
    """Remove a backend registered with :func:`register_backend` (no-op when absent)."""
    with _lock:
        _explicit.pop(name, None)


def backend_names() -> list[str]:
    """Names of every registered backend, importing no plugin."""
    return sorted(_entries())


def _availability(entry: _Entry) -> Availability:
    factory = entry.load()
    if factory is None:
        return Availability(False, entry.error or "not loadable")
    check = getattr(factory, "availability", None)
    if check is None:
        return Availability(True, "registered without an availability check")
    try:
        result = check()
    except (Exception, SystemExit) as exc:
        return Availability(False, f"availability() raised {type(exc).__name__}: {exc}")
    if not isinstance(getattr(result, "available", None), bool) or not isinstance(
        getattr(result, "reason", None), str
    ):
        return Availability(
            False,
            f"{entry.origin} is not a memacct backend: availability() returned {result!r}, "
            "not memacct.Availability",
        )
    return Availability(result.available, result.reason)


def _info(entry: _Entry, disabled: set[str]) -> BackendInfo:
    if _is_disabled(entry, disabled):
        avail = Availability(
            False, f"disabled by {ENV_DISABLED}={os.environ.get(ENV_DISABLED, '')}"
        )
        factory = None
    else:
        avail = _availability(entry)
        factory = entry.factory if entry.error is None else None
    if factory is not None and avail.available:
        missing = [m for m in REQUIRED_METHODS if not callable(getattr(factory, m, None))]
        if isinstance(factory, type) and missing:
            avail = Availability(
                False,
                f"{entry.origin} is not a memacct backend: {factory.__name__} lacks "
                f"{', '.join(missing)}",
            )
    truth = getattr(factory, "default_truth_source", None)
    return BackendInfo(
        name=entry.name,
        available=avail.available,
        reason=avail.reason,
        distribution=entry.distribution,
        version=entry.version,
        default_truth_source=str(getattr(truth, "value", truth)) if truth is not None else None,
        priority=_priority(factory),
    )


def _priority(factory: Any) -> int:
    # A plugin's priority decides automatic choice only; a malformed one must not break listing.
    value = getattr(factory, "priority", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def available_backends() -> list[BackendInfo]:
    """Every registered backend with whether it can run here and why not (contract)."""
    disabled = _disabled()
    with _lock:
        entries = _entries()
        return [_info(entries[name], disabled) for name in sorted(entries)]


def get_backend(name: str | None = None, **options: Any) -> DeviceBackend:
    """Build a backend (contract).

    Args:
        name: a registered backend's name. ``None`` takes ``MEMACCT_BACKEND``,
            else the available real device of highest priority. The simulator is never
            chosen unless named: with no real device this raises
            :class:`BackendUnavailableError` listing each backend's reason.
        **options: passed to the backend's factory (``device=SimDevice(...)``
            for ``sim``).

    Raises:
        BackendNotFoundError: no backend has that name.
        BackendUnavailableError: it cannot run here (the reason says why).
        BackendError: its factory failed or built something that is not a backend.
    """
    if name is None:
        name = os.environ.get(ENV_BACKEND, "").strip() or None
    if name is None:
        name = _auto_choice()
    entries = _entries()
    entry = entries.get(name)
    if entry is None:
        raise BackendNotFoundError(
            f"no memacct backend named {name!r}; registered: {', '.join(sorted(entries))}. "
            f"Install its plugin (pip install memacct-{name}) or check {ENV_BACKEND}"
        )
    disabled = _disabled()
    if _is_disabled(entry, disabled):
        raise BackendUnavailableError(
            f"backend {name!r} is disabled by {ENV_DISABLED}={os.environ.get(ENV_DISABLED, '')}"
        )
    avail = _availability(entry)
    if not avail.available:
        raise BackendUnavailableError(f"backend {name!r} is not available here: {avail.reason}")
    try:
        backend = entry.factory(**options)
    except (BackendError, InvalidInputError):
        raise
    except (Exception, SystemExit) as exc:
        raise BackendError(
            f"backend {name!r} failed to start ({entry.origin}): {type(exc).__name__}: {exc}"
        ) from exc
    return validate_backend(backend, origin=entry.origin)


def _auto_choice() -> str:
    best: tuple[int, str] | None = None
    for info in available_backends():
        if info.available and info.priority > 0 and (best is None or info.priority > best[0]):
            best = (info.priority, info.name)
    if best is None:
        reasons = "; ".join(
            f"{info.name}: {info.reason or 'no device'}"
            for info in available_backends()
            if info.name != "sim"
        )
        raise BackendUnavailableError(
            "no real device backend is available here ("
            + (reasons or "no backend plugin is installed")
            + f"). memacct never measures a simulated device unless asked: pass name='sim' "
            f"or set {ENV_BACKEND}=sim to use the simulator"
        )
    return best[1]
