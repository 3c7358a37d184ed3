"""Finding backends: the ``memacct.backends`` entry-point group and explicit registration.

Every backend, the core's own ``sim`` included, is an entry point in the group
``memacct.backends`` naming a backend class (a :class:`~memacct.backend.BaseBackend`
subclass) or factory. Listing names reads package metadata only;
:func:`available_backends` imports each plugin and asks its ``availability()``,
which tells from metadata, ``importlib.util.find_spec`` and device files
whether it can run (:mod:`memacct.plugin`) without importing its framework;
:func:`get_backend` probes only the backend it builds, and the framework is
imported when it is built.

Probing is bounded: each plugin's import and ``availability()`` run in a daemon
thread, every plugin at once, and a caller waits for a probe at most
:data:`TIME_LIMIT_S` from the moment that probe started. A plugin that hangs is
probed once: later callers find its probe still running past its limit and do
not wait again. A plugin that fails to import (``SystemExit`` and
``KeyboardInterrupt`` raised by its own code included), whose ``availability()``
or factory raises, or that gives something that is not a backend, is reported
with the error; the others keep working.

The first-party names (:data:`KNOWN_BACKENDS`) belong to their distributions:
another distribution claiming one is refused unless ``MEMACCT_ALLOW_OVERRIDE``
names it. A backend's ``name`` must equal its entry point's name.

Environment:
    MEMACCT_BACKEND: the backend :func:`get_backend` picks when given no name.
    MEMACCT_DISABLED_BACKENDS: comma-separated backend names never imported;
        ``*`` switches off every plugin (the core's ``sim`` stays).
    MEMACCT_ALLOW_OVERRIDE: comma-separated first-party names a third-party
        distribution may take over.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from memacct._log import logger
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
from memacct.plugin import CORE_DISTRIBUTION, FIRST_PARTY, KNOWN_BACKENDS, install_hint

__all__ = [
    "ENTRY_POINT_GROUP",
    "FIRST_PARTY",
    "KNOWN_BACKENDS",
    "BackendInfo",
    "available_backends",
    "backend_names",
    "get_backend",
    "install_hint",
    "register_backend",
    "unregister_backend",
]


ENTRY_POINT_GROUP = "memacct.backends"
ENV_BACKEND = "MEMACCT_BACKEND"
ENV_DISABLED = "MEMACCT_DISABLED_BACKENDS"
ENV_ALLOW_OVERRIDE = "MEMACCT_ALLOW_OVERRIDE"
TIME_LIMIT_S = 10.0
"""Seconds a plugin's import and ``availability()`` may take, together, before it is listed
as hanging. Neither imports a framework, so a healthy plugin answers in milliseconds."""
SLOW_IMPORT_S = 2.0
"""A plugin whose import takes longer is logged: every listing pays it."""


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


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _in_thread(call: Callable[[], Any], name: str) -> Future[Any]:
    # A daemon thread: one that never returns must not keep the process alive (a
    # ThreadPoolExecutor joins its workers at exit).
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # handed to the waiting caller
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _class_attr(factory: Any, attr: str) -> Any:
    # A class attribute read without running anything (no property, no __getattr__).
    if isinstance(factory, type):
        for klass in factory.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
    return None


@dataclass
class _Entry:
    name: str
    origin: str  # "entry point memacct_cuda:CudaBackend from memacct-cuda 0.1.0"
    distribution: str | None
    version: str | None
    loader: Callable[[], Any] | None = None  # the entry point's load; None: nothing to import
    factory: Any = None
    loaded: bool = False  # the import has finished (or there is none)
    error: str | None = None  # why it cannot be used (refused, failed to import, ...)
    check_name: bool = False  # an entry point's name must be its backend's name
    probe: Future[Availability] | None = field(default=None, repr=False)
    probe_deadline: float = 0.0

    def _load(self) -> None:
        # In the probe's thread; once per entry (a new probe starts only when the last ended).
        if self.loaded or self.loader is None:
            self.loaded = True
            return
        started = time.perf_counter()
        try:
            value = self.loader()
        # SystemExit and KeyboardInterrupt included: in this thread they are the plugin's
        # own (a real Ctrl-C goes to the main thread).
        except BaseException as exc:
            self.error = f"failed to import ({self.origin}): {_describe(exc)}"
        else:
            declared = _class_attr(value, "name")
            if not callable(value):
                self.error = (
                    f"{self.origin} is not a memacct backend: it names a "
                    f"{type(value).__name__}, not a backend class or factory"
                )
            elif self.check_name and isinstance(declared, str) and declared != self.name:
                self.error = (
                    f"{self.origin} is broken: its class reports name {declared!r} but its "
                    f"entry point is named {self.name!r}; the two must agree"
                )
            else:
                self.factory = value
        self.loaded = True
        if self.error is not None:
            logger.warning("memacct backend %r: %s", self.name, self.error)
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_IMPORT_S:
            logger.warning(
                "memacct backend %r took %.1f s to import (%s): every listing of backends pays "
                "this; disable it with %s=%s if unused",
                self.name, elapsed, self.origin, ENV_DISABLED, self.name,
            )

    def _answer(self) -> Availability:
        self._load()
        if self.error is not None:
            return Availability(False, self.error)
        try:
            result = factory_availability(self.factory)
        except BaseException as exc:  # the plugin's own, as in _load
            return Availability(False, f"availability() raised {_describe(exc)}")
        if not isinstance(result, Availability):
            return Availability(
                False,
                f"{self.origin} is not a memacct backend: availability() returned {result!r}, "
                "not memacct.Availability",
            )
        return result

    def start_probe(self) -> tuple[Future[Availability], float]:
        """The running probe (with its own deadline), else a new one."""
        with _lock:
            if self.probe is None or self.probe.done():
                self.probe_deadline = time.monotonic() + TIME_LIMIT_S
                self.probe = _in_thread(self._answer, f"memacct probe {self.name}")
            return self.probe, self.probe_deadline

    def availability(self, probe: Future[Availability], deadline: float) -> Availability:
        """The probe's answer, waited for until its deadline (never again once it passed)."""
        try:
            return probe.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            what = "availability() did not answer" if self.loaded else "did not finish importing"
            return Availability(
                False,
                f"{what} within {TIME_LIMIT_S:g} s ({self.origin}): it may hang; "
                f"disable it with {ENV_DISABLED}={self.name}",
            )


