"""End to end through HTTP on the tiny index: every unit, batches of queries, probes, info, docs, odd inputs."""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from spanseek.service.app import create_app

UNITS = ("phrase", "passage", "doc")


@pytest.mark.parametrize("unit", UNITS)
def test_search_each_unit_matches_the_searcher(client, tiny_searcher, unit):
    question = "Who built the castle in 1500?"
    r = client.post(f"/search?unit={unit}", json={"query": question, "top_k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["unit"] == unit and len(body["results"]) == 1
    hits = body["results"][0]["hits"]
    expected = tiny_searcher.search([question], SearchParams(unit=unit, top_k=3))[0]
    assert len(hits) == len(expected) == 3
    for got, want in zip(hits, expected, strict=True):
        assert (got["passage_id"], got["start"], got["end"], got["doc_id"]) == (want.passage_id, want.start, want.end, want.doc_id)
        assert np.isclose(got["score"], want.score, rtol=1e-4, atol=1e-4)
        assert got["text"] == got["passage"][got["start"] : got["end"]]
        assert got["title"] == want.title
    if unit == "passage":
        assert len({h["passage_id"] for h in hits}) == 3
    if unit == "doc":
        assert len({h["doc_id"] for h in hits}) == 3
    assert body["timings_ms"]["batch_size"] >= 1 and body["request_id"] == r.headers["x-request-id"]


def test_merged_answers_match_the_searcher(client, tiny_searcher):
    question = "Who built the castle in 1500?"
    r = client.post("/search", json={"query": question, "top_k": 4, "merge_answers": True})
    assert r.status_code == 200, r.text
    hits = r.json()["results"][0]["hits"]
    expected = tiny_searcher.search([question], SearchParams(unit="phrase", top_k=4, merge_answers=True))[0]
    assert [(h["text"], h["passage_id"], h["start"]) for h in hits] == [(h.text, h.passage_id, h.start) for h in expected]
    assert np.allclose([h["score"] for h in hits], [h.score for h in expected], rtol=1e-4, atol=1e-4)


def test_queries_are_answered_in_order(client, tiny_searcher):
    questions = ["When was the bridge built?", "Who painted the church?", "Which river?"]
    r = client.post("/search?unit=passage", json={"queries": questions, "top_k": 2})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [res["query"] for res in results] == questions
    expected = tiny_searcher.search(questions, SearchParams(unit="passage", top_k=2))
    assert [[h["passage_id"] for h in res["hits"]] for res in results] == [[h.passage_id for h in e] for e in expected]


def test_default_unit_and_top_k(client):
    r = client.post("/search", json={"query": "a king"})
    assert r.json()["unit"] == "phrase" and len(r.json()["results"][0]["hits"]) == 10


def test_timings_come_back_as_headers(client):
    r = client.post("/search?unit=doc", json={"query": "a queen", "top_k": 1})
    for stage in ("Queue", "Encode", "Search", "Aggregate", "Total"):
        assert float(r.headers[f"X-Spanseek-{stage}-Ms"]) >= 0
    assert "encode;dur=" in r.headers["Server-Timing"] and int(r.headers["X-Spanseek-Batch-Size"]) >= 1
    assert r.json()["timings_ms"]["total"] >= r.json()["timings_ms"]["encode"]


def test_max_answer_tokens_bounds_phrases(client, tiny_searcher):
    r = client.post("/search?unit=phrase", json={"query": "the festival", "top_k": 10, "max_answer_tokens": 1})
    idx = tiny_searcher.index
    hits = r.json()["results"][0]["hits"]
    want = tiny_searcher.search(["the festival"], SearchParams(unit="phrase", top_k=10, max_answer_tokens=1))[0]
    assert len(hits) == 10
    assert [(h["passage_id"], h["start"]) for h in hits] == [(h.passage_id, h.start) for h in want]
    for h in hits:  # one token: the span is exactly one token's offsets
        p = h["passage_id"]
        a, b = idx.passage_range(p)
        offs = idx.token_offsets[a:b]
        assert any((offs[:, 0] == h["start"]) & (offs[:, 1] == h["end"]))


def test_nprobe_is_accepted_on_a_flat_index_and_the_answer_says_it_was_not_used(client, tiny_searcher, monkeypatch):
    """A flat index scans every token: nprobe is accepted (a client sends the same options to every index), changes
    nothing, and the answer's warnings say so; an index with inverted lists uses it, without a warning."""
    probed = client.post("/search", json={"query": "a king", "nprobe": 8})
    plain = client.post("/search", json={"query": "a king"})
    assert probed.status_code == 200 and probed.json()["results"] == plain.json()["results"]
    assert len(plain.json()["results"][0]["hits"]) == 10
    [warning] = probed.json()["warnings"]
    assert warning.startswith("nprobe (8) is not used: this index has no inverted lists"), warning
    assert plain.json()["warnings"] == []
    monkeypatch.setattr(tiny_searcher.index, "default_nprobe", 4)  # as an IVF index reads it at load
    assert client.post("/search", json={"query": "a king", "nprobe": 8}).json()["warnings"] == []


def test_a_question_cut_at_max_query_chars_says_so(settings_for, tiny_searcher, serve):
    """The characters past max_query_chars are not searched: the result echoes what was searched and says it was cut."""
    with serve(create_app(settings_for(max_query_chars=12), lambda s: tiny_searcher)) as c:
        r = c.post("/search", json={"queries": ["who built it", "who built the bridge", "y" * 100_000], "top_k": 1})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [(x["query"], x["truncated"]) for x in results] == [
            ("who built it", False), ("who built th", True), ("y" * 12, True)]
        assert len(r.content) < 10_000  # the 100,000 characters are not echoed
        assert c.get("/info").json()["service"]["max_query_chars"] == 12


@pytest.mark.parametrize("query", ["", "   \t\n ", "戦争と平和は誰が書いたか", "Кто построил замок?", "🙂" * 50,
                                   "castle " * 5000, "\x00\x01 null bytes"])
def test_odd_queries_never_crash(client, query):
    r = client.post("/search?unit=passage", json={"query": query, "top_k": 2})
    assert r.status_code == 200, r.text
    hits = r.json()["results"][0]["hits"]
    assert (hits == []) if not query.strip() else (len(hits) == 2)
    assert len(r.json()["results"][0]["query"]) <= 2000  # very long queries are cut (and echoed cut)


def test_blank_queries_mixed_with_real_ones(client):
    """Blank: nothing visible, only whitespace, control or format characters (NUL, zero-width space, BOM)."""
    blanks = ["", " ", "\u0000", "\u200b", "\ufeff \u00a0", "\u0000\u0000 \u0001"]
    r = client.post("/search", json={"queries": [*blanks, "the king", "\u200bthe king"], "top_k": 1})
    assert [len(res["hits"]) for res in r.json()["results"]] == [0] * len(blanks) + [1, 1]


def test_probes_info_and_docs(client, tiny_searcher):
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/ready").json()["status"] == "ready"
    info = client.get("/info").json()
    m = tiny_searcher.index.manifest
    assert info["index"]["tokens"] == m.tokens and info["index"]["passages"] == m.passages
    assert info["index"]["documents"] == m.documents and info["index"]["size_bytes"] > 0
    assert info["model"]["fingerprint"] == m.model_fingerprint and info["model"]["device"] == "cpu"
    assert info["service"]["max_batch_size"] == 16
    assert info["service"]["search_device"] == {"device": "cpu", "index": "cpu", "vectors": "cpu", "notes": []}
    assert info["model"]["length_bias"] == list(tiny_searcher.length_bias) == []  # the tiny model has none
    # no reader: nothing can be read, so no limit of reading is shown (max_passages_read was 32 questions' worth)
    assert info["service"]["reader"] is None
    assert info["service"]["max_passages_read"] is None and info["service"]["max_read_passages"] is None
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/health", "/ready", "/info", "/metrics"} <= set(paths)


def test_request_id_is_echoed(client):
    r = client.get("/health", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = client.get("/health", headers={"X-Request-ID": "bad id with spaces"})
    assert r.headers["x-request-id"] != "bad id with spaces" and len(r.headers["x-request-id"]) == 32


def test_default_factory_loads_the_index_and_warms_up(settings_for, serve):
    """No injected backend: the app opens index + model itself, warms up, then reports ready."""
    with serve(create_app(settings_for(warmup=True))) as c:
        assert c.post("/search?unit=doc", json={"query": "a poet", "top_k": 2}).status_code == 200
        metrics = c.get("/metrics").text
        assert "spanseek_ready 1.0" in metrics


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_search_accepts_a_mode(client, tiny_searcher, mode):
    question = "Who built the castle in 1500?"
    r = client.post("/search?unit=passage", json={"query": question, "top_k": 3, "mode": mode})
    assert r.status_code == 200, r.text
    hits = r.json()["results"][0]["hits"]
    expected = tiny_searcher.search([question], SearchParams(unit="passage", top_k=3, mode=mode))[0]
    assert [h["passage_id"] for h in hits] == [h.passage_id for h in expected]
    assert all((h["lexical"] is None) == (mode == "dense") for h in hits)


def test_info_names_the_modes_and_the_default(client, tiny_searcher):
    service = client.get("/info").json()["service"]
    assert service["modes"] == ["dense", "lexical", "hybrid"] and service["default_mode"] == tiny_searcher.default_mode
    assert set(service["lexical_weights"]) == {"phrase", "passage", "doc"}
    assert service["lexical_analyzer"] == tiny_searcher.lexical.analyzer == "folded"
