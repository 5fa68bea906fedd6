"""Admission and batching by estimated cost, fair between clients: one client's heavy or numerous requests do not
starve the others, and a request asking more work than max_request_cost is refused naming the limit.

    .venv/bin/python -m pytest -q tests/service/test_fairness.py
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from spanseek.core.params import SearchParams
from spanseek.core.search import Searcher
from spanseek.service.app import create_app
from spanseek.service.batcher import MicroBatcher
from spanseek.service.cost import FULL_DEPTH_TOKENS, SHARE_FACTOR, CostModel
from spanseek.service.errors import Overloaded
from spanseek.service.fairness import FairQueue, client_key
from spanseek.service.logs import AccessLogLimiter
from tests.service.conftest import CountingEncoder, occupy

PHRASE = SearchParams("phrase", 10)


def test_deep_unit_searches_cost_more_the_nearer_their_depth_comes_to_the_unit_count():
    cost = CostModel({"passage": 1000, "doc": 20}, FULL_DEPTH_TOKENS, default_top_k=10, read_passages=5)
    assert cost.question(PHRASE) == 1.0
    shallow, half, most, whole = (cost.question(SearchParams("doc", k)) for k in (2, 10, 18, 20))
    assert 1.0 <= shallow <= half < most < whole == SHARE_FACTOR["doc"][-1][1] and whole > 6 * most
    assert cost.question(SearchParams("doc", 100, offset=10)) > whole  # beyond every unit: more tokens a round
    # a page past the last document is empty and searches nothing, unless min_confidence judges the first hit
    assert cost.question(SearchParams("doc", 10, offset=20)) == 1.0
    assert cost.question(SearchParams("doc", 10, offset=20, min_confidence=0.5)) >= whole
    assert cost.question(SearchParams("passage", 200)) > 4  # deep pages cost even far from every unit
    assert cost.question(SearchParams("passage", 10)) < 1.01  # 10 of 1,000 passages: about a phrase question
    assert cost.question(SearchParams("phrase", 100, offset=100)) > cost.question(PHRASE)
    assert cost.request(32, SearchParams("doc", 20)) == 32 * whole
    assert "20 of the index's 20 docs" in cost.explain(SearchParams("doc", 20))
    # searching every token of a small index costs little; of a larger one, more
    small, large = (CostModel({"passage": 1000, "doc": 20}, tokens) for tokens in (500, 10 * FULL_DEPTH_TOKENS))
    assert small.question(SearchParams("doc", 20)) == small.question(SearchParams("doc", 19)) == SHARE_FACTOR["doc"][-2][1]
    # every passage costs more than 90% of them, and every document of the demo index fits max_request_cost (64)
    deep, all_passages = (cost.question(SearchParams("passage", 100, offset=k - 100)) for k in (900, 1000))
    assert 1.0 < deep < all_passages
    assert CostModel({"passage": 1022, "doc": 22}).question(SearchParams("doc", 2, offset=20)) < 64
    assert large.question(SearchParams("doc", 20)) == pytest.approx(10 * whole)


def test_a_filtered_search_costs_its_unfiltered_search_too():
    from spanseek.core.filters import SearchFilter
    from spanseek.service.cost import FILTERED_FACTOR

    cost = CostModel({"passage": 1000, "doc": 20}, FULL_DEPTH_TOKENS)
    narrow, everything = SearchFilter(doc_ids=("a",)), SearchFilter(meta={})
    assert FILTERED_FACTOR["hybrid"] > FILTERED_FACTOR["dense"] > 1.0 == FILTERED_FACTOR["lexical"]
    for unit, k in (("phrase", 100), ("passage", 300), ("doc", 18)):
        plain = cost.question(SearchParams(unit, k))
        assert cost.question(SearchParams(unit, k, filter=narrow)) == pytest.approx(FILTERED_FACTOR["hybrid"] * plain)
        assert cost.question(SearchParams(unit, k, filter=everything)) == plain  # selects nothing out: no second search
        assert cost.question(SearchParams(unit, k, mode="dense", filter=narrow)) == pytest.approx(
            FILTERED_FACTOR["dense"] * plain)
        assert cost.question(SearchParams(unit, k, mode="lexical", filter=narrow)) == plain
        assert CostModel({"passage": 1000, "doc": 20}, default_mode="dense").question(
            SearchParams(unit, k, filter=narrow)) == pytest.approx(FILTERED_FACTOR["dense"] * plain)
        read = SearchParams(unit, k, mode="dense", filter=narrow, read=True)  # the reader's confidences: no second
        assert cost.question(read) == cost.question(SearchParams(unit, k, mode="dense", read=True))
    assert cost.question(SearchParams("phrase", 10, filter=narrow)) == pytest.approx(
        FILTERED_FACTOR["hybrid"] * cost.question(PHRASE))
    assert "without the filter" in cost.explain(SearchParams("doc", 18, filter=narrow))
    assert "without the filter" not in cost.explain(SearchParams("doc", 18, mode="lexical", filter=narrow))


class _Item:
    def __init__(self, client: str, cost: float, queue: FairQueue):
        self.client, self.cost, self.tag, self.alive = client, cost, queue.tag_for(client, cost), True

    def live(self) -> bool:
        return self.alive


def test_fair_queue_lets_a_light_client_pass_a_heavy_one():
    queue: FairQueue[_Item] = FairQueue()
    for _ in range(3):
        queue.push(_Item("heavy", 8.0, queue))
    light = _Item("light", 1.0, queue)
    assert queue.cost_ahead(light.tag) == 0.0  # nothing of the heavy client's runs before it
    queue.push(light)
    assert queue.in_order()[0] is light and queue.cost == 25.0
    assert queue.client_cost("heavy") == 24.0 and queue.clients() == 2
    queue.in_order()[1].alive = False  # a client that left is dropped
    assert len(queue.in_order()) == 3 and queue.cost == 17.0


def test_client_key_is_the_connection_or_the_peer():
    scope = {"client": ("10.0.0.7", 51234)}
    assert client_key(scope, "connection") == "10.0.0.7:51234" and client_key(scope, "peer") == "10.0.0.7"
    assert client_key({}, "peer") == "-"


async def test_batches_take_light_clients_before_a_heavy_client_s_backlog(blocked_batcher, until):
    """Three heavy requests (4 question-equivalents each) queued before three one-question clients: the next batch
    takes the three light ones; the heavy requests follow one batch each. Before, batches took requests in arrival
    order and counted questions, so the light clients waited behind all the heavy work."""
    batcher, encoder = await blocked_batcher()
    busy = await occupy(batcher, encoder, until)
    heavy = [asyncio.create_task(batcher.submit([f"heavy {i}"], PHRASE, cost=4.0, client="heavy")) for i in range(3)]
    await asyncio.sleep(0.01)
    light = [asyncio.create_task(batcher.submit([f"light {i}"], PHRASE, client=f"light{i}")) for i in range(3)]
    await asyncio.sleep(0.01)
    encoder.gate.set()
    await asyncio.wait_for(asyncio.gather(busy, *heavy, *light), 30)
    assert encoder.calls[1] == ["light 0", "light 1", "light 2"]
    assert encoder.calls[2:] == [["heavy 0"], ["heavy 1"], ["heavy 2"]]
    await batcher.stop()


async def test_a_request_costing_more_than_a_batch_runs_in_parts_and_others_run_first(blocked_batcher, until):
    """Six questions of 2 question-equivalents each, with batches of 4: six parts of half a batch, each queued in
    fair order, so a light client's question sent after them runs first, beside the first part; the answer joins
    the parts in order. Before, a request ran as one batch whatever it cost: one request of 7.5 s held every other
    client's answers (and with parts of a whole batch, a part ahead of a question kept it for a batch)."""
    batcher, encoder = await blocked_batcher()
    busy = await occupy(batcher, encoder, until)
    heavy = asyncio.create_task(batcher.submit([f"h{i}" for i in range(6)], PHRASE, cost=12.0, client="heavy"))
    await asyncio.sleep(0.01)
    light = asyncio.create_task(batcher.submit(["light"], PHRASE, client="light"))
    await asyncio.sleep(0.01)
    encoder.gate.set()
    outcome, _, _ = await asyncio.wait_for(asyncio.gather(heavy, light, busy), 30)
    assert encoder.calls[1:] == [["light", "h0"], ["h1", "h2"], ["h3", "h4"], ["h5"]]
    assert len(outcome.hits) == 6 and outcome.batch_size == 2
    await batcher.stop()


