"""Pure-ASGI middleware around every request: request id (with the log context and the access line), body size and
time limits, /search latency, last-resort 500, and the early refusal of /search under overload (before its body is
read).

Pure ASGI (not BaseHTTPMiddleware) so that a client disconnect cancels the route task, which the batcher
then skips, and so that streaming bodies are counted as they arrive.
"""

from __future__ import annotations

import asyncio
import codecs
import re
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from fastapi import HTTPException
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spanseek.service.errors import (
    BadRequest,
    Overloaded,
    UnsupportedMediaType,
    error_response,
    error_type_of,
    quoted,
    shortened,
)
from spanseek.service.fairness import FairShareBy, client_key
from spanseek.service.logs import AccessLogLimiter, log_access, request_id_var
from spanseek.service.metrics import UNITS, ServiceMetrics

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# probes and the metrics scrape: an access line only when they fail
PROBE_PATHS = frozenset({"/health", "/ready", "/metrics"})
FILES_PATH = "/files/"  # the routes whose body is a file (service.files): max_file_bytes, not max_body_bytes


def _unit_label(scope: Scope) -> str:
    """The unit of a /search request for metric labels (bounded cardinality: unknown values -> 'invalid'): the one
    the route found (a paging cursor's ranking's, which its request need not name), else the query string's."""
    found = scope.get("state", {}).get("unit")
    if found in UNITS:
        return found
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("unit", ["phrase"])
    return values[-1] if values[-1] in UNITS else "invalid"  # the last value: the one FastAPI reads


def keeps_alive(scope: Scope, request: Headers, response: MutableHeaders) -> bool:
    """Whether the connection stays open after this answer: HTTP/1.1, and neither the request nor the answer says
    ``Connection: close`` (the server then closes it after the answer)."""
    closing = any("close" in h.get("connection", "").lower() for h in (request, response))
    return scope.get("http_version") == "1.1" and not closing


