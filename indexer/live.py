"""Live writes to a served index: documents encoded into a segment, logged before they count, merged into a new base.

    SPANSEEK_WRITES=1 spanseek serve --index INDEX_DIR        # service.live drives a LiveStore

A ``LiveStore`` owns the write side of a served index (``core.segment`` is the read side):

- ``DocumentEncoder`` encodes a document as an index build does (``indexer.shards.encode_passages``), in chunks of
  passages so the service can run each chunk between two search batches;
- ``upsert`` / ``delete`` append the write to the write-ahead log (``indexer.wal``, fsynced), apply it to the
  segment and the tombstones in memory, and publish a new ``core.segment.LiveIndex``; a write is acknowledged only
  after all three, so what was acknowledged is searchable and survives a kill -9 (the log is replayed at start). A
  snapshot that cannot be published (memory) does not fail a write already logged: ``describe`` says why
  (``publish_error``) until the next write or merge publishes one;
- ``merge`` builds a new base from base + segment - tombstones with the index commands (``index delete``, ``index
  add``, ``index compact`` on a hard-linked copy of the base), checks it by opening it, and swaps it in; writes go on
  meanwhile, into a new log file, and are applied again on the new base.

The live directory (``SPANSEEK_LIVE_DIR``, default ``<index>.live``) holds ``state.json`` (the base served and the
log files to replay over it, in order; replaced atomically), ``wal/`` and ``bases/`` (merged bases), and
``writer.lock``: one store writes to a live directory, holding that lock for its life (a second is refused, naming the
first; two would write one log, and the first's merge would delete the second's acknowledged writes), and ``merged``,
a pointer file (``core.alias``) naming the base served, switched after each merge: servers without writes serve it to
follow the merges (not the writes since the last one, which only the writer serves), and ``verified.json``, each file
of the last merged base as the writer verified it (``open_verified``), which spares them checksumming it again. The
index the service was started with is never changed; ``state.json`` records the digest of its ``manifest.json`` (less
its lexical part, which ``index add-lexical`` rewrites: ``index_digest``), and a start over another index (rebuilt,
replaced, or its documents changed offline at the same path) is refused rather than serving writes, or a merged
base, made over the first. Paths in it are relative to the live directory (the index given:
none), so the index and its live directory can move together.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import json
import logging
import operator
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core.alias import AliasError, resolve_alias, switch_alias
from spanseek.core.encoding import PassageEncoder, advance, drain, pick_precision
from spanseek.core.filters import FilterError
from spanseek.core.ids import length_problem, new_id
from spanseek.core.integrity import (
    LOCK,
    LockUnsupported,
    is_scratch,
    lock_holder,
    writer_lock,
)
from spanseek.core.io import (
    CorpusError,
    Document,
    document_from_json,
    document_json,
    without_nonfinite,
    write_corpus,
    write_json_atomic,
)
from spanseek.core.lexical import ANALYZER
from spanseek.core.live_lexical import BaseTerms
from spanseek.core.model import load_tokenizer
from spanseek.core.params import SearchFilter
from spanseek.core.phrase_index import MANIFEST, PhraseIndex, doc_record
from spanseek.core.segment import EncodedDocument, LiveIndex, empty_like, live_fields, passage_terms
from spanseek.core.stopping import Stopped, checkpoint, stop_when
from spanseek.core.text import PassageTokens, tokenize_passage_steps, tokenize_passages
from spanseek.indexer.build import BuildOptions
from spanseek.indexer.compress import kept_token_ids

# (re-exported: what the service and the index commands import from here)
from spanseek.indexer.live_state import BASES as BASES
from spanseek.indexer.live_state import STATE as STATE
from spanseek.indexer.live_state import WAL_DIR as WAL_DIR
from spanseek.indexer.live_state import LiveStoreError as LiveStoreError
from spanseek.indexer.live_state import current_form
from spanseek.indexer.live_state import default_live_dir as default_live_dir
from spanseek.indexer.live_state import index_digest as index_digest
from spanseek.indexer.live_state import read_state as read_state
from spanseek.indexer.live_state import state_base as state_base
from spanseek.indexer.live_state import state_logs as state_logs
from spanseek.indexer.shards import encode_passages
from spanseek.indexer.wal import WriteAheadLog, entry_ids, read_entries

log = logging.getLogger(__name__)

WRITER_LOCK = "writer.lock"  # held by the one store that writes to the live directory; says who holds it
FOLLOW = "merged"  # a pointer file naming the base served: what servers without writes serve to follow the merges
# What the writer checksummed of the last merged base: each file's identity (inode, size, modification and change
# times) as it was before it verified them, so that a follower loading that base re-reads only the files changed since
VERIFIED = "verified.json"
# Longest the writer waits, before it verifies a merged base, for the file system's clock to tick past the base's
# last write (4 ms on ext4, up to 2 s on others): a file still in that tick is checksummed by every follower
SETTLE_WAIT_S = 2.0
# A merge encodes in forward passes of this many tokens (a build's default is 8192): about as fast on a CPU, and a
# merge asked to stop (the service stops) ends between two of them, so a pass bounds how long stopping takes.
MERGE_BATCH_TOKENS = 2048
CHUNK_TOKENS = 512  # tokens per encoding step of a write: about one search batch's time on 2 CPU cores
TOKENIZE_STEP_CHARS = 8192  # characters of paragraphs tokenised per step of a write: some 20 ms on 2 CPU cores


def corpus_json(record: dict[str, Any], passages: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A stored document (its ``docs.jsonl`` record and ``passages.jsonl`` lines) in the corpus format."""
    passages = list(passages)
    metas = [p.get("meta") or {} for p in passages]
    return document_json(Document(record["id"], record["title"], tuple(p["text"] for p in passages),
                                  record.get("meta") or {}, passage_meta=tuple(metas) if any(metas) else ()))


