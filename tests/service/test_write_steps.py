"""Write steps and search batches sharing the encoder's thread (MicroBatcher.run_write_step, service.live): searches
first, a write step in the gaps, and under continuous search load one step per ``write_wait_ms``, never starved.

    .venv/bin/python -m pytest -q tests/service/test_write_steps.py
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from pydantic import ValidationError

from spanseek.core.params import SearchParams
from spanseek.service.app import create_app
from spanseek.service.batcher import MicroBatcher
from spanseek.service.metrics import ServiceMetrics
from tests.service.conftest import serving
from tests.service.test_batching import _GatedSearch

PARAMS = SearchParams("phrase", 2)


def _gated(counting_factory, open_gate: bool) -> _GatedSearch:
    """A searcher of the counting encoder that holds each search until its gate is set (set at once if
    ``open_gate``)."""
    factory, _ = counting_factory()
    searcher = _GatedSearch(factory(None))
    if open_gate:
        searcher.gate.set()
    return searcher


def _batcher(searcher, write_wait_ms: float, fair_wait_ms: float = 0.0, metrics: ServiceMetrics | None = None):
    pools = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    batcher = MicroBatcher(searcher, pools[0], max_batch_size=4, max_wait_ms=0, max_queue=64, search_executor=pools[1],
                           overlap="full", fair_wait_ms=fair_wait_ms, write_wait_ms=write_wait_ms, metrics=metrics)
    batcher.start()
    return batcher, pools


async def _close(batcher: MicroBatcher, pools) -> None:
    await batcher.stop()
    for pool in pools:
        pool.shutdown(wait=True)


async def test_a_write_step_waits_for_the_searches_in_flight_and_queued_but_only_up_to_write_wait(
        until, counting_factory):
    searcher = _gated(counting_factory, open_gate=False)
    batcher, pools = _batcher(searcher, write_wait_ms=600)
    ran: list[float] = []
    searching = asyncio.create_task(batcher.submit(["in the search step"], PARAMS))
    await until(searcher.entered.is_set)
    queued = asyncio.create_task(batcher.submit(["queued behind it"], PARAMS))
    t0 = time.monotonic()
    step = asyncio.create_task(batcher.run_write_step(lambda: ran.append(time.monotonic()) or "encoded"))
    await asyncio.sleep(0.3)
    assert not ran  # a search is being run and another waits: the write step gives way
    assert await asyncio.wait_for(step, 10) == "encoded"  # ... for write_wait at most: the search is still held
    assert 0.6 <= ran[0] - t0 < 3.0 and searcher.searched == [1] and not searching.done()
    searcher.gate.set()
    assert [len(o.hits) for o in await asyncio.wait_for(asyncio.gather(searching, queued), 30)] == [1, 1]
    await _close(batcher, pools)


def _histogram(metrics: ServiceMetrics, name: str) -> tuple[float, float]:
    """(count, sum) of an unlabelled histogram."""
    registry = metrics.registry
    return registry.get_sample_value(f"{name}_count") or 0.0, registry.get_sample_value(f"{name}_sum") or 0.0


async def test_a_write_steps_wait_beside_searches_and_its_run_are_measured(until, counting_factory):
    searcher = _gated(counting_factory, open_gate=False)
    metrics = ServiceMetrics()
    batcher, pools = _batcher(searcher, write_wait_ms=400, metrics=metrics)
    searching = asyncio.create_task(batcher.submit(["in the search step"], PARAMS))
    await until(searcher.entered.is_set)
    assert await asyncio.wait_for(batcher.run_write_step(lambda: time.sleep(0.2) or "encoded"), 10) == "encoded"
    searcher.gate.set()
    await asyncio.wait_for(searching, 30)
    wait_count, wait_sum = _histogram(metrics, "spanseek_write_step_wait_seconds")
    run_count, run_sum = _histogram(metrics, "spanseek_write_step_duration_seconds")
    assert wait_count == 1 and 0.4 <= wait_sum < 3.0  # it waited write_wait for the held search
    assert run_count == 1 and 0.2 <= run_sum < 3.0
    with pytest.raises(ZeroDivisionError):  # a step that fails is measured too
        await asyncio.wait_for(batcher.run_write_step(lambda: 1 / 0), 10)
    assert _histogram(metrics, "spanseek_write_step_duration_seconds")[0] == 2
    assert _histogram(metrics, "spanseek_write_step_wait_seconds")[0] == 2
    await _close(batcher, pools)


async def test_a_write_step_runs_at_once_when_no_search_needs_the_encoder(counting_factory):
    batcher, pools = _batcher(_gated(counting_factory, open_gate=True), write_wait_ms=5000, fair_wait_ms=50)
    t0 = time.monotonic()
    assert await asyncio.wait_for(batcher.run_write_step(lambda x: x + 1, 41), 10) == 42
    assert time.monotonic() - t0 < 2.0  # idle: no wait for write_wait
    await batcher.submit(["one search"], PARAMS)
    t0 = time.monotonic()  # its client was just answered: the step waits fair_wait for it to ask again, no more
    await asyncio.wait_for(batcher.run_write_step(lambda: None), 10)
    assert 0.04 <= time.monotonic() - t0 < 2.0
    await _close(batcher, pools)


async def test_writes_complete_under_continuous_search_load_one_step_per_write_wait(counting_factory):
    factory, encoder = counting_factory()
    searcher = _GatedSearch(factory(None))
    searcher.gate.set()
    batcher, pools = _batcher(searcher, write_wait_ms=150, fair_wait_ms=50)
    stop = False
    answered = 0

    async def client(i: int) -> None:  # closed loop: asks again as soon as it is answered, so there is no gap
        nonlocal answered
        while not stop:
            await batcher.submit([f"question {i} {answered}"], PARAMS, client=f"client {i}")
            answered += 1

    clients = [asyncio.create_task(client(i)) for i in range(3)]
    await asyncio.sleep(0.2)
    steps: list[tuple[float, int]] = []  # (when, encoder calls so far)

    async def write(n: int) -> None:
        for _ in range(n):
            await batcher.run_write_step(lambda: steps.append((time.monotonic(), len(encoder.calls))))

    t0 = time.monotonic()
    await asyncio.wait_for(asyncio.gather(write(4), write(4)), 20)  # two writes, taking turns: both complete
    elapsed = time.monotonic() - t0
    stop = True
    await asyncio.wait_for(asyncio.gather(*clients), 30)
    assert len(steps) == 8 and answered > 8
    # each step waited for write_wait under the load, and search batches ran between the steps
    assert elapsed >= 8 * 0.15 * 0.9
    assert all(b[1] > a[1] for a, b in zip(steps, steps[1:], strict=False))
    await _close(batcher, pools)


def test_a_written_document_is_encoded_through_the_batchers_write_steps(settings_for, tmp_path, monkeypatch):
    calls = []
    run = MicroBatcher.run_write_step

    async def counted(self, fn, *args):
        calls.append(fn)
        return await run(self, fn, *args)

    monkeypatch.setattr(MicroBatcher, "run_write_step", counted)
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0, write_wait_ms=50,
                            write_nice=0)
    with serving(create_app(settings)) as client:
        doc = {"id": "w1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge of the island."]}
        assert client.put("/documents", headers={"X-API-Key": "key"}, json=doc).status_code == 200
        assert len(calls) >= 2  # tokenising, then a forward pass at least
        metrics = client.app.state.service.metrics.registry  # every step measured, through the service's batcher
        assert metrics.get_sample_value("spanseek_write_step_wait_seconds_count") == len(calls)
        assert metrics.get_sample_value("spanseek_write_step_duration_seconds_count") == len(calls)
        r = client.post("/search?unit=doc", headers={"X-API-Key": "key"},
                        json={"query": "who built the harbour bridge?", "filter": {"doc_ids": ["w1"]}})
        assert [h["doc_id"] for h in r.json()["results"][0]["hits"]] == ["w1"]


def test_write_wait_ms_out_of_range_is_refused_naming_it(settings_for):
    with pytest.raises(ValidationError, match="write_wait_ms"):
        settings_for(write_wait_ms=-1)


def _slow_tokenising(monkeypatch, seconds_per_char: float) -> list[tuple[float, float, int]]:
    """Tokenising made to take ``seconds_per_char`` a character (the real cost of a megabyte of punctuation, scaled
    down); returns the calls' (start, end, characters), appended as they end."""
    from spanseek.core import text as text_module
    from spanseek.indexer import live as live_module

    calls: list[tuple[float, float, int]] = []
    tokenize = text_module.tokenize_passages

    def slow(tokenizer, texts):
        t0 = time.monotonic()
        time.sleep(seconds_per_char * sum(map(len, texts)))
        out = tokenize(tokenizer, texts)
        calls.append((t0, time.monotonic(), sum(map(len, texts))))
        return out

    for module in (text_module, live_module):
        monkeypatch.setattr(module, "tokenize_passages", slow)
    monkeypatch.setattr(live_module, "TOKENIZE_STEP_CHARS", 200)
    return calls


