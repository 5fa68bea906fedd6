"""The ``filter`` field of ``POST /search`` and the ``paragraph`` of each hit, through HTTP on the tiny index.

Oracle: the searcher called with the same SearchFilter; malformed filters are 422 with the field named.

    .venv/bin/python -m pytest -q tests/service/test_filters_http.py
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from pydantic import ValidationError

from spanseek.core.filters import MAX_FILTER_DEPTH, Not
from spanseek.core.params import SearchFilter, SearchParams
from spanseek.service.app import create_app
from spanseek.service.schemas import MAX_FILTER_IDS, DeleteByFilterRequest, FilterIn
from tests.service.conftest import serving

QUESTION = "Who built the castle in 1500?"
FILTERS = [
    ({"doc_ids": ["d1", "d3", "nope"]}, SearchFilter(doc_ids=("d1", "d3", "nope"))),
    ({"title_prefix": "Title 2"}, SearchFilter(title_prefix="Title 2")),
    ({"doc_ids": ["d0", "d2"], "title_prefix": "Title"}, SearchFilter(doc_ids=("d0", "d2"), title_prefix="Title")),
    ({"should": [{"doc_ids": ["d1"]}, {"title_prefix": "Title 3"}], "must_not": [{"doc_ids": ["d3"]}]},
     SearchFilter(should=(SearchFilter(doc_ids=("d1",)), SearchFilter(title_prefix="Title 3")),
                  must_not=(SearchFilter(doc_ids=("d3",)),))),
    ({"must": [{"not": {"title_prefix": "Title 1"}}]}, SearchFilter(must=(Not(SearchFilter(title_prefix="Title 1")),))),
]


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
@pytest.mark.parametrize(("body", "flt"), FILTERS)
def test_filtered_search_matches_the_searcher(client, tiny_searcher, unit, body, flt):
    r = client.post(f"/search?unit={unit}", json={"query": QUESTION, "top_k": 3, "filter": body})
    assert r.status_code == 200, r.text
    hits = r.json()["results"][0]["hits"]
    expected = tiny_searcher.search([QUESTION], SearchParams(unit=unit, top_k=3, filter=flt))[0]
    assert [(h["doc_id"], h["passage_id"], h["paragraph"], h["start"]) for h in hits] == \
        [(h.doc_id, h.passage_id, h.paragraph, h.start) for h in expected]
    assert all(flt.matches(h["doc_id"], h["title"], h["meta"]) for h in hits)
    passing = [d for d in tiny_searcher.index.docs if flt.matches(d["id"], d["title"], d.get("meta", {}))]
    assert len(hits) == min(3, len(passing) if unit == "doc" else 3 * bool(passing))  # top_k filled


def test_hits_carry_their_paragraph(client, tiny_searcher):
    hits = client.post("/search?unit=passage", json={"query": QUESTION, "top_k": 10}).json()["results"][0]["hits"]
    index = tiny_searcher.index
    assert [h["paragraph"] for h in hits] == [index.passages[h["passage_id"]]["para"] for h in hits]
    assert any(h["paragraph"] > 0 for h in hits)


@pytest.mark.parametrize("flt", [
    "d1", ["d1"], {"doc_ids": "d1"}, {"doc_ids": [1]}, {"doc_ids": []}, {"title_prefix": 3},
    {"meta": {"lang": {"is": "en"}}}, {"meta": {"lang": ["en"]}}, {"meta": ["lang", "en"]}, {"unknown": 1},
    {"doc_ids": [f"d{i}" for i in range(MAX_FILTER_IDS + 1)]},
    {"must": [{"key": "year"}]}, {"must": [{"key": "year", "match": 1, "range": {"gte": 1}}]}, {"must": []},
    {"must": [{"key": "year", "range": {"gte": True}}]}, {"must": [{"key": "year", "range": {"from": 1}}]},
    {"should": [{"not": {"key": "x", "match": 1}, "extra": 1}]}, {"must": [{"key": "tags", "any": []}]},
    {"must": [{"passage": 3}]}, {"must": [{"passage": {"key": "page"}}]},
    {"must": [{"passage": {"key": "page", "match": 1}, "extra": 1}]}, {"must": [{"passage": {"doc_ids": ["d1"]}}]},
    {"must": [{"passage": {"should": [{"title_prefix": "T"}]}}]},
    {"must": [{"passage": {"not": {"passage": {"key": "page", "match": 1}}}}]},
])
def test_malformed_filters_are_422(client, flt):
    r = client.post("/search", json={"query": "a", "filter": flt})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "validation_error" and any("filter" in str(d) for d in r.json()["details"])
    assert client.post("/search", json={"query": "a", "filter": {"doc_ids": ["d1"]}}).status_code == 200


@pytest.mark.parametrize(("flt", "field", "message"), [
    ({"meta": {"lang": "en"}}, "lang", "no document has it"),  # the tiny corpus has no metadata
    ({"must": [{"not": {"key": "year", "range": {"gte": 2000}}}]}, "year", "no document has it"),
    # negated too: a misspelt key under must_not would exclude nothing, and the answer would look right
    ({"must_not": [{"key": "draft", "match": True}]}, "draft", "no document has it"),
    ({"must": [{"key": "date", "range": {"gte": "last week"}}]}, "date", "is not an ISO-8601 date"),
])
def test_unknown_fields_and_bad_dates_are_400_naming_the_field(client, flt, field, message):
    r = client.post("/search", json={"query": "a", "filter": flt})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request" and f"'{field}'" in r.json()["message"] and message in r.json()["message"]


@pytest.mark.parametrize("rng", [{}, {"gte": 2020, "lt": "2024-01-01"}, {"gt": "2024-01-01", "lte": 5.5},
                                 {"gte": None}])
def test_a_range_of_no_bound_or_of_mixed_bounds_is_a_malformed_filter(client, rng):
    """A range's shape (at least one bound, all numbers or all dates) is the schema's: 422 as a condition with two
    forms is, naming the range; it was a 400 from the filter's own check."""
    for flt in ({"must": [{"key": "year", "range": rng}]}, {"should": [{"not": {"key": "year", "range": rng}}]}):
        r = client.post("/search", json={"query": "a", "filter": flt})
        assert r.status_code == 422, r.text
        assert any("range" in str(d["loc"]) for d in r.json()["details"]), r.json()