class RequestContextMiddleware:
    """Assigns the request id, enforces ``max_body_bytes`` (``max_file_bytes`` for a file written to /files/) and
    ``body_timeout_s``, times /search and turns crashes into ErrorResponse. With ``keep_alive_s``, an answer on a
    connection kept open says how long the server keeps it idle (``Keep-Alive: timeout=N``), so a client that reads
    the header gives the connection up before the server closes it instead of racing the close."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, metrics: ServiceMetrics,
                 on_error: Callable[[str, Scope], Any] | None = None, body_timeout_s: float | None = None,
                 access_log_per_s: float = 0.0, max_file_bytes: int | None = None, keep_alive_s: int | None = None):
        self.app = app
        self.keep_alive = None if keep_alive_s is None else f"timeout={keep_alive_s}"
        self.max_body_bytes = max_body_bytes
        self.max_file_bytes = max_body_bytes if max_file_bytes is None else max_file_bytes
        self.body_timeout_s = body_timeout_s
        self.metrics = metrics
        self.on_error = on_error
        self.access_lines = AccessLogLimiter(access_log_per_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id", "")
        request_id = given if _SAFE_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)  # every line logged while serving it names it (service.logs)
        started = time.perf_counter()
        status_holder = {"status": 500, "started": False}
        try:
            await self._serve(scope, receive, send, headers, request_id, status_holder)
        finally:
            elapsed = time.perf_counter() - started
            if scope.get("path") == "/search" and scope["method"] == "POST":  # a GET's 405 is no search
                state = scope.get("state", {})  # the route's ``read``, the refusal's reason (service.errors)
                self.metrics.observe_search(_unit_label(scope), int(status_holder["status"]),
                                            bool(state.get("read", False)), elapsed, state.get("refusal"))
            status = int(status_holder["status"])
            # a refusal under overload writes no line (it is counted in spanseek_errors_total): a flood of them
            # would otherwise cost a line each; nor does a probe or scrape answered (17,000 lines a day in compose)
            quiet = status == 429 or (status < 400 and scope.get("path") in PROBE_PATHS)
            if not quiet and self.access_lines.allow():
                client = scope.get("client")
                log_access(scope["method"], scope["path"], status, elapsed * 1e3, client[0] if client else None)
            request_id_var.reset(token)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, headers: Headers, request_id: str,
                     status_holder: dict[str, Any]) -> None:
        """The request under the body limits; ``status_holder`` learns the status sent."""

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                status_holder["started"] = True
                response_headers = MutableHeaders(scope=message)
                response_headers["X-Request-ID"] = request_id
                if self.keep_alive is not None and keeps_alive(scope, headers, response_headers):
                    response_headers["Keep-Alive"] = self.keep_alive
            await send(message)

        try:
            declared = int(headers.get("content-length", "0") or 0)
        except ValueError:
            declared = 0
        limit = self.max_file_bytes if scope.get("path", "").startswith(FILES_PATH) else self.max_body_bytes
        if (refusal := framed_twice(headers) or undecodable_body(headers, declared)) is not None:
            await self._send_error(refusal, request_id, scope, receive, send_wrapper)
        elif declared > limit:
            await self._send_error(HTTPException(413, f"request body exceeds {limit} bytes"),
                                   request_id, scope, receive, send_wrapper)
        else:
            received = 0
            body_done = False
            body_deadline = None if self.body_timeout_s is None else time.monotonic() + self.body_timeout_s

            async def receive_wrapper() -> Message:  # counts chunked bodies that declare no length
                nonlocal received, body_done
                if body_done or body_deadline is None:  # after the body: waiting for a disconnect is not timed
                    message = await receive()
                else:
                    message = await self._receive_body_part(receive, body_deadline)
                if message["type"] == "http.request":
                    body_done = not message.get("more_body", False)
                    received += len(message.get("body", b""))
                    if received > limit:
                        raise HTTPException(413, f"request body exceeds {limit} bytes")
                return message

            try:
                await self.app(scope, receive_wrapper, send_wrapper)
            except Exception as exc:  # the last resort: log with request id, answer 500
                if status_holder["started"]:
                    raise
                await self._send_error(exc, request_id, scope, receive, send_wrapper)

    async def _receive_body_part(self, receive: Receive, deadline: float) -> Message:
        """The next body message, or 408 (and the connection closed) when the body is not in by ``deadline``."""
        try:
            return await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise HTTPException(408, f"the request body did not arrive within {self.body_timeout_s:g} s",
                                headers={"Connection": "close"}) from None

    async def _send_error(self, exc: BaseException, request_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        if self.on_error is not None:
            self.on_error(error_type_of(exc), scope)
        await error_response(exc, request_id)(scope, receive, send)


def framed_twice(headers: Headers) -> BadRequest | None:
    """The 400 of a request that gives its body's length two ways, Content-Length and Transfer-Encoding, answered
    with ``Connection: close``. HTTP/1.1 (RFC 9112, 6.3) lets a server refuse such a request, and has it close the
    connection after the answer either way: a proxy in front that reads the Content-Length where this server reads
    the chunks would take the rest of the body for the next request (request smuggling). uvicorn read the chunks
    and kept the connection open for more."""
    if "content-length" not in headers or "transfer-encoding" not in headers:
        return None
    return BadRequest("the request gives its body's length twice, with Content-Length and Transfer-Encoding; send "
                      "one of them", {"Connection": "close"})


# what a JSON body may declare as its charset (codec names, as ``codecs.lookup`` spells them): UTF-8 and its subset
UTF8_CHARSETS = frozenset({"utf-8", "utf-8-sig", "ascii"})


def declared_charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type value (unquoted, as given), or None when it has none."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').strip()
    return None


def undecodable_body(headers: Headers, declared: int) -> UnsupportedMediaType | None:
    """The 415 of a body this server would not read as it was sent. One with a ``Content-Encoding`` (gzip, br): read
    as it came, a compressed search was "not UTF-8 text" and a compressed file "binary" or damaged, the cause unsaid.
    JSON declared in a charset other than UTF-8 (or its subset ASCII): JSON is UTF-8 (RFC 8259) and is read as UTF-8
    whatever the header says, so a Latin-1 "é" was a 422 "not UTF-8 text", the charset unsaid, and the same client's
    ASCII queries were searched. None for a request without a body, or one sent as it is (``identity``)."""
    if not (declared or "transfer-encoding" in headers):
        return None
    coding = ", ".join(headers.getlist("content-encoding")).strip().lower()  # (two headers: one list of codings)
    if coding not in ("", "identity"):
        return UnsupportedMediaType(f"the body is sent with Content-Encoding: {shortened(coding)}, which this server "
                                    "does not decode; send it uncompressed (no Content-Encoding)",
                                    {"Accept-Encoding": "identity"})
    content_type = headers.get("content-type", "")
    media = content_type.split(";")[0].strip().lower()
    charset = declared_charset(content_type) if media == "application/json" or media.endswith("+json") else None
    if charset is None:
        return None
    try:
        codec: str | None = codecs.lookup(charset).name
    except (LookupError, ValueError):  # no such codec; a name holding a NUL
        codec = None
    if codec in UTF8_CHARSETS:
        return None
    return UnsupportedMediaType(f"the body is declared charset={quoted(charset)}; JSON is read as UTF-8 only: send it "
                                "in UTF-8, with Content-Type: application/json (no charset, or charset=utf-8)")


class SlowRefusalMiddleware:
    """Answers a refused ``POST /admin/reload`` (401, 403, 429) after ``delay_s``: a client repeating it without
    back-off then asks once per ``delay_s`` per connection instead of as fast as the server can refuse, which took
    the cores from the searches (two such clients halved the answered questions). Nothing else is delayed."""

    def __init__(self, app: ASGIApp, delay_s: float = 1.0, paths: tuple[str, ...] = ("/admin/reload",)):
        self.app = app
        self.delay_s = delay_s
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return

        async def send_after_delay(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (401, 403, 429):
                await asyncio.sleep(self.delay_s)
            await send(message)

        await self.app(scope, receive, send_after_delay)


class EarlyShedMiddleware:
    """Refuses ``POST /search`` with 429 + Retry-After before its body is read or validated when the batcher would
    refuse any request of this client now (``would_admit(client)`` raises Overloaded; service.fairness).

    Under sustained overload most requests are refused; answering them here keeps JSON parsing, schema validation
    and routing off the cores the encoder needs. Requests that pass still get the batcher's exact admission.
    A client that comes back before the ``Retry-After`` it was given and is refused again gets that 429 only once
    its ``Retry-After`` has passed (at most ``MAX_TARPIT_S``): clients that ignore it and ask again at once (a
    flood) then ask about once per ``Retry-After`` instead of as fast as the server can refuse, which took the cores
    from the searches. Clients that honour it are never held.
    Installed inside CORS (browsers can read the 429) and inside RequestContextMiddleware (request id, latency).
    """

    MAX_TARPIT_S = 10.0
    MAX_CLIENTS = 4096  # remembered Retry-After deadlines before the expired ones are dropped

    def __init__(self, app: ASGIApp, would_admit: Callable[[str], None],
                 on_error: Callable[[str, Scope], Any] | None = None,
                 fair_share_by: FairShareBy = "connection"):
        self.app = app
        self.would_admit = would_admit
        self.on_error = on_error
        self.fair_share_by: FairShareBy = fair_share_by
        self._retry_at: dict[str, float] = {}  # client -> when its last refusal said it may come back (monotonic)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/search":
            client = client_key(scope, self.fair_share_by)
            try:
                self.would_admit(client)
            except Overloaded as exc:
                if self.on_error is not None:
                    self.on_error(exc.error, scope)
                scope.setdefault("state", {})["refusal"] = exc.reason
                early = self._retry_at.get(client, 0.0) - time.monotonic()
                if early > 0:  # it ignored the Retry-After it was given: it waits it out here
                    await asyncio.sleep(min(early, self.MAX_TARPIT_S))
                self._remember(client, float(exc.headers.get("Retry-After", "1")))
                request_id = str(scope.get("state", {}).get("request_id", "-"))
                await error_response(exc, request_id)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _remember(self, client: str, retry_after: float) -> None:
        now = time.monotonic()
        if len(self._retry_at) >= self.MAX_CLIENTS:
            self._retry_at = {c: t for c, t in self._retry_at.items() if t > now}
            if len(self._retry_at) >= self.MAX_CLIENTS:  # that many clients told to wait: start over
                self._retry_at.clear()
        self._retry_at[client] = now + retry_after
