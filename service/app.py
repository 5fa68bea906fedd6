"""The app factory: ``create_app(settings)`` builds the FastAPI app; its lifespan loads, warms up, then reports ready.

Loading runs in the background so that /health answers (and /ready says 503) while a large index loads;
tests pass ``searcher_factory`` to inject a fake or pre-built backend.

    uvicorn --factory spanseek.service.app:app_from_env     # settings from SPANSEEK_* environment variables

``spanseek serve`` is the way to run it: uvicorn started on its own applies neither the keep-alive nor the connection
deadlines nor the forwarded-address setting, and ``app_from_env`` says so at start with the flags that apply what
uvicorn can (service.server.uvicorn_flags).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from starlette.routing import Mount, Route

from spanseek.core.alias import Resolved, resolve_alias
from spanseek.core.encoding import QuestionCache
from spanseek.core.lexical import missing_message
from spanseek.core.model import model_name
from spanseek.core.search import Searcher
from spanseek.indexer.live import LiveStoreError, base_dir, hold_index
from spanseek.service.batcher import MicroBatcher, run_batch
from spanseek.service.cost import CostModel
from spanseek.service.cursors import Cursors
from spanseek.service.errors import ServiceError, install_error_handlers
from spanseek.service.files import router as files_router
from spanseek.service.heap import settle
from spanseek.service.live import LiveWrites, live_dir_of, stand_by, writer_elsewhere, writes_not_served
from spanseek.service.metrics import ServiceMetrics
from spanseek.service.middleware import EarlyShedMiddleware, RequestContextMiddleware, SlowRefusalMiddleware
from spanseek.service.pools import JobPool
from spanseek.service.reload import (
    IndexReloader,
    Reopener,
    index_identity,
    index_nprobe,
    signature_of,
    warm_up_requests,
)
from spanseek.service.routes import hide_paths, router
from spanseek.service.settings import Settings
from spanseek.service.tracing import TracingMiddleware, provider_from_environment
from spanseek.service.writes import router as writes_router

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

log = logging.getLogger("spanseek.service")

SearcherFactory = Callable[[Settings], Searcher]
T = TypeVar("T")


def default_searcher_factory(settings: Settings) -> Searcher:
    """Open the index and the model's question encoder named by the settings."""
    from spanseek.core import bf16_scan, flat_search
    from spanseek.core.loading import open_searcher

    flat_search.TRANSPOSED_BYTES = settings.scan_transposed_bytes  # the process's scans (one service a process)
    bf16_scan.BF16_BYTES = settings.scan_bf16_bytes
    return open_searcher(settings.index, settings.model, device=settings.device, precision=settings.precision,
                         search_device=settings.search_device, reader=settings.reader,
                         reader_precision=settings.reader_precision,
                         selection_cache_bytes=settings.selection_cache_bytes,
                         unanswerable_prior=settings.unanswerable_prior, runtime=settings.runtime)


