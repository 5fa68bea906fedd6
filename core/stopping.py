"""Stopping a long job that runs in a thread, between two of its steps.

    with stop_when(event):   # around the job, in its thread
        job()                # its loops call checkpoint() between steps

``checkpoint()`` raises ``Stopped`` in a thread running inside ``stop_when(event)`` once ``event`` is set, and does
nothing anywhere else (a command-line build runs without one). The service's background merge of live writes runs
the index commands this way (``indexer.live.LiveStore.merge``): a shutdown sets the event, and the merge ends at
its next step, an encoder batch or a chunk of a store copied or added to faiss, removing its temporary as after
any failure.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_local = threading.local()


class Stopped(Exception):
    """A job run inside ``stop_when`` was asked to stop, and stopped at a ``checkpoint``."""


@contextlib.contextmanager
def stop_when(event: threading.Event) -> Iterator[None]:
    """Make ``checkpoint()`` in this thread raise ``Stopped`` once ``event`` is set, until the block ends."""
    previous = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = previous


def checkpoint() -> None:
    """``Stopped`` when this thread runs inside ``stop_when`` and its event is set; otherwise nothing."""
    event = getattr(_local, "event", None)
    if event is not None and event.is_set():
        raise Stopped("stopped on request")
