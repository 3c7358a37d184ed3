"""A read-only public reading of a private attribute, for the simulator's plain getters."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

__all__ = ["ReadOnly"]

T = TypeVar("T")


class ReadOnly(Generic[T]):
    """``name = ReadOnly[str]("_name", "Device name.")``: ``obj.name`` reads ``obj._name``
    and cannot be assigned, as a ``@property`` that only returns the attribute would."""

    def __init__(self, attr: str, doc: str) -> None:
        self._attr = attr
        self.__doc__ = doc

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> ReadOnly[T]: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> T | ReadOnly[T]:
        if obj is None:
            return self
        value: T = getattr(obj, self._attr)
        return value

    def __set__(self, obj: object, value: T) -> None:
        raise AttributeError(f"{self._attr.lstrip('_')} is read-only")
