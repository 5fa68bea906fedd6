"""Log lines: text or JSON, a request id on every line of a request (also those logged in the batcher's worker
threads), and one access line per request (`spanseek serve --log-format json` end to end: test_cli.py).

    .venv/bin/python -m pytest -q tests/service/test_logs.py
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys

import pytest

from spanseek.core.search import Searcher
from spanseek.service.app import create_app
from spanseek.service.logs import RequestIdFilter, TextFormatter, json_formatter, logging_config


class Records(logging.Handler):
    """Keeps every record it handles, after the request-id filter has stamped it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records():
    handler = Records()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(level)


class LoggingEncoder:
    """The tiny encoder, logging one line per encode call (from the batcher's worker thread), and failing any
    batch that holds "BOOM"."""

    def __init__(self, inner):
        self.inner, self.tokenizer, self.max_len = inner, inner.tokenizer, inner.max_len
        self.model, self.precision = inner.model, inner.precision

    def encode(self, questions: list[str]):
        logging.getLogger("tests.encoder").info("encoding %d questions", len(questions))
        if "BOOM" in questions:
            raise RuntimeError("this encoder refuses BOOM")
        return self.inner.encode(questions)


async def test_lines_logged_in_a_batch_name_its_requests(settings_for, tiny_searcher, async_serve, records):
    searcher = Searcher(tiny_searcher.index, LoggingEncoder(tiny_searcher.encoder))
    app = create_app(settings_for(max_batch_size=8, max_wait_ms=50, pipeline="off"), lambda s: searcher)
    async with async_serve(app) as ac:
        records.clear()
        ids = [f"req-{i}" for i in range(6)]
        questions = ["who built the castle?"] * 5 + ["BOOM"]
        answers = await asyncio.gather(*(ac.post("/search", json={"query": q}, headers={"X-Request-ID": rid})
                                         for q, rid in zip(questions, ids, strict=True)))
    assert [a.status_code for a in answers] == [200] * 5 + [500]
    assert [a.headers["x-request-id"] for a in answers] == ids

    encodes = [r for r in records if r.name == "tests.encoder"]
    assert encodes and all(r.request_ids and set(r.request_ids) <= set(ids) for r in encodes)
    assert set().union(*(r.request_ids for r in encodes)) == set(ids)  # every request's id reached its batch's lines
    failed = [r for r in records if r.name == "spanseek.service.batcher" and r.levelno == logging.ERROR]
    assert failed and all(r.request_ids == ["req-5"] and r.request_id == "req-5" for r in failed)  # BOOM's alone
    assert failed[0].exc_info

    access = {r.request_id: r for r in records if r.name == "spanseek.access"}
    assert set(access) == set(ids)
    assert access["req-0"].status == 200 and access["req-5"].status == 500
    assert access["req-0"].method == "POST" and access["req-0"].path == "/search" and access["req-0"].duration_ms > 0


@pytest.mark.parametrize(("given", "echoed"), [
    ("abc-123_x.y:z", True),
    ("a" * 64, True),
    ("a" * 65, False),  # too long
    ("two words", False),
    ("<script>", False),
    ("", False),
])
def test_request_id_is_taken_when_safe_else_generated(client, records, given, echoed):
    r = client.get("/info", headers={"X-Request-ID": given})
    rid = r.headers["x-request-id"]
    assert (rid == given) is echoed
    if not echoed:
        assert len(rid) == 32 and all(c in "0123456789abcdef" for c in rid)
    [line] = [rec for rec in records if rec.name == "spanseek.access"]
    assert line.request_id == rid and line.status == 200


def test_probes_and_scrapes_log_an_access_line_only_when_they_fail(client, records, monkeypatch):
    """Every Prometheus scrape (5 s) and health check (15 s) wrote one: 17,000 /metrics lines a day in compose."""
    for path in ("/health", "/ready", "/metrics"):
        assert client.get(path).status_code == 200
    client.app.state.service.status = "loading"
    assert client.get("/ready").status_code == 503
    client.app.state.service.status = "ready"
    assert client.get("/info").status_code == 200
    lines = [(r.path, r.status) for r in records if r.name == "spanseek.access"]
    assert lines == [("/ready", 503), ("/info", 200)]