def document_at(index: PhraseIndex, row: int) -> dict[str, Any]:
    """Document number ``row`` of an index in the corpus format (``corpus_json``): its record and its passages, which
    ``passages.jsonl`` holds together, in document order (found by bisection)."""
    by_doc = operator.itemgetter("doc")
    first = bisect.bisect_left(index.passages, row, key=by_doc)
    last = bisect.bisect_right(index.passages, row, lo=first, key=by_doc)
    return corpus_json(index.docs[row], index.passages[first:last])


def live_row(index: PhraseIndex, doc_id: str) -> int | None:
    """The row of the live document ``doc_id`` of an index (a repeated id's last: the one an add left live), or None
    when no document that is not deleted has the id."""
    row = index.fields.number_of.get(doc_id)
    return None if row is None or bool(np.isin(row, index.deleted_docs)) else row


def indexed_document(index: PhraseIndex, doc_id: str) -> dict[str, Any] | None:
    """The live document ``doc_id`` of an index as stored (``document_at``), or None when no document that is not
    deleted has the id: GET /documents/{id} of a server without writes (``LiveStore.get`` with them)."""
    row = live_row(index, doc_id)
    return None if row is None else document_at(index, row)


class DocumentEncoder:
    """Encodes corpus documents into ``EncodedDocument`` rows exactly as ``spanseek index build`` does."""

    def __init__(self, phrase_model: Any, filter_threshold: float | None, precision: str = "auto",
                 max_batch_tokens: int = 8192, chunk_tokens: int = CHUNK_TOKENS, analyzer: str = ANALYZER):
        device = next(phrase_model.parameters()).device
        self.tokenizer = load_tokenizer(phrase_model.config)
        self.encoder = PassageEncoder(phrase_model, self.tokenizer, precision=pick_precision(precision, device),
                                      max_batch_tokens=max_batch_tokens)
        self.filter_threshold = filter_threshold
        self.chunk_tokens = chunk_tokens
        self.analyzer = analyzer  # the base's lexical analyzer: a written passage's BM25 terms are made as its

    def tokenize_steps(self, doc: Document) -> Generator[int, None, list[PassageTokens]]:
        """The document's passages tokenised in steps of at most about ``TOKENIZE_STEP_CHARS`` characters: short
        paragraphs together, a longer one in pieces cut at word boundaries (``core.text.tokenize_passage_steps``). A
        megabyte of prose in 500 paragraphs tokenised at once held the encoder's thread for 0.7-0.8 s on 2 CPU cores,
        and one paragraph of a megabyte of punctuation 5-11 s, and searches waited behind it; a step takes 17-60 ms.
        Yields the document's tokens so far after each step but the last (a write over its bound is refused before
        the rest is tokenised). Each paragraph's tokens are those of tokenising the document in one call (a fast
        tokenizer takes each text of a batch alone)."""
        out: list[PassageTokens] = []
        group: list[str] = []
        size = counted = 0
        for i, text in enumerate(doc.paragraphs):
            if group and size + len(text) > TOKENIZE_STEP_CHARS:
                out += (toks := tokenize_passages(self.tokenizer, group))
                counted += sum(len(t) for t in toks)
                yield counted
                group, size = [], 0
            if len(text) > TOKENIZE_STEP_CHARS:  # a step a piece
                pieces = tokenize_passage_steps(self.tokenizer, text, TOKENIZE_STEP_CHARS)
                while not (piece := advance(pieces))[0]:
                    yield counted + piece[1]
                out.append(piece[1])
                counted += len(piece[1])
                if i + 1 < len(doc.paragraphs):
                    yield counted
                continue
            group.append(text)
            size += len(text)
        out += tokenize_passages(self.tokenizer, group)
        return out

    def chunks(self, doc: Document, tokens: list[PassageTokens] | None = None) -> list[list[PassageTokens]]:
        """The document's tokenised passages (``tokens``, else tokenised now) in runs of about ``chunk_tokens`` tokens
        (a passage is not split here: ``chunk_steps`` encodes a long one a window batch at a time)."""
        out: list[list[PassageTokens]] = [[]]
        size = 0
        for toks in drain(self.tokenize_steps(doc)) if tokens is None else tokens:
            if out[-1] and size + len(toks) > self.chunk_tokens:
                out.append([])
                size = 0
            out[-1].append(toks)
            size += len(toks)
        return out

    def encode_chunk(self, toks: list[PassageTokens]) -> dict[str, np.ndarray]:
        return drain(self.chunk_steps(toks))

    def chunk_steps(self, toks: list[PassageTokens]) -> Generator[int, None, dict[str, np.ndarray]]:
        """``encode_chunk`` in steps of one forward pass of at most ``chunk_tokens`` padded tokens (and at least
        one window): a passage of 60,000 tokens is some 300 short steps, not one of seconds that every search
        waits behind (``core.encoding.advance`` runs one)."""
        vecs = yield from self.encoder.encode_flat_steps(toks, self.chunk_tokens)
        return encode_passages(self.encoder, toks, vecs)

    def assemble(self, doc: Document, parts: list[dict[str, np.ndarray]]) -> EncodedDocument:
        """The document from its encoded chunks (in order)."""
        arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        n = len(arrays["vectors"])
        kept = np.zeros(n, dtype=bool)
        kept[kept_token_ids(arrays.get("filter"), self.filter_threshold, n)] = True
        passages = tuple({"para": i, "text": text, **({"meta": doc.paragraph_meta(i)} if doc.paragraph_meta(i) else {})}
                         for i, text in enumerate(doc.paragraphs))
        return EncodedDocument(doc_record(doc.id, doc.title, doc.meta), passages, arrays["vectors"],
                               arrays["offsets"], arrays["flags"], arrays["ntokens"], kept,
                               tuple(passage_terms(doc.title, list(doc.paragraphs), self.analyzer)))

    def encode(self, doc: Document) -> EncodedDocument:
        """All of a document at once (log replay, tests)."""
        return self.assemble(doc, [self.encode_chunk(c) for c in self.chunks(doc)])


