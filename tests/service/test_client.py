"""spanseek.client against a running service (uvicorn on loopback over the tiny index): results equal the
in-process searcher's, errors carry the server's message, and a full queue's 429 is retried after Retry-After.

    .venv/bin/python -m pytest -q tests/service/test_client.py
"""

from __future__ import annotations

import ast
import json
import math
import re
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

import spanseek.client as client_module
from spanseek.client import (
    APIError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    InvalidResponseError,
    OverloadedError,
    SearchResponse,
    ServerError,
    SpanseekError,
)
from spanseek.core.params import SearchParams
from spanseek.service.app import create_app
from spanseek.service.settings import Settings

KEY = "test-key"
QUESTION = "Who built the castle in 1500?"


@pytest.fixture(scope="module")
def url(live, tiny_index, tiny_model_dir, tiny_searcher):
    """A live service over the tiny index that requires an API key."""
    settings = Settings(index=tiny_index, model=str(tiny_model_dir), device="cpu", precision="fp32", warmup=False,
                        api_key=KEY, reload_min_interval_s=0)
    with live(create_app(settings, lambda s: tiny_searcher)) as base:
        yield base


def same_hits(got, want):
    assert [(h.passage_id, h.start, h.end, h.doc_id, h.title, h.text) for h in got] == \
        [(h.passage_id, h.start, h.end, h.doc_id, h.title, h.text) for h in want]
    assert np.allclose([h.score for h in got], [h.score for h in want], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_search_matches_the_searcher(url, tiny_searcher, unit):
    with Client(url, api_key=KEY) as client:
        response = client.search(QUESTION, unit=unit, top_k=3)
    assert isinstance(response, SearchResponse) and response.unit == unit and len(response.hits) == 3
    same_hits(response.hits, tiny_searcher.search([QUESTION], SearchParams(unit=unit, top_k=3))[0])
    assert response.request_id and response.timings_ms.batch_size >= 1 and response.results[0].query == QUESTION
    for hit in response.hits:  # every field the server sends has its attribute: nothing lands in extra
        assert hit.extra == {} and hit.passage_chars >= len(hit.passage) > 0 and hit.passage_offset >= 0


def test_batch_search_and_options(url, tiny_searcher):
    questions = ["When was the bridge built?", "Who painted the church?", "Which river?"]
    with Client(url, api_key=KEY) as client:
        response = client.search_batch(questions, unit="passage", top_k=2)
        merged = client.search(QUESTION, top_k=4, merge_answers=True)
        info = client.info()
    assert [r.query for r in response.results] == questions
    for result, want in zip(response.results, tiny_searcher.search(questions, SearchParams(unit="passage", top_k=2)), strict=True):
        same_hits(result.hits, want)
    same_hits(merged.hits, tiny_searcher.search([QUESTION], SearchParams(top_k=4, merge_answers=True))[0])
    assert info["index"] and info["service"]["units"] == ["phrase", "passage", "doc"]
    assert not response.results[0].truncated and response.warnings == [] and response.extra == {}
    with Client(url, api_key=KEY) as client:  # what the server did not do as asked: fields, not extra
        cut = client.search("castle " * 1000, nprobe=4)
    assert cut.results[0].truncated and len(cut.results[0].query) == 2000 and cut.extra == {}
    assert cut.warnings and cut.warnings[0].startswith("nprobe (4) is not used")


async def test_async_client(url, tiny_searcher):
    async with AsyncClient(url, api_key=KEY) as client:
        assert await client.ready()
        one = await client.search(QUESTION, unit="doc", top_k=2)
        many = await client.search_batch([QUESTION, "a king"], top_k=1)
        with pytest.raises(BadRequestError, match="top_k must be between 1 and"):
            await client.search(QUESTION, top_k=0)
    same_hits(one.hits, tiny_searcher.search([QUESTION], SearchParams(unit="doc", top_k=2))[0])
    assert len(many.results) == 2 and all(len(r.hits) == 1 for r in many.results)


async def test_next_page_continues_the_ranking(url):
    """``next_page`` of a result's ``next`` gives the rest of its ranking, sync and async; the last page's ``next``
    is None, and a cursor the server does not hold is an APIError 410 naming it."""
    with Client(url, api_key=KEY) as client:
        whole = client.search(QUESTION, unit="passage", top_k=5).hits
        first = client.search(QUESTION, unit="passage", top_k=2, rank_window=5)
        second = client.next_page(first.results[0].next)
        last = client.next_page(second.results[0].next, top_k=10)
        with pytest.raises(APIError) as e:
            client.next_page("A" * 22 + ".0")
        with pytest.raises(TypeError, match="the last page has none"):
            client.next_page(last.results[0].next)
    assert [h.passage_id for h in first.hits + second.hits + last.hits] == [h.passage_id for h in whole]
    assert second.unit == "passage" and last.results[0].next is None and len(second.hits) == 2
    assert e.value.status == 410 and e.value.error == "cursor_expired" and "search again" in str(e.value)
    async with AsyncClient(url, api_key=KEY) as client:
        first = await client.search(QUESTION, unit="passage", top_k=3, rank_window=5)
        rest = await client.next_page(first.results[0].next)
    assert [h.passage_id for h in first.hits + rest.hits] == [h.passage_id for h in whole]


def test_errors_carry_the_servers_message(url):
    with Client(url, api_key="wrong") as client, pytest.raises(AuthenticationError) as e:
        client.search(QUESTION)
    assert e.value.status == 401 and e.value.error == "unauthorized" and e.value.request_id
    with Client(url, api_key=KEY) as client:
        with pytest.raises(BadRequestError) as e:
            client.search(QUESTION, top_k=10_000)
        assert e.value.status == 400 and "top_k must be between 1 and" in e.value.message
        with pytest.raises(BadRequestError, match="merge_answers applies to unit=phrase") as e:
            client.search(QUESTION, unit="passage", merge_answers=True)
        with pytest.raises(BadRequestError) as e:  # unknown options reach the server, which names them
            client.search(QUESTION, no_such_option=1)
        assert e.value.status == 422 and e.value.details and "no_such_option" in str(e.value.details)
    with Client(url + "/nowhere", api_key=KEY) as client, pytest.raises(BadRequestError) as e:
        client.search(QUESTION)
    assert e.value.status == 404


def test_overload_429_is_retried_after_retry_after(settings_for, counting_factory, live, monkeypatch):
    """A service whose queue holds one question: one request blocks the encoder, one waits, the next gets 429."""
    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(max_batch_size=1, max_wait_ms=1, max_queue=1, max_queries_per_request=1), factory)
    encoder.gate.set()
    with live(app) as base:
        encoder.gate.clear()
        encoder.entered.clear()
        results: dict[str, object] = {}

        def search(name: str, **kwargs) -> None:
            with Client(base, **kwargs) as c:
                try:
                    results[name] = c.search(name)
                except Exception as e:  # kept for the assertions below
                    results[name] = e

        threads = [threading.Thread(target=search, args=("blocks the encoder",))]
        threads[0].start()
        assert encoder.entered.wait(30)
        threads.append(threading.Thread(target=search, args=("waits in the queue",)))
        threads[1].start()
        deadline = time.monotonic() + 30
        while app.state.service.batcher.depth < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.01)

        with Client(base, max_retries=0) as c, pytest.raises(OverloadedError) as e:
            c.search("refused")
        assert e.value.status == 429 and e.value.error == "overloaded" and e.value.retry_after >= 1
        assert "queue" in e.value.message

        waits: list[float] = []
        real_sleep = time.sleep

        def sleep(seconds: float) -> None:  # the client's back-off: record it, unblock the server, wait a little
            waits.append(seconds)
            encoder.gate.set()
            real_sleep(0.05)

        monkeypatch.setattr(client_module, "_sleep", sleep)
        search("retried", max_retries=20, max_retry_wait=0.5)
        for t in threads:
            t.join(30)
    assert isinstance(results["retried"], SearchResponse) and len(results["retried"].hits) == 10
    assert waits and all(w == 0.5 for w in waits)  # Retry-After (>= 1 s) capped by max_retry_wait
    assert all(isinstance(results[n], SearchResponse) for n in ("blocks the encoder", "waits in the queue"))


