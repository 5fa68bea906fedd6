"""Which client address the service records: X-Forwarded-For is believed only from the proxies
``forwarded_allow_ips`` names (none by default), through the server ``spanseek serve`` runs.

    .venv/bin/python -m pytest -q tests/service/test_forwarded.py
"""

from __future__ import annotations

import logging

import httpx
import pytest

from spanseek.service.fairness import client_key
from tests.service.test_timeouts import _free_port, spanseek_server

SPOOFED = "203.0.113.7"


def _recording(seen: list[tuple[str, str]]):
    """An app wrapper that records, per request, the address fair shares count it under (``peer``), which the
    access log and refusals use too."""

    def wrap(app):
        async def recorded(scope, receive, send):
            if scope["type"] == "http" and scope["path"] == "/info":
                seen.append((client_key(scope, "peer"), scope["scheme"]))
            await app(scope, receive, send)
        return recorded
    return wrap


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize(("trusted", "believed"), [
    ({}, False),  # the default: nobody; uvicorn's own believed any local process
    ({"forwarded_allow_ips": "10.0.0.0/8, 192.168.1.5"}, False),  # proxies named, the peer not one of them
    ({"forwarded_allow_ips": "127.0.0.1"}, True),
    ({"forwarded_allow_ips": "127.0.0.0/8,::1"}, True),
    ({"forwarded_allow_ips": "*"}, True),
])
def test_x_forwarded_for_is_believed_only_from_a_named_proxy(settings_for, trusted, believed):
    seen: list[tuple[str, str]] = []
    settings = settings_for(port=_free_port(), **trusted)
    access, lines = logging.getLogger("spanseek.access"), _Lines()
    with spanseek_server(settings, wrap=_recording(seen)) as (host, port):
        access.addHandler(lines)  # after the server set up logging (which replaces the handlers it configures)
        access.setLevel(logging.INFO)
        headers = {"X-Forwarded-For": SPOOFED, "X-Forwarded-Proto": "https"}
        assert httpx.get(f"http://{host}:{port}/info", headers=headers).status_code == 200
        assert httpx.get(f"http://{host}:{port}/info").status_code == 200  # without the header: the peer
    assert seen == [(SPOOFED, "https") if believed else ("127.0.0.1", "http"), ("127.0.0.1", "http")]
    access.removeHandler(lines)
    logged = [r.client for r in lines.records if getattr(r, "path", "") == "/info"]  # type: ignore[attr-defined]
    assert logged == [SPOOFED if believed else "127.0.0.1", "127.0.0.1"]


@pytest.mark.parametrize(("value", "message"), [
    ("10.0.0.0/8,proxy.internal", "'proxy.internal' is not an IP address or network"),
    ("10.0.0.1/8", "'10.0.0.1/8' is not an IP address or network (10.0.0.5, 10.0.0.0/8, fd00::/8) nor *: "
                   "10.0.0.1/8 has host bits set"),
    ("*,10.0.0.1", "* (believe any peer) stands alone"),
    ("[10.0.0.1", "not a JSON list of addresses"),
])
def test_a_proxy_address_that_would_never_match_is_refused_naming_the_setting(tmp_path, value, message):
    from pydantic import ValidationError

    from spanseek.service.cli import settings_errors
    from spanseek.service.settings import Settings

    with pytest.raises(ValidationError) as refused:
        Settings(index=tmp_path, forwarded_allow_ips=value)
    assert f"--forwarded-allow-ips / SPANSEEK_FORWARDED_ALLOW_IPS: {message}" in settings_errors(refused.value)


def test_proxy_addresses_are_read_from_the_environment(tmp_path, monkeypatch):
    from spanseek.service.settings import Settings

    monkeypatch.setenv("SPANSEEK_FORWARDED_ALLOW_IPS", " 10.0.0.0/8 , fd00::1 ")
    assert Settings(index=tmp_path).forwarded_allow_ips == ["10.0.0.0/8", "fd00::1"]
    monkeypatch.setenv("SPANSEEK_FORWARDED_ALLOW_IPS", "")
    assert Settings(index=tmp_path).forwarded_allow_ips == []
