"""What a live segment's documents add to a snapshot, made once a document and shared by one base's snapshots.

    spanseek serve --index INDEX_DIR --writes     # (core.segment.LiveIndex reads its segment's parts from here)

A snapshot's field index and BM25 postings of its segment were built over every segment document at each write: a
write cost in proportion to the segment (about 40 ms at 5,000 written documents). ``SegmentChunks`` (one a base and
kind of part) holds immutable parts each built over a run of the segment's documents, in write order, as a binary
counter holds its bits: a write builds a part of its own document, then joins the last two parts while they cover
as many documents each (built again over the run of both), up to runs of ``INLINE_RUN`` documents; two longer runs
side by side are joined by a background thread (``_Joiner``, as an LSM store compacts its runs), once at least
``INLINE_RUN`` documents follow them, so no write waits for a run of thousands of documents to be built, nor does
deleting or replacing the last-written documents cut one. Each document is so built into about log2(segment) parts
over its life in the segment, and a snapshot reads about log2(segment) + 2 parts (a few more while joins are under
way). A snapshot whose segment is the
held documents followed by new ones builds the new ones' parts only; one whose segment lost documents (replaced or
deleted: a new version comes after the held documents) keeps the parts of the runs that lost none, moved up, reads a
joined run that lost one as the runs it was joined from (``Chunk.joined``), and builds again only the runs of at most
``INLINE_RUN`` documents that held one, over those that stay (``SegmentChunks._left``); the joining thread joins the
runs so read apart again. The parts never change once built, so the snapshots
reading them need no lock. A merge starts a new base, and the parts go with the old one.

``AppendedRows`` (one a base and kind of row) holds the rows each written document adds to its snapshots' arrays
(``segment_columns``: the segment's token map, its passages' documents and token runs, its kept tokens' ids; its
float16 vectors and fine-store codes, at the first read), in write order, in buffers that grow by doubling: a snapshot
reads a view of their first rows, so a write makes its own document's rows only (each write joined every segment
document's). A snapshot whose segment lost documents (the held ones that stay first, the first written among those
lost or not) copies the rows of those that stay into new buffers, a slice a run of them, renumbered
(``AppendedRows.of``); one whose segment differs otherwise makes the
rows from the first that differs on again, in one pass over those documents; an
older snapshot made after a newer one reads the first rows of the newer one's buffers.
"""

from __future__ import annotations

import itertools
import logging
import operator
import queue
import threading
import weakref
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, overload

import numpy as np

from spanseek.core.phrase_index import passage_record

if TYPE_CHECKING:
    from spanseek.core.phrase_index import PhraseIndex

T = TypeVar("T")
log = logging.getLogger(__name__)


class Chunk(NamedTuple, Generic[T]):
    """A part built over the segment's documents ``start`` to ``stop`` (positions in the segment); ``joined``: the
    chunks the joining thread joined it from (their lengths read, not their positions, which were theirs then), kept
    so that a document leaving the run costs the run of at most ``INLINE_RUN`` documents that held it, not the run
    joined over thousands (``SegmentChunks.of``)."""

    start: int
    stop: int
    part: T
    joined: tuple[Chunk[T], ...] = ()


Build = Callable[[Any, Sequence[Any], int], T]
"""``build(owner, documents, start)``: the part of a run of the segment's ``documents`` from ``start``, over ``owner``
(what the chunks are kept on: a base, its BM25 terms; None for chunks made without one). It is given the owner, never
refers to it: the joining thread holds builds in its queue, and one referring to the base would keep it (and its
terms) in memory until the queue drained, after a merge, and as a cycle through what is kept on it, until a full
garbage collection."""

INLINE_RUN = 64
"""The longest run a snapshot builds itself: two runs of it are joined (and those runs joined again) by the joining
thread (``_Joiner``), so that no write waits for a run of thousands of documents to be built."""


