"""HTTP routes: POST /search, GET /health, /ready, /info, /metrics, POST /admin/reload (OpenAPI at /docs)."""

from __future__ import annotations

import asyncio
import collections
import difflib
import functools
import inspect
import json
import re
import secrets
import time
import typing
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response, params
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from spanseek.core.filters import SearchFilter
from spanseek.core.hits import Hit
from spanseek.core.lexical import LexicalIndexMissing
from spanseek.core.params import UNITS, SearchParams, SearchParamsError
from spanseek.service.batcher import BatchOutcome
from spanseek.service.bounds import check_before_search, check_estimate, passage_window, render_bounded
from spanseek.service.cursors import Ranking
from spanseek.service.errors import (
    BadRequest,
    ClientClosed,
    Forbidden,
    NotReady,
    PayloadTooLarge,
    ReloadFailed,
    Unauthorized,
    UnsupportedMediaType,
    request_id_of,
)
from spanseek.service.fairness import client_key
from spanseek.service.reload import index_nprobe
from spanseek.service.schemas import (
    ErrorResponse,
    FilterIn,
    HealthResponse,
    HitOut,
    InfoResponse,
    QueryResult,
    ReloadRequest,
    ReloadResponse,
    SearchRequest,
    SearchResponse,
    Timings,
    Unit,
)
from spanseek.service.tracing import OUTCOME_KEY

if TYPE_CHECKING:
    from spanseek.core.search import Searcher
    from spanseek.service.cost import CostModel
    from spanseek.service.settings import Settings

router = APIRouter()


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse} for code in codes}


@functools.cache
def query_parameters(endpoint: Callable[..., Any]) -> tuple[dict[str, bool], bool]:
    """The query parameters a route's ``endpoint`` declares (``Query``, as an ``Annotated`` mark or a default), each
    with whether it may be given more than once (a list), and whether the route reads a JSON body (a pydantic model):
    read from the endpoint's own signature, the one definition of what the route takes."""
    hints = typing.get_type_hints(endpoint, include_extras=True)
    taken: dict[str, bool] = {}
    body = False
    for name, param in inspect.signature(endpoint).parameters.items():
        hint = hints.get(name)
        marks = list(typing.get_args(hint)[1:]) if typing.get_origin(hint) is Annotated else []
        base = typing.get_args(hint)[0] if marks else hint
        kinds = [base, *typing.get_args(base)]  # (X | None: each of its members)
        query = next((m for m in [*marks, param.default] if isinstance(m, params.Query)), None)
        if query is not None:
            taken[query.alias or name] = any(typing.get_origin(k) is list or k is list for k in kinds)
        body = body or any(isinstance(k, type) and issubclass(k, BaseModel) for k in kinds)
    return taken, body


async def known_query(request: Request) -> None:
    """A 422 for a query parameter the route does not take (``PUT /files/a.txt?metaa=k=v`` dropped the metadata,
    ``/search?top_k=1`` was not read: the body holds it) or a single-valued one given more than once (the last was
    taken), naming it, the parameters the route takes and the closest of them. Every route has it, after its key
    check (a caller without the key learns nothing of the route)."""
    taken, body = query_parameters(request.scope["endpoint"])
    path = request.scope["route"].path_format
    errors = []
    for name in dict.fromkeys(request.query_params.keys()):
        given = request.query_params.getlist(name)
        if name not in taken:
            close = difflib.get_close_matches(name, list(taken), n=1)
            takes = f"it takes only {', '.join(taken)}" if taken else "it takes none"
            rest = ("; the other options go in the JSON body" if taken else "; send the request in the JSON body"
                    ) if body else ""
            errors.append({"loc": ("query", name), "type": "extra_forbidden", "input": given[0],
                           "msg": f"not a query parameter of {path}" + (f": did you mean {close[0]}?" if close else "")
                                  + f" ({takes}{rest})"})
        elif len(given) > 1 and not taken[name]:
            errors.append({"loc": ("query", name), "type": "value_error", "msg": "given more than once",
                           "input": given})
    if errors:
        raise RequestValidationError(errors)


