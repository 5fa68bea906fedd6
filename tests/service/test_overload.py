"""Overload sheds by expected queueing time at the measured batch rate (429 + Retry-After), max_queue stays a cap."""

from __future__ import annotations

import asyncio

import pytest

from spanseek.service.app import create_app
from spanseek.service.errors import Overloaded
from spanseek.service.overload import BatchCostModel, check_admission, queue_wait


def test_cost_model_recovers_a_linear_batch_cost():
    cost = BatchCostModel()
    assert not cost.known and cost.seconds_for(100, 32) == 0.0
    for size in [1, 4, 32, 8, 16, 32, 2, 32] * 5:
        cost.observe(size, 0.010 + 0.003 * size)  # 10 ms per batch + 3 ms per question
    fixed, per_question = cost.line()
    assert fixed == pytest.approx(0.010, rel=1e-6) and per_question == pytest.approx(0.003, rel=1e-6)
    assert cost.seconds_for(70, 32) == pytest.approx(3 * 0.010 + 70 * 0.003)


def test_cost_model_with_one_batch_size_is_proportional_and_follows_the_machine():
    cost = BatchCostModel()
    cost.observe(32, 0.32)
    assert cost.line() == (0.0, pytest.approx(0.01)) and cost.seconds_for(64, 32) == pytest.approx(0.64)
    for _ in range(100):  # the machine got 4x slower: the estimate follows within tens of batches
        cost.observe(32, 1.28)
    assert cost.seconds_for(32, 32) == pytest.approx(1.28, rel=0.01)


def test_admission_by_expected_wait_and_by_the_hard_cap():
    cost = BatchCostModel()
    cost.observe(32, 0.32)  # 10 ms a question, 320 ms a full batch
    check_admission(cost, queued=0, incoming=32, max_batch_size=32, max_queue=256, budget_s=0.001)  # empty: admitted
    with pytest.raises(Overloaded) as e:  # one full batch (320 ms) ahead of it
        check_admission(cost, queued=32, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3)
    assert "max_queue_wait_ms" in e.value.message and e.value.headers["Retry-After"] == "1"
    with pytest.raises(Overloaded) as e:  # budget off: only the cap
        check_admission(cost, queued=250, incoming=7, max_batch_size=32, max_queue=256, budget_s=0)
    assert "full" in e.value.message and int(e.value.headers["Retry-After"]) >= 3  # ~2.5 s of queued work
    check_admission(cost, queued=249, incoming=7, max_batch_size=32, max_queue=256, budget_s=0)


def test_questions_of_the_forming_batch_are_not_ahead_but_batches_in_flight_are():
    """A burst that fits in one batch is admitted whole (before, the 31st request saw 300 ms "ahead" of it and was
    refused although it would run in the same batch as the others); the batches in flight count."""
    cost = BatchCostModel()
    cost.observe(32, 0.32)
    for queued in range(32):  # all of them join the forming batch: nothing runs before it
        assert queue_wait(cost, queued, 32) == 0.0
        check_admission(cost, queued=queued, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3)
    assert queue_wait(cost, 32, 32) == pytest.approx(0.32) and queue_wait(cost, 95, 32) == pytest.approx(0.64)
    assert queue_wait(cost, 5, 32, inflight_remaining_s=0.25) == pytest.approx(0.25)
    assert queue_wait(cost, 37, 32, inflight_remaining_s=0.03) == pytest.approx(0.35)
    check_admission(cost, queued=37, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.33,
                    inflight_remaining_s=0.0)  # one full batch (320 ms) ahead, nothing in flight
    with pytest.raises(Overloaded):  # and 30 ms still to run in flight: 350 ms
        check_admission(cost, queued=37, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.33,
                        inflight_remaining_s=0.03)
    # part of a burst: admitted beyond the budget while the whole queue (30 ms + 38 x 10 ms) meets the deadline
    check_admission(cost, queued=37, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3,
                    inflight_remaining_s=0.03, burst_deadline_s=0.415)
    with pytest.raises(Overloaded):
        check_admission(cost, queued=37, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3,
                        inflight_remaining_s=0.03, burst_deadline_s=0.40)


