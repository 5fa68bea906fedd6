"""collapse_duplicates over HTTP and through the client, on an index holding copies: the searcher's collapsed hits
with their copies and documents; bad values answer the error shape.

    .venv/bin/python -m pytest -q tests/service/test_duplicates_http.py
"""

from __future__ import annotations

import pytest

from spanseek.client import BadRequestError, Client
from spanseek.core.params import SearchParams
from spanseek.service.app import create_app
from spanseek.service.settings import Settings

QUESTIONS = ["When did Alba build the castle?", "Who built the river bridge?"]


@pytest.fixture(scope="module")
def settings(dup_index, tiny_model_dir) -> Settings:
    return Settings(index=dup_index, model=str(tiny_model_dir), device="cpu", precision="fp32", warmup=False,
                    question_cache=0)


@pytest.fixture(scope="module")
def url(live, settings, dup_searcher):
    with live(create_app(settings, lambda s: dup_searcher)) as base:
        yield base


@pytest.mark.parametrize("how", [True, "exact", "near"])
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_collapsed_hits_match_the_searcher_with_their_copies(url, dup_searcher, unit, how):
    import httpx

    r = httpx.post(f"{url}/search?unit={unit}", json={"queries": QUESTIONS, "top_k": 6, "mode": "dense",
                                                       "collapse_duplicates": how})
    assert r.status_code == 200, r.text
    want = dup_searcher.search(QUESTIONS, SearchParams(unit, 6, mode="dense", collapse_duplicates=how))
    got = [[(h["passage_id"], h["start"], h["end"], h["copies"], h["copy_doc_ids"]) for h in res["hits"]]
           for res in r.json()["results"]]
    assert got == [[(h.passage_id, h.start, h.end, h.copies, h.copy_doc_ids) for h in hits] for hits in want]
    assert any(h["copies"] > 1 for res in r.json()["results"] for h in res["hits"])
    plain = httpx.post(f"{url}/search?unit={unit}", json={"query": QUESTIONS[0], "top_k": 6, "mode": "dense"})
    assert all(h["copies"] is None and h["copy_doc_ids"] is None for h in plain.json()["results"][0]["hits"])


@pytest.mark.parametrize("how", [True, "near"])
def test_the_client_sends_it_and_reads_the_copies(url, dup_searcher, how):
    with Client(url) as client:
        response = client.search(QUESTIONS[1], unit="passage", top_k=6, mode="dense", collapse_duplicates=how)
    want = dup_searcher.search(QUESTIONS[1:], SearchParams("passage", 6, mode="dense", collapse_duplicates=how))[0]
    assert [(h.passage_id, h.copies, h.copy_doc_ids, h.extra) for h in response.hits] == \
        [(h.passage_id, h.copies, h.copy_doc_ids, {}) for h in want]


@pytest.mark.parametrize("body, status, message", [
    ({"collapse_duplicates": "true"}, 422, "collapse_duplicates"),
    ({"collapse_duplicates": "fuzzy"}, 422, "collapse_duplicates"),
    ({"collapse_duplicates": 1}, 422, "collapse_duplicates"),
    ({"collapse_duplicates": True, "read": True}, 400, "collapse_duplicates does not apply with read"),
    ({"collapse_duplicates": "near", "read": True}, 400, "collapse_duplicates does not apply with read"),
])
def test_bad_requests_are_refused_naming_the_parameter(url, body, status, message):
    import httpx

    r = httpx.post(f"{url}/search?unit=passage", json={"query": "a", **body})
    assert r.status_code == status, r.text
    assert message in r.text and set(r.json()) >= {"error", "message", "request_id"}
    with Client(url) as client, pytest.raises(BadRequestError) as e:
        client.search("a", unit="passage", **body)
    assert e.value.status == status


