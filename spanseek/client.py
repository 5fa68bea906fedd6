"""A Python client of the spanseek HTTP API (``spanseek serve``): ``Client`` (sync) and ``AsyncClient`` (asyncio).

    from spanseek.client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as client:
        for hit in client.search("Who built the castle?", unit="passage", top_k=5).hits:
            print(hit.score, hit.title, hit.meta, hit.text)

It needs only httpx and tenacity (``pip install 'spanseek[client]'``) and defines its own light result types,
mirroring the response schema of ``POST /search``; fields the server adds later land in each object's ``extra``
dict. Every route has its method: ``search``/``search_batch`` (the request's options typed in ``SearchOptions``),
``next_page`` (the next page of a ranking, from a result's ``next`` cursor), ``info``, ``health``, ``ready``, ``metrics``, ``reload``, ``get`` (one document) and ``documents`` (ids, titles and
metadata, by metadata); on a server with writes on (``SPANSEEK_WRITES=1``) and with the write key, ``upsert``,
``add`` (new ids only), ``upsert_file``/``add_file`` (a PDF, Word, HTML, Markdown or text file), ``delete`` (by id
or by filter) and ``compact``.

Retries (tenacity): a 429 (queue full), a 503 (loading, or shutting down) and a failed connection are tried again,
up to ``max_retries`` times and ``max_retry_time`` seconds in all. A search, another read or a write by id (``PUT``:
sending it twice does what sending it once does, and answers the same) whose connection was closed before its whole
answer came (a kept-alive connection the server closed as it was sent, a reset in the middle of the answer) is sent
again once, at once; an add, a delete (by id: sent again after the first deleted the document, it would answer that
no document has the id), a compaction or a reload is not (the server may have done it), nor is a request that timed
out (the server may still be working on it). The wait is the server's ``Retry-After`` when it
gives a usable one (seconds or an HTTP date; negative or NaN values are ignored) plus a random share of
``backoff``, else an exponential back-off with jitter (``backoff`` x 2^n plus up to ``backoff``); never more than
``max_retry_wait`` at a time. Other answers are not retried. A non-2xx answer raises an ``APIError`` subclass
carrying the server's error type, message and request id; a 2xx whose body is not the JSON expected raises
``InvalidResponseError``; both are ``SpanseekError``s; a 410 for a cursor whose ranking the server no longer keeps is
a ``CursorExpiredError`` (a ``BadRequestError``): search again. Connection failures and timeouts, after the retries,
raise httpx's own exception, its message naming the request, what happened, the tries and what to do.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack
from urllib.parse import quote

from spanseek.extras import require_extra

try:
    import httpx
    from tenacity import (
        AsyncRetrying,
        RetryCallState,
        Retrying,
        retry_if_exception_type,
        retry_if_result,
        stop_after_attempt,
        stop_before_delay,
    )
except ModuleNotFoundError as e:  # a plain install: say which extra brings them
    raise require_extra(e, "spanseek.client") from None

from spanseek.core.filters import SearchFilter  # the filter's one definition (standard library only)
from spanseek.core.params import HIT_WINDOW, CollapseMode, Fusion, Mode, Unit  # standard library only
from spanseek.core.params import Hit as CoreHit

T = TypeVar("T")


# --- request options ----------------------------------------------------------------------------------------


class SearchOptions(TypedDict, total=False):
    """The options of ``POST /search`` besides the questions, the unit and ``top_k`` (the search methods' own
    arguments): the HTTP request's fields (generated from ``spanseek.core.params.SearchParams``, where each one's help
    is; ``service.schemas.SearchRequest``). Options left out take the server's defaults. Keyword arguments not named
    here are sent as they are (a newer server's options; an older server answers 422 naming the ones it does not
    know)."""

    max_answer_tokens: int
    nprobe: int
    merge_answers: bool
    collapse_duplicates: bool | CollapseMode
    mode: Mode
    fusion: Fusion
    lexical_weight: float
    offset: int
    rank_window: int
    allow_overlap: bool
    min_confidence: float
    unanswerable_prior: float
    read: bool
    read_passages: int
    read_below: float
    full_passage: bool
    filter: SearchFilter | Mapping[str, Any]  # a core filter, or its JSON object as it is (docs/indexing.md#filters)


# --- results ------------------------------------------------------------------------------------------------


def _build(cls: Callable[..., T], data: dict[str, Any], **nested: Any) -> T:
    """A dataclass from a JSON object: known fields by name (``nested`` already converted), the rest in ``extra``."""
    names = {f.name for f in fields(cls)} - {"extra"}  # type: ignore[arg-type]
    known = {k: v for k, v in data.items() if k in names}
    return cls(**{**known, **nested}, extra={k: v for k, v in data.items() if k not in names})


def _hit_class() -> type:
    """The client's hit: the fields of ``core.params.Hit`` (the hit's one definition) and ``HIT_WINDOW``, each with
    a default, plus ``extra`` for fields a newer server adds."""
    spec: list[Any] = []
    for f in fields(CoreHit):
        default = ({"default": f.default} if f.default is not MISSING else
                   {"default_factory": f.default_factory} if f.default_factory is not MISSING else
                   {"default": _EMPTY.get(f.name, "")})
        spec.append((f.name, f.type, field(**default)))  # type: ignore[call-overload]
    spec += [(name, tp, field(default=default)) for name, (tp, default, _) in HIT_WINDOW.items()]
    spec.append(("extra", "dict[str, Any]", field(default_factory=dict)))
    doc = ("One hit: the best phrase of the unit, its character span in ``passage`` (a window of the whole passage, "
           "starting at ``passage_offset`` in it, ``passage_chars`` long), its document, the legs' scores, "
           "``confidence`` and ``read``; the fields of ``spanseek.core.params.Hit`` with their help.")
    return make_dataclass("Hit", spec, frozen=True, namespace={"__doc__": doc, "__module__": __name__})


_EMPTY: dict[str, Any] = {"score": 0.0, "start": 0, "end": 0, "passage_id": -1}  # text, passage, ids: ""
if TYPE_CHECKING:  # what a type checker sees: the core hit (the window fields aside)
    from spanseek.core.params import Hit
else:
    Hit = _hit_class()


@dataclass(frozen=True)
class QueryResult:
    """Hits for one question, best first; ``no_answer`` when the server abstained (``min_confidence``); ``truncated``
    when the question was longer than the server's ``max_query_chars`` and only that many characters were searched
    (``query`` holds them); ``next``, a cursor for the next page of its ranking, or None."""

    query: str
    hits: list[Hit]
    no_answer: bool = False
    truncated: bool = False
    next: str | None = None  # the cursor of the next page (``next_page``), where rank_window ranked past this one
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timings:
    """Milliseconds in each stage of the batch that served the request."""

    queue: float = 0.0
    encode: float = 0.0
    search: float = 0.0
    aggregate: float = 0.0
    read: float = 0.0
    total: float = 0.0
    batch_size: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResponse:
    """The answer of ``POST /search``: one result per question, in request order; ``warnings``: what the server did
    not do as asked though it answered (``nprobe`` on an index without inverted lists)."""

    unit: str
    results: list[QueryResult]
    timings_ms: Timings
    request_id: str = ""
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hits(self) -> list[Hit]:
        """The hits of the first (for ``search``, the only) question."""
        return self.results[0].hits if self.results else []

    @property
    def no_answer(self) -> bool:
        """Whether the search abstained on the first (for ``search``, the only) question (``min_confidence``)."""
        return bool(self.results and self.results[0].no_answer)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchResponse:
        results = [
            _build(QueryResult, r, hits=[_build(Hit, h) for h in r.get("hits", [])]) for r in data.get("results", [])
        ]
        return _build(cls, data, results=results, timings_ms=_build(Timings, data.get("timings_ms") or {}))


# --- errors -------------------------------------------------------------------------------------------------


class SpanseekError(Exception):
    """What this client raises of its own: a non-2xx answer (``APIError``) or an answer it cannot read
    (``InvalidResponseError``)."""


class APIError(SpanseekError):
    """A non-2xx answer: ``status``, the server's ``error`` type and ``message``, its ``request_id``."""

    def __init__(self, status: int, error: str, message: str, request_id: str | None = None,
                 details: list[dict[str, Any]] | None = None, retry_after: float | None = None):
        super().__init__(f"HTTP {status} {error}: {message}" + (f" (request {request_id})" if request_id else ""))
        self.status, self.error, self.message = status, error, message
        self.request_id, self.details, self.retry_after = request_id, details, retry_after


