"""Service errors and the one place that maps every error to an HTTP status and an ``ErrorResponse`` body.

Routes and the batcher raise the ``ServiceError`` subclasses below; FastAPI's own errors (validation,
HTTPException) and unexpected exceptions are mapped by ``error_response`` too, so every non-2xx answer
has the same shape. Unexpected errors become a generic 500 whose request id is logged with the traceback.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from spanseek.core.io import NO_SPACE
from spanseek.service.schemas import ErrorResponse

log = logging.getLogger("spanseek.service")


class ServiceError(Exception):
    """A domain error with a status code, an error type and a message safe to show to clients."""

    status: int = 500
    error: str = "internal_error"
    default_message: str = "internal error"
    default_headers: dict[str, str] = {}

    def __init_subclass__(cls, status: int | None = None, error: str | None = None, **kwargs) -> None:
        """``class Gone(ServiceError, status=410, error="gone")``: an error type is its status and its name."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if error is not None:
            cls.error = error

    def __init__(self, message: str | None = None, headers: dict[str, str] | None = None):
        self.message = message if message is not None else self.default_message
        super().__init__(self.message)
        self.headers = {**self.default_headers, **(headers or {})}


class BadRequest(ServiceError, status=400, error="bad_request"):
    """A value is out of the accepted range (top_k, nprobe, ...)."""


class ResponseTooLarge(ServiceError, status=400, error="response_too_large"):
    """The answer would exceed ``max_response_bytes`` (too many hits, queries or whole passages)."""


class Unauthorized(ServiceError, status=401, error="unauthorized"):
    """An API key is configured and the request's is missing or wrong."""

    default_message, default_headers = "missing or wrong API key", {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError, status=403, error="forbidden"):
    """The request needs a permission this server does not grant (naming an index without an API key set)."""


class NotFound(ServiceError, status=404, error="not_found"):
    """No such document (the write API); an unknown route is Starlette's own 404."""


class CursorExpired(ServiceError, status=410, error="cursor_expired"):
    """A paging cursor whose ranking this server no longer keeps (``service.cursors``): kept ``cursor_ttl_s`` after
    its last page and within ``cursor_cache_bytes``, on the replica that gave it."""

    default_message = ("this cursor's ranking is no longer kept (cursor_ttl_s after its last page, within "
                       "cursor_cache_bytes, on the server that gave it): search again for the first page")


class MethodNotAllowed(ServiceError, status=405, error="method_not_allowed"):
    """A route asked with a method it does not take: the message and ``Allow`` name every method its path takes (the
    router's own 405 named those of its first route alone: ``DELETE /documents`` was told ``Allow: PUT``)."""

    @classmethod
    def of(cls, request: Request, refused: StarletteHTTPException) -> MethodNotAllowed:
        """The 405 of ``request`` (``refused``: the router's, or a mounted app's own): the methods with which a route
        of the app takes its path; where a mount took it (the docs' static files, which it routes by path alone, any
        method), the methods its app's refusal names in ``Allow``."""
        # the path as the app's router matched it: a mount moved its prefix into the scope's root path
        scope = {**request.scope, "root_path": request.scope.get("app_root_path", request.scope.get("root_path", ""))}
        methods = [m for m in HTTP_METHODS if any(r.matches({**scope, "method": m})[0] is Match.FULL
                                                  for r in request.app.router.routes)]
        if request.method in methods:  # routed by path alone: the app it reached refused the method itself
            methods = [m.strip() for m in (refused.headers or {}).get("Allow", "").split(",") if m.strip()]
        return cls(f"{request.method} is not a method of {shortened(request.url.path)}: it takes "
                   f"{', '.join(methods)}", {"Allow": ", ".join(methods)})


HTTP_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


class PayloadTooLarge(ServiceError, status=413, error="payload_too_large"):
    """The body, or the number of queries, exceeds the server's limit."""

    @classmethod
    def queries(cls, count: int | None, limit: int) -> PayloadTooLarge:
        """More queries in one request than ``limit`` (``max_queries_per_request``); ``count`` None: not counted (the
        schema stopped at its own bound)."""
        return cls(f"{f'{count:,}' if count is not None else 'too many'} queries in one request; at most {limit:,} "
                   "(max_queries_per_request, GET /info)")


