"""A Python client of the spanseek HTTP API (``spanseek serve``): ``Client`` (sync) and ``AsyncClient`` (asyncio).

    from spanseek.client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as client:
        for hit in client.search("Who built the castle?", unit="passage", top_k=5).hits:
            print(hit.score, hit.title, hit.meta, hit.text)

It needs only httpx (``pip install 'spanseek[client]'``) and defines its own light result types, mirroring the
response schema of ``POST /search``; fields the server adds later land in each object's ``extra`` dict, and search
options this client does not name are passed through as keyword arguments. A 429 (queue full) is retried after
the server's ``Retry-After`` (at most ``max_retries`` times, each wait at most ``max_retry_wait`` seconds); other
non-2xx answers raise an ``APIError`` subclass carrying the server's error type, message and request id.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from spanseek.core.filters import SearchFilter  # the filter's one definition (standard library only)
from spanseek.core.params import HIT_WINDOW, Unit  # core.params imports only the standard library
from spanseek.core.params import Hit as CoreHit

T = TypeVar("T")


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
    """Hits for one question, best first; ``no_answer`` when the server abstained (``min_confidence``)."""

    query: str
    hits: list[Hit]
    no_answer: bool = False
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
    """The answer of ``POST /search``: one result per question, in request order."""

    unit: str
    results: list[QueryResult]
    timings_ms: Timings
    request_id: str = ""
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


class APIError(Exception):
    """A non-2xx answer: ``status``, the server's ``error`` type and ``message``, its ``request_id``."""

    def __init__(self, status: int, error: str, message: str, request_id: str | None = None,
                 details: list[dict[str, Any]] | None = None, retry_after: float | None = None):
        super().__init__(f"HTTP {status} {error}: {message}" + (f" (request {request_id})" if request_id else ""))
        self.status, self.error, self.message = status, error, message
        self.request_id, self.details, self.retry_after = request_id, details, retry_after


class BadRequestError(APIError):
    """400, 413 or 422: the request was malformed or out of range; ``details`` lists validation errors (422)."""


class AuthenticationError(APIError):
    """401: missing or wrong API key."""


class OverloadedError(APIError):
    """429: the server's queue stayed full through every retry; ``retry_after`` is the server's last advice."""


class ServerError(APIError):
    """5xx: the server failed (500, with a request id to find in its log) or is not ready (503)."""


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"error": response.reason_phrase or "error", "message": response.text[:500]}
    status = response.status_code
    cls = (AuthenticationError if status == 401 else OverloadedError if status == 429 else
           BadRequestError if 400 <= status < 500 else ServerError)
    return cls(status, str(body.get("error", "error")), str(body.get("message", "")),
               body.get("request_id") or response.headers.get("x-request-id"), body.get("details"),
               _retry_after(response))


# --- clients ------------------------------------------------------------------------------------------------


