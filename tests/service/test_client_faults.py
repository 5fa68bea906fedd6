"""spanseek.client against a tiny fake server over real sockets, which misbehaves as servers and networks do: 429 and
503 with Retry-After, a connection reset in the middle of an answer, a server slower than the client's timeout, a
cursor whose ranking is gone. What is safe to send again is sent again (searches, reads, writes by id), nothing else
is (adds, deletes), and what is given up on says what happened.

    .venv/bin/python -m pytest -q tests/service/test_client_faults.py
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from spanseek.client import AsyncClient, BadRequestError, Client, CursorExpiredError

OK = {"unit": "phrase", "results": [{"query": "q", "hits": [{"text": "1340", "score": 1.5, "doc_id": "a"}]}],
      "timings_ms": {"total": 1.0}, "request_id": "r1"}
WRITTEN = {"documents": 1, "passages": 1, "tokens": 3}


def _answer(status: int, body: object, headers: dict[str, str] | None = None) -> bytes:
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n{head}\r\n"
            ).encode() + data


def ok(body: object = OK, status: int = 200, **headers: str) -> Callable[[socket.socket], None]:
    """An answer in full."""
    return lambda conn: conn.sendall(_answer(status, body, {k.replace("_", "-"): v for k, v in headers.items()}))


def cut(body: object = OK) -> Callable[[socket.socket], None]:
    """The head and half the body of an answer, then the connection reset."""
    def act(conn: socket.socket) -> None:
        whole = _answer(200, body)
        conn.sendall(whole[: len(whole) - len(json.dumps(body)) // 2])
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
    return act


def slow(seconds: float) -> Callable[[socket.socket], None]:
    """No answer for ``seconds``, then one."""
    def act(conn: socket.socket) -> None:
        time.sleep(seconds)
        ok()(conn)
    return act


class FakeServer:
    """Answers the requests it gets with ``script``'s acts in turn (the last for ever), one connection each; records
    each request's method and path in ``seen``."""

    def __init__(self, script: list[Callable[[socket.socket], None]]):
        self.script, self.seen = script, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, rest = data.split(b"\r\n\r\n", 1)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]) if (
                    b"content-length:" in head.lower()) else 0
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.seen.append(" ".join(head.split(b"\r\n")[0].decode().split()[:2]))
                self.script[min(len(self.seen), len(self.script)) - 1](conn)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def make(*script: Callable[[socket.socket], None]) -> FakeServer:
        servers.append(FakeServer(list(script)))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_429_and_503_are_sent_again_after_retry_after(fake, waits):
    server = fake(ok({"error": "overloaded", "message": "queue full"}, 429, retry_after="2"),
                  ok({"error": "not_ready", "message": "loading"}, 503, retry_after="1"), ok())
    with Client(server.url, backoff=0.5) as client:
        assert client.search("q").hits[0].text == "1340"
    assert server.seen == ["POST /search?unit=phrase"] * 3
    assert 2.0 <= waits[0] <= 2.5 and 1.0 <= waits[1] <= 1.5


def test_an_answer_cut_by_a_reset_is_asked_again_where_that_is_safe(fake, waits):
    """A search and a write by id (PUT: the same documents again) are sent again once, at once; an add is not (the
    server may have written it: a second would be refused as held), and the error says so."""
    server = fake(cut(), ok())
    with Client(server.url) as client:
        assert client.search("q").hits[0].text == "1340"
    assert len(server.seen) == 2 and waits == [0.0]
    server = fake(cut(WRITTEN), ok(WRITTEN))
    with Client(server.url) as client:
        assert client.upsert({"id": "a", "paragraphs": ["p"]}) == WRITTEN
    assert server.seen == ["PUT /documents"] * 2
    server = fake(cut(WRITTEN), ok(WRITTEN))
    with Client(server.url) as client, pytest.raises(httpx.TransportError) as e:
        client.add({"id": "a", "paragraphs": ["p"]})
    assert server.seen == ["POST /documents"]
    message = str(e.value)
    assert message.startswith(f"POST {server.url}/documents: the connection was closed before the whole answer came; "
                              "not sent again, as the server may have done it"), message
    assert message.endswith("; 1 try)")


