"""Models saved as JSON files and read back, every problem a :class:`ConfigError` in one line.

:class:`JsonFile` gives a model ``save`` and ``load``; :func:`load_model_json` validates
text as a model with :data:`LOADED_CONTEXT` set, so the checks only a tampered or corrupt
file fails apply too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from memacct.errors import ConfigError
from memacct.io import atomic_write_text, read_text

__all__ = ["LOADED_CONTEXT", "JsonFile", "load_model_json", "validation_problems"]

LOADED_CONTEXT = "memacct_loaded"
"""Validation context key set by :func:`load_model_json`: the data came from a file,
so the checks that only a tampered or corrupt file fails apply too."""


_Loaded = TypeVar("_Loaded", bound="JsonFile")


class JsonFile(BaseModel):
    """A model saved to and loaded from a JSON file: a profile, a plan (``file_kind`` names
    it in messages)."""

    file_kind: ClassVar[str] = "file"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model as JSON (atomically); returns the path.

        Raises:
            ConfigError: the file cannot be written.
        """
        text = self.model_dump_json(indent=2) + "\n"
        return atomic_write_text(Path(path), text, self.file_kind)

    @classmethod
    def load(cls: type[_Loaded], path: str | os.PathLike[str]) -> _Loaded:
        """Read a file written by :meth:`save`, cross-checked by the model's validators.

        Raises:
            ConfigError: missing, over 16 MiB, not JSON, or fields that contradict
                each other (a tampered or corrupt file), in one line.
        """
        loaded: _Loaded = load_model_json(cls, read_text(path, cls.file_kind), str(path))
        return loaded


def _got(err: Any) -> str:
    # Name the offending value when it is a scalar; a whole object would drown the message.
    value = err.get("input")
    if isinstance(value, (dict, list)) or err.get("type") == "missing":
        return ""
    text = repr(value)
    return f" (got {text[:60]}{'...' if len(text) > 60 else ''})"


def load_model_json(model: type[BaseModel], text: str | bytes, source: str) -> Any:
    """Validate JSON text as ``model``; any problem becomes a :class:`ConfigError`.

    ``source`` names where the text came from (a path, "stdin") for the message.
    """
    try:
        return model.model_validate_json(text, context={LOADED_CONTEXT: True})
    except (OverflowError, RecursionError) as exc:
        # A consistency check doing float arithmetic on absurd integers, or absurd nesting:
        # a hand-edited or corrupt file, not a model to plan with.
        raise ConfigError(
            f"{source} is not a valid {model.__name__}: its numbers are too large to be "
            f"real ({type(exc).__name__}: {exc}); save it again from memacct"
        ) from None
    except ValidationError as exc:
        raise ConfigError(
            f"{source} is not a valid {model.__name__}: {validation_problems(exc)}"
        ) from None


def validation_problems(exc: ValidationError) -> str:
    """The first five problems of a pydantic error, each naming its field and the value given."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}{_got(err)}"
        for err in exc.errors()[:5]
    )