def test_the_warm_up_finds_the_copies_before_the_first_collapsing_search(live, settings, dup_index, tiny_model_dir,
                                                                         monkeypatch):
    """The table of copies is made while the service warms up, so the first request that collapses pays nothing for
    it (a freshly opened index: no table from another test)."""
    import httpx

    from spanseek.core import duplicates
    from spanseek.core.loading import open_searcher

    searcher = open_searcher(dup_index, tiny_model_dir, device="cpu", precision="fp32")
    warm = settings.model_copy(update={"warmup": True, "max_batch_size": 2})
    with live(create_app(warm, lambda s: searcher)) as base:
        made: list[int] = []
        monkeypatch.setattr(duplicates.Copies, "of", lambda *a: made.append(1) or pytest.fail("made at a search"))
        r = httpx.post(f"{base}/search?unit=passage", json={"query": QUESTIONS[0], "top_k": 6, "mode": "dense",
                                                            "collapse_duplicates": True})
        assert r.status_code == 200, r.text
        assert any(h["copies"] > 1 for h in r.json()["results"][0]["hits"]) and not made


def test_a_write_finds_its_snapshot_copies_before_the_first_collapsing_search(write_settings, monkeypatch):
    """A write's snapshot finds its copies as it is published, in the write's thread, so the first search that
    collapses after a write pays nothing for them; a written copy of an indexed paragraph collapses with it."""
    from spanseek.core import duplicates
    from tests.service.conftest import serving

    app = create_app(write_settings(warmup=True))
    key = {"X-API-Key": "key"}
    with serving(app) as client:
        text = app.state.service.live.base.index.passages[0]["text"]
        r = client.put("/documents", headers=key, json={"documents": [{"id": "w1", "title": "Copy",
                                                                      "paragraphs": [f"  {text.upper()} "]}]})
        assert r.status_code == 200, r.text
        made, real = [], duplicates.Copies.of
        monkeypatch.setattr(duplicates.Copies, "of", lambda *a: made.append(1) or real(*a))
        r = client.post("/search?unit=passage", headers=key, json={"query": text, "top_k": 30, "mode": "dense",
                                                                   "collapse_duplicates": True})
        assert r.status_code == 200, r.text
        copy = [h for h in r.json()["results"][0]["hits"] if " ".join(h["passage"].split()).lower()
                == " ".join(text.split()).lower()]
        assert len(copy) == 1 and copy[0]["copies"] == 2 and "w1" in [copy[0]["doc_id"], *copy[0]["copy_doc_ids"]]
        assert not made  # found with the snapshot, not at the search


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_collapsing_search_costs_its_deeper_rankings(unit):
    """Admission counts the deeper ranking a page of copies needs (COLLAPSE_FACTOR), and the most comparing near copies
    may take for each hit of the page's depth (NEAR_HIT_COST), and says so when it refuses."""
    from spanseek.core.confidence import FEATURE_DEPTH
    from spanseek.service.cost import COLLAPSE_FACTOR, NEAR_HIT_COST, CostModel

    model = CostModel({"passage": 1000, "doc": 20})
    plain, collapsing = SearchParams(unit, 10), SearchParams(unit, 10, collapse_duplicates=True)
    assert model.question(collapsing) == pytest.approx(model.question(plain) * COLLAPSE_FACTOR[unit])
    assert COLLAPSE_FACTOR[unit] > 1 and "collapsing copies" in model.explain(collapsing)
    assert "collapsing" not in model.explain(plain)
    near, exact = SearchParams(unit, 10, collapse_duplicates="near"), SearchParams(unit, 10, collapse_duplicates="exact")
    assert model.question(exact) == model.question(collapsing)
    assert model.question(near) == pytest.approx(model.question(collapsing) + 10 * NEAR_HIT_COST) and NEAR_HIT_COST > 0
    assert "near copies" in model.explain(near) and "near" not in model.explain(exact)
    deep = SearchParams(unit, 100, collapse_duplicates="near")  # the near comparisons grow with the depth
    assert model.question(deep) - model.question(SearchParams(unit, 100, collapse_duplicates=True)) == \
        pytest.approx(100 * NEAR_HIT_COST)
    # a calibrated search ranks at least FEATURE_DEPTH deep, and its near comparisons' budget is that page's
    one = SearchParams(unit, 1, collapse_duplicates="near")
    assert model.question(one) - model.question(SearchParams(unit, 1, collapse_duplicates=True)) == \
        pytest.approx(FEATURE_DEPTH[unit] * NEAR_HIT_COST)
    assert f"({FEATURE_DEPTH[unit] * NEAR_HIT_COST:.1f} of it" in model.explain(one) and '"exact"' in model.explain(one)
