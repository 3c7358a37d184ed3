"""Calling a backend plugin: its own exception becomes a :class:`~memacct.errors.BackendError`
that names the backend, what it was doing and the plugin's class.

Every reading and every call the core makes into a backend (snapshots, profiling regions,
the optional members of :class:`~memacct.backend.BaseBackend`) goes through
:func:`backend_errors` or :func:`call_backend`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from memacct.backend import DeviceBackend, backend_code
from memacct.errors import BackendError, MemacctError

__all__ = ["backend_errors", "call_backend"]


@contextmanager
def backend_errors(backend: DeviceBackend, doing: str) -> Iterator[None]:
    """Around every call into a backend plugin: its own exception becomes a :class:`BackendError`.

    The message names the backend, what it was doing (``doing``: "failed to read
    device 0", "failed in empty_cache()") and the plugin's class. memacct's own errors
    (a device index out of range) and ``BaseException`` s that are not ``Exception`` s
    (``KeyboardInterrupt``) pass through.
    """
    try:
        yield
    except MemacctError:
        raise
    except Exception as exc:
        # Whatever the plugin's module is called (a plugin module is named memacct_<x> too).
        raise BackendError(
            f"backend {backend.name!r} {doing}: {type(exc).__name__}: {exc} (raised in the "
            f"plugin {backend_code(backend)})"
        ) from exc


_P = ParamSpec("_P")


_T = TypeVar("_T")


def call_backend(
    backend: DeviceBackend, method: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``method(*args)`` of ``backend`` inside :func:`backend_errors`, named by the call."""
    name = getattr(method, "__name__", "a method")
    with backend_errors(backend, f"failed in {name}({', '.join(map(repr, args))})"):
        return method(*args, **kwargs)