class _Base:
    def __init__(self, url: str, api_key: str | None, max_retries: int, max_retry_wait: float):
        if max_retries < 0 or max_retry_wait < 0:
            raise ValueError("max_retries and max_retry_wait must be >= 0")
        self.url = url.rstrip("/")
        self.max_retries, self.max_retry_wait = max_retries, max_retry_wait
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _body(self, queries: str | list[str], top_k: int | None, max_answer_tokens: int | None,
              nprobe: int | None, merge_answers: bool | None, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"query": queries} if isinstance(queries, str) else {"queries": list(queries)}
        named = {"top_k": top_k, "max_answer_tokens": max_answer_tokens, "nprobe": nprobe,
                 "merge_answers": merge_answers}
        body.update({k: v for k, v in {**named, **params}.items() if v is not None})
        if isinstance(body.get("filter"), SearchFilter):  # a core filter goes as its JSON form (a dict as it is)
            body["filter"] = body["filter"].to_json()
        return body

    def _wait(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying ``response``, or None to give up (not a 429, or out of retries)."""
        if response.status_code != 429 or attempt >= self.max_retries:
            return None
        advised = _retry_after(response)
        return min(self.max_retry_wait, advised if advised is not None else 2.0 ** attempt)

    @staticmethod
    def _parse(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise _error(response)
        return response.json()


class Client(_Base):
    """Synchronous client: ``search``, ``search_batch``, ``info``, ``ready``; use as a context manager or ``close()``.

    ``transport`` (an httpx transport) is for tests and custom networking; ``timeout`` is per HTTP request.
    """

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 60.0, max_retries: int = 3,
                 max_retry_wait: float = 30.0, transport: httpx.BaseTransport | None = None):
        super().__init__(url, api_key, max_retries, max_retry_wait)
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout, transport=transport)

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            response = self._http.request(method, path, **kwargs)
            wait = self._wait(response, attempt)
            if wait is None:
                return self._parse(response)
            time.sleep(wait)
            attempt += 1

    def search(self, query: str, unit: Unit = "phrase", top_k: int | None = None, *,
               max_answer_tokens: int | None = None, nprobe: int | None = None, merge_answers: bool | None = None,
               **params: Any) -> SearchResponse:
        """The best ``unit``s for one question (``.hits``); other keyword arguments go into the request body."""
        body = self._body(query, top_k, max_answer_tokens, nprobe, merge_answers, params)
        return SearchResponse.from_json(self._request("POST", "/search", params={"unit": unit}, json=body))

    def search_batch(self, queries: list[str], unit: Unit = "phrase", top_k: int | None = None, *,
                     max_answer_tokens: int | None = None, nprobe: int | None = None,
                     merge_answers: bool | None = None, **params: Any) -> SearchResponse:
        """Several questions in one request (``.results``, in order), batched together by the server."""
        body = self._body(queries, top_k, max_answer_tokens, nprobe, merge_answers, params)
        return SearchResponse.from_json(self._request("POST", "/search", params={"unit": unit}, json=body))

    def info(self) -> dict[str, Any]:
        """``GET /info``: the served model, index summary and service settings."""
        return self._request("GET", "/info")

    def ready(self) -> bool:
        """True when ``GET /ready`` answers 200 (model and index loaded)."""
        return self._http.get("/ready").status_code == 200

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio twin of ``Client``: the same methods, awaited; ``async with`` or ``await aclose()``."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 60.0, max_retries: int = 3,
                 max_retry_wait: float = 30.0, transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(url, api_key, max_retries, max_retry_wait)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout, transport=transport)

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            response = await self._http.request(method, path, **kwargs)
            wait = self._wait(response, attempt)
            if wait is None:
                return self._parse(response)
            await asyncio.sleep(wait)
            attempt += 1

    async def search(self, query: str, unit: Unit = "phrase", top_k: int | None = None, *,
                     max_answer_tokens: int | None = None, nprobe: int | None = None,
                     merge_answers: bool | None = None, **params: Any) -> SearchResponse:
        """The best ``unit``s for one question (``.hits``); other keyword arguments go into the request body."""
        body = self._body(query, top_k, max_answer_tokens, nprobe, merge_answers, params)
        return SearchResponse.from_json(await self._request("POST", "/search", params={"unit": unit}, json=body))

    async def search_batch(self, queries: list[str], unit: Unit = "phrase", top_k: int | None = None, *,
                           max_answer_tokens: int | None = None, nprobe: int | None = None,
                           merge_answers: bool | None = None, **params: Any) -> SearchResponse:
        """Several questions in one request (``.results``, in order), batched together by the server."""
        body = self._body(queries, top_k, max_answer_tokens, nprobe, merge_answers, params)
        return SearchResponse.from_json(await self._request("POST", "/search", params={"unit": unit}, json=body))

    async def info(self) -> dict[str, Any]:
        """``GET /info``: the served model, index summary and service settings."""
        return await self._request("GET", "/info")

    async def ready(self) -> bool:
        """True when ``GET /ready`` answers 200 (model and index loaded)."""
        return (await self._http.get("/ready")).status_code == 200

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
