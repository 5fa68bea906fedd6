"""Half-sent requests are closed: header and body timeouts of the server ``spanseek serve`` runs (raw sockets)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from spanseek.service.app import create_app
from spanseek.service.server import server_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def spanseek_server(settings, wrap=None, servers: list[uvicorn.Server] | None = None,
                    **app_options) -> Iterator[tuple[str, int]]:
    """The app (``create_app(settings, **app_options)``) under the server config of `spanseek serve` (with its
    protocol), in a thread; ``wrap(app)``, when given, is served instead of the app; ``servers``, when given, gets
    the uvicorn server."""
    import httpx

    app = create_app(settings, **app_options)
    server = uvicorn.Server(server_config(wrap(app) if wrap else app, settings, "warning"))
    if servers is not None:
        servers.append(server)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    url = f"http://{settings.host}:{settings.port}"
    try:
        while True:
            try:
                if httpx.get(url + "/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "service never became ready"
            time.sleep(0.05)
        yield settings.host, settings.port
    finally:
        server.should_exit = True
        thread.join(15)


def _read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    sock.settimeout(timeout)
    t0, data = time.monotonic(), b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - t0


def _cut(addr: tuple[str, int], reason: str) -> float:
    """spanseek_connections_cut_total{reason} of the server at ``addr``."""
    import httpx

    text = httpx.get(f"http://{addr[0]}:{addr[1]}/metrics").text
    return float(text.split(f'spanseek_connections_cut_total{{reason="{reason}"}} ')[1].split()[0])


def test_half_sent_heads_and_bodies_are_closed(settings_for):
    settings = settings_for(port=_free_port(), header_timeout_s=0.5, body_timeout_s=0.5)
    with spanseek_server(settings) as addr:
        silent = socket.create_connection(addr)  # connects, sends nothing
        half_head = socket.create_connection(addr)
        half_head.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        half_body = socket.create_connection(addr)
        half_body.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"query\": ")
        for sock in (silent, half_head):  # closed without an answer (no request to answer)
            data, took = _read_until_closed(sock, 10)
            assert data == b"" and took < 5
        data, took = _read_until_closed(half_body, 10)
        assert data.startswith(b"HTTP/1.1 408") and b"request_timeout" in data and took < 5
        for sock in (silent, half_head, half_body):
            sock.close()
        # the two heads cut off are counted; the body answered 408 is an error answer, not a connection cut
        assert (_cut(addr, "head"), _cut(addr, "request"), _cut(addr, "unread_answer")) == (2, 0, 0)

        # a kept-alive connection may idle longer than the header timeout between requests (keep_alive_s rules)
        conn = http.client.HTTPConnection(*addr, timeout=10)
        try:
            for i in range(2):
                conn.request("GET", "/health")
                response = conn.getresponse()
                assert response.status == 200 and response.read()
                if i == 0:
                    first = conn.sock
                    time.sleep(1.0)
            assert conn.sock is first  # the same connection served both
        finally:
            conn.close()


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> bool:
    """Whether the server closes ``sock`` within ``seconds`` while the client sends ``trickle`` a byte every 0.1 s
    (and reads whatever comes)."""
    deadline = time.monotonic() + seconds
    sock.settimeout(0.1)
    i = 0
    while time.monotonic() < deadline:
        try:
            if trickle:
                sock.sendall(trickle[i % len(trickle): i % len(trickle) + 1])
                i += 1
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:  # reset, or a broken pipe: closed
            return True
    return False


def _response(sock: socket.socket) -> bytes:
    """One /health answer (its head and JSON body may come in separate packets)."""
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"}"):
        data += sock.recv(65536)
    return data


def test_an_unread_body_cannot_hold_the_connection(settings_for):
    """A route that answers without reading the body (/health, 401, 404, an early 429) leaves the rest of the body
    unread: it may take LINGER_S more, whatever trickles in, then the connection is closed. Before, each body byte
    cancelled uvicorn's keep-alive timer and the head deadline no longer applied: 2,000 such sockets were held for
    90 s, none closed."""
    from spanseek.service.server import LINGER_S

    settings = settings_for(port=_free_port(), header_timeout_s=0.5, body_timeout_s=30, keep_alive_s=60)
    with spanseek_server(settings) as addr:
        sock = socket.create_connection(addr)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nsome of it")
        assert _response(sock).startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        assert _closed_within(sock, LINGER_S + 3, trickle=b"more body bytes")
        assert time.monotonic() - t0 < LINGER_S + 2
        sock.close()
        # a body that completes within the linger keeps the connection for the next request
        with socket.create_connection(addr) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
            assert _response(sock).startswith(b"HTTP/1.1 200")
            sock.sendall(b"cd" + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _response(sock).startswith(b"HTTP/1.1 200")


def test_a_trickled_body_is_cut_at_the_request_deadline_whether_or_not_the_route_reads_it(settings_for):
    """The request deadline runs from the request's first byte to the body's last, also for a route that never
    reads the body (here a 404 answered at once, then one body byte a tenth of a second)."""
    settings = settings_for(port=_free_port(), header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_s=60)
    with spanseek_server(settings) as addr, socket.create_connection(addr) as sock:
        sock.sendall(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n{")
        t0 = time.monotonic()
        assert _closed_within(sock, 5, trickle=b"[1]")
        assert time.monotonic() - t0 < 0.5 + 1.0 + 1.0  # body_timeout_s + the grace for the 408 + slack
        assert _cut(addr, "request") == 1


def test_a_client_that_does_not_read_its_answers_is_cut_off(settings_for):
    """Pipelined requests whose answers are never read: once the answers stop draining for write_timeout_s, the
    connection is aborted and its buffers freed. Before, nothing timed the write: 64 such clients pinned 40 MB."""
    settings = settings_for(port=_free_port(), write_timeout_s=0.5, keep_alive_s=60)
    with spanseek_server(settings) as addr:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(addr)
        requests = 400
        sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * requests)
        time.sleep(2.0)  # read nothing meanwhile
        sock.settimeout(2)
        received, closed = b"", False
        try:
            while not closed:
                chunk = sock.recv(1 << 20)
                received += chunk
                closed = chunk == b""
        except TimeoutError:  # still open: nothing more came
            pass
        except OSError:  # reset by the server's abort
            closed = True
        sock.close()
        assert closed and received.count(b"HTTP/1.1 200") < requests
        assert _cut(addr, "unread_answer") == 1


def test_pipelined_requests_wait_for_the_client_to_take_each_answer(settings_for):
    """A client that sends 20 requests at once and never reads: only its first is answered (the next waits for that
    answer to be taken), while another client is served at once. Before, each such connection had answers rendered
    until its buffers filled (several 30 KB /openapi.json each): 2,000 of them kept the event loop busy for half a
    minute."""
    import httpx

    seen: list[str] = []

    def counting(app):
        async def counted(scope, receive, send):
            if scope["type"] == "http":
                seen.append(scope["path"])
            await app(scope, receive, send)
        return counted

    settings = settings_for(port=_free_port(), write_timeout_s=30, keep_alive_s=60)
    with spanseek_server(settings, wrap=counting) as addr:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(addr)
        sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
        time.sleep(1.5)  # read nothing meanwhile
        assert seen.count("/openapi.json") == 1
        assert httpx.get(f"http://{addr[0]}:{addr[1]}/health", timeout=5).status_code == 200
        sock.settimeout(5)
        received = b""
        while received.count(b"HTTP/1.1 200") < 20:  # reading now: every answer comes, in order
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed the connection"
            received += chunk
        sock.close()
    assert seen.count("/openapi.json") == 20


def test_an_idle_kept_alive_connection_is_closed_silently_after_keep_alive_s(settings_for):
    """keep_alive_s is the idle time a kept-alive connection is held for: reused within it, closed after it with no
    byte sent (HTTP/1.1 has nothing to say then), and not counted as cut off. A client sending a request on it at
    that moment has it lost (docs/service.md, kept-alive connections), so keep_alive_s must outlast the clients'
    pools' idle times."""
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    settings = settings_for(port=_free_port(), keep_alive_s=1, header_timeout_s=10)
    with spanseek_server(settings) as addr:
        sock = socket.create_connection(addr)
        sock.settimeout(5)
        for idle in (0.0, 0.6):  # within keep_alive_s: the same connection answers
            time.sleep(idle)
            sock.sendall(request)
            answer = b""
            while not answer.endswith(b"}"):  # the JSON body's end (head and body may come apart)
                chunk = sock.recv(65536)
                assert chunk, "the server closed a connection idle for less than keep_alive_s"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200")
        data, took = _read_until_closed(sock, 5)  # idle from here: closed after about keep_alive_s, silently
        assert data == b"" and 0.8 < took < 3
        sock.close()
        assert (_cut(addr, "head"), _cut(addr, "request"), _cut(addr, "unread_answer")) == (0, 0, 0)