@pytest.mark.parametrize("condition", [{"key": "year", "range": {"gte": 10**400}},
                                       {"key": "year", "range": {"gt": 1, "lt": -(10**400)}},
                                       {"key": "year", "match": 10**400}, {"key": "year", "any": [1, 10**400]}])
def test_a_number_no_float_holds_is_400_in_a_range_as_in_a_match(client, condition):
    """A number beyond a float's range is a value out of range, wherever in a filter it is (docs/service.md): a range
    bound of 400 digits was a 422 from the schema, which typed bounds as floats, while the same number in match was a
    400."""
    for flt in ({"must": [condition]}, {"meta": {"year": 10**400}} if "match" in condition else {"must": [condition]}):
        r = client.post("/search", json={"query": "a", "filter": flt})
        assert r.status_code == 400, r.text
        assert r.json()["error"] == "bad_request" and "'year'" in r.json()["message"]
        assert "1.8e308" in r.json()["message"], r.json()["message"]


def test_info_counts_deleted_documents(client):
    index = client.get("/info").json()["index"]
    assert index["deleted_documents"] == 0 and index["documents"] == 6


def _nested(levels: int, inner: dict | None = None) -> dict:
    """A filter of ``levels`` nested filters around ``inner`` (a one-id filter: a level itself)."""
    flt = inner or {"doc_ids": ["d1"]}
    for _ in range(levels - 1):
        flt = {"must": [flt]}
    return flt


def _leaves(n: int) -> list[dict]:
    return [{"doc_ids": ["d1"]}] * n