@dataclass
class Segment:
    """The write state over one base: live base documents {id: row}, tombstoned base rows, and the segment's
    documents in write order (a replaced one moves to the end)."""

    base_rows: dict[str, int]
    tombstones: set[int]
    docs: dict[str, EncodedDocument]

    @classmethod
    def over(cls, base: PhraseIndex) -> Segment:
        dead = set(base.deleted_docs.tolist())
        return cls({d["id"]: i for i, d in enumerate(base.docs) if i not in dead}, set(), {})

    def upsert(self, docs: Iterable[EncodedDocument]) -> None:
        for doc in docs:
            if self.docs.pop(doc.id, None) is None and doc.id in self.base_rows:
                self.tombstones.add(self.base_rows.pop(doc.id))
            self.docs[doc.id] = doc

    def delete(self, ids: Iterable[str]) -> list[str]:
        """Delete the held documents among ``ids``; returns those deleted."""
        deleted = []
        for i in ids:
            if self.docs.pop(i, None) is not None:
                deleted.append(i)
            elif i in self.base_rows:
                self.tombstones.add(self.base_rows.pop(i))
                deleted.append(i)
        return deleted

    @property
    def tokens(self) -> int:
        return sum(d.tokens for d in self.docs.values())


class HeldDocuments(ValueError):
    """An add-only write (``LiveStore.upsert(only_new=True)``) of ids that are held already: ``ids``, nothing
    written."""

    def __init__(self, ids: list[str]):
        self.ids = ids
        super().__init__(self.message())

    def message(self, quote: Callable[[str], str] = repr) -> str:
        """What is refused: how many ids are held already, and the first five, each ``quote``d (the service's
        ``quoted`` cuts a long one short)."""
        listed = ", ".join(quote(i) for i in self.ids[:5])
        return f"{len(self.ids)} of the documents are held already: {listed}{' ...' if len(self.ids) > 5 else ''}"


class UnheldIds(ValueError):
    """A write of ids that a write takes only to replace the document held under one (an index built from a corpus
    file may hold such an id) that no live document holds (one deleted since the write looked it up is no longer
    there to replace): ids longer than a write takes (``core.ids.MAX_ID_CHARS``), and ids not spelled composed (NFC:
    ``core.ids.new_id``, the spelling every new document takes; the service makes the write again under that
    spelling, as had the delete come first); ``ids``, nothing written."""

    def __init__(self, ids: list[str]):
        self.ids = ids
        super().__init__(self.message())

    def problem(self) -> str:
        """Why the first id is refused, as a write's check of an id says it (``core.written.id_problem``) where it is
        too long to be new."""
        too_long = length_problem(self.ids[0])
        if too_long is None:
            return "is not spelled composed (NFC), as a new document's id is, and no document is held under it"
        return (f"{too_long} (a write takes a longer one only to replace the document held under it, and none is: "
                "it was deleted meanwhile)")

    def message(self, quote: Callable[[str], str] = repr) -> str:
        """What is refused: the first such id, ``quote``d (the service's ``quoted`` cuts it short), and why."""
        return f"document id {quote(self.ids[0])} {self.problem()}"


def live_dir_holder(live_dir: Path) -> str:
    """Who holds ``live_dir``'s writer lock: ``process PID``, from the kernel's table of locks where it shows it (this
    host, this container), else as the holder wrote it in the lock, ``process PID on host HOST`` (a container's own
    name in compose, whose processes the table does not show); "" where neither tells."""
    seen = lock_holder(live_dir, WRITER_LOCK)
    try:
        pid, host = (live_dir / WRITER_LOCK).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError, ValueError):
        return f"process {seen}" if seen else ""
    if host == socket.gethostname():
        return f"process {seen or pid}"
    return f"process {pid} on host {host}"


def file_identity(path: Path) -> list[int]:
    """What changes when anything writes to, replaces or renames over the file at ``path``: its inode, size, and
    modification and change times (the change time cannot be set back)."""
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def fs_clock(directory: Path) -> int:
    """The file system's clock at ``directory`` now, as it stamps files (to its tick, coarser than the system's
    clock): the change time of a file made there and removed."""
    probe = directory / f"{VERIFIED}.clock"
    probe.touch()
    try:
        return probe.stat().st_ctime_ns
    finally:
        probe.unlink(missing_ok=True)


def identities_before_reading(live_dir: Path, index_dir: Path) -> tuple[int, dict[str, list[int]]]:
    """The file system's clock, then the identity (``file_identity``) of every file of ``index_dir``: taken before
    the files are read, so that a file written after has another identity. A file changed in the clock's tick the
    identities are taken in can be written again in that tick, its identity kept: this waits (up to
    ``SETTLE_WAIT_S``) for the clock to pass every file's change time; a file still in it is checksummed again."""
    deadline = time.monotonic() + SETTLE_WAIT_S
    while True:
        clock = fs_clock(live_dir)
        identities = {p.relative_to(index_dir).as_posix(): file_identity(p) for p in index_dir.rglob("*")
                      if p.is_file()}
        if all(ident[3] < clock for ident in identities.values()) or time.monotonic() > deadline:
            return clock, identities
        time.sleep(0.01)


def open_verified(live_dir: Path, index_dir: Path) -> PhraseIndex:
    """Open the merged base ``index_dir``, its checksums verified, and write ``LIVE_DIR/verified.json``: naming it,
    each of its files' identity as it was before the checksums read it (``identities_before_reading``), and the file
    system's clock then. Best effort: without it followers verify every file."""
    try:
        clock, identities = identities_before_reading(live_dir, index_dir)
    except OSError as e:
        clock, identities = None, {}
        log.warning("%s: files could not be stat'ed (%s): servers following the merges verify every file", index_dir,
                    e)
    base = PhraseIndex(index_dir)
    if clock is not None:
        files = [MANIFEST, *(base.manifest.files or {})]
        try:
            write_json_atomic(live_dir / VERIFIED, {"base": index_dir.name, "clock": clock, "files": {
                rel: identities[rel] for rel in files if rel in identities}})
        except OSError as e:
            log.warning("%s could not be written (%s): servers following the merges verify every file",
                        live_dir / VERIFIED, e)
    return base