def too_many_queries(exc: BaseException, limit: int) -> BaseException:
    """``exc``, or the 413 for too many queries when it is the 422 of the schema's bound on the ``queries`` list
    (``schemas.MAX_QUERIES``, above any server's ``max_queries_per_request``): one limit, one status, whichever check
    met the list first."""
    if isinstance(exc, RequestValidationError):
        for e in exc.errors():
            if e.get("type") == "too_long" and tuple(e.get("loc", ())) == ("body", "queries"):
                return PayloadTooLarge.queries((e.get("ctx") or {}).get("actual_length"), limit)
    return exc


class UnsupportedMediaType(ServiceError, status=415, error="unsupported_media_type"):
    """A body that is not declared as JSON (``curl -d`` sends a form type unless told otherwise)."""


class Overloaded(ServiceError, status=429, error="overloaded"):
    """The batcher's queue is full: come back after ``retry_after`` seconds. ``reason`` says which limit refused it
    (service.metrics.REFUSAL_REASONS: queue_full, wait_budget, fair_share), for the metrics only."""

    def __init__(self, message: str, retry_after: float, reason: str = "queue_full"):
        super().__init__(message, {"Retry-After": str(max(1, math.ceil(retry_after)))})
        self.reason = reason


class ReloadThrottled(Overloaded, error="reload_throttled"):
    """``POST /admin/reload`` too soon after the last reload, or while another is under way (429, ``Retry-After``):
    counted apart from load shedding, which the overload alert watches."""


class Conflict(ServiceError, status=409, error="conflict"):
    """``POST /documents`` (add only) naming ids that are held already; nothing of the request is written."""


class UnreadableFile(ServiceError, status=422, error="unreadable_file"):
    """``PUT``/``POST /files/{name}`` with a file its reader skips or refuses (no text, damaged, encrypted, binary,
    bad front matter): the message names the file and the reason; nothing is written."""


class ReloadFailed(ServiceError, status=409, error="reload_failed"):
    """The new index failed to load, its checksums or its model; the previous index keeps serving."""


class InsufficientStorage(ServiceError, status=507, error="insufficient_storage"):
    """A write the server's disk has no room for (no space left, a quota spent): nothing of it was stored, and
    searches go on; the message names the file. Made from the ``OSError`` by ``error_response``."""

    @classmethod
    def of(cls, exc: OSError) -> InsufficientStorage:
        where = f"{exc.filename}: " if exc.filename is not None else ""
        return cls(f"{where}{exc.strerror or exc}: the server's disk has no room for this write, and nothing of it "
                   "was stored (searches go on); send it again once space is freed")


class NotReady(ServiceError, status=503, error="not_ready"):
    """The model and index are not loaded (or warmed up) yet, failed to load, or the service is stopping."""

    default_message, default_headers = "the model and index are still loading", {"Retry-After": "5"}


SHUTTING_DOWN = "the service is shutting down"  # NotReady's message for what the server does not finish as it stops


class ReaderUnavailable(ServiceError, status=503, error="reader_unavailable"):
    """``PUT``/``POST /files/{name}`` when the process that reads uploaded files could not start: the server's fault,
    not the file's (the message says why; the log too), and the next upload tries to start it again."""

    default_headers = {"Retry-After": "5"}


class ClientClosed(ServiceError, status=499, error="client_closed"):
    """The client disconnected before its answer was ready (nginx's 499; nobody receives this body)."""

    default_message = "the client closed the connection"


# Error types counted in spanseek_errors_total (pre-created so dashboards see zeros, not gaps).
ERROR_TYPES = ("bad_request", "response_too_large", "unauthorized", "forbidden", "not_found", "method_not_allowed",
               "cursor_expired", "payload_too_large", "unsupported_media_type", "request_timeout", "validation_error",
               "overloaded", "not_ready", "client_closed", "conflict", "unreadable_file", "reload_failed", "reload_throttled",
               "insufficient_storage", "reader_unavailable", "internal_error")
# validation errors listed in a 422's details: a body of 300,000 wrong items is 300,000 errors, and answering with
# every one took seconds of the server's time (and 29 MB) that other requests waited for
MAX_ERROR_DETAILS = 20
# characters of a request's own text that an error quotes back (a field's name in ``loc``, a value a message quotes):
# longer ones are cut and their length said. A 1 MB bad value or key was quoted whole, twice (message and details):
# answers as large as the request, for nothing a client shows
MAX_ECHO_CHARS = 100
# the most characters of one validation message, whatever it quotes (a validator's message may quote a part of the
# input that pydantic's ``input`` does not hold whole)
MAX_DETAIL_MSG_CHARS = 1000
_HTTP_ERROR_NAMES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                     405: "method_not_allowed",
                     408: "request_timeout", 413: "payload_too_large", 429: "overloaded", 503: "not_ready"}


