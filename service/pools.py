"""The app's worker threads: pools of one thread each (the question encoder's, the search step's, the reloader's,
the writes' and their encoding steps')
that know which job their thread runs, and since when, so that a server stopping past a job can name it.

``ServiceState.pool`` makes them (service.app); ``spanseek serve`` names the jobs still running when it exits
without them (service.server.exit_past_unfinished_work).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import Context
from typing import Any, TypeVar

from spanseek.service.logs import with_request_ids

T = TypeVar("T")

# what the long jobs of the service's threads are, by the qualified name of the function run; any other job is named
# by its function's name
JOB_NAMES = {
    "default_searcher_factory": "loading the index and model",
    "LiveWrites": "replaying the write log",
    "ServiceState._warm_up": "warming up the index",
    "default_reopener": "loading an index to reload",
    "run_batch_isolated": "a search batch",
    "encode_isolated": "encoding a search batch",
    "search_isolated": "searching a batch",
    "encode_batch": "encoding a warm-up batch",
    "search_batch": "searching a warm-up batch",
    "signature_of": "reading the index's files' signature",
    "settle": "collecting freed memory",
    "advance": "a step of a write's encoding",
    "LiveStore.upsert": "writing documents",
    "LiveStore.delete": "deleting documents",
    "LiveStore.delete_where": "deleting documents by filter",
}


def job_name(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """What ``fn(*args)`` does, in words (``JOB_NAMES``), else its function's name: the function inside a partial,
    ``with_request_ids`` (a batcher's step) or a context's ``run`` (service.logs.in_this_context) is named."""
    while True:
        if isinstance(fn, functools.partial):
            args = (*fn.args, *args)
            fn = fn.func
        elif fn is with_request_ids and len(args) >= 2:
            fn, args = args[1], args[2:]
        elif getattr(fn, "__self__", None).__class__ is Context and args:  # Context.run(fn, *args)
            fn, args = args[0], args[1:]
        elif (wrapped := getattr(fn, "__wrapped__", None)) is not None:  # a wrapper (a timed write step's)
            fn = wrapped
        else:
            break
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return JOB_NAMES.get(name, name)


class JobPool(ThreadPoolExecutor):
    """A pool of one thread named ``name``, which records which job it runs (``running``); ``on_start`` is called in
    the thread when it starts."""

    def __init__(self, name: str, on_start: Callable[[], None] | None = None):
        self.thread: threading.Thread | None = None  # once started
        self.running: tuple[str, float] | None = None  # the job run now (``job_name``) and since when (monotonic)

        def started() -> None:
            self.thread = threading.current_thread()
            if on_start is not None:
                on_start()

        super().__init__(max_workers=1, thread_name_prefix=name, initializer=started)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        label = job_name(fn, args)

        def run() -> T:
            self.running = (label, time.monotonic())
            try:
                return fn(*args, **kwargs)
            finally:
                self.running = None

        return super().submit(run)

    def doing(self) -> str:
        """The thread's name and the job it runs now, with how long it has run: ``spanseek-encode_0 (loading the
        index and model, 41 s)``; the name alone when idle."""
        name = self.thread.name if self.thread is not None else str(self._thread_name_prefix)
        if (running := self.running) is None:
            return name
        return f"{name} ({running[0]}, {time.monotonic() - running[1]:.0f} s)"
