"""Reading as the server's default (``default_read``, ``default_read_below``): a request that does not say is
answered as if it had asked, one that says keeps its own choice, and what reading cannot do is not read."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
from pydantic import ValidationError

from spanseek.core.confidence import FEATURE_DEPTH, hit_features
from spanseek.core.loading import open_searcher
from spanseek.core.params import SearchParams
from spanseek.core.search import Searcher
from spanseek.service.app import create_app
from spanseek.service.settings import Settings
from tests.core.test_answers import calibrator

QUESTIONS = ["Who built the castle in 1500?", "When did Alba build the bridge?", "Where is the castle?",
             "Which bridge did Alba build?", "When was the tower built?", "Who built the tower?"]


@pytest.fixture(scope="module")
def reading_searcher(tiny_index, tiny_model_dir, tiny_reader):
    return open_searcher(tiny_index, tiny_model_dir, device="cpu", precision="fp32", reader=tiny_reader,
                         reader_precision="fp32")


def spans(hits):
    return [(h["passage_id"], h["start"], h["end"], h["text"], h["read"] is not None) for h in hits]


def answers(client, body, unit="phrase"):
    r = client.post(f"/search?unit={unit}", json={"queries": QUESTIONS, "top_k": 2, **body})
    assert r.status_code == 200, r.text
    return [spans(result["hits"]) for result in r.json()["results"]]


def test_a_request_that_does_not_say_is_read_and_one_that_says_keeps_its_choice(serve, settings_for, tiny_reader,
                                                                                 reading_searcher):
    with serve(create_app(settings_for(reader=str(tiny_reader)), lambda s: reading_searcher)) as client:
        read, unread = answers(client, {"read": True}), answers(client, {})
        collapsed = answers(client, {"collapse_duplicates": True})
    assert read != unread and all(hit[-1] for hits in read for hit in hits)
    settings = settings_for(reader=str(tiny_reader), default_read=True)
    with serve(create_app(settings, lambda s: reading_searcher)) as client:
        assert answers(client, {}) == read
        assert answers(client, {"read": False}) == unread
        assert answers(client, {"collapse_duplicates": True}) == collapsed  # reading does not collapse: not read
        service = client.get("/info").json()["service"]
        fields = client.get("/openapi.json").json()["components"]["schemas"]["SearchRequest"]["properties"]
        exposed = client.get("/metrics").text
        # an option only reading takes asks for reading: read, not refused for want of read=true
        deeper = answers(client, {"read_passages": 2})
        assert deeper == answers(client, {"read": True, "read_passages": 2}) != read
        assert all(hit[-1] for hits in deeper for hit in hits)
    assert service["default_read"] is True and service["default_read_below"] is None
    # the API's schema says that the server's defaults decide what a request without read or read_below gets
    assert "service.default_read" in fields["read"]["description"]
    assert "default_read_below" in fields["read_below"]["description"]
    # read by default, the request is labelled read: its latency is a reading search's
    assert 'spanseek_request_duration_seconds_count{read="true",status="200",unit="phrase"} 1.0' in exposed
    assert 'spanseek_request_duration_seconds_count{read="false",status="200",unit="phrase"} 2.0' in exposed


def test_default_read_answers_unread_what_reading_would_refuse(serve, settings_for, tiny_reader, reading_searcher):
    """The server's default never turns an answer into a 400: a request that reading would refuse is answered as if
    the server did not read, with a warning that says why. Here, the most questions a request may ask (32), whose
    passages read (3 each) are over a max_passages_read of 64, and a lexical_weight that the index's default fusion,
    rrf, would ignore once read. Asked for, reading is refused as before."""
    rrf = copy.copy(reading_searcher)
    rrf.default_fusion = "rrf"
    many = {"queries": [f"Who built the castle in {1500 + i}?" for i in range(32)]}
    weighted = {"query": QUESTIONS[0], "mode": "hybrid", "lexical_weight": 0.5}
    with serve(create_app(settings_for(reader=str(tiny_reader)), lambda s: rrf)) as client:
        unread = [client.post("/search", json=body).json() for body in (many, weighted)]
    settings = settings_for(reader=str(tiny_reader), default_read=True, max_passages_read=64)
    with serve(create_app(settings, lambda s: rrf)) as client:
        by_default = [client.post("/search", json=body) for body in (many, weighted)]
        asked = [client.post("/search", json={**body, "read": True}) for body in (many, weighted)]
        assert answers(client, {}) != answers(client, {"read": False})  # the server does read by default
    for r, plain in zip(by_default, unread, strict=True):
        assert r.status_code == 200, r.text
        assert [spans(q["hits"]) for q in r.json()["results"]] == [spans(q["hits"]) for q in plain["results"]]
    assert [r.json()["warnings"] for r in by_default] == [
        [f"not read, though this server reads requests that do not give read (default_read): {r.json()['message']}"]
        for r in asked]
    assert "max_passages_read" in asked[0].json()["message"] and "fusion=rrf" in asked[1].json()["message"]
    assert [r.status_code for r in asked] == [400, 400]


def test_default_read_below_reads_the_unsure_questions_where_the_model_can_judge_them(serve, settings_for,
                                                                                      tiny_reader, reading_searcher):
    plain = SearchParams(unit="phrase", top_k=2, mode="hybrid")
    deep = reading_searcher.search(QUESTIONS, replace(plain, top_k=FEATURE_DEPTH["phrase"]))
    f = np.concatenate([hit_features("phrase", [h.score for h in hs], [h.dense for h in hs], [h.lexical for h in hs],
                                     [h.text for h in hs]) for hs in deep])
    fitted = calibrator(mean=f.mean(axis=0), scale=np.maximum(f.std(axis=0), 1e-3))
    phrases_only = replace(fitted, models={k: m for k, m in fitted.models.items() if k.startswith("phrase/")})
    calibrated = Searcher(reading_searcher.index, reading_searcher.encoder, reading=reading_searcher.reading,
                          calibrator=phrases_only)
    best = [hits[0].confidence for hits in calibrated.search(QUESTIONS, plain)]
    cut = float(np.median(best)) + 1e-6
    settings = settings_for(reader=str(tiny_reader), default_read=True, default_read_below=cut)
    with serve(create_app(settings, lambda s: calibrated)) as client:
        below = answers(client, {"mode": "hybrid", "read": True, "read_below": cut})
        assert answers(client, {"mode": "hybrid"}) == below
        assert answers(client, {"mode": "hybrid", "read": True}) == below  # asked to read, without a read_below
        every = answers(client, {"mode": "hybrid", "read": True, "read_below": 1.0})
        # no calibration for the doc unit: its questions are all read, not refused
        docs = answers(client, {"mode": "hybrid"}, unit="doc")
        assert docs == answers(client, {"mode": "hybrid", "read": True}, unit="doc")
    assert below != every  # some questions were sure enough to keep the search's own answer
    assert sum(not hits[0][-1] for hits in below) == sum(b >= cut for b in best) > 0


def test_reading_by_default_needs_a_reader(tiny_index, tiny_model_dir):
    for name, value in (("default_read", True), ("default_read_below", 0.8), ("default_read_below", 0.0)):
        with pytest.raises(ValidationError, match=f"{name} needs a reader"):
            Settings(index=tiny_index, model=str(tiny_model_dir), **{name: value})
    with pytest.raises(ValidationError, match="default_read and default_read_below need a reader"):
        Settings(index=tiny_index, model=str(tiny_model_dir), default_read=True, default_read_below=0.5)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        Settings(index=tiny_index, model=str(tiny_model_dir), reader="default", default_read_below=1.5)
