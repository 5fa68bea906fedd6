"""The uvicorn server of ``spanseek serve``: its config from the settings, and an HTTP/1.1 protocol that cuts off slow
and idle clients at every stage.

uvicorn closes idle keep-alive connections, but any byte a client sends cancels that timer, it has no limit on
how long a request's head or body may take, and none on how long an answer may wait for a client that does not
read it. The protocol below adds, per connection:

- a head deadline: the request head must be complete ``header_timeout_s`` after the connection opened or after the
  first byte of a new request on a kept-alive one;
- a request deadline: the body must be complete ``body_timeout_s`` (plus a second, so that the middleware's 408
  goes out first when the route reads the body) after the request's first byte, whether or not the route reads it;
  when the answer is sent before the body is in (401, 404, 413, an early 429, /health), the rest of the body may
  take at most ``LINGER_S`` more before the connection is closed;
- a write deadline: an answer that is not draining to the client (no progress for ``write_timeout_s`` after
  writing stalled or after it was sent, counting the kernel's send queue too) aborts the connection, freeing its
  buffers; an idle connection with unsent data is aborted too;
- pipelining held to the client's reading: the next pipelined request of a connection is taken only once the
  answer before it has been taken by the client (polled with a growing interval, at most ``HOLD_POLL_MAX_S``).
  Without it, each client sending many requests at once and never reading had several answers rendered before
  its buffers filled: 2,000 such connections kept the event loop busy for half a minute, every other client
  waiting.

Bodies are also timed in the ASGI middleware (service/middleware.py, 408). ``spanseek serve`` binds its address
first (``bind_sockets``: a port in use is one error line before anything loads), runs
``uvicorn.Server(server_config(app, settings)).run(sockets=...)``, and once it has stopped exits without waiting
for a load of the index still under way (``exit_past_unfinished_work``).
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import logging
import os
import shlex
import socket
import struct
import termios
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from spanseek.service.logs import logging_config
from spanseek.service.settings import Settings

log = logging.getLogger("spanseek.service")

LINGER_S = 2.0  # how long the rest of an unread body may take once the answer is sent
HOLD_POLL_S = 0.01  # first look at a held connection's unsent answer; the interval doubles up to HOLD_POLL_MAX_S
HOLD_POLL_MAX_S = 1.0
BODY_GRACE_S = 1.0  # the request deadline's margin over body_timeout_s (the middleware answers 408 at that time)
WORKER_EXIT_WAIT_S = 2.0  # how long a stopped server waits for its threads' last jobs before it exits without them


class SpanseekH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with head, request and write deadlines (class attributes, set by ``protocol_class``)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    on_cut: Callable[[str], None] | None = None  # told why each connection is cut off (ServiceMetrics.count_cut)
    on_stop: Callable[[], None] | None = None  # told when the server begins to stop (ServiceState.stopping)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._request_deadline: asyncio.TimerHandle | None = None
        self._request_deadline_at = 0.0
        self._write_deadline: asyncio.TimerHandle | None = None
        self._unsent_when_armed = 0
        self._hold: asyncio.TimerHandle | None = None  # the next pipelined request waits for the answer to drain
        self._hold_poll = HOLD_POLL_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()  # a new connection must send its first head promptly

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:  # bytes of a new request: its deadlines start now
            self._arm_head_deadline()
            if self._request_deadline is None:
                self._arm_request_deadline(self.body_timeout_s + BODY_GRACE_S)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete (body or response under way)
            self._disarm("_head_deadline")
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):  # the whole request is in
            self._disarm("_request_deadline")

    def on_response_complete(self) -> None:
        if self._pipelined() and self._unsent() > 0 and not self.transport.is_closing():
            self._arm_write_deadline()  # held until the client takes the answer; cut off if it never does
            self._hold = self.loop.call_later(self._hold_poll, self._release_hold)
            self._hold_poll = min(HOLD_POLL_MAX_S, 2 * self._hold_poll)
            return
        self._hold_poll = HOLD_POLL_S
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.SEND_BODY:  # answered before the body was read: the rest must come soon
            self._arm_request_deadline(LINGER_S)
        elif self.conn.their_state is h11.IDLE:  # the next request (pipelined or not) has not begun
            self._disarm("_request_deadline")
        if self._unsent() > 0:
            self._arm_write_deadline()

    def _pipelined(self) -> bool:
        """Whether bytes of a next request are already buffered (the client sent it before reading this answer)."""
        return bool(self.conn.trailing_data[0])

    def _release_hold(self) -> None:
        self._hold = None
        if self.transport.is_closing():
            return
        if self._write_deadline is not None and self._unsent() < self._unsent_when_armed:
            self._disarm("_write_deadline")  # the client took some: the deadline counts from now
            self._arm_write_deadline()
        self.on_response_complete()  # looks again: the next request now, or another wait

    def _unsent(self) -> int:
        """Bytes written but not yet taken by the client: the transport's buffer and the socket's send queue."""
        unsent = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                unsent += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
            except (OSError, ValueError):  # not a TCP socket (tests), or closed
                pass
        return unsent

    def shutdown(self) -> None:
        """The server begins to stop (uvicorn calls this for every open connection): the app is told first, so that
        what would hold the connection past the stop's grace time for nothing (a reload) answers at once."""
        if self.on_stop is not None:
            self.on_stop()
        super().shutdown()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._arm_write_deadline()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm("_write_deadline")

    def timeout_keep_alive_handler(self) -> None:
        if self._unsent() > 0 and not self.transport.is_closing():
            self._cut("unread_answer")  # close() would wait for a client that does not read
            return
        super().timeout_keep_alive_handler()

    def connection_lost(self, exc: Exception | None) -> None:
        for name in ("_head_deadline", "_request_deadline", "_write_deadline", "_hold"):
            self._disarm(name)
        super().connection_lost(exc)

    def _disarm(self, name: str) -> None:
        handle = getattr(self, name)
        if handle is not None:
            handle.cancel()
            setattr(self, name, None)

    def _arm_head_deadline(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _arm_request_deadline(self, seconds: float) -> None:
        """The request must be complete within ``seconds`` (never later than a deadline already set)."""
        at = self.loop.time() + seconds
        if self._request_deadline is not None:
            if self._request_deadline_at <= at:
                return
            self._request_deadline.cancel()
        self._request_deadline_at = at
        self._request_deadline = self.loop.call_at(at, self._request_timed_out)

    def _arm_write_deadline(self) -> None:
        if self._write_deadline is None:
            self._unsent_when_armed = self._unsent()
            self._write_deadline = self.loop.call_later(self.write_timeout_s, self._write_timed_out)

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("closing a connection from %s: no complete request head in %.1f s",
                      self.client, self.header_timeout_s)
            self._cut("head")

    def _request_timed_out(self) -> None:
        self._request_deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            log.debug("closing a connection from %s: its request was not complete in time", self.client)
            self._cut("request")

    def _write_timed_out(self) -> None:
        self._write_deadline = None
        unsent = self._unsent()
        if unsent == 0 or self.transport.is_closing():
            return
        if unsent < self._unsent_when_armed:  # a slow reader, but reading: another period
            self._arm_write_deadline()
            return
        log.debug("aborting a connection from %s: its answer was not read in %.1f s", self.client, self.write_timeout_s)
        self._cut("unread_answer")

    def _cut(self, reason: str) -> None:
        """Abort the connection (its buffers freed at once) and count why."""
        self.transport.abort()
        if self.on_cut is not None:
            self.on_cut(reason)


def protocol_class(settings: Settings, on_cut: Callable[[str], None] | None = None,
                   on_stop: Callable[[], None] | None = None) -> type[SpanseekH11Protocol]:
    """The protocol class with the settings' deadlines (uvicorn instantiates the class per connection); ``on_cut``
    is told the reason of each connection cut off, ``on_stop`` when the server begins to stop."""
    return type("SpanseekH11Protocol", (SpanseekH11Protocol,), {
        "header_timeout_s": settings.header_timeout_s, "body_timeout_s": settings.body_timeout_s,
        "write_timeout_s": settings.write_timeout_s, "on_cut": staticmethod(on_cut) if on_cut else None,
        "on_stop": staticmethod(on_stop) if on_stop else None,
    })


def server_config(app: FastAPI, settings: Settings, log_level: str = "info") -> uvicorn.Config:
    """The uvicorn config ``spanseek serve`` runs: one worker, the keep-alive, head, request and write deadlines, the
    proxies whose X-Forwarded-For is believed (none unless ``forwarded_allow_ips`` names them) and the log format
    from the settings."""
    service = getattr(getattr(app, "state", None), "service", None)  # the cut-off connections go to its metrics
    on_cut = service.metrics.count_cut if service is not None else None
    on_stop = service.stopping if service is not None else None
    # One process: the micro-batcher batches across all requests of its process; scale with replicas instead.
    # The logging of service.logs (text or JSON, request ids); its middleware writes the access lines, with durations.
    return uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=log_level, workers=1, timeout_graceful_shutdown=10,
        timeout_keep_alive=settings.keep_alive_s, http=protocol_class(settings, on_cut, on_stop),
        log_config=logging_config(settings.log_format, log_level), access_log=False,
        # given, so uvicorn's default (believe 127.0.0.1, or its FORWARDED_ALLOW_IPS variable) never applies
        proxy_headers=bool(settings.forwarded_allow_ips), forwarded_allow_ips=list(settings.forwarded_allow_ips),
    )