def fake_server(answers: list[httpx.Response | Exception]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport that gives ``answers`` in turn (an exception is raised), then the last one for ever."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[min(len(seen), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), seen


OK = {"unit": "phrase", "results": [{"query": "q", "hits": [{"text": "1340", "score": 1.5, "doc_id": "a.md",
                                                             "meta": {"url": "u"}, "confidence": 0.9}]}],
      "timings_ms": {"queue": 1, "encode": 2, "search": 3, "aggregate": 4, "total": 10, "batch_size": 1},
      "request_id": "r1", "no_answer": False}
OVERLOADED = {"error": "overloaded", "message": "queue full", "request_id": "r0"}


NOT_READY = {"error": "not_ready", "message": "the model and index are still loading", "request_id": "r2"}
REFUSED = httpx.ConnectError("connection refused")


def test_429_503_and_refused_connections_are_retried_with_jittered_backoff(waits):
    transport, seen = fake_server([REFUSED, httpx.Response(503, json=NOT_READY, headers={"Retry-After": "5"}),
                                   httpx.Response(429, json=OVERLOADED), httpx.Response(200, json=OK)])
    with Client("http://fake", transport=transport, max_retries=3, backoff=0.5, max_retry_wait=30) as client:
        response = client.search("q", top_k=1, mode="hybrid", filter={"doc_ids": ["a.md"]})
    assert len(seen) == 4 and response.hits[0].text == "1340"
    assert 0.5 <= waits[0] <= 1.0  # refused: backoff x 2^0 plus up to one backoff of jitter
    assert 5.0 <= waits[1] <= 5.5  # 503: its Retry-After plus jitter
    assert 2.0 <= waits[2] <= 2.5  # 429 without Retry-After: backoff x 2^2 plus jitter
    body = json.loads(seen[0].content)
    assert body == {"query": "q", "top_k": 1, "mode": "hybrid", "filter": {"doc_ids": ["a.md"]}}
    assert seen[0].url.params["unit"] == "phrase"
    hit = response.hits[0]
    assert (hit.text, hit.doc_id, hit.meta, hit.confidence, hit.extra) == ("1340", "a.md", {"url": "u"}, 0.9, {})
    assert response.extra == {"no_answer": False} and response.timings_ms.total == 10


@pytest.mark.parametrize(("answer", "error"), [
    (httpx.Response(429, json=OVERLOADED, headers={"Retry-After": "1"}), OverloadedError),
    (httpx.Response(503, json=NOT_READY, headers={"Retry-After": "5"}), ServerError),
    (REFUSED, httpx.ConnectError),
])
def test_retries_stop_at_max_retries(waits, answer, error):
    transport, seen = fake_server([answer])
    with Client("http://fake", transport=transport, max_retries=2) as client, pytest.raises(error) as e:
        client.search("q")
    assert len(seen) == 3 and len(waits) == 2  # the first try and two retries
    if isinstance(e.value, APIError):
        assert e.value.status == answer.status_code and e.value.request_id in ("r0", "r2")


def test_retries_stop_within_max_retry_time():
    """Real sleeps: no try starts later than max_retry_time after the first, however many retries are allowed."""
    transport, seen = fake_server([httpx.Response(503, json=NOT_READY)])
    started = time.monotonic()
    with Client("http://fake", transport=transport, max_retries=100, max_retry_time=0.4, max_retry_wait=0.1,
                backoff=0.05) as client, pytest.raises(ServerError):
        client.search("q")
    assert 2 <= len(seen) <= 9 and time.monotonic() - started < 1.5
    transport, seen = fake_server([httpx.Response(429, json=OVERLOADED, headers={"Retry-After": "2"})])
    with Client("http://fake", transport=transport, max_retry_time=1) as client, pytest.raises(OverloadedError):
        client.search("q")  # the server's advice would end past the time budget: no retry at all
    assert len(seen) == 1


def test_backoff_is_jittered_exponential_and_capped(waits):
    transport, _ = fake_server([httpx.Response(503, json=NOT_READY)])
    with Client("http://fake", transport=transport, max_retries=6, backoff=0.5, max_retry_wait=10) as client:
        for _ in range(20):
            with pytest.raises(ServerError):
                client.search("q")
    tries = [waits[i::6] for i in range(6)]  # 20 samples of each retry's wait
    for n, samples in enumerate(tries):
        low = min(10.0, 0.5 * 2 ** n)
        assert all(low <= w <= min(10.0, low + 0.5) for w in samples), (n, samples)
    assert all(len(set(samples)) > 1 for samples in tries[:5])  # jitter: not one wait for every client
    assert set(tries[5]) == {10.0}  # 0.5 x 2^5 = 16 s, capped at max_retry_wait


@pytest.mark.parametrize(("header", "low", "high"), [
    ("-5", 0.5, 1.0),  # negative: ignored, the backoff instead of an immediate retry
    ("NaN", 0.5, 1.0),
    ("nan", 0.5, 1.0),
    ("soon", 0.5, 1.0),  # neither seconds nor a date
    ("0", 0.0, 0.5),  # now: jitter only
    ("2", 2.0, 2.5),
    ("inf", 7.0, 7.0),  # absurd values: capped at max_retry_wait
    ("1e400", 7.0, 7.0),
    ("99999999999999999999", 7.0, 7.0),
    ("Wed, 21 Oct 2099 07:28:00 GMT", 7.0, 7.0),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0, 0.5),  # a date in the past: now
])
def test_retry_after_is_clamped(waits, header, low, high):
    transport, seen = fake_server([httpx.Response(429, json=OVERLOADED, headers={"Retry-After": header}),
                                   httpx.Response(200, json=OK)])
    with Client("http://fake", transport=transport, backoff=0.5, max_retry_wait=7) as client:
        assert client.search("q").hits
    assert len(seen) == 2 and len(waits) == 1 and low <= waits[0] <= high


