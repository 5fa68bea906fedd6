"""Two parts read as one without copying either: a live snapshot's base followed by its segment of written documents.

``Chained`` joins two sequences (a snapshot's documents, passages, ids), ``ChainedArray`` two arrays along their
first axis (its token map: ``token_passage``, ``token_offsets``, ``token_flags``, ``passage_tokens``; its layout's
per-document counts), so that a
write costs in proportion to its segment, and a memory-mapped base array stays memory-mapped. A read that touches
some rows reads them where they lie (an index, a slice, a gather of token ids split between the parts); only a read
of every row (``np.asarray``) joins the parts, and costs what reading them all costs anyway.

``derived`` keeps what is computed from an index's token map (the tokens spans may start and end at, the wide gaps
between tokens) once an index; for a snapshot, the base's part once a base and the segment's at each snapshot.

Used by ``core.segment.LiveIndex`` (``spanseek serve --writes``).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar, overload

import numpy as np

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


class ChainedArray:
    """The rows of array ``first`` followed by those of ``then`` (same dtype and trailing shape), read as one
    read-only array without copying either: an integer reads one row, a slice reads a view of the part it lies in
    (a copy of its rows where it crosses the join), integer arrays gather from both parts (any shape; negative
    numbers count from the end), a boolean mask of the rows keeps those it marks, and a tuple's further keys index
    the rows read. ``np.asarray`` joins the parts."""

    def __init__(self, first: np.ndarray, then: np.ndarray):
        then = np.asarray(then, dtype=first.dtype)
        if then.shape[1:] != first.shape[1:]:
            raise ValueError(f"rows of shape {then.shape[1:]} cannot follow rows of shape {first.shape[1:]}")
        self.first, self.then, self.split = first, then, len(first)
        self.dtype, self.ndim = first.dtype, first.ndim
        self.shape = (self.split + len(then), *first.shape[1:])

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = np.concatenate([self.first, self.then])
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            rows = self[key[0]]
            lead = np.ndim(rows) - (self.ndim - 1)  # the axes the row key made
            return rows[(slice(None),) * lead + key[1:]]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self[np.arange(start, stop, step)]
            if stop <= self.split:
                return self.first[start:stop]
            if start >= self.split:
                return self.then[start - self.split:stop - self.split]
            return np.concatenate([self.first[start:], self.then[:stop - self.split]])
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"index {int(key)} out of range for {len(self)} rows")
            return self.first[i] if i < self.split else self.then[i - self.split]
        return self._gather(np.asarray(key))

    def max(self) -> Any:
        """The largest value of both parts (as ``np.ndarray.max`` of the rows joined)."""
        return max(part.max() for part in (self.first, self.then) if len(part))

    def sum(self) -> Any:
        """The sum of both parts' values (as ``np.ndarray.sum`` of the rows joined, where their sums are exact)."""
        return self.first.sum() + self.then.sum()

    def _gather(self, ids: np.ndarray) -> np.ndarray:
        if ids.dtype == bool and ids.shape == (len(self),):  # a mask of rows: each part's rows it keeps, in order
            return np.concatenate([self.first[ids[:self.split]], self.then[ids[self.split:]]])
        if ids.dtype == bool or not np.issubdtype(ids.dtype, np.integer):
            raise IndexError(f"a chained array is read by integers, slices, integer arrays or a boolean mask of its "
                             f"rows, not {ids.dtype} arrays of shape {ids.shape}")
        ids = np.where(ids < 0, ids + len(self), ids)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"index out of range for {len(self)} rows")
        out = np.empty(ids.shape + self.shape[1:], self.dtype)
        in_first = ids < self.split
        out[in_first] = self.first[ids[in_first]]
        rest = ~in_first
        out[rest] = self.then[ids[rest] - self.split]
        return out


def derived(index: Any, key: Any, compute: Callable[[Any], Any], join: Literal["rows", "ids"]) -> Any:
    """``compute(index)``, made once for the index's token map and kept on it (a copy of the index given other
    tokens computes its own). ``compute`` reads ``token_passage``, ``token_offsets``, ``token_flags`` and
    ``passage_tokens`` and must look at each passage alone (spans never cross passages). For a live snapshot
    (``index.token_parts``: its base and its segment's token map, numbered from 0) the base's part is the base's
    ``derived`` (made once a base) and the segment's is computed alone, then joined, once a snapshot: ``rows``:
    per-token arrays (or a tuple of them) chained; ``ids``: sorted token ids, the segment's numbered after the base's.
    """
    held = index.__dict__.setdefault("_derived", {})
    made = held.get(key)
    parts = getattr(index, "token_parts", None)
    if parts is not None:
        if made is None or made[0] is not parts:
            base, segment = parts
            made = held[key] = (parts, _joined(derived(base, key, compute, join), compute(segment),
                                               len(base.token_passage), join))
        return made[1]
    arrays = (index.token_passage, index.token_offsets, index.token_flags, index.passage_tokens)
    if made is None or any(a is not b for a, b in zip(made[0], arrays, strict=True)):
        made = held[key] = (arrays, compute(index))
    return made[1]


def _joined(first: Any, then: Any, n_first: int, join: Literal["rows", "ids"]) -> Any:
    if isinstance(first, tuple):
        return tuple(_joined(a, b, n_first, join) for a, b in zip(first, then, strict=True))
    if join == "rows":
        return ChainedArray(first, then)
    return np.concatenate([first, np.asarray(then, first.dtype) + n_first])


def take(values: np.ndarray, rows: np.ndarray | ChainedArray) -> np.ndarray:
    """``values[rows]`` (a gather by an integer array); chained ``rows`` are read where each part lies, not joined
    first."""
    if isinstance(rows, ChainedArray):
        return np.concatenate([values[rows.first], values[rows.then]])
    return values[rows]


def passage_numbers(index: Any) -> Any:
    """(P,) int64: each passage's number, 0 to P - 1 (a unit's own passage map), made once an index; a live snapshot's
    (``index.token_parts``) is its base's followed by its segment's numbers, made apart (a write made a range over
    every passage)."""
    parts = getattr(index, "token_parts", None)
    if parts is not None:
        first = passage_numbers(parts[0])
        return ChainedArray(first, np.arange(len(first), len(index.passages), dtype=np.int64))
    made = index.__dict__.get("_passage_numbers")
    if made is None or len(made) != len(index.passages):
        made = index.__dict__["_passage_numbers"] = np.arange(len(index.passages), dtype=np.int64)
    return made


class TokenMap:
    """A token map alone (a live snapshot's segment, numbered from 0): what ``derived``'s ``compute`` reads."""

    def __init__(self, token_passage: np.ndarray, token_offsets: np.ndarray, token_flags: np.ndarray,
                 passage_tokens: np.ndarray):
        self.token_passage, self.token_offsets = token_passage, token_offsets
        self.token_flags, self.passage_tokens = token_flags, passage_tokens