class SegmentChunks(Generic[T]):
    """Parts ``build(owner, documents, start)`` over runs of the documents written over one base (module docstring);
    ``owner``: what they are kept on, held weakly and handed to each build (``Build``)."""

    def __init__(self, owner: Any = None) -> None:
        # what the parts are built over (a base, its BM25 terms), handed to each build: referred to weakly, as the
        # joining thread refers to these chunks, so that a join waiting in its queue keeps neither alive
        self._owner = None if owner is None else weakref.ref(owner)
        self.docs: list[Any] = []  # the documents the chunks cover, in segment order
        self.chunks: list[Chunk[T]] = []
        self._lock = threading.Lock()
        # the runs handed to the joining thread, not joined yet: the hand-over's number and its documents (a write
        # that changed them hands the run again, under a new number: the earlier hand-over is then neither built nor
        # counted)
        self._queued: dict[tuple[int, int], tuple[int, tuple[Any, ...]]] = {}
        self._handed = itertools.count()
        self._failed: set[tuple[int, int]] = set()  # joins that failed, not tried again while their documents stay

    def of(self, segment: Sequence[Any], build: Build[T]) -> tuple[Chunk[T], ...]:
        """The chunks covering ``segment``'s documents, in order (the first from 0, each from the last's stop), those
        not held built by ``build(owner, documents, start)`` (``Build``), in runs of at most ``INLINE_RUN``
        documents; longer runs are joined by the joining thread, and read once joined."""
        owner = None if self._owner is None else self._owner()
        with self._lock:
            same = held_prefix(self.docs, segment)
            kept = self.chunks if same == len(self.docs) else self._left(segment, same, owner, build)
            if kept is None:  # not the held documents less some, then new ones: held up to the first that differs
                kept = [c for c in self.chunks if c.stop <= same]
            covered = kept[-1].stop if kept else 0
            # a segment that is the held one's first documents (its last ones deleted) is held from now on, as any
            # other: its runs are built once, not again at each such call
            self.docs = list(segment)
            held = {(c.start, c.stop): c for c in kept}
            self.chunks = [held[run] if run in held else Chunk(*run, build(owner, self.docs[run[0]:run[1]], run[0]))
                           for run in counter_runs([(c.start, c.stop) for c in kept], len(segment), INLINE_RUN)]
            # (past the first document that left, the runs' documents are others)
            self._queued = {run: d for run, d in self._queued.items() if run[1] <= min(same, covered)}
            self._failed = {run for run in self._failed if run[1] <= min(same, covered)}
            due = self._due()
            out = tuple(self.chunks)
        for run, handed in due:
            JOINER.add(self, run, handed, build)
        return out

    def _left(self, segment: Sequence[Any], same: int, owner: Any, build: Build[T]) -> list[Chunk[T]] | None:
        """Where some held documents left ``segment`` (deleted, or replaced: the new version comes after the held
        ones), the chunks over those that stay, in order: each chunk whose documents all stay, moved up; one that
        lost some, the chunks it was joined from (``Chunk.joined``), likewise, down to the runs of at most
        ``INLINE_RUN`` documents built whole, built again over those that stay. So a write that replaces a document
        deep in a long segment builds at most ``INLINE_RUN`` documents' parts a document gone (it built every run
        after it again: 22-29 ms at 5,000 written documents). None when ``segment`` does not start with the held
        documents that stay, in their order. The caller holds the lock."""
        alive = staying(self.docs, segment, same)  # (its first ``same`` documents are the held ones)
        if alive is None:
            return None
        stays = int(alive.sum())
        before = np.r_[0, np.cumsum(alive)]  # the documents that stay before each held position
        out: list[Chunk[T]] = []

        def place(chunk: Chunk[T], at: int) -> None:  # ``chunk`` over the held documents from ``at``
            n = chunk.stop - chunk.start
            stay, start = int(before[at + n] - before[at]), int(before[at])
            if stay == n:
                out.append(Chunk(start, start + n, chunk.part, chunk.joined))
            elif stay and chunk.joined:
                for inner in chunk.joined:
                    place(inner, at)
                    at += inner.stop - inner.start
            elif stay:  # (the last-written documents that stay: in the runs writes one by one leave, which the
                # next such deletes keep; others: one run)
                docs = list(itertools.compress(self.docs[at:at + n], alive[at:at + n].tolist()))
                runs = counter_runs([], stay) if start + stay == stays else [(0, stay)]
                out.extend(Chunk(start + a, start + b, build(owner, docs[a:b], start + a)) for a, b in runs)

        for chunk in self.chunks:
            place(chunk, chunk.start)
        return out

    def _due(self) -> list[tuple[tuple[int, int], int]]:
        """The runs to join now, and their hand-overs' numbers: two neighbouring chunks, the first shorter than twice
        the second (as long as each other, as writes one by one leave them, past ``INLINE_RUN``; or what runs that
        lost documents were read apart as, joined again), with at least ``INLINE_RUN`` documents after them (so that
        deleting or replacing the last-written documents cuts a run of at most that many, not one joined over the whole segment), each handed
        to the joining thread once. The caller holds the lock."""
        due = []
        for a, b in itertools.pairwise(self.chunks):
            run = (a.start, b.stop)
            na, nb = a.stop - a.start, b.stop - b.start
            if (na < 2 * nb and b.stop + INLINE_RUN <= len(self.docs)
                    and run not in self._queued and run not in self._failed and not any(r[0] < run[1] and run[0] < r[1] for r in self._queued)):
                handed = next(self._handed)
                self._queued[run] = (handed, tuple(self.docs[run[0]:run[1]]))
                due.append((run, handed))
        return due

    def wanted(self, run: tuple[int, int], handed: int) -> tuple[Any, tuple[Any, ...]] | None:
        """What the joining thread builds hand-over ``handed`` of ``run`` with: the owner and the run's documents;
        None if a write has changed its documents since (and handed it again, over the new ones, if it is due again)
        or the owner is gone (its base merged away)."""
        owner = None if self._owner is None else self._owner()
        with self._lock:
            queued = self._queued.get(run)
            if queued is None or queued[0] != handed or (self._owner is not None and owner is None):
                return None
            return owner, queued[1]

    def join(self, run: tuple[int, int], handed: int, docs: tuple[Any, ...], part: T, build: Build[T]) -> None:
        """Hold ``part``, built by the joining thread over ``docs`` (hand-over ``handed``), as the chunk of ``run``
        in place of those it covers, where ``docs`` are still the documents there and chunks start and stop at its
        ends (else a write has changed them since, and it is dropped); then hand the joins now due to the thread."""
        with self._lock:
            if self._queued.get(run, (None,))[0] == handed:  # (not a run handed again since, over other documents)
                del self._queued[run]
            start, stop = run
            inside = [i for i, c in enumerate(self.chunks) if start <= c.start and c.stop <= stop]
            if (inside and self.chunks[inside[0]].start == start and self.chunks[inside[-1]].stop == stop
                    and len(self.docs) >= stop and all(map(operator.is_, self.docs[start:stop], docs))):
                self.chunks[inside[0]:inside[-1] + 1] = [Chunk(start, stop, part, tuple(
                    self.chunks[inside[0]:inside[-1] + 1]))]
            due = self._due()
        for later, later_handed in due:
            JOINER.add(self, later, later_handed, build)

    def dropped(self, run: tuple[int, int], handed: int) -> None:
        """Hand-over ``handed`` of ``run`` failed to join: its chunks stay as they are, and it is not tried again
        while its documents stay (each write would try it again, and log its failure again)."""
        with self._lock:
            if self._queued.get(run, (None,))[0] == handed:
                del self._queued[run]
                self._failed.add(run)