def unverified_files(index_dir: Path) -> list[str] | None:
    """For a base merged in a live directory: the files of its manifest that changed since the writer verified them
    (``open_verified``: missing there, another identity now, or one taken in the clock tick of the file's last
    change); None when every file is to be verified: the writer recorded none for it (not a merged base, another
    base, an unreadable record), or its manifest changed."""
    index_dir = Path(index_dir).resolve()
    if index_dir.parent.name != BASES:
        return None
    try:
        record = json.loads((index_dir.parent.parent / VERIFIED).read_text(encoding="utf-8"))
        if (record["base"] != index_dir.name or not isinstance(record["files"], dict)
                or not isinstance(record["clock"], int)):
            return None
        files = [MANIFEST, *json.loads((index_dir / MANIFEST).read_text(encoding="utf-8")).get("files", {})]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    changed = []
    for rel in files:
        try:
            ident = file_identity(index_dir / rel)
            same = record["files"].get(rel) == ident and ident[3] < record["clock"]
        except OSError:
            same = False
        if not same:
            changed.append(rel)
    return None if MANIFEST in changed else changed  # another manifest: other checksums, all to compare


def hold_live_dir(live_dir: Path) -> contextlib.ExitStack:
    """Take ``live_dir``'s writer lock (made when missing), held until the stack returned is closed (or the process
    ends, a kill -9 included); LiveStoreError naming the holder when another process (or another store of this
    one) holds it, or saying that the lock cannot be written (a read-only volume); ``core.integrity.LockUnsupported``
    where its file system locks no files. Two stores over one live directory would append to one log, each serving
    only its own writes, and the first to merge would delete the log holding the other's acknowledged writes."""
    stack = contextlib.ExitStack()
    lock = live_dir / WRITER_LOCK
    if not stack.enter_context(writer_lock(live_dir, name=WRITER_LOCK)):  # (LockUnsupported: no file locks there)
        stack.close()
        if not os.access(lock if lock.exists() else live_dir, os.W_OK):
            raise LiveStoreError(f"{lock} cannot be written (a read-only volume, or another user's file): a server "
                                 "with writes holds that lock for its life; give it a writable live directory, or "
                                 "serve without writes")
        holder = live_dir_holder(live_dir)
        raise LiveStoreError(
            f"{live_dir}: another server with writes{f' ({holder})' if holder else ''} writes to this live "
            f"directory and holds its lock ({lock}); one server writes to an index: send writes to "
            "that one and serve searches elsewhere without writes, or stop it first")
    with contextlib.suppress(OSError):  # who holds it, for a refusal to name (the kernel's table has no host)
        lock.write_text(f"{os.getpid()} {socket.gethostname()}\n", encoding="utf-8")
    return stack


def hold_index(index: str | Path, then: str = "start the server") -> contextlib.ExitStack:
    """Hold ``index``'s writer lock shared (``core.integrity.writer_lock``) until the stack returned is closed (or the
    process ends): `spanseek index add`, `upsert`, `delete` and `compact`, which take it exclusive, are refused
    meanwhile, naming this process, rather than changing the index that the writes and merges are made over (the
    next start would refuse the live directory as made over another index); a snapshot holds it so too. LiveStoreError
    naming the holder, and saying to ``then`` once it has ended, when such a change runs now; an index without a lock
    file on a read-only mount is not locked (nothing changes it through that mount), nor one on a file system without
    file locks (NFS without its lock service: a warning says the index commands are not kept out)."""
    stack = contextlib.ExitStack()
    index = Path(index).resolve()
    try:
        held = not index.is_dir() or stack.enter_context(writer_lock(index, shared=True))
    except LockUnsupported as e:
        log.warning("%s: %s; an `spanseek index` command over it is not kept out meanwhile: run none", e.filename,
                    e.strerror)
        return stack
    if not held and (index / LOCK).is_file():
        stack.close()
        pid = lock_holder(index)
        raise LiveStoreError(f"{index}: another process{f' (process {pid})' if pid is not None else ''} is changing "
                             f"this index and holds its lock ({index / LOCK}): a `spanseek index` command; wait for "
                             f"it to end, then {then}")
    return stack


def log_bytes(live_dir: Path) -> int:
    """The bytes of the write logs in ``live_dir``."""
    total = 0
    for f in (live_dir / WAL_DIR).glob("wal-*.jsonl"):
        with contextlib.suppress(FileNotFoundError):  # a merge removed it meanwhile
            total += f.stat().st_size
    return total


def last_writes(logs: Iterable[Path]) -> dict[str, int]:
    """{document id: the number of the last write that names it} over ``logs`` in order (writes numbered from 0)."""
    last: dict[str, int] = {}
    n = -1
    for n, entry in enumerate(e for path in logs for e in read_entries(path, repair=False)):
        for doc_id in entry_ids(entry):
            last[doc_id] = n
    return last


def superseded(doc: Document) -> EncodedDocument:
    """A stand-in for a logged version of ``doc`` that a later write replaces or deletes: replay applies it (so the
    base's row is tombstoned and the segment's order kept as the writes made them) without encoding it."""
    nothing = np.zeros(0, dtype=np.int32)
    return EncodedDocument({"id": doc.id}, (), np.zeros((0, 0), dtype=np.float16), nothing.reshape(0, 2),
                           nothing.astype(np.uint8), nothing, nothing.astype(bool), ())