@pytest.mark.parametrize(("header", "advice"), [("-5", None), ("NaN", None), ("3", 3.0), ("1e400", math.inf)])
def test_the_servers_advice_is_kept_on_the_error(header, advice):
    transport, _ = fake_server([httpx.Response(429, json=OVERLOADED, headers={"Retry-After": header})])
    with Client("http://fake", transport=transport, max_retries=0) as client, pytest.raises(OverloadedError) as e:
        client.search("q")
    assert e.value.retry_after == advice


def test_other_failures_are_not_retried(waits):
    for answer in (httpx.Response(500, json={"error": "internal_error", "message": "boom", "request_id": "x"}),
                   httpx.Response(400, json={"error": "bad_request", "message": "top_k", "request_id": "y"}),
                   httpx.ReadTimeout("slow")):  # the server may be working on it: not sent again
        transport, seen = fake_server([answer])
        with Client("http://fake", transport=transport) as client, pytest.raises((APIError, httpx.ReadTimeout)):
            client.search("q")
        assert len(seen) == 1
    assert waits == []


DROPPED = httpx.RemoteProtocolError("Server disconnected without sending a response.")


@pytest.mark.parametrize("dropped", [DROPPED, httpx.ReadError("[Errno 104] Connection reset by peer"),
                                     httpx.WriteError("[Errno 32] Broken pipe")])
