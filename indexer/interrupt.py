"""Stop a long index job on SIGTERM as on Ctrl-C, keeping its finished shards for the same command to resume.

``index build``, ``index add`` and ``index upsert`` run their work inside ``stopped_cleanly``: ``kill``, ``docker
stop`` or a scheduler's SIGTERM then ends them as Ctrl-C does, with one line saying what the same command re-uses
and exit status 130, instead of killing them outright.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanseek.core.integrity import SHARDS
from spanseek.indexer.shards import finished_shard_sizes


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def stopped_cleanly(work: Path, resumes: str) -> Iterator[None]:
    """Stop a job encoding shards into ``work`` (``work/shards``: a build's ``--out``, an add's staging) on Ctrl-C
    or SIGTERM (what ``kill``, ``docker stop`` and a scheduler send) alike: the shard being encoded is dropped (its
    ``.tmp`` directory), the finished ones are kept, and the KeyboardInterrupt says that the same command resumes
    ``resumes`` (``the build in OUT``) and what it re-uses (the CLI prints it as ``interrupted: ...``, status 130, as a
    training run's). SIGTERM is taken only in the main thread, and not where the process was started to ignore it."""
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        yield
    except KeyboardInterrupt as e:
        for part in (work / SHARDS).glob("*.tmp"):
            shutil.rmtree(part, ignore_errors=True)
        sizes = finished_shard_sizes(work)
        how = f"stopped by {e}; " if str(e) == "SIGTERM" else ""
        kept = (f"re-using its {len(sizes)} encoded shard{'s' if len(sizes) != 1 else ''} ({sum(sizes)} passages)"
                if sizes else "no shard was finished yet")
        raise KeyboardInterrupt(f"{how}the same command resumes {resumes} ({kept})") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