def test_an_answer_says_how_long_its_connection_is_kept_idle(settings_for):
    """No answer said when the server closes an idle connection, so a client could only guess, and race the close
    when it guessed long (a request sent as it closes is lost). Each answer on a connection the server keeps open now
    carries ``Keep-Alive: timeout=<keep_alive_s>`` (clients such as Node's undici give the connection up before it);
    one the server closes after answering (the request said ``Connection: close``, or HTTP/1.0) says none."""
    import httpx

    settings = settings_for(port=_free_port(), keep_alive_s=42)
    with spanseek_server(settings) as (host, port), httpx.Client(base_url=f"http://{host}:{port}") as client:
        for path in ("/health", "/no-such-route"):  # an error answer keeps its connection open too
            assert client.get(path).headers.get("keep-alive") == "timeout=42", path
        for request in (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                        b"GET /health HTTP/1.0\r\n\r\n"):
            with socket.create_connection((host, port)) as sock:
                sock.sendall(request)
                data, _ = _read_until_closed(sock, 5)
            head = data.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 200") and b"keep-alive" not in head, data


def test_a_reload_under_way_when_the_server_stops_is_answered_503_at_once(settings_for, tiny_index):
    """The server stops (SIGTERM) while a reload reads its index: the reload's caller gets 503 "shutting down" at
    once and the server stops, where the stop waited its whole grace time (10 s) for the reload, then cancelled the
    request: a 500 "Internal Server Error" in plain text and a traceback in the log."""
    import httpx

    entered, gate = threading.Event(), threading.Event()

    def reopen_slowly(settings, index_dir, current):
        entered.set()
        gate.wait(30)
        return current

    settings = settings_for(port=_free_port(), api_key="key")
    servers: list[uvicorn.Server] = []
    answers: list[tuple[httpx.Response, float]] = []

    def reload() -> None:
        r = httpx.post(f"http://{settings.host}:{settings.port}/admin/reload", headers={"X-API-Key": "key"}, timeout=30)
        answers.append((r, time.monotonic()))

    try:
        with spanseek_server(settings, servers=servers, searcher_reopener=reopen_slowly):
            caller = threading.Thread(target=reload)
            caller.start()
            assert entered.wait(30)
            stopped = time.monotonic()
            servers[0].should_exit = True
            caller.join(30)
    finally:
        gate.set()
    [(r, at)] = answers
    assert r.status_code == 503 and r.json()["error"] == "not_ready" and "shutting down" in r.json()["message"]
    assert at - stopped < 5  # not the stop's 10 s grace time