def base_dir(live_dir: str | Path, index: str | Path) -> Path:
    """The base index a service with writes serves: the last merged one, else ``index``."""
    return state_base(live_dir, read_state(Path(live_dir), index), index)


@dataclass(frozen=True)
class ServedBase:
    """A base and what a store makes of it once to serve it: ``template``, its faiss index's trained, empty copy
    (``core.segment.empty_like``); ``terms``, its passages' BM25 term frequencies (``BaseTerms``; None without a
    lexical part); ``passages`` and ``tokens``, (documents,) each document's; ``live``, the (passages, tokens) of its
    documents not deleted: a write counts what a search sees from these and the tombstones, not from every document
    of the base. Made before the store takes the base up, so a merge makes its new base's without holding the lock
    writes take."""

    index: PhraseIndex
    template: Any
    terms: BaseTerms | None
    passages: np.ndarray
    tokens: np.ndarray
    live: tuple[int, int]

    @classmethod
    def of(cls, base: PhraseIndex) -> ServedBase:
        n_docs = len(base.docs)
        passages = np.bincount(base.passage_doc, minlength=n_docs)
        tokens = np.bincount(base.passage_doc, weights=np.diff(np.asarray(base.passage_tokens)),
                             minlength=n_docs).astype(np.int64)
        dead = np.unique(base.deleted_docs)
        return cls(base, empty_like(base.faiss), BaseTerms.of(base) if base.lexical is not None else None, passages,
                   tokens, (int(passages.sum() - passages[dead].sum()), int(tokens.sum() - tokens[dead].sum())))