@pytest.mark.parametrize(("flt", "limit"), [
    (_nested(MAX_FILTER_DEPTH + 1), f"nested too deeply: more than {MAX_FILTER_DEPTH} levels"),
    (_nested(300), f"nested too deeply: more than {MAX_FILTER_DEPTH} levels"),  # was pydantic's recursion error
    ({"must": [_nested(MAX_FILTER_DEPTH, {"not": {"key": "year", "match": 1}})]}, "nested too deeply"),
    # each list within its own limit, the filter over it in all: 1 + 2 x (1 + 512) conditions
    ({"must": [{"must": _leaves(512)}, {"should": _leaves(512)}]}, "too large: 1027 conditions (at most 1024 in all"),
    ({"must": _leaves(600), "should": _leaves(600)}, "too large: 1201 conditions (at most 1024 in all"),
])
def test_a_filter_too_deep_or_too_large_is_422_naming_the_filter_and_the_limit(client, flt, limit):
    """A filter over the depth or the size a filter may have is malformed, as a list too long is: a 422 naming the
    filter and the limit (it was a 400 from the core filter's own check). A delete by filter reads the same schema."""
    r = client.post("/search", json={"query": "a", "filter": flt})
    assert r.status_code == 422, r.text
    details = r.json()["details"]
    assert r.json()["error"] == "validation_error" and len(details) == 1, details
    assert details[0]["loc"] == ["body", "filter"] and f"filter {limit}" in details[0]["msg"], details
    assert f"body.filter: Value error, filter {limit}" in r.json()["message"]
    with pytest.raises(ValidationError) as refused:
        DeleteByFilterRequest.model_validate({"filter": flt})
    assert [(e["loc"], f"filter {limit}" in e["msg"]) for e in refused.value.errors()] == [(("filter",), True)]


@pytest.mark.parametrize("flt", [
    _nested(MAX_FILTER_DEPTH), _nested(MAX_FILTER_DEPTH - 1, {"not": {"doc_ids": ["d1"]}}),
    {"must": [{"must": _leaves(511)}, {"should": _leaves(510)}]},  # 1 + 512 + 511: the limit exactly
])
def test_a_filter_at_the_limits_is_searched(client, flt):
    """The schema counts as the core filter does: a filter at its limits is answered, not refused by either."""
    r = client.post("/search", json={"query": "a", "filter": flt})
    assert r.status_code == 200, r.text


async def test_a_filter_is_made_off_the_event_loop(settings_for, tiny_searcher, async_serve, until, monkeypatch):
    """A request's filter is turned into the core filter on a worker thread: while one is converted (held here), the
    event loop answers another client's search. Made on the loop, a filter of 1 MB held every client for its
    conversion (and this conversion until its wait ran out). A filter the core refuses is still a 400 naming it."""
    convert, entered, gate, released = FilterIn.to_filter, threading.Event(), threading.Event(), []

    def held(self: FilterIn) -> SearchFilter:
        entered.set()
        released.append(gate.wait(10))  # on the loop's thread this would hold every request, this test's too
        return convert(self)

    monkeypatch.setattr(FilterIn, "to_filter", held)
    async with async_serve(create_app(settings_for(), lambda s: tiny_searcher)) as client:
        filtered = asyncio.create_task(client.post("/search", json={"query": QUESTION, "filter": {"doc_ids": ["d1"]}}))
        await until(entered.is_set)
        plain = await client.post("/search", json={"query": QUESTION})
        gate.set()
        assert plain.status_code == 200 and (await filtered).status_code == 200
        assert released == [True]  # let go by this test, after the plain search was answered
        bad = {"must": [{"key": "d", "range": {"gte": "someday"}}]}  # refused by the core filter, not the schema
        r = await client.post("/search", json={"query": "a", "filter": bad})
        assert r.status_code == 400 and "'d'" in r.json()["message"] and "not an ISO-8601" in r.json()["message"]