def exit_past_unfinished_work(app: object, wait_s: float = WORKER_EXIT_WAIT_S, status: int = 0) -> None:
    """Once the server has stopped: end the process at once (with ``status``) when a thread of the app still runs a job
    ``wait_s`` later (a load or reload of the index, a long search batch) that nobody waits for any more; the warning
    names each such thread with its job and how long it has run, where it said "still loading" whatever the thread
    ran. Python would otherwise wait for that thread before exiting: a server stopped while it read a large index exited only once it had read it all (a
    minute or more, far past the stop's grace time, until the orchestrator killed it). Writes are durable by then:
    the app's shutdown closed the live store. Returns when every thread has ended."""
    service = getattr(getattr(app, "state", None), "service", None)
    busy = service.unfinished(wait_s) if service is not None else []
    if busy:
        log.warning("stopped; not waiting for the jobs still running: %s; exiting", ", ".join(busy))
        # what an exit runs besides waiting for threads (os._exit runs nothing itself): the logs flushed, and the
        # spans of the last requests exported (the tracer provider's own exit handler), else lost with the process
        atexit._run_exitfuncs()
        os._exit(status)


UVICORN_DEFAULTS = {"host": "127.0.0.1", "port": 8000}  # what uvicorn listens on without --host / --port


def uvicorn_options(settings: Settings) -> dict[str, str | bool]:
    """What a server started by uvicorn itself (``uvicorn --factory spanseek.service.app:app_from_env``) needs to
    be told to do what ``server_config`` takes from the settings, by uvicorn's parameter name: the address, the
    keep-alive, and whose X-Forwarded-For is believed. uvicorn reads none of them from SPANSEEK_* variables; it takes
    each as a flag (``uvicorn_flags``) or a UVICORN_* variable (``uvicorn_environment``)."""
    options: dict[str, str | bool] = {"timeout_keep_alive": str(settings.keep_alive_s)}
    if settings.forwarded_allow_ips:
        options |= {"proxy_headers": True, "forwarded_allow_ips": ",".join(settings.forwarded_allow_ips)}
    else:  # uvicorn's own default believes 127.0.0.1 (or its FORWARDED_ALLOW_IPS variable)
        options["proxy_headers"] = False
    for name, default in UVICORN_DEFAULTS.items():
        if getattr(settings, name) != default:
            options[name] = str(getattr(settings, name))
    return options


