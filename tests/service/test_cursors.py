"""Paging cursors (service.cursors): a result's ``next`` answers the next page of its ranking exactly, for every unit
and mode, with a filter and with collapse_duplicates, across a write and a reload; expired, malformed or misused
cursors are refused naming why.

    .venv/bin/python -m pytest -q tests/service/test_cursors.py
"""

from __future__ import annotations

import json

import pytest

from spanseek.core.hits import Hit
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.service.app import create_app
from spanseek.service.cursors import Cursors, Ranking
from spanseek.service.errors import CursorExpired
from tests.conftest import make_corpus
from tests.service.conftest import serving

KEY = {"X-API-Key": "key"}
QUESTION = "who built the harbour bridge?"


def pages_of(client, unit: str, body: dict, headers=KEY) -> tuple[list[list[dict]], list[str | None]]:
    """Every page of one question's ranking: the first from ``body``, then by its ``next`` until null."""
    r = client.post(f"/search?unit={unit}", headers=headers, json=body)
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    pages, cursors = [result["hits"]], [result["next"]]
    while cursors[-1] is not None:
        r = client.post("/search", headers=headers, json={"cursor": cursors[-1]})
        assert r.status_code == 200, r.text
        assert r.json()["unit"] == unit and r.json()["results"][0]["query"] == body["query"]
        assert r.json()["timings_ms"]["batch_size"] == 0 and r.headers["X-Spanseek-Batch-Size"] == "0"
        pages.append(r.json()["results"][0]["hits"])
        cursors.append(r.json()["results"][0]["next"])
    return pages, cursors


def spot(hit: dict) -> tuple:
    """Where a hit is: its document, passage and span."""
    return hit["doc_id"], hit["passage_id"], hit["start"], hit["end"]


def ranking_of(client, unit: str, body: dict, depth: int, headers=KEY) -> list[dict]:
    """The ranking ``depth`` deep, in one page."""
    r = client.post(f"/search?unit={unit}", headers=headers, json={**body, "top_k": depth, "offset": 0})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["next"] is None  # nothing ranked past it
    return r.json()["results"][0]["hits"]


OPTIONS = [{}, {"filter": {"doc_ids": ["d0", "d2", "d3", "d5"]}}, {"collapse_duplicates": True},
           {"collapse_duplicates": "near", "filter": {"title_prefix": ""}}]


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_the_pages_of_a_cursor_are_the_ranking_in_order(client, unit):
    """For each mode and option, page 1 then its cursors give the ``rank_window``-deep ranking exactly, page by page
    (what offset paging with that rank_window gives too), ending with a null ``next``; a cursor asked again gives
    its page again."""
    depth = 5 if unit == "doc" else 9
    for mode in ("dense", "lexical", "hybrid"):
        for options in OPTIONS:
            body = {"query": QUESTION, "top_k": 2, "rank_window": depth, "mode": mode, **options}
            pages, cursors = pages_of(client, unit, body, {})
            want = ranking_of(client, unit, body, depth, {})
            assert [h for page in pages for h in page] == want, (mode, options)
            assert all(len(p) == 2 for p in pages[:-1]) and len(want) > 2, (mode, options)
            by_offset = [client.post(f"/search?unit={unit}", json={**body, "offset": o, "top_k": min(2, depth - o)})
                         .json()["results"][0]["hits"] for o in range(0, depth, 2)]
            assert [h for page in by_offset for h in page] == want
            again = client.post("/search", json={"cursor": cursors[0], "top_k": 3}).json()["results"][0]
            assert again["hits"] == want[2:5] and again["next"] == (cursors[0].split(".")[0] + ".3"
                                                                    if len(want) > 5 else None)


def test_a_page_without_a_deeper_rank_window_has_no_cursor(client):
    for body in ({"query": QUESTION, "top_k": 3}, {"query": QUESTION, "top_k": 3, "rank_window": 3},
                 {"queries": [QUESTION, " "], "top_k": 2, "offset": 2, "rank_window": 4}):
        r = client.post("/search?unit=passage", json=body)
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert results[0]["next"] is None or body.get("rank_window") == 4
        assert results[-1]["next"] is None  # (a blank question: no hits, nothing to page)