def request_id_of(request: Request) -> str:
    """The request id the request-id middleware put into the ASGI scope ('-' outside it)."""
    return str(request.scope.get("state", {}).get("request_id", "-"))


def error_response(exc: BaseException, request_id: str) -> JSONResponse:
    """Map any exception to (status, ErrorResponse). The single mapping point of the service."""
    details = None
    headers: dict[str, str] = {}
    if _client_left(exc):
        exc = ClientClosed()
    if isinstance(exc, OSError) and exc.errno in NO_SPACE:
        log.warning("request %s: %s", request_id, exc)  # the operator's to fix: said once, without a traceback
        exc = InsufficientStorage.of(exc)
    if isinstance(exc, ServiceError):
        status, error, message, headers = exc.status, exc.error, exc.message, exc.headers
    elif isinstance(exc, RequestValidationError):
        status, error = 422, "validation_error"
        errors = exc.errors()
        shown = [_short_error(e) for e in errors[:MAX_ERROR_DETAILS]]
        details = [{"loc": e["loc"], "msg": e["msg"], "type": str(e.get("type", ""))} for e in shown]
        message = _validation_message(shown[0]) if shown else "the request does not match the API schema"
        if errors and errors[0].get("type") == "json_invalid":  # its loc holds the character offset, not a field
            details = [{"loc": ["body"], "msg": message, "type": "json_invalid"}]
        elif len(errors) > MAX_ERROR_DETAILS:
            message += f" ({len(errors)} errors; the first {MAX_ERROR_DETAILS} are listed)"
    elif _unreadable_body(exc):  # FastAPI's 400 "error parsing the body": a malformed request, so 422
        status, error = 422, "validation_error"
        message = f"the request body is not JSON that can be read: {_unreadable_reason(exc.__cause__)}"
    elif isinstance(exc, StarletteHTTPException):
        status = exc.status_code
        error = _HTTP_ERROR_NAMES.get(status, "http_error")
        message = str(exc.detail)
        headers = dict(exc.headers or {})
    else:
        status, error = 500, "internal_error"
        message = f"internal error; quote request id {request_id} when reporting it"
        log.error("request %s failed", request_id, exc_info=(type(exc), exc, exc.__traceback__))
    body = ErrorResponse(error=error, message=message, request_id=request_id, details=details)
    headers["X-Request-ID"] = request_id
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


_UNREADABLE = {RecursionError: "nested too deeply", UnicodeDecodeError: "not UTF-8 text"}


def _unreadable_reason(cause: BaseException | None) -> str:
    """Why the JSON parser raised ``cause`` on a body, as a client can act on it: a number longer than Python reads
    (its ValueError says "integer string conversion") is named as such, where it was "malformed"."""
    if type(cause) is ValueError and "integer string conversion" in str(cause):
        return (f"it holds a number of more than {sys.get_int_max_str_digits():,} digits; send it as a string, or a "
                "smaller number")
    return _UNREADABLE.get(type(cause), "malformed") if cause is not None else "malformed"