@pytest.mark.parametrize("fair_wait_ms", [0.0, 200.0])
async def test_a_client_waiting_for_its_answers_keeps_its_share_beside_a_backlogged_one(tiny_searcher, fair_wait_ms):
    """A light client in a closed loop (one question, 1 question-equivalent, asked again 2 ms after each answer)
    beside a heavy request queued in 8 parts of a full batch (4 question-equivalents each). Fair shares in cost give
    the light client about 4 questions per heavy part. Without fair_wait (0) every gap between its answer and its
    next question goes to a heavy part: the heavy request is done within the light client's first 10 questions."""
    encoder = CountingEncoder(tiny_searcher.encoder)
    executor = ThreadPoolExecutor(1)
    batcher = MicroBatcher(Searcher(tiny_searcher.index, encoder), executor, max_batch_size=4, max_wait_ms=1,
                           max_queue=64, fair_wait_ms=fair_wait_ms)
    batcher.start()
    heavy = asyncio.create_task(batcher.submit([f"h{i}" for i in range(8)], PHRASE, cost=32.0, client="heavy"))
    await asyncio.sleep(0)
    for i in range(10):
        await asyncio.wait_for(batcher.submit([f"light {i}"], PHRASE, client="light"), 30)
        await asyncio.sleep(0.002)
    heavy_parts = sum(call[0].startswith("h") for call in encoder.calls)
    await asyncio.wait_for(heavy, 30)
    await batcher.stop()
    executor.shutdown(wait=False)
    if fair_wait_ms:
        assert heavy_parts <= 4  # about one part per 4 light questions
    else:
        assert heavy_parts >= 8  # a part in every gap: the whole request