def test_each_question_of_a_batch_pages_its_own_ranking(client):
    questions = [QUESTION, "when was the church built?"]
    r = client.post("/search?unit=passage", json={"queries": questions, "top_k": 2, "rank_window": 6})
    for q, result in zip(questions, r.json()["results"], strict=True):
        alone = ranking_of(client, "passage", {"query": q, "rank_window": 6}, 6, {})
        rest = client.post("/search", json={"cursor": result["next"], "top_k": 4}).json()["results"][0]
        # (the same hits; their scores within the last bits, as a batch encoded on torch gives them: docs/service.md)
        assert [spot(h) for h in result["hits"] + rest["hits"]] == [spot(h) for h in alone]
        assert rest["query"] == q and rest["next"] is None


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_pages_continue_the_first_page_s_ranking_across_writes(write_settings, unit):
    """A document written that ranks first, and a deleted one from a later page, do not move the cursor's pages:
    they are the ranking the first page was cut from (a new search sees the writes)."""
    with serving(create_app(write_settings())) as client:
        body = {"query": QUESTION, "top_k": 2, "rank_window": 6, "mode": "hybrid"}
        want = ranking_of(client, unit, body, 6)
        r = client.post(f"/search?unit={unit}", headers=KEY, json=body)
        first = r.json()["results"][0]
        doc = {"id": "new-1", "title": "Harbour", "paragraphs": [f"{QUESTION} In 1450 Gala built the harbour bridge."]}
        assert client.put("/documents", headers=KEY, json={"documents": [doc]}).status_code == 200
        assert client.delete(f"/documents/{want[-1]['doc_id']}", headers=KEY).status_code == 200
        rest = client.post("/search", headers=KEY, json={"cursor": first["next"], "top_k": 4}).json()["results"][0]
        assert first["hits"] + rest["hits"] == want
        assert ranking_of(client, unit, body, 6) != want  # the writes are searched


@pytest.mark.slow  # (a merge: 10 s on 2 busy cores)
def test_each_page_continues_the_first_page_s_ranking_whatever_changes_before_it(write_settings):
    """A page of each unit's ranking after each change of the index: a document written that ranks first, the first
    written document replaced (every segment row after it moves), one of the ranking's documents deleted, the segment
    merged into a new base (the base the first pages were searched on let go); each page is the next of its first
    page's ranking."""
    with serving(create_app(write_settings())) as client:
        live = client.app.state.service.live
        body = {"query": QUESTION, "top_k": 1, "rank_window": 6, "mode": "hybrid"}
        write = {"id": "new-1", "title": "Harbour", "paragraphs": [f"{QUESTION} In 1450 Gala built the harbour bridge."]}
        assert client.put("/documents", headers=KEY, json={"documents": [write]}).status_code == 200
        units = ("phrase", "passage", "doc")
        want = {unit: ranking_of(client, unit, body, 6) for unit in units}
        pages: dict[str, list] = {unit: [] for unit in units}
        cursors = {}
        for unit in units:
            first = client.post(f"/search?unit={unit}", headers=KEY, json=body).json()["results"][0]
            pages[unit].append(first["hits"])
            cursors[unit] = first["next"]
        changes = [lambda: client.put("/documents", headers=KEY, json={"documents": [{**write, "id": "new-2"}]}),
                   lambda: client.put("/documents", headers=KEY, json={"documents": [{**write, "title": "Again"}]}),
                   lambda: client.delete(f"/documents/{want['doc'][-1]['doc_id']}", headers=KEY),
                   lambda: client.post("/admin/compact", headers=KEY)]
        for change in changes:
            assert change().status_code in (200, 202)
            if live.merge_thread is not None:
                live.merge_thread.join(120)
            for unit in units:
                page = client.post("/search", headers=KEY, json={"cursor": cursors[unit]}).json()["results"][0]
                pages[unit].append(page["hits"])
                cursors[unit] = page["next"]
        assert live.store.state["merges"] == 1
        for unit in units:
            assert [h for page in pages[unit] for h in page] == want[unit][:len(changes) + 1], unit
        assert ranking_of(client, "doc", body, 6) != want["doc"]  # the changes are searched


@pytest.mark.slow  # (an index built to reload to: 2-3 s)
def test_pages_continue_the_first_page_s_ranking_across_a_reload(settings_for, tmp_path, tiny_model_dir):
    other = tmp_path / "corpus.jsonl"
    other.write_text("".join(json.dumps({**d, "id": "b" + d["id"][1:]}) + "\n" for d in make_corpus(seed=3, n_docs=3, n_paras=2)))
    build_index(other, tiny_model_dir, tmp_path / "b", BuildOptions(shard_passages=7, progress=False, precision="fp32"))
    with serving(create_app(settings_for(api_key="key"))) as client:
        body = {"query": QUESTION, "top_k": 2, "rank_window": 6}
        want = ranking_of(client, "passage", body, 6)
        first = client.post("/search?unit=passage", headers=KEY, json=body).json()["results"][0]
        r = client.post("/admin/reload", headers=KEY, json={"index": str(tmp_path / "b")})
        assert r.status_code == 200, r.text
        rest = client.post("/search?unit=passage", headers=KEY, json={"cursor": first["next"], "top_k": 4})
        assert first["hits"] + rest.json()["results"][0]["hits"] == want
        assert {h["doc_id"][0] for h in ranking_of(client, "passage", body, 6)} == {"b"}  # the new index is searched