def test_formats():
    record = logging.LogRecord("spanseek.access", logging.INFO, __file__, 1, "%s %s %d %.1f ms",
                               ("POST", "/search", 200, 12.25), None)
    record.method, record.path, record.status, record.duration_ms = "POST", "/search", 200, 12.25
    RequestIdFilter().filter(record)  # outside a request: no id
    line = json.loads(json_formatter().format(record))
    assert line["level"] == "INFO" and line["logger"] == "spanseek.access"
    assert line["message"] == "POST /search 200 12.2 ms" and line["request_id"] is None
    assert (line["method"], line["path"], line["status"], line["duration_ms"]) == ("POST", "/search", 200, 12.25)
    assert line["time"].endswith("+00:00")
    record.request_id, record.request_ids = None, ["a", "b"]
    assert "spanseek.access [a,b] POST /search 200 12.2 ms" in TextFormatter().format(record)
    record.request_ids = None
    assert "spanseek.access [-] POST" in TextFormatter().format(record)
    # a path or an id a client chose is one line of the text log: no second line can be forged through it
    forged = "/documents/x\n2026-12-05 18:36:50,000 ERROR spanseek.service [-] checksum mismatch\x00\r\t\x7f"
    record = logging.LogRecord("spanseek.access", logging.INFO, __file__, 1, "%s %s %d %.1f ms",
                               ("GET", forged, 404, 0.6), None)
    line = TextFormatter().format(record)
    assert "\n" not in line and "\r" not in line and "\x00" not in line and "\x7f" not in line
    assert line.endswith("x\\n2026-12-05 18:36:50,000 ERROR spanseek.service [-] checksum mismatch\\x00\\r\\t\\x7f "
                         "404 0.6 ms")

    try:
        raise ValueError("bad")
    except ValueError:
        failure = logging.LogRecord("spanseek.service", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    failure.request_id = "r1"
    line = json.loads(json_formatter().format(failure))
    assert line["request_id"] == "r1" and "ValueError: bad" in line["exc_info"]


def test_logging_config_is_accepted_by_dictconfig():
    import logging.config

    for fmt in ("text", "json"):
        config = logging_config(fmt, "info")
        config["handlers"]["default"]["stream"] = io.StringIO()  # not stderr: nothing shows in the test output
        config["root"]["handlers"] = []  # keep the test run's own handlers on the root logger
        config["loggers"] = {"tests.logging-config": {"handlers": ["default"], "propagate": False, "level": "INFO"}}
        logging.config.dictConfig(config)
        logger = logging.getLogger("tests.logging-config")
        logger.info("hello")
        [stream] = [h.stream for h in logger.handlers]
        out = stream.getvalue()
        assert (json.loads(out)["message"] == "hello") if fmt == "json" else out.endswith("[-] hello\n")
        logger.handlers.clear()


@pytest.mark.parametrize("level", ["info", "warning", "debug"])
def test_a_library_logger_set_to_debug_prints_nothing_below_the_level_asked_for(level):
    """A library that sets its own logger to DEBUG (bm25s does, at import) printed its debug lines at every
    --log-level: records of a logger propagate to the root's handler whatever the root's level. The handler keeps to
    the level."""
    import logging.config

    config = logging_config("text", level)
    config["handlers"]["default"]["stream"] = io.StringIO()
    config["root"]["handlers"] = []  # keep the test run's own handlers on the root logger
    config["loggers"] = {"tests.chatty-library": {"handlers": ["default"], "propagate": False, "level": "DEBUG"}}
    logging.config.dictConfig(config)
    logger = logging.getLogger("tests.chatty-library")
    logger.debug("building index from ids")
    logger.warning("the index is large")
    [stream] = [h.stream for h in logger.handlers]
    out = stream.getvalue()
    logger.handlers.clear()
    assert ("building index from ids" in out) == (level == "debug") and "the index is large" in out


@pytest.mark.parametrize("write_nice", [0, 5])
def test_lines_logged_in_a_write_s_threads_name_its_request(write_settings, records, monkeypatch, write_nice):
    """A write's steps and its store write run in threads of their own (the encoder's or the write steps', and the
    write thread), which the request's context did not reach: lines logged there had no request id."""
    from spanseek.service import live as live_module
    from tests.service.conftest import serving

    def logged(what, fn):
        def run(*args, **kwargs):
            logging.getLogger("tests.writes").info("%s", what)
            return fn(*args, **kwargs)
        return run

    monkeypatch.setattr(live_module, "advance", logged("step", live_module.advance))
    with serving(create_app(write_settings(write_nice=write_nice))) as client:
        store = client.app.state.service.live.store
        monkeypatch.setattr(store, "upsert", logged("upsert", store.upsert))
        monkeypatch.setattr(store, "delete", logged("delete", store.delete))
        records.clear()
        doc = {"id": "new-1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge."]}
        key = {"X-API-Key": "key"}
        assert client.put("/documents", headers={**key, "X-Request-ID": "put-1"}, json=doc).status_code == 200
        assert client.delete("/documents/new-1", headers={**key, "X-Request-ID": "del-1"}).status_code == 200
    lines = [(r.getMessage(), r.request_id) for r in records if r.name == "tests.writes"]
    assert {"step", "upsert", "delete"} == {what for what, _ in lines}
    assert all(rid == ("del-1" if what == "delete" else "put-1") for what, rid in lines), lines