def test_a_reload_that_swapped_its_index_in_before_the_server_stops_is_answered_as_done(settings_for,
                                                                                         counting_factory):
    """A reload that has swapped the new index in waits for the old index's last batch before it releases it. The
    server stops meanwhile: the reload was cancelled and its caller told 503 "the reload was abandoned, the index
    served is unchanged", while the new index served every request since the swap. Now the caller gets the reload's
    answer at once: 200, the new index, and ``released_previous`` false (a batch still ran on the old one)."""
    import httpx

    from spanseek.core.search import Searcher

    factory, encoder = counting_factory(block=True)
    encoder.gate.set()
    settings = settings_for(port=_free_port(), api_key="key")
    servers: list[uvicorn.Server] = []
    answers: dict[str, tuple[httpx.Response, float]] = {}
    url = f"http://{settings.host}:{settings.port}"

    def post(name: str, path: str, **kwargs) -> None:
        r = httpx.post(url + path, headers={"X-API-Key": "key"}, timeout=30, **kwargs)
        answers[name] = (r, time.monotonic())

    def reopen(settings, index_dir, current):
        return Searcher(current.index, current.encoder)

    try:
        with spanseek_server(settings, servers=servers, searcher_factory=factory, searcher_reopener=reopen):
            reloader = servers[0].config.app.state.service.reloader
            encoder.gate.clear()
            encoder.entered.clear()
            callers = [threading.Thread(target=post, args=("search", "/search"), kwargs={"json": {"query": "who?"}})]
            callers[0].start()
            assert encoder.entered.wait(30)  # a batch runs on the index served now
            callers.append(threading.Thread(target=post, args=("reload", "/admin/reload")))
            callers[1].start()
            deadline = time.monotonic() + 30
            while reloader.reloads < 1:  # swapped in: the reload waits for that batch to release the old index
                assert time.monotonic() < deadline
                time.sleep(0.01)
            stopped = time.monotonic()
            servers[0].should_exit = True
            callers[1].join(30)
            encoder.gate.set()
            callers[0].join(30)
    finally:
        encoder.gate.set()
    r, at = answers["reload"]
    assert r.status_code == 200, r.text
    assert r.json()["index"]["released_previous"] is False
    assert at - stopped < 5  # not the stop's 10 s grace time
    assert answers["search"][0].status_code == 200


def test_a_body_framed_by_both_content_length_and_chunks_is_a_400_and_the_connection_is_closed(settings_for):
    """A request giving Content-Length and Transfer-Encoding: chunked is refused and its connection closed (RFC
    9112, 6.3), so a proxy in front that reads the length where this server reads the chunks cannot slip a second
    request past it. Before, uvicorn read the chunks, answered 200 and kept the connection open for more."""
    settings = settings_for(port=_free_port())
    body = b'{"query": "castle"}'
    with spanseek_server(settings) as addr, socket.create_connection(addr) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
                     + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # a second request: never answered
        data, took = _read_until_closed(sock, 10)
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"connection: close" in head.lower(), data
        assert b"Content-Length and Transfer-Encoding" in rest and data.count(b"HTTP/1.1 ") == 1, data
        assert took < 5
        with socket.create_connection(addr) as sock:  # either alone is served
            sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                         % (len(body), body))
            assert _read_until_closed(sock, 10)[0].startswith(b"HTTP/1.1 200")