class _Joiner:
    """The joining thread (started at the first join, a daemon): builds the runs ``SegmentChunks`` hands it, one at a
    time, in the order given, as an LSM store compacts its runs in the background. A write builds at most
    ``INLINE_RUN`` documents' parts for its own snapshot (the write that filled a run of 4,096 built the whole run:
    27 ms at 4,096 documents written, where a write costs 0.7 ms); the snapshots made while a run is joined read the
    two it joins. A join waiting in the queue holds its ``SegmentChunks`` weakly and neither their owner nor their
    documents (it is given them when it runs, ``SegmentChunks.wanted``), and its build refers to neither
    (``Build``): a base merged away, its BM25 terms and its segment's documents are freed with their last snapshot,
    not once the queue has drained, and the joins queued for them are not built."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Any, tuple[int, int], int, Build[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, chunks: SegmentChunks[Any], run: tuple[int, int], handed: int, build: Build[Any]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="spanseek-segment-joins", daemon=True)
                self._thread.start()
        self._jobs.put((weakref.ref(chunks), run, handed, build))

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                self._join(*job)
            finally:  # (a join that failed counts as done: ``wait`` returns)
                del job
                self._jobs.task_done()

    @staticmethod
    def _join(ref: Any, run: tuple[int, int], handed: int, build: Build[Any]) -> None:
        """One join: nothing of it (its documents, its owner) is held after it. One that fails (memory, say) leaves
        the runs unjoined, read as they are, and the thread goes on."""
        chunks = ref()
        wanted = None if chunks is None else chunks.wanted(run, handed)
        if wanted is None:  # (its base is gone, or a write changed its documents)
            return
        owner, docs = wanted
        try:
            part = build(owner, docs, run[0])
        except Exception:
            log.exception("joining the segment's documents %d to %d failed; they are read unjoined", *run)
            chunks.dropped(run, handed)
            return
        del owner
        chunks.join(run, handed, docs, part, build)

    def wait(self) -> None:
        """Return once every join handed to the thread so far (and those they made due) is done."""
        self._jobs.join()


JOINER = _Joiner()


def wait_for_joins() -> None:
    """Return once the joining thread has joined every run due (tests and benchmarks: a snapshot made then reads the
    runs joined)."""
    JOINER.wait()


def counter_runs(runs: list[tuple[int, int]], total: int, longest: int | None = None) -> list[tuple[int, int]]:
    """The runs (start, stop) that ``runs`` (sizes powers of two, not growing, as ``SegmentChunks`` holds them) become
    as documents are added one by one up to ``total``, the last two joined while they are as long and their join is at
    most ``longest`` documents (None: any): found by adding the largest block of documents that fits under the last
    run (and ``longest``) at once (its own documents join into one run of its size before they reach the last run's),
    so each run is built once, not each document into every run it passes through (a segment document replaced near
    the start built the rest log2(segment) times over)."""
    runs = list(runs)
    at = runs[-1][1] if runs else 0
    cap = total if longest is None else longest
    while at < total:
        room = runs[-1][1] - runs[-1][0] if runs else total
        size = 1 << (min(room, cap, total - at).bit_length() - 1)
        runs.append((at, at + size))
        at += size
        while (len(runs) > 1 and runs[-2][1] - runs[-2][0] == runs[-1][1] - runs[-1][0]
               and runs[-1][1] - runs[-2][0] <= cap):
            runs[-2:] = [(runs[-2][0], runs[-1][1])]
    return runs


RowsOf = Callable[[Sequence[Any], int, dict[str, int]], dict[str, tuple[np.ndarray, np.ndarray]]]
"""``rows(documents, before, used)``: each column's rows of a run of ``documents`` joined, and (len(documents),) how
many of them each document adds; ``before``: the documents before the run in the segment, ``used``: each column's
rows before it."""


class AppendedRows:
    """Columns of rows each document written over one base adds (``RowsOf``), in write order, in buffers shared by the
    base's snapshots: a snapshot reads a view of their first rows (module docstring). A buffer grows by doubling (the
    old one stays with the snapshots reading it); rows never change once written."""

    def __init__(self) -> None:
        self.docs: list[Any] = []  # the documents whose rows the buffers hold, in segment order
        self.ends: dict[str, list[int]] = {}  # each column's rows used after 0, 1, ... of the documents
        self.buffers: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def of(self, segment: Sequence[Any], rows: RowsOf, numbered: Mapping[str, str] | None = None,
           head: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Each column's rows of ``segment``'s documents, in order (views of the buffers), those of the documents
        not held made by ``rows`` in one run (given at each call, as ``SegmentChunks.of``'s ``build``), after the
        column's ``head`` rows (those before every document's: the 0 a column of run ends starts from). Where held
        documents left (deleted, or replaced: the new version comes after the held ones) and some after them stay,
        new buffers hold the rows of those that stay, copied (where only the last-written ones left, those before them
        are not looked up again), each column's numbers less what the documents gone before a row took
        (``numbered``: a column's numbers count the rows of that column, or ``DOCUMENTS``; the others are not
        numbers): a pass over the buffers, not the documents' rows made again (22-29 ms a snapshot at 5,000 written
        documents, with the runs of parts after it built again), the first written document's leaving too (the
        head is no document's: the rows of every document after it were made again)."""
        with self._lock:
            same = held_prefix(self.docs, segment)
            alive = staying(self.docs, segment, same) if same < len(self.docs) else None
            if alive is not None and alive[same:].any():  # (held documents after the first that left stay)
                self._keep(alive, numbered or {})
            elif same < len(self.docs) and same < len(segment):  # a document left: new buffers from it on
                del self.docs[same:]
                for ends in self.ends.values():
                    del ends[same + 1:]
                self.buffers = {name: buf[:self.ends[name][-1]].copy() for name, buf in self.buffers.items()}
            new = segment[len(self.docs):]
            if new:
                made = rows(new, len(self.docs), {name: ends[-1] for name, ends in self.ends.items()})
                for name, (joined, counts) in made.items():
                    if name not in self.ends:  # the column's first rows: after its head
                        first = (head or {}).get(name, joined[:0])
                        self._put(name, 0, first.astype(joined.dtype))
                        self.ends[name] = [len(first)] * (len(self.docs) + 1)
                    ends = self.ends[name]
                    self._put(name, ends[-1], joined)
                    ends.extend((ends[-1] + np.cumsum(counts, dtype=np.int64)).tolist())
                self.docs.extend(new)
            return {name: buf[:self.ends[name][len(segment)]] for name, buf in self.buffers.items()}

    def _keep(self, alive: np.ndarray, numbered: Mapping[str, str]) -> None:
        """Keep each column's head and the rows of the held documents ``alive`` marks, in new buffers (``of``)."""
        counts: dict[str, np.ndarray] = {name: np.diff(np.asarray(ends, np.int64)).astype(np.int64)
                                         for name, ends in self.ends.items()}

        def gone_before(unit: str) -> np.ndarray:  # (each staying document's) the units the documents gone took
            each = np.ones(len(alive), np.int64) if unit == DOCUMENTS else counts[unit]
            gone = np.where(alive, 0, each)
            return (np.cumsum(gone) - gone)[alive]

        for name, buf in list(self.buffers.items()):
            first = self.ends[name][0]  # (the head's rows)
            keep = np.repeat(alive, counts[name])
            out = self.buffers[name] = np.empty((max(2 * (first + int(keep.sum())), 64), *buf.shape[1:]), buf.dtype)
            out[:first] = buf[:first]
            at = first + copy_kept(buf[first:], keep, out[first:])
            if name in numbered:
                out[first:at] -= np.repeat(gone_before(numbered[name]), counts[name][alive]).astype(buf.dtype)
        self.ends = {name: (self.ends[name][0] + np.r_[0, np.cumsum(c[alive])]).tolist() for name, c in counts.items()}
        self.docs = list(itertools.compress(self.docs, alive.tolist()))

    def _put(self, name: str, at: int, rows: np.ndarray) -> None:
        buf = self.buffers.get(name)
        if buf is None or at + len(rows) > len(buf):
            grown = np.empty((max(2 * at, at + len(rows), 64), *rows.shape[1:]), rows.dtype)
            if buf is not None:
                grown[:at] = buf[:at]
            buf = self.buffers[name] = grown
        buf[at:at + len(rows)] = rows


