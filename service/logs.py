"""The service's log lines: text or JSON, each with the request id(s) it belongs to, and one access line per request.

The request-id middleware sets ``request_id_var`` for the task that serves a request, so every line logged while
serving it (by the app, FastAPI, uvicorn) names it. The batcher runs a batch of several requests in a worker
thread: it calls its steps through ``with_request_ids``, so lines logged in the thread name every request of the
batch. A request's own work in a pool's thread (a write's steps and its log entry) is run ``in_this_context``. ``spanseek serve --log-format json`` writes one JSON object per line:

    {"level": "INFO", "logger": "spanseek.access", "message": "POST /search 200 12.3 ms", "request_id": "4f7c...",
     "request_ids": null, "method": "POST", "path": "/search", "status": 200, "duration_ms": 12.3, ...,
     "time": "2025-01-01T12:00:00.123456+00:00"}

``logging_config(fmt, level)`` is the ``logging.config.dictConfig`` of ``spanseek serve`` (it replaces uvicorn's, and
uvicorn's own access log is off: the middleware's access line has the duration and the request id).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from typing import Any, Literal, TypeVar

LogFormat = Literal["text", "json"]
T = TypeVar("T")

request_id_var: ContextVar[str | None] = ContextVar("spanseek_request_id", default=None)
batch_ids_var: ContextVar[tuple[str, ...] | None] = ContextVar("spanseek_batch_request_ids", default=None)

access_log = logging.getLogger("spanseek.access")


@contextmanager
def logging_for(request_ids: Sequence[str]) -> Iterator[None]:
    """Lines logged inside name every one of ``request_ids`` (the requests of a batch)."""
    token = batch_ids_var.set(tuple(request_ids))
    try:
        yield
    finally:
        batch_ids_var.reset(token)


def with_request_ids(request_ids: Sequence[str], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` inside ``logging_for(request_ids)``: what the batcher runs in its worker threads."""
    with logging_for(request_ids):
        return fn(*args)


def in_this_context(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` to be run in another thread inside a copy of the caller's context, so that lines it logs there name the
    request being served: ``loop.run_in_executor`` copies no context (``asyncio.to_thread`` does, but takes no pool)."""
    return functools.partial(copy_context().run, fn)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (the request being served, else None) and ``request_ids`` (the requests of the batch
    being run, else None) to every record; a batch of one request has both."""

    def filter(self, record: logging.LogRecord) -> bool:
        batch = batch_ids_var.get()
        if not hasattr(record, "request_id"):
            record.request_id = batch[0] if batch is not None and len(batch) == 1 else request_id_var.get()
        if not hasattr(record, "request_ids"):
            record.request_ids = list(batch) if batch is not None else None
        return True


# control characters as escapes: a line of the text log is one record, whatever a client put in a path or an id
# (``/x%0A2026-01-01 ... ERROR ...`` wrote a second, forged line)
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]} | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


class TextFormatter(logging.Formatter):
    """``2025-01-01 12:00:00,123 INFO spanseek.access [4f7c...] POST /search 200 12.3 ms`` (``-`` outside a
    request; the ids of a batch comma-separated); control characters in the message escaped (``\\n``, ``\\x00``)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        ids = getattr(record, "request_ids", None) or [getattr(record, "request_id", None) or "-"]
        return f"{record.asctime} {record.levelname} {record.name} [{','.join(ids)}] {record.message.translate(_ESCAPES)}"

    def usesTime(self) -> bool:  # noqa: N802
        return True


def json_formatter() -> logging.Formatter:
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, request_id, request_ids, the
    record's extra fields (the access line's method, path, status, duration_ms), and exc_info for a traceback."""
    from pythonjsonlogger.core import RESERVED_ATTRS
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter("{levelname}{name}{message}", style="{", timestamp="time",
                         rename_fields={"levelname": "level", "name": "logger"},
                         defaults={"request_id": None, "request_ids": None},
                         reserved_attrs=[*RESERVED_ATTRS, "color_message"])  # uvicorn's terminal copy of message


def logging_config(fmt: LogFormat, level: str = "info") -> dict[str, Any]:
    """The ``dictConfig`` of ``spanseek serve``: one stderr handler on the root logger, in ``fmt``, with the request
    ids; uvicorn's loggers propagate to it. The handler keeps to ``level`` too: a record propagates to the root's
    handlers whatever the root's level, so a library that sets its own logger to DEBUG (bm25s does, at import) had
    its debug lines printed at every level."""
    formatter = {"()": json_formatter} if fmt == "json" else {"()": TextFormatter}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"default": formatter},
        "handlers": {"default": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                 "formatter": "default", "filters": ["request_id"], "level": level.upper()}},
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {name: {"handlers": [], "propagate": True, "level": level.upper()}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }


class AccessLogLimiter:
    """At most ``per_s`` access lines a second (a token bucket holding one second's worth; 0 = no limit).

    Under a flood of requests the log would otherwise grow with the request rate; the lines left out are counted
    and the next line that passes is preceded by one saying how many.
    """

    def __init__(self, per_s: float, clock: Callable[[], float] = time.monotonic):
        self.per_s = per_s
        self.clock = clock
        self._tokens = max(1.0, per_s)
        self._last = clock()
        self.left_out = 0

    def allow(self) -> bool:
        """Whether a line may be written now (counts it as left out if not)."""
        if self.per_s <= 0:
            return True
        now = self.clock()
        self._tokens = min(max(1.0, self.per_s), self._tokens + (now - self._last) * self.per_s)
        self._last = now
        if self._tokens < 1.0:
            self.left_out += 1
            return False
        self._tokens -= 1.0
        if self.left_out:
            access_log.info("%d access lines left out (more than %g a second)", self.left_out, self.per_s)
            self.left_out = 0
        return True


def log_access(method: str, path: str, status: int, duration_ms: float, client: str | None) -> None:
    """The access line of one request (logged by the request-id middleware, so it carries the request id)."""
    if access_log.isEnabledFor(logging.INFO):
        access_log.info("%s %s %d %.1f ms", method, path, status, duration_ms,
                        extra={"method": method, "path": path, "status": status,
                               "duration_ms": round(duration_ms, 3), "client": client})
