"""A read-only attribute that shows another one: ``obj.name`` reads ``obj._name``, or a
figure of an object ``obj`` holds (``obj.layout.block_size``), as a ``@property`` that
only returns it would, written once instead of once per name."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

__all__ = ["ReadOnly", "same_named"]

T = TypeVar("T")


def same_named(source: object, *names: str) -> dict[str, Any]:
    """``{name: source.<name>}`` for each of ``names``: the keywords of a record that takes
    these figures from ``source`` under the same names (``**same_named(est, "weights")``)."""
    return {name: getattr(source, name) for name in names}


class ReadOnly(Generic[T]):
    """``name = ReadOnly[str]("_name", "Device name.")``: ``obj.name`` is ``obj._name``.

    A dotted ``path`` reads through a holder: ``ReadOnly[int]("budget.weights_memory",
    doc, empty=0)`` is ``obj.budget.weights_memory``, or ``empty`` while ``obj.budget``
    is ``None``. Assigning raises ``AttributeError``.
    """

    def __init__(self, path: str, doc: str, *, empty: Any = None) -> None:
        self.path = tuple(path.split("."))
        """The attribute names read in turn."""
        self._empty = empty
        self.__doc__ = doc

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> ReadOnly[T]: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> T | ReadOnly[T]:
        if obj is None:
            return self
        value: Any = obj
        for name in self.path:
            if value is None:
                return self._empty  # type: ignore[no-any-return]
            value = getattr(value, name)
        return value  # type: ignore[no-any-return]

    def __set__(self, obj: object, value: T) -> None:
        raise AttributeError(f"{self.path[-1].lstrip('_')} is read-only")
