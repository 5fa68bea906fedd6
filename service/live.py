"""Live writes in the service (``SPANSEEK_WRITES=1``): the routes' side of ``indexer.live.LiveStore``.

    SPANSEEK_WRITES=1 SPANSEEK_API_KEY=... spanseek serve --index INDEX_DIR

A write is tokenised and encoded a step at a time (about 8,000 characters, or a forward pass of ``write_chunk_tokens``
tokens). By default (``write_nice`` above 0) the steps run in a thread of their own at that lower CPU priority,
beside search batches: the kernel gives searches the cores first and the write what is left, so a searching client
does not wait behind a step and writes still finish. With ``write_nice`` 0 they run in the encoder's thread (the
micro-batcher's pool), so search batches run between the steps rather than wait for a whole document; the batcher
runs each step when no search needs that thread, or once it has waited ``write_wait_ms``
(``MicroBatcher.run_write_step``). Then, in the write thread, it
is logged (fsynced), applied and published: a new ``Searcher`` over the new snapshot is handed to the batcher, and
the next batch searches it. The answer comes after that, so an acknowledged write is durable and searchable (unless
that searcher cannot be made, memory say: the write, logged, is answered as written, and /info's
``writes.publish_error`` says why searches lag until the next write or merge serves a snapshot holding it). A
merge runs in its own thread when one is due (the segment, the log or the base's deleted documents past their
``merge_`` settings: ``merge_due``) or on ``POST /admin/compact``, at a lower CPU priority (``merge_nice``) so that
searches and writes keep the cores meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from spanseek.core.alias import AliasError, resolve_alias
from spanseek.core.encoding import advance
from spanseek.core.integrity import LockUnsupported
from spanseek.core.io import NO_SPACE, Document
from spanseek.core.lexical import ANALYZER
from spanseek.core.params import SearchFilter
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.core.segment import LiveIndex, searcher_over
from spanseek.core.stopping import Stopped
from spanseek.core.text import prepare_word_cuts
from spanseek.indexer.live import (
    BASES,
    FOLLOW,
    STATE,
    WAL_DIR,
    WRITER_LOCK,
    DocumentEncoder,
    HeldDocuments,
    LiveStore,
    LiveStoreError,
    default_live_dir,
    hold_live_dir,
    log_bytes,
    read_state,
)
from spanseek.service.errors import PayloadTooLarge
from spanseek.service.file_reader import FileReader
from spanseek.service.heap import settle
from spanseek.service.logs import in_this_context
from spanseek.service.metrics import ServiceMetrics
from spanseek.service.pools import JobPool
from spanseek.service.settings import Settings

log = logging.getLogger("spanseek.service")
T = TypeVar("T")
# The longest a stopping service waits for a merge under way to stop at its next step (an encoder batch of
# max_batch_tokens, a chunk of a store: about a second on 2 cores). Past it the service stops anyway, and what the
# merge wrote is removed at the next start; a longer wait would hold up a restart that a supervisor then kills.
MERGE_STOP_S = 10.0
STANDBY_POLL_S = 2.0  # how often a standby writer (writes_standby) tries the live directory's writer lock


_MADE: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_MADE_LOCK = threading.Lock()


def made_once(index: Any, name: str, make: Callable[[], T]) -> T:
    """``make()``, made once for each index (a write's snapshot is a new one) and kept while the index lives: what
    reads of the served index derive from all its documents (``name``: which such thing)."""
    with _MADE_LOCK:
        made = _MADE.get(index, {})
    if name not in made:
        value = make()
        with _MADE_LOCK:
            made = _MADE.setdefault(index, {})
            made.setdefault(name, value)
    return made[name]


def respelled_ids(index: PhraseIndex) -> Mapping[str, Sequence[str]]:
    """``core.ids.respellings`` of the ids ``index`` holds, where ``core.ids.held_id`` looks for a document held under
    a third spelling: a live snapshot's are its base's (made once a base) joined with its segment's (made once a
    snapshot), and ``LiveWrites`` makes them in the write's thread as it publishes the snapshot, so a lookup by id on
    the event loop passes over no ids; made over every id, at 1M documents, each lookup after a write took 13-52 ms
    of the loop (``core.fieldindex.JoinedFieldIndex.respelled``)."""
    return index.fields.respelled


def lower_thread_priority(increment: int, what: str = "merge") -> None:
    """Make the calling thread ``increment`` nicer (Linux schedules threads by their own niceness; the threads it
    starts from now on, such as its OpenMP workers, inherit it). Elsewhere, or when refused, it runs as it is, with a
    warning naming ``what`` runs in it."""
    if increment <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment))
    except OSError as e:
        log.warning("could not lower the CPU priority of the %s (%s); it runs at the service's", what, e)


def live_dir_of(settings: Settings) -> Path:
    """The live directory: ``live_dir``, else the index path with ``.live`` appended; absolute, as the served index
    path is (``service.reload``): an error that quotes it is shortened for a caller without a key (hide_paths)."""
    return (settings.live_dir or default_live_dir(settings.index)).absolute()


def live_dir_problem(live_dir: Path) -> str | None:
    """Why the live store could not write ``live_dir`` (made when missing), or None: it, its ``wal/`` or ``bases/``
    is a file or is not writable (a read-only volume), or the nearest folder above it that exists, where it would be
    made, is. ``spanseek serve`` asks before loading: the store's first write would fail the loading, a 503 on
    /ready for good."""
    if not live_dir.exists():  # a path under a file does not exist either
        folder = next(p for p in live_dir.parents if p.exists())
        if not folder.is_dir():
            return f"{live_dir} cannot be made: {folder} is a file, not a directory"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{live_dir} cannot be made: {folder} is not writable"
        return None
    for path in (live_dir, live_dir / WAL_DIR, live_dir / BASES):
        if not path.exists():
            continue
        if not path.is_dir():
            return f"{path} is a file, not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{path} is not writable"
    return None


def writer_elsewhere(live_dir: Path) -> str | None:
    """Who else writes to ``live_dir``: the refusal naming the server that holds its writer lock, or None when the
    lock is free, or cannot be taken for another reason (not made yet, a read-only volume, a file system without
    locks), which the store itself reports as it loads."""
    lock = live_dir / WRITER_LOCK
    if live_dir_problem(live_dir) is not None or not live_dir.is_dir():
        return None
    if lock.exists() and not os.access(lock, os.W_OK):
        return None
    try:
        hold_live_dir(live_dir).close()
    except (LiveStoreError, LockUnsupported) as e:
        return str(e) if isinstance(e, LiveStoreError) else None
    return None


async def stand_by(settings: Settings, executor: ThreadPoolExecutor, say: Callable[[str], None]) -> None:
    """With ``writes_standby``: return once no other server holds the live directory's writer lock (at once when
    none does), meanwhile ``say``ing who does (what /ready answers) and logging it once."""
    live_dir = live_dir_of(settings)
    loop = asyncio.get_running_loop()
    waited = False
    while (holder := await loop.run_in_executor(executor, writer_elsewhere, live_dir)) is not None:
        if not waited:
            log.warning("standing by: %s; this server takes the writes over once that one stops (writes_standby)",
                        holder.split("; one server writes")[0])
            waited = True
        say(f"standing by: {holder.split('; one server writes')[0]}; writes are taken over once it stops")
        await asyncio.sleep(STANDBY_POLL_S)
    if waited:
        log.info("%s is free: this server takes the writes over", live_dir / WRITER_LOCK)


def follow_pointer_problem(index: Path) -> str | None:
    """Why a server without writes cannot start over ``index`` when it is a live directory's pointer to the merged
    base (``LIVE_DIR/merged``) that no server with writes has written yet, or that names a base removed since (a
    writer stopped, or that failed to switch it, between a merge and the removal of the base before); None
    otherwise."""
    if index.name != FOLLOW:
        return None
    start = f"start that server first (spanseek serve --writes --live-dir {index.parent}), then this one"
    if not os.path.lexists(index):
        return (f"{index}: no such file yet: a server with writes over the live directory {index.parent} writes it "
                f"as it loads, naming the base it serves; {start}")
    try:
        resolve_alias(index)
        return None
    except (AliasError, OSError):
        pass
    with contextlib.suppress(OSError, UnicodeDecodeError):
        named = (index.read_text(encoding="utf-8").splitlines() or [""])[0].strip()
        if named and not (index.parent / named).is_dir():  # (a relative or an absolute path)
            return (f"{index} names {named}, which is not there: the server with writes over {index.parent} "
                    "points it at the base it serves as it loads and after each merge (its log says when it could "
                    f"not); {start}, or restart it")
    return None


def writes_not_served(settings: Settings, index: Path) -> str | None:
    """For a server without writes over ``index``: a warning when its live directory (``live_dir_of``) holds writes
    made over that index by a server with them (its ``state.json``), which this one does not serve, when ``index``
    is a base merged in a live directory, which that server removes at its next merge, or when it serves that
    server's pointer to its base (``LIVE_DIR/merged``) without polling it; None otherwise (and with writes on).
    Only reads: a server without writes never changes a live directory."""
    if settings.writes:
        return None
    given = Path(settings.index)
    if given.name == FOLLOW and (given.parent / STATE).is_file():  # the writer's pointer to the base it serves
        return None if settings.index_poll_s > 0 else (
            f"{given} names the base the server with writes serves, and this server does not follow it as it merges "
            f"(index_poll_s 0): it serves {index} until it restarts; set index_poll_s to follow the merges")
    merged_in = index.resolve().parent.parent
    if index.resolve().parent.name == BASES and (merged_in / STATE).is_file():
        return (f"{index} is a base merged in the live directory {merged_in}: a server with writes there removes it "
                "when it merges again (this server serves on from the files it holds open, and cannot start over it "
                f"again); serve {merged_in / FOLLOW} with index_poll_s to follow the merges")
    live_dir = live_dir_of(settings)
    if not (live_dir / STATE).is_file():
        return None
    try:
        state = read_state(live_dir, index)
    except LiveStoreError:  # made over another index: nothing of this one's
        return None
    return (f"{live_dir} holds writes made over {index} by a server with writes ({int(state.get('merges', 0))} "
            f"merges, {log_bytes(live_dir):,} bytes of write log): this server has no writes and serves {index} as it is, "
            "without them; neither its searches nor GET /documents see a document written there (search the server "
            f"with writes for those; serve {live_dir / FOLLOW} with index_poll_s to follow its merges)")


def too_many_tokens(what: str, tokens: int, limit: int, setting: str, of: str, at_least: bool = False
                    ) -> PayloadTooLarge | None:
    """The 413 refusing ``what`` (a file, a write's documents) for its ``tokens`` over ``limit`` (the ``setting``;
    0: no bound), before any of it is encoded; None when within it. ``of``: what the limit bounds; ``at_least``:
    ``tokens`` are those counted before the count was stopped, not all of them."""
    if not limit or tokens <= limit:
        return None
    return PayloadTooLarge(f"{what}: {'at least ' if at_least else ''}{tokens:,} tokens, more than this server "
                           f"encodes of {of} ({setting} {limit:,}); split it, or raise the limit")


def tokens_refusal(docs: list[Document], counts: list[int], limit: int, at_least: bool = False
                   ) -> PayloadTooLarge | None:
    """``too_many_tokens`` for a write of ``docs`` holding ``counts`` tokens each (the documents counted so far, with
    ``at_least``: the count stopped there), naming its largest document."""
    if not docs or not counts:
        return None
    i = max(range(len(counts)), key=counts.__getitem__)
    what = (f"document {i} ({docs[i].id!r})" if len(docs) == 1 else
            f"the {len(docs)} documents of this write (the largest, document {i} ({docs[i].id!r}), "
            f"{'at least ' if at_least and i == len(counts) - 1 else ''}{counts[i]:,})")
    return too_many_tokens(what, sum(counts), limit, "max_write_tokens", "one write", at_least)


class LiveWrites:
    """Writes to the served index (module docstring). ``serve(searcher)`` is how a new searcher reaches the
    batcher; until the service is ready it only records the searcher (``current``)."""

    def __init__(self, settings: Settings, metrics: ServiceMetrics, base: Searcher, encoder_pool: ThreadPoolExecutor):
        self.settings = settings
        self.metrics = metrics
        self.base = base
        self.encoder_pool = encoder_pool
        self.write_pool = JobPool("spanseek-write")
        # its thread started now, at the service's CPU priority: a pool's thread takes the priority of the thread that
        # starts it, and a merge at the start (its priority lowered) may hand it the first task (``_merge``)
        self.write_pool.submit(int).result()
        # write_nice > 0: a write's steps run in a thread of their own at that lower CPU priority (and its torch
        # workers, started from it), beside search batches rather than between them
        self.step_pool = (JobPool("spanseek-write-steps",
                                  functools.partial(lower_thread_priority, settings.write_nice, "write steps"))
                          if settings.write_nice > 0 else None)
        # a stopping server names the job each still runs (service.app.ServiceState.unfinished)
        self.pools = [pool for pool in (self.write_pool, self.step_pool) if pool is not None]
        self.current: Searcher = base
        self.published_base: PhraseIndex = base.index  # the base of the snapshot served last
        self.unfollowed_base: PhraseIndex | None = None  # a merged base whose searcher could not be made (_follow_base)
        self.base_problem: str | None = None  # and why
        self._serve: Any = None  # the service's hand-over to the batcher, once it has one (attach)
        self._run_step: Callable[..., Awaitable[Any]] | None = None  # the batcher's run_write_step (attach)
        self._serving = threading.Lock()
        self.encoder = DocumentEncoder(base.encoder.model, base.index.manifest.filter_threshold,
                                       chunk_tokens=settings.write_chunk_tokens,
                                       analyzer=base.index.lexical.analyzer if base.index.lexical else ANALYZER)
        prepare_word_cuts(self.encoder.tokenizer)  # here, while loading, not in the first long paragraph's write
        self.store = LiveStore(live_dir_of(settings), Path(settings.index).absolute(), base.index, self.encoder, self._publish,
                               model=settings.model)
        metrics.live_disk.dir = self.store.dir
        # uploaded files are read in a process of their own (started at the first upload), counted by the model's
        # tokenizer as from-files counts them
        self.file_reader = FileReader(base.encoder.model.config, settings.file_nice, settings.max_file_uploads,
                                      settings.file_read_timeout_s,
                                      body_bytes=settings.max_file_uploads * settings.max_file_bytes,
                                      memory_bytes=settings.file_read_memory_bytes,
                                      keep_bytes=settings.file_read_keep_bytes)
        self.merge_thread: threading.Thread | None = None
        self._merge_over = threading.Event()  # set once the merge thread's store merge has returned
        # the result of the last merge that committed (``store.merge`` returned it): /info's unpublished_merge names
        # it while searches do not see that merge, also once a later merge's error has replaced it in state.json
        self.committed_merge: dict[str, Any] | None = None
        self.on_merged: Callable[[Searcher], None] | None = None  # the service's: describe the new base
        self.gauges()

    def attach(self, serve: Any, run_step: Callable[..., Awaitable[Any]] | None = None) -> None:
        """From now on hand every new searcher to ``serve`` (the batcher's swap), starting with the current one, and
        run each step of a write's encoding with ``run_step`` (the batcher's ``run_write_step``: in a gap between
        searches) rather than straight in the encoder's thread."""
        with self._serving:
            self._serve = serve
            self._run_step = run_step
            serve(self.current)

    async def _encoder_step(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)``, one step of a write: in the write steps' thread (``write_nice``), else in the encoder's
        thread in a gap between search batches (the batcher's ``run_write_step``); with the request's id on the lines
        it logs there."""
        fn = in_this_context(fn)
        if self.step_pool is not None:
            step = fn if self.metrics is None else self.metrics.timed_write_step(fn, time.perf_counter())
            return await asyncio.get_running_loop().run_in_executor(self.step_pool, step, *args)
        if self._run_step is not None:
            return await self._run_step(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self.encoder_pool, fn, *args)

    async def _in_write_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the write thread (the store's writes, one at a time), with the request's id on the
        lines it logs there."""
        return await asyncio.get_running_loop().run_in_executor(self.write_pool, in_this_context(fn), *args)

    def _publish(self, snapshot: LiveIndex) -> None:
        """Serve ``snapshot`` (the store calls it before it shows the snapshot's counts); over a merged base, the
        base's searcher follows it and the service describes it (``on_merged``) before those counts show the merge:
        /info never counts a merge while it describes the base before it."""
        merged = snapshot.base is not self.published_base  # a base not served before: a merge's
        if snapshot.base is not self.base.index and snapshot.base is not self.unfollowed_base:
            self._follow_base(snapshot.base)
        searcher = searcher_over(self.base, snapshot)
        respelled_ids(snapshot)  # here, in the write's thread, not by the first lookup by id on the event loop
        if self.current.ranking.found_copies:  # searches collapse copies (or the warm-up did): the snapshot's are
            searcher.ranking.copies()  # found here, in the write's thread, not by its first collapsing search
        with self._serving:
            self.current = searcher
            if self._serve is not None:
                self._serve(searcher)
            if merged and self.on_merged is not None:
                try:  # no write publishes meanwhile: what is described is what is served
                    self.on_merged(searcher)
                except Exception:
                    log.exception("describing the merged index failed; /info keeps the last description")
            self.published_base = snapshot.base
        if searcher.dense is not self.base.dense:  # another searcher serves: the base's scan copy is unused
            self.base.dense.drop_transposed()

    def _follow_base(self, base: PhraseIndex) -> None:
        """Make the searcher snapshots are made over (its settings only) follow the merged ``base``: holding the one
        before kept its index in memory, and its deleted files on disk, for the life of the process. Tried once a
        base: one that fails (memory) is said in /info (``base_searcher_error``), the log and
        ``spanseek_merged_base_searcher_failed`` until a merge gives another base (made again at each write, it
        would fail again at each, with a traceback); searches go on meanwhile, over ``base`` with the settings of the
        searcher before."""
        try:
            self.base = searcher_over(self.base, base)
            self.base_problem = self.unfollowed_base = None
        except Exception as e:
            self.base_problem, self.unfollowed_base = f"{type(e).__name__}: {e}", base
            log.exception("the merged base's searcher could not be made; searches go on over it with the searcher of "
                          "the base before, which stays in memory until a merge gives another base (not tried again "
                          "until then)")
        self.metrics.base_searcher_failed.set(self.base_problem is not None)

    def gauges(self) -> None:
        self.metrics.wal_bytes.set(self.store.wal_bytes)
        self.metrics.segment_documents.set(len(self.store.segment.docs))
        self.metrics.merge_due.set(self.merge_due())
        documents, passages, tokens = self.store.searched()
        self.metrics.index_documents.set(documents)
        self.metrics.index_passages.set(passages)
        self.metrics.index_tokens.set(tokens)

    async def upsert(self, docs: list[Document], only_new: bool = False, max_tokens: int = 0) -> dict[str, int]:
        """Tokenise, encode, log, apply and publish ``docs``; returns the passages and tokens written. ``only_new``:
        HeldDocuments when an id is held already (checked before encoding, and again as the write is logged);
        ``max_tokens`` (0: no bound): PayloadTooLarge, nothing encoded, when the documents hold more tokens."""
        t0 = time.perf_counter()
        if only_new and (held := self.store.held([d.id for d in docs])):
            raise HeldDocuments(held)
        tokenised, counts = [], []
        for doc in docs:  # tokenised a step at a time too: a megabyte at once held searches up for seconds
            steps = self.encoder.tokenize_steps(doc)
            counts.append(0)
            while not (done := await self._encoder_step(advance, steps))[0]:
                counts[-1] = done[1]  # the document's tokens so far: refused once past max_tokens, the rest untouched
                if (refusal := tokens_refusal(docs, counts, max_tokens, at_least=True)) is not None:
                    steps.close()
                    raise refusal
            tokenised.append(done[1])
            counts[-1] = sum(len(t) for t in done[1])
            if (refusal := tokens_refusal(docs, counts, max_tokens, at_least=len(counts) < len(docs))) is not None:
                raise refusal
        encoded = []
        for doc, toks in zip(docs, tokenised, strict=True):
            parts = []
            for chunk in self.encoder.chunks(doc, toks):
                steps = self.encoder.chunk_steps(chunk)  # a forward pass per turn of the encoder's thread
                while not (done := await self._encoder_step(advance, steps))[0]:
                    pass
                parts.append(done[1])
            encoded.append(self.encoder.assemble(doc, parts))
        await self._in_write_thread(self.store.upsert, docs, encoded, only_new)
        self.metrics.write_visible.observe(time.perf_counter() - t0)
        self.metrics.documents_written.inc(len(docs))
        self.gauges()
        self.maybe_merge()
        return {"documents": len(docs), "passages": sum(len(d.passages) for d in encoded),
                "tokens": sum(d.tokens for d in encoded)}

    async def delete(self, ids: list[str] | None = None, flt: SearchFilter | None = None, dry_run: bool = False
                     ) -> list[str]:
        """Delete documents by id, or every one passing ``flt``; returns the ids deleted. ``dry_run`` (with
        ``flt``): the ids it would delete, nothing deleted."""
        if flt is not None and dry_run:
            return (await self._in_write_thread(self.store.delete_where, flt, True))[0]
        if flt is not None:
            deleted, _ = await self._in_write_thread(self.store.delete_where, flt)
        else:
            deleted, _ = await self._in_write_thread(self.store.delete, ids or [])
        self.metrics.documents_deleted.inc(len(deleted))
        self.gauges()
        self.maybe_merge()
        return deleted

    def merge_due(self) -> bool:
        """Whether a background merge is due: the segment holds ``merge_tokens`` tokens, the log ``merge_log_bytes``
        bytes, or ``merge_deleted_share`` of the base's documents are tombstones (``merge_tokens`` 0: never)."""
        s, store = self.settings, self.store
        share = s.merge_deleted_share
        counts = store.view  # taken with the last snapshot, under the store's lock: read without it
        return s.merge_tokens > 0 and (
            counts["segment_tokens"] >= s.merge_tokens or 0 < s.merge_log_bytes <= store.wal_bytes
            or (share > 0 and counts["tombstones"] >= share * max(1, len(store.base.docs))))

    def maybe_merge(self, force: bool = False) -> bool:
        """Start a background merge when one is due (``merge_due``, or ``force``); returns whether one is
        running. A forced one waits for a merge thread past its merge (returning its memory, milliseconds), which
        would not merge what was written since, and starts a merge of its own."""
        thread = self.merge_thread
        if thread is not None and thread.is_alive():
            if not (force and self._merge_over.is_set()):
                return True
            thread.join()
        if not force and not self.merge_due():
            return False
        self._merge_over = threading.Event()
        self.merge_thread = threading.Thread(target=self._merge, args=(self._merge_over,), name="spanseek-merge",
                                             daemon=True)
        self.merge_thread.start()
        return True

    def _merge(self, over: threading.Event | None = None) -> None:
        lower_thread_priority(self.settings.merge_nice)
        merged = None
        t0 = time.perf_counter()
        try:
            try:
                self.metrics.merging.set(1)  # its new base takes as much disk as the base served until it commits
                merged = self.store.merge()  # None: nothing to merge
            finally:
                self.metrics.merging.set(0)
                if over is not None:
                    over.set()
            if merged is not None:
                self.committed_merge = merged
                self._count_merge("ok", t0)
        except Stopped:  # the service stops (close): logged by the store; not a failure
            pass
        except OSError as e:  # the old base and the segment keep serving; the log still holds every write
            self._count_merge("failed", t0)
            if e.errno in NO_SPACE:  # refused for want of room, tried again after each write: one line, no traceback
                log.error("merge failed; the segment keeps serving: %s", e)
            else:
                log.exception("merge failed; the segment keeps serving")
        except Exception:
            self._count_merge("failed", t0)
            log.exception("merge failed; the segment keeps serving")
        if merged is not None:  # the old base, its segment and the merge's arrays are let go: see them collected
            # (frozen at the start, a reference cycle among them was never), then freeze the merged base, which
            # full collections visited at each one from now on (96 ms a collection after a merge of the demo
            # index, 0.0 settled), and return the freed pages: one full collection a merge (service.heap), in the
            # write thread, at the service's CPU priority: a collection holds the interpreter lock, so at the merge's
            # lowered one, beside busy native threads (the encoder's, faiss's), it stopped every thread for longer
            # (1.8 s against 0.8 s for a heap of 2M objects at merge_nice 10 on 2 busy cores)
            with contextlib.suppress(RuntimeError):  # (the service stopped without waiting for the merge)
                self.write_pool.submit(settle, True).result()
        self.gauges()

    def _count_merge(self, outcome: str, t0: float) -> None:
        self.metrics.merges.labels(outcome=outcome).inc()
        self.metrics.merge_duration.labels(outcome=outcome).observe(time.perf_counter() - t0)

    def describe(self) -> dict[str, Any]:
        """/info's ``service.writes``: the store's view as of the snapshot searches see (``merges`` and
        ``last_merge`` among it), and ``unpublished_merge``: a merge committed (state.json names its base, which a
        restart serves) whose snapshot searches do not see yet, being published or failed to (``publish_error``
        says why): its count and result; null once served. Without it, a merge whose publish failed read as none
        run, while its old write log was already removed."""
        # the view first, then the commits: a merge that commits (and publishes) in between is pending as to the view
        # shown; read the other way round, a merge already served was named pending beside a view that served a later
        # one
        described = self.store.describe()
        state = self.store.state  # (replaced whole at each commit: its count and result agree)
        unpublished = None
        if int(state["merges"]) > int(described["merges"]):
            committed = state.get("last_merge")
            if committed is None or "error" in committed:  # a later merge failed: its error replaced the result
                committed = self.committed_merge
            unpublished = {"merges": int(state["merges"]), "last_merge": committed}
        return {**described, "base_searcher_error": self.base_problem, "unpublished_merge": unpublished}

    def stop_merge(self, wait_s: float = MERGE_STOP_S) -> bool:
        """Stop a merge under way and wait up to ``wait_s`` for it to end (``LiveStore.stop_merges``: its partial
        base removed, or, complete, swapped in); no merge starts after it. Returns whether no merge runs now."""
        self.store.stop_merges()
        thread = self.merge_thread
        if thread is None or not thread.is_alive():
            return True
        t0 = time.perf_counter()
        thread.join(wait_s)
        if thread.is_alive():
            log.warning("the merge did not stop within %g s; the service stops without it, and what it wrote under "
                        "%s is removed at the next start", wait_s, self.store.dir / BASES)
            return False
        log.info("the merge ended %.2f s after it was asked to stop", time.perf_counter() - t0)
        return True

    def close(self) -> None:
        self.stop_merge()
        self.file_reader.close()
        self.write_pool.shutdown(wait=True)
        if self.step_pool is not None:
            self.step_pool.shutdown(wait=True)
        self.store.close()
