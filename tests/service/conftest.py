"""Service test helpers: apps over the tiny index, a counting/blocking encoder, and running-app contexts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from spanseek.core.params import SearchParams
from spanseek.core.search import Searcher
from spanseek.service import app as app_module
from spanseek.service.app import create_app
from spanseek.service.batcher import MicroBatcher
from spanseek.service.settings import Settings


class CountingEncoder:
    """Wraps a QuestionEncoder: records the batch of every encode call; can hold calls until ``release``."""

    def __init__(self, inner, block: bool = False):
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.max_len = inner.max_len
        self.model = inner.model
        self.precision = inner.precision
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        if not block:
            self.gate.set()
        self.entered = threading.Event()

    def encode(self, questions: list[str]):
        self.calls.append(list(questions))
        self.entered.set()
        assert self.gate.wait(30), "test encoder was never released"
        return self.inner.encode(questions)


@pytest.fixture
def settings_for(tiny_index, tiny_model_dir) -> Callable[..., Settings]:
    """Settings over the tiny index; keyword arguments override fields."""

    def make(**overrides) -> Settings:
        # tests reload back to back (test_reload.py checks the interval); no question cache, which an app would
        # attach to the encoder of the searcher the tests share (test_metrics.py checks it on a searcher of its own);
        # refused reloads answered at once (test_reload.py checks the delay): the fuzz test sends 60 of them
        base = dict(index=tiny_index, model=str(tiny_model_dir), device="cpu", precision="fp32", warmup=False,
                    reload_min_interval_s=0, question_cache=0, reload_refusal_delay_s=0)
        return Settings(**{**base, **overrides})

    return make


# the settings open_searcher reads (service.app.default_searcher_factory), and question_cache: an app attaches a cache
# to its encoder
ENCODER_FIELDS = ("model", "device", "precision", "runtime", "reader", "reader_precision", "search_device",
                  "selection_cache_bytes", "unanswerable_prior", "scan_transposed_bytes", "scan_bf16_bytes",
                  "torch_threads", "question_cache")


@pytest.fixture(autouse=True)
def shared_encoder(monkeypatch, settings_for, tiny_searcher) -> None:
    """An app built without a searcher factory, whose settings load the model as ``settings_for``'s do, opens its
    index (the tiny one, a merged base, an alias's target) with the question encoder of ``tiny_searcher``, as a hot
    reload does (``reopen_searcher``), instead of loading the model again: 0.3-1 s an app, and the service tests
    start about 120. Other settings (another model, a reader, a question cache) load theirs as the service does."""
    from spanseek.core import bf16_scan, flat_search
    from spanseek.core.loading import reopen_searcher

    reference = settings_for()
    default = app_module.default_searcher_factory

    def factory(settings: Settings) -> Searcher:
        if any(getattr(settings, f) != getattr(reference, f) for f in ENCODER_FIELDS):
            return default(settings)
        flat_search.TRANSPOSED_BYTES = settings.scan_transposed_bytes  # as the service's factory sets it
        bf16_scan.BF16_BYTES = settings.scan_bf16_bytes
        return reopen_searcher(settings.index, settings.model, tiny_searcher.encoder)

    monkeypatch.setattr(app_module, "default_searcher_factory", factory)


@pytest.fixture
def write_settings(settings_for, tmp_path) -> Callable[..., Settings]:
    """Settings of an app with writes over the tiny index (API key "key", live directory ``tmp_path/live``, merges
    only when asked); keyword arguments override fields."""

    def make(**overrides) -> Settings:
        return settings_for(**{"writes": True, "api_key": "key", "live_dir": tmp_path / "live", "merge_tokens": 0,
                               **overrides})

    return make


async def _poll_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.fixture
def until() -> Callable[..., object]:
    """``await until(predicate)``: poll every 10 ms until it holds; fail after 10 s."""
    return _poll_until


@pytest.fixture
def hold_worker() -> Callable[..., object]:
    """``busy = await hold_worker(client, encoder)``: one request's batch blocks in the (blocking) counting encoder,
    so the requests sent next queue up behind it; ``encoder.gate.set()`` lets everything run."""

    async def hold(client: httpx.AsyncClient, encoder: CountingEncoder) -> asyncio.Task:
        encoder.gate.clear()
        encoder.entered.clear()
        busy = asyncio.create_task(client.post("/search", json={"query": "occupies the worker"}))
        await _poll_until(encoder.entered.is_set)
        return busy

    return hold


@pytest.fixture
def counting_factory(tiny_searcher) -> Callable[..., tuple[Callable[[Settings], Searcher], CountingEncoder]]:
    """(factory, encoder): a searcher factory over the tiny index whose encoder counts (and can block) calls."""

    def make(block: bool = False):
        encoder = CountingEncoder(tiny_searcher.encoder, block=block)
        searcher = Searcher(tiny_searcher.index, encoder)
        return (lambda settings: searcher), encoder

    return make


def wait_ready_sync(client: TestClient, timeout: float = 30.0) -> None:
    """Poll /ready until 200."""
    deadline = time.monotonic() + timeout
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline, "service never became ready"
        time.sleep(0.02)


@contextmanager
def serving(app: FastAPI, **kwargs) -> Iterator[TestClient]:
    """A TestClient with the lifespan running and the service ready."""
    with TestClient(app, **kwargs) as client:
        wait_ready_sync(client)
        yield client


@pytest.fixture
def client(settings_for, tiny_searcher) -> Iterator[TestClient]:
    """A ready client of an app over the tiny index with default settings."""
    with serving(create_app(settings_for(), lambda s: tiny_searcher)) as c:
        yield c


@asynccontextmanager
async def async_serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx.AsyncClient on the app (in this event loop) with the lifespan running and the service ready."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as ac:
            deadline = time.monotonic() + 30
            while (await ac.get("/ready")).status_code != 200:
                assert time.monotonic() < deadline, "service never became ready"
                await asyncio.sleep(0.02)
            yield ac


@pytest.fixture
def serve() -> Callable[..., contextmanager]:
    """``with serve(app) as client``: a ready TestClient (the helper ``serving`` as a fixture)."""
    return serving


@pytest.fixture
def async_serve() -> Callable[..., asynccontextmanager]:
    """``async with async_serve(app) as client``: a ready httpx.AsyncClient on the app."""
    return async_serving


@pytest.fixture
def overloaded(hold_worker, until, settings_for, counting_factory) -> Callable[..., asynccontextmanager]:
    """``async with overloaded(**settings) as (client, app)``: a served app (batches of one question, measured at
    1 s each, a 100 ms wait budget) whose worker holds one request while a full batch waits behind it, so any other
    /search is refused (429, Retry-After 2); on leaving, both are released and answered 200."""
    @asynccontextmanager
    async def serve(**overrides: object) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
        factory, encoder = counting_factory(block=True)
        app = create_app(settings_for(**{"max_batch_size": 1, "max_wait_ms": 1, "max_queue_wait_ms": 100,
                                         "max_queries_per_request": 1, **overrides}), factory)
        encoder.gate.set()
        async with async_serving(app) as client:
            batcher = app.state.service.batcher
            batcher.observe_batch(1, 1.0)
            busy = await hold_worker(client, encoder)
            queued = asyncio.create_task(client.post("/search", json={"query": "next batch"}))  # a full batch ahead
            await until(lambda: batcher.depth == 1)
            yield client, app
            encoder.gate.set()
            assert [r.status_code for r in await asyncio.wait_for(asyncio.gather(busy, queued), 30)] == [200, 200]

    return serve


@contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Run ``app`` under a real uvicorn server on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (server.started and server.servers):
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    try:
        while httpx.get(url + "/ready").status_code != 200:
            assert time.monotonic() < deadline, "service never became ready"
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="session")
def live() -> Callable[..., contextmanager]:
    """``with live(app) as url``: the app under a real uvicorn on loopback."""
    return live_server


@pytest.fixture
def blocked_batcher(tiny_searcher):
    """``await blocked_batcher(**kwargs)``: (batcher, encoder), a running batcher of 4 question-equivalents a batch
    whose encoder (``encoder_class``, a CountingEncoder) blocks until released."""
    executor = ThreadPoolExecutor(1)
    encoders: list[CountingEncoder] = []

    async def make(encoder_class: type[CountingEncoder] = CountingEncoder, **kwargs) -> tuple[MicroBatcher,
                                                                                              CountingEncoder]:
        encoders.append(encoder_class(tiny_searcher.encoder, block=True))
        batcher = MicroBatcher(Searcher(tiny_searcher.index, encoders[-1]), executor, max_batch_size=4,
                               max_wait_ms=1, max_queue=64, **kwargs)
        batcher.start()
        return batcher, encoders[-1]

    yield make
    for encoder in encoders:
        encoder.gate.set()
    executor.shutdown(wait=False, cancel_futures=True)


async def occupy(batcher: MicroBatcher, encoder: CountingEncoder, until) -> asyncio.Task:
    """A request whose batch holds the (blocking) encoder, so the requests submitted next queue behind it."""
    busy = asyncio.create_task(batcher.submit(["occupies the worker"], SearchParams("phrase", 10), client="other"))
    await until(encoder.entered.is_set)
    return busy


NFC_ID, NFD_ID = "caf\u00e9.txt", "cafe\u0301.txt"  # one id typed on Linux and on a Mac (HFS+ decomposes)


# "việt.txt" held with "ẹ" + U+0302: neither composed (NFC: "ệ") nor decomposed (NFD: "e" + U+0323 + U+0302)
THIRD_ID, THIRD_NFC, THIRD_NFD = "vi\u1eb9\u0302t.txt", "vi\u1ec7t.txt", "vie\u0323\u0302t.txt"


def _index_holding(root: Path, tiny_model_dir: Path, doc_id: str) -> Path:
    """The tiny corpus plus a document held under ``doc_id``, as an index built before ids were made NFC holds it
    (written by a sync of the folder ``docs``: ``spanseek.sync``'s metadata, an outdated digest)."""
    import json

    from spanseek.indexer.build import BuildOptions, build_index
    from tests.conftest import make_corpus

    docs = [*make_corpus(), {"id": doc_id, "title": "Café", "paragraphs": ["In 1450 Gala built the harbour bridge."],
                             "meta": {"synced_from": "docs", "sha256": "0" * 64}}]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    build_index(root / "corpus.jsonl", tiny_model_dir, root / "index",
                BuildOptions(shard_passages=7, progress=False, precision="fp32"))
    return root / "index"


@pytest.fixture(scope="session")
def nfd_index(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny corpus plus a document held under the NFD spelling of café.txt (``_index_holding``)."""
    return _index_holding(tmp_path_factory.mktemp("nfd"), tiny_model_dir, NFD_ID)


@pytest.fixture(scope="session")
def third_spelling_index(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny corpus plus a document held under ``THIRD_ID``, a spelling of "việt.txt" neither NFC nor NFD."""
    return _index_holding(tmp_path_factory.mktemp("third"), tiny_model_dir, THIRD_ID)


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """spanseek.client's waits between tries, recorded instead of slept (sync and async)."""
    import spanseek.client as client_module

    recorded: list[float] = []

    async def async_sleep(seconds: float) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(client_module, "_sleep", recorded.append)
    monkeypatch.setattr(client_module, "_async_sleep", async_sleep)
    return recorded
