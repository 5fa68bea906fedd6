"""One bad request fails alone: invalid Unicode is refused before batching, and a failing batch is bisected."""

from __future__ import annotations

import asyncio
import contextlib
import json

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from spanseek.core.search import Searcher
from spanseek.service.app import create_app
from spanseek.service.batcher import (
    bisect_failures,
    encode_batch,
    run_batch,
    run_batch_isolated,
    select_requests,
)
from spanseek.service.errors import NotReady

POISON = "\ud800"  # a lone surrogate: JSON allows "\ud800", the tokenizer refuses it


@pytest.mark.parametrize("body", [
    b'{"query": "\\ud800"}',  # escaped lone surrogate
    b'{"query": "a \xed\xa0\x80 b"}',  # its raw bytes (CESU-8), which JSON decoding turns into the same
    b'{"queries": ["fine", "also \\udfff fine?"]}',
])
def test_lone_surrogates_are_422_naming_the_character(client, body):
    r = client.post("/search", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    msg = " ".join(d["msg"] for d in r.json()["details"])
    assert "lone surrogate" in msg and "U+D" in msg
    if b"queries" in body:
        assert "question 1" in msg


def test_invalid_utf8_body_is_a_4xx(client):
    r = client.post("/search", content=b'{"query": "\xff"}', headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500 and r.json()["request_id"]


async def test_rounds_of_normal_requests_with_one_poisoned(settings_for, tiny_searcher, async_serve):
    """The attack that failed 278 of 310 normal requests: 10 rounds of 31 normal + 1 poisoned, concurrently."""
    app = create_app(settings_for(max_batch_size=32, max_wait_ms=20), lambda s: tiny_searcher)
    async with async_serve(app) as ac:
        statuses = []
        for round_ in range(10):
            bodies = [{"query": f"who built the castle {round_}.{i}?"} for i in range(31)] + [{"query": POISON}]
            answers = await asyncio.gather(*(ac.post("/search", content=json.dumps(b).encode(),  # ASCII-escaped
                                                     headers={"content-type": "application/json"}) for b in bodies))
            statuses.append([a.status_code for a in answers])
    assert all(s[:31] == [200] * 31 for s in statuses)
    assert all(s[31] == 422 for s in statuses)


class PoisonableEncoder:
    """Wraps the tests' counting encoder: raises on any batch holding "BOOM"; encodes "FAR" as a huge vector
    that the search below refuses."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, questions):
        if any("BOOM" in q for q in questions):
            raise RuntimeError("the encoder cannot take this batch")
        q_start, q_end = self.inner.encode(questions)
        for b, q in enumerate(questions):
            if "FAR" in q:
                q_start[b] = 1e30
        return q_start, q_end


class PoisonableSearcher(Searcher):
    def search_vectors(self, q_start, q_end, *args, **kwargs):
        if np.abs(q_start).max(initial=0) > 1e29:
            raise FloatingPointError("the search cannot take this batch")
        return super().search_vectors(q_start, q_end, *args, **kwargs)


@pytest.mark.parametrize("pipeline", ["off", "on"])
@pytest.mark.parametrize("culprit", ["BOOM", "FAR"])
async def test_a_failing_batch_step_fails_only_its_culprit(hold_worker, settings_for, tiny_searcher, counting_factory,
                                                         async_serve, pipeline, culprit):
    """Batch-step failures the validation cannot foresee: encode (BOOM) and search (FAR), with and without the
    pipeline. Before bisection every request batched with the culprit got 500."""
    encoder = PoisonableEncoder(counting_factory(block=True)[1])
    searcher = PoisonableSearcher(tiny_searcher.index, encoder)
    app = create_app(settings_for(max_batch_size=16, max_wait_ms=1, pipeline=pipeline), lambda s: searcher)
    encoder.gate.set()
    async with async_serve(app) as ac:
        busy = await hold_worker(ac, encoder)
        questions = [f"castle number {i}" for i in range(7)]
        questions.insert(3, f"{culprit} castle")
        tasks = [asyncio.create_task(ac.post("/search", json={"query": q, "top_k": 2})) for q in questions]
        await asyncio.sleep(0.2)  # all queued behind the busy batch: they will form one batch
        encoder.gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert (await busy).status_code == 200
    statuses = [a.status_code for a in answers]
    assert statuses == [200] * 3 + [500] + [200] * 4, statuses
    assert answers[3].json()["error"] == "internal_error"
    for q, a in zip(questions, answers, strict=True):
        if a.status_code == 200:
            want = tiny_searcher.search([q], SearchParams(unit="phrase", top_k=2))[0]
            assert [(h["passage_id"], h["start"]) for h in a.json()["results"][0]["hits"]] == \
                [(h.passage_id, h.start) for h in want]


def test_bisect_failures_isolates_each_bad_item():
    calls = []

    def run(items):
        calls.append(list(items))
        if any(i in (3, 12) for i in items):
            raise ValueError(f"bad among {items}")
        return [i * 10 for i in items]

    out = bisect_failures(run, list(range(16)))
    assert [o for i, o in enumerate(out) if i not in (3, 12)] == [i * 10 for i in range(16) if i not in (3, 12)]
    assert isinstance(out[3], ValueError) and isinstance(out[12], ValueError)
    assert len(calls) <= 1 + 2 * 2 * 4  # two culprits among 16: a few calls per level, not one per item


def test_isolated_batch_equals_the_plain_batch_and_selection_keeps_rows(tiny_searcher):
    p2, p3 = SearchParams("phrase", 2), SearchParams("passage", 3)
    requests = [(["who built it?", " "], p2), (["which river?"], p3), ([], p2), (["a king", "the bridge"], p2)]
    plain, _ = run_batch(tiny_searcher, requests)
    isolated, _ = run_batch_isolated(tiny_searcher, requests)
    assert isolated == plain
    enc = encode_batch(tiny_searcher, requests)
    part = select_requests(enc, [3, 0])
    assert part.requests == [requests[3], requests[0]]
    assert part.q_start.shape[0] == 3  # "a king", "the bridge", "who built it?" (the blank is not encoded)
    full_rows = {q: enc.q_start[b] for b, i in enumerate(enc.rows) for q in [enc.flat[i][1]]}
    for b, i in enumerate(part.rows):
        assert np.array_equal(part.q_start[b], full_rows[part.flat[i][1]])


async def test_a_filter_whose_field_goes_between_its_check_and_its_batch_is_a_400_and_fails_alone(
        write_settings, async_serve, until, caplog):
    """A search's filter is checked against the index when it arrives; a write (or merge, or reload) that swaps in
    an index where it no longer holds (the only document with its field deleted) before the search's batch is taken
    made the search raise in the batch: a 500 "internal error", with two tracebacks in the log, for a request that
    arriving a moment later got a 400 naming the field. It is now that 400, the request beside it answered."""
    import logging
    import threading

    app = create_app(write_settings(max_wait_ms=1))
    key = {"X-API-Key": "key"}
    async with async_serve(app) as client:
        state = app.state.service
        doc = {"id": "x", "title": "T", "paragraphs": ["In 1450 Gala built the bridge."], "meta": {"lang": "en"}}
        assert (await client.put("/documents", headers=key, json=doc)).status_code == 200
        gate = threading.Event()
        state.executor.submit(gate.wait, 30)  # the worker is busy: the batch taken next waits for it
        first = asyncio.create_task(client.post("/search", headers=key, json={"query": "who built it?"}))
        await until(lambda: state.batcher.depth == 0 and bool(state.batcher._inflight))
        second = asyncio.create_task(client.post("/search", headers=key, json={
            "query": "who built the bridge?", "filter": {"meta": {"lang": "en"}}}))
        await until(lambda: state.batcher.depth == 1)  # checked against the index with "x", queued
        assert (await client.delete("/documents/x", headers=key)).status_code == 200  # the only one with lang
        caplog.clear()
        gate.set()
        answered, refused = await first, await second
    assert answered.status_code == 200, answered.text
    assert refused.status_code == 400 and "filter field 'lang': no document has it" in refused.json()["message"]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("pipeline", [False, True])
async def test_a_fault_in_the_batchers_own_bookkeeping_fails_its_batch_and_the_batcher_goes_on(tiny_searcher, pipeline):
    """An exception the batcher raises itself while answering a batch (here its metrics, once) fails that batch's
    requests (a 500, logged) and the next batch is answered. Before, the batcher's task ended on it: that batch's
    requests waited forever and every later search got 503 while /ready said 200 (with the pipeline, the batch's
    requests waited forever)."""
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.service.batcher import MicroBatcher
    from spanseek.service.metrics import ServiceMetrics

    metrics = ServiceMetrics()
    faults = [RuntimeError("a fault of the batcher's own")]
    observe = metrics.observe_batch

    def observe_once_failing(*args):
        if faults:
            raise faults.pop()
        observe(*args)

    metrics.observe_batch = observe_once_failing
    executors = [ThreadPoolExecutor(1) for _ in range(2)]
    batcher = MicroBatcher(tiny_searcher, executors[0], max_batch_size=4, max_wait_ms=1, max_queue=64,
                           metrics=metrics, search_executor=executors[1] if pipeline else None)
    batcher.start()
    try:
        with pytest.raises(RuntimeError, match="own"):
            await asyncio.wait_for(batcher.submit(["who built the castle?"], SearchParams("phrase", 2)), 10)
        outcome = await asyncio.wait_for(batcher.submit(["who built the bridge?"], SearchParams("phrase", 2)), 10)
        want = tiny_searcher.search(["who built the bridge?"], SearchParams("phrase", 2))[0]
        assert [(h.passage_id, h.start) for h in outcome.hits[0]] == [(h.passage_id, h.start) for h in want]
        assert batcher.depth == 0 and not batcher._inflight
    finally:
        await batcher.stop()
        for executor in executors:
            executor.shutdown(wait=True)


@contextlib.asynccontextmanager
async def _served_telling_stops(settings_for, tiny_searcher, async_serve, stops: list[bool]):
    """The tiny service served, its server's stop requests appended to ``stops``: (client, state, batcher)."""
    app = create_app(settings_for(), lambda s: tiny_searcher)
    state = app.state.service
    state.stop_server = lambda: stops.append(True)
    async with async_serve(app) as ac:
        assert state.batcher is not None and state.batcher._task is not None
        yield ac, state, state.batcher


async def test_a_dead_batcher_makes_the_service_unready_and_asks_the_server_to_stop(settings_for, tiny_searcher,
                                                                                     async_serve):
    """The batcher's queue owner ending on a fault outside any batch (a fault in its own queueing) leaves no search
    answerable: the waiting request and every later one get 503 naming why, /ready and /health say 503 with the
    reason (a restart fixes it), a reload is refused, and the server is asked to stop so that the orchestrator
    starts it again. Before, /ready stayed 200 while every search got 503, and the app's stop raised the batcher's
    exception."""
    stops: list[bool] = []
    async with _served_telling_stops(settings_for, tiny_searcher, async_serve, stops) as (ac, state, batcher):

        def take() -> list:
            raise RuntimeError("a fault in the queue's bookkeeping")

        batcher._take = take
        waiting = await asyncio.wait_for(ac.post("/search", json={"query": "who built the castle?"}), 10)
        why = "RuntimeError: a fault in the queue's bookkeeping"
        assert waiting.status_code == 503 and f"the search batcher stopped ({why})" in waiting.json()["message"]
        for path in ("/ready", "/health"):
            r = await ac.get(path)
            assert r.status_code == 503, (path, r.text)
            assert f"the search batcher stopped ({why})" in r.json()["message"]
        later = await asyncio.wait_for(ac.post("/search", json={"query": "who built the bridge?"}), 10)
        assert later.status_code == 503 and "search batcher stopped" in later.json()["message"]
        with pytest.raises(NotReady, match="no reload"):
            await state.reloader.on_request()
        assert stops == [True]
        assert state.metrics.ready._value.get() == 0


async def test_a_cancelled_batcher_is_stopped_not_broken(settings_for, tiny_searcher, async_serve):
    """Only the event loop's end cancels the batcher besides its stop: a server that ends without the app's stop
    (uvicorn's forced exit, a second Ctrl-C) leaves the batcher to asyncio.run, which cancels every task left. The
    search it held gets 503 at once (not a wait forever), but that is a stop, not a fault: no error, the server is
    not asked to stop, and ``spanseek serve`` exits 0 as after any Ctrl-C. Before, the cancellation was taken for a
    dead batcher: "the search batcher stopped (cancelled)" logged as an error and the process exited 1."""
    stops: list[bool] = []
    async with _served_telling_stops(settings_for, tiny_searcher, async_serve, stops) as (ac, state, batcher):
        held = asyncio.ensure_future(ac.post("/search", json={"query": "who built the castle?"}))
        await asyncio.sleep(0)
        batcher._task.cancel()
        waiting = await asyncio.wait_for(held, 10)
        assert waiting.status_code == 503, waiting.text
        assert (state.status, stops) == ("ready", [])
