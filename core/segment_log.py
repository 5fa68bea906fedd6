"""What a live segment's documents add to a snapshot, built over runs of them and shared by one base's snapshots.

    spanseek serve --index INDEX_DIR --writes     # (core.segment.LiveIndex reads its field index and BM25 postings)

A snapshot's field index and BM25 postings of its segment were built over every segment document at each write: a
write cost in proportion to the segment (about 40 ms at 5,000 written documents). ``SegmentChunks`` (one a base and
kind of part) holds immutable parts each built over a run of the segment's documents, in write order, as a binary
counter holds its bits: a write builds a part of its own document, then joins the last two parts while they cover
as many documents each (built again over the run of both). Each document is so built into about log2(segment) parts
over its life in the segment, and a snapshot reads at most log2(segment) + 1 parts. A snapshot whose segment is the
held documents followed by new ones builds the new ones' parts only; one whose segment lost a document (replaced or
deleted) keeps the parts before it and builds the rest again. The parts never change once built, so the snapshots
reading them need no lock. A merge starts a new base, and the parts go with the old one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Chunk(NamedTuple, Generic[T]):
    """A part built over the segment's documents ``start`` to ``stop`` (positions in the segment)."""

    start: int
    stop: int
    part: T


class SegmentChunks(Generic[T]):
    """Parts ``build(documents, start)`` over runs of the documents written over one base (module docstring)."""

    def __init__(self, build: Callable[[Sequence[Any], int], T]):
        self.build = build
        self.docs: list[Any] = []  # the documents the chunks cover, in segment order
        self.chunks: list[Chunk[T]] = []
        self._lock = threading.Lock()

    def of(self, segment: Sequence[Any]) -> tuple[Chunk[T], ...]:
        """The chunks covering ``segment``'s documents, in order (the first from 0, each from the last's stop)."""
        with self._lock:
            same = 0
            while same < min(len(self.docs), len(segment)) and self.docs[same] is segment[same]:
                same += 1
            kept = [c for c in self.chunks if c.stop <= same]
            covered = kept[-1].stop if kept else 0
            if same < len(self.docs) and same == len(segment):  # an older snapshot's (its segment is held)
                return (*kept, *([Chunk(covered, same, self.build(segment[covered:same], covered))]
                                 if covered < same else []))
            self.chunks, self.docs = kept, self.docs[:covered]
            for at in range(covered, len(segment)):
                self.docs.append(segment[at])
                self.chunks.append(Chunk(at, at + 1, self.build(segment[at:at + 1], at)))
                while len(self.chunks) > 1 and (self.chunks[-2].stop - self.chunks[-2].start
                                                == self.chunks[-1].stop - self.chunks[-1].start):
                    start, stop = self.chunks[-2].start, self.chunks[-1].stop
                    self.chunks[-2:] = [Chunk(start, stop, self.build(self.docs[start:stop], start))]
            return tuple(self.chunks)


_MAKING = threading.Lock()


def segment_chunks(owner: Any, name: str, build: Callable[[Sequence[Any], int], T]) -> SegmentChunks[T]:
    """The ``SegmentChunks`` ``name`` of the documents written over ``owner`` (a base, or what is made once a base),
    made at the first call and kept on it."""
    with _MAKING:
        held = owner.__dict__.setdefault("_segment_chunks", {})
        if name not in held:
            held[name] = SegmentChunks(build)
        return held[name]
