"""A live segment's token vectors as float32, each written document widened once and shared by the later snapshots.

    spanseek serve --index INDEX_DIR --writes     # (core.segment.LiveIndex.segment_scan_vectors reads them)

The dense leg over a flat base multiplies every segment token's vector by a batch's questions
(``core.dense.SegmentedScan``). Written documents hold float16 vectors, and the product is float32: widening the whole
segment for every batch cost in proportion to the segment (3-11 ms a batch at 5,000 one-passage documents written), and
a per-snapshot float32 copy would be made again at every write. ``WidenedRows`` (one a base) keeps the float32 rows of
the documents written over the base in one buffer, in write order: a snapshot whose segment is the buffer's documents
followed by new ones widens the new ones only, into the buffer's free rows; its rows are a view of the buffer (rows
never change once written, so the snapshots reading them need no lock); an older snapshot first scanned after a newer
one reads the first rows (a search still in flight on it restarted the buffer, copying every row held, and the next
write's scan restarted it again: 100 ms a write at 5,000 documents of 12 tokens of 384 dimensions). A snapshot that no longer holds one of the
buffer's documents (a segment document replaced or deleted) copies the float32 rows of those it still holds into a new
buffer (a slice a run of them, ``core.segment_log.copy_kept``), widening only those not there. The product is the
one the whole segment widened gave, bit for bit: the same float32 values, in one contiguous (S, d) matrix.

Memory: the buffer holds 4 bytes a dimension of each segment token (twice its float16 vectors), with room to grow to
twice that, and never more than ``WIDENED_BYTES``; a segment past it (``merge_tokens`` keeps a segment smaller: 200,000
tokens of 384 dimensions take 307 MB) is widened at each batch, as before, and the buffer lets its rows and documents
go. A merge starts a new base, and the buffer goes with the old one.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from spanseek.core.fine_store import as_float32
from spanseek.core.segment_log import copy_kept, held_prefix, staying

WIDENED_BYTES = 512 << 20  # the most one base's widened segment rows take (float32, room to grow included)


class WidenedRows:
    """The float32 rows of documents written over one base (``rows_of``), shared by its snapshots."""

    def __init__(self, dim: int, max_bytes: int | None = None):
        self.max_rows = (WIDENED_BYTES if max_bytes is None else max_bytes) // (4 * max(dim, 1))
        self.buffer = np.empty((0, dim), np.float32)
        self.docs: list[Any] = []  # the documents whose rows the buffer holds, in order
        self.start: dict[int, int] = {}  # id(document) -> its first row
        self.used = 0
        self._lock = threading.Lock()

    def rows_of(self, segment: Sequence[Any]) -> np.ndarray | None:
        """(S, d) float32: the vectors of ``segment``'s documents (each ``.vectors``: (n, d) float16), in order, a
        view of the buffer; None where they would take more than the buffer may (the caller widens them itself)."""
        total = int(_lengths(segment).sum())
        with self._lock:
            if total > self.max_rows:  # widened by the caller: the rows held are let go, and the documents they
                self._start_over((), 0)  # hold (replaced or deleted ones among them); snapshots reading them keep theirs
                return None
            held = held_prefix(self.docs, segment)
            if held == len(segment):  # the buffer's documents, or the first of them (an older snapshot's): its rows
                return self.buffer[:total]
            if held < len(self.docs):
                self._start_over(segment, total)  # one of its documents left the segment
                held = len(self.docs)
            self._append(segment[held:], total)
            return self.buffer[:total]

    def _append(self, docs: Sequence[Any], total: int) -> None:
        """Widen ``docs`` into the free rows after the buffer's (a larger buffer where they do not fit)."""
        if total > len(self.buffer):
            grown = np.empty((min(max(total, 2 * len(self.buffer)), self.max_rows), self.buffer.shape[1]), np.float32)
            grown[:self.used] = self.buffer[:self.used]  # (the old buffer stays with the snapshots reading it)
            self.buffer = grown
        for doc in docs:
            self._put(doc, as_float32(doc.vectors))

    def _start_over(self, segment: Sequence[Any], total: int) -> None:
        """A new buffer of the rows of ``segment``'s documents the old one holds, in the segment's order, up to its
        first document not there (widened by ``_append``). Where the segment starts with the held documents that
        stay, in their order (a write deleted or replaced some: the new versions come after), their rows are copied
        in one pass (a row at a time a document: 5,000 copies a write at 5,000 written documents)."""
        old, start = self.buffer, self.start
        alive = staying(self.docs, segment)
        self.buffer = np.empty((min(2 * total, self.max_rows), old.shape[1]), np.float32)
        if alive is not None:
            lengths = _lengths(self.docs)
            self.used = copy_kept(old[:self.used], np.repeat(alive, lengths), self.buffer)
            self.docs = list(itertools.compress(self.docs, alive.tolist()))
            self.start = dict(zip(map(id, self.docs), (np.cumsum(lengths[alive]) - lengths[alive]).tolist(),
                                  strict=True))
            return
        kept = 0
        while kept < len(segment) and id(segment[kept]) in start:
            kept += 1
        self.docs, self.start, self.used = [], {}, 0
        for doc in segment[:kept]:
            self._put(doc, old[start[id(doc)]:start[id(doc)] + len(doc.vectors)])

    def _put(self, doc: Any, rows: np.ndarray) -> None:
        """``doc``'s float32 ``rows`` into the buffer's next free rows."""
        self.buffer[self.used:self.used + len(rows)] = rows
        self.start[id(doc)] = self.used
        self.docs.append(doc)
        self.used += len(rows)


def _lengths(docs: Sequence[Any]) -> np.ndarray:
    """(len(docs),) int64: each document's rows (tokens), read in C, not a Python step a document."""
    return np.fromiter(map(len, map(_VECTORS, docs)), np.int64, len(docs))


_VECTORS = operator.attrgetter("vectors")
_MAKING = threading.Lock()


def widened_rows(base: Any) -> WidenedRows:
    """The ``WidenedRows`` of the documents written over ``base`` (a ``PhraseIndex``), made once a base."""
    with _MAKING:
        rows = base.__dict__.get("_widened_rows")
        if rows is None:
            rows = base.__dict__["_widened_rows"] = WidenedRows(base.faiss.d)
        return rows