def shortened(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how many it has: ``'aaaa…' (1,048,576 characters)``."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def quoted(text: str) -> str:
    """``text`` quoted as Python shows a string, ``shortened``: how a message quotes a client's id or name back
    (``no document 'aaaa… (1,000 characters)'``), not a whole kilobyte of it."""
    return repr(shortened(text))


def naming(text: str, given: str) -> str:
    """``text``, a message that quotes the client's ``given`` (an id, a file's name) in full, as Python shows it or
    as written, quoting it ``shortened``."""
    return text.replace(repr(given), quoted(given)).replace(given, shortened(given))


def _short_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """A validation error whose echoes of the request are cut (``shortened``): each part of its ``loc`` (a key of the
    body's), the long strings of its ``input`` wherever its message quotes them (as written or as Python shows
    them), and the message itself past ``MAX_DETAIL_MSG_CHARS``. Its ``input`` is dropped."""
    msg = str(error.get("msg", ""))
    for text in _long_strings(error.get("input")):
        msg = naming(msg, text)
    short = {k: v for k, v in error.items() if k != "input"}
    short["loc"] = [shortened(str(p)) for p in error.get("loc", ())]
    short["msg"] = shortened(msg, MAX_DETAIL_MSG_CHARS)
    return short


def _long_strings(value: Any, depth: int = 0) -> list[str]:
    """The strings longer than ``MAX_ECHO_CHARS`` in a validation error's input (keys and values of its objects and
    lists, a few levels down; the first 20), longest first: what a message might quote of it."""
    if isinstance(value, str):
        return [value] if len(value) > MAX_ECHO_CHARS else []
    found: list[str] = []
    if depth < 4 and isinstance(value, (Mapping, list, tuple)):
        items = itertools.chain(value.keys(), value.values()) if isinstance(value, Mapping) else iter(value)
        for item in itertools.islice(items, 1000):
            found += _long_strings(item, depth + 1)
            if len(found) >= 20:
                break
    return sorted(found[:20], key=len, reverse=True)


def _validation_message(first: Mapping[str, Any]) -> str:
    """A 422's message, naming its first error: where (``body.top_k``, ``query.unit``) and what, so that a client
    showing only the message still says what to fix; malformed JSON says where the parser stopped."""
    loc = [str(p) for p in first.get("loc", ())]
    if first.get("type") == "json_invalid":
        reason = str((first.get("ctx") or {}).get("error") or first.get("msg") or "malformed")
        at = f" (at character {loc[1]})" if len(loc) > 1 and loc[1].isdigit() else ""
        return f"the request body is not JSON that can be read: {reason}{at}"
    if loc == ["body"] and first.get("type") == "missing":  # (FastAPI's "Field required", for a body it never got)
        return "the request has no body; send a JSON object"
    where = ".".join(loc) or "the request"
    return f"the request does not match the API schema: {where}: {first.get('msg', 'invalid')}"


def _client_left(exc: BaseException) -> bool:
    """Whether ``exc`` says the client closed the connection while its body was being read: the body it sent was
    not malformed (FastAPI reports it as a body it could not parse, a route reading the body itself as an error of
    its own), so it is a 499, not a 422 or a 500."""
    return isinstance(exc, ClientDisconnect) or (isinstance(exc, StarletteHTTPException)
                                                 and isinstance(exc.__cause__, ClientDisconnect))


def _unreadable_body(exc: BaseException) -> bool:
    """Whether ``exc`` is FastAPI's answer to a body its JSON parser raised on (other than a syntax error, which is
    a 422 already): JSON nested deeper than the parser recurses, or bytes that are not UTF-8."""
    return (isinstance(exc, StarletteHTTPException) and exc.status_code == 400 and exc.__cause__ is not None
            and not isinstance(exc.__cause__, StarletteHTTPException))


def install_error_handlers(app: FastAPI, on_error=None) -> None:
    """Route FastAPI's exception handling through ``error_response``; ``on_error(error_type, scope)`` counts errors
    (not ``/ready``'s 503 before the service is ready: every start would show as errors, one per probe)."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        state = getattr(request.app.state, "service", None)
        answered = exc if state is None else too_many_queries(exc, state.settings.max_queries_per_request)
        if isinstance(answered, StarletteHTTPException) and answered.status_code == 405:
            answered = MethodNotAllowed.of(request, answered)
        response = error_response(answered, request_id_of(request))
        if isinstance(answered, Overloaded):  # why, for the refusals' metric (service.middleware)
            request.scope.setdefault("state", {})["refusal"] = answered.reason
        if on_error is not None and request.url.path != "/ready":  # a probe's 503 while starting is its answer
            on_error(error_type_of(answered), request.scope)
        return response

    for exc_type in (ServiceError, RequestValidationError, StarletteHTTPException):
        app.add_exception_handler(exc_type, handle)


def error_type_of(exc: BaseException) -> str:
    """The error type label of an exception (as in ErrorResponse.error)."""
    if isinstance(exc, ServiceError):
        return exc.error
    if _client_left(exc):
        return ClientClosed.error
    if isinstance(exc, OSError) and exc.errno in NO_SPACE:
        return InsufficientStorage.error
    if isinstance(exc, RequestValidationError) or _unreadable_body(exc):
        return "validation_error"
    if isinstance(exc, StarletteHTTPException):
        return _HTTP_ERROR_NAMES.get(exc.status_code, "http_error")
    return "internal_error"