def directory_bytes(path: Path) -> int:
    """Total size of the regular files under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _set_torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


class ServiceState:
    """Everything the routes need: settings, metrics, and (once loaded) the searcher and the batcher."""

    def __init__(self, settings: Settings, metrics: ServiceMetrics, reopener: Reopener | None = None):
        self.settings = settings
        self.metrics = metrics
        self.status = "loading"  # loading -> ready | failed; ready -> broken (``batcher_stopped``)
        self.detail: str | None = None
        self.searcher: Searcher | None = None
        self.batcher: MicroBatcher | None = None
        self.default_nprobe: int | None = settings.default_nprobe
        self.info: dict[str, Any] = {}
        # with writes: /info's description of each base by its resolved path, the last two (a merge describes its
        # base before the writes' counts show it: /info takes the description of the base those counts are over)
        self.described: dict[str, dict[str, Any]] = {}
        self.search_info: dict[str, Any] = {}  # modes and fusion defaults, for /info
        self.overlap = "off"  # what the pipeline setting resolved to once the encoder's device is known
        self.cost = CostModel({"passage": 1, "doc": 1}, settings.default_top_k)  # of the served index (_describe)
        self.pools: list[JobPool] = []  # its pools of one thread (``pool``)
        # One worker: the question encoder runs in this thread only (also the warm-up and the loading), and so does
        # faiss unless the pipeline gives the search step its own thread.
        self.executor = self.pool("spanseek-encode")
        # pipeline: the index search step gets its own thread (faiss is used from that thread only)
        self.search_executor = self.pool("spanseek-search") if settings.pipeline != "off" else None
        self.reloader = IndexReloader(self, reopener)
        self.factory: SearcherFactory = default_searcher_factory  # what load() opened the first index with
        self.live: LiveWrites | None = None  # live writes (settings.writes), once loaded
        # the rankings of paging cursors: the app's, so that a reload or a write leaves them as they were searched
        self.cursors = Cursors(settings.cursor_cache_bytes, settings.cursor_ttl_s)
        # asks the server to stop (``spanseek serve`` sets it: service.cli), should no search be answerable any more
        self.stop_server: Callable[[], None] | None = None

    def pool(self, name: str) -> JobPool:
        """A pool of one thread named ``name``, which knows the job it runs (service.pools); in ``pools``."""
        self.pools.append(JobPool(name))
        return self.pools[-1]

    def unfinished(self, wait_s: float) -> list[str]:
        """After ``close``: its threads still running a job ``wait_s`` seconds from now (each idle one ends at once),
        each named with that job and how long it has run (``spanseek-encode_0 (loading the index and model, 41 s)``).
        A load or reload of the index under way when the server stopped runs on until its index is read (minutes
        for a large one), and nothing waits for it any more; so does a search batch of a long request."""
        deadline = time.monotonic() + wait_s
        pools = self.pools + (self.live.pools if self.live is not None else [])  # the writes' threads too
        for pool in pools:
            if pool.thread is not None:
                pool.thread.join(max(0.0, deadline - time.monotonic()))
        return [pool.doing() for pool in pools if pool.thread is not None and pool.thread.is_alive()]

    async def load(self, factory: SearcherFactory) -> None:
        """Load the searcher, warm it up, start the batcher, then report ready (or failed, with the reason).

        The served path is ``reloader.path`` (``settings.index`` until a reload names another)."""
        t0 = time.perf_counter()
        self.factory, self.status = factory, "loading"
        opened = None
        while opened is None:  # None: a standby lost the race for the writer lock, and stands by again
            try:
                opened = await self._open(factory)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bad index or model: stay up, say why on /ready and /health, log it
                self.status, self.detail = "failed", f"{type(e).__name__}: {e}"
                log.error("loading failed: %s", self.detail)
                return
        searcher, warm_batches = opened
        self.searcher = searcher
        s = self.settings
        encoder = searcher.encoder
        if s.question_cache and getattr(encoder, "cache", False) is None:  # after the warm-up, whose timings encode
            encoder.cache = QuestionCache(s.question_cache)
        self.metrics.question_cache.cache = getattr(encoder, "cache", None)
        on_gpu = self.info["model"]["device"].startswith("cuda")
        overlap: Literal["always", "full"] = "always" if s.pipeline == "on" or (s.pipeline == "auto" and on_gpu) else "full"
        self.batcher = MicroBatcher(searcher, self.executor, s.max_batch_size, s.max_wait_ms, s.max_queue, self.metrics,
                                    search_executor=self.search_executor, overlap=overlap,
                                    max_queue_wait_ms=s.max_queue_wait_ms, burst_questions=s.max_queries_per_request,
                                    fair_wait_ms=s.fair_wait_ms, write_wait_ms=s.write_wait_ms,
                                    on_stopped=self.batcher_stopped)
        for size, seconds in warm_batches:  # admission knows the batch rate before the first request
            self.batcher.observe_batch(size, seconds)
        self.overlap = overlap if self.search_executor is not None else "off"
        if self.live is not None:
            self.live.attach(self._serve_live, self.batcher.run_write_step)
            self.live.maybe_merge()  # a log replayed past merge_tokens (a merge that a restart cut short)
        self.batcher.start()
        self.status, self.detail = "ready", None
        self.metrics.ready.set(1)
        self.metrics.writer.set(self.live is not None)
        log.info("ready: %s in %.1f s", self.info.get("index", {}).get("dir"), time.perf_counter() - t0)

    async def _open(self, factory: SearcherFactory) -> tuple[Searcher, list[tuple[int, float]]] | None:
        """One attempt of ``load``: the searcher opened (with writes, its live store started) and warmed up, with the
        warm-up's timed batches; None when a standby's live store was refused because another standby, started at
        once, took the writer lock first. Nothing of the attempt is held then: the searcher it opened (a whole index)
        is freed before this server stands by again, for as long as the other one writes."""
        loop = asyncio.get_running_loop()
        standby = self.settings.writes and self.settings.writes_standby
        held = contextlib.ExitStack()  # with writes: the index's lock, from before its base is read (below)
        try:
            if standby:  # another server writes there: wait for it to stop, before loading anything
                try:
                    await stand_by(self.settings, self.executor, self._standing_by)
                finally:
                    self.metrics.standby_checked.set(0)
            if self.settings.writes:  # held shared before the base is read, until the live store holds it too: an
                # offline `index add-lexical` (exclusive) in between would change the files after they were loaded
                held.enter_context(await self._made(hold_index, self.reloader.path))
            if self.settings.torch_threads is not None:
                await loop.run_in_executor(self.executor, _set_torch_threads, self.settings.torch_threads)
            self.reloader.signature = await loop.run_in_executor(self.executor, signature_of, self.reloader.path)
            resolved = await loop.run_in_executor(self.executor, resolve_alias, self.reloader.path)
            target = resolved.target
            if self.settings.writes:  # the base a merge left, else the index given (service.live)
                target = base_dir(live_dir_of(self.settings), target)
            elif (unseen := await loop.run_in_executor(self.executor, writes_not_served, self.settings, target)):
                log.warning("%s", unseen)  # a replica beside a server with writes: it serves a fixed index
            # the factory opens the alias's target, so /info names the directory actually loaded
            searcher = await loop.run_in_executor(self.executor, factory,
                                                  self.settings.model_copy(update={"index": target}))
            if self.settings.writes:  # replays the write-ahead log (encoding its documents) before ready
                self.detail = "replaying the write log"
                live = await self._made(LiveWrites, self.settings, self.metrics, searcher,
                                        self.executor)
                self.live, searcher = live, live.current
                live.on_merged = lambda current: self._describe(current, resolved)  # a new base: size, date
            if self.default_nprobe is None:  # reported by /info (a request without nprobe gets the index's)
                self.default_nprobe = index_nprobe(searcher)
            self._describe(searcher, resolved)
            warm_batches: list[tuple[int, float]] = []
            if self.settings.warmup:
                self.detail = "warming up"
                warm_batches = await loop.run_in_executor(self.executor, self._warm_up, searcher)
            await loop.run_in_executor(self.executor, settle)  # full collections skip the loaded heap
        except LiveStoreError:
            if not (standby  # two started at once: the other took the lock first
                    and await loop.run_in_executor(self.executor, writer_elsewhere, live_dir_of(self.settings))):
                raise
            log.warning("another server took the writer lock first; standing by again")
            return None  # (the lock is not held while standing by: the other server holds it while it writes)
        finally:
            held.close()  # (the live store holds the lock itself from its start to its close)
        return searcher, warm_batches

    async def _made(self, make: Callable[..., T], *args: object) -> T:
        """``make(*args)`` in the worker thread. Should the load be cancelled meanwhile (the server stopped while it
        started), what ``make`` returns once it ends is closed (its ``close()``): the index's shared lock
        (``hold_index``), or a live store that replayed its log (its writer lock, log and threads), were held until
        a garbage collection found them, and a server started again in the process was refused as if another one
        wrote there."""
        done = self.executor.submit(make, *args)
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            done.add_done_callback(_close_unused)  # (in the worker thread, when it ends)
            raise

    def _standing_by(self, holder: str) -> None:
        """What a standby writer found at its last check of the writer lock: ``holder`` (on /ready), and when (the
        alerts leave a standby that checks out)."""
        self.detail = holder
        self.metrics.standby_checked.set_to_current_time()

    def _warm_up(self, searcher: Searcher) -> list[tuple[int, float]]:
        """Every unit once, including blank and non-Latin questions, and a search that collapses copies
        (``warm_up_requests``), then full-size batches.

        Returns (size, seconds) of the full-size batches after the first, which seed the admission's cost model.
        """
        k = self.settings.default_top_k
        requests = warm_up_requests(k, self.default_nprobe)
        run_batch(searcher, requests)
        full = [([f"warm-up question number {i}" for i in range(self.settings.max_batch_size)], requests[0][1])]
        timed = []
        for _ in range(3):  # the first full batch pays for allocations; the later ones measure
            t0 = time.perf_counter()
            run_batch(searcher, full)
            timed.append((self.settings.max_batch_size, time.perf_counter() - t0))
        return timed[1:]

    def swap_searcher(self, searcher: Searcher, resolved: Resolved) -> None:
        """Serve ``searcher`` from the next batch on (service.reload has loaded and warmed it up)."""
        assert self.batcher is not None
        if self.settings.default_nprobe is None:
            self.default_nprobe = index_nprobe(searcher)
        self.searcher = searcher
        self.cost = dataclasses.replace(self.cost, units=searcher.selection(None).unit_count,
                                        tokens=int(searcher.index.faiss.ntotal))
        self.batcher.swap(searcher)
        self._describe(searcher, resolved)  # last: once /info names the new index, reads and searches are its

    def _serve_live(self, searcher: Searcher) -> None:
        """Serve a new snapshot of the live index from the next batch on (called by the write thread)."""
        assert self.batcher is not None
        self.searcher = searcher
        self.cost = dataclasses.replace(self.cost, units=searcher.selection(None).unit_count,
                                        tokens=int(searcher.index.faiss.ntotal))
        self.batcher.swap(searcher)

    def _describe(self, searcher: Searcher, resolved: Resolved) -> None:
        # with writes, /info's index and the index gauges describe the base served (the counts searches see are
        # LiveWrites.gauges' and /info's service.writes); the cost model prices the live index searched
        index = self.live.store.base if self.live is not None else searcher.index
        m = index.manifest
        encoder = searcher.encoder
        device = "unknown"
        try:
            device = str(next(encoder.model.parameters()).device)
        except (AttributeError, StopIteration, TypeError):
            pass
        size = directory_bytes(index.dir)
        source = getattr(getattr(encoder, "model", None), "source", None)  # default may serve an earlier version
        served = model_name(source) if source is not None else self.settings.model
        self.info = {
            "model": {
                "ref": served, "fingerprint": m.model_fingerprint, "built_with": m.model_ref,
                "device": device, "precision": str(getattr(encoder, "precision", "unknown")),
                "runtime": encoder.passes.name if hasattr(encoder, "passes") else "torch",
                "onnx_max_tokens": getattr(getattr(encoder, "passes", None), "max_tokens", None),
                "max_query_tokens": getattr(encoder, "max_len", None), "dim": m.encoder.get("dim"),
                "max_answer_tokens": searcher.max_answer_tokens, "length_bias": list(searcher.length_bias),
            },
            "index": {
                "dir": str(index.dir), "factory": m.factory, "format_version": m.format_version,
                "documents": m.documents, "deleted_documents": len(index.deleted_docs),  # masked, not compacted
                "passages": m.passages, "tokens": m.tokens,
                "indexed_tokens": m.indexed_tokens, "filter_threshold": m.filter_threshold,
                "created": m.created, "size_bytes": size, "nprobe": self.default_nprobe,
                **index_identity(resolved, m),
            },
        }
        self.search_info = {
            "modes": list(searcher.modes), "default_mode": searcher.default_mode,
            "fusion": searcher.default_fusion, "lexical_weights": searcher.lexical_weights,
            "search_device": (searcher.on_device.describe() if getattr(searcher, "on_device", None) is not None
                              else {"device": "cpu", "index": "cpu", "vectors": "cpu", "notes": []}),
        }
        if searcher.lexical is None:
            self.search_info["lexical"] = missing_message(index.dir)
        else:  # how its terms are made (core.lexical.ANALYZERS): plain for an index built before folded
            self.search_info["lexical_analyzer"] = searcher.lexical.analyzer
        reading = getattr(searcher, "reading", None)
        self.cost = CostModel(searcher.selection(None).unit_count,
                              int(searcher.index.faiss.ntotal), self.settings.default_top_k,
                              reading.reading.read_passages if reading is not None else None, searcher.default_mode,
                              self.settings.unanswerable_prior, m.filter_threshold is None)
        self.metrics.set_index(m.tokens, int(index.faiss.ntotal), m.passages, m.documents, size)
        if self.live is not None:  # with writes: what searches see, not the base's manifest
            self.described = {**dict(list(self.described.items())[-1:]), str(index.dir.resolve()): self.info["index"]}
            self.live.gauges()
        self.metrics.model_info.info({  # /metrics needs no key: the model's path is cut as /info cuts it
            "model": hide_paths(served), "fingerprint": m.model_fingerprint, "factory": m.factory,
            "device": device, "precision": self.info["model"]["precision"],
        })

    async def watch_index(self, loading: asyncio.Task) -> None:
        """Once loaded (or failed), reload when the served alias changes (every ``index_poll_s`` seconds; 0 =
        never): a service whose index failed to load recovers when the alias is pointed at a good one."""
        await asyncio.gather(loading, return_exceptions=True)
        if self.settings.index_poll_s > 0 and not self.settings.writes and not loading.cancelled():
            await self.reloader.watch(self.settings.index_poll_s)

    def batcher_stopped(self, why: str) -> None:
        """The batcher's queue owner ended on a fault of its own (service.batcher): the process can answer no search
        any more, and only a restart makes it whole (the fault's state is unknown, so nothing is restarted in place).
        /ready and /health say 503 with the reason from now on, and the server is asked to stop (``stop_server``): it
        answers the requests it holds, and ``spanseek serve`` exits with status 1, so that the orchestrator's restart
        policy (compose's ``restart``, a Kubernetes pod's) starts a fresh process. A server started by uvicorn itself
        stays up, and a liveness probe on /health restarts it."""
        self.status, self.detail = "broken", f"the search batcher stopped ({why})"
        self.metrics.ready.set(0)
        if self.stop_server is not None:
            log.error("stopping: %s; searches cannot be answered until the service is started again", self.detail)
            self.stop_server()

    def stopping(self) -> None:
        """The server has begun to stop (``spanseek serve``: service.server), answering the requests it holds: a
        reload under way is abandoned (the index served stays), its callers answered 503 at once instead of held for
        the stop's whole grace time, then cancelled with a 500."""
        self.reloader.abandon()

    async def close(self) -> None:
        """Stop the batcher and the worker threads."""
        self.metrics.ready.set(0)
        self.metrics.writer.set(0)
        self.reloader.close()
        if self.batcher is not None:
            await self.batcher.stop()
        if self.live is not None:
            self.live.close()
        for executor in (self.executor, self.search_executor):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)


