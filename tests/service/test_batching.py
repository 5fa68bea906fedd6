"""The micro-batcher through HTTP: fewer encoder calls, max_wait bound, 429 under overload, cancelled requests skipped."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from spanseek.service.app import create_app


async def test_concurrent_requests_share_encoder_calls_and_get_their_own_answers(
    settings_for, counting_factory, async_serve, tiny_searcher
):
    factory, encoder = counting_factory()
    app = create_app(settings_for(max_batch_size=32, max_wait_ms=300), factory)
    requests = [(f"question number {i} about a castle", ("phrase", "passage", "doc")[i % 3], 1 + i % 4) for i in range(12)]
    async with async_serve(app) as ac:
        encoder.calls.clear()
        responses = await asyncio.gather(*[
            ac.post(f"/search?unit={unit}", json={"query": q, "top_k": k}) for q, unit, k in requests
        ])
    assert all(r.status_code == 200 for r in responses)
    assert sum(len(c) for c in encoder.calls) == 12
    assert len(encoder.calls) < 12  # batched: typically exactly 1 forward pass for all 12
    assert max(int(r.headers["X-Spanseek-Batch-Size"]) for r in responses) > 1
    for (q, unit, k), r in zip(requests, responses, strict=True):  # grouping by (unit, top_k) kept answers apart
        want = tiny_searcher.search([q], SearchParams(unit=unit, top_k=k))[0]
        got = r.json()["results"][0]["hits"]
        assert [(h["passage_id"], h["start"], h["end"]) for h in got] == [(h.passage_id, h.start, h.end) for h in want]
        assert np.allclose([h["score"] for h in got], [h.score for h in want], rtol=1e-4, atol=1e-4)


async def test_a_lone_request_waits_at_most_max_wait(settings_for, counting_factory, async_serve):
    factory, _ = counting_factory()
    app = create_app(settings_for(max_batch_size=64, max_wait_ms=100), factory)
    async with async_serve(app) as ac:
        r = await ac.post("/search", json={"query": "alone"})
    queue_ms = float(r.headers["X-Spanseek-Queue-Ms"])
    assert 80 <= queue_ms <= 1000  # waited for company, but not (much) past max_wait_ms


async def test_a_full_batch_does_not_wait(settings_for, counting_factory, async_serve):
    factory, encoder = counting_factory()
    app = create_app(settings_for(max_batch_size=4, max_wait_ms=5000), factory)
    async with async_serve(app) as ac:
        encoder.calls.clear()
        t0 = time.monotonic()
        rs = await asyncio.gather(*[ac.post("/search", json={"query": f"q{i}"}) for i in range(4)])
        elapsed = time.monotonic() - t0
    assert all(r.status_code == 200 for r in rs) and len(encoder.calls) == 1
    assert elapsed < 2.5  # dispatched when full, long before the 5 s max_wait


async def test_overload_answers_429_at_once_not_timeouts(hold_worker, until, settings_for, counting_factory,
                                                         async_serve):
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=2, max_wait_ms=1, max_queue=4, max_queries_per_request=2), factory)
    encoder.gate.set()  # let readiness through (warm-up is off; the first /ready poll does not encode)
    async with async_serve(app) as ac:
        busy = await hold_worker(ac, encoder)  # the worker is now stuck in encode
        tasks = [asyncio.create_task(ac.post("/search", json={"query": f"q{i}"})) for i in range(10)]
        await until(lambda: sum(t.done() for t in tasks) >= 6)  # 4 fit the queue; 6 are refused while blocked
        refused = [t.result() for t in tasks if t.done()]
        assert len(refused) == 6 and all(r.status_code == 429 for r in refused)
        assert all(int(r.headers["Retry-After"]) >= 1 and r.json()["error"] == "overloaded" for r in refused)
        metrics = (await ac.get("/metrics")).text
        assert "spanseek_queue_depth 4.0" in metrics
        assert 'spanseek_errors_total{route="/search",type="overloaded"} 6.0' in metrics
        encoder.gate.set()
        served = await asyncio.wait_for(asyncio.gather(busy, *[t for t in tasks if not t.done()]), 30)
    assert [r.status_code for r in served] == [200] * 5


async def test_cancelled_requests_are_skipped(hold_worker, until, settings_for, counting_factory, async_serve):
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=8, max_wait_ms=1), factory)
    encoder.gate.set()
    async with async_serve(app) as ac:
        busy = await hold_worker(ac, encoder)
        gone = asyncio.create_task(ac.post("/search", json={"query": "client went away"}))
        kept = asyncio.create_task(ac.post("/search", json={"query": "client still here"}))
        await asyncio.sleep(0.1)  # both queued behind the busy batch
        gone.cancel()
        await asyncio.sleep(0.05)
        encoder.gate.set()
        assert (await asyncio.wait_for(kept, 30)).status_code == 200
        assert (await busy).status_code == 200
    encoded = [q for call in encoder.calls for q in call]
    assert "client still here" in encoded and "client went away" not in encoded


def test_a_client_that_disconnects_is_skipped_under_uvicorn(settings_for, counting_factory, live):
    """Over a real socket: the client gives up (timeout), the server notices the disconnect and drops its question."""
    import threading

    import httpx

    factory, encoder = counting_factory(block=True)
    encoder.gate.set()
    app = create_app(settings_for(max_batch_size=8, max_wait_ms=1), factory)
    with live(app) as url:
        encoder.gate.clear()
        encoder.entered.clear()
        busy = threading.Thread(target=lambda: httpx.post(url + "/search", json={"query": "occupies the worker"}, timeout=30))
        busy.start()
        assert encoder.entered.wait(10)
        with pytest.raises(httpx.TimeoutException):
            httpx.post(url + "/search", json={"query": "impatient client"}, timeout=0.5)
        deadline = time.monotonic() + 10
        while 'spanseek_errors_total{route="/search",type="client_closed"} 1.0' not in httpx.get(url + "/metrics").text:
            assert time.monotonic() < deadline, "the disconnect was not noticed"
            time.sleep(0.05)
        assert "spanseek_queue_depth 0.0" in httpx.get(url + "/metrics").text  # left the queue while the batch runs
        encoder.gate.set()
        busy.join(30)
        assert httpx.post(url + "/search", json={"query": "patient client"}, timeout=30).status_code == 200
    encoded = [q for call in encoder.calls for q in call]
    assert "patient client" in encoded and "impatient client" not in encoded


async def test_stopping_fails_queued_and_running_requests_with_503(until, tiny_searcher, counting_factory):
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.service.batcher import MicroBatcher
    from spanseek.service.errors import NotReady

    factory, encoder = counting_factory(block=True)
    executor = ThreadPoolExecutor(1)
    batcher = MicroBatcher(factory(None), executor, max_batch_size=1, max_wait_ms=0, max_queue=8)
    batcher.start()
    running = asyncio.create_task(batcher.submit(["running"], SearchParams("phrase", 1)))
    await until(encoder.entered.is_set)
    queued = asyncio.create_task(batcher.submit(["queued"], SearchParams("phrase", 1)))
    await asyncio.sleep(0.05)
    await batcher.stop()
    for task in (running, queued):
        with pytest.raises(NotReady):
            await asyncio.wait_for(task, 5)
    with pytest.raises(NotReady):
        await batcher.submit(["late"], SearchParams("phrase", 1))
    encoder.gate.set()
    executor.shutdown(wait=True)


class _GatedSearch:
    """A searcher whose search step waits on ``gate`` (the encoder is the real one)."""

    def __init__(self, inner, fail_on: str | None = None):
        import threading

        self.inner, self.encoder, self.index = inner, inner.encoder, inner.index
        self.gate, self.entered, self.fail_on = threading.Event(), threading.Event(), fail_on
        self.searched: list[int] = []

    def search_vectors(self, q_start, *args, **kwargs):
        self.searched.append(len(q_start))
        self.entered.set()
        assert self.gate.wait(30), "test search was never released"
        if self.fail_on is not None and len(self.searched) == 1:
            raise RuntimeError(self.fail_on)
        return self.inner.search_vectors(q_start, *args, **kwargs)


@pytest.mark.parametrize("pipeline", [True, False])
async def test_the_pipeline_encodes_the_next_batch_while_one_is_searched(until, tiny_searcher, counting_factory, pipeline):
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.service.batcher import MicroBatcher

    factory, encoder = counting_factory()
    searcher = _GatedSearch(factory(None))
    encode_pool, search_pool = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, encode_pool, max_batch_size=4, max_wait_ms=0, max_queue=16,
                           search_executor=search_pool if pipeline else None)
    batcher.start()
    params = SearchParams("phrase", 3)
    first = asyncio.create_task(batcher.submit(["Who built the castle?"], params))
    await until(searcher.entered.is_set)  # batch 1 is in the search step
    second = asyncio.create_task(batcher.submit(["When was the bridge built?", "Who built the tower?"], params))
    await asyncio.sleep(0.3)
    encoded = [q for call in encoder.calls for q in call]
    # pipelined: batch 2 was encoded during batch 1's search; not pipelined: it waits for the worker
    assert ("When was the bridge built?" in encoded) is pipeline
    assert searcher.searched == [1]  # either way, one batch in the search step at a time
    searcher.gate.set()
    got = await asyncio.wait_for(asyncio.gather(first, second), 30)
    for outcome, questions in zip(got, (["Who built the castle?"], ["When was the bridge built?", "Who built the tower?"]),
                                  strict=True):
        want = tiny_searcher.search(questions, SearchParams(unit="phrase", top_k=3))
        assert [[(h.passage_id, h.start, h.end) for h in hits] for hits in outcome.hits] == \
            [[(h.passage_id, h.start, h.end) for h in hits] for hits in want]
    await batcher.stop()
    encode_pool.shutdown(wait=True)
    search_pool.shutdown(wait=True)


async def test_a_failing_search_step_fails_its_batch_only_and_stop_fails_both_stages(until, tiny_searcher, counting_factory):
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.service.batcher import MicroBatcher
    from spanseek.service.errors import NotReady

    factory, encoder = counting_factory()
    searcher = _GatedSearch(factory(None), fail_on="index exploded")
    pools = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, pools[0], max_batch_size=1, max_wait_ms=0, max_queue=16, search_executor=pools[1])
    batcher.start()
    params = SearchParams("phrase", 2)
    bad = asyncio.create_task(batcher.submit(["first"], params))
    await until(searcher.entered.is_set)
    good = asyncio.create_task(batcher.submit(["second"], params))
    await asyncio.sleep(0.1)
    searcher.gate.set()
    with pytest.raises(RuntimeError, match="index exploded"):
        await asyncio.wait_for(bad, 30)
    assert len((await asyncio.wait_for(good, 30)).hits) == 1  # the next batch is served

    searcher.gate.clear()
    searcher.entered.clear()
    searching = asyncio.create_task(batcher.submit(["in the search step"], params))
    await until(searcher.entered.is_set)
    encoding = asyncio.create_task(batcher.submit(["encoded, waiting for search"], params))
    await until(lambda: "encoded, waiting for search" in [q for call in encoder.calls for q in call])
    await batcher.stop()
    for task in (searching, encoding):
        with pytest.raises(NotReady):
            await asyncio.wait_for(task, 5)
    searcher.gate.set()
    for pool in pools:
        pool.shutdown(wait=True)


async def test_full_overlap_starts_a_batch_during_a_search_only_when_a_full_batch_waits(until, tiny_searcher, counting_factory):
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.service.batcher import MicroBatcher

    factory, encoder = counting_factory()
    searcher = _GatedSearch(factory(None))
    pools = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, pools[0], max_batch_size=2, max_wait_ms=0, max_queue=16, search_executor=pools[1],
                           overlap="full")
    batcher.start()
    params = SearchParams("phrase", 2)
    encoded = lambda: [q for call in encoder.calls for q in call]  # noqa: E731
    first = asyncio.create_task(batcher.submit(["in the search step"], params))
    await until(searcher.entered.is_set)
    lone = asyncio.create_task(batcher.submit(["alone in the queue"], params))
    await asyncio.sleep(0.3)
    assert "alone in the queue" not in encoded()  # less than a full batch: it waits for the search step
    pair = asyncio.create_task(batcher.submit(["now the queue", "holds a full batch"], params))
    await until(lambda: "alone in the queue" in encoded())  # a full batch waits: the next one is encoded now
    assert searcher.searched == [1]
    searcher.gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, lone, pair), 30)
    assert [len(o.hits) for o in outcomes] == [1, 1, 2]
    await batcher.stop()
    for pool in pools:
        pool.shutdown(wait=True)