class BadRequestError(APIError):
    """400, 413 or 422: the request was malformed or out of range; ``details`` lists validation errors (422)."""


class CursorExpiredError(BadRequestError):
    """410 ``cursor_expired``: the server no longer keeps the ranking of a ``next`` cursor (it kept it
    ``cursor_ttl_s`` after its last page, and loses it when it restarts or the cursor reaches another replica); not
    retried: search again for the first page."""


class AuthenticationError(APIError):
    """401 or 403: a missing or wrong API key, or a permission the server does not grant."""


class OverloadedError(APIError):
    """429: the server's queue stayed full through every retry; ``retry_after`` is the server's last advice."""


class ServerError(APIError):
    """5xx: the server failed (500, with a request id to find in its log) or is not ready (503, after the retries)."""


class InvalidResponseError(SpanseekError):
    """A 2xx answer whose body is not the JSON expected (a proxy's HTML page, a truncated body): ``status``,
    ``content_type``, ``request_id`` (from the header, when there is one) and the body's first 200 characters."""

    def __init__(self, response: httpx.Response, problem: str):
        self.status, self.content_type = response.status_code, response.headers.get("content-type", "")
        self.request_id, self.body = response.headers.get("x-request-id"), response.text[:200]
        super().__init__(f"HTTP {self.status} from {response.request.method} {response.request.url.path}: "
                         f"{problem} (Content-Type {self.content_type or 'none'}; body starts {self.body[:80]!r})")


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds, or an HTTP date: 0 once past), or None when there is none
    or it is unusable (negative, NaN, not a number or date). An infinite value stays infinite: the caller clamps."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return None if math.isnan(seconds) or seconds < 0 else seconds


