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
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            raise KeyError(key)
        sub = self._lists[pos]
        i = bisect_left(sub, key)
        if sub[i] != key:
            raise KeyError(key)
        del sub[i]
        if not sub:
            del self._lists[pos]
            del maxes[pos]
        elif i == len(sub):
            maxes[pos] = sub[-1]

    def pop_ceiling(self, key: int) -> int:
        """Remove and return the smallest element ``>= key``; ``-1`` if there is none."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return -1
        sub = self._lists[pos]
        i = bisect_left(sub, key)
        found = sub[i]
        del sub[i]
        if not sub:
            del self._lists[pos]
            del maxes[pos]
        elif i == len(sub):
            maxes[pos] = sub[-1]
        return found

    def ceiling(self, key: int) -> int:
        """The smallest element ``>= key`` without removing it; ``-1`` if there is none."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return -1
        sub = self._lists[pos]
        return sub[bisect_left(sub, key)]

    def higher(self, key: int) -> int:
        """The smallest element ``> key``; ``-1`` if there is none."""
        return self.ceiling(key + 1)