@pytest.mark.parametrize(("body", "where", "takes"), [
    ({"collapse_duplicates": "Near"}, "body.collapse_duplicates", "true, false, 'exact' or 'near'"),
    ({"collapse_duplicates": None}, "body.collapse_duplicates", "true, false, 'exact' or 'near'"),
    ({"filter": {"must": [{"key": "year", "match": [1901]}]}}, "body.filter.must.0.field.match",
     "a string, a number, true, false or null"),
    ({"filter": {"must": [{"key": "tags", "any": ["a", {"b": 1}]}]}}, "body.filter.must.0.field.any.1",
     "a string, a number, true, false or null"),
    ({"filter": {"meta": {"lang": ["en"]}}}, "body.filter.meta.lang", "a string, a number, true, false or null"),
    ({"filter": {"must": [{"key": "year", "range": {"gte": True}}]}}, "body.filter.must.0.field.range.gte",
     "a number or an ISO-8601 date or datetime string"),
])
def test_a_value_of_none_of_a_fields_types_is_one_error_naming_all_it_takes(client, body, where, takes):
    """A value that fits none of a field's types is one error at the field, naming every kind of value it takes (it
    was one error per type, at places named after them, and the message named the first: a "Near" given for
    collapse_duplicates read "body.collapse_duplicates.bool: Input should be a valid boolean")."""
    r = client.post("/search", json={"query": "a", **body})
    assert r.status_code == 422, r.text
    assert r.json()["message"] == f"the request does not match the API schema: {where}: Input should be {takes}"
    assert [".".join(map(str, d["loc"])) for d in r.json()["details"]] == [where]