DOCUMENTS = ""
"""A numbered column's unit (``AppendedRows.of``) where its numbers count documents."""


def copy_kept(rows: np.ndarray, keep: np.ndarray, out: np.ndarray) -> int:
    """Copy the ``rows`` that ``keep`` ((n,) bool over the first n) marks to the start of ``out``, in order, a slice a
    run of them; returns how many. One copy of the rows: a gather by the mask, then its copy into ``out``, copied them
    twice (a deep replace in a segment of 1,000 documents of 143 tokens copied 110 MB of half-precision vectors into
    a temporary array first, more than making them again from the documents took)."""
    edges = np.flatnonzero(np.diff(np.r_[0, keep.view(np.int8), 0]))  # where each run of kept rows starts and stops
    at = 0
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        out[at:at + b - a] = rows[a:b]
        at += b - a
    return at


def held_prefix(held: Sequence[Any], segment: Sequence[Any]) -> int:
    """How many of ``segment``'s first documents are ``held``'s (the same objects, in the same places). Documents
    compare by identity (``core.segment.EncodedDocument``), so a segment that holds the held documents first, as a
    write's does, is found so by one list comparison, in C (each write's snapshot compared each pair in Python, for
    each of its parts: 0.5 ms a write at 5,000 written documents); otherwise the first that differs is looked for."""
    n = min(len(held), len(segment))
    if list(held[:n]) == list(segment[:n]):
        return n
    same = list(map(operator.is_, held, segment))
    return same.index(False) if False in same else len(same)


