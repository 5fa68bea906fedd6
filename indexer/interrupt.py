"""Stop a long index job on SIGTERM as on Ctrl-C, keeping its finished shards for the same command to resume.

``index build``, ``index add``, ``index upsert``, ``index delete`` and ``index compact`` run their work inside
``stopped_cleanly``:
``kill``, ``docker stop`` or a scheduler's SIGTERM then ends them as Ctrl-C does, with one line saying what the same
command re-uses (or, for a change already committed, that it is complete) and exit status 130, instead of killing
them outright.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spanseek.core.integrity import SHARDS


def finished_shards(work: Path) -> dict[int, int]:
    """``indexer.shards.finished_shards``, imported when a stop counts them: that module imports torch, which a
    command that only takes stops (``spanseek sync``) does not load (1.5 s of CPU)."""
    from spanseek.indexer.shards import finished_shards as finished

    return finished(work)


class Committed(KeyboardInterrupt):
    """A stop that landed after a change's commit point (its journal written): the change was rolled forward, so the
    index holds it (or gets it when next opened, ``finished`` False) and there is nothing to rerun. Its text is the
    stop's own (``SIGTERM``, or empty for Ctrl-C)."""

    def __init__(self, stop: str, finished: bool) -> None:
        super().__init__(stop)
        self.finished = finished


def _stop(signum: int, frame: Any) -> None:
    # one stop is enough: a second SIGTERM or Ctrl-C (a scheduler or a user repeating it) must not cut short the
    # first's cleanup (a committed change rolled forward would be reported as one to resume)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt("SIGTERM" if signum == signal.SIGTERM else "")  # (Ctrl-C's is empty, as Python's)


@contextlib.contextmanager
def taking_stops(handler: Callable[[int, Any], None] = _stop) -> Iterator[None]:
    """While inside, SIGTERM and Ctrl-C (SIGINT) call ``handler`` (by default: raise a KeyboardInterrupt whose text is
    ``SIGTERM`` for a SIGTERM, empty for Ctrl-C, and ignore further stops), and after, the handlers before it are put
    back. Only in the main thread (where Python takes signals), and only for a signal whose handler was set from
    Python: one the process was started to ignore stays ignored, and one whose handler was set outside Python
    (``signal.getsignal`` gives None), which could not be put back, is left alone."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, was in previous.items():
            signal.signal(signum, was)


@contextlib.contextmanager
def stopped_cleanly(job: str, work: Path | None = None) -> Iterator[None]:
    """Stop a job on Ctrl-C or SIGTERM (what ``kill``, ``docker stop`` and a scheduler send) alike, raising a
    KeyboardInterrupt that says what the same command does next (the CLI prints it as ``interrupted: ...``, status
    130, as a training run's). ``job`` names it (``the build in OUT``).

    A job encoding shards into ``work`` (``work/shards``: a build's ``--out``, an add's staging) drops the shard being
    encoded (its ``.tmp`` directory) and keeps the finished ones, which the same command resumes from; a job without
    (``compact``) was rolled back, and the same command runs it again. A change stopped after its commit point
    (``Committed``) is complete, and the line says so. SIGTERM and Ctrl-C are taken only in the main thread, and not
    where the process was started to ignore them; after the first stop, further SIGTERMs and Ctrl-Cs are ignored
    until the job has stopped."""
    with taking_stops():  # (held through the cleanup below: a second stop meanwhile is ignored, not fatal)
        try:
            yield
        except KeyboardInterrupt as e:
            how = f"stopped by {e}; " if str(e) == "SIGTERM" else ""
            if isinstance(e, Committed):
                when = "is complete" if e.finished else "is completed when the index is next opened"
                raise KeyboardInterrupt(f"{how}{job} had been committed and {when}; no rerun is needed") from None
            if work is None:
                raise KeyboardInterrupt(f"{how}{job} changed nothing; the same command runs it again") from None
            for part in (work / SHARDS).glob("*.tmp"):
                shutil.rmtree(part, ignore_errors=True)
            sizes = list(finished_shards(work).values())
            if not sizes:  # nothing to resume from: no empty shards/ left (a build's --out made for it then goes too)
                with contextlib.suppress(OSError):
                    (work / SHARDS).rmdir()
                raise KeyboardInterrupt(f"{how}{job} had finished no shard; the same command starts it again") from None
            kept = f"re-using its {len(sizes)} encoded shard{'s' if len(sizes) != 1 else ''} ({sum(sizes)} passages)"
            raise KeyboardInterrupt(f"{how}the same command resumes {job} ({kept})") from None
