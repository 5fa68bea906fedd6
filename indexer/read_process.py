"""Reading files in a process of their own whose memory is capped, so that a file whose reading needs more than the
cap is refused, naming it, rather than the kernel's OOM killer ending a process (the command's, or the server's);
and, for ``corpus from-files``, whose CPU time for each file is capped, so that a hostile file (32 MiB of Markdown
table rows: some 20 minutes) is skipped, naming it, rather than holding up the whole corpus.

    spanseek corpus from-files DOCS/ --out corpus.jsonl --read-memory-bytes 2147483648 --read-timeout-s 300

Reading takes many times a file's size (a 30 MiB HTML page of 1.5M table cells took 5.9 GB). The reading process's
data (heap and private mappings: RLIMIT_DATA, Linux) is capped (``cap_memory``); an allocation past the cap fails
with MemoryError inside the reader, and the file is refused with an error naming it and the limit
(``out_of_memory``). ``start_worker`` starts such a process, through ``start_reader``, which keeps an error starting
for the process's first answer (so a start that fails is told apart from a file the process ended on): the service's
reader of uploaded files (``service.file_reader``) and ``ReadProcess``, which ``corpus from-files`` reads its files
with, and ``sync --dry-run`` checks the files it would write with (one at a time; a file that ran out of memory, or that the process ended on, is skipped with that reason, the
process replaced, and the files after it read by the new one).

The time limit (``within_cpu``) counts the reading process's CPU time, not the clock's: a file is skipped for what it
costs to read, whatever else the machine is doing, so the same files give the same corpus on a busy machine. A
profiling timer (ITIMER_PROF) interrupts the reader between Python steps at the limit; a reader stuck inside one C
call, which no signal handler reaches, is ended by the kernel ``CPU_KILL_GRACE_S`` later (RLIMIT_CPU), and its file
skipped as one its reader stopped on.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

from spanseek.core.config import EncoderConfig
from spanseek.core.io import Document
from spanseek.indexer.chunking import TokenCounter, backbone_token_counter, word_token_counter
from spanseek.indexer.extracted import IngestError
from spanseek.indexer.ingest import IngestOptions, read_document

# the least memory cap (but 0: none): the reading process holds some 110 MB before it reads a file
MIN_READ_MEMORY = 256 << 20
# CPU seconds past its time limit after which the kernel ends a reading process whose reader the limit's signal did
# not interrupt (stuck inside one C call)
CPU_KILL_GRACE_S = 30
T = TypeVar("T")
R = TypeVar("R")  # what a ``ReadProcess``'s reader gives for a file

_count: TokenCounter | None = None  # the reading process's counter: the model's tokenizer, or one token a word
# why ``ReadProcess``'s process could not start (``start_reader``): raised by ``worker_counter`` for its first file
_start_error: Exception | None = None


class ReadOutOfMemory(IngestError):
    """A file took more memory to read than the reading process is given: its reading process is replaced."""


class ReadOutOfTime(IngestError):
    """A file took more CPU time to read than the reading process gives a file: its reading process is replaced."""


class _TimeUp(BaseException):
    """Raised inside a reader when its CPU time is up (``within_cpu``): not an Exception, so that a reader's
    ``except Exception``, which takes a library's error for a damaged file, does not take it for one."""


def cap_memory(memory_bytes: int) -> None:
    """Caps this process's data (RLIMIT_DATA: heap and private writable mappings, where the readers' trees and
    pdfminer's objects live; not the shared libraries or reserved address space an address-space cap would count), so
    an allocation past it fails (MemoryError) rather than the kernel's OOM killer ending a process, perhaps the
    server's. Never above the hard limit the process was given."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes if hard == resource.RLIM_INFINITY else
                                              min(memory_bytes, hard), hard))


def memory_cap_problem(memory_bytes: int) -> str | None:
    """What is wrong with a cap the reading process cannot start under (``--read-memory-bytes``, the service's
    ``file_read_memory_bytes``), or None."""
    if memory_bytes < 0 or 0 < memory_bytes < MIN_READ_MEMORY:
        return (f"{memory_bytes:,} bytes is too little for the process that reads files to start (it holds some "
                f"110 MB before reading one); give at least {MIN_READ_MEMORY:,}, or 0 for no limit")
    return None


def check_memory_cap(memory_bytes: int, name: str) -> None:
    """ValueError naming ``name`` (the setting or flag) for a cap the reading process cannot start under."""
    if (problem := memory_cap_problem(memory_bytes)) is not None:
        raise ValueError(f"{name}: {problem}")


def check_time_limit(seconds: float, name: str) -> None:
    """ValueError naming ``name`` (the flag) for a time limit that is negative or not a number (0: none)."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name}: {seconds:g} is no time limit; give the CPU seconds a file may take to read, more "
                         "than 0, or 0 for no limit")


def out_of_memory(name: str, who: str, setting: str) -> ReadOutOfMemory:
    """The error for file ``name`` whose reading ran past this process's cap, given by ``who`` as ``setting``."""
    return ReadOutOfMemory(f"{name}: reading it needs more memory than {who} gives the reading of a file "
                           f"({resource.getrlimit(resource.RLIMIT_DATA)[0]:,} bytes, {setting}); split it, or raise "
                           "the limit")