def uvicorn_flags(settings: Settings) -> list[str]:
    """``uvicorn_options`` as uvicorn's command-line flags (``--timeout-keep-alive 75 --no-proxy-headers``)."""
    flags: list[str] = []
    for name, value in uvicorn_options(settings).items():
        flag = name.replace("_", "-")
        if isinstance(value, bool):  # an on/off pair: --proxy-headers / --no-proxy-headers
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            flags += [f"--{flag}", value]
    return flags


def uvicorn_environment(settings: Settings) -> dict[str, str]:
    """``uvicorn_options`` as the UVICORN_* variables uvicorn's command line reads where the flag is not given (its
    click prefix: ``UVICORN_TIMEOUT_KEEP_ALIVE=75 UVICORN_PROXY_HEADERS=false``), for a container's environment."""
    return {f"UVICORN_{name.upper()}": str(value).lower() if isinstance(value, bool) else value
            for name, value in uvicorn_options(settings).items()}


def started_without_serve(settings: Settings) -> str:
    """What a server started by uvicorn itself does not apply of the settings, and the command (or the environment)
    that applies what uvicorn can: one line for the log at start."""
    return ("started by uvicorn, not `spanseek serve`: uvicorn takes its own flags, not these settings. "
            f"keep_alive_s ({settings.keep_alive_s} s; uvicorn's default 5 s races clients' 5 s pools), "
            "forwarded_allow_ips, host and port hold only when given to uvicorn, as flags: uvicorn "
            f"{shlex.join(['--factory', 'spanseek.service.app:app_from_env', *uvicorn_flags(settings)])}, or as "
            f"environment variables: {' '.join(f'{k}={shlex.quote(v)}' for k, v in uvicorn_environment(settings).items())}"
            ". header_timeout_s, "
            "write_timeout_s and the connection deadline of body_timeout_s have no uvicorn flag and do not apply "
            "(a body not in by body_timeout_s is still answered 408), nor does log_format: run `spanseek serve` "
            "for them")


LISTEN_BACKLOG = 2048  # uvicorn's default backlog (it listens again with its own)


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host``:``port`` as uvicorn (asyncio's ``create_server``) would bind them, one per address
    the host resolves to (an address family this kernel lacks skipped), and listening at once, so a second server
    starting meanwhile is refused at its bind, not later inside uvicorn; a client connecting before the service runs
    waits in the backlog until it does. uvicorn serves on them. A host that does not resolve or an address that cannot be bound (in use, not
    this machine's, a privileged port) is a ValueError naming the setting, where uvicorn logged it among its start-up
    lines and exited with status 3 after starting the app."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"--host / SPANSEEK_HOST: cannot listen on {host!r}: {e.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):  # in order, each once
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # as asyncio: a family this kernel lacks (IPv6 turned off) is skipped
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio: a restart reuses the port at once
            if family == socket.AF_INET6:  # as asyncio: the IPv4 address gets its own socket
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as e:
                ip = str(address[0])
                where = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
                raise ValueError(f"--host / --port (SPANSEEK_HOST / SPANSEEK_PORT): cannot listen on {where}: "
                                 f"{(e.strerror or str(e)).lower()}") from None
            sock.listen(LISTEN_BACKLOG)  # now: a second server binding the port meanwhile is refused at its bind
        if not sockets:
            raise ValueError(f"--host / SPANSEEK_HOST: cannot listen on {host!r}: none of its addresses' families is "
                             "supported here")
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets
