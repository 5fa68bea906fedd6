"""Reading the files written with PUT/POST /files/{name} (``service.files``): in a process of their own, at a lower
CPU priority, a bounded number at a time.

The readers (pdfminer.six's layout analysis above all) are pure Python: read in a thread of the server, a file held
the server's GIL for as long as its reading took, and every search batch's Python steps waited for it. Read in a
separate process (``FileReader``, one worker, started at the first upload and kept; ``file_nice`` lower in CPU
priority; ``indexer.read_process.start_reader``, which ``spanseek corpus from-files`` starts its reading process
with too), it takes the cores only when searches leave them. The worker counts passages with the served model's
tokenizer, as ``spanseek corpus from-files --tokenizer model`` does (``chunking.backbone_token_counter``), and the
document's tokens, so that a file over ``max_file_tokens`` is refused before it is encoded. For the bundled
backbones (and any whose ``tokenizer.json`` is what transformers builds from its config) it imports neither torch nor
transformers: it starts in about a second and holds ~68 MB (283 MB and 3.5-8 s with them), so starting it at the
first upload rather than with the service costs that upload little and a service that takes no files nothing. Other
backbones are counted with transformers' tokenizer, exact and slower to start.

A large file leaves the worker large: its allocator keeps what the reading took (4.5 GB resident after a 30 MiB HTML
page that peaked at 5.9 GB). After each read the worker hands its free memory back (``heap.give_back``: a 9.8 MiB
HTML table left it at 1,088 MB, 196 MB with it), and one still holding more than ``keep_bytes``
(``file_read_keep_bytes``) above what it held before its first file is replaced: the next upload starts a fresh one.

Two bounds, each answered 429 with a Retry-After when full: at most ``max_file_uploads`` uploads are read or encoded
at once (``slot``, taken once an upload's body is in; a body of declared length that finds them all taken is refused
before it is read, ``check_slot``), and the bodies held in memory, those still arriving included,
come to at most ``max_file_uploads`` x ``max_file_bytes`` bytes (``holding``, each body's declared length reserved
from its first byte). A client trickling its body so holds only its bytes: the uploads behind it are read meanwhile,
where a slot taken at the first byte held one until ``body_timeout_s``, and a burst of large files still queues at
its clients rather than in the server's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from spanseek.core.config import EncoderConfig
from spanseek.core.io import Document
from spanseek.indexer.extracted import IngestError
from spanseek.indexer.ingest import IngestOptions, read_document
from spanseek.indexer.read_process import (
    ReaderContext,
    ReaderNotStarted,
    ReadOutOfMemory,
    document_tokens,
    out_of_memory,
    start_reader,
    started_pid,
    worker_counter,
)
from spanseek.service.heap import give_back

log = logging.getLogger("spanseek.service")
# past twice file_read_timeout_s and this, a read the worker's own alarm did not end (a reader stuck inside a C call)
# is ended by killing the worker
KILL_GRACE_S = 30.0


class _Renamed(logging.Filter):
    """Rewrites a record whose message names the temporary copy ``path`` to name the file ``name`` instead, and keeps
    the warnings this thread's read logs (``warnings``: a PDF's pages without a text layer), for its answer."""

    def __init__(self, path: str, name: str):
        super().__init__()
        self.path, self.name = path, name
        self.thread = threading.get_ident()
        self.warnings: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.path in message:
            record.msg, record.args = message.replace(self.path, self.name), None
        if record.levelno >= logging.WARNING and record.thread == self.thread:
            self.warnings.append(record.getMessage())
        return True


@contextmanager
def _logged_as(path: Path, name: str) -> Iterator[_Renamed]:
    """While a file is read: the readers' log records (``spanseek.indexer.*``: a PDF's pages without a text layer,
    say) name the file, not its temporary copy. Records of other reads pass unchanged (their paths differ)."""
    renamed = _Renamed(str(path), name)
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
               if n == "spanseek.indexer" or n.startswith("spanseek.indexer.")]
    for logger in loggers:
        logger.addFilter(renamed)
    try:
        yield renamed
    finally:
        for logger in loggers:
            logger.removeFilter(renamed)


def read_upload(data: bytes, name: str, opts: IngestOptions, count: Any) -> tuple[Document | str, list[str]]:
    """The document of a file ``name`` whose bytes are ``data`` (``indexer.ingest.read_document`` on a temporary
    copy named like it), or the reason the reader skips it, and the warnings the reader logged (pages it could not
    read); IngestError (its text naming ``name``) when it refuses it. A reason, error, warning or log record never
    shows the temporary copy's path."""
    with tempfile.TemporaryDirectory(prefix="spanseek-upload-") as tmp:
        path = Path(tmp) / f"upload{PurePosixPath(name).suffix.lower()}"
        path.write_bytes(data)
        try:
            with _logged_as(path, name) as logged:
                doc = read_document(path, name, count, opts)
        except IngestError as e:
            raise IngestError(str(e).replace(str(path), name)) from None
        return (doc.replace(str(path), name) if isinstance(doc, str) else doc), logged.warnings