def staying(held: Sequence[Any], segment: Sequence[Any], same: int = 0) -> np.ndarray | None:
    """(len(held),) bool: which of ``held``'s documents stay in ``segment``, where ``segment`` starts with them, in
    their order (a write deleted or replaced the others: a new version comes after the held documents); None where
    it does not. ``same``: the first documents known to be the same (``held_prefix``), not looked at again, so a
    write that changed the last-written documents costs those, not the segment. Found by the documents' identities
    in C, not a Python step a document."""
    held_ids = np.fromiter(map(id, held[same:]), np.int64, len(held) - same)
    seg_ids = np.fromiter(map(id, segment[same:]), np.int64, len(segment) - same)
    alive = np.isin(held_ids, seg_ids)
    kept = held_ids[alive]
    if len(kept) > len(seg_ids) or not np.array_equal(seg_ids[:len(kept)], kept):
        return None
    return np.r_[np.ones(same, bool), alive]


class _Records(Sequence[dict[str, Any]]):
    """Records made when read (``record(i)``, ``i`` in range): by an index (negative counting from the end) or a
    slice."""

    @abstractmethod
    def record(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self.record(j) for j in range(*i.indices(len(self)))]
        i = operator.index(i) + (len(self) if operator.index(i) < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} records")
        return self.record(i)


class SegmentPassages(_Records):
    """The segment's passage records (``passages.jsonl``'s lines, their documents numbered from ``first_doc``), each
    made when read: a write's snapshot makes none (it made a record of every segment passage). ``starts``: where each
    document's passages start (its end appended); ``doc``: (S,) each passage's document (``segment_columns``)."""

    def __init__(self, segment: Sequence[Any], first_doc: int, starts: np.ndarray, doc: np.ndarray):
        self.segment, self.first_doc, self.starts, self.doc = segment, first_doc, starts, doc

    def __len__(self) -> int:
        return int(self.starts[-1])

    def record(self, i: int) -> dict[str, Any]:
        k = int(self.doc[i]) - self.first_doc
        q = self.segment[k].passages[i - int(self.starts[k])]
        return passage_record(self.first_doc + k, q["para"], q["text"], q.get("meta"))


class SegmentRecords(_Records):
    """The segment's document records (``docs.jsonl``'s lines), each read from its document: a write's snapshot
    lists none (it listed every segment document's)."""

    def __init__(self, segment: Sequence[Any]):
        self.segment = segment

    def __len__(self) -> int:
        return len(self.segment)

    def record(self, i: int) -> dict[str, Any]:
        return self.segment[i].record


def _token_rows(base: PhraseIndex) -> RowsOf:
    """What a run of written documents adds to its snapshots' token map, passages and kept tokens over ``base``
    (``RowsOf``): the segment's own (numbered from 0: ``token_passage``, ``token_offsets``, ``token_flags``,
    ``passage_tokens``, ``passage_starts``; the last two after the 0 they start from, ``_TOKEN_HEAD``) and the
    snapshot's (numbered after the base's: ``live_*``, ``kept_ids``)."""
    n, p, d = len(base.token_passage), len(base.passages), len(base.docs)

    def rows(docs: Sequence[Any], before: int, used: dict[str, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        passages, tokens = used.get("live_passage_doc", 0), used.get("token_passage", 0)  # (a row a passage, a token)
        of_doc = np.fromiter((len(doc.ntokens) for doc in docs), np.int64, count=len(docs))  # passages of each
        ntokens = np.concatenate([np.zeros(0, np.int64), *(doc.ntokens for doc in docs)]).astype(np.int64)
        doc_of_passage = np.repeat(np.arange(len(docs)), of_doc)
        doc_tokens = np.bincount(doc_of_passage, weights=ntokens, minlength=len(docs)).astype(np.int64)
        kept = np.concatenate([np.zeros(0, bool), *(doc.kept for doc in docs)])
        doc_kept = np.bincount(np.repeat(np.arange(len(docs)), doc_tokens)[kept], minlength=len(docs))
        token_passage = np.repeat(np.arange(passages, passages + len(ntokens), dtype=np.int32), ntokens)
        ends = tokens + np.cumsum(ntokens)
        return {"token_passage": (token_passage, doc_tokens),
                "token_offsets": (np.concatenate([np.zeros((0, 2), np.int32), *(doc.offsets for doc in docs)]).astype(
                    np.int32), doc_tokens),
                "token_flags": (np.concatenate([np.zeros(0, np.uint8), *(doc.flags for doc in docs)]).astype(np.uint8),
                                doc_tokens),
                "passage_tokens": (ends, of_doc),
                "passage_starts": (passages + np.cumsum(of_doc), np.ones(len(docs), np.int64)),
                "live_passage_doc": (d + before + doc_of_passage, of_doc),
                "live_token_passage": ((token_passage + p).astype(base.token_passage.dtype), doc_tokens),
                "live_passage_tokens": (n + ends, of_doc),
                "kept_ids": (n + tokens + np.flatnonzero(kept).astype(np.int64), doc_kept)}
    return rows


_TOKEN_NUMBERS = {"token_passage": "live_passage_doc", "passage_tokens": "token_passage",
                  "passage_starts": "live_passage_doc", "live_passage_doc": DOCUMENTS,
                  "live_token_passage": "live_passage_doc", "live_passage_tokens": "token_passage",
                  "kept_ids": "token_passage"}
"""What ``_token_rows``' numbered columns count (``AppendedRows.of``): passages (a row of ``live_passage_doc`` each),
tokens (of ``token_passage``) or documents."""

_TOKEN_HEAD = {"passage_tokens": np.zeros(1, np.int64), "passage_starts": np.zeros(1, np.int64)}
"""The rows ``_token_rows``' columns of run ends start from (``AppendedRows.of``'s ``head``): no document's."""


def segment_columns(base: PhraseIndex, segment: Sequence[Any]) -> dict[str, np.ndarray]:
    """``_token_rows``' columns of ``segment``'s documents over ``base``: views of rows the base's snapshots share,
    each document's made once (``core.segment_log.AppendedRows``; a write joined the segment's token maps again)."""
    rows = _token_rows(base)
    if segment:
        return appended_rows(base, "tokens", segment, rows, _TOKEN_NUMBERS, _TOKEN_HEAD)
    return {**{name: col for name, (col, _) in rows((), 0, {}).items()}, **_TOKEN_HEAD}  # no rows but the heads


_MAKING = threading.Lock()


def segment_chunks(owner: Any, name: str, segment: Sequence[Any], build: Build[T]) -> tuple[Chunk[T], ...]:
    """``segment``'s chunks from the ``SegmentChunks`` ``name`` of the documents written over ``owner`` (a base, or what
    is made once a base), made at the first call and kept on it; ``build`` is given ``owner`` (``Build``)."""
    return _kept(owner, name, lambda: SegmentChunks(owner)).of(segment, build)


def appended_rows(owner: Any, name: str, segment: Sequence[Any], rows: RowsOf,
                  numbered: Mapping[str, str] | None = None, head: Mapping[str, np.ndarray] | None = None
                  ) -> dict[str, np.ndarray]:
    """``segment``'s rows from the ``AppendedRows`` ``name`` of the documents written over ``owner`` (a base), made at
    the first call and kept on it (``numbered``, ``head``: as ``AppendedRows.of``)."""
    return _kept(owner, name, AppendedRows).of(segment, rows, numbered, head)


def _kept(owner: Any, name: str, make: Callable[[], Any]) -> Any:
    with _MAKING:
        held = owner.__dict__.setdefault("_segment_log", {})
        if name not in held:
            held[name] = make()
        return held[name]
