"""``uvicorn --factory spanseek.service.app:app_from_env``: uvicorn configures its server from its own flags, so the
app says at start which settings do not apply and gives the flags that pass what uvicorn can take."""

from __future__ import annotations

import logging
import os
import shlex
import sys

import pytest
import uvicorn.main  # noqa: F401  # the module; ``uvicorn.main`` the attribute is its click command

from spanseek.service.app import app_from_env
from spanseek.service.server import started_without_serve, uvicorn_flags
from spanseek.service.settings import Settings

UVICORN_CLI = sys.modules["uvicorn.main"].main
APP = "spanseek.service.app:app_from_env"


def uvicorn_params(flags: list[str]) -> dict:
    """What uvicorn's own command line makes of ``flags`` (the arguments of its ``uvicorn.Config``)."""
    return UVICORN_CLI.make_context("uvicorn", [APP, "--factory", *flags]).params


@pytest.mark.parametrize("proxies", [[], ["10.0.0.0/8", "192.168.1.5"], ["*"]])
def test_the_flags_give_uvicorn_the_settings(tmp_path, proxies):
    """Parsed by uvicorn's own command line, the flags configure its server as ``server_config`` does."""
    s = Settings(index=tmp_path, keep_alive_s=120, host="0.0.0.0", port=9100, forwarded_allow_ips=proxies)
    params = uvicorn_params(uvicorn_flags(s))
    assert params["timeout_keep_alive"] == 120
    assert (params["host"], params["port"]) == ("0.0.0.0", 9100)
    assert params["proxy_headers"] is bool(proxies)  # none believed: uvicorn's default believed 127.0.0.1
    if proxies:
        assert params["forwarded_allow_ips"].split(",") == proxies


def test_app_from_env_names_what_uvicorn_does_not_apply(tmp_path, monkeypatch, caplog):
    """uvicorn kept its 5 s keep-alive, beside httpx's 5 s pool (a race losing about 1 in 100 reused connections),
    whatever SPANSEEK_KEEP_ALIVE_S said, and without a word; now the start says so, with the command to use."""
    monkeypatch.setenv("SPANSEEK_INDEX", str(tmp_path))
    monkeypatch.setenv("SPANSEEK_KEEP_ALIVE_S", "120")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with caplog.at_level(logging.WARNING, logger="spanseek.service"):
        app_from_env()
    [line] = [r.getMessage() for r in caplog.records if "spanseek serve" in r.getMessage()]
    for setting in ("keep_alive_s", "forwarded_allow_ips", "header_timeout_s", "write_timeout_s", "body_timeout_s"):
        assert setting in line
    command = shlex.split(line.split("flags: uvicorn ", 1)[1].split(", or ", 1)[0])
    assert command[:2] == ["--factory", APP]
    assert uvicorn_params(command[2:])["timeout_keep_alive"] == 120


@pytest.mark.parametrize("proxies", [[], ["10.0.0.0/8", "192.168.1.5"], ["*"]])
def test_the_warning_gives_uvicorns_environment_variables_as_well_as_its_flags(tmp_path, monkeypatch, proxies):
    """The start-up warning named only the flags; uvicorn reads each of them from a UVICORN_* variable as well (a
    container's environment), and set as the warning gives them they configure its server as the flags do."""
    s = Settings(index=tmp_path, keep_alive_s=120, host="0.0.0.0", port=9100, forwarded_allow_ips=proxies)
    line = started_without_serve(s)
    for name in [name for name in os.environ if name.startswith("UVICORN_")]:
        monkeypatch.delenv(name)
    by_flags = uvicorn_params(shlex.split(line.split("flags: uvicorn ", 1)[1].split(", or ", 1)[0])[2:])
    variables = shlex.split(line.split("environment variables: ", 1)[1].split(". ", 1)[0])
    assert "UVICORN_TIMEOUT_KEEP_ALIVE=120" in variables
    assert ("UVICORN_PROXY_HEADERS=true" if proxies else "UVICORN_PROXY_HEADERS=false") in variables
    for variable in variables:
        monkeypatch.setenv(*variable.split("=", 1))
    assert uvicorn_params([]) == by_flags


def test_app_from_env_does_not_announce_a_keep_alive_it_cannot_know(tmp_path, monkeypatch):
    """Under uvicorn's own command line the idle close is uvicorn's --timeout-keep-alive (5 s by default), not
    keep_alive_s: an answer announcing ``Keep-Alive: timeout=120`` there would tell clients to keep connections the
    server closes, so app_from_env's answers carry none (``spanseek serve``'s do: test_timeouts)."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("SPANSEEK_INDEX", str(tmp_path))
    monkeypatch.setenv("SPANSEEK_KEEP_ALIVE_S", "120")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    answer = TestClient(app_from_env()).get("/health")  # no lifespan: the answer of a server still loading
    assert "x-request-id" in answer.headers and "keep-alive" not in answer.headers