async def test_a_client_with_much_work_queued_is_refused_while_the_others_are_admitted(blocked_batcher, until):
    """At 100 ms per question-equivalent and a 300 ms budget, a client with 6 queued is refused (its next request
    would run after them), and so is one holding more than its share of max_queue; a new client is admitted at once.
    Before, every client saw the whole queue ahead of it: the heavy client's backlog turned everyone away."""
    batcher, encoder = await blocked_batcher(max_queue_wait_ms=300)
    batcher.observe_batch(4, 0.4)
    busy = await occupy(batcher, encoder, until)
    queued = [asyncio.create_task(batcher.submit([f"h{i}"], PHRASE, cost=3.0, client="heavy")) for i in range(2)]
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded, match="max_queue_wait_ms") as budget:
        batcher.check_would_admit("heavy")  # also what the HTTP layer asks before reading a body
    assert budget.value.reason == "wait_budget"  # the reason label of spanseek_search_refusals_total
    batcher.check_would_admit("light")
    light = asyncio.create_task(batcher.submit(["light"], PHRASE, client="light"))
    await asyncio.sleep(0.01)
    assert not light.done()  # admitted, waiting for the worker
    batcher.max_queue_wait = 0.0  # no wait budget: only the queue's room, shared between the two waiting clients
    batcher.max_queue = 16
    with pytest.raises(Overloaded, match="share of the queue") as share:
        await batcher.submit(["h"], PHRASE, cost=3.0, client="heavy")  # 6 + 3 > 16 / 2
    assert share.value.reason == "fair_share"  # not a sign of too little capacity: the overload alert leaves it out
    encoder.gate.set()
    await asyncio.wait_for(asyncio.gather(busy, *queued, light), 30)
    await batcher.stop()