@dataclass(frozen=True)
class ReadFile:
    """What reading an upload gave: its document or the reason it was skipped, the reader's warnings, and the
    document's tokens (0 when skipped)."""

    doc: Document | str
    warnings: list[str]
    tokens: int


def _read_in_worker(data: bytes, name: str, opts: IngestOptions, timeout_s: float) -> ReadFile:
    """Read one upload in the worker, giving up (IngestError) after ``timeout_s``: the alarm interrupts a reader
    between Python steps; one stuck inside a C call is killed by the service instead (``FileReader.read``)."""
    def expired(signum: int, frame: Any) -> None:
        raise ReadTimedOut(f"{name}: not read within {timeout_s:g} s (file_read_timeout_s); a damaged or hostile "
                           "file, or one too large to read here: split it, or raise the limit")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        count = worker_counter()
        doc, warnings = read_upload(data, name, opts, count)
        return ReadFile(doc, warnings, 0 if isinstance(doc, str) else document_tokens(doc, count))
    except MemoryError:
        raise out_of_memory(name, "this server", "file_read_memory_bytes") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        give_back()  # what the file's reading freed; the rest, if large, ends this worker (FileReader.read)


def resident_bytes(pid: int) -> int | None:
    """The memory process ``pid`` has resident (Linux's /proc), or None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class ReadTimedOut(IngestError):
    """An upload took longer than ``file_read_timeout_s`` to read."""


class ReaderStopped(RuntimeError):
    """The reader process ended while it read a file (killed for its memory, or a reader crashed on it)."""


class ReaderUnavailable(RuntimeError):
    """No worker could start to read an upload: the server's fault, not the file's (503); the next upload tries
    again."""


class FileReader:
    """Reads uploads in one worker process (module docstring); ``slot()`` bounds the uploads in progress."""

    def __init__(self, config: EncoderConfig, nice: int, uploads: int, timeout_s: float = 300.0,
                 body_bytes: int = 0, memory_bytes: int = 0, keep_bytes: int = 0):
        self.config, self.nice, self.uploads, self.timeout_s = config, nice, uploads, timeout_s
        self.body_bytes = body_bytes  # the most bytes of bodies held at once (0: no bound)
        self.memory_bytes = memory_bytes  # the most data the worker may hold (0: no bound)
        self.keep_bytes = keep_bytes  # grown past this by its reads, the worker is replaced (0: never)
        self._idle: dict[ProcessPoolExecutor, int | None] = {}  # each worker's resident bytes before its first file
        # each pool's worker's process id, asked of it before its first file: the pool's own list of its processes is
        # no public API, and the pool (one worker, never replaced: it breaks instead) answers the question once
        self._pids: dict[ProcessPoolExecutor, Future[int]] = {}
        # each pool's worker process, as it was made (``_asked_pid``): one stuck starting answers no process id, and
        # is found by this to be killed
        self._processes: dict[ProcessPoolExecutor, multiprocessing.process.BaseProcess] = {}
        self.in_progress = 0
        self.bytes_held = 0
        self.seconds = 0.0  # uploads' time from their slot to their answer (a moving average): how soon a slot frees
        self._closed = False  # (``close``: no worker starts after it)
        self._pool = self._start()
        self._one = asyncio.Lock()

    def _start(self) -> ProcessPoolExecutor:
        # spawn, not fork: the server's threads (the encoder's OpenMP pool, the event loop) hold locks a forked
        # child would inherit taken; the worker imports only the readers and the tokenizer, not the server's __main__
        # (a script serving the app without a main guard)
        return ProcessPoolExecutor(max_workers=1, mp_context=ReaderContext(),
                                   initializer=start_reader,
                                   initargs=(self.config, self.memory_bytes, os.getpid(), self.nice, True))

    async def read(self, data: bytes, name: str, opts: IngestOptions) -> ReadFile:
        """The upload ``data`` read as ``name`` in the worker; IngestError as ``read_upload``, ReaderStopped when the
        worker ended on it (a new worker reads the next file), ReaderUnavailable when no worker could start (the
        next upload tries again). The readers' warnings are logged here."""
        loop = asyncio.get_running_loop()
        deadline = 2 * self.timeout_s + KILL_GRACE_S
        async with self._one:  # one file at a time in the worker: a deadline counts that file's reading only
            pool = await self._started(self._pool)
            try:
                reading = loop.run_in_executor(pool, _read_in_worker, data, name, opts, self.timeout_s)
            except BrokenProcessPool:  # the worker ended since it started (killed while idle): not this file's
                pool = await self._started(self._restart(pool))  # doing, which a new worker reads
                reading = loop.run_in_executor(pool, _read_in_worker, data, name, opts, self.timeout_s)
            try:  # the worker's own alarm ends a slow read; this deadline, later, one stuck where no alarm reaches
                read: ReadFile = await asyncio.wait_for(reading, deadline)
            except ReadOutOfMemory:  # the worker's heap, grown to the cap and fragmented, would fail the next files
                self._restart(pool)
                raise
            except BrokenProcessPool:
                self._restart(pool)
                if self._closed:  # its worker was stopped by the server's stop, not by the file
                    raise self._stopping() from None
                raise ReaderStopped(f"{name}: its reader stopped while reading it (a damaged file, or one too large "
                                    f"to read{self._memory_note()})") from None
            except TimeoutError:
                self._signal(pool, signal.SIGKILL)
                self._restart(pool)
                raise ReaderStopped(f"{name}: its reader was stopped after {deadline:g} s without an answer "
                                    "(file_read_timeout_s); a damaged or hostile file") from None
            except IngestError:  # refused (too slow, a damaged file): its reading may have grown the worker
                self._replace_if_large(pool)
                raise
            self._replace_if_large(pool)
        for warning in read.warnings:
            log.warning("%s", warning)
        return read

    async def _started(self, pool: ProcessPoolExecutor) -> ProcessPoolExecutor:
        """``pool``, its worker started: it answered its process id (asked once; this starts it), so its start
        (``start_reader``: its priority, memory cap and tokenizer) is behind it and no file's reading can be blamed
        for it. ReaderUnavailable, logged with why, when it could not start (the process could not be made, its
        tokenizer not loaded, it ended or hung while starting): the pool is replaced by one not yet started, so the
        next upload tries again; ReaderUnavailable saying so once the reader is closed (the server stopping), before or
        while the worker starts."""
        if self._closed:
            raise self._stopping()
        try:
            # shielded: an upload cancelled while it waits (its client gone) must not cancel the question, which
            # the next upload waits on
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._asked_pid(pool))),
                                   self.timeout_s + KILL_GRACE_S)
        except (BrokenProcessPool, ReaderNotStarted, OSError, TimeoutError) as e:
            if self._closed:  # (its start ended by the server's stop)
                raise self._stopping() from None
            why = (f"it did not start within {self.timeout_s + KILL_GRACE_S:g} s" if isinstance(e, TimeoutError)
                   else "it ended while starting; the server's log says why" if isinstance(e, BrokenProcessPool)
                   else str(e) or type(e).__name__)
            if isinstance(e, TimeoutError):  # stuck starting: left, it held its memory, and the service's exit
                self._signal(pool, signal.SIGKILL)  # waited for it for ever (the pool's thread joins its worker)
            self._restart(pool)
            log.error("the process that reads uploaded files could not start: %s", why)
            raise ReaderUnavailable(f"the process that reads uploaded files could not start ({why}); the server's "
                                    "fault, not the file's: send it again later, the next upload starts it anew"
                                    ) from None
        if self._closed:  # (closed while the worker started: its pool refuses the file)
            raise self._stopping()
        if self.keep_bytes and pool not in self._idle:
            pid = self._pid(pool)
            self._idle[pool] = resident_bytes(pid) if pid is not None else None
        return pool

    def _asked_pid(self, pool: ProcessPoolExecutor) -> Future[int]:
        """The answer of ``pool``'s worker to its process id (asked once; this starts the worker): ReaderNotStarted
        when its start failed; BrokenProcessPool when it ended; OSError when no process could be made."""
        if pool not in self._pids:
            before = set(multiprocessing.active_children())
            self._pids[pool] = pool.submit(started_pid)  # (a spawning pool makes its worker here, in submit)
            made = set(multiprocessing.active_children()) - before
            if len(made) == 1:  # (with a child another thread made meanwhile, neither is taken for it)
                self._processes[pool] = made.pop()
        return self._pids[pool]

    def _pid(self, pool: ProcessPoolExecutor, wait_s: float = 0.0) -> int | None:
        """The process id of ``pool``'s worker, waiting up to ``wait_s`` for its answer; None when it was not asked
        (no file yet), has not answered, or ended first."""
        asked = self._pids.get(pool)
        if asked is None:
            return None
        try:
            return asked.result(timeout=wait_s)
        except (TimeoutError, CancelledError, BrokenProcessPool):  # a worker still starting, or one that ended
            return None

    @property
    def worker_pid(self) -> int | None:
        """The process id of the worker that reads the next file, once it has been started (by a file); else None."""
        return self._pid(self._pool)

    def _signal(self, pool: ProcessPoolExecutor, signum: int, wait_s: float = 0.0) -> None:
        """Send ``signum`` to ``pool``'s worker, where it has one (``_pid``, or, still starting, the process made for
        it) that has not ended: a pool whose worker ended is broken before it reaps it (its process id then free
        for another process), and refuses work."""
        process = self._processes.get(pool)
        pid = self._pid(pool, wait_s) or (process.pid if process is not None else None)
        if pid is not None:
            try:
                pool.submit(int)  # (answered at once, or dropped as the pool stops)
            except BrokenProcessPool:
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _replace_if_large(self, pool: ProcessPoolExecutor) -> None:
        """Replace the worker of ``pool`` when its reads left it holding more than ``keep_bytes`` above what it held
        before its first file (module docstring)."""
        idle, pid = self._idle.get(pool), self._pid(pool)
        now = resident_bytes(pid) if pid is not None else None
        if self.keep_bytes and idle is not None and now is not None and now - idle > self.keep_bytes:
            log.info("replacing the file reader: its reads left it holding %s bytes more than before its first file "
                     "(file_read_keep_bytes %s)", f"{now - idle:,}", f"{self.keep_bytes:,}")
            self._restart(pool)

    def _memory_note(self) -> str:
        """What a worker that ended on a file may have run out of: a library that aborts when an allocation fails
        (rather than raising MemoryError) ends the process."""
        return f" within file_read_memory_bytes, {self.memory_bytes:,}" if self.memory_bytes else ""

    def _stopping(self) -> ReaderUnavailable:
        return ReaderUnavailable("the server is stopping and reads no more uploaded files; send the file again once "
                                 "it is back")

    def _restart(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        """The pool that replaces ``broken`` (made once, whichever read found it broken first); none once closed: a
        worker started then was never stopped, and the server's exit waited for the file it was given."""
        if self._pool is broken and not self._closed:
            self._pool = self._start()
            broken.shutdown(wait=False)
            self._idle.pop(broken, None)
            self._pids.pop(broken, None)
            self._processes.pop(broken, None)
        return self._pool

    @contextmanager
    def holding(self, nbytes: int) -> Iterator[None]:
        """``nbytes`` of an upload's body held (from its first byte to its answer) among the ``body_bytes`` all
        uploads' bodies may hold at once; ``UploadsBusy`` when they would pass it."""
        if self.body_bytes and self.bytes_held + nbytes > self.body_bytes:
            raise UploadsBusy(f"file uploads holding {self.bytes_held:,} bytes are in progress, and this one's "
                              f"{nbytes:,} would pass the {self.body_bytes:,} this server holds at once "
                              "(max_file_uploads x max_file_bytes); send it again after Retry-After",
                              self._retry_after())
        self.bytes_held += nbytes
        try:
            yield
        finally:
            self.bytes_held -= nbytes

    def _retry_after(self) -> float:
        return min(max(1.0, self.seconds), self.timeout_s)

    def check_slot(self) -> None:
        """``UploadsBusy`` (its ``retry_after`` in seconds) when every one of the ``uploads`` slots is taken; takes
        nothing. The route asks before reading a body of declared length, so that its client is not made to send
        it all to be refused."""
        if self.in_progress >= self.uploads:
            raise UploadsBusy(f"{self.uploads} file uploads are in progress, the most this server takes at once "
                              "(max_file_uploads); send it again after Retry-After", self._retry_after())

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One upload's place among the ``uploads`` read or encoded at once, taken once its body is in;
        ``UploadsBusy`` (``check_slot``) when they are all taken."""
        self.check_slot()
        self.in_progress += 1
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.in_progress -= 1
            took = time.monotonic() - t0
            self.seconds = took if self.seconds == 0 else 0.7 * self.seconds + 0.3 * took

    def close(self) -> None:
        """Stop the worker, abandoning a file it is reading: shutting down waited for that read to end (a large PDF's
        minutes, or never for a reader stuck on a file), and the service's stop with it. A worker still starting is
        given KILL_GRACE_S to say its process id. Uploads being read, and any after, are answered ReaderUnavailable
        (the server stopping): none starts a worker anew."""
        self._closed = True
        self._signal(self._pool, signal.SIGTERM, wait_s=KILL_GRACE_S)
        self._pool.shutdown(wait=True, cancel_futures=True)


class UploadsBusy(RuntimeError):
    """Every upload slot, or the memory for bodies, is taken: come back after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after