def get_state(request: Request) -> Any:
    """The app's ServiceState (service.app)."""
    return request.app.state.service


def _presents_key(request: Request, key: str) -> bool:
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    return secrets.compare_digest(given.encode(), key.encode())


async def require_api_key(request: Request) -> None:
    """When an API key is configured: accept ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (or the admin
    key, ``SPANSEEK_ADMIN_API_KEY``), else 401. The request checks are ``async`` (they only read headers): FastAPI
    runs a plain function dependency on a worker thread, two thread hops a search for nothing."""
    settings = get_state(request).settings
    key, admin = settings.api_key, settings.admin_api_key
    if key is not None and not (_presents_key(request, key.get_secret_value())
                                or (admin is not None and _presents_key(request, admin.get_secret_value()))):
        raise Unauthorized()


async def require_json_body(request: Request) -> None:
    """A request that sends a body must declare it JSON (``application/json`` or ``application/*+json``), else 415
    with what to send; one without a body (a bare ``POST /admin/reload``) passes. The body must be UTF-8 (422 else):
    the JSON parser also reads UTF-16 and UTF-32, which a proxy or filter in front of the service may not (a charset
    other than UTF-8 declared is a 415 already: service.middleware.undecodable_body)."""
    headers = request.headers
    has_body = headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if has_body and media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise UnsupportedMediaType(f"send the body as JSON with the header Content-Type: application/json (got "
                                   f"{media or 'no Content-Type'})")
    if has_body and (encoding := json.detect_encoding(await request.body())) not in ("utf-8", "utf-8-sig"):
        raise RequestValidationError([{"loc": ("body",), "type": "json_invalid", "msg": "JSON decode error",
                                       "ctx": {"error": f"not UTF-8 text ({encoding.upper()}); send JSON as UTF-8"}}])
    if has_body:
        body = await request.body()
        try:
            parsed = await request.json()  # (FastAPI's parse of the body, which the request keeps: not made again)
        except (ValueError, RecursionError):
            return  # FastAPI's own parsing has said why
        check = functools.partial(repeated_key, body, parsed)
        where = check() if len(body) <= ON_LOOP_BYTES else await asyncio.to_thread(check)
        if where is not None:
            raise RequestValidationError([{"loc": ("body", *where), "type": "value_error",
                                           "msg": "given more than once in one object; give each key once"}])


ON_LOOP_BYTES = 64 * 1024  # bodies up to this are checked for a repeated key on the event loop (a few ms at most)
# a body with an object (a "{") in fewer bytes than this is checked for a repeated key by counting (``may_repeat_key``)
# before the parser's hook, whose cost is in its objects (about 0.2 us each), where counting costs a few ns a byte
DENSE_OBJECT_BYTES = 50


class _Repeated(dict):
    """A JSON object that gave ``key`` more than once (``repeated_key``)."""

    key: str


def may_repeat_key(body: bytes, parsed: Any) -> bool:
    """Whether JSON ``body``, whose value the JSON parser made ``parsed``, may give a key twice in one object; False
    is sure. Each key is followed by a colon, so the body's colons (with those its strings escape as ``\\u003a``)
    are at least its keys and its strings' colons; ``parsed`` serialised has its keys once each and the colons of
    the strings it kept: the counts are equal only where no key is repeated. A body sparse in objects (documents of
    long paragraphs) may always repeat one: its hook's few calls cost less than serialising it."""
    if body.count(b"{") * DENSE_OBJECT_BYTES < len(body):
        return True
    try:
        kept = json.dumps(parsed, ensure_ascii=False, separators=(",", ":")).count(":")
    except (ValueError, RecursionError):
        return True
    return body.count(b":") + body.count(b"\\u003a") + body.count(b"\\u003A") != kept