def test_a_cursor_is_refused_naming_what_is_wrong(client):
    first = client.post("/search?unit=doc", json={"query": QUESTION, "top_k": 1, "rank_window": 3}).json()
    cursor = first["results"][0]["next"]
    cases = [
        ({"cursor": cursor, "query": QUESTION}, 422, "give a cursor alone or with top_k: its question and options are "
                                                    "the first page's (got query)"),
        ({"cursor": cursor, "mode": "dense", "offset": 1}, 422, "(got mode, offset)"),
        ({"cursor": "not a cursor"}, 422, "body.cursor: String should match pattern"),
        ({"cursor": cursor, "top_k": 0}, 400, "top_k must be between 1 and 100, got 0"),
        ({"cursor": "A" * 22 + ".0"}, 410, "this cursor's ranking is no longer kept"),
        ({}, 422, "give exactly one of 'query', 'queries' or 'cursor'"),
    ]
    for body, status, message in cases:
        r = client.post("/search", json=body)
        assert r.status_code == status and message in r.json()["message"], (body, r.text)
    r = client.post("/search?unit=passage", json={"cursor": cursor})
    assert r.status_code == 400 and "this cursor pages a unit=doc ranking" in r.json()["message"]
    assert client.post("/search?unit=doc", json={"cursor": cursor}).status_code == 200


def test_the_api_schema_lists_the_410_of_a_cursor_no_longer_kept(client):
    """/openapi.json names every error of POST /search that a client handles: a generated client learns the 410."""
    responses = client.get("/openapi.json").json()["paths"]["/search"]["post"]["responses"]
    assert responses["410"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")


def test_a_cursor_page_s_latency_is_counted_under_its_ranking_s_unit(client):
    """A page asked by its cursor alone (no ?unit=) is a request of its ranking's unit in the latency histogram (it
    was counted as a phrase search, its near-zero latency lowering the phrase unit's quantiles)."""
    def count(unit: str) -> float:
        text = client.get("/metrics").text
        line = f'spanseek_request_duration_seconds_count{{read="false",status="200",unit="{unit}"}}'
        return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))

    first = client.post("/search?unit=doc", json={"query": QUESTION, "top_k": 1, "rank_window": 3}).json()
    doc, phrase = count("doc"), count("phrase")
    assert client.post("/search", json={"cursor": first["results"][0]["next"]}).status_code == 200
    assert (count("doc"), count("phrase")) == (doc + 1, phrase)


def test_an_answer_refused_as_too_large_keeps_no_ranking(settings_for, tiny_searcher):
    """A first page refused once made (over max_response_bytes) keeps none of its rankings, which no client could page:
    they took the budget and pushed out the one being paged (here a budget of one ranking)."""
    app = create_app(settings_for(max_response_bytes=4096, cursor_cache_bytes=1), lambda s: tiny_searcher)
    with serving(app) as client:
        first = client.post("/search?unit=passage", json={"query": QUESTION, "top_k": 1, "rank_window": 3})
        assert first.status_code == 200, first.text
        r = client.post("/search?unit=passage", json={"queries": [QUESTION] * 3, "top_k": 4, "rank_window": 9,
                                                       "full_passage": True})
        assert r.status_code == 400 and r.json()["error"] == "response_too_large"
        r = client.post("/search", json={"cursor": first.json()["results"][0]["next"]})
        assert r.status_code == 200 and len(r.json()["results"][0]["hits"]) == 1


def _ranking(n: int, chars: int = 100) -> Ranking:
    hit = Hit(text="x", score=1.0, passage="p" * chars, passage_id=0, start=0, end=1, doc_id="d", title="t")
    return Ranking("passage", "q", False, [hit] * n, 2, None)


def kept(cursors: Cursors, ranking: Ranking) -> str | None:
    """``ranking`` kept, as the route keeps one: its cursor named, then kept; the cursor."""
    cursor = cursors.cursor(ranking)
    cursors.keep(cursor, ranking)
    return cursor


def test_rankings_expire_after_their_last_page_and_within_the_byte_budget():
    now = [0.0]
    cursors = Cursors(max_bytes=3 * _ranking(4).nbytes, ttl_s=10, clock=lambda: now[0])
    a = kept(cursors, _ranking(4))
    assert a is not None and kept(cursors, _ranking(0)) is None  # nothing to page
    now[0] = 8
    _, hits, after = cursors.page(a, None)  # paged: kept 10 s more
    assert len(hits) == 2 and after == a.replace(".0", ".2")
    b = kept(cursors, _ranking(4))
    now[0] = 17
    assert len(cursors.page(a, 5)[1]) == 4 and cursors.page(a, 5)[2] is None
    now[0] = 27.5  # b: 10 s after it was kept, a: 10 s after its last page
    with pytest.raises(CursorExpired):
        cursors.page(b, None)
    with pytest.raises(CursorExpired):
        cursors.page(a, None)
    newest = [kept(cursors, _ranking(4)) for _ in range(4)]  # over the budget: the least recently paged go first
    assert len(cursors) == 3 and cursors.nbytes == 3 * _ranking(4).nbytes
    with pytest.raises(CursorExpired):
        cursors.page(newest[0], None)
    huge = kept(cursors, _ranking(4, chars=10**6))  # alone over the budget: kept, the others dropped
    assert len(cursors) == 1 and cursors.page(huge, None)[1]
    assert Cursors(0, 10).cursor(_ranking(4)) is None and Cursors(10**6, 0).cursor(_ranking(4)) is None