def _close_unused(done: Future) -> None:
    """Close what a cancelled load's step made (``ServiceState._made``), once the step has ended."""
    if done.cancelled() or done.exception() is not None:
        return
    try:
        done.result().close()
    except Exception:
        log.exception("closing what a cancelled start had opened failed")


def reload_on_hangup(state: ServiceState) -> bool:
    """SIGHUP reloads the served path (as ``POST /admin/reload`` with no body, which needs the API key). Only where
    the event loop runs in the main thread (``spanseek serve``); returns whether the handler was installed."""
    loop = asyncio.get_running_loop()

    def reload() -> None:
        if state.settings.writes:
            log.warning("SIGHUP: no reload while writes are on (POST /admin/compact merges)")
            return

        async def run() -> None:
            try:
                await state.reloader.on_request(reason="SIGHUP")
            except (ServiceError, OSError) as e:  # logged and counted by the reloader, or refused (too soon)
                log.warning("SIGHUP: no reload: %s", e)

        loop.create_task(run(), name="spanseek-sighup-reload")

    try:
        loop.add_signal_handler(signal.SIGHUP, reload)
    except (ValueError, RuntimeError, NotImplementedError, AttributeError):  # not the main thread, or no SIGHUP
        return False
    return True


def create_app(settings: Settings, searcher_factory: SearcherFactory | None = None,
               searcher_reopener: Reopener | None = None, tracer_provider: TracerProvider | None = None,
               announce_keep_alive: bool = True) -> FastAPI:
    """Build the service app; ``searcher_factory(settings)`` defaults to opening ``settings.index``/``model``, and
    ``searcher_reopener`` (hot reload) to opening another index for the loaded encoder (service.reload). With an
    OpenTelemetry ``tracer_provider`` (service.tracing), requests are traced; without one, nothing is. With
    ``announce_keep_alive``, answers say the server keeps an idle connection ``keep_alive_s``: only true where the
    server was given that setting (``server_config``)."""
    metrics = ServiceMetrics()
    state = ServiceState(settings, metrics, searcher_reopener)
    factory = searcher_factory or default_searcher_factory

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(state.load(factory), name="spanseek-load")
        watching = asyncio.create_task(state.watch_index(loading), name="spanseek-index-watch")
        hangup = reload_on_hangup(state)
        try:
            yield
        finally:
            if hangup:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            for task in (loading, watching):
                task.cancel()
            await asyncio.gather(loading, watching, return_exceptions=True)
            await state.close()

    from spanseek import __version__

    # /docs (Swagger UI) and /redoc load their scripts and styles from the app (fastapi-offline's packaged copies
    # under /docs-static), not from a CDN: they work on hosts without internet access.
    app = FastAPIOffline(
        title="spanseek",
        version=__version__,
        description="Dense phrase retrieval: the best phrases, passages or documents for a question.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url="/redoc",
        static_url="/docs-static",
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from the online validator either
    )
    app.state.service = state

    install_error_handlers(app, on_error=metrics.count_error)
    app.include_router(router)
    app.include_router(writes_router)
    app.include_router(files_router)
    # every route a request can reach: the app's own (/openapi.json, the docs' files under /docs-static) and the
    # routers' (the app's list holds each router as one entry)
    metrics.start_routes([*(r for r in app.routes if isinstance(r, Route | Mount)),
                          *(route for r in (router, writes_router, files_router) for route in r.routes)])

    def would_admit(client: str) -> None:
        if state.batcher is not None:
            state.batcher.check_would_admit(client)

    app.add_middleware(EarlyShedMiddleware, would_admit=would_admit, on_error=metrics.count_error,
                       fair_share_by=settings.fair_share_by)  # innermost
    app.add_middleware(SlowRefusalMiddleware, delay_s=settings.reload_refusal_delay_s)
    if tracer_provider is not None:  # inside the request id (an attribute of the span), outside the early 429
        app.add_middleware(TracingMiddleware, provider=tracer_provider)
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes,
                       max_file_bytes=settings.max_file_bytes, metrics=metrics,
                       on_error=metrics.count_error, body_timeout_s=settings.body_timeout_s,
                       access_log_per_s=settings.access_log_per_s,
                       keep_alive_s=settings.keep_alive_s if announce_keep_alive else None)
    if settings.cors_origins:  # outermost: the errors the middlewares send themselves (413, 408, 500) carry it too
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Server-Timing", "Retry-After"],
        )
    return app


def app_from_env() -> FastAPI:
    """``uvicorn --factory spanseek.service.app:app_from_env``: settings from the SPANSEEK_* environment, traces
    exported when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (service.tracing). uvicorn's own flags, not these settings,
    configure its server: a warning at start names the settings that do not apply and the flags (or UVICORN_*
    variables) that pass them."""
    from spanseek.service.server import started_without_serve

    settings = Settings()  # type: ignore[call-arg]  # index comes from SPANSEEK_INDEX
    log.warning(started_without_serve(settings))
    # uvicorn's own --timeout-keep-alive, which the app cannot read, decides when an idle connection closes
    return create_app(settings, tracer_provider=provider_from_environment(os.environ), announce_keep_alive=False)