_lock = threading.RLock()
_discovered: dict[str, _Entry] | None = None
_explicit: dict[str, _Entry] = {}


def _names_in(variable: str) -> set[str]:
    return {part.strip() for part in os.environ.get(variable, "").split(",") if part.strip()}


def _normalize(dist: str | None) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower() if dist else ""


def _discover() -> dict[str, _Entry]:
    entries: dict[str, _Entry] = {}
    allowed = _names_in(ENV_ALLOW_OVERRIDE)

    def owner_first(ep: importlib.metadata.EntryPoint) -> tuple[bool, str, str]:
        # The owners of first-party names first, then by distribution: a stable winner
        # when two plugins claim one name.
        dist = ep.dist.name if ep.dist else ""
        return _normalize(dist) != FIRST_PARTY.get(ep.name), dist, ep.name

    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=owner_first):
        dist = ep.dist.name if ep.dist else None
        version = ep.dist.version if ep.dist else None
        origin = f"entry point {ep.value} from {dist or 'an unknown distribution'} {version or ''}"
        entry = _Entry(ep.name, origin.strip(), dist, version, ep.load, check_name=True)
        owner = FIRST_PARTY.get(ep.name)
        reason = None
        if owner is not None and _normalize(dist) != owner and ep.name not in allowed:
            reason = (
                f"refused: the name {ep.name!r} belongs to {owner}, and "
                f"{dist or 'an unknown distribution'} may not take it; set "
                f"{ENV_ALLOW_OVERRIDE}={ep.name} to let it, or uninstall it"
            )
        elif owner is not None and _normalize(dist) != owner:
            logger.warning(
                "memacct backend %r: %s takes over the first-party name (%s=%s)",
                ep.name, entry.origin, ENV_ALLOW_OVERRIDE, ep.name,
            )
            if ep.name in entries:  # the owner's, listed as replaced
                kept = entries.pop(ep.name)
                _sideline(entries, kept, f"replaced by {entry.origin} ({ENV_ALLOW_OVERRIDE})")
        elif ep.name in entries:
            reason = (
                f"name {ep.name!r} is claimed twice: it is also claimed by "
                f"{entries[ep.name].distribution}; this one is ignored (uninstall one of the two)"
            )
        if reason is None:
            entries[ep.name] = entry
        else:
            _sideline(entries, entry, reason)
    return entries