def test_a_request_that_joins_the_next_batch_is_never_refused_by_the_budget():
    """Only queued work ahead is shed: a request whose batch is the next one (less than a full batch ahead of it)
    is admitted however long the batch in flight still runs. Before, a batch in flight longer than the budget
    refused it, so 8 clients waiting for their answers (never more than 8 questions queued, max_batch_size 16) got
    429s at saturation for nothing: their retries found the same batch running."""
    cost = BatchCostModel()
    cost.observe(32, 0.32)
    for queued in (0, 5, 31):
        check_admission(cost, queued=queued, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3,
                        inflight_remaining_s=5.0)
    with pytest.raises(Overloaded) as e:  # a full batch ahead of it, behind the 5 s batch in flight
        check_admission(cost, queued=32, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3,
                        inflight_remaining_s=5.0)
    assert int(e.value.headers["Retry-After"]) >= 5
    assert e.value.reason == "wait_budget"
    with pytest.raises(Overloaded) as full:  # the hard cap still holds for the next batch
        check_admission(cost, queued=31, incoming=1, max_batch_size=32, max_queue=31, budget_s=0.3)
    assert full.value.reason == "queue_full"
    # fair queueing: what runs before it counts, not the whole queue
    check_admission(cost, queued=64, incoming=1, max_batch_size=32, max_queue=256, budget_s=0.3,
                    inflight_remaining_s=5.0, ahead=3)


async def test_requests_beyond_the_wait_budget_get_429_with_retry_after(hold_worker, until, settings_for,
                                                                        counting_factory, async_serve, monkeypatch):
    """The queue holds only what the measured rate runs within max_queue_wait_ms, far below max_queue.

    Before, the default max_queue (256 questions) was the only bound: all 40 requests would have queued."""
    from spanseek.service.middleware import EarlyShedMiddleware

    monkeypatch.setattr(EarlyShedMiddleware, "MAX_TARPIT_S", 0.0)  # one client refused 28 times in a row, none held
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=4, max_wait_ms=1, max_queue_wait_ms=100, max_queries_per_request=4),
                     factory)  # a burst allowance of one batch: the wait budget decides
    encoder.gate.set()
    async with async_serve(app) as ac:
        batcher = app.state.service.batcher
        batcher.observe_batch(4, 0.040)  # measured rate: 40 ms a batch of 4, so 100 ms = 2 full batches ahead
        busy = await hold_worker(ac, encoder)
        tasks = []
        for i in range(40):  # one at a time, so the queue depth each one sees is known
            tasks.append(asyncio.create_task(ac.post("/search", json={"query": f"q{i}"})))
            await until(lambda: tasks[-1].done() or batcher.depth == len([t for t in tasks if not t.done()]))
        refused = [t.result() for t in tasks if t.done()]
        assert len(refused) == 40 - 12  # admitted while <= 2 full batches were ahead: 0..11 queued questions
        assert all(r.status_code == 429 and r.json()["error"] == "overloaded" for r in refused)
        assert all(r.headers["Retry-After"] == "1" and "max_queue_wait_ms" in r.json()["message"] for r in refused)
        refusals = {reason: f'spanseek_search_refusals_total{{reason="{reason}"}} {n:.1f}'
                    for reason, n in (("wait_budget", 28), ("queue_full", 0), ("fair_share", 0))}
        exposed = (await ac.get("/metrics")).text  # each refusal counted once, by the limit that refused it
        assert all(line in exposed for line in refusals.values()), exposed
        assert 'spanseek_request_duration_seconds_count{read="false",status="429",unit="phrase"} 28.0' in exposed
        encoder.gate.set()
        served = await asyncio.wait_for(asyncio.gather(busy, *[t for t in tasks if not t.done()]), 30)
    assert [r.status_code for r in served] == [200] * 13


async def test_warm_up_measures_the_batch_rate(settings_for, tiny_searcher, async_serve):
    app = create_app(settings_for(warmup=True), lambda s: tiny_searcher)
    async with async_serve(app):
        cost = app.state.service.batcher.cost
        assert cost.known and cost.seconds_for(32, 32) > 0


@pytest.mark.parametrize("max_batch_size,burst", [(4, 8), (16, 32)])
async def test_a_burst_of_one_request_s_worth_of_questions_at_an_idle_server_is_served_whole(
        max_batch_size, burst, hold_worker, until, settings_for, counting_factory, async_serve):
    """A burst at an idle server of up to max_queries_per_request questions is answered whole, also when it spans
    batches (16 questions a batch, 32 in the burst): it is the work of one request of that many questions, which
    the server would take anyway. Its first request starts a batch; the rest is admitted although the measured
    rate (10 s a question) puts it far over the 1 ms budget. The question after the burst, with full batches
    queued ahead of it, is refused (429).
    Before, only what fitted in the next batch joined: the 18th request of a 32-request burst got 429."""
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=max_batch_size, max_wait_ms=1, max_queue_wait_ms=1,
                                  max_queries_per_request=burst), factory)
    encoder.gate.set()
    async with async_serve(app) as ac:
        batcher = app.state.service.batcher
        batcher.observe_batch(max_batch_size, 10.0 * max_batch_size)  # 10 s a question: slow test runs stay inside
        busy = await hold_worker(ac, encoder)  # the burst's first batch (1 question)
        tasks = []
        for i in range(burst):
            tasks.append(asyncio.create_task(ac.post("/search", json={"query": f"q{i}"})))
            await until(lambda: tasks[-1].done() or batcher.depth == len([t for t in tasks if not t.done()]))
        refused = [t.result() for t in tasks if t.done()]
        assert [r.status_code for r in refused] == [429] and refused[0].headers["Retry-After"]
        assert tasks[-1].done() and not any(t.done() for t in tasks[:-1])
        encoder.gate.set()
        served = await asyncio.wait_for(asyncio.gather(busy, *tasks[:-1]), 30)
    assert [r.status_code for r in served] == [200] * burst