def test_a_delete_by_id_whose_answer_is_cut_is_not_sent_again(fake, waits):
    """The first try deleted the document; sent again, the server would answer 404 for it, which the client reads as
    "no document had this id" ([]): a delete that deleted the document answered that it deleted none. The error
    says it was not sent again, as a cut add's does."""
    deleted = {"deleted": ["a"], "count": 1, "request_id": "r1"}
    gone = {"error": "not_found", "message": "no document 'a'", "request_id": "r2"}
    server = fake(cut(deleted), ok(gone, 404))
    with Client(server.url) as client, pytest.raises(httpx.TransportError) as e:
        client.delete("a")
    assert server.seen == ["DELETE /documents/a"] and waits == []
    assert str(e.value).startswith(f"DELETE {server.url}/documents/a: the connection was closed before the whole "
                                   "answer came; not sent again, as the server may have done it"), str(e.value)


async def test_the_async_client_asks_a_cut_search_again_and_not_an_add(fake, waits):
    server = fake(cut(), ok())
    async with AsyncClient(server.url) as client:
        assert (await client.search("q")).hits[0].text == "1340"
    server2 = fake(cut(WRITTEN))
    async with AsyncClient(server2.url) as client:
        with pytest.raises(httpx.TransportError, match="not sent again, as the server may have done it"):
            await client.add({"id": "a", "paragraphs": ["p"]})
    assert len(server.seen) == 2 and len(server2.seen) == 1


def test_a_server_slower_than_the_timeout_is_given_up_on_with_a_clear_error(fake, waits):
    """Not sent again (the server may still be working on it); the error is httpx's ReadTimeout, saying so."""
    server = fake(slow(1.0))
    with Client(server.url, timeout=0.2) as client, pytest.raises(httpx.ReadTimeout) as e:
        client.search("q")
    assert server.seen == ["POST /search?unit=phrase"] and waits == []
    assert str(e.value).startswith(f"POST {server.url}/search: no answer within the client's timeout (0.2 s); not "
                                   "sent again, as the server may still be working on it"), str(e.value)


def test_a_request_the_server_does_not_take_in_time_is_given_up_on_with_its_write_timeout(waits):
    """A server that takes no bytes (it stalls, or the network does): the body cannot be sent within the write
    timeout, and the error is httpx's WriteTimeout naming that timeout, also with no read timeout set (a client that
    waits for slow writes' answers as long as they take; the error was a TypeError then)."""
    listener = socket.create_server(("127.0.0.1", 0))  # connections are taken (the backlog), never read
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with Client(url, timeout=httpx.Timeout(0.2, read=None)) as client, pytest.raises(httpx.WriteTimeout) as e:
            client.upsert_file(b"x" * (32 << 20), name="big.txt")  # more than the sockets' buffers hold
    finally:
        listener.close()
    assert str(e.value).startswith(f"PUT {url}/files/big%2Etxt: the request could not be sent within the client's "
                                   "write timeout (0.2 s); not sent again"), str(e.value)
    assert waits == []


def test_a_service_that_is_not_there_is_named(waits):
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()  # nothing listens there now
    with Client(url, max_retries=2) as client, pytest.raises(httpx.ConnectError) as e:
        client.info()
    assert str(e.value).startswith(f"GET {url}/info: could not connect (is the service running at {url}?)")
    assert str(e.value).endswith("; 3 tries)") and len(waits) == 2


def test_a_cursor_whose_ranking_is_gone_is_one_clear_error_not_retried(fake, waits):
    """After a restart (or past cursor_ttl_s) the server answers 410: CursorExpiredError, a BadRequestError with the
    server's message; searching again is the remedy, not the same cursor again."""
    gone = {"error": "cursor_expired", "message": "this cursor's ranking is no longer kept (...): search again for "
                                                  "the first page", "request_id": "r9"}
    server = fake(ok(gone, 410))
    with Client(server.url) as client, pytest.raises(CursorExpiredError) as e:
        client.next_page("Yq.0")
    assert isinstance(e.value, BadRequestError) and e.value.status == 410 and "search again" in str(e.value)
    assert server.seen == ["POST /search"] and waits == []
