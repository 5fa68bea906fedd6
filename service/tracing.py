"""OpenTelemetry traces of the service's requests: a root span per request, its search stages as child spans.

    pip install 'spanseek[otel]'
    OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 spanseek serve --index work/demo-index

``provider_from_environment`` (called by ``spanseek serve`` and ``app_from_env``) builds a tracer provider that
exports over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; the
SDK reads its other ``OTEL_*`` variables (headers, service name, sampler) itself. Without the variable, or without
the SDK, there is no provider, ``create_app`` installs no tracing middleware, and requests cost nothing more.

The stages are not timed again: the batcher already records when this request waited in the queue and when its
batch was encoded, searched, aggregated and read (``BatchOutcome.intervals``, from ``core.plan.StageTimes``), and
those intervals become child spans with their own start and end times. Encode, search, aggregate and read are the
whole batch's (every request of a batch shows them), as in the response's ``timings_ms``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

log = logging.getLogger("spanseek.service")

# Requests that get a trace: probes and /metrics are polled every few seconds and would only add noise.
TRACED_PATHS = frozenset({"/search", "/info", "/admin/reload"})
# What a route leaves in the request's state for the middleware: the service.batcher.BatchOutcome it got.
OUTCOME_KEY = "batch_outcome"


def provider_from_environment(environ: Mapping[str, str]) -> TracerProvider | None:
    """A tracer provider exporting spans over OTLP/HTTP in batches, when ``environ`` (the process environment) sets
    an OTLP endpoint and OpenTelemetry tracing is not disabled; None otherwise, or (with a warning) when the SDK and
    its exporter are not installed."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or not (
            environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        log.warning("an OTLP endpoint is set but OpenTelemetry is not installed (%s): no traces; install it with "
                    "pip install 'spanseek[otel]'", e)
        return None
    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "spanseek"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # off the request path, in batches
    return provider


class TracingMiddleware:
    """A server span around each request to ``TRACED_PATHS`` (continuing a ``traceparent`` the client sent), with
    the request id, method, path and status as attributes, and the stages of a search as its children.

    Installed inside the request-id middleware (it reads the id from the ASGI scope) and outside the early refusal,
    so a 429 under overload is traced too.
    """

    def __init__(self, app: ASGIApp, provider: TracerProvider):
        from opentelemetry import propagate, trace

        from spanseek import __version__

        self.app = app
        self.tracer = provider.get_tracer("spanseek.service", __version__)
        self._extract, self._trace = propagate.extract, trace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in TRACED_PATHS:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        attributes = {"http.request.method": scope["method"], "url.path": scope["path"],
                      "spanseek.request_id": str(state.get("request_id", "-"))}
        with self.tracer.start_as_current_span(f"{scope['method']} {scope['path']}",
                                               context=self._extract(Headers(scope=scope)),
                                               kind=self._trace.SpanKind.SERVER, attributes=attributes) as span:
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                span.set_attribute("http.response.status_code", status["code"])
                if status["code"] >= 500:
                    span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
                outcome = state.get(OUTCOME_KEY)
                if outcome is not None:
                    self._stage_spans(span, outcome)

    def _stage_spans(self, parent: Any, outcome: Any) -> None:
        """One child span per timed stage of the request's batch, at the times the batcher measured."""
        epoch_ns = time.time_ns() - time.perf_counter_ns()  # perf_counter seconds -> Unix nanoseconds
        context = self._trace.set_span_in_context(parent)
        for stage, start, end in outcome.intervals:
            child = self.tracer.start_span(stage, context=context, start_time=epoch_ns + int(start * 1e9),
                                           attributes={"spanseek.stage": stage,
                                                       "spanseek.batch_size": outcome.batch_size})
            child.end(end_time=epoch_ns + int(end * 1e9))
