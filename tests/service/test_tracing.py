"""OpenTelemetry traces: a search request is one trace whose root span carries the request id and whose children
are its stages at the times the batcher measured them; OTLP export when the endpoint is set; nothing otherwise.

    .venv/bin/python -m pytest -q tests/service/test_tracing.py
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from spanseek.service.app import create_app  # noqa: E402
from spanseek.service.tracing import TracingMiddleware, provider_from_environment  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_a_search_is_a_trace_of_its_stages(settings_for, tiny_searcher, serve, exported):
    provider, exporter = exported
    app = create_app(settings_for(), lambda s: tiny_searcher, tracer_provider=provider)
    with serve(app) as client:
        exporter.clear()
        r = client.post("/search?unit=passage", json={"queries": ["who built the castle?", "a river"], "top_k": 3},
                        headers={"X-Request-ID": "trace-me", "traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert r.status_code == 200
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.parent is None or s.parent.is_remote]
    assert root.name == "POST /search" and root.kind == SpanKind.SERVER
    assert root.attributes["spanseek.request_id"] == "trace-me"
    assert root.attributes["http.response.status_code"] == 200 and root.attributes["url.path"] == "/search"
    assert f"{root.context.trace_id:032x}" == TRACE_ID and f"{root.parent.span_id:016x}" == PARENT  # continued

    children = [s for s in spans if s is not root]
    assert {s.name for s in children} == {"queue", "encode", "search", "aggregate"}
    for child in children:
        assert child.parent.span_id == root.context.span_id and child.context.trace_id == root.context.trace_id
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
        assert child.attributes["spanseek.batch_size"] == 2
    by_name = {name: [s for s in children if s.name == name] for name in ("queue", "encode", "search", "aggregate")}
    [queue], [encode] = by_name["queue"], by_name["encode"]
    # the request waited, then its batch was encoded, then searched (the queue is timed on another clock, whose
    # offset is read once: allow 1 ms for a thread switch between the two reads)
    assert queue.end_time <= encode.start_time + 1_000_000
    assert encode.end_time <= min(s.start_time for s in by_name["search"])
    timings = r.json()["timings_ms"]  # the spans are the measured stages, not new timings
    for name in ("encode", "search", "aggregate"):
        total_ms = sum(s.end_time - s.start_time for s in by_name[name]) / 1e6
        assert total_ms == pytest.approx(timings[name], abs=0.01)
    assert (queue.end_time - queue.start_time) / 1e6 == pytest.approx(timings["queue"], abs=0.05)


def test_errors_and_untraced_paths(settings_for, tiny_searcher, serve, exported):
    provider, exporter = exported
    with serve(create_app(settings_for(), lambda s: tiny_searcher, tracer_provider=provider)) as client:
        exporter.clear()
        assert client.post("/search", json={"query": "x", "top_k": 0}).status_code == 400
        client.get("/metrics")
        client.get("/health")
    [span] = exporter.get_finished_spans()  # probes and metrics are not traced
    assert span.name == "POST /search" and span.attributes["http.response.status_code"] == 400
    assert len(span.attributes["spanseek.request_id"]) == 32


def test_no_provider_no_tracing(settings_for, tiny_searcher):
    app = create_app(settings_for(), lambda s: tiny_searcher)
    assert not any(m.cls is TracingMiddleware for m in app.user_middleware)
    assert provider_from_environment({}) is None
    assert provider_from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}) is None


def test_an_endpoint_without_the_sdk_warns_and_traces_nothing(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if the otel extra were not installed
    with caplog.at_level("WARNING", logger="spanseek.service"):
        assert provider_from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is None
    assert "spanseek[otel]" in caplog.text


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that keeps what it is sent."""

    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Collector.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_spans_are_exported_over_otlp_http(settings_for, tiny_searcher, serve, monkeypatch):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)  # the SDK's exporter reads it too
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    import os

    provider = provider_from_environment(os.environ)
    assert provider is not None
    try:
        with serve(create_app(settings_for(), lambda s: tiny_searcher, tracer_provider=provider)) as client:
            assert client.post("/search", json={"query": "who?"}, headers={"X-Request-ID": "otlp-1"}).status_code == 200
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
        server.shutdown()
    assert Collector.received and all(path == "/v1/traces" and ctype == "application/x-protobuf"
                                       for path, ctype, _ in Collector.received)
    names, services, ids = set(), set(), set()
    for _, _, body in Collector.received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            services |= {a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    names.add(span.name)
                    ids |= {a.value.string_value for a in span.attributes if a.key == "spanseek.request_id"}
    assert {"POST /search", "queue", "encode", "search", "aggregate"} <= names
    assert services == {"spanseek"} and ids == {"otlp-1"}