def test_cost_model_measures_how_far_batches_stray_from_the_line():
    cost = BatchCostModel()
    assert cost.spread() == 0.0
    for _ in range(30):
        cost.observe(32, 1.0)
    assert cost.spread() == pytest.approx(0.0, abs=1e-9)  # every batch as predicted
    for seconds in [0.5, 1.5] * 30:  # 1 s on average, give or take 0.5 s
        cost.observe(32, seconds)
    assert cost.seconds_for(32, 32) == pytest.approx(1.0, abs=0.05) and cost.spread() == pytest.approx(0.5, rel=0.1)


async def test_a_batch_running_past_its_mean_time_still_counts_as_in_flight(hold_worker, until, settings_for,
                                                                           counting_factory, async_serve):
    """The batches in flight count for their mean time plus twice the measured spread. Before, a batch that ran
    past its mean counted as finished, so every request arriving during the overrun was admitted and waited for it:
    here the batch in flight is expected to take 10 s, give or take 5 s, and a request behind it and a queued
    batch would have been admitted under the 25 s budget although the batch may still need 20 s (30 s with the
    queued one). The seconds are large so that a slow, loaded test machine stays inside the 5 s margin."""
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=1, max_wait_ms=1, max_queue_wait_ms=25000, max_queries_per_request=1),
                     factory)  # bursts of at most 1 question: the requests below are not part of one
    encoder.gate.set()
    async with async_serve(app) as ac:
        batcher = app.state.service.batcher
        for seconds in [5.0, 15.0] * 30:
            batcher.observe_batch(1, seconds)
        busy = await hold_worker(ac, encoder)
        queued = asyncio.create_task(ac.post("/search", json={"query": "next batch"}))  # joins the next batch
        await until(lambda: batcher.depth == 1)
        r = await ac.post("/search", json={"query": "behind both"})
        assert r.status_code == 429 and r.json()["error"] == "overloaded"
        assert int(r.headers["Retry-After"]) >= 25  # the ~20 s in flight may still need and the 10 s queued
        encoder.gate.set()
        assert [x.status_code for x in await asyncio.wait_for(asyncio.gather(busy, queued), 30)] == [200, 200]
        assert (await ac.post("/search", json={"query": "now idle"})).status_code == 200


async def test_a_refusal_under_overload_does_not_read_or_validate_the_body(hold_worker, until, settings_for,
                                                                           counting_factory, async_serve):
    """Under overload POST /search is refused before its body is parsed or validated (a rejection costs no JSON
    parsing and no schema validation): a body that is not even JSON gets 429, with the request id and Retry-After,
    and is counted. Before, every refused request was parsed and validated first, so this one got 422."""
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=1, max_wait_ms=1, max_queue_wait_ms=100, max_queries_per_request=1),
                     factory)
    encoder.gate.set()
    bad = {"content": b"{not json", "headers": {"Content-Type": "application/json", "X-Request-ID": "shed-1"}}
    async with async_serve(app) as ac:
        batcher = app.state.service.batcher
        batcher.observe_batch(1, 1.0)  # 1 s a batch: far over the 100 ms budget
        busy = await hold_worker(ac, encoder)
        queued = asyncio.create_task(ac.post("/search", json={"query": "next batch"}))  # a full batch (1 s) ahead
        await until(lambda: batcher.depth == 1)
        r = await ac.post("/search", **bad)
        assert r.status_code == 429 and r.headers["Retry-After"] == "2" and r.headers["X-Request-ID"] == "shed-1"
        assert r.json()["error"] == "overloaded" and r.json()["request_id"] == "shed-1"
        assert (await ac.get("/health")).status_code == 200  # only /search is shed
        assert 'spanseek_errors_total{route="/search",type="overloaded"} 1.0' in (await ac.get("/metrics")).text
        encoder.gate.set()
        assert [x.status_code for x in await asyncio.wait_for(asyncio.gather(busy, queued), 30)] == [200, 200]
        r = await ac.post("/search", **bad)  # not overloaded: parsed and validated as before
        assert r.status_code == 422 and r.json()["error"] == "validation_error"