async def test_a_request_costing_more_than_max_request_cost_is_refused_naming_the_limit(settings_for, tiny_searcher,
                                                                                      async_serve):
    """The tiny index has 6 documents: a document search 6 deep must find every one of them, which searches every
    token (on this small index, the 1.4 question-equivalents a question of a search nearly as deep). Before, 32
    such questions were queued as 32 default ones."""
    app = create_app(settings_for(max_request_cost=16, max_queries_per_request=16), lambda s: tiny_searcher)
    async with async_serve(app) as ac:
        ok = await ac.post("/search?unit=doc", json={"queries": ["a"] * 16, "top_k": 3})  # half the documents
        assert ok.status_code == 200
        assert (await ac.post("/search?unit=doc", json={"queries": ["a"] * 11, "top_k": 6})).status_code == 200
        r = await ac.post("/search?unit=doc", json={"queries": ["a"] * 12, "top_k": 6})
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        message = r.json()["message"]
        assert "max_request_cost" in message and "16" in message and "unit=doc" in message
        assert (await ac.post("/search", json={"queries": ["a"] * 16})).status_code == 200  # phrases: 1 each


def test_the_access_log_is_rate_limited_and_says_how_many_lines_it_left_out(caplog):
    now = [0.0]
    limiter = AccessLogLimiter(2.0, clock=lambda: now[0])
    assert [limiter.allow() for _ in range(5)] == [True, True, False, False, False] and limiter.left_out == 3
    now[0] = 1.0
    with caplog.at_level(logging.INFO, logger="spanseek.access"):
        assert limiter.allow()
    assert "3 access lines left out" in caplog.text and limiter.left_out == 0
    assert all(AccessLogLimiter(0).allow() for _ in range(1000))  # 0: no limit


async def test_a_client_ignoring_retry_after_gets_its_next_refusal_only_when_it_has_passed(overloaded):
    """Refused with Retry-After: 2 and asking again at once, a client waits out those 2 s for its second 429, so a
    flood of such clients asks about once per Retry-After each instead of as fast as the server can refuse (which
    took the cores from the searches: 27% of the saturation rate answered). The first refusal comes at once."""
    async with overloaded() as (ac, _):
        times, statuses = [], []
        for i in range(2):
            t0 = time.monotonic()
            r = await ac.post("/search", json={"query": f"q{i}"})
            times.append(time.monotonic() - t0)
            statuses.append((r.status_code, r.headers.get("Retry-After")))
        assert statuses == [(429, "2"), (429, "2")]
        assert times[0] < 1.0 and times[1] >= 1.8  # the second waited out the first's Retry-After


async def test_a_refusal_under_overload_writes_no_access_line(overloaded, caplog, monkeypatch):
    """Each 429 is counted in spanseek_errors_total, not logged: under a flood of clients that ignore Retry-After,
    the log grew by a line per refusal (18 MB in two minutes)."""
    from spanseek.service.middleware import EarlyShedMiddleware

    monkeypatch.setattr(EarlyShedMiddleware, "MAX_TARPIT_S", 0.0)  # 20 refusals in a row, none held
    async with overloaded() as (ac, _):
        with caplog.at_level(logging.INFO, logger="spanseek.access"):
            caplog.clear()
            statuses = [(await ac.post("/search", json={"query": f"q{i}"})).status_code for i in range(20)]
            assert statuses == [429] * 20
            assert "POST /search 429" not in caplog.text
            assert 'spanseek_errors_total{route="/search",type="overloaded"} 20.0' in (await ac.get("/metrics")).text
            assert (await ac.get("/info")).status_code == 200
            assert "GET /info 200" in caplog.text  # other requests still get their line
