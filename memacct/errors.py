"""The errors memacct raises.

Every error derives from :class:`MemacctError`. Messages say what happened,
the numbers involved, and what to change; the command line prints them as one
line and exits with code 2.
"""

from __future__ import annotations

__all__ = [
    "AgreementError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "ConfigError",
    "InsufficientMemoryError",
    "InvalidInputError",
    "MemacctError",
    "ModelSourceError",
    "ProfilingError",
    "ProfilingOutOfMemoryError",
]


class MemacctError(Exception):
    """Base class of every error memacct raises on purpose."""


class InvalidInputError(MemacctError, ValueError):
    """A value given by a user or an engine is out of range or inconsistent."""


class ConfigError(InvalidInputError):
    """A model ``config.json``, a profile or a plan file cannot be used."""


class ModelSourceError(ConfigError):
    """A model named by a Hub id, a cache entry or a file cannot be found or read:
    the message names the cause (gated, missing, private, offline) and the fix."""


class BackendError(MemacctError):
    """A backend could not be loaded, built, or failed while measuring."""


class BackendNotFoundError(BackendError, LookupError):
    """No backend is registered under the requested name."""


class BackendUnavailableError(BackendError):
    """The backend is registered but cannot run on this machine."""


class ProfilingError(MemacctError):
    """Profiling could not produce a trustworthy result."""


class ProfilingOutOfMemoryError(ProfilingError):
    """The device ran out of memory inside the profiled block."""


class InsufficientMemoryError(MemacctError):
    """The plan does not fit in the device's memory.

    Attributes:
        estimated_max_model_len: when one request of ``max_model_len`` does
            not fit, the engine's estimate of the longest length that does
            (0: not even one token); ``None`` for other refusals.
    """

    def __init__(self, message: str, *, estimated_max_model_len: int | None = None) -> None:
        super().__init__(message)
        self.estimated_max_model_len = estimated_max_model_len


class AgreementError(MemacctError):
    """Ranks could not agree on a KV-cache plan."""