async def test_a_search_during_a_long_paragraphs_tokenising_is_answered_between_its_pieces(settings_for, tmp_path,
                                                                                           monkeypatch):
    """One paragraph was one tokenising step, however long: a megabyte of punctuation held the encoder's thread 5-11 s
    and every search waited that long. Now it is tokenised a piece of at most TOKENIZE_STEP_CHARS a step, which
    takes turns with search batches in the encoder's thread (write_nice 0)."""
    from tests.service.conftest import async_serving

    calls = _slow_tokenising(monkeypatch, 0.0005)  # 4,000 characters: 2 s whole, 0.1 s a piece
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0, write_nice=0)
    headers = {"X-API-Key": "key"}
    async with async_serving(create_app(settings)) as client:
        doc = {"id": "long", "title": "Long", "paragraphs": ["! " * 2000]}
        write = asyncio.create_task(client.put("/documents", headers=headers, json=doc))
        while not calls:  # the first piece tokenised: the write holds the encoder's thread from now on
            await asyncio.sleep(0.01)
        r = await client.post("/search?unit=doc", headers=headers, json={"query": "who built the harbour?"})
        answered = time.monotonic()
        assert r.status_code == 200, r.text
        assert (await write).status_code == 200
    assert answered < calls[-1][1] - 0.5  # long before the paragraph's last piece was tokenised
    assert len(calls) >= 20 and max(n for _, _, n in calls) <= 200


