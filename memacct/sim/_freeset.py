"""A sorted set of non-negative ints, specialised for the allocator's free lists.

The allocator keeps every free block under one int key, ``size << 64 | address``,
so that the smallest key at or above ``size << 64`` is the best fit with the
lowest address on ties. ``sortedcontainers.SortedList`` does the same job but
spends most of its time in generic bookkeeping (positional index, load
balancing); this container supports only the three operations the allocator
needs and runs about five times faster, which matters because a benchmark
replays whole serving traces many times.

Layout: a list of sorted sublists and the list of their maxima. Every
operation is two C-level bisections plus a short ``list`` insert or delete, so
it costs O(log n) comparisons and an O(load) memory move.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator

__all__ = ["FreeSet"]

# Sublists are split when they grow past twice this length.
_LOAD = 256


class FreeSet:
    """Sorted set of distinct non-negative ints with ceiling look-up.

    Keys must be distinct; :meth:`remove` of a key that is not present is a
    programming error and raises :class:`KeyError`.
    """

    __slots__ = ("_lists", "_maxes")

    def __init__(self) -> None:
        self._lists: list[list[int]] = []
        self._maxes: list[int] = []

    def __len__(self) -> int:
        return sum(len(sub) for sub in self._lists)

    def __iter__(self) -> Iterator[int]:
        for sub in self._lists:
            yield from sub

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return False
        sub = self._lists[pos]
        i = bisect_left(sub, key)
        return i < len(sub) and sub[i] == key

    def add(self, key: int) -> None:
        """Insert ``key`` (which must not be present)."""
        maxes = self._maxes
        if not maxes:
            self._lists.append([key])
            maxes.append(key)
            return
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            pos -= 1
            sub = self._lists[pos]
            sub.append(key)
            maxes[pos] = key
        else:
            sub = self._lists[pos]
            insort(sub, key)
        if len(sub) > 2 * _LOAD:
            upper = sub[_LOAD:]
            del sub[_LOAD:]
            maxes[pos] = sub[-1]
            self._lists.insert(pos + 1, upper)
            maxes.insert(pos + 1, upper[-1])

    def remove(self, key: int) -> None:
        """Remove ``key``; raise :class:`KeyError` if it is not present."""
        pos, sub, i = self._locate(key)
        if sub is None or sub[i] != key:
            raise KeyError(key)
        self._delete(pos, sub, i)

    def pop_ceiling(self, key: int) -> int:
        """Remove and return the smallest element ``>= key``; ``-1`` if there is none."""
        pos, sub, i = self._locate(key)
        if sub is None:
            return -1
        found = sub[i]
        self._delete(pos, sub, i)
        return found

    def ceiling(self, key: int) -> int:
        """The smallest element ``>= key`` without removing it; ``-1`` if there is none."""
        _, sub, i = self._locate(key)
        return -1 if sub is None else sub[i]

    def _locate(self, key: int) -> tuple[int, list[int] | None, int]:
        """``(pos, sub, i)``: the smallest element ``>= key`` is ``sub[i]``, ``sub`` the
        sublist at ``pos``; ``sub`` is ``None`` where every element is smaller."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return pos, None, 0
        sub = self._lists[pos]
        return pos, sub, bisect_left(sub, key)

    def _delete(self, pos: int, sub: list[int], i: int) -> None:
        """Delete ``sub[i]`` (``sub`` the sublist at ``pos``), keeping the index of maxima."""
        del sub[i]
        if not sub:
            del self._lists[pos]
            del self._maxes[pos]
        elif i == len(sub):
            self._maxes[pos] = sub[-1]

    def higher(self, key: int) -> int:
        """The smallest element ``> key``; ``-1`` if there is none."""
        return self.ceiling(key + 1)
