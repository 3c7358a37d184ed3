"""Finding backends: the ``memacct.backends`` entry-point group and explicit registration.

Every backend, the core's own ``sim`` included, is an entry point in the
group ``memacct.backends`` naming a backend class (a
:class:`~memacct.backend.BaseBackend` subclass) or factory. Loading is lazy:
listing names imports nothing; :func:`available_backends` imports each plugin
to ask ``availability()``; :func:`get_backend` imports only what it builds.
Entry points are the only code memacct loads.

A plugin that fails to import (even with ``SystemExit`` or
``KeyboardInterrupt`` raised by its own code), whose ``availability()`` or
factory raises, that takes longer than the time limit, or that gives
something that is not a backend, is reported as unavailable with the error;
the others keep working. Imports and ``availability()`` run in worker
threads under a per-plugin time limit, all plugins at once, so one plugin
that hangs costs at most the limit and never blocks the others.

The first-party names (:data:`FIRST_PARTY`: ``sim``, ``cuda``, ``npu``,
``mindspore``, ``nvml``) belong to their distributions: another distribution
claiming one is refused, unless ``MEMACCT_ALLOW_OVERRIDE`` names it. A
backend's ``name`` must equal its entry point's name.

Environment:
    MEMACCT_BACKEND: the backend :func:`get_backend` picks when given no name.
    MEMACCT_DISABLED_BACKENDS: comma-separated backend names to switch off;
        ``*`` switches off every plugin (the core's ``sim`` stays).
    MEMACCT_ALLOW_OVERRIDE: comma-separated first-party names a third-party
        distribution may take over (read when backends are discovered).
    MEMACCT_PLUGIN_TIMEOUT: seconds each plugin may take to import and answer
        ``availability()`` (default :data:`DEFAULT_TIMEOUT_S`).
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from memacct.backend import (
    REQUIRED_METHODS,
    Availability,
    DeviceBackend,
    factory_availability,
    factory_priority,
    validate_backend,
)
from memacct.errors import (
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    InvalidInputError,
    MemacctError,
)
from memacct.models import TruthSource

__all__ = [
    "ENTRY_POINT_GROUP",
    "FIRST_PARTY",
    "BackendInfo",
    "available_backends",
    "backend_names",
    "get_backend",
    "install_hint",
    "register_backend",
    "unregister_backend",
]

logger = logging.getLogger("memacct")

ENTRY_POINT_GROUP = "memacct.backends"
ENV_BACKEND = "MEMACCT_BACKEND"
ENV_DISABLED = "MEMACCT_DISABLED_BACKENDS"
ENV_ALLOW_OVERRIDE = "MEMACCT_ALLOW_OVERRIDE"
ENV_TIMEOUT = "MEMACCT_PLUGIN_TIMEOUT"
CORE_DISTRIBUTION = "memacct"
# A plugin whose import takes longer than this is logged: it slows every start.
SLOW_IMPORT_S = 2.0
DEFAULT_TIMEOUT_S = 20.0
"""Seconds a plugin may take to import and answer ``availability()``.

