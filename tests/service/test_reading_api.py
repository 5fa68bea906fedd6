"""Reading at search time through every door: HTTP (on, off, refused), the micro-batcher (read and unread requests
in one batch), the command line and the Python client."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spanseek.cli import main
from spanseek.client import Client
from spanseek.core.loading import open_searcher
from spanseek.core.params import SearchParams
from spanseek.service.app import create_app
from spanseek.service.batcher import run_batch

QUESTION = "Who built the castle in 1500?"


@pytest.fixture(scope="module")
def reading_searcher(tiny_index, tiny_model_dir, tiny_reader):
    return open_searcher(tiny_index, tiny_model_dir, device="cpu", precision="fp32", reader=tiny_reader,
                         reader_precision="fp32")


def spans(hits):
    return [(h.passage_id, h.start, h.end, h.text) for h in hits]


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_read_on_and_off_over_http(serve, settings_for, tiny_reader, reading_searcher, unit):
    settings = settings_for(reader=str(tiny_reader), reader_precision="fp32")
    with serve(create_app(settings, lambda s: reading_searcher)) as client:
        read = client.post(f"/search?unit={unit}", json={"query": QUESTION, "top_k": 3, "read": True})
        plain = client.post(f"/search?unit={unit}", json={"query": QUESTION, "top_k": 3})
        reader = client.get("/info").json()["service"]["reader"]
        exposed = client.get("/metrics").text
    for read_label in ("true", "false"):  # told apart: a search that reads takes about 10x one that does not
        assert f'spanseek_request_duration_seconds_count{{read="{read_label}",status="200",unit="{unit}"}} 1.0' \
            in exposed
        assert reader["read_passages"] == 3 and reader["fitted_read_passages"] == [3]
    assert read.status_code == plain.status_code == 200, read.text
    read_hits, plain_hits = read.json()["results"][0]["hits"], plain.json()["results"][0]["hits"]
    assert read_hits and all(h["read"] is not None and h["confidence"] is not None for h in read_hits)
    assert all(h["read"] is None for h in plain_hits)
    want = reading_searcher.search([QUESTION], SearchParams(unit=unit, top_k=3, read=True))[0]
    assert [(h["passage_id"], h["start"], h["end"], h["text"]) for h in read_hits] == spans(want)
    assert read.json()["timings_ms"]["read"] > 0 and "X-Spanseek-Read-Ms" in read.headers


def test_read_is_refused_without_a_reader_and_beyond_the_limit(serve, settings_for, tiny_searcher, reading_searcher,
                                                               tiny_reader):
    with serve(create_app(settings_for(), lambda s: tiny_searcher)) as client:
        r = client.post("/search", json={"query": QUESTION, "read": True})
        assert r.status_code == 400 and "read needs a reader" in r.json()["message"]
        assert client.get("/info").json()["service"]["reader"] is None
    settings = settings_for(reader=str(tiny_reader), max_read_passages=4)
    with serve(create_app(settings, lambda s: reading_searcher)) as client:
        r = client.post("/search", json={"query": QUESTION, "read": True, "read_passages": 5})
        assert r.status_code == 400 and "read_passages must be between 1 and 4" in r.json()["message"]
        assert client.post("/search", json={"query": QUESTION, "read": "yes"}).status_code == 422
        r = client.post("/search", json={"query": QUESTION, "read_below": 0.5})
        assert r.status_code == 400 and "read_below applies with read=true" in r.json()["message"]
        r = client.post("/search", json={"query": QUESTION, "read_passages": 2})
        assert r.status_code == 400 and "read_passages applies with read=true" in r.json()["message"]
        r = client.post("/search", json={"query": QUESTION, "read": True, "read_below": 0.5})  # no calibration
        assert r.status_code == 400 and "read_below needs a calibrated model" in r.json()["message"], r.json()


def test_a_read_request_of_the_most_questions_is_served_and_its_reading_bounded_apart(serve, settings_for,
                                                                                       tiny_reader, reading_searcher):
    """At the defaults, a read request of the most questions (32) at the reader's depth is served, as unread;
    more passages read than max_passages_read (32 x 3) is a 400 that names that limit."""
    queries = [f"Who built the castle in {1500 + i}?" for i in range(32)]
    with serve(create_app(settings_for(reader=str(tiny_reader)), lambda s: reading_searcher)) as client:
        read = client.post("/search", json={"queries": queries, "top_k": 1, "read": True})
        deeper = client.post("/search", json={"queries": queries, "top_k": 1, "read": True, "read_passages": 4})
        service = client.get("/info").json()["service"]
    assert read.status_code == 200, read.text
    assert all(q["hits"][0]["read"] is not None for q in read.json()["results"])
    assert deeper.status_code == 400 and "128 passages read" in deeper.json()["message"]
    assert "limit of 96 (max_passages_read)" in deeper.json()["message"]
    assert service["max_passages_read"] == 96 and service["max_queue"] == 512


def test_a_batch_mixing_read_and_unread_requests_answers_each_as_if_alone(reading_searcher):
    questions = [QUESTION, "When did Alba build the bridge?"]
    requests = [(questions, SearchParams(top_k=3, read=True)), (questions[::-1], SearchParams(top_k=3)),
                (questions[:1], SearchParams(unit="passage", top_k=2, read=True, read_passages=2))]
    together, _ = run_batch(reading_searcher, requests)
    for (qs, params), got in zip(requests, together, strict=True):
        alone, _ = run_batch(reading_searcher, [(qs, params)])
        for a, b in zip(got, alone[0], strict=True):
            assert spans(a) == spans(b)
            np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-4)
            assert all((h.read is not None) == params.read for h in a)


def test_read_from_the_command_line(tiny_index, tiny_model_dir, tiny_reader, capsys, reading_searcher):
    code = main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--read", "--reader",
                 str(tiny_reader), "--mode", "dense", "--top-k", "2", QUESTION])
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    want = reading_searcher.search([QUESTION], SearchParams(top_k=2, mode="dense", read=True))[0]
    assert [(h["passage_id"], h["start"], h["end"], h["text"]) for h in line["hits"]] == spans(want)
    assert all(h["read"] is not None for h in line["hits"])


def test_read_from_the_python_client(live, settings_for, tiny_reader, reading_searcher):
    settings = settings_for(reader=str(tiny_reader))
    with live(create_app(settings, lambda s: reading_searcher)) as url, Client(url) as client:
        read = client.search(QUESTION, top_k=2, read=True)
        plain = client.search(QUESTION, top_k=2)
    assert read.hits and all(h.read is not None and h.extra == {} for h in read.hits)
    assert all(h.read is None for h in plain.hits) and read.timings_ms.read > 0