def repeated_key(body: bytes, parsed: Any = None) -> list[str | int] | None:
    """Where JSON ``body`` gives one key twice in an object, as a ``loc`` (the keys and list positions down to it,
    the key last), or None. The JSON parser takes the last value of a repeated key, so ``{"top_k": 5, "top_k": 50}``
    searched 50 and a document ``{"id": "a", ..., "id": "b"}`` was written as "b", with no word of the other; a query
    parameter given twice was refused already (``known_query``). Found by the parser's hook, for about twice the
    parsing's time; None for a body the parser refuses (FastAPI's own parsing has said why). Every object that
    repeats a key is marked, as one inside a value its own repeated key drops (``{"f": {"a": 1, "a": 2}, "f": 0}``)
    is in the parsed body no more, and the first marked one met is named. The hook runs only for a body that
    ``may_repeat_key`` (``parsed``: the body's value, parsed here when not given): a megabyte of ``{}`` took 66-80 ms
    through it, 13 ms counted."""
    try:
        if not may_repeat_key(body, json.loads(body) if parsed is None else parsed):
            return None
    except (ValueError, RecursionError):
        return None
    found = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        repeated = _Repeated(obj)
        count = collections.Counter(k for k, _ in pairs)
        repeated.key = next(k for k, _ in pairs if count[k] > 1)
        found = True
        return repeated

    try:
        parsed = json.loads(body, object_pairs_hook=pairs_hook)
    except (ValueError, RecursionError):
        return None
    if not found:
        return None
    # depth first in the body's order, without recursion; a value's place is a link to its parent's, (parent, key),
    # spelled out only for the one named: copying each place was a body's size times its depth
    Place = tuple[Any, str | int] | None
    stack: list[tuple[Any, Place]] = [(parsed, None)]
    while stack:
        value, place = stack.pop()
        if isinstance(value, _Repeated):
            loc: list[str | int] = [value.key]
            while place is not None:
                place, key = place
                loc.append(key)
            return loc[::-1]
        items = (reversed(value.items()) if isinstance(value, dict)
                 else reversed(list(enumerate(value))) if isinstance(value, list) else ())
        stack.extend((v, (place, k)) for k, v in items if isinstance(v, (dict, list)))
    return None  # (not reached: the outermost object that repeats a key is in the parsed body)


def may_see_paths(request: Request) -> bool:
    """Server paths are shown only to a caller holding a configured key, the API key or the admin key (never when
    none is configured)."""
    settings = get_state(request).settings
    return any(key is not None and _presents_key(request, key.get_secret_value())
               for key in (settings.api_key, settings.admin_api_key))


