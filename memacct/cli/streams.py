"""Standard output the command line cannot write to: one line on stderr, never a traceback.

``memacct ... > /dev/full`` (no space), ``| head -1`` (the reader left: a broken pipe) and
``>&-`` (no standard output at all) make every write fail (a pipe whose reader left ends
the command quietly, exit 141, as SIGPIPE would). :func:`guarded_stdout` stands
in for ``sys.stdout`` while a command runs: a write or flush that fails raises
:class:`OutputError`, which :func:`memacct.cli.main` reports in one line with exit code 2,
like every user error; a closed standard output is a writer that refuses every write.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from memacct.errors import MemacctError

__all__ = ["EXIT_BROKEN_PIPE", "OutputError", "guarded_stdout"]

EXIT_BROKEN_PIPE = 141
"""The exit status after the reader of a pipe left: what the shell reports for a process
that SIGPIPE ended (128 + 13)."""


class OutputError(MemacctError):
    """Standard output cannot be written (closed, full, or a pipe whose reader left)."""


class _Guarded(io.TextIOBase):
    """A text stream that writes through to ``target`` and turns its OS errors into
    :class:`OutputError` (``target`` ``None``: standard output was closed)."""

    def __init__(self, target: IO[str] | None) -> None:
        super().__init__()
        self.target = target

    def _fail(self, exc: OSError | None) -> OutputError:
        if isinstance(exc, BrokenPipeError):
            # The reader has what it wanted (``| head -1``): end quietly, as a process that
            # SIGPIPE ends does (128 + 13), with nothing more to flush at exit.
            _silence(self.target)
            raise SystemExit(EXIT_BROKEN_PIPE)
        if exc is None:
            return OutputError("standard output is closed: run memacct with its output "
                               "open (a terminal, a file or a pipe)")
        reason = exc.strerror or type(exc).__name__
        return OutputError(f"cannot write to standard output ({reason}): give memacct a "
                           "terminal, a file with room, or a pipe that reads it all")

    def write(self, text: str) -> int:
        if self.target is None:
            raise self._fail(None)
        try:
            return self.target.write(text)
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed under us
            raise self._fail(exc if isinstance(exc, OSError) else None) from None

    def flush(self) -> None:
        if self.target is None:
            return
        try:
            self.target.flush()
        except (OSError, ValueError) as exc:
            raise self._fail(exc if isinstance(exc, OSError) else None) from None

    def isatty(self) -> bool:
        try:
            return self.target is not None and self.target.isatty()
        except (OSError, ValueError):
            return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self.target is None:
            raise io.UnsupportedOperation("standard output is closed")
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.target, "encoding", None) or "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


def _silence(target: IO[str] | None) -> None:
    """Point the failed standard output at the null device, so that the interpreter's own
    flush at exit does not print a second error (Python's docs on SIGPIPE do the same)."""
    if target is None:
        return
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
        fd = target.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """Run the block with ``sys.stdout`` guarded (see the module notes); the standard output
    in place before is back in place after, silenced if the block failed to write to it."""
    original = sys.stdout
    guarded = _Guarded(original)
    sys.stdout = guarded
    try:
        yield
        guarded.flush()
    except OutputError:
        _silence(original)
        raise
    finally:
        if sys.stdout is guarded:
            sys.stdout = original