def _error(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"error": response.reason_phrase or "error", "message": response.text[:500]}
    status = response.status_code
    cls = (AuthenticationError if status in (401, 403) else OverloadedError if status == 429 else
           CursorExpiredError if status == 410 and body.get("error") == "cursor_expired" else
           BadRequestError if 400 <= status < 500 else ServerError)
    return cls(status, str(body.get("error", "error")), str(body.get("message", "")),
               body.get("request_id") or response.headers.get("x-request-id"), body.get("details"),
               _retry_after(response))


def _checked(response: httpx.Response) -> httpx.Response:
    """``response`` when it is a 2xx, else its ``APIError``."""
    if not response.is_success:
        raise _error(response)
    return response


def _json_object(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a 2xx answer; an ``APIError`` for any other answer, ``InvalidResponseError`` when the body
    is not a JSON object."""
    try:
        body = _checked(response).json()
    except ValueError:
        raise InvalidResponseError(response, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidResponseError(response, f"expected a JSON object, got {type(body).__name__}")
    return body


def _search_response(response: httpx.Response) -> SearchResponse:
    body = _json_object(response)
    try:
        return SearchResponse.from_json(body)
    except (TypeError, AttributeError) as e:  # results or hits of the wrong shape
        raise InvalidResponseError(response, f"not a search response ({e})") from None


# --- retries ------------------------------------------------------------------------------------------------

RETRIED_STATUSES = frozenset({429, 503})  # queue full; loading or stopping: both say when to come back
RETRIED_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)  # the request never reached the server
# The server closed a kept-alive connection as the request went out on it (its keep-alive timeout ran out just then,
# or it restarted): no answer came, "Server disconnected without sending a response" or a reset. A read (a search, a
# GET) is sent once more at once, on a new connection; a write is not (the server may have done it).
DROPPED_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _retried(response: httpx.Response) -> bool:
    return response.status_code in RETRIED_STATUSES


def _dropped(state: RetryCallState) -> bool:
    """Whether the last try failed as its connection was closed under it (``DROPPED_ERRORS``)."""
    return state.outcome is not None and isinstance(state.outcome.exception(), DROPPED_ERRORS)


def _first_try_dropped(state: RetryCallState) -> bool:
    """Whether the first try failed as its connection was closed under it: retried once, not again."""
    return state.attempt_number == 1 and _dropped(state)


def is_read(method: str, path: str) -> bool:
    """Whether the request only reads (a GET, or a search), so that sending it again changes nothing."""
    return method == "GET" or (method, path) == ("POST", "/search")


def is_idempotent(method: str, path: str) -> bool:
    """Whether sending the request twice does what sending it once does, and answers what it would have: a read, or a
    write by id (``PUT`` replaces the documents of its ids). An add (``POST /documents``, ``POST /files/...``), a
    delete, a compaction or a reload is not: the second could refuse what the first did (a delete by id answers 404,
    read as "no document had the id", once the first deleted it), or do more."""
    return is_read(method, path) or method == "PUT"


def _transport_failure(error: httpx.TransportError, method: str, base: str, path: str, tries: int,
                       timeout: httpx.Timeout) -> httpx.TransportError:
    """``error`` (after ``tries`` tries of ``method`` ``path`` at the service's ``base`` URL) again as its own httpx
    type, its message saying what happened in words, whether the server may have done the request, and what to do."""
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
        what = f"could not connect (is the service running at {base}?)"
    elif isinstance(error, httpx.PoolTimeout):
        what = f"no connection of the client's pool came free within {_seconds(timeout.pool)}"
    elif isinstance(error, httpx.WriteTimeout):
        what = (f"the request could not be sent within the client's write timeout ({_seconds(timeout.write)}); not "
                "sent again, as the server may have begun it: give a longer timeout, or send less")
    elif isinstance(error, httpx.TimeoutException):
        what = (f"no answer within the client's timeout ({_seconds(timeout.read)}); not sent again, as the server "
                "may still be working on it: give a longer timeout, or ask for less")
    elif isinstance(error, DROPPED_ERRORS):
        what = "the connection was closed before the whole answer came"
        if not is_idempotent(method, path):
            what += "; not sent again, as the server may have done it: look before sending it again"
    else:
        what = "the request failed"
    try:
        request: httpx.Request | None = error.request
    except RuntimeError:  # (an error raised without its request)
        request = None
    plural = "try" if tries == 1 else "tries"
    return type(error)(f"{method} {base}{path}: {what} ({type(error).__name__}: {error or 'no detail'}; {tries} "
                       f"{plural})", request=request)


def _seconds(limit: float | None) -> str:
    """A timeout of ``httpx.Timeout`` in words (None: none set, as a transport's own timeout may run out)."""
    return "none set" if limit is None else f"{limit:g} s"


def _last_outcome(state: RetryCallState) -> Any:
    """Out of tries: the last answer (the caller raises its APIError), or the last connection error raised."""
    assert state.outcome is not None
    return state.outcome.result()


def _sleep(seconds: float) -> None:  # the waits between tries (tests replace these two)
    time.sleep(seconds)


async def _async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


# --- clients ------------------------------------------------------------------------------------------------


def url_problem(url: str) -> str | None:
    """What makes ``url`` (with its scheme) no address a request can go to: no host (``http://``), a port that is no
    number or out of range (``http://[::1``, ``http://host:99999``); None when it is one."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        return f"is not a URL ({e})"
    if not parsed.host:
        return "names no host (http://HOST:PORT)"
    if parsed.port is not None and not 0 < parsed.port < 65536:
        return f"names port {parsed.port}; a port is 1 to 65535"
    return None


class _Base:
    """What both clients share: the base URL and key, the retry policy, the request body."""

    def __init__(self, url: str, api_key: str | None, max_retries: int, max_retry_wait: float,
                 max_retry_time: float, backoff: float):
        for name, value in (("max_retries", max_retries), ("max_retry_wait", max_retry_wait),
                            ("max_retry_time", max_retry_time), ("backoff", backoff)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
            # httpx's own words for "localhost:8000" are "an unsupported protocol 'localhost://'"
            meant = "http:// or https://" if "://" in str(url) else f"http://{url}"
            raise ValueError(f"the client takes the service's base URL with its scheme ({meant}), got {url!r}")
        if (problem := url_problem(url)) is not None:  # (httpx's InvalidURL is no error of a request)
            raise ValueError(f"the service's base URL {url!r} {problem}")
        self.url = url.rstrip("/")
        self.max_retries, self.max_retry_wait = int(max_retries), float(max_retry_wait)
        self.max_retry_time, self.backoff = float(max_retry_time), float(backoff)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _wait(self, state: RetryCallState) -> float:
        """Seconds before the next try: the server's usable Retry-After plus up to ``backoff`` of jitter, else the
        jittered exponential back-off; at most ``max_retry_wait``."""
        outcome = state.outcome
        if _dropped(state):  # the request was not answered; a new connection can take it now
            return 0.0
        advised = None if outcome is None or outcome.failed else _retry_after(outcome.result())
        if advised is None:  # backoff x 2^n before retry n + 1 (the exponent bounded: a float past it is the cap)
            advised = self.backoff * 2.0 ** min(state.attempt_number - 1, 1000)
        return min(self.max_retry_wait, advised + random.uniform(0.0, self.backoff))

    def _policy(self, method: str, path: str) -> dict[str, Any]:
        """tenacity's arguments for a request of ``method`` to ``path``: what is retried, when to stop, how long to wait
        (one Retrying per call)."""
        retry = retry_if_exception_type(RETRIED_ERRORS) | retry_if_result(_retried)
        if is_idempotent(method, path):
            retry = retry | _first_try_dropped
        return {"retry": retry,
                "stop": stop_after_attempt(self.max_retries + 1) | stop_before_delay(self.max_retry_time),
                "wait": self._wait, "retry_error_callback": _last_outcome}

    def _body(self, queries: str | list[str], top_k: int | None, options: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"query": queries} if isinstance(queries, str) else {"queries": list(queries)}
        for i, q in enumerate(body.get("queries", [])):
            if not isinstance(q, str):
                raise TypeError(f"queries[{i}] must be a string, got {type(q).__name__}")
        body.update({k: v for k, v in {"top_k": top_k, **options}.items() if v is not None})
        if isinstance(body.get("filter"), SearchFilter):  # a core filter goes as its JSON form (a dict as it is)
            body["filter"] = body["filter"].to_json()
        return body

    def _failure(self, error: httpx.TransportError, method: str, path: str, retrying: Retrying | AsyncRetrying,
                 timeout: httpx.Timeout) -> httpx.TransportError:
        """The transport error a request ends with, its message saying what happened (``_transport_failure``)."""
        tries = int(retrying.statistics.get("attempt_number", 1))
        return _transport_failure(error, method, self.url, path, tries, timeout)

    @staticmethod
    def _reload_body(index: str | os.PathLike[str] | None) -> dict[str, Any]:
        return {} if index is None else {"json": {"index": os.fspath(index)}}


def _cursor_body(cursor: str, top_k: int | None) -> dict[str, Any]:
    if not isinstance(cursor, str):  # None: the last page's next
        raise TypeError(f"next_page takes a result's next cursor, a string, got {type(cursor).__name__}"
                        + (" (the last page has none)" if cursor is None else ""))
    return {"cursor": cursor} if top_k is None else {"cursor": cursor, "top_k": top_k}


def _is_ready(response: httpx.Response) -> bool:
    try:
        return response.status_code == 200 and response.json().get("status") == "ready"
    except (ValueError, AttributeError):  # not JSON, or not an object
        return False


def _one_question(query: object) -> None:
    if not isinstance(query, str):  # a list was sent as a batch, None failed inside the client
        raise TypeError(f"search takes one question, a string, got {type(query).__name__}"
                        + (" (search_batch for several)" if isinstance(query, list | tuple) else ""))


def _question_list(queries: object) -> None:
    if isinstance(queries, str) or not isinstance(queries, Sequence):  # a string was sent as one question
        raise TypeError(f"search_batch takes a list of questions, got {type(queries).__name__}"
                        + (" (search for one)" if isinstance(queries, str) else ""))


DocumentLike = Mapping[str, Any]  # a document in the corpus format: {"id", "title", "paragraphs", "meta", ...}


def _documents_body(documents: DocumentLike | Sequence[DocumentLike]) -> dict[str, Any]:
    docs = [documents] if isinstance(documents, Mapping) else list(documents)
    return {"documents": [dict(d) for d in docs]}


def _document_path(doc_id: str) -> str:
    """The path of a document by id, every character but letters, digits and ``_-~`` escaped: a slash stays part of
    the id, and dots too (HTTP clients resolve a literal "." or ".." segment away)."""
    return "/documents/" + quote(doc_id, safe="").replace(".", "%2E")


class Deleted(list[str]):
    """The ids a delete answered with (by filter, the first 1,000), and ``total``: how many documents it deleted (the
    answer's ``count``)."""

    def __init__(self, ids: Sequence[str] = (), total: int | None = None):
        super().__init__(ids)
        self.total = len(self) if total is None else total


def _get_request(doc_id: str, meta_only: bool) -> tuple[str, dict[str, Any]]:
    return _document_path(doc_id), ({"params": {"meta_only": "true"}} if meta_only else {})


def _meta_params(meta: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Metadata as repeated ``meta=KEY=VALUE`` query parameters (values sent as text)."""
    return [("meta", f"{k}={v}") for k, v in (meta or {}).items()]


def _page_params(meta: Mapping[str, Any] | None, after: str | None, page_size: int | None) -> dict[str, Any]:
    """The query of one page of ``GET /documents``."""
    params = _meta_params(meta) + [(k, str(v)) for k, v in (("after", after), ("limit", page_size)) if v is not None]
    return {"params": params}


def _page(response: httpx.Response, after: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """The documents of one page of ``GET /documents`` and the id the next page starts after (None: the last page);
    InvalidResponseError for another body, or a ``next`` that does not move past ``after`` (it would list for ever)."""
    body = _json_object(response)
    docs, next_after = body.get("documents"), body.get("next")
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs) or not (
            next_after is None or isinstance(next_after, str)):
        raise InvalidResponseError(response, "not a page of documents ({'documents': [...], 'next': ...})")
    if next_after is not None and after is not None and next_after <= after:
        raise InvalidResponseError(response, f"the page after {after!r} says the next starts after {next_after!r}")
    return docs, next_after


def _no_document(response: httpx.Response) -> bool:
    """Whether an answer is the write API's 404 for an id no live document has (not a 404 for a wrong base URL or an
    older server without the route, which ``_checked`` raises as an APIError)."""
    if response.status_code != 404:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and str(body.get("message", "")).startswith("no document ")


def _deleted(response: httpx.Response) -> Deleted:
    if _no_document(response):
        return Deleted()
    body = _json_object(response)
    return Deleted(body["deleted"], int(body.get("count", len(body["deleted"]))))


def _delete_request(doc_id: str | None, flt: SearchFilter | Mapping[str, Any] | None, dry_run: bool = False
                    ) -> tuple[str, str, dict[str, Any]]:
    if (doc_id is None) == (flt is None):
        raise ValueError("delete takes a document id or a filter (one of them)")
    if doc_id is not None:
        if dry_run:
            raise ValueError("dry_run applies to a delete by filter")
        return "DELETE", _document_path(doc_id), {}
    body = flt.to_json() if isinstance(flt, SearchFilter) else dict(flt or {})
    return "POST", "/documents/delete", {"json": {"filter": body, **({"dry_run": True} if dry_run else {})}}


FileLike = str | os.PathLike[str] | bytes  # a file's path, or its bytes (then with a name)


def _file_request(file: FileLike, name: str | None, doc_id: str | None, meta: Mapping[str, Any] | None
                  ) -> tuple[str, dict[str, Any]]:
    """The path and arguments of a file's write: its bytes as the body, its name (a path's file name unless given)
    escaped as ``_document_path`` escapes ids, the id and metadata as query parameters."""
    if isinstance(file, bytes):
        if not name:
            raise ValueError("a file given as bytes needs its name (with the suffix that says how it is read)")
        data = file
    else:
        with open(file, "rb") as f:
            data = f.read()
        name = name or os.path.basename(os.fspath(file))
    params = _meta_params(meta)
    if doc_id is not None:
        params.append(("id", doc_id))
    return "/files/" + quote(name, safe="").replace(".", "%2E"), {"content": data, "params": params}


def _timeout(timeout: float | httpx.Timeout, connect_timeout: float | None) -> httpx.Timeout:
    """``timeout`` seconds to read, write and get a pooled connection; ``connect_timeout`` to connect (a refused or
    unreachable server is retried sooner than a slow answer is given up)."""
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=timeout if connect_timeout is None else connect_timeout)


class Client(_Base):
    """Synchronous client of every route; use as a context manager or ``close()``.

    ``timeout`` is per HTTP request (read, write), ``connect_timeout`` per connection attempt (or pass an
    ``httpx.Timeout``); ``max_retries``, ``max_retry_time``, ``max_retry_wait`` and ``backoff`` bound the retries
    (module docstring); ``transport`` (an httpx transport) is for tests and custom networking.
    """

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float | httpx.Timeout = 60.0,
                 connect_timeout: float | None = 5.0, max_retries: int = 3, max_retry_time: float = 60.0,
                 max_retry_wait: float = 30.0, backoff: float = 0.5, transport: httpx.BaseTransport | None = None):
        super().__init__(url, api_key, max_retries, max_retry_wait, max_retry_time, backoff)
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=_timeout(timeout, connect_timeout),
                                  transport=transport)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, retried by the policy; the last answer whatever its status, or its last transport error
        saying what happened (``_failure``)."""
        retrying = Retrying(sleep=_sleep, **self._policy(method, path))
        try:
            return retrying(self._http.request, method, path, **kwargs)
        except httpx.TransportError as e:
            raise self._failure(e, method, path, retrying, self._http.timeout) from e

    def search(self, query: str, unit: Unit = "phrase", top_k: int | None = None,
               **options: Unpack[SearchOptions]) -> SearchResponse:
        """The best ``unit``s for one question (``.hits``); ``options`` as in ``SearchOptions``."""
        _one_question(query)
        return _search_response(self._send("POST", "/search", params={"unit": unit},
                                           json=self._body(query, top_k, options)))

    def search_batch(self, queries: list[str], unit: Unit = "phrase", top_k: int | None = None,
                     **options: Unpack[SearchOptions]) -> SearchResponse:
        """Several questions in one request (``.results``, in order), batched together by the server."""
        _question_list(queries)
        return _search_response(self._send("POST", "/search", params={"unit": unit},
                                           json=self._body(queries, top_k, options)))

    def next_page(self, cursor: str, top_k: int | None = None) -> SearchResponse:
        """The next page of a ranking, from a result's ``next`` cursor (``top_k`` hits, default: the first page's):
        the ranking the first page was cut from, whatever was written or reloaded since (docs/service.md, "Paging
        with a cursor"); its result's ``next`` continues it. APIError 410 when the server no longer keeps it."""
        return _search_response(self._send("POST", "/search", json=_cursor_body(cursor, top_k)))

    def info(self) -> dict[str, Any]:
        """``GET /info``: the served model, index summary and service settings."""
        return _json_object(self._send("GET", "/info"))

    def health(self) -> dict[str, Any]:
        """``GET /health`` (not retried): ``status`` "ok" while the process runs; ``detail`` says loading, ready or
        why loading failed."""
        return _json_object(self._http.get("/health"))

    def ready(self) -> bool:
        """True when ``GET /ready`` answers 200 with ``{"status": "ready"}`` (model and index loaded; another
        server on the port answers otherwise); not retried."""
        return _is_ready(self._http.get("/ready"))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus exposition text."""
        return _checked(self._send("GET", "/metrics")).text

    def reload(self, index: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """``POST /admin/reload`` with the client's API key: serve ``index`` (a directory or alias; naming one needs
        a server with an API key), or open the served path again; the new index's summary."""
        return _json_object(self._send("POST", "/admin/reload", **self._reload_body(index)))

    def upsert(self, documents: DocumentLike | Sequence[DocumentLike]) -> dict[str, int]:
        """``PUT /documents`` (a server with writes on; the write or admin key): add or replace documents by id;
        returns the documents, passages and tokens written. Searchable when this returns."""
        return _json_object(self._send("PUT", "/documents", json=_documents_body(documents)))

    def add(self, documents: DocumentLike | Sequence[DocumentLike]) -> dict[str, int]:
        """``POST /documents``: add documents whose ids are new; an id held already is an APIError (409,
        ``conflict``) and nothing is written. Returns what ``upsert`` does."""
        return _json_object(self._send("POST", "/documents", json=_documents_body(documents)))

    def upsert_file(self, file: FileLike, name: str | None = None, *, doc_id: str | None = None,
                    meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``PUT /files/{name}``: add or replace the document of a file (a path, or its bytes with ``name``), read
        by the server as ``spanseek corpus from-files`` reads it (the name's suffix says how); its id is the name (a
        path's file name) unless ``doc_id`` is given; ``meta`` adds metadata (values sent as text). Returns the id,
        title, passages and tokens written; searchable when this returns."""
        path, kwargs = _file_request(file, name, doc_id, meta)
        return _json_object(self._send("PUT", path, **kwargs))

    def add_file(self, file: FileLike, name: str | None = None, *, doc_id: str | None = None,
                 meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``POST /files/{name}``: as ``upsert_file``, for a new id only (409 ``conflict`` when it is held)."""
        path, kwargs = _file_request(file, name, doc_id, meta)
        return _json_object(self._send("POST", path, **kwargs))

    def delete(self, doc_id: str | None = None, *, filter: SearchFilter | Mapping[str, Any] | None = None,
               dry_run: bool = False) -> Deleted:
        """Delete one document by id (``DELETE /documents/{id}``), or every one that passes a search ``filter``
        (``POST /documents/delete``); returns the ids deleted ([] when the id is not held; by filter, the first
        1,000 of them, and ``.total``: how many). ``dry_run`` (by filter): the ids it would delete, none deleted."""
        method, path, kwargs = _delete_request(doc_id, filter, dry_run)
        return _deleted(self._send(method, path, **kwargs))

    def get(self, doc_id: str, *, meta_only: bool = False) -> dict[str, Any] | None:
        """``GET /documents/{id}``: the live version of a document in the corpus format, or None when no live
        document has the id (another 404, such as a wrong base URL, is an APIError). ``meta_only``: its ``id``,
        ``title`` and ``meta`` only, without the paragraphs (a small answer whatever the document's size)."""
        path, kwargs = _get_request(doc_id, meta_only)
        response = self._send("GET", path, **kwargs)
        return None if _no_document(response) else _json_object(response)

    def documents(self, meta: Mapping[str, Any] | None = None, *, page_size: int | None = None
                  ) -> Iterator[dict[str, Any]]:
        """``GET /documents``, page after page: each live document's ``id``, ``title`` and ``meta`` (no paragraphs),
        in id order; with ``meta``, only those whose metadata holds these values (sent as text). ``page_size``: the
        documents in one request (default and most: the server's, 1,000)."""
        after = None
        while True:
            docs, after = _page(self._send("GET", "/documents", **_page_params(meta, after, page_size)), after)
            yield from docs
            if after is None:
                return

    def compact(self) -> dict[str, Any]:
        """``POST /admin/compact``: start merging the written documents into a new base (in the background)."""
        return _json_object(self._send("POST", "/admin/compact"))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio twin of ``Client``: the same methods and arguments, awaited; ``async with`` or ``await aclose()``."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float | httpx.Timeout = 60.0,
                 connect_timeout: float | None = 5.0, max_retries: int = 3, max_retry_time: float = 60.0,
                 max_retry_wait: float = 30.0, backoff: float = 0.5,
                 transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(url, api_key, max_retries, max_retry_wait, max_retry_time, backoff)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                       timeout=_timeout(timeout, connect_timeout), transport=transport)

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, retried by the policy; the last answer whatever its status, or its last transport error
        saying what happened (``_failure``)."""
        retrying = AsyncRetrying(sleep=_async_sleep, **self._policy(method, path))
        try:
            return await retrying(self._http.request, method, path, **kwargs)
        except httpx.TransportError as e:
            raise self._failure(e, method, path, retrying, self._http.timeout) from e

    async def search(self, query: str, unit: Unit = "phrase", top_k: int | None = None,
                     **options: Unpack[SearchOptions]) -> SearchResponse:
        """The best ``unit``s for one question (``.hits``); ``options`` as in ``SearchOptions``."""
        _one_question(query)
        return _search_response(await self._send("POST", "/search", params={"unit": unit},
                                                 json=self._body(query, top_k, options)))

    async def search_batch(self, queries: list[str], unit: Unit = "phrase", top_k: int | None = None,
                           **options: Unpack[SearchOptions]) -> SearchResponse:
        """Several questions in one request (``.results``, in order), batched together by the server."""
        _question_list(queries)
        return _search_response(await self._send("POST", "/search", params={"unit": unit},
                                                 json=self._body(queries, top_k, options)))

    async def next_page(self, cursor: str, top_k: int | None = None) -> SearchResponse:
        """The next page of a ranking, from a result's ``next`` cursor (``Client.next_page``)."""
        return _search_response(await self._send("POST", "/search", json=_cursor_body(cursor, top_k)))

    async def info(self) -> dict[str, Any]:
        """``GET /info``: the served model, index summary and service settings."""
        return _json_object(await self._send("GET", "/info"))

    async def health(self) -> dict[str, Any]:
        """``GET /health`` (not retried): ``status`` "ok" while the process runs."""
        return _json_object(await self._http.get("/health"))

    async def ready(self) -> bool:
        """True when ``GET /ready`` answers 200 with ``{"status": "ready"}``; not retried."""
        return _is_ready(await self._http.get("/ready"))

    async def metrics(self) -> str:
        """``GET /metrics``: the Prometheus exposition text."""
        return _checked(await self._send("GET", "/metrics")).text

    async def reload(self, index: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """``POST /admin/reload`` with the client's API key (see ``Client.reload``)."""
        return _json_object(await self._send("POST", "/admin/reload", **self._reload_body(index)))

    async def upsert(self, documents: DocumentLike | Sequence[DocumentLike]) -> dict[str, int]:
        """``PUT /documents`` (see ``Client.upsert``)."""
        return _json_object(await self._send("PUT", "/documents", json=_documents_body(documents)))

    async def add(self, documents: DocumentLike | Sequence[DocumentLike]) -> dict[str, int]:
        """``POST /documents`` (see ``Client.add``)."""
        return _json_object(await self._send("POST", "/documents", json=_documents_body(documents)))

    async def upsert_file(self, file: FileLike, name: str | None = None, *, doc_id: str | None = None,
                          meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``PUT /files/{name}`` (see ``Client.upsert_file``)."""
        path, kwargs = _file_request(file, name, doc_id, meta)
        return _json_object(await self._send("PUT", path, **kwargs))

    async def add_file(self, file: FileLike, name: str | None = None, *, doc_id: str | None = None,
                       meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``POST /files/{name}`` (see ``Client.add_file``)."""
        path, kwargs = _file_request(file, name, doc_id, meta)
        return _json_object(await self._send("POST", path, **kwargs))

    async def delete(self, doc_id: str | None = None, *,
                     filter: SearchFilter | Mapping[str, Any] | None = None, dry_run: bool = False) -> Deleted:
        """Delete by id or by filter (see ``Client.delete``)."""
        method, path, kwargs = _delete_request(doc_id, filter, dry_run)
        return _deleted(await self._send(method, path, **kwargs))

    async def get(self, doc_id: str, *, meta_only: bool = False) -> dict[str, Any] | None:
        """``GET /documents/{id}`` (see ``Client.get``)."""
        path, kwargs = _get_request(doc_id, meta_only)
        response = await self._send("GET", path, **kwargs)
        return None if _no_document(response) else _json_object(response)

    async def documents(self, meta: Mapping[str, Any] | None = None, *, page_size: int | None = None
                        ) -> AsyncIterator[dict[str, Any]]:
        """``GET /documents``, page after page (see ``Client.documents``); ``async for``."""
        after = None
        while True:
            docs, after = _page(await self._send("GET", "/documents", **_page_params(meta, after, page_size)), after)
            for doc in docs:
                yield doc
            if after is None:
                return

    async def compact(self) -> dict[str, Any]:
        """``POST /admin/compact`` (see ``Client.compact``)."""
        return _json_object(await self._send("POST", "/admin/compact"))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
