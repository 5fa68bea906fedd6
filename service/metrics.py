"""Prometheus metrics of the service (``spanseek_`` prefix), one registry per app so tests can build many apps.

The Grafana dashboard in deploy/grafana/ and the alert rules in deploy/prometheus/ query these names; the
service test `test_prometheus.py` checks that every dashboard expression returns data, and that every series an
alert selects exists, against a real Prometheus; `alerts_test.yml` unit-tests the alerts (``promtool test rules``).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from spanseek.core.params import UNITS
from spanseek.core.plan import StageTimes
from spanseek.service.errors import ERROR_TYPES

if TYPE_CHECKING:
    from spanseek.core.encoding import QuestionCache

__all__ = ["UNITS", "ServiceMetrics"]
T = TypeVar("T")

# Bucket edges are fixed constants, never derived from settings, and only ever added to: Prometheus sums the buckets
# of every replica by `le` before `histogram_quantile`, so replicas with different edges (a rolling deploy across a
# change) give a sum whose buckets are not cumulative, and the quantile is read from the wrong bucket. When the new
# edges hold every old one, the mixed sum reads the quantile within the old edges' bucket that holds it.
# tests/service/test_bucket_edges.py pins them; docs/service.md ("Metrics") says so to operators.
#
# Seconds: from sub-millisecond stages on a GPU to multi-second overload queueing, about 25% apart from 10 ms to 5 s
# (a search on a CPU takes 20-250 ms, a batch up to seconds), so a quantile read from the buckets is within 5% of the
# measured one from 20 ms to 5 s; the wider steps before (0.1 -> 0.25 -> 0.5, 1 -> 2.5) read it up to 70% off. They
# keep the earlier edges 0.025, 0.075 and 0.75 s, which the 25% steps had moved.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.075, 0.08, 0.1,
                   0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.75, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5,
                   10.0, 15.0, 20.0, 30.0)
# questions per batch, up to the largest max_batch_size the settings allow (4096): ending at 512, the p95 of larger
# batches read 512
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# Seconds of a write: a step's wait is up to write_wait_ms (at most 60 s) per write ahead of it; a document is
# searchable after about 1 s per 1,500 tokens on a 2-core CPU (a 1 MB body: minutes; a file of max_file_tokens:
# more). Past 30 s every write fell in +Inf, and its p99 read as 30 s.
WRITE_BUCKETS = (*LATENCY_BUCKETS, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0, 1200.0, 1800.0)
# Seconds of a merge: 15 s for the demo index (150k tokens) on a 2-core CPU, growing with the index.
MERGE_BUCKETS = (1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0,
                 900.0, 1200.0, 1800.0, 2700.0, 3600.0, 7200.0)
STAGES = ("queue", "encode", "search", "aggregate")
# why the server cut a connection off (service.server): its request head, or its whole request, not in by the
# deadline, or its answer not read for write_timeout_s
CUT_REASONS = ("head", "request", "unread_answer")
# the `read` label of spanseek_request_duration_seconds: "true" for a search whose body asked for `read` (a reader
# pass per passage read, about 10x a plain search), "false" for every other, those refused before their body was read
# included
READ_LABELS = ("false", "true")
# why a search was refused with 429 (spanseek_search_refusals_total): the queue full (max_queue), its batch too far
# off (max_queue_wait_ms), or its client past its fair share of the queue while other clients wait
REFUSAL_REASONS = ("queue_full", "wait_budget", "fair_share")
# the `route` label of spanseek_errors_total for a request whose path no route takes (a 404 from routing): its raw path
# would give a series per path asked, however many a client (or a scanner) makes up
UNMATCHED_ROUTE = "unmatched"
# where every error type starts at 0 (the route each deployment serves), so rate() by type shows 0, not "no data"
SEARCH_ROUTE = "/search"


def route_of(scope: Scope, routes: Iterable[BaseRoute] = ()) -> str:
    """The template of the route a request was sent to (``/documents/{doc_id}``), for the ``route`` label: bounded,
    unlike the raw path (a series per document id). A request answered before routing (an error the middleware
    sends: 413, 415, 408, an early 429) takes that of the one of ``routes`` its path and method match, else of the one
    its path matches (a 405); ``UNMATCHED_ROUTE`` where none does."""
    route = scope.get("route")
    if route is None:
        # (matched from the app's root: a mount the request went through, /docs-static, made its own the scope's)
        scope = {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
        matches = [(r.matches(scope)[0], r) for r in routes]
        route = next((r for match in (Match.FULL, Match.PARTIAL) for m, r in matches if m is match), None)
    return UNMATCHED_ROUTE if route is None else template_of(route)


def template_of(route: BaseRoute) -> str:
    """A route's path as its OpenAPI page shows it, its parameters without their convertors: ``/documents/{doc_id}``."""
    return str(getattr(route, "path_format", None) or getattr(route, "path", UNMATCHED_ROUTE))