class LiveStore:
    """The write side of a served index (module docstring). ``publish(LiveIndex)`` is called with every new
    snapshot, in order, before the write that made it returns; ``model`` is the model directory a merge encodes with.
    """

    def __init__(self, live_dir: str | Path, index: str | Path, base: PhraseIndex, encoder: DocumentEncoder,
                 publish: Callable[[LiveIndex], None], model: str | Path | None = None):
        self.dir = Path(live_dir)
        (self.dir / WAL_DIR).mkdir(parents=True, exist_ok=True)
        (self.dir / BASES).mkdir(exist_ok=True)
        self._held = hold_live_dir(self.dir)  # before anything is read or removed: another writer's merge is not ours
        try:
            self._held.enter_context(hold_index(index))  # the index the writes are made over stays as it is
            self._open(index, base, encoder, publish, model)
        except BaseException:
            self._held.close()
            raise

    def _open(self, index: str | Path, base: PhraseIndex, encoder: DocumentEncoder,
              publish: Callable[[LiveIndex], None], model: str | Path | None) -> None:
        # recorded from now on in the current form (the next write of state.json): read_state checked it
        self.state = current_form(read_state(self.dir, index), index)
        if state_base(self.dir, self.state, index) != base.dir.resolve():
            raise LiveStoreError(f"{self.dir / STATE} names the base {self.state['base']}, not the index opened "
                                 f"({base.dir}); open the base named by live.base_dir")
        self.encoder = encoder
        self.publish = publish
        self.model = model
        self._lock = threading.Lock()  # the log, the segment and the published snapshot change together
        self._merging = threading.Lock()
        self._stop = threading.Event()  # set when the service stops: a merge under way ends at its next step
        self._since_rotation: list[tuple[str, Any]] | None = None  # writes during a merge, applied again after it
        self.last_merge: dict[str, Any] | None = self.state.get("last_merge")  # the last merge's result, or error
        self.publish_problem: str | None = None  # why the last snapshot could not be published (_publish_committed)
        self._remove_leftovers(state_base(self.dir, self.state, index))
        self._set_base(ServedBase.of(base))
        self.segment = Segment.over(base)
        self.replayed = 0
        logs = state_logs(self.dir, self.state)
        size = sum(p.stat().st_size for p in logs if p.is_file())
        if size:
            log.info("replaying the write log: %d files, %.1f MB (every written document is encoded again)",
                     len(logs), size / 1e6)
        t0 = time.perf_counter()
        last = last_writes(logs)  # a version a later write replaces or deletes is applied, never encoded
        for path in logs:
            for entry in read_entries(path):
                encoded, emptied = self._encode_entry(entry, path, lambda doc_id: last[doc_id] == self.replayed)
                self._apply(entry, encoded)
                if emptied:  # documents an earlier version took: their writes removed what the ids held
                    log.warning("%s: %d written document(s) without text to search (invisible or control characters "
                                "only) or that this version refuses, which it does not store, are deleted: %s", path,
                                len(emptied), ", ".join(emptied[:20]))
                    self.segment.delete(emptied)
                self.replayed += 1
        if size:
            log.info("replayed %d writes in %.1f s: %d documents in the segment, %d deleted from the base",
                     self.replayed, time.perf_counter() - t0, len(self.segment.docs), len(self.segment.tombstones))
        self.wal = WriteAheadLog(logs[-1])  # made (and its name made durable) before state.json lists it
        if self.state != self._state_on_disk():  # (unchanged, it is not written: a start on a full disk serves)
            write_json_atomic(self.dir / STATE, self.state)
        self._publish()
        self._point_followers()

    def _state_on_disk(self) -> Any:
        try:
            return json.loads((self.dir / STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _point_followers(self) -> bool:
        """Point ``LIVE_DIR/merged`` (a pointer file, ``core.alias``) at the base served: a server without writes
        that serves it, polling it (``index_poll_s``), follows the merges. Whether it points there; a failure is
        logged: writes go on."""
        pointer = self.dir / FOLLOW
        try:
            try:
                if resolve_alias(pointer).target == self.base.dir.resolve():
                    return True  # (rewritten, followers polling it would load the same base again)
            except AliasError:  # it names a base removed since (a kill before it was switched): replaced, not
                pointer.unlink()  # refused as a file that is no pointer
            switch_alias(pointer, self.base.dir, pointer=True)
            return True
        except (OSError, AliasError) as e:
            log.warning("%s could not be pointed at the base served (%s); servers that follow it serve the one "
                        "before, kept until the next start", self.dir / FOLLOW, e)
            return False

    def _remove_leftovers(self, current: Path) -> None:
        """What a merge killed midway, or killed after its commit point, left: a partial base, logs and a base that
        state.json no longer names (``current``: the one it names)."""
        for path in (self.dir / BASES).iterdir():
            if path.resolve() != current:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        for path in (self.dir / WAL_DIR).glob("wal-*.jsonl"):
            if path.name not in self.state["wals"]:
                path.unlink()

    def _set_base(self, served: ServedBase) -> None:
        """Serve the base ``served`` was made of (the caller holds the lock, or no write can come yet)."""
        self.base = served.index
        self.template = served.template
        self.base_terms = served.terms
        self._base_passages, self._base_tokens, self._base_live = served.passages, served.tokens, served.live

    def _encode_entry(self, entry: dict[str, Any], where: Path, final: Callable[[str], bool] = lambda doc_id: True
                      ) -> tuple[list[EncodedDocument], list[str]]:
        """An upsert's documents encoded, those that are not ``final`` (replaced or deleted by a later write) as
        placeholders: applied as the write was (order, tombstones), then dropped by that later write; and the ids of
        documents that have no text to read now (an earlier version took invisible or control characters for
        text), or that this version refuses (metadata nested too deeply): placeholders too, to be deleted once
        applied, as this version stores no such document."""
        if entry["op"] != "upsert":
            return [], []
        out, emptied = [], []
        for raw in entry["docs"]:
            try:
                doc = document_from_json(without_nonfinite(raw), str(where))  # (older logs: NaN)
            except CorpusError as e:  # a rule an earlier version did not have (metadata nested past MAX_META_DEPTH)
                log.warning("%s: a written document this version refuses is deleted: %s", where, e)
                doc = None
            if doc is None:
                doc = Document(id=str(raw["id"]), title="", paragraphs=())
                emptied.append(doc.id)
            out.append(self.encoder.encode(doc) if final(doc.id) and doc.id not in emptied else superseded(doc))
        return out, emptied

    def _apply(self, entry: dict[str, Any], encoded: list[EncodedDocument]) -> list[str]:
        if entry["op"] == "upsert":
            self.segment.upsert(encoded)
            out = [d.id for d in encoded]
        else:
            out = self.segment.delete(entry["ids"])
        if self._since_rotation is not None:
            self._since_rotation.append((entry["op"], encoded if entry["op"] == "upsert" else out))
        return out

    def _restart_log(self) -> None:
        """With nothing in the segment and no tombstones the logs replay to the base alone: serve over a new, empty
        one (made before state.json lists it alone) and remove them. The caller holds the lock."""
        rotated = f"wal-{int(self.state['wals'][-1][4:10]) + 1:06d}.jsonl"
        fresh = WriteAheadLog(self.dir / WAL_DIR / rotated)
        old = self.state["wals"]
        state = {**self.state, "wals": [rotated]}
        try:  # held in memory only once on disk: a failed write leaves the old log listed and written to
            write_json_atomic(self.dir / STATE, state)
        except BaseException:
            fresh.close()
            raise
        self.state = state
        self.wal.close()
        self.wal = fresh
        for name in old:
            (self.dir / WAL_DIR / name).unlink(missing_ok=True)
        log.info("the write log held no document and no deletion of the base: started a new one")

    def _publish(self) -> None:
        """Publish a snapshot of the base and the segment (the caller holds the lock), then show its counts: what
        ``describe`` shows changes in one assignment once ``publish`` has returned, so a reader that sees a write or
        a merge counted is served the snapshot that holds it (and, after a merge, sees it described)."""
        seg = self.segment
        passages, tokens = self._searched()
        view = {"base": str(self.base.dir.resolve()), "documents": self.documents, "passages": passages,
                "tokens": tokens, "segment_documents": len(seg.docs), "segment_tokens": seg.tokens,
                "tombstones": len(seg.tombstones), "merges": self.state["merges"], "last_merge": self.last_merge}
        self.snapshot = LiveIndex(self.base, list(seg.docs.values()), np.asarray(sorted(seg.tombstones),
                                  dtype=np.int64), self.template, self.base_terms)
        self.publish(self.snapshot)
        self.view = view  # read without the lock (a merge holds it for seconds)
        self.publish_problem = None

    def _publish_committed(self) -> None:
        """``_publish`` after a write was logged, or a merge committed (state.json names its base): a snapshot that
        cannot be made or served (memory) undoes neither, so it does not fail them. It is logged and said in
        ``describe`` (``publish_error``) while searches see the snapshot before; the next write or merge publishes one
        with it, as a restart does. The caller holds the lock."""
        try:
            self._publish()
        except Exception as e:
            self.publish_problem = f"{type(e).__name__}: {e}"
            log.exception("a snapshot with the writes logged so far could not be published; they are kept (the log "
                          "holds them) and searches see them once a later write or merge publishes one, or after a "
                          "restart")

    def _write(self, entry: dict[str, Any], encoded: list[EncodedDocument]) -> list[str]:
        """Log, apply and publish one write (the caller holds the lock); returns the ids it affected."""
        self.wal.append(entry)
        out = self._apply(entry, encoded)
        self._publish_committed()  # logged: the write is made, whether or not its snapshot can be served now
        return out

    def upsert(self, docs: list[Document], encoded: list[EncodedDocument], only_new: bool = False) -> int:
        """Log, apply and publish new versions of documents (``encoded``: ``docs`` encoded); returns the log size.
        ``only_new``: HeldDocuments, and nothing written, when any id is held already (checked under the lock, so
        two adds of one new id cannot both succeed); UnheldIds, and nothing written, when an id longer than a write
        takes, or one not spelled composed (NFC, as new documents are), is not held (likewise under the lock, so that a
        delete after the write looked it up cannot let the write make a new document under it)."""
        with self._lock:
            if only_new and (held := self.held([d.id for d in docs])):
                raise HeldDocuments(held)
            replacing = [d.id for d in docs if length_problem(d.id) is not None or new_id(d.id) != d.id]
            replaced = set(self.held(replacing))
            if unheld := [i for i in dict.fromkeys(replacing) if i not in replaced]:
                raise UnheldIds(unheld)
            self._write({"op": "upsert", "docs": [document_json(d) for d in docs]}, encoded)
            return self.wal.size

    def held(self, ids: Iterable[str]) -> list[str]:
        """The ids among ``ids`` that a live document has (in the base, not deleted, or in the segment)."""
        return [i for i in dict.fromkeys(ids) if i in self.segment.docs or i in self.segment.base_rows]

    def delete(self, ids: list[str]) -> tuple[list[str], int]:
        """Delete the documents with these ids; returns (the ids that were held and are now deleted, log size).
        Nothing held: nothing is logged."""
        with self._lock:
            held = self.held(ids)
            return (self._write({"op": "delete", "ids": held}, []) if held else []), self.wal.size

    def delete_where(self, flt: SearchFilter, dry_run: bool = False) -> tuple[list[str], int]:
        """Delete every live document that passes ``flt`` (FilterError naming a field no document has, or when
        ``flt`` passes every document whatever they hold, ``SearchFilter.passes_everything``: no part, or only parts
        that constrain nothing, such as an empty meta or title prefix or a nested empty filter; it would delete them
        all); returns (the ids deleted, log size). ``dry_run``: the ids it would delete, nothing written."""
        if flt.passes_everything:
            raise FilterError("the filter is empty or constrains nothing (no part, an empty meta or title_prefix, a "
                              "nested filter that passes everything): it passes every document, so it would delete "
                              "them all; give it a condition (deleting a whole index is removing its directory)")
        with self._lock:  # what the documents hold now (the last snapshot lags the writes where none could be made)
            fields = live_fields(self.base, list(self.segment.docs.values()))
            allowed = fields.documents_of(flt)
            allowed[self.base.deleted_docs] = False
            allowed[sorted(self.segment.tombstones)] = False
            ids = [fields.ids[i] for i in np.flatnonzero(allowed)]
            if dry_run:
                return ids, self.wal.size
            return (self._write({"op": "delete", "ids": ids}, []) if ids else []), self.wal.size

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """The live document ``doc_id`` in the corpus format, or None."""
        with self._lock:
            doc = self.segment.docs.get(doc_id)
            if doc is not None:
                return corpus_json(doc.record, doc.passages)
            row = self.segment.base_rows.get(doc_id)
            return None if row is None else document_at(self.base, row)

    @property
    def wal_bytes(self) -> int:
        return log_bytes(self.dir)

    @property
    def documents(self) -> int:
        """The documents a search sees now: the base's live ones not deleted or replaced, and the segment's."""
        return len(self.segment.base_rows) + len(self.segment.docs)

    def searched(self) -> tuple[int, int, int]:
        """(documents, passages, tokens) a search sees now: counted with the snapshot published last, so reading
        them takes no lock (a merge holds it for seconds, and the service reads them on its event loop)."""
        view = self.view
        return view["documents"], view["passages"], view["tokens"]

    def _searched(self) -> tuple[int, int]:
        """(passages, tokens) a search sees now: the base's of its live documents (its live totals less the
        tombstoned documents', each a live base document), and the segment's."""
        dead = np.fromiter(self.segment.tombstones, dtype=np.int64, count=len(self.segment.tombstones))
        passages = self._base_live[0] - int(self._base_passages[dead].sum())
        tokens = self._base_live[1] - int(self._base_tokens[dead].sum())
        seg = self.segment.docs.values()
        return passages + sum(len(d.passages) for d in seg), tokens + self.segment.tokens

    def describe(self) -> dict[str, Any]:
        """What /info shows, as of the last snapshot published (``_publish``); no lock taken (a merge holds it for
        seconds)."""
        view = self.view
        return {**{k: v for k, v in view.items() if k != "last_merge"}, "wal_bytes": self.wal_bytes,
                "merging": self._merging.locked(), "last_merge": view["last_merge"],
                "publish_error": self.publish_problem}

    # ---- merging ------------------------------------------------------------------------------------------------

    def merge(self, opts: BuildOptions | None = None) -> dict[str, Any] | None:
        """Build a new base from base + segment - tombstones and serve it (module docstring); None when a merge is
        already running or there is nothing to merge. Blocks for the build: run it in a background thread."""
        if not self._merging.acquire(blocking=False):
            return None
        try:
            if self._stop.is_set():
                return None
            with self._lock:
                if not self.segment.docs and not self.segment.tombstones:
                    if self.wal_bytes:  # writes that cancel out (a document written, then deleted) still fill it
                        self._restart_log()
                    return None
                n = int(self.state["merges"]) + 1
                docs = [corpus_json(d.record, d.passages) for d in self.segment.docs.values()]
                dead_ids = [self.base.docs[r]["id"] for r in sorted(self.segment.tombstones)]
                rotated = f"wal-{int(self.state['wals'][-1][4:10]) + 1:06d}.jsonl"
                fresh = WriteAheadLog(self.dir / WAL_DIR / rotated)  # exists before state.json lists it
                self.state = {**self.state, "wals": [*self.state["wals"], rotated]}
                write_json_atomic(self.dir / STATE, self.state)  # the new log is replayed after the old one
                self.wal.close()
                self.wal = fresh
                self._since_rotation = []
                # the base's directory, not the base: the merge thread holding it kept the merged-away base (its
                # arrays, its BM25 terms) in memory past the swap, for as long as removing the old logs and base took
                old_dir = self.base.dir
            t0 = time.perf_counter()
            dest = self.dir / BASES / f"base-{n:06d}"
            log.info("merging %d documents and %d deletions into %s (writes go on in %s)", len(docs), len(dead_ids),
                     dest, rotated)
            with stop_when(self._stop):  # the build only: once it is complete, the swap (under a second) finishes
                build_merged(old_dir, dest, dead_ids, docs, self.model, opts)
            new_base = open_verified(self.dir, dest)  # its checksums verified: followers need not read it all again
            # what the store makes of the new base (its BM25 term tables above all: 18 s of CPU at 100,000 passages)
            # is made before the swap takes the lock: writes go on meanwhile, into the new log, and are applied again
            # below (made under the lock, every write waited for it)
            served, fresh = ServedBase.of(new_base), Segment.over(new_base)
            with self._lock:
                self._set_base(served)
                self.segment = fresh
                for op, arg in self._since_rotation or []:
                    self.segment.upsert(arg) if op == "upsert" else self.segment.delete(arg)
                self._since_rotation = None
                old_wals = self.state["wals"][:-1]
                result = {"base": str(dest.resolve()), "documents": len(docs), "deleted": len(dead_ids),
                          "seconds": round(time.perf_counter() - t0, 2)}
                self.state = {**self.state, "base": str(dest.relative_to(self.dir)), "wals": [rotated], "merges": n,
                              "last_merge": result}
                write_json_atomic(self.dir / STATE, self.state)  # the commit point: the new base, the new log
                self.last_merge = result  # shown with the snapshot's counts (merges among them)
                # before the merge shows in /info (a follower told of it and reloading finds the new base), and
                # before the old base is removed: a follower reloads from it to the new one; one still pointed at it
                # (the switch failed: a full disk) keeps serving it, so it stays until the next start removes it
                followed = self._point_followers()
                self._publish_committed()  # past the commit point: the merge is done, served or not
            for name in old_wals:
                (self.dir / WAL_DIR / name).unlink(missing_ok=True)
            if followed and old_dir.resolve().parent == (self.dir / BASES).resolve():
                shutil.rmtree(old_dir, ignore_errors=True)  # a merged base (never the index served at first)
            log.info("merged %d documents and %d deletions into %s in %.1f s", len(docs), len(dead_ids), dest,
                     result["seconds"])
            return result
        except Stopped:  # not a failure: the old base and the logs serve as before, and at the next start
            log.info("the merge stopped before its new base was complete; its partial copy is removed, and the "
                     "writes stay in the log")
            raise
        except Exception as e:
            self.last_merge = {"error": f"{type(e).__name__}: {e}"}
            with self._lock, contextlib.suppress(OSError):  # kept across restarts, as a success is
                self.view = {**self.view, "last_merge": self.last_merge}
                self.state = {**self.state, "last_merge": self.last_merge}
                write_json_atomic(self.dir / STATE, self.state)
            raise
        finally:
            self._since_rotation = None
            self._merging.release()

    def stop_merges(self) -> None:
        """Stop a merge under way at its next step (``core.stopping``: an encoder batch, a chunk of a store copied
        or added to faiss): it raises ``Stopped`` once it has removed its partial base, unless that base is complete
        already, when it finishes. No merge starts from now on."""
        self._stop.set()

    def close(self) -> None:
        self.wal.close()
        self._held.close()  # another store may write here from now on


def link_copy(src: Path, dest: Path) -> None:
    """Copy the index directory ``src`` to ``dest`` with hard links where the file system allows (the index
    commands replace files by renames, never in place, so the original is untouched), without its scratch: its
    lock above all, which linked would be one lock for both, so a change of the copy would be refused while a
    server with writes holds the original's."""
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    def scratch(folder: str, names: list[str]) -> list[str]:
        where = Path(folder).relative_to(src)
        return [name for name in names if is_scratch((where / name).as_posix())]

    shutil.copytree(src, dest, copy_function=link, ignore=scratch)


def check_room(base: Path, where: Path) -> None:
    """OSError (no space left) naming ``where`` when its disk has less room than ``base`` takes: a merge writes the
    base's stores again (vectors, faiss index, passages), so it would fail, and only after encoding every written
    document again (a merge that is due is tried after each write)."""
    need = sum(p.stat().st_size for p in base.rglob("*") if p.is_file())
    free = shutil.disk_usage(where).free
    if free < need:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: a merge writes about {need / 1e6:.0f} MB (the size "
                      f"of the base {base}), and {free / 1e6:.0f} MB are free; the segment keeps serving", str(where))


def build_merged(base: Path, dest: Path, dead_ids: list[str], docs: list[dict[str, Any]], model: str | Path | None,
                 opts: BuildOptions | None = None) -> None:
    """Write to ``dest`` the index ``base`` less the documents ``dead_ids`` plus ``docs`` (corpus format), compacted,
    with ``spanseek index delete / add / compact`` on a copy (``dest``.tmp, renamed when complete)."""
    from spanseek.indexer.add import add_documents
    from spanseek.indexer.lifecycle import compact_index, delete_documents

    opts = opts or BuildOptions(progress=False, max_batch_tokens=MERGE_BATCH_TOKENS)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    check_room(base, dest.parent)
    corpus = tmp.with_name(dest.name + ".corpus.jsonl")
    try:
        link_copy(base, tmp)
        checkpoint()  # (and within each command's long loops)
        if dead_ids:
            delete_documents(tmp, dead_ids)
        checkpoint()
        if docs:
            write_corpus(corpus, (Document(d["id"], d["title"], tuple(d["paragraphs"]), d.get("meta", {}),
                                           passage_meta=tuple(d.get("passage_meta", ()))) for d in docs))
            add_documents(tmp, corpus, model, opts)
            checkpoint()
        compact_index(tmp, opts)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        corpus.unlink(missing_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