def test_a_write_over_max_write_tokens_is_refused_once_its_count_passes_the_bound(settings_for, tmp_path, monkeypatch):
    """A write's tokens were all counted before the bound was looked at: a megabyte of punctuation tokenised whole
    (5-11 s of the encoder's thread) to be refused. Now the count stops at the first step past the bound."""
    calls = _slow_tokenising(monkeypatch, 0.0)
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0,
                            max_write_tokens=300)
    with serving(create_app(settings)) as client:
        calls.clear()
        doc = {"id": "big", "title": "Big", "paragraphs": ["Short first paragraph.", "! " * 5000]}  # 5,004 tokens
        r = client.put("/documents", headers={"X-API-Key": "key"}, json=doc)
        assert r.status_code == 413, r.text
        assert r.json()["message"].startswith("document 0 ('big'): at least 3"), r.text
        assert "tokens, more than this server encodes of one write (max_write_tokens 300)" in r.json()["message"]
    assert 200 < sum(n for _, _, n in calls) < 1000  # of 10,022 characters: the first paragraph and 3 pieces


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="thread niceness is a Linux scheduler setting")
async def test_a_search_is_answered_while_a_write_step_runs_in_its_lower_priority_thread(settings_for, tmp_path,
                                                                                         monkeypatch):
    """A write's steps took turns with search batches in the encoder's thread: a searching client waited behind
    each step (its p50 went 1.7-2.9x during a sync). With write_nice they run in a thread of their own, that much
    nicer, beside the searches: a search is answered while a step is still running, and the write then finishes."""
    from spanseek.indexer.live import DocumentEncoder
    from tests.service.conftest import async_serving

    running, release, seen = threading.Event(), threading.Event(), []
    steps = DocumentEncoder.chunk_steps

    def held(self, toks):  # the write's first forward pass holds its thread until the search is answered
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        running.set()
        assert release.wait(30)
        return (yield from steps(self, toks))

    monkeypatch.setattr(DocumentEncoder, "chunk_steps", held)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0, write_nice=3)
    headers = {"X-API-Key": "key"}
    async with async_serving(create_app(settings)) as client:
        doc = {"id": "w1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge of the island."]}
        write = asyncio.create_task(client.put("/documents", headers=headers, json=doc))
        while not running.is_set():
            await asyncio.sleep(0.01)
        try:
            r = await asyncio.wait_for(client.post("/search?unit=doc", headers=headers,
                                                   json={"query": "who built the harbour bridge?"}), 10)
            assert r.status_code == 200, r.text
            assert not write.done()  # answered while the write's step still ran
        finally:
            release.set()
        assert (await write).status_code == 200
        r = await client.post("/search?unit=doc", headers=headers,
                              json={"query": "who built the harbour bridge?", "filter": {"doc_ids": ["w1"]}})
        assert [h["doc_id"] for h in r.json()["results"][0]["hits"]] == ["w1"]
    assert seen and set(seen) == {min(19, mine + 3)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_write_nice_out_of_range_is_refused_naming_it(settings_for):
    with pytest.raises(ValidationError, match="write_nice"):
        settings_for(write_nice=20)


def test_the_first_long_paragraph_written_does_not_build_the_word_cuts(settings_for, tmp_path, monkeypatch):
    """The pattern that cuts a long paragraph at word boundaries (core.text: a pass over Unicode, 0.3-0.4 s on 2 CPU
    cores holding the GIL) was built by the first long paragraph written, which paid for it in its write and held
    every search meanwhile. Now a service with writes builds it while it loads."""
    from spanseek.core import text as text_module
    from spanseek.indexer import live as live_module

    text_module._word_cuts.cache_clear()
    monkeypatch.setattr(live_module, "TOKENIZE_STEP_CHARS", 200)
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serving(create_app(settings)) as client:
        assert text_module._word_cuts.cache_info().misses == 1  # built while loading
        doc = {"id": "long", "title": "Long", "paragraphs": ["the harbour bridge of the island " * 20]}
        assert client.put("/documents", headers={"X-API-Key": "key"}, json=doc).status_code == 200
    cuts = text_module._word_cuts.cache_info()
    assert (cuts.misses, cuts.hits > 0) == (1, True)  # the write cut its paragraph with the pattern built at start
