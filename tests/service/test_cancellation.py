"""Requests whose client left while they waited: they leave the batcher's queue at once (depth, admission, fair
shares), no batch searches them, and the clients still waiting get their own answers.

    .venv/bin/python -m pytest -q tests/service/test_cancellation.py
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from spanseek.core.params import SearchParams
from spanseek.service.batcher import MicroBatcher
from spanseek.service.fairness import FairQueue
from spanseek.service.metrics import ServiceMetrics
from tests.service.conftest import CountingEncoder, occupy
from tests.service.test_batching import _GatedSearch
from tests.service.test_fairness import _Item

PHRASE = SearchParams("phrase", 3)


class _FailingEncoder(CountingEncoder):
    """Raises for any batch holding the question ``"bad"``."""

    def encode(self, questions: list[str]):
        if "bad" in questions:
            self.calls.append(list(questions))
            raise ValueError("this question breaks the encoder")
        return super().encode(questions)


def _gauge(batcher: MicroBatcher) -> float:
    assert batcher.metrics is not None
    return batcher.metrics.registry.get_sample_value("spanseek_queue_depth")


async def test_a_cancelled_request_leaves_the_queue_at_once_and_is_never_searched(blocked_batcher, until, tiny_searcher):
    """Before, a cancelled request stayed in the queue until the next batch was cut: the depth (and the queue's cost,
    which admission compares with max_queue) kept counting it while the batch in flight ran."""
    batcher, encoder = await blocked_batcher(metrics=ServiceMetrics())
    busy = await occupy(batcher, encoder, until)
    kept = [f"where is castle number {i}" for i in range(3)]
    tasks = {q: asyncio.create_task(batcher.submit([q], PHRASE, client=q)) for q in kept[:2]}
    gone = asyncio.create_task(batcher.submit(["client went away", "with two questions"], PHRASE, client="gone"))
    tasks[kept[2]] = asyncio.create_task(batcher.submit([kept[2]], PHRASE, client=kept[2]))
    await until(lambda: batcher.depth == 5)
    gone.cancel()
    await asyncio.sleep(0.05)  # the batch in flight is still held
    assert not busy.done()
    assert batcher.depth == 3 and _gauge(batcher) == 3.0
    assert batcher._pending.cost == 3.0 and len(batcher._pending) == 3
    encoder.gate.set()
    answers = await asyncio.wait_for(asyncio.gather(busy, *tasks.values()), 30)
    with pytest.raises(asyncio.CancelledError):
        await gone
    encoded = [q for call in encoder.calls for q in call]
    assert "client went away" not in encoded and "with two questions" not in encoded
    assert sorted(encoded) == sorted(["occupies the worker", *kept])
    for question, outcome in zip(tasks, answers[1:], strict=True):  # each client got its own question's hits
        want = tiny_searcher.search([question], PHRASE)[0]
        assert [(h.passage_id, h.start, h.end) for h in outcome.hits[0]] == [(h.passage_id, h.start, h.end) for h in want]
    assert batcher.depth == 0 and _gauge(batcher) == 0.0
    await batcher.stop()


async def test_a_client_is_not_charged_in_its_fair_share_for_a_request_it_withdrew(blocked_batcher, until):
    """A client that queued 4 question-equivalents and left asks again beside a newcomer: both start at the same
    virtual time, so its question runs first (it came first). Before, its finish tag still held the withdrawn work
    and the newcomer passed it."""
    batcher, encoder = await blocked_batcher(metrics=ServiceMetrics())
    busy = await occupy(batcher, encoder, until)
    withdrawn = asyncio.create_task(batcher.submit(["a long one"], PHRASE, cost=4.0, client="a"))
    await until(lambda: batcher.depth == 1)
    withdrawn.cancel()
    await asyncio.sleep(0.01)
    again = asyncio.create_task(batcher.submit(["a asks again"], PHRASE, client="a"))
    await asyncio.sleep(0.01)
    newcomer = asyncio.create_task(batcher.submit(["b asks"], PHRASE, client="b"))
    await asyncio.sleep(0.01)
    encoder.gate.set()
    await asyncio.wait_for(asyncio.gather(busy, again, newcomer), 30)
    assert encoder.calls[1] == ["a asks again", "b asks"]
    await batcher.stop()


def test_a_withdrawn_request_gives_its_client_its_place_back_but_a_taken_one_does_not():
    queue: FairQueue[_Item] = FairQueue()
    first = _Item("a", 2.0, queue)
    queue.push(first)
    left = _Item("a", 4.0, queue)
    queue.push(left)
    assert queue.withdraw(left) and not queue.withdraw(left)  # a second withdrawal finds nothing
    assert queue.cost == 2.0 and queue.tag_for("a", 1.0) == first.tag + 1.0
    queue.pop(first)
    assert queue.tag_for("a", 1.0) == queue.tag_for("b", 1.0)  # nothing queued: every client starts afresh


async def test_when_one_part_of_a_request_fails_its_parts_still_queued_are_not_run(blocked_batcher, until):
    """Four questions of 2 question-equivalents each are queued as four parts; the first part's question breaks the
    encoder, so the request fails (500): the parts not yet taken into a batch are dropped, not searched for a
    client that has its answer. Before, they were encoded and searched after the request had failed."""
    batcher, encoder = await blocked_batcher(_FailingEncoder)
    busy = await occupy(batcher, encoder, until)
    failing = asyncio.create_task(batcher.submit(["bad", "h1", "h2", "h3"], PHRASE, cost=8.0, client="heavy"))
    other = asyncio.create_task(batcher.submit(["another client"], PHRASE, client="other"))
    await until(lambda: batcher.depth == 5)
    encoder.gate.set()
    with pytest.raises(ValueError, match="breaks the encoder"):
        await asyncio.wait_for(failing, 30)
    await asyncio.wait_for(asyncio.gather(busy, other), 30)
    await asyncio.sleep(0.05)
    encoded = {q for call in encoder.calls for q in call}
    assert "another client" in encoded and not encoded & {"h1", "h2", "h3"}
    assert batcher.depth == 0 and len(batcher._pending) == 0
    await batcher.stop()


class _RecordingSearch(_GatedSearch):
    """A searcher whose search step waits on ``gate`` and records the questions of every search call."""

    def __init__(self, inner):
        super().__init__(inner)
        self.texts: list[list[str]] = []

    def search_vectors(self, q_start, *args, **kwargs):
        self.texts.append(list(args[-1]))
        return super().search_vectors(q_start, *args, **kwargs)


async def test_a_request_whose_client_left_while_its_batch_waited_for_the_search_step_is_not_searched(
        until, counting_factory, tiny_searcher):
    """Pipelined: the next batch is encoded while one is searched, then waits for the search step. A client that
    leaves meanwhile is dropped before its batch's search; the others of that batch get their own answers. Before,
    the whole batch was searched."""
    factory, encoder = counting_factory()
    searcher = _RecordingSearch(factory(None))
    pools = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, pools[0], max_batch_size=4, max_wait_ms=0, max_queue=64,
                           search_executor=pools[1], metrics=ServiceMetrics())
    batcher.start()
    try:
        first = asyncio.create_task(batcher.submit(["in the search step"], PHRASE, client="first"))
        await until(searcher.entered.is_set)
        gone = asyncio.create_task(batcher.submit(["client went away"], PHRASE, client="gone"))
        kept = asyncio.create_task(batcher.submit(["where is the castle"], PHRASE, client="kept"))
        await until(lambda: ["client went away", "where is the castle"] in encoder.calls)  # encoded, waiting
        gone.cancel()
        await asyncio.sleep(0.01)
        searcher.gate.set()
        _, outcome = await asyncio.wait_for(asyncio.gather(first, kept), 30)
        assert searcher.texts == [["in the search step"], ["where is the castle"]]
        want = tiny_searcher.search(["where is the castle"], PHRASE)[0]
        assert [(h.passage_id, h.start, h.end) for h in outcome.hits[0]] == [(h.passage_id, h.start, h.end) for h in want]
        assert not batcher._inflight and batcher.depth == 0
    finally:
        searcher.gate.set()
        await batcher.stop()
        for pool in pools:
            pool.shutdown(wait=True)


async def test_without_the_pipeline_a_client_that_left_while_its_batch_was_encoded_is_not_searched(
        until, counting_factory, tiny_searcher):
    """``pipeline off``: both steps of a batch run in one call of the one worker thread. A client that leaves while its
    batch is encoded is left out of the search step, as the pipeline leaves it out; the others get their own answers.
    Before, the whole batch was searched."""
    factory, encoder = counting_factory(block=True)
    searcher = _RecordingSearch(factory(None))
    searcher.gate.set()
    pool = ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, pool, max_batch_size=4, max_wait_ms=20, max_queue=64, metrics=ServiceMetrics())
    batcher.start()
    try:
        gone = asyncio.create_task(batcher.submit(["client went away"], PHRASE, client="gone"))
        kept = asyncio.create_task(batcher.submit(["where is the castle"], PHRASE, client="kept"))
        await until(lambda: ["client went away", "where is the castle"] in encoder.calls)  # being encoded
        gone.cancel()
        await asyncio.sleep(0.01)
        encoder.gate.set()
        outcome = await asyncio.wait_for(kept, 30)
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert searcher.texts == [["where is the castle"]]
        want = tiny_searcher.search(["where is the castle"], PHRASE)[0]
        assert [(h.passage_id, h.start, h.end) for h in outcome.hits[0]] == [(h.passage_id, h.start, h.end) for h in want]
        assert not batcher._inflight and batcher.depth == 0
    finally:
        encoder.gate.set()
        await batcher.stop()
        pool.shutdown(wait=True)


async def test_without_the_pipeline_a_batch_whose_clients_all_left_is_not_searched(until, counting_factory):
    factory, encoder = counting_factory(block=True)
    searcher = _RecordingSearch(factory(None))
    searcher.gate.set()
    pool = ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, pool, max_batch_size=4, max_wait_ms=0, max_queue=64)
    batcher.start()
    try:
        gone = asyncio.create_task(batcher.submit(["client went away"], PHRASE, client="gone"))
        await until(encoder.entered.is_set)
        gone.cancel()
        await asyncio.sleep(0.01)
        encoder.gate.set()
        await until(lambda: not batcher._inflight)
        after = asyncio.create_task(batcher.submit(["where is the castle"], PHRASE, client="next"))
        await asyncio.wait_for(after, 30)  # the batcher goes on
        assert searcher.texts == [["where is the castle"]]
    finally:
        encoder.gate.set()
        await batcher.stop()
        pool.shutdown(wait=True)


async def test_a_write_step_waiting_for_a_queued_search_runs_as_soon_as_that_client_leaves(counting_factory):
    """A search waits for its batch to fill (max_wait_ms) and a write step waits for the searches to go first; when
    the search's client leaves, the step runs at once. Before, it waited its whole write_wait_ms (5 s here)."""
    factory, encoder = counting_factory()
    executor = ThreadPoolExecutor(1)
    batcher = MicroBatcher(factory(None), executor, max_batch_size=4, max_wait_ms=5000, max_queue=64,
                           write_wait_ms=5000)
    batcher.start()
    try:
        search = asyncio.create_task(batcher.submit(["waits for company"], PHRASE))
        await asyncio.sleep(0.05)
        step = asyncio.create_task(batcher.run_write_step(lambda: "written"))
        await asyncio.sleep(0.1)
        assert not step.done()  # the queued search goes first
        search.cancel()
        assert await asyncio.wait_for(step, 1.0) == "written"
        assert batcher.depth == 0 and not any("waits for company" in call for call in encoder.calls)
    finally:
        await batcher.stop()
        executor.shutdown(wait=True)


async def test_a_client_that_left_during_its_batch_is_not_waited_for_as_if_it_would_ask_again(blocked_batcher,
                                                                                               until):
    """A client answered a moment ago may ask again at once, so work ahead of its turn (and a write step) waits up to
    ``fair_wait_ms`` for it. A client that left while its batch ran was not answered: it was waited for all the same
    (a write step here held 5 s, its whole ``fair_wait``, for the client that had left). Now nobody waits for it."""
    batcher, encoder = await blocked_batcher(fair_wait_ms=5000, write_wait_ms=5000)
    gone = await occupy(batcher, encoder, until)
    gone.cancel()  # its client leaves while its batch is encoded
    await asyncio.sleep(0.05)
    encoder.gate.set()
    await until(lambda: not batcher._inflight)
    assert await asyncio.wait_for(batcher.run_write_step(lambda: "written"), 1.0) == "written"
    await batcher.stop()
