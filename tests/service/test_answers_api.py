"""POST /search: pagination bounds, non-overlapping phrases, and min_confidence without a calibrated model.

    .venv/bin/python -m pytest -q tests/service/test_answers_api.py
"""

from __future__ import annotations

from spanseek.core.params import SearchParams

QUESTION = "Who built the castle in 1500?"


def test_offset_bounds_answer_400(client):
    for body, words in (({"offset": -1}, "offset must be between 0"), ({"offset": 195, "top_k": 10},
                        "offset + top_k must be at most 200"), ({"offset": 0, "top_k": 10}, None)):
        r = client.post("/search", json={"query": QUESTION, **body})
        if words is None:
            assert r.status_code == 200
        else:
            assert r.status_code == 400 and words in r.json()["message"]
    assert client.post("/search", json={"query": QUESTION, "offset": "2"}).status_code == 422


def test_pages_of_one_rank_window_over_http(client):
    for body, words in (({"rank_window": 201}, "rank_window must be between 1 and 200"),
                        ({"rank_window": 12, "offset": 10, "top_k": 3},
                         "rank_window must be at least offset + top_k (13), got 12")):
        r = client.post("/search?unit=passage", json={"query": QUESTION, **body})
        assert r.status_code == 400 and words in r.json()["message"], r.text
    whole = client.post("/search?unit=passage", json={"query": QUESTION, "top_k": 12}).json()["results"][0]["hits"]
    pages = [client.post("/search?unit=passage", json={"query": QUESTION, "top_k": 4, "offset": 4 * p,
                                                       "rank_window": 12}).json()["results"][0]["hits"]
             for p in range(3)]
    assert [h["passage_id"] for page in pages for h in page] == [h["passage_id"] for h in whole] and len(whole) == 12


def test_phrases_do_not_overlap_unless_asked(client, tiny_searcher):
    default = client.post("/search", json={"query": QUESTION, "top_k": 8}).json()["results"][0]["hits"]
    raw = client.post("/search", json={"query": QUESTION, "top_k": 8, "allow_overlap": True}).json()["results"][0]
    for got, params in ((default, SearchParams(top_k=8)), (raw["hits"], SearchParams(top_k=8, allow_overlap=True))):
        want = tiny_searcher.search([QUESTION], params)[0]
        assert [(h["passage_id"], h["text"]) for h in got] == [(h.passage_id, h.text) for h in want]
    assert raw["no_answer"] is False


def test_min_confidence_needs_a_calibrated_model(client):
    r = client.post("/search", json={"query": QUESTION, "min_confidence": 0.5})
    assert r.status_code == 400 and "calibrat" in r.json()["message"]
    assert client.post("/search", json={"query": QUESTION, "min_confidence": 1.5}).status_code == 400
    hits = client.post("/search", json={"query": QUESTION}).json()["results"][0]["hits"]
    assert hits and all(h["confidence"] is None for h in hits)
    assert client.get("/info").json()["service"]["confidence"] == []


def test_a_blank_question_abstains_with_min_confidence_as_one_that_finds_nothing(serve, settings_for, tiny_searcher):
    """A blank question (whitespace, control characters) is not searched; with ``min_confidence`` its result says
    no_answer, as a question whose search finds nothing does (it said false: no hits, and no abstention either),
    over HTTP and from ``Searcher.search``; without min_confidence it stays a plain empty result."""
    from spanseek.core.search import Searcher
    from spanseek.service.app import create_app
    from tests.core.test_answers import calibrator

    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=calibrator(coef=(0.0,) * 7, intercept=0.0))
    blank = ["   ", "\x00\t"]
    assert [h.no_answer for h in searcher.search(blank, SearchParams(min_confidence=0.4))] == [True, True]
    assert [h.no_answer for h in searcher.search(blank, SearchParams())] == [False, False]
    with serve(create_app(settings_for(), lambda s: searcher)) as client:
        for unit in ("phrase", "passage", "doc"):
            gated = client.post(f"/search?unit={unit}", json={"queries": [*blank, QUESTION], "min_confidence": 0.6})
            assert [(r["hits"], r["no_answer"]) for r in gated.json()["results"]] == [([], True)] * 3, gated.text
            kept = client.post(f"/search?unit={unit}", json={"queries": [*blank, QUESTION], "min_confidence": 0.4})
            assert [(len(r["hits"]) > 0, r["no_answer"]) for r in kept.json()["results"]] == \
                [(False, True), (False, True), (True, False)]
            plain = client.post(f"/search?unit={unit}", json={"queries": blank}).json()["results"]
            assert [(r["hits"], r["no_answer"]) for r in plain] == [([], False)] * 2