# an absolute POSIX path of two or more components, up to a quote, space, colon or comma
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])/(?:[^/\s'\",:()]+/)+([^/\s'\",:()]+)")


def hide_paths(text: str) -> str:
    """``text`` with every absolute path cut to its last component (``.../manifest.json``), for unauthorised eyes."""
    return _ABSOLUTE_PATH.sub(r".../\1", text)


def hide_paths_in(value: Any) -> Any:
    """``value`` (parsed JSON) with ``hide_paths`` applied to each of its strings."""
    if isinstance(value, str):
        return hide_paths(value)
    if isinstance(value, dict):
        return {k: hide_paths_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hide_paths_in(v) for v in value]
    return value


def load_error(request: Request) -> str:
    """Why loading failed, as this caller may see it (full paths are in the log)."""
    detail = str(get_state(request).detail)
    return detail if may_see_paths(request) else hide_paths(detail)


def not_ready(request: Request) -> NotReady:
    """The 503 for a service without a loaded index: why loading failed, or that it is still loading."""
    state = get_state(request)
    if state.status == "failed":
        return NotReady(f"loading failed: {load_error(request)}")
    if state.status == "broken":  # (ServiceState.batcher_stopped)
        return NotReady(f"{state.detail}; searches cannot be answered until the service is started again")
    if state.status == "loading" and state.detail:  # what the start is doing: replaying the write log, warming up
        return NotReady(f"{NotReady.default_message} ({state.detail})")
    return NotReady()


async def _cancel_on_disconnect(request: Request, task: asyncio.Task) -> None:
    """After the body is read, the next ASGI message is ``http.disconnect``: the client left, drop its work."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            task.cancel()
            return


async def submit_unless_client_leaves(request: Request, work: Coroutine[Any, Any, BatchOutcome]) -> BatchOutcome:
    """Await the batcher; if the client disconnects first, cancel the request so the batcher skips it."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_cancel_on_disconnect(request, task))
    try:
        return await task
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled():
            raise ClientClosed() from None
        raise
    finally:
        watcher.cancel()


def _check_range(name: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")


@router.get("/health", response_model=HealthResponse, tags=["probes"], dependencies=[Depends(known_query)],
            responses=_errors(422))
async def health(request: Request) -> HealthResponse:
    """Liveness: 200 while the process runs, also while loading and after loading failed (a restart would not
    fix a bad index or model; /ready says 503 with the reason, and the log has it). 503 once no search can be
    answered any more (the search batcher stopped on a fault): a restart fixes that."""
    state = get_state(request)
    if state.status == "broken":
        raise not_ready(request)
    return HealthResponse(status="ok", detail=f"{state.status}: {load_error(request)}" if state.status == "failed"
                          else state.status)


@router.get("/ready", response_model=HealthResponse, responses=_errors(422, 503), tags=["probes"],
            dependencies=[Depends(known_query)])
async def ready(request: Request) -> HealthResponse:
    """Readiness: 200 once the model and index are loaded and warmed up, 503 before, if loading failed, or once
    searches cannot be answered any more (the search batcher stopped; the server then stops to be restarted)."""
    if get_state(request).status != "ready":
        raise not_ready(request)
    return HealthResponse(status="ready")


def _reader_info(searcher) -> dict[str, Any] | None:
    """What requests with ``read`` get: the reader's default depth and the depths its combination was fitted for;
    None when the service has no reader."""
    reading = getattr(searcher, "reading", None)
    if reading is None:
        return None
    r = reading.reading
    return {"read_passages": r.read_passages, "fitted_read_passages": sorted({r.read_passages, *r.depths}),
            "spans_per_passage": r.spans_per_passage, "backbone": reading.reader.config.backbone}


def _file_limits(state: Any) -> dict[str, Any] | None:
    """What ``PUT /files/{name}`` refuses a file for (``service.files``), so that a client can check its files before
    it sends them (``spanseek sync --dry-run``); None when writes are off (no file is taken). ``tokenizer``: the model
    backbone whose tokenizer counts a file's tokens for ``max_file_tokens``."""
    if state.live is None:
        return None
    s = state.settings
    return {"max_file_bytes": s.max_file_bytes, "max_file_tokens": s.max_file_tokens,
            "file_read_memory_bytes": s.file_read_memory_bytes, "file_read_timeout_s": s.file_read_timeout_s,
            "max_file_uploads": s.max_file_uploads, "max_title_chars": s.max_title_chars,
            "tokenizer": state.live.file_reader.config.backbone}


@router.get("/info", response_model=InfoResponse, responses=_errors(401, 422, 503), tags=["service"],
            dependencies=[Depends(require_api_key), Depends(known_query)])
async def info(request: Request) -> InfoResponse:
    """The served model, a summary of the index manifest with its counts, and the batching settings."""
    state = get_state(request)
    if not state.info:
        raise not_ready(request)
    s = state.settings
    reader = _reader_info(state.searcher)
    service = {
        "status": state.status, "max_batch_size": s.max_batch_size, "max_wait_ms": s.max_wait_ms,
        "max_queue": s.max_queue, "default_top_k": s.default_top_k, "max_top_k": s.max_top_k,
        "default_read": s.default_read, "default_read_below": s.default_read_below,
        "max_queries_per_request": s.max_queries_per_request, "max_query_chars": s.max_query_chars,
        "units": list(UNITS), **state.search_info,
        "max_queue_wait_ms": s.max_queue_wait_ms, "passage_context_chars": s.passage_context_chars,
        "max_request_cost": s.max_request_cost,
        # the limits of reading, null where no request can read (as reader, writes and files are without them)
        "max_passages_read": state.cost.most_passages_read(s) if reader is not None else None,
        "fair_share_by": s.fair_share_by,
        "max_response_bytes": s.max_response_bytes, "max_offset_top_k": s.max_offset_top_k,
        "confidence": sorted(state.searcher.calibrator.models) if state.searcher and state.searcher.calibrator else [],
        "pipeline": s.pipeline, "overlap": state.overlap, "reader": reader,
        "max_read_passages": s.max_read_passages if reader is not None else None, "version": request.app.version, "reload": state.reloader.describe(),
        "writes": state.live.describe() if state.live is not None else None,  # live writes: base, segment, log
        "files": _file_limits(state),
    }
    index = dict(state.info["index"])
    if service["writes"] is not None:  # what searches see now, and the base they are searched over
        writes = service["writes"]
        # described before the writes' counts show a merge (LiveWrites._publish), so found: counts and description
        # change together
        index = dict(state.described.get(writes["base"], index))
        index.update(documents=writes["documents"], passages=writes["passages"], tokens=writes["tokens"],
                     dir=str(writes["base"]), size_bytes=index["size_bytes"] + writes["wal_bytes"],
                     base_size_bytes=index["size_bytes"])  # on disk: the base's directory and the write log
    model = dict(state.info["model"])
    if not may_see_paths(request):  # every path, wherever it is: a merged base, a merge or reload error, a hint
        model, index, service = hide_paths_in(model), hide_paths_in(index), hide_paths_in(service)
    return InfoResponse(model=model, index=index, service=service)


@router.get("/metrics", tags=["service"], response_class=Response, dependencies=[Depends(known_query)],
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus exposition"},
                       **_errors(422)})
async def metrics(request: Request, names: Annotated[list[str] | None, Query(
        alias="name[]", description="only these series (prometheus_client's exporter's filter)")] = None) -> Response:
    """Prometheus metrics (``spanseek_*``)."""
    state = get_state(request)
    if state.batcher is not None:
        state.metrics.queue_depth.set(state.batcher.depth)
    return Response(state.metrics.render(names), media_type=CONTENT_TYPE_LATEST)


def core_filter(request_filter: FilterIn) -> SearchFilter:
    """A request's filter as the core filter, with its key and hash made: run off the event loop (a filter of 1 MB
    took tens of ms to convert, every other client's request waiting) and before the search worker, which groups
    and caches by the hash while every batch waits for it. FilterError (a SearchParamsError) as ``to_filter``."""
    flt = request_filter.to_filter()
    hash(flt)  # kept by the frozen filter (core.filters)
    return flt


def cost_refusal(cost_model: CostModel, settings: Settings, questions: int, params: SearchParams) -> str | None:
    """Why a request of ``questions`` questions with ``params`` costs more than this server ever admits
    (``CostModel.refusal``: ``max_request_cost``, ``max_passages_read``, the whole queue), or None: a 400, not a
    429 for ever."""
    return cost_model.refusal(questions, params, settings)


def server_reading(fields: dict[str, Any], given: set[str], settings: Settings, searcher: Searcher,
                   refusal: Callable[[SearchParams], str | None]) -> tuple[SearchParams, str | None]:
    """The parameters of a request's ``fields`` (those ``given``) with the server's reading defaults where it does not
    say, and a warning where ``default_read`` leaves it unread. ``default_read`` reads a request that gives no
    ``read`` where reading can answer it: not one whose options reading refuses (collapsing duplicates), nor one
    that ``refusal`` (its cost) refuses once read, which the default would turn from an answer into a 400; one that
    gives an option only reading takes (``read_passages``, ``read_below``) asks to be read. ``default_read_below`` is
    the ``read_below`` of a read request that gives none, where the model's calibration can judge the request's unit
    and mode (elsewhere every question is read). SearchParamsError as ``SearchParams``."""
    asks = "read" in given or any(fields.get(name) is not None for name in ("read_passages", "read_below"))
    if not settings.default_read or asks:
        read_by_default = settings.default_read and "read" not in given
        params = SearchParams(**{**fields, "read": True} if read_by_default else fields)
        return default_read_below(params, settings, searcher), None
    try:
        read = default_read_below(SearchParams(**{**fields, "read": True}), settings, searcher)
        searcher.check_mode(read)
        why = refusal(read)
    except SearchParamsError as e:
        why = str(e)
    if why is None:
        return read, None
    return SearchParams(**fields), ("not read, though this server reads requests that do not give read "
                                    f"(default_read): {why}")


def checked_params(fields: dict[str, Any], given: set[str], settings: Settings, searcher: Searcher,
                   refusal: Callable[[SearchParams], str | None], state: Any, request_filter: FilterIn | None
                   ) -> tuple[SearchParams, str | None]:
    """``server_reading``'s parameters of ``fields`` with ``request_filter`` (``core_filter``) and its warning, the
    parameters checked against the searcher (``check_mode``: its mode, and the filter against the index's fields);
    ``state`` (the request's) takes whether they read, the latency's label, before the check. SearchParamsError and
    LexicalIndexMissing as those."""
    fields = {**fields, "filter": core_filter(request_filter) if request_filter is not None else None}
    params, unread = server_reading(fields, given, settings, searcher, refusal)
    state.read = params.read
    searcher.check_mode(params)
    return params, unread


def default_read_below(params: SearchParams, settings: Settings, searcher: Searcher) -> SearchParams:
    """``params`` with ``read_below`` the server's ``default_read_below`` where it reads and gives none, and the
    model's calibration can judge its unit and mode."""
    if not params.read or params.read_below is not None or settings.default_read_below is None:
        return params
    below = replace(params, read_below=settings.default_read_below)
    try:
        searcher.check_mode(below)
    except SearchParamsError:  # no calibration for this unit and mode: read them all
        return params
    return below


@router.post(
    "/search", response_model=SearchResponse, tags=["search"],
    dependencies=[Depends(require_api_key), Depends(known_query), Depends(require_json_body)],
    responses=_errors(400, 401, 410, 413, 415, 422, 429, 503),
)
async def search(
    body: SearchRequest,  # type: ignore[valid-type]  # generated from SearchParams (service.schemas)
    request: Request,
    unit: Annotated[Unit, Query(description="what to return: answer phrases, passages or documents")] = "phrase",
) -> Response:
    """Search: the best ``unit``s for each question, best first, with timings (also as response headers).

    Blank questions get no hits; questions longer than the encoder's limit are truncated.
    """
    t0 = time.perf_counter()
    request.state.read = bool(body.read)  # the `read` label of the request's latency (service.middleware)
    state = get_state(request)
    s = state.settings
    if body.cursor is not None:
        return next_page(request, body.cursor, body.top_k, unit if "unit" in request.query_params else None, t0)
    given = body.questions()
    questions = [q[: s.max_query_chars] for q in given]  # the rest is not searched: each result says so (truncated)
    if len(questions) > s.max_queries_per_request:
        raise PayloadTooLarge.queries(len(questions), s.max_queries_per_request)
    _check_range("top_k", body.top_k, 1, s.max_top_k)
    _check_range("max_answer_tokens", body.max_answer_tokens, 1, s.max_answer_tokens_limit)
    _check_range("nprobe", body.nprobe, 1, s.max_nprobe)
    _check_range("offset", body.offset, 0, s.max_offset_top_k)
    _check_range("rank_window", body.rank_window, 1, s.max_offset_top_k)
    _check_range("read_passages", body.read_passages, 1, s.max_read_passages)
    top_k = body.top_k or s.default_top_k
    if (body.offset or 0) + top_k > s.max_offset_top_k:
        raise BadRequest(f"offset + top_k must be at most {s.max_offset_top_k}, got {(body.offset or 0) + top_k}")
    if state.batcher is None or state.status == "broken":
        raise not_ready(request)
    warnings: list[str] = []
    if body.nprobe is not None and index_nprobe(state.searcher) is None:
        # accepted, not refused: a client sends the same options to every index, and a reload may swap an IVF index
        # for an exact one under it
        warnings.append(f"nprobe ({body.nprobe}) is not used: this index has no inverted lists (factory "
                        f"{state.info['index'].get('factory')}), so every token is scored")
    try:
        fields = {**body.search_parameters(), "unit": unit, "top_k": top_k, "offset": body.offset or 0,
                  "nprobe": body.nprobe or state.default_nprobe}
        refusal = functools.partial(cost_refusal, state.cost, s, len(questions))
        check = functools.partial(checked_params, fields, body.model_fields_set, s, state.searcher, refusal,
                                  request.state)
        # a request's filter is converted (``core_filter``) and checked against the index's field index, which builds
        # an older index's passage fields at its first passage condition (O(passages)), off the event loop
        params, unread = await asyncio.to_thread(check, body.filter) if body.filter is not None else check(None)
        del check  # it holds this index's searcher: a request cancelled later keeps its frame in its task, and with it
        # the old index after a reload (released_previous would then be untrue)
        if unread is not None:
            warnings.append(unread)
    except ValueError as e:  # SearchParamsError
        raise BadRequest(str(e)) from None
    except LexicalIndexMissing as e:  # a mode the index cannot serve: the message names the index's directory
        raise BadRequest(str(e) if may_see_paths(request) else hide_paths(str(e))) from None
    too_costly = refusal(params)
    if too_costly is not None:
        raise BadRequest(too_costly)
    check_before_search(questions, params, state.cost, s.max_response_bytes)  # a sure 400: no search
    cost = state.cost.request(len(questions), params)
    client = client_key(request.scope, s.fair_share_by)
    # a rank_window deeper than the page: the ranking is that deep anyway, and its rest is kept for the next pages
    searched = replace(params, top_k=params.depth - params.offset) if params.rank_window is not None else params
    try:
        outcome = await submit_unless_client_leaves(request, state.batcher.submit(questions, searched, cost, client))
    except LexicalIndexMissing as e:  # checked above, but a reload swapped in an index without a lexical part
        raise BadRequest(str(e) if may_see_paths(request) else hide_paths(str(e))) from None
    except SearchParamsError as e:  # checked above, but a write, merge or reload swapped in an index where it fails:
        raise BadRequest(str(e)) from None  # a filter's field that no document has now, a mode or reader it lacks
    state.metrics.questions.labels(unit=unit).inc(len(questions))
    setattr(request.state, OUTCOME_KEY, outcome)  # its stage times, for the trace (service.tracing)
    timings = Timings(
        queue=outcome.queue * 1e3, encode=outcome.encode * 1e3, search=outcome.search * 1e3,
        aggregate=outcome.aggregate * 1e3, read=outcome.read * 1e3, total=(time.perf_counter() - t0) * 1e3,
        batch_size=outcome.batch_size,
    )
    context = None if body.full_passage else s.passage_context_chars
    pages = []
    for q, whole, found in zip(questions, given, outcome.hits, strict=True):
        no_answer = getattr(found, "no_answer", False)
        rest = Ranking(unit, q, len(whole) > len(q), found[top_k:], top_k, context)
        pages.append((rest, found[:top_k], no_answer, None if no_answer else state.cursors.cursor(rest)))
    answer = search_response(request, unit, pages, timings, warnings)
    for rest, _, _, after in pages:  # kept once the answer is made: one refused as too large keeps none
        state.cursors.keep(after, rest)
    return answer


def next_page(request: Request, cursor: str, top_k: int | None, unit: Unit | None, t0: float) -> Response:
    """The page of a paging ``cursor`` (``service.cursors``), ``top_k`` hits (default: the first page's), from the
    ranking kept for it: no search. 410 when it is no longer kept; 400 for a ``unit`` other than its ranking's."""
    state = get_state(request)
    _check_range("top_k", top_k, 1, state.settings.max_top_k)
    ranking, hits, after = state.cursors.page(cursor, top_k)
    request.state.unit = ranking.unit  # its latency's label (service.middleware)
    if unit is not None and unit != ranking.unit:
        raise BadRequest(f"unit={unit}, but this cursor pages a unit={ranking.unit} ranking: give unit={ranking.unit} "
                         "or leave unit out")
    timings = Timings(queue=0.0, encode=0.0, search=0.0, aggregate=0.0, total=(time.perf_counter() - t0) * 1e3,
                      batch_size=0)
    return search_response(request, ranking.unit, [(ranking, hits, False, after)], timings, [])


def search_response(request: Request, unit: Unit, pages: list[tuple[Ranking, list[Hit], bool, str | None]],
                    timings: Timings, warnings: list[str]) -> Response:
    """The answer of ``POST /search`` of ``unit``: per question, its ranking's question and passage context, the hits of
    its page, whether it abstained and its next cursor; with ``timings``, also as headers. 400 when it would be
    larger than ``max_response_bytes``."""
    s = get_state(request).settings
    stages = ("queue", "encode", "search", "aggregate", "read", "total")
    headers = {f"X-Spanseek-{stage.capitalize()}-Ms": f"{getattr(timings, stage):.3f}" for stage in stages}
    headers["X-Spanseek-Batch-Size"] = str(timings.batch_size)
    headers["Server-Timing"] = ", ".join(f"{st};dur={getattr(timings, st):.3f}" for st in stages)
    hits = [[passage_window(h, ranking.context) for h in page] for ranking, page, _, _ in pages]
    check_estimate(hits, [ranking.query for ranking, *_ in pages], s.max_response_bytes)
    return render_bounded(
        SearchResponse(unit=unit,
                       results=[QueryResult(query=ranking.query, hits=[HitOut(**h) for h in per_query],
                                            no_answer=no_answer, truncated=ranking.truncated, next=after)
                                for (ranking, _, no_answer, after), per_query in zip(pages, hits, strict=True)],
                       timings_ms=timings, request_id=request_id_of(request), warnings=warnings),
        s.max_response_bytes, headers,
    )


@router.post("/admin/reload", response_model=ReloadResponse, tags=["service"],
             dependencies=[Depends(require_api_key), Depends(known_query), Depends(require_json_body)],
             responses=_errors(401, 403, 409, 415, 422, 429, 503))
async def reload_index(request: Request, body: ReloadRequest | None = None) -> ReloadResponse:
    """Hot reload: load the index (``index`` from the body, else the served path or alias resolved again), verify
    its checksums and model, warm it up, then swap it in. Requests in flight finish on the old index; none is
    dropped. 409 with the reason when the new index cannot serve (the old one keeps serving). A reload reads the
    whole index and holds two in memory, and it serves any index path on the server: it needs the admin key where
    one is configured (the API key then only reads: 403), else the API key (403 when neither is configured),
    requests that come while one runs share it, and one within ``reload_min_interval_s`` of the last gets 429.
    """
    state = get_state(request)
    settings = state.settings
    if settings.writes:
        raise Forbidden("POST /admin/reload is off while writes are on: the served index changes by writes and "
                        "merges (POST /admin/compact)")
    key = settings.admin_api_key or settings.api_key
    if key is None:
        raise Forbidden("POST /admin/reload is off: it needs an API key on the server (SPANSEEK_API_KEY or "
                        "SPANSEEK_ADMIN_API_KEY); without one, switch the index alias with SPANSEEK_INDEX_POLL_S set, "
                        "or send SIGHUP to the server to reload the served path")
    if not _presents_key(request, key.get_secret_value()):  # the API key where an admin key is set, or no key
        read = settings.api_key
        if read is not None and _presents_key(request, read.get_secret_value()):
            raise Forbidden("POST /admin/reload needs the admin key (SPANSEEK_ADMIN_API_KEY); this key may only "
                            "search and read")
        raise Unauthorized()
    path = Path(body.index) if body is not None and body.index is not None else None
    try:
        index = await state.reloader.on_request(path)
    except ReloadFailed as e:
        raise ReloadFailed(e.message if may_see_paths(request) else hide_paths(e.message)) from None
    if not may_see_paths(request):
        index["dir"], index["path"] = hide_paths(index["dir"]), hide_paths(index["path"])
    return ReloadResponse(index=index, reload=state.reloader.describe())
