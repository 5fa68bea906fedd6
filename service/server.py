"""The uvicorn server of ``spanseek serve``: its config from the settings, and an HTTP/1.1 protocol with a header timeout.

uvicorn closes idle keep-alive connections but has no limit on how long a client may take to send a request's
head: a client that sends half a request line (or one header byte a second) holds its socket for ever. The
protocol below closes a connection whose request head is not complete ``header_timeout_s`` after the connection
opened or after the first byte of a new request on a kept-alive one. Bodies are timed in the ASGI middleware
(service/middleware.py, 408). ``spanseek serve`` runs ``uvicorn.Server(server_config(app, settings))``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from spanseek.service.logs import logging_config
from spanseek.service.settings import Settings

log = logging.getLogger("spanseek.service")


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline for each request head (``header_timeout_s``, a class attribute)."""

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()  # a new connection must send its first head promptly

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:  # bytes of a new request head: its deadline starts now
            self._arm_head_deadline()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete (body or response under way)
            self._disarm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.info("closing a connection from %s: no complete request head in %.1f s",
                     self.client, self.header_timeout_s)
            self.transport.close()


def protocol_with_header_timeout(seconds: float) -> type[HeaderTimeoutH11Protocol]:
    """The protocol class with its header deadline set (uvicorn instantiates the class per connection)."""
    return type("SpanseekH11Protocol", (HeaderTimeoutH11Protocol,), {"header_timeout_s": seconds})


def server_config(app: FastAPI, settings: Settings, log_level: str = "info") -> uvicorn.Config:
    """The uvicorn config ``spanseek serve`` runs: one worker, keep-alive and header timeouts and the log format from
    the settings."""
    # One process: the micro-batcher batches across all requests of its process; scale with replicas instead.
    # The logging of service.logs (text or JSON, request ids); its middleware writes the access lines, with durations.
    return uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=log_level, workers=1, timeout_graceful_shutdown=10,
        timeout_keep_alive=settings.keep_alive_s, http=protocol_with_header_timeout(settings.header_timeout_s),
        log_config=logging_config(settings.log_format, log_level), access_log=False,
    )