def test_a_read_on_a_connection_closed_under_it_is_sent_again_once_at_once(waits, dropped):
    """The server closes an idle kept-alive connection after keep_alive_s; a request sent on it at that moment gets
    no answer. A search (or a GET, or a write by id) is sent again at once, once; an add is not (the server may have
    done it)."""
    transport, seen = fake_server([dropped, httpx.Response(200, json=OK)])
    with Client("http://fake", transport=transport) as client:
        assert client.search("q").hits[0].text == "1340"
    assert len(seen) == 2 and waits == [0.0]
    transport, seen = fake_server([dropped, dropped, httpx.Response(200, json=OK)])
    with Client("http://fake", transport=transport) as client, pytest.raises(type(dropped)):
        client.info()  # once: a second failure is no race with an idle timeout
    assert len(seen) == 2
    transport, seen = fake_server([dropped, httpx.Response(200, json={"documents": 1})])
    with Client("http://fake", transport=transport) as client, pytest.raises(type(dropped)):
        client.add({"id": "a", "paragraphs": ["p"]})
    assert len(seen) == 1
    transport, seen = fake_server([dropped, httpx.Response(200, json={"documents": 1})])
    with Client("http://fake", transport=transport) as client:
        assert client.upsert({"id": "a", "paragraphs": ["p"]}) == {"documents": 1}
    assert len(seen) == 2