@pytest.mark.parametrize(("flt", "place"), [
    ({"must": [{"key": "date", "range": {"gte": "2024-01-01"}}, {"key": "date", "range": {"lt": "2024"}}]},
     "filter.must[1]: range on 'date': lt '2024'"),
    ({"should": [{"must_not": [{"key": "date", "range": {"gt": "2024-02-30"}}]}]},
     "filter.should[0].must_not[0]: range on 'date'"),
    ({"must": [{"not": {"key": "year", "range": {"lte": 1e400}}}]}, "filter.must[0].not: range on 'year'"),
    # and what the index's fields refuse (the tiny corpus has no metadata)
    ({"must": [{"meta": {"lang": "en"}}]}, "filter.must[0]: filter field 'lang': no document has it"),
    ({"meta": {"lang": "en"}}, "filter field 'lang': no document has it"),  # its key names it in the filter
    ({"must": [{"doc_ids": ["d1"]}], "should": [{"must_not": [{"not": {"key": "year", "match": 1}}]}]},
     "filter.should[0].must_not[0].not: filter field 'year': no document has it"),
    ({"must": [{"doc_ids": ["d1"]}, {"passage": {"key": "page", "range": {"gte": 10, "lte": 20}}}]},
     "filter.must[1].passage: filter field 'page': no passage has it in its own metadata"),
])
def test_a_value_a_condition_refuses_is_400_naming_its_place_in_the_filter(client, flt, place):
    """A value the filter refuses past its schema (a date that does not parse, a number beyond a float's) is a 400
    naming the condition's place, so that one of several conditions on one field is found (it named the field
    alone)."""
    r = client.post("/search", content=json.dumps({"query": "a", "filter": flt}).replace("Infinity", "1e400"),
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith(place), r.json()["message"]


def test_a_passage_filter_searches_matching_passages_and_pages_on_with_next(settings_for, paged_index, tiny_model_dir):
    """``{"passage": ...}`` selects passages by their own metadata: every hit, on the first page and on the pages of
    its ``next`` cursor, lies on page 2 or 3; a passage key the passages lack is a 400 naming its place."""
    from spanseek.core.loading import open_searcher

    searcher = open_searcher(paged_index, tiny_model_dir, device="cpu", precision="fp32")
    flt = {"must": [{"passage": {"key": "page", "range": {"gte": 2, "lte": 3}}}], "meta": {"lang": "en"}}
    with serving_app(settings_for(), searcher) as client:
        seen = []
        body = {"query": QUESTION, "top_k": 2, "filter": flt, "rank_window": 20}
        r = client.post("/search?unit=passage", json=body)
        while True:
            assert r.status_code == 200, r.text
            result = r.json()["results"][0]
            seen += [(h["doc_id"], h["paragraph"], h["meta"]) for h in result["hits"]]
            if not result.get("next"):
                break
            r = client.post("/search?unit=passage", json={"cursor": result["next"]})
        assert len(seen) == 6  # 3 documents in English, 2 pages each
        assert all(m["page"] in (2, 3) and m["lang"] == "en" for _, _, m in seen)
        assert len(set((d, p) for d, p, _ in seen)) == 6
        r = client.post("/search", json={"query": "a", "filter": {"must": [{"passage": {"key": "pages", "match": 2}}]}})
        assert r.status_code == 400 and r.json()["message"].startswith(
            "filter.must[0].passage: filter field 'pages': no passage has it in its own metadata (known passage "
            "fields: page, section)"), r.text


def test_a_passage_filter_reads_written_documents_passages_and_a_delete_refuses_it(write_settings):
    """Live writes: a written document's passages are filtered by their own metadata (the segment's field index),
    with the base's (which has none: only the written passages pass); a delete by a passage condition is a 400,
    since a delete removes whole documents."""
    key = {"X-API-Key": "key"}
    doc = {"id": "manual", "title": "Manual", "paragraphs": ["In 1450 Gala built the harbour bridge.",
                                                             "In 1460 Hugo built the island church.",
                                                             "In 1470 Ada built the castle."],
           "passage_meta": [{"page": 1}, {"page": 2}, {"page": 3, "section": "castles"}]}
    with serving_app(write_settings()) as client:
        assert client.put("/documents", headers=key, json={"documents": [doc]}).status_code == 200
        for flt, pages in [({"must": [{"passage": {"key": "page", "range": {"gte": 2}}}]}, {2, 3}),
                           ({"must": [{"passage": {"key": "section", "match": "castles"}}]}, {3}),
                           ({"must_not": [{"passage": {"key": "page", "any": [1, 3]}}], "doc_ids": ["manual"]}, {2})]:
            for unit in ("phrase", "passage", "doc"):
                r = client.post(f"/search?unit={unit}", headers=key,
                                json={"query": "who built it?", "top_k": 10, "filter": flt})
                assert r.status_code == 200, r.text
                hits = r.json()["results"][0]["hits"]
                assert hits and {h["doc_id"] for h in hits} == {"manual"}, (flt, unit)
                assert {h["meta"]["page"] for h in hits} <= pages and (unit == "phrase" or len(hits) == (
                    len(pages) if unit == "passage" else 1)), (flt, unit, hits)
        r = client.post("/documents/delete", headers=key,
                        json={"filter": {"must": [{"passage": {"key": "page", "match": 2}}]}})
        assert r.status_code == 400 and "a passage condition selects passages" in r.json()["message"], r.text


def serving_app(settings, searcher=None):
    """A ready client of an app with ``settings`` (over ``searcher`` when given, else the settings' index)."""
    return serving(create_app(settings, (lambda s: searcher) if searcher is not None else None))


def test_a_hit_s_meta_says_which_metadata_a_passage_condition_reads(client):
    """The schema's description of a hit's ``meta`` (also the client's help) names what a filter reads there: the
    document's keys, and inside a ``passage`` condition the passage's own."""
    hit = client.get("/openapi.json").json()["components"]["schemas"]["HitOut"]["properties"]["meta"]
    assert "a passage condition the passage's own" in hit["description"], hit



def test_an_old_index_s_passage_fields_are_built_off_the_event_loop(settings_for, paged_index, tiny_model_dir,
                                                                    monkeypatch):
    """An index whose ``doc_fields.npz`` was written before it held the passages' metadata builds those fields at the
    first passage condition (O(passages): 1.7 s a million passages with two keys). That happens where the request's
    filter is checked, in a worker thread as the filter's conversion, not on the event loop that every other
    request waits on."""
    from spanseek.core import fieldindex
    from spanseek.core.loading import open_searcher

    searcher = open_searcher(paged_index, tiny_model_dir, device="cpu", precision="fp32")
    fields = searcher.index.fields
    fields._passage_fields, fields._passage_records = None, searcher.index.passages  # as read from an older file
    on_loop = []
    build = fieldindex.fields_of

    def recorded(metas):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return build(metas)

    monkeypatch.setattr(fieldindex, "fields_of", recorded)
    flt = {"must": [{"passage": {"key": "page", "range": {"gte": 2, "lte": 3}}}]}
    with serving_app(settings_for(), searcher) as client:
        r = client.post("/search?unit=passage", json={"query": QUESTION, "top_k": 3, "filter": flt})
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["hits"]
    assert on_loop == [False]