def start_worker(config: EncoderConfig | None, nice: int = 0, memory_bytes: int = 0, server_pid: int | None = None,
                 quiet: bool = True) -> None:
    """A reading process's start: ``nice`` lower in CPU priority, its data (heap and private mappings) capped at
    ``memory_bytes`` (0: no cap), the counter of ``config``'s tokenizer loaded (None: one token a word), and ended
    when the process ``server_pid`` that started it is gone. ``quiet``: the readers' warnings go nowhere (the
    service's come back with each file's answer), else to stderr as the command's own."""
    global _count
    if server_pid is not None:
        threading.Thread(target=_end_with_server, args=(server_pid,), name="spanseek-reader-watch",
                         daemon=True).start()
    if nice > 0 and hasattr(os, "nice"):
        try:
            os.nice(nice)
        except OSError:  # refused: it reads at the starter's priority, in its own process all the same
            pass
    if memory_bytes:
        cap_memory(memory_bytes)
    if quiet:
        logging.getLogger("spanseek.indexer").addHandler(logging.NullHandler())
        logging.getLogger("spanseek.indexer").propagate = False
    else:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _count = word_token_counter if config is None else backbone_token_counter(config)


def start_reader(config: EncoderConfig | None, memory_bytes: int, server_pid: int, nice: int = 0,
                 quiet: bool = False) -> None:
    """``start_worker`` that keeps an error starting (the model's tokenizer that cannot be loaded): ``worker_counter``
    raises it for the first file, so that ``ReadProcess``'s command fails with it on one line, and ``started_pid`` for
    the service's first question to the process, which answers the upload with it as the server's fault. Raised here,
    it would break the process pool, and each file would be skipped as one its reader stopped on."""
    global _start_error
    try:
        start_worker(config, nice, memory_bytes, server_pid, quiet=quiet)
    except Exception as e:
        _start_error = e


class ReaderNotStarted(RuntimeError):
    """The reading process could not start: why (``started_pid``)."""


def started_pid() -> int:
    """This reading process's id, once ``start_reader`` started it; ReaderNotStarted saying why it could not (the
    first line of its error, which crosses back to the server whatever its type)."""
    if _start_error is not None:
        lines = str(_start_error).strip().splitlines()
        raise ReaderNotStarted(f"{type(_start_error).__name__}: {lines[0]}" if lines else type(_start_error).__name__)
    return os.getpid()


def worker_counter() -> TokenCounter:
    """The token counter ``start_worker`` loaded in this process; the error it could not load it with."""
    if _start_error is not None:
        raise _start_error
    assert _count is not None, "the reading process starts with start_worker"
    return _count


def _end_with_server(server_pid: int, every_s: float = 1.0) -> None:
    """Ends this process once the process that started it is gone: one killed outright (kill -9, the OOM killer)
    closes nothing, and its idle reader was left running, adopted by init, for as long as the host ran. A process
    whose parent dies is handed to another (its parent id changes), whichever thread of the server started it."""
    while os.getppid() == server_pid:
        time.sleep(every_s)
    os._exit(0)


def within_cpu(seconds: float, name: str, flag: str, read: Callable[[], T]) -> T:
    """``read()``, given ``seconds`` of this process's CPU time (0: no limit); ReadOutOfTime naming the file ``name``
    and ``flag`` when it takes more. Main thread only (signal handlers run there). The profiling timer's signal
    interrupts ``read`` between Python steps; RLIMIT_CPU, ``CPU_KILL_GRACE_S`` later, ends this process (SIGXCPU's
    default action, no core file) where that signal could not (a reader stuck inside one C call)."""
    if not seconds:
        return read()
    fired = False

    def time_up(signum: int, frame: object) -> None:
        nonlocal fired
        fired = True
        raise _TimeUp

    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    used = resource.getrusage(resource.RUSAGE_SELF)
    backstop = math.ceil(used.ru_utime + used.ru_stime + seconds + CPU_KILL_GRACE_S)
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    resource.setrlimit(resource.RLIMIT_CPU, (backstop if hard == resource.RLIM_INFINITY else min(backstop, hard), hard))
    previous = signal.signal(signal.SIGPROF, time_up)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        try:
            result = read()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)  # (a signal before this line ends here as _TimeUp: caught below)
    except _TimeUp:
        pass
    finally:
        signal.signal(signal.SIGPROF, previous)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    if fired:  # (also where a reader caught _TimeUp itself, and went on or gave up)
        raise ReadOutOfTime(f"{name}: not read within {seconds:g} s of CPU time ({flag}); a damaged or hostile file, "
                            "or one too large to read in that time: split it, or raise the limit")
    return result