class CacheCollector(Collector):
    """The question cache's lookups by outcome (hit, miss) and its size, read from the cache at each scrape."""

    def __init__(self) -> None:
        self.cache: QuestionCache | None = None

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Its series as at an empty cache: how the registry learns their names, so that ``/metrics?name[]=``
        (``restricted_registry``) finds them."""
        return self._families(None)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return self._families(self.cache)

    @staticmethod
    def _families(cache: QuestionCache | None) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        lookups = CounterMetricFamily("spanseek_question_cache_lookups", "questions looked up in the question "
                                      "cache, by outcome (hit: its vectors reused, miss: encoded)", labels=["outcome"])
        lookups.add_metric(["hit"], cache.hits if cache is not None else 0)  # (an empty cache is falsy: its len)
        lookups.add_metric(["miss"], cache.misses if cache is not None else 0)
        yield lookups
        yield GaugeMetricFamily("spanseek_question_cache_questions", "questions in the question cache",
                                value=len(cache) if cache is not None else 0)


class DiskCollector:
    """Bytes free on the file system of the live directory of a server with writes (``dir``; None: no series), read
    at each scrape: a disk that fills meanwhile, from another process too, shows at once."""

    def __init__(self) -> None:
        self.dir: Path | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return self._families(None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return self._families(self.dir)

    @staticmethod
    def _families(where: Path | None) -> Iterator[GaugeMetricFamily]:
        free = GaugeMetricFamily("spanseek_live_disk_free_bytes", "with writes: bytes free on the live directory's "
                                 "file system (a merge writes a base as large as the one served, "
                                 "spanseek_index_size_bytes; a write its log line)")
        if where is not None:
            with contextlib.suppress(OSError):  # (the directory gone: no sample, rather than a failed scrape)
                free.add_metric([], shutil.disk_usage(where).free)
        yield free


class ServiceMetrics:
    """The service's collectors, registered in their own ``CollectorRegistry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.routes: list[BaseRoute] = []  # the app's (start_routes)
        self.question_cache = CacheCollector()
        r.register(self.question_cache)
        self.live_disk = DiskCollector()
        r.register(self.live_disk)
        self.request_duration = Histogram(
            "spanseek_request_duration_seconds", "POST /search latency by unit, HTTP status and whether it asked "
            "for read (true: its top passages read by the reader, about 10x slower)",
            ["unit", "status", "read"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.search_refusals = Counter(
            "spanseek_search_refusals_total", "POST /search refused with 429 by reason: queue_full (max_queue), "
            "wait_budget (max_queue_wait_ms), fair_share (its client held its share of the queue)", ["reason"],
            registry=r,
        )
        self.stage_duration = Histogram(
            "spanseek_stage_duration_seconds",
            "time per stage: queue (per request), encode/search/aggregate (per batch)",
            ["stage"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.batch_size = Histogram(
            "spanseek_batch_size", "questions per encoder/search batch", buckets=BATCH_BUCKETS, registry=r
        )
        self.questions = Counter("spanseek_questions_total", "questions searched, by unit", ["unit"], registry=r)
        self.queue_depth = Gauge("spanseek_queue_depth", "questions waiting for a batch", registry=r)
        self.errors = Counter("spanseek_errors_total", "error answers by type and route (the route's template, "
                              "/documents/{doc_id}; unmatched: a path no route takes)", ["type", "route"], registry=r)
        self.ready = Gauge("spanseek_ready", "1 once the model and index are loaded and warmed up", registry=r)
        # a standby writer is unready by design: these tell it from a server that failed (SpanseekNotReady)
        self.writer = Gauge("spanseek_writer", "1 once this server, with writes, holds the live directory's writer "
                            "lock and is ready (it takes writes)", registry=r)
        self.standby_checked = Gauge("spanseek_standby_checked_timestamp_seconds", "while this server stands by "
                                     "(writes_standby), when it last found another server holding the live "
                                     "directory's writer lock; 0 when it does not stand by", registry=r)
        self.index_tokens = Gauge("spanseek_index_tokens", "tokens in the phrase index", registry=r)
        self.index_vectors = Gauge("spanseek_index_vectors", "vectors in the faiss index", registry=r)
        self.index_passages = Gauge("spanseek_index_passages", "passages in the index", registry=r)
        self.index_documents = Gauge("spanseek_index_documents", "documents in the index", registry=r)
        self.index_bytes = Gauge("spanseek_index_size_bytes", "bytes of the index directory on disk", registry=r)
        self.model_info = Info("spanseek_model", "the served model and index", registry=r)
        self.reloads = Counter("spanseek_index_reloads_total", "hot reloads of the index by outcome (ok, failed)",
                               ["outcome"], registry=r)
        self.index_loaded = Gauge("spanseek_index_loaded_timestamp_seconds", "when the served index was loaded",
                                  registry=r)
        # live writes (SPANSEEK_WRITES): documents written and deleted, the log's size, the segment's size, and the
        # seconds from a write's arrival to the snapshot that holds it being served (encoding + log + publish)
        self.documents_written = Counter("spanseek_documents_written_total", "documents added or replaced by "
                                         "PUT/POST /documents and PUT /files", registry=r)
        self.documents_deleted = Counter("spanseek_documents_deleted_total", "documents deleted by DELETE "
                                         "/documents/{id} or POST /documents/delete", registry=r)
        self.wal_bytes = Gauge("spanseek_wal_bytes", "bytes of the write-ahead log not yet merged", registry=r)
        self.segment_documents = Gauge("spanseek_segment_documents", "documents in the live segment", registry=r)
        self.merge_due = Gauge("spanseek_merge_due", "1 while a merge of the live segment is due (the segment, the "
                               "write log or the base's deleted documents past their merge_ settings): a merge running, "
                               "failing or refused, or the writes made while the last one ran past them again; 0 "
                               "with merge_tokens 0", registry=r)
        self.merging = Gauge("spanseek_merging", "1 while a background merge of the live segment runs (its new base "
                             "takes as much of the live directory's disk as the base served, until it commits and "
                             "the base before is removed)", registry=r)
        self.write_visible = Histogram("spanseek_write_visible_seconds", "seconds from a write's arrival until "
                                       "searches see it", buckets=WRITE_BUCKETS, registry=r)
        # a write's steps (one forward pass each) share the encoder's thread with the searches: how long each waited
        # for its turn (a gap between batches, or write_wait_ms), and how long it then held the thread
        self.write_step_wait = Histogram("spanseek_write_step_wait_seconds", "seconds a write's encoding step waited "
                                         "for the encoder's thread beside searches", buckets=WRITE_BUCKETS,
                                         registry=r)
        self.write_step_duration = Histogram("spanseek_write_step_duration_seconds", "seconds a write's encoding "
                                             "step ran in the encoder's thread", buckets=LATENCY_BUCKETS, registry=r)
        self.base_searcher_failed = Gauge("spanseek_merged_base_searcher_failed", "1 while the searcher of the base "
                                          "the last merge made could not be made (GET /info: writes."
                                          "base_searcher_error): searches go on over it with the searcher of the base "
                                          "before, held in memory until the next merge", registry=r)
        self.merges = Counter("spanseek_merges_total", "background merges of the live segment by outcome (ok, "
                              "failed)", ["outcome"], registry=r)
        self.merge_duration = Histogram("spanseek_merge_duration_seconds", "seconds a background merge of the live "
                                        "segment took, by outcome (ok, failed)", ["outcome"], buckets=MERGE_BUCKETS,
                                        registry=r)
        self.connections_cut = Counter("spanseek_connections_cut_total", "connections the server cut off without "
                                       "an answer, by reason: head (no complete request head in header_timeout_s), "
                                       "request (the body not in by body_timeout_s), unread_answer (an answer not "
                                       "read for write_timeout_s)", ["reason"], registry=r)
        for reason in CUT_REASONS:
            self.connections_cut.labels(reason=reason)
        for reason in REFUSAL_REASONS:
            self.search_refusals.labels(reason=reason)
        for t in ERROR_TYPES:  # zeros rather than missing series, so rate() panels show 0 instead of "no data"
            self.errors.labels(type=t, route=SEARCH_ROUTE)
        for unit in UNITS:
            self.questions.labels(unit=unit)
        for stage in STAGES:
            self.stage_duration.labels(stage=stage)
        for outcome in ("ok", "failed"):
            self.reloads.labels(outcome=outcome)
            self.merges.labels(outcome=outcome)
            self.merge_duration.labels(outcome=outcome)

    def set_index(self, tokens: int, vectors: int, passages: int, documents: int, size_bytes: int) -> None:
        """Record the served index's size."""
        self.index_tokens.set(tokens)
        self.index_vectors.set(vectors)
        self.index_passages.set(passages)
        self.index_documents.set(documents)
        self.index_bytes.set(size_bytes)
        self.index_loaded.set_to_current_time()

    def observe_batch(self, size: int, times: StageTimes) -> None:
        """Record one batch: its size and the seconds of each of its stages (reading only when it read)."""
        self.batch_size.observe(size)
        for stage in ("encode", "search", "aggregate"):
            self.stage_duration.labels(stage=stage).observe(getattr(times, stage))
        if times.read:
            self.stage_duration.labels(stage="read").observe(times.read)

    def timed_write_step(self, fn: Callable[..., T], asked: float) -> Callable[..., T]:
        """``fn`` observed as one write step asked for at ``asked`` (``time.perf_counter()``): when it starts in the
        encoder's thread its wait is recorded, when it ends (or raises) its duration."""

        @functools.wraps(fn)  # named by what it runs (service.pools.job_name)
        def step(*args: object) -> T:
            started = time.perf_counter()
            self.write_step_wait.observe(started - asked)
            try:
                return fn(*args)
            finally:
                self.write_step_duration.observe(time.perf_counter() - started)

        return step

    def observe_search(self, unit: str, status: int, read: bool, seconds: float, refusal: str | None) -> None:
        """Record one ``POST /search``: its latency, and when it was refused (429) why (one of ``REFUSAL_REASONS``;
        ``refusal`` None counts as queue_full)."""
        self.request_duration.labels(unit=unit, status=str(status), read=READ_LABELS[read]).observe(seconds)
        if status == 429:
            self.search_refusals.labels(reason=refusal or "queue_full").inc()

    def count_error(self, error_type: str, scope: Scope) -> None:
        """Count one error answer of ``error_type`` (as in ErrorResponse.error) to the request of ``scope``, by its
        route (``route_of``)."""
        self.errors.labels(type=error_type, route=route_of(scope, self.routes)).inc()

    def start_routes(self, routes: Iterable[BaseRoute]) -> None:
        """The app's routes, which ``count_error`` matches a request answered before routing against; each starts at
        0 internal errors, so rate() by route shows 0, not "no data"."""
        self.routes = list(routes)
        for route in self.routes:
            self.errors.labels(type="internal_error", route=template_of(route))

    def count_cut(self, reason: str) -> None:
        """Count a connection the server cut off (``reason``: one of ``CUT_REASONS``)."""
        self.connections_cut.labels(reason=reason).inc()

    def render(self, names: list[str] | None = None) -> bytes:
        """The exposition text of this registry; of only the series ``names`` where given (``name[]``, as
        prometheus_client's own exporter filters)."""
        return generate_latest(self.registry.restricted_registry(names) if names else self.registry)