async def test_the_async_client_sends_a_dropped_read_again_too(waits):
    transport, seen = fake_server([DROPPED, httpx.Response(200, json=OK)])
    async with AsyncClient("http://fake", transport=transport) as client:
        assert (await client.search("q")).hits[0].text == "1340"
    assert len(seen) == 2 and waits == [0.0]


def test_a_search_survives_the_server_closing_its_kept_alive_connection_as_it_is_sent():
    """Over real sockets: a server that answers a connection's first request and closes it when the next one arrives,
    as a server whose keep-alive timeout runs out as the request comes in does (the client's pool took the connection
    as idle and open). The search was lost ("Server disconnected without sending a response"); it is sent again on a
    new connection."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    body = json.dumps(OK).encode()
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    connections = []

    def read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += conn.recv(65536)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            connections.append(conn)
            read_request(conn)
            conn.sendall(answer)
            read_request(conn)  # the next request on this connection: closed unanswered
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with Client(f"http://127.0.0.1:{listener.getsockname()[1]}") as client:
            assert client.search("q").hits and client.search("q").hits  # the second: on the first's connection
        assert len(connections) == 2  # it was sent again on a new one
    finally:
        listener.close()


def test_server_errors_and_non_json_bodies():
    transport, _ = fake_server([httpx.Response(500, json={"error": "internal", "message": "boom", "request_id": "x"})])
    with Client("http://fake", transport=transport) as client, pytest.raises(ServerError, match="boom") as e:
        client.search("q")
    assert (e.value.status, e.value.request_id) == (500, "x")
    transport, _ = fake_server([httpx.Response(502, text="<html>bad gateway</html>")])
    with Client("http://fake", transport=transport) as client, pytest.raises(ServerError, match="bad gateway"):
        client.search("q")


@pytest.mark.parametrize(("answer", "problem"), [
    (httpx.Response(200, text="<html>a proxy's login page</html>", headers={"content-type": "text/html",
                                                                             "x-request-id": "p1"}), "not JSON"),
    (httpx.Response(200, content=b'{"unit": "phrase", "results": [', headers={"content-type": "application/json"}),
     "not JSON"),
    (httpx.Response(200, json=[1, 2]), "expected a JSON object, got list"),
    (httpx.Response(200, json={"unit": "phrase", "results": 5, "timings_ms": {}}), "not a search response"),
])
async def test_a_2xx_that_is_not_the_json_expected_is_a_clear_error(answer, problem):
    transport, _ = fake_server([answer])
    with Client("http://fake", transport=transport) as client, pytest.raises(InvalidResponseError) as e:
        client.search("q")
    assert isinstance(e.value, SpanseekError) and not isinstance(e.value, ValueError)  # not a JSONDecodeError
    assert problem in str(e.value) and e.value.status == 200 and "POST /search" in str(e.value)
    if e.value.request_id:
        assert e.value.request_id == "p1" and "login page" in e.value.body
    fresh = httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)
    async with AsyncClient("http://fake", transport=fake_server([fresh])[0]) as aclient:
        with pytest.raises(InvalidResponseError, match=problem):
            await aclient.search("q")


async def test_questions_of_the_wrong_shape_are_refused_before_sending():
    """search([...]) went as a batch, search_batch("...") as one question, search(None) failed inside the client."""
    transport, seen = fake_server([])
    with Client("http://fake", transport=transport) as client:
        for call, arg, words in ((client.search, ["a", "b"], r"search takes one question, a string, got list "
                                  r"\(search_batch for several\)"), (client.search, None, "got NoneType"),
                                 (client.search_batch, "one", r"takes a list of questions, got str \(search for one\)"),
                                 (client.search_batch, ["a", 3], r"queries\[1\] must be a string, got int")):
            with pytest.raises(TypeError, match=words):
                call(arg)
    async with AsyncClient("http://fake", transport=transport) as aclient:
        with pytest.raises(TypeError, match="search_batch for several"):
            await aclient.search(["a", "b"])
    assert seen == []


@pytest.mark.parametrize(("answer", "ready"), [
    (httpx.Response(200, json={"status": "ready"}), True), (httpx.Response(200, json=None), False),
    (httpx.Response(204), False), (httpx.Response(200, text="<html>ok</html>"), False),
    (httpx.Response(503, json={"status": "loading"}), False)])
async def test_ready_is_the_services_answer_not_any_2xx(answer, ready):
    with Client("http://fake", transport=fake_server([answer])[0]) as client:
        assert client.ready() is ready
    fresh = httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)
    async with AsyncClient("http://fake", transport=fake_server([fresh])[0]) as aclient:
        assert await aclient.ready() is ready


async def test_async_client_retries_the_same_way(waits):
    transport, seen = fake_server([httpx.Response(429, json=OVERLOADED, headers={"Retry-After": "3"}), REFUSED,
                                   httpx.Response(200, json=OK)])
    async with AsyncClient("http://fake", transport=transport, max_retries=2, max_retry_wait=10) as client:
        response = await client.search("q")
    assert len(seen) == 3 and response.hits[0].text == "1340"
    assert 3.0 <= waits[0] <= 3.5 and 1.0 <= waits[1] <= 1.5  # as told, plus jitter; then backoff x 2^1
    transport, seen = fake_server([httpx.Response(503, json=NOT_READY)])
    async with AsyncClient("http://fake", transport=transport, max_retries=1) as client:
        with pytest.raises(ServerError) as e:
            await client.info()
    assert len(seen) == 2 and e.value.error == "not_ready"


def test_timeouts_and_retry_settings_are_checked():
    with Client("http://fake", timeout=12, connect_timeout=2) as client:
        timeout = client._http.timeout
    assert (timeout.connect, timeout.read, timeout.write) == (2, 12, 12)
    with Client("http://fake", timeout=httpx.Timeout(3, connect=1)) as client:
        assert (client._http.timeout.connect, client._http.timeout.read) == (1, 3)
    for bad in ({"max_retries": -1}, {"backoff": math.nan}, {"max_retry_time": math.inf}, {"max_retry_wait": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Client("http://fake", **bad)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
@pytest.mark.parametrize(("url", "meant"), [("localhost:8000", "http://localhost:8000"),
                                            ("127.0.0.1:8000", "http://127.0.0.1:8000"),
                                            ("ftp://host", "http:// or https://")])
def test_a_url_without_its_scheme_is_refused_naming_the_one_meant(cls, url, meant):
    """httpx's refusal came at the first request, as "an unsupported protocol 'localhost://'"."""
    with pytest.raises(ValueError, match=re.escape(f"base URL with its scheme ({meant}), got {url!r}")):
        cls(url)
    with Client("HTTPS://host:8000/") as client:  # the scheme in any case
        assert client.url == "HTTPS://host:8000"