def read_limited(seconds: float, read: Callable[[str, str, IngestOptions], R], path: str, rel: str,
                 opts: IngestOptions, who: str = "from-files") -> R:
    """``read(path, rel, opts)`` in the reading process within ``seconds`` of its CPU time (``within_cpu``, naming
    ``--read-timeout-s``); ReadOutOfMemory naming ``rel``, ``who`` (the command) and ``--read-memory-bytes`` when it
    runs past the cap."""
    try:
        return within_cpu(seconds, rel, "--read-timeout-s", lambda: read(path, rel, opts))
    except MemoryError:
        raise out_of_memory(rel, who, "--read-memory-bytes") from None


def document_tokens(doc: Document, count: TokenCounter) -> int:
    """The model tokens of a document's passages (what encoding it costs; overlapping windows aside): what the
    service's ``max_file_tokens`` bounds, and ``sync --dry-run`` checks."""
    return sum(sum(count(text.split())) for text in doc.paragraphs)


def read_capped(path: str, rel: str, opts: IngestOptions) -> Document | str:
    """``read_document`` in the reading process, with its counter (``ReadProcess``'s reader for from-files)."""
    return read_document(Path(path), rel, worker_counter(), opts)


class _ReaderProcess(multiprocessing.context.SpawnProcess):
    """A spawned process that leaves the starting program's ``__main__`` alone: spawn runs the main module again in
    the child (as ``__mp_main__``) so that its functions can be unpickled there, which ran a user's script without an
    ``if __name__ == "__main__":`` guard a second time, in the reading process, where its own start of one failed
    (and each file was refused as one its reader stopped on). A reading process runs only functions of this package,
    so it needs nothing of ``__main__``."""

    @staticmethod
    def _Popen(process_obj: multiprocessing.process.BaseProcess) -> object:
        main = sys.modules["__main__"]
        # (spawn's preparation data names the main module from its __spec__ and __file__: a bare module has neither)
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            return multiprocessing.context.SpawnProcess._Popen(process_obj)
        finally:
            sys.modules["__main__"] = main


class ReaderContext(multiprocessing.context.SpawnContext):
    """The spawn start method, with processes that do not run ``__main__`` again (``_ReaderProcess``): the reading
    processes' (``ReadProcess``, the service's ``FileReader``)."""

    Process = _ReaderProcess


class ReadProcess(Generic[R]):
    """Reads files one at a time in a process of their own capped at ``memory_bytes`` (``start_worker``) and at
    ``timeout_s`` of CPU time a file (``within_cpu``; 0: no limit): what ``read``, the function the process runs,
    gives for a file (``read_capped``, ``ingest.iter_documents``'s ``read``: the document or the reason it is
    skipped), or the reason the file is skipped: one whose reading ran out of memory or time, or that the process
    ended on, is skipped and the process replaced for the next file. ``who``: the command the reasons name
    (``corpus from-files``, ``sync --dry-run``). A context manager (the process is stopped on leaving it)."""

    def __init__(self, config: EncoderConfig | None, memory_bytes: int, read: Callable[[str, str, IngestOptions], R],
                 timeout_s: float = 0.0, who: str = "from-files"):
        self.config, self.memory_bytes, self.timeout_s, self.who = config, memory_bytes, timeout_s, who
        self.reader = read
        self._pool: ProcessPoolExecutor | None = None

    def _start(self) -> ProcessPoolExecutor:
        # spawn, not fork: the command's threads (tqdm's monitor, a tokenizer's pool) hold locks a forked child would
        # inherit taken; the process imports only the readers and the tokenizer, not the caller's __main__
        return ProcessPoolExecutor(max_workers=1, mp_context=ReaderContext(),
                                   initializer=start_reader, initargs=(self.config, self.memory_bytes, os.getpid()))

    def read(self, path: Path, rel: str, opts: IngestOptions) -> R | str:
        """What the reader gives for ``path`` (id ``rel``), or why it is skipped; IngestError as ``read_document``."""
        if self._pool is None:
            self._pool = self._start()
        try:
            return self._pool.submit(read_limited, self.timeout_s, self.reader, str(path), rel, opts,
                                     self.who).result()
        # its heap, grown to the cap and fragmented, would fail the next files; a reader stopped anywhere by its time
        # limit may have left its libraries' state half changed
        except (ReadOutOfMemory, ReadOutOfTime) as e:
            self._replace()
            return str(e).removeprefix(f"{rel}: ")
        except BrokenProcessPool:
            self._replace()
            limits = [f"--read-memory-bytes ({self.memory_bytes:,})"] if self.memory_bytes else []
            limits += [f"--read-timeout-s ({self.timeout_s:g} s of CPU time)"] if self.timeout_s else []
            within = f" within {' or '.join(limits)}" if limits else ""
            return f"its reader stopped while reading it (a damaged file, or one too large to read{within})"

    def _replace(self) -> None:
        # waited for: its process has answered (or ended), so this is at once; a pool left to stop on its own
        # raised "Bad file descriptor" from concurrent.futures' exit hook when the command ended
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ReadProcess[R]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._pool is not None:  # interrupted: no wait for its file
            if kind is not None:  # ended, not left to finish it: a SIGTERM reaches the command's process only, and
                for process in list(self._pool._processes.values()):  # its exit waited for the reader's file
                    process.terminate()
            self._pool.shutdown(wait=kind is None, cancel_futures=True)
            self._pool = None
