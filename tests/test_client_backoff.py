"""The Python client's back-off between retries: made and used without a library's deprecation warning, the waits
as docs/python.md gives them (the schedule itself: tests/service/test_client.py).

    .venv/bin/python -m pytest -q tests/test_client_backoff.py
"""

from __future__ import annotations

import warnings

import httpx
import pytest

from spanseek import client as client_module
from spanseek.client import Client, ServerError

NOT_READY = {"error": "not_ready", "message": "loading", "request_id": "r"}


def test_a_client_retrying_without_retry_after_warns_of_nothing(monkeypatch):
    """The client built its back-off with tenacity's ``wait_exponential_jitter(initial=...)``, which tenacity 9.2
    deprecates: every Client made warned (a DeprecationWarning in a program's tests, an error where warnings are
    errors), and a tenacity without ``initial`` would break it."""
    waits: list[float] = []
    monkeypatch.setattr(client_module, "_sleep", waits.append)
    transport = httpx.MockTransport(lambda request: httpx.Response(503, json=NOT_READY))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Client("http://fake", transport=transport, max_retries=3, backoff=0.5, max_retry_wait=30) as client, \
                pytest.raises(ServerError):
            client.search("q")
    assert [int(w) for w in waits] == [0, 1, 2]  # 0.5 x 2^n plus up to 0.5 of jitter
    assert all(0.5 * 2 ** n <= w <= 0.5 * 2 ** n + 0.5 for n, w in enumerate(waits)), waits


def test_the_wait_of_a_late_retry_is_the_cap_not_an_overflow(monkeypatch):
    """2 ** n past a float's range (retry 1,025 and later) waits ``max_retry_wait``."""
    waits: list[float] = []
    monkeypatch.setattr(client_module, "_sleep", waits.append)
    transport = httpx.MockTransport(lambda request: httpx.Response(503, json=NOT_READY))
    with Client("http://fake", transport=transport, max_retries=1100, backoff=0.5, max_retry_wait=7,
                max_retry_time=3600) as client, pytest.raises(ServerError):
        client.search("q")
    assert len(waits) == 1100 and set(waits[10:]) == {7.0}