Importing torch or MindSpore from a cold disk takes a few seconds; twenty
leaves room for a slow machine and still bounds a plugin that hangs."""

FIRST_PARTY: dict[str, str] = {
    "sim": CORE_DISTRIBUTION,
    "cuda": "memacct-cuda",
    "npu": "memacct-npu",
    "mindspore": "memacct-mindspore",
    "nvml": "memacct-nvml",
}
"""Each first-party backend name and the distribution that owns it (``pyproject.toml``
entry points of this repository; a test checks they agree)."""

BackendFactory = Callable[..., Any]
_T = TypeVar("_T")


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


def _normalize(dist: str | None) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower() if dist else ""


def install_hint(name: str) -> str | None:
    """``pip install <distribution>`` for a first-party backend name; ``None`` for other names.

    Names nobody publishes get no hint: guessing ``memacct-<name>`` would send a
    user to a distribution that does not exist (or to a squatter's).
    """
    dist = FIRST_PARTY.get(name)
    return f"pip install {dist}" if dist else None


def timeout_s() -> float:
    """The per-plugin time limit: ``MEMACCT_PLUGIN_TIMEOUT`` seconds, else the default.

    Raises:
        InvalidInputError: the variable is set but is not a positive number.
    """
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidInputError(
            f"{ENV_TIMEOUT}={raw!r} is not a positive number of seconds: set it to e.g. "
            f"{DEFAULT_TIMEOUT_S:g}, or unset it"
        )
    return value


_unfinished: set[_Call] = set()
_unfinished_lock = threading.Lock()


def unfinished_probes() -> int:
    """How many plugin imports or ``availability()`` calls are still running past their limit.

    A process that exits while one of them is inside a framework's import can
    crash in the interpreter's shutdown (the framework's exit hooks run while
    its import is half done): the command line ends with ``os._exit`` then.
    """
    with _unfinished_lock:
        return len(_unfinished)


class _Call:
    """One call run in a daemon worker thread, waited for with a time limit.

    Daemon, so a call that never returns cannot keep the process from exiting.
    Any exception the call raises, ``KeyboardInterrupt`` and ``SystemExit``
    included, is kept: in a worker thread it can only come from the plugin's own
    code (a real Ctrl-C goes to the main thread).
    """

    def __init__(self, target: Callable[[], Any], name: str) -> None:
        self._target = target
        self._done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.started = time.perf_counter()
        with _unfinished_lock:
            _unfinished.add(self)
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        try:
            self.value = self._target()
        except BaseException as exc:  # see the class docstring
            self.error = exc
        finally:
            self._done.set()
            with _unfinished_lock:
                _unfinished.discard(self)

    def wait(self, timeout: float) -> bool:
        return self._done.wait(max(0.0, timeout))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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
    # The entry point's name must be the backend's name (explicit registrations: any).
    check_name: bool = False
    _import: _Call | None = field(default=None, repr=False)

    def load(self, deadline: float) -> Any:
        """The factory, or ``None`` with :attr:`error` set; waits for the import until ``deadline``.

        The import runs once, in a worker thread started by the first caller; every
        caller (other threads included) waits for that one import.
        """
        with _lock:
            if self.loaded:
                return None if self.error is not None else self.factory
            if self._import is None:
                assert self.loader is not None
                self._import = _Call(self.loader, f"memacct import {self.name}")
            call = self._import
        if not call.wait(deadline - time.monotonic()):
            return None
        with _lock:
            if not self.loaded:
                self._finish(call)
            return None if self.error is not None else self.factory

    def pending_reason(self, limit: float) -> str:
        return (
            f"did not finish importing within {limit:g} s ({self.origin}): it may hang; "
            f"disable it with {ENV_DISABLED}={self.name}, or raise {ENV_TIMEOUT}"
        )

    def _finish(self, call: _Call) -> None:
        elapsed = time.perf_counter() - call.started
        if call.error is not None:
            self.error = f"failed to import ({self.origin}): {_describe(call.error)}"
            logger.warning("memacct backend %r %s", self.name, self.error)
        elif not callable(call.value):
            self.error = (
                f"{self.origin} is not a memacct backend: it names a "
                f"{type(call.value).__name__}, not a backend class or factory"
            )
            logger.warning("memacct backend %r: %s", self.name, self.error)
        else:
            self.factory = call.value
            declared = _class_name(call.value)
            if self.check_name and declared is not None and declared != self.name:
                self.error = (
                    f"{self.origin} is broken: its class reports name {declared!r} but its "
                    f"entry point is named {self.name!r}; the two must agree"
                )
                logger.warning("memacct backend %r: %s", self.name, self.error)
        self.loaded = True
        if elapsed > SLOW_IMPORT_S:
            logger.warning(
                "memacct backend %r took %.1f s to import (%s): every start that lists "
                "backends pays this; disable it with %s if unused",
                self.name, elapsed, self.origin, ENV_DISABLED,
            )


def _class_attr(factory: Any, attr: str) -> Any:
    # A class attribute read without running anything (no property, no __getattr__):
    # a backend class declares name and truth source so; a factory function has none.
    if isinstance(factory, type):
        for klass in factory.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
    return None


def _class_name(factory: Any) -> str | None:
    value = _class_attr(factory, "name")
    return value if isinstance(value, str) else None


_lock = threading.RLock()
_discovered: dict[str, _Entry] | None = None
_explicit: dict[str, _Entry] = {}


def _allowed_overrides() -> set[str]:
    raw = os.environ.get(ENV_ALLOW_OVERRIDE, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def _sidelined(
    name: str, origin: str, dist: str | None, version: str | None, reason: str
) -> _Entry:
    # Listed (so the user sees it and why) under "name (distribution)", never loaded.
    return _Entry(
        name=f"{name} ({dist or 'unknown distribution'})",
        origin=origin,
        distribution=dist,
        version=version,
        loader=None,
        loaded=True,
        error=reason,
    )


def _discover() -> dict[str, _Entry]:
    entries: dict[str, _Entry] = {}
    allowed = _allowed_overrides()
    eps = sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
        # The owners of first-party names first, then by distribution: a stable winner
        # when two plugins claim one name.
        key=lambda ep: (
            _normalize(ep.dist.name if ep.dist else None) != FIRST_PARTY.get(ep.name),
            ep.dist.name if ep.dist else "",
            ep.name,
        ),
    )
    for ep in eps:
        dist = ep.dist.name if ep.dist else None
        version = ep.dist.version if ep.dist else None
        origin = f"entry point {ep.value} from {dist or 'an unknown distribution'} {version or ''}"
        origin = origin.strip()
        owner = FIRST_PARTY.get(ep.name)
        entry = _Entry(ep.name, origin, dist, version, ep.load, check_name=True)
        if owner is not None and _normalize(dist) != owner:
            if ep.name not in allowed:
                reason = (
                    f"refused: the name {ep.name!r} belongs to {owner}, and "
                    f"{dist or 'an unknown distribution'} may not take it; set "
                    f"{ENV_ALLOW_OVERRIDE}={ep.name} to let it, or uninstall it"
                )
                logger.warning("memacct backend %r from %s %s", ep.name, dist, reason)
                entries[f"{ep.name} ({dist})"] = _sidelined(ep.name, origin, dist, version, reason)
                continue
            if ep.name in entries:
                kept = entries.pop(ep.name)
                reason = f"replaced by {origin} ({ENV_ALLOW_OVERRIDE}={ep.name})"
                entries[f"{ep.name} ({kept.distribution})"] = _sidelined(
                    ep.name, kept.origin, kept.distribution, kept.version, reason
                )
            logger.warning(
                "memacct backend %r: %s takes over the first-party name (%s=%s)",
                ep.name, origin, ENV_ALLOW_OVERRIDE, ep.name,
            )
            entries[ep.name] = entry
            continue
        if ep.name in entries:
            kept = entries[ep.name]
            logger.warning(
                "memacct backend name %r is claimed twice: keeping %s, ignoring %s",
                ep.name, kept.origin, origin,
            )
            reason = (
                f"name {ep.name!r} is also claimed by {kept.distribution}; this one is"
                " ignored (uninstall one of the two distributions)"
            )
            entries[f"{ep.name} ({dist})"] = _sidelined(ep.name, origin, dist, version, reason)
            continue
        entries[ep.name] = entry
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
        name: the backend's name; replaces an entry point of the same name (an
            explicit call in the engine's own code, unlike an installed plugin).
        factory: a backend class (a :class:`memacct.BaseBackend` subclass) or a
            callable ``factory(**options) -> backend``.
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


def _bounded(
    entry: _Entry, what: str, call: Callable[[], _T], deadline: float
) -> tuple[bool, _T | None, BaseException | None]:
    # (finished, value, error) of call() run in a worker thread until deadline.
    worker = _Call(call, f"memacct {what} {entry.name}")
    if not worker.wait(deadline - time.monotonic()):
        return False, None, None
    return True, worker.value, worker.error


def _availability(entry: _Entry, deadline: float, limit: float) -> Availability:
    factory = entry.load(deadline)
    if factory is None:
        if not entry.loaded:
            return Availability(False, entry.pending_reason(limit))
        return Availability(False, entry.error or "not loadable")
    finished, result, error = _bounded(
        entry, "availability", lambda: factory_availability(factory), deadline
    )
    if not finished:
        return Availability(
            False,
            f"availability() did not answer within {limit:g} s ({entry.origin}): it may hang; "
            f"disable it with {ENV_DISABLED}={entry.name}, or raise {ENV_TIMEOUT}",
        )
    if error is not None:
        return Availability(False, f"availability() raised {_describe(error)}")
    if not isinstance(result, Availability):
        return Availability(
            False,
            f"{entry.origin} is not a memacct backend: availability() returned {result!r}, "
            "not memacct.Availability",
        )
    return result


def _info(entry: _Entry, disabled: set[str], deadline: float, limit: float) -> BackendInfo:
    if _is_disabled(entry, disabled):
        avail = Availability(
            False, f"disabled by {ENV_DISABLED}={os.environ.get(ENV_DISABLED, '')}"
        )
        factory = None
    else:
        avail = _availability(entry, deadline, limit)
        factory = entry.factory if entry.loaded and entry.error is None else None
    if factory is not None and avail.available and isinstance(factory, type):
        missing = [m for m in REQUIRED_METHODS if not callable(_class_attr(factory, m))]
        if missing:
            avail = Availability(
                False,
                f"{entry.origin} is not a memacct backend: {factory.__name__} lacks "
                f"{', '.join(missing)}",
            )
    truth = _class_attr(factory, "default_truth_source")
    return BackendInfo(
        name=entry.name,
        available=avail.available,
        reason=avail.reason,
        distribution=entry.distribution,
        version=entry.version,
        default_truth_source=_truth_name(truth),
        priority=factory_priority(factory) if factory is not None else 0,
    )


def _truth_name(truth: object) -> str | None:
    if truth is None:
        return None
    return truth.value if isinstance(truth, TruthSource) else str(truth)


def _unanswered(entry: _Entry, limit: float) -> BackendInfo:
    return BackendInfo(
        name=entry.name,
        available=False,
        reason=f"did not answer within {limit:g} s ({entry.origin})",
        distribution=entry.distribution,
        version=entry.version,
    )


def available_backends() -> list[BackendInfo]:
    """Every registered backend with whether it can run here and why not (contract).

    Every plugin is probed at once, each in its own worker thread, under the
    per-plugin time limit (``MEMACCT_PLUGIN_TIMEOUT``): the listing takes about as
    long as the slowest plugin, and never longer than the limit.
    """
    disabled = _disabled()
    limit = timeout_s()
    deadline = time.monotonic() + limit
    entries = _entries()
    names = sorted(entries)
    calls = {
        name: _Call(
            functools.partial(_info, entries[name], disabled, deadline, limit),
            f"memacct probe {name}",
        )
        for name in names
    }
    infos: list[BackendInfo] = []
    for name in names:
        call = calls[name]
        # _info bounds itself by the deadline; the margin only covers its own bookkeeping.
        if not call.wait(deadline - time.monotonic() + 1.0):
            infos.append(_unanswered(entries[name], limit))
        elif isinstance(call.error, MemacctError):
            raise call.error
        elif call.error is not None:  # a bug of memacct's own: never hide it
            raise BackendError(f"listing backend {name!r} failed: {_describe(call.error)}")
        else:
            infos.append(call.value)
    return infos


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
        BackendUnavailableError: it cannot run here (the reason says why), or its
            plugin did not import or answer within ``MEMACCT_PLUGIN_TIMEOUT``.
        BackendError: its factory failed or built something that is not a backend,
            or a backend whose ``name`` is not its entry point's name.
    """
    if name is None:
        name = os.environ.get(ENV_BACKEND, "").strip() or None
    if name is None:
        name = _auto_choice()
    entries = _entries()
    entry = entries.get(name)
    if entry is None:
        raise BackendNotFoundError(_not_found(name, sorted(entries)))
    disabled = _disabled()
    if _is_disabled(entry, disabled):
        raise BackendUnavailableError(
            f"backend {name!r} is disabled by {ENV_DISABLED}={os.environ.get(ENV_DISABLED, '')}"
        )
    limit = timeout_s()
    avail = _availability(entry, time.monotonic() + limit, limit)
    if not avail.available:
        raise BackendUnavailableError(f"backend {name!r} is not available here: {avail.reason}")
    try:
        backend = entry.factory(**options)
    except MemacctError:
        raise
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, GeneratorExit)):
            raise
        raise BackendError(
            f"backend {name!r} failed to start ({entry.origin}): {_describe(exc)}"
        ) from exc
    backend = validate_backend(backend, origin=entry.origin)
    if entry.check_name and backend.name != entry.name:
        raise BackendError(
            f"backend {name!r} is broken: the object built by {entry.origin} reports name "
            f"{backend.name!r}; a backend's name must equal its entry point's name "
            "(its snapshots and profiles would be labelled with the wrong device)"
        )
    return backend


def _not_found(name: str, registered: list[str]) -> str:
    text = f"no memacct backend named {name!r}; registered: {', '.join(registered)}."
    hint = install_hint(name)
    if hint is not None:
        text += f" Install its plugin ({hint}) or check {ENV_BACKEND}"
        return text
    close = difflib.get_close_matches(name, sorted(set(registered) | set(FIRST_PARTY)), n=1)
    if close:
        text += f" Did you mean {close[0]!r}?"
    text += f" Check the name (and {ENV_BACKEND})"
    return text


def _auto_choice() -> str:
    infos = available_backends()
    best: tuple[int, str] | None = None
    for info in infos:
        if info.available and info.priority > 0 and (best is None or info.priority > best[0]):
            best = (info.priority, info.name)
    if best is None:
        reasons = "; ".join(
            f"{info.name}: {info.reason or 'no device'}" for info in infos if info.name != "sim"
        )
        raise BackendUnavailableError(
            "no real device backend is available here ("
            + (reasons or "no backend plugin is installed")
            + f"). memacct never measures a simulated device unless asked: pass name='sim' "
            f"or set {ENV_BACKEND}=sim to use the simulator"
        )
    return best[1]