def _sideline(entries: dict[str, _Entry], entry: _Entry, reason: str) -> None:
    # Listed (so the user sees it and why) under "name (distribution)", never loaded.
    logger.warning("memacct backend %r from %s: %s", entry.name, entry.distribution, reason)
    name = f"{entry.name} ({entry.distribution or 'unknown distribution'})"
    entries[name] = _Entry(
        name, entry.origin, entry.distribution, entry.version, error=reason, loaded=True
    )


def _entries() -> dict[str, _Entry]:
    global _discovered
    with _lock:
        if _discovered is None:
            _discovered = _discover()
        return {**_discovered, **_explicit}


def refresh() -> None:
    """Forget discovered entry points; the next call looks them up again."""
    global _discovered
    with _lock:
        _discovered = None


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
    origin = f"register_backend({name!r}, {module}.{qualname})"
    with _lock:
        _explicit[name] = _Entry(name, origin, None, None, factory=factory, loaded=True)


def unregister_backend(name: str) -> None:
    """Remove a backend registered with :func:`register_backend` (no-op when absent)."""
    with _lock:
        _explicit.pop(name, None)


def backend_names() -> list[str]:
    """Names of every registered backend, importing no plugin."""
    return sorted(_entries())


def _disabled_reason(entry: _Entry) -> str | None:
    disabled = _names_in(ENV_DISABLED)
    if entry.name in disabled or ("*" in disabled and entry.distribution != CORE_DISTRIBUTION):
        return f"disabled by {ENV_DISABLED}={os.environ.get(ENV_DISABLED, '')}"
    return None


def _probe_all(entries: Iterable[_Entry]) -> dict[str, Availability]:
    # Every probe started before any is waited for: the slowest one bounds the whole.
    started: dict[str, tuple[_Entry, Future[Availability], float]] = {}
    answers: dict[str, Availability] = {}
    for entry in entries:
        disabled = _disabled_reason(entry)
        if disabled is not None:
            answers[entry.name] = Availability(False, disabled)
        else:
            started[entry.name] = (entry, *entry.start_probe())
    for name, (entry, probe, deadline) in started.items():
        answers[name] = entry.availability(probe, deadline)
    return answers


def _truth_name(truth: object) -> str | None:
    return truth.value if isinstance(truth, TruthSource) else None if truth is None else str(truth)


