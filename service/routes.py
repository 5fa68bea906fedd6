"""HTTP routes: POST /search, GET /health, /ready, /info, /metrics (OpenAPI at /docs)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from spanseek.core.lexical import LexicalIndexMissing
from spanseek.core.params import UNITS, SearchParams
from spanseek.service.batcher import BatchOutcome
from spanseek.service.errors import (
    BadRequest,
    ClientClosed,
    NotReady,
    PayloadTooLarge,
    Unauthorized,
    request_id_of,
)
from spanseek.service.schemas import (
    ErrorResponse,
    HealthResponse,
    HitOut,
    InfoResponse,
    QueryResult,
    SearchRequest,
    SearchResponse,
    Timings,
    Unit,
)

router = APIRouter()


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse} for code in codes}


def get_state(request: Request) -> Any:
    """The app's ServiceState (service.app)."""
    return request.app.state.service


def require_api_key(request: Request) -> None:
    """When an API key is configured: accept ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, else 401."""
    key = get_state(request).settings.api_key
    if key is None:
        return
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    if not secrets.compare_digest(given.encode(), key.get_secret_value().encode()):
        raise Unauthorized()


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


@router.get("/health", response_model=HealthResponse, responses=_errors(503), tags=["probes"])
async def health(request: Request) -> HealthResponse:
    """Liveness: 200 while the process can serve or is loading; 503 when loading failed (restart won't help
    unless the index or model is fixed, but the orchestrator should notice)."""
    state = get_state(request)
    if state.status == "failed":
        raise NotReady(f"loading failed: {state.detail}")
    return HealthResponse(status="ok")


@router.get("/ready", response_model=HealthResponse, responses=_errors(503), tags=["probes"])
async def ready(request: Request) -> HealthResponse:
    """Readiness: 200 once the model and index are loaded and warmed up, 503 before (or if loading failed)."""
    state = get_state(request)
    if state.status == "failed":
        raise NotReady(f"loading failed: {state.detail}")
    if state.status != "ready":
        raise NotReady()
    return HealthResponse(status="ready")


@router.get("/info", response_model=InfoResponse, responses=_errors(401, 503), tags=["service"],
            dependencies=[Depends(require_api_key)])
async def info(request: Request) -> InfoResponse:
    """The served model, a summary of the index manifest with its counts, and the batching settings."""
    state = get_state(request)
    if not state.info:
        raise NotReady()
    s = state.settings
    service = {
        "status": state.status, "max_batch_size": s.max_batch_size, "max_wait_ms": s.max_wait_ms,
        "max_queue": s.max_queue, "default_top_k": s.default_top_k, "max_top_k": s.max_top_k,
        "max_queries_per_request": s.max_queries_per_request, "units": list(UNITS), **state.search_info,
        "pipeline": s.pipeline, "overlap": state.overlap,
        "version": request.app.version,
    }
    return InfoResponse(model=state.info["model"], index=state.info["index"], service=service)


@router.get("/metrics", tags=["service"], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus exposition"}})
async def metrics(request: Request) -> Response:
    """Prometheus metrics (``spanseek_*``)."""
    state = get_state(request)
    if state.batcher is not None:
        state.metrics.queue_depth.set(state.batcher.depth)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.post(
    "/search", response_model=SearchResponse, tags=["search"], dependencies=[Depends(require_api_key)],
    responses=_errors(400, 401, 413, 422, 429, 503),
)
async def search(
    body: SearchRequest,
    request: Request,
    response: Response,
    unit: Annotated[Unit, Query(description="what to return: answer phrases, passages or documents")] = "phrase",
) -> SearchResponse:
    """Search: the best ``unit``s for each question, best first, with timings (also as response headers).

    Blank questions get no hits; questions longer than the encoder's limit are truncated.
    """
    t0 = time.perf_counter()
    state = get_state(request)
    s = state.settings
    questions = [q[: s.max_query_chars] for q in body.questions()]
    if len(questions) > s.max_queries_per_request:
        raise PayloadTooLarge(f"{len(questions)} queries in one request; at most {s.max_queries_per_request}")
    _check_range("top_k", body.top_k, 1, s.max_top_k)
    _check_range("max_answer_tokens", body.max_answer_tokens, 1, s.max_answer_tokens_limit)
    _check_range("nprobe", body.nprobe, 1, s.max_nprobe)
    if state.batcher is None:
        raise NotReady(f"loading failed: {state.detail}" if state.status == "failed" else "the model and index are still loading")
    try:
        params = SearchParams(
            unit=unit, top_k=body.top_k or s.default_top_k, max_answer_tokens=body.max_answer_tokens,
            nprobe=body.nprobe or state.default_nprobe, merge_answers=body.merge_answers, mode=body.mode,
            fusion=body.fusion, lexical_weight=body.lexical_weight,
        )
        state.searcher.check_mode(params)
    except (ValueError, LexicalIndexMissing) as e:  # SearchParamsError, or a mode the index cannot serve
        raise BadRequest(str(e)) from None
    outcome = await submit_unless_client_leaves(request, state.batcher.submit(questions, params))
    state.metrics.questions.labels(unit=unit).inc(len(questions))
    timings = Timings(
        queue=outcome.queue * 1e3, encode=outcome.encode * 1e3, search=outcome.search * 1e3,
        aggregate=outcome.aggregate * 1e3, total=(time.perf_counter() - t0) * 1e3, batch_size=outcome.batch_size,
    )
    stages = ("queue", "encode", "search", "aggregate", "total")
    for stage in stages:
        response.headers[f"X-Spanseek-{stage.capitalize()}-Ms"] = f"{getattr(timings, stage):.3f}"
    response.headers["X-Spanseek-Batch-Size"] = str(outcome.batch_size)
    response.headers["Server-Timing"] = ", ".join(f"{st};dur={getattr(timings, st):.3f}" for st in stages)
    results = [
        QueryResult(query=q, hits=[HitOut(**h.to_dict()) for h in hits])
        for q, hits in zip(questions, outcome.hits, strict=True)
    ]
    return SearchResponse(unit=unit, results=results, timings_ms=timings, request_id=request_id_of(request))
