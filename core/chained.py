"""Two sequences read as one without copying either: a live snapshot's base followed by its segment of written
documents (its documents, passages and ids: ``core.segment.LiveIndex``, ``core.fieldindex.JoinedFieldIndex``).

Used by ``spanseek serve --writes``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class Chained(Sequence[T]):
    """``first`` followed by ``then``, read as one sequence without copying either (a live snapshot's ids, passages
    and documents: its base's, shared by every snapshot of the base, then its segment's)."""

    def __init__(self, first: Sequence[T], then: Sequence[T]):
        self.first, self.then, self.split = first, then, len(first)

    def __len__(self) -> int:
        return self.split + len(self.then)

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            return [*self.first[start:min(stop, self.split)], *self.then[max(start - self.split, 0):max(stop - self.split, 0)]]
        i = operator.index(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} items")
        return self.first[i] if i < self.split else self.then[i - self.split]

    def __iter__(self) -> Iterator[T]:
        return itertools.chain(self.first, self.then)
