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
def spanseek_server(settings) -> Iterator[tuple[str, int]]:
    """The app under the server config of `spanseek serve` (with its protocol), in a thread."""
    import httpx

    server = uvicorn.Server(server_config(create_app(settings), settings, "warning"))
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