def available_backends() -> list[BackendInfo]:
    """Every registered backend with whether it can run here and why not (contract).

    Every plugin is probed at once: the listing takes about as long as the slowest
    plugin, and never longer than :data:`TIME_LIMIT_S` (a plugin that hangs is waited
    for once per process).
    """
    entries = [entry for _, entry in sorted(_entries().items())]
    answers = _probe_all(entries)
    infos = []
    for entry in entries:
        avail, factory = answers[entry.name], entry.factory
        missing = [m for m in REQUIRED_METHODS if not callable(_class_attr(factory, m))]
        if avail.available and isinstance(factory, type) and missing:
            avail = Availability(
                False,
                f"{entry.origin} is not a memacct backend: {factory.__name__} lacks "
                f"{', '.join(missing)}",
            )
        infos.append(
            BackendInfo(
                name=entry.name,
                available=avail.available,
                reason=avail.reason,
                distribution=entry.distribution,
                version=entry.version,
                default_truth_source=_truth_name(_class_attr(factory, "default_truth_source")),
                priority=factory_priority(factory) if factory is not None else 0,
            )
        )
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
            plugin did not import or answer within :data:`TIME_LIMIT_S`.
        BackendError: its factory failed or built something that is not a backend,
            or a backend whose ``name`` is not its entry point's name.
    """
    if name is None:
        name = os.environ.get(ENV_BACKEND, "").strip() or None
    if name is None:
        return _auto_choice(options)
    entries = _entries()
    entry = entries.get(name)
    if entry is None:
        raise BackendNotFoundError(_not_found(name, sorted(entries)))
    disabled = _disabled_reason(entry)
    if disabled is not None:
        raise BackendUnavailableError(f"backend {name!r} is {disabled}")
    avail = _probe_all([entry])[name]
    if not avail.available:
        raise BackendUnavailableError(f"backend {name!r} is not available here: {avail.reason}")
    return _build(entry, options)


def _build(entry: _Entry, options: dict[str, Any]) -> DeviceBackend:
    # Here the framework is imported: the constructor checks it and may still refuse.
    try:
        backend = entry.factory(**options)
    except BackendUnavailableError as exc:
        raise BackendUnavailableError(
            f"backend {entry.name!r} is not available here: {exc}"
        ) from exc
    except (MemacctError, KeyboardInterrupt, GeneratorExit):  # Ctrl-C here is the user's
        raise
    except BaseException as exc:  # a plugin's SystemExit too
        raise BackendError(
            f"backend {entry.name!r} failed to start ({entry.origin}): {_describe(exc)}"
        ) from exc
    backend = validate_backend(backend, origin=entry.origin)
    if entry.check_name and backend.name != entry.name:
        raise BackendError(
            f"backend {entry.name!r} is broken: the object built by {entry.origin} reports "
            f"name {backend.name!r}; a backend's name must equal its entry point's name "
            "(its snapshots and profiles would be labelled with the wrong device)"
        )
    return backend


def _not_found(name: str, registered: list[str]) -> str:
    text = f"no memacct backend named {name!r}; registered: {', '.join(registered)}."
    hint = install_hint(name)
    if hint is not None:
        return text + f" Install its plugin ({hint}) or check {ENV_BACKEND}"
    close = difflib.get_close_matches(name, sorted(set(registered) | set(FIRST_PARTY)), n=1)
    if close:
        text += f" Did you mean {close[0]!r}?"
    return text + f" Check the name (and {ENV_BACKEND})"


def _auto_choice(options: dict[str, Any]) -> DeviceBackend:
    # The available real devices by priority; one whose constructor finds no device after
    # all (its framework disagrees with the cheap check) gives way to the next.
    infos = available_backends()
    # The core's own backends that are never chosen automatically (priority 0: the simulator)
    # have no reason to give unless broken; every plugin's reason is listed. The core's own
    # backends are always installed.
    reasons = {
        info.name: info.reason or "no device"
        for info in infos
        if info.distribution != CORE_DISTRIBUTION or info.priority > 0 or not info.available
    }
    entries = _entries()
    for name, known in KNOWN_BACKENDS.items():  # the first-party plugins not installed
        if name not in entries and known.distribution != CORE_DISTRIBUTION:
            reasons[name] = f"not installed ({known.install}: {known.serves})"
    ranked = sorted(
        (info for info in infos if info.available and info.priority > 0),
        key=lambda info: (-info.priority, info.name),
    )
    for info in ranked:
        try:
            return _build(entries[info.name], options)
        except BackendUnavailableError as exc:
            reasons[info.name] = str(exc)
    listed = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
    raise BackendUnavailableError(
        "no real device backend is available here ("
        + (listed or "no backend plugin is installed")
        + f"). memacct never measures a simulated device unless asked: pass name='sim' "
        f"or set {ENV_BACKEND}=sim to use the simulator"
    )