@pytest.mark.parametrize("cls", [Client, AsyncClient])
@pytest.mark.parametrize(("url", "why"), [("http://[::1", "is not a URL (Invalid port: ':1')"),
                                          ("http://host:x/", "is not a URL (Invalid port: 'x')"),
                                          ("http://", "names no host (http://HOST:PORT)"),
                                          ("http://127.0.0.1:99999", "names port 99999; a port is 1 to 65535")])
def test_a_url_that_is_no_address_is_refused_naming_it(cls, url, why):
    """httpx's InvalidURL escaped the client as it was made (a traceback from `spanseek sync --url http://[::1`), and a
    URL with no host or a port out of range failed only at the first request, as a connection error."""
    with pytest.raises(ValueError, match=re.escape(f"the service's base URL {url!r} {why}")):
        cls(url)


def test_search_options_are_the_http_requests_fields():
    """SearchOptions types every option of the HTTP request (itself generated from core.params.SearchParams)."""
    from spanseek.client import SearchOptions
    from spanseek.service.schemas import SearchRequest

    cursor = {"cursor"}  # (next_page's)
    assert set(SearchOptions.__annotations__) | {"top_k"} == set(SearchRequest.model_fields) - {"query", "queries"} - cursor


def test_the_python_guide_lists_every_search_option():
    """docs/python.md's list of the client's options is the SearchOptions it documents (rank_window was left out)."""
    import re

    from spanseek.client import SearchOptions

    text = (Path(__file__).parents[2] / "docs" / "python.md").read_text()
    listed = re.search(r"listed with its type in `SearchOptions`\s*\(([^):]*):", text)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == list(SearchOptions.__annotations__)


def test_every_route_through_a_running_service(url, tiny_index):
    with Client(url, api_key=KEY) as client:
        assert client.health()["status"] == "ok" and client.ready()
        text = client.metrics()
        assert "spanseek_questions_total" in text and "spanseek_ready 1.0" in text
        reloaded = client.reload()
        assert reloaded["index"]["documents"] > 0 and reloaded["reload"]["reloads"] >= 1
        assert client.reload(tiny_index)["index"]["dir"] == str(tiny_index)  # naming it: the key holder sees paths
    with Client(url, api_key="wrong") as client, pytest.raises(AuthenticationError):
        client.reload()


async def test_every_route_through_a_running_service_async(url):
    async with AsyncClient(url, api_key=KEY) as client:
        assert (await client.health())["status"] == "ok" and await client.ready()
        assert "spanseek_ready 1.0" in await client.metrics()
        assert (await client.info())["index"]["documents"] > 0
        assert (await client.reload())["index"]["documents"] > 0


def test_the_client_needs_only_httpx_tenacity_and_the_standard_library():
    import subprocess
    import sys

    tree = ast.parse(Path(client_module.__file__).read_text())
    modules = {(a.name if isinstance(n, ast.Import) else n.module or "")
               for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in getattr(n, "names", [])}
    outside = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names}
    # spanseek.extras names the extra to install when httpx or tenacity is missing; it imports only the standard library
    assert {m for m in outside if not m.startswith("spanseek.core.") and m != "spanseek.extras"} == {"httpx", "tenacity"}
    # the shared types come from core modules that import only the standard library: no torch, faiss, numpy
    loaded = subprocess.run([sys.executable, "-c", "import sys, spanseek.client; "
                             "print(sorted(m for m in ('torch', 'faiss', 'numpy', 'transformers', 'fastapi') "
                             "if m in sys.modules))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_confidence_pages_and_abstention_through_a_running_service(live, settings_for, tiny_searcher):
    """A calibrated searcher behind uvicorn: typed hits carry confidence, pages match one deep search, and a
    min_confidence above every hit's gives no hits and no_answer (sync and async clients)."""
    from spanseek.core.search import Searcher
    from tests.core.test_answers import calibrator

    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=calibrator(coef=(0.0,) * 7, intercept=0.0))
    with live(create_app(settings_for(), lambda s: searcher)) as base, Client(base) as client:
        page = client.search(QUESTION, top_k=2, offset=2)
        deep = searcher.search([QUESTION], SearchParams(top_k=4))[0]
        same_hits(page.hits, deep[2:4])
        assert [h.confidence for h in page.hits] == [0.5, 0.5] and not page.no_answer
        gated = client.search(QUESTION, unit="passage", min_confidence=0.6)
        assert gated.no_answer and gated.hits == [] and gated.results[0].no_answer
        assert client.search(QUESTION, min_confidence=0.4).hits
        raw = client.search(QUESTION, top_k=5, allow_overlap=True)
        same_hits(raw.hits, searcher.search([QUESTION], SearchParams(top_k=5, allow_overlap=True))[0])
        with pytest.raises(BadRequestError, match="offset \\+ top_k must be at most 200"):
            client.search(QUESTION, top_k=10, offset=195)

        async def run():
            async with AsyncClient(base) as aclient:
                return await aclient.search(QUESTION, unit="doc", min_confidence=0.6)

        import asyncio

        assert asyncio.run(run()).no_answer


def test_documents_are_listed_page_after_page_and_read_without_their_passages(settings_for, tmp_path, live):
    """``documents()`` follows ``next`` to the last page (sync and async), ``get(meta_only=True)`` leaves the
    paragraphs out, and a page whose ``next`` does not move on is an InvalidResponseError, not an endless loop."""
    import asyncio

    from spanseek.client import AsyncClient, InvalidResponseError
    from spanseek.service.app import create_app

    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with live(create_app(settings)) as url, Client(url, api_key="key") as client:
        client.upsert([{"id": f"p{i}", "title": "T", "paragraphs": ["In 1450 Gala built it."],
                        "meta": {"kind": "page", "n": i}} for i in range(5)])
        listed = list(client.documents({"kind": "page"}, page_size=2))
        assert [d["id"] for d in listed] == ["p0", "p1", "p2", "p3", "p4"] and listed[3]["meta"]["n"] == 3
        assert client.get("p1", meta_only=True) == {"id": "p1", "title": "T", "meta": {"kind": "page", "n": 1}}
        assert client.get("nope", meta_only=True) is None

        async def listed_async():
            async with AsyncClient(url, api_key="key") as aclient:
                return [d["id"] async for d in aclient.documents({"kind": "page"}, page_size=3)], \
                    await aclient.get("p4", meta_only=True)

        ids, one = asyncio.run(listed_async())
        assert ids == ["p0", "p1", "p2", "p3", "p4"] and "paragraphs" not in one

    def stuck(request):
        return httpx.Response(200, json={"documents": [{"id": "a", "title": "", "meta": {}}], "next": "a"})

    with Client("http://test", transport=httpx.MockTransport(stuck), max_retries=0) as client, \
            pytest.raises(InvalidResponseError, match="next starts after 'a'"):
        list(client.documents())


def test_the_module_docstring_names_every_method_of_the_client():
    """`help(spanseek.client)` listed the routes' methods but left out add, upsert_file and add_file."""
    public = [name for name in vars(Client) if not name.startswith("_") and callable(getattr(Client, name))]
    assert {"search", "add", "upsert_file", "get"} <= set(public)
    doc = client_module.__doc__ or ""
    assert [name for name in public if name != "close" and f"``{name}``" not in doc] == []
