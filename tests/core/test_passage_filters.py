"""Filters on a passage's own metadata (``{"passage": {...}}``): the field index against a brute-force scan, and
searches in every unit and mode against the unfiltered search restricted to the passages that pass.

Oracle: ``tests.core.test_field_index``'s evaluator of a filter's JSON form, applied to each passage's own metadata
inside a ``passage`` condition and to its document's elsewhere; it must agree with ``FieldIndex.passage_mask``
(built, saved and loaded, joined from parts as a live index's is) over random passage metadata and random filters.

    .venv/bin/python -m pytest -q tests/core/test_passage_filters.py
"""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from spanseek.core.fieldindex import FieldIndex, JoinedFieldIndex
from spanseek.core.filters import FilterError, Match, Passage, Range, SearchFilter
from spanseek.core.params import SearchParams
from tests.core.test_field_index import oracle, random_docs, random_filter, random_leaf

PASSAGES_PER_DOC = (0, 1, 3, 5)


def random_passages(seed: int, n_docs: int) -> list[dict]:
    """Passage records (``passages.jsonl``'s ``doc`` and ``meta``) of ``n_docs`` documents, whose own metadata has
    the same keys and kinds as ``random_docs``' (a passage without any: no ``meta``)."""
    rng = random.Random(seed)
    metas = iter(random_docs(seed + 100, n_docs * max(PASSAGES_PER_DOC)))
    out = []
    for d in range(n_docs):
        for _ in range(rng.choice(PASSAGES_PER_DOC)):
            meta = next(metas).get("meta")
            out.append({"doc": d, **({"meta": meta} if meta else {})})
    return out


def passage_oracle(cond: dict, doc: dict, passage: dict) -> bool:
    """Whether a passage of ``doc`` passes ``cond`` (JSON): a ``passage`` condition reads its own metadata."""
    if "passage" in cond:
        return oracle(cond["passage"], {"id": doc["id"], "title": doc["title"], "meta": passage.get("meta", {})})
    if "not" in cond:
        return not passage_oracle(cond["not"], doc, passage)
    own = {k: v for k, v in cond.items() if k not in ("must", "should", "must_not")}
    ok = oracle(own, doc)
    ok &= all(passage_oracle(c, doc, passage) for c in cond.get("must", []))
    ok &= "should" not in cond or any(passage_oracle(c, doc, passage) for c in cond["should"])
    return ok and not any(passage_oracle(c, doc, passage) for c in cond.get("must_not", []))


def passage_leaf(rng: random.Random) -> dict:
    """A condition on a passage's own metadata: a random field condition (not ids or a title) inside ``passage``."""
    leaf = random_leaf(rng)
    while "doc_ids" in json.dumps(leaf) or "title_prefix" in json.dumps(leaf):
        leaf = random_leaf(rng)
    return {"passage": leaf}


def random_passage_filter(rng: random.Random, depth: int = 0) -> dict:
    """A random nested filter of document conditions and passage conditions (in every part, under ``not``)."""
    out = random_filter(rng, 2)  # document conditions, a level deep
    for part in ("must", "should", "must_not"):
        if rng.random() < 0.6:
            extra = [passage_leaf(rng) if rng.random() < 0.7 else {"not": passage_leaf(rng)}
                     for _ in range(rng.randrange(1, 3))]
            if depth < 2 and rng.random() < 0.3:
                extra.append(random_passage_filter(rng, depth + 1))
            out[part] = out.get(part, []) + extra
    return out


@pytest.fixture(scope="module")
def store() -> tuple[list[dict], list[dict]]:
    docs = random_docs(seed=11, n=120)
    return docs, random_passages(seed=11, n_docs=len(docs))


def _joined(docs: list[dict], passages: list[dict]) -> JoinedFieldIndex:
    """A base and two runs of documents, as a live snapshot joins them (each part numbers its passages from 0)."""
    parts, first = [], 0
    for last in (50, 90, len(docs)):
        own = [{**p, "doc": p["doc"] - first} for p in passages if first <= p["doc"] < last]
        parts.append(FieldIndex.build(docs[first:last], own))
        first = last
    return JoinedFieldIndex(*parts)


@pytest.fixture(scope="module", params=["built", "saved and loaded", "joined"])
def fields(request, store, tmp_path_factory):
    docs, passages = store
    if request.param == "joined":
        return _joined(docs, passages)
    built = FieldIndex.build(docs, passages)
    if request.param == "built":
        return built
    path = tmp_path_factory.mktemp("fields") / "doc_fields.npz"
    built.save(path)
    return FieldIndex.load(path, docs, passages)


@pytest.mark.parametrize("seed", range(6))
def test_random_passage_filters_select_what_a_scan_selects(store, fields, seed):
    docs, passages = store
    passage_doc = np.asarray([p["doc"] for p in passages], dtype=np.int64)
    rng = random.Random(seed)
    sizes, of_passages = [], 0
    for _ in range(40):
        obj = random_passage_filter(rng)
        flt = SearchFilter.from_json(obj)
        of_passages += flt.reads_passages
        want = np.array([passage_oracle(obj, docs[p["doc"]], p) for p in passages])
        got = fields.passage_mask(flt, passage_doc)
        assert got.dtype == bool and got.shape == (len(passages),)
        assert np.array_equal(got, want), obj
        by_definition = [flt.matches(docs[p["doc"]]["id"], docs[p["doc"]]["title"], docs[p["doc"]].get("meta", {}),
                                     p.get("meta", {})) for p in passages]
        assert by_definition == want.tolist(), obj
        assert SearchFilter.from_json(json.loads(json.dumps(flt.to_json()))) == flt
        sizes.append(int(want.sum()))
    assert min(sizes) < len(passages) // 4 and max(sizes) > len(passages) // 2  # the filters select few and many
    assert of_passages > 30


def test_a_document_filter_over_passages_is_its_documents_passages(store, fields):
    """A filter without a passage condition selects every passage of the documents it selects, as before."""
    docs, passages = store
    passage_doc = np.asarray([p["doc"] for p in passages], dtype=np.int64)
    rng = random.Random(3)
    for _ in range(30):
        flt = SearchFilter.from_json(random_filter(rng))
        assert not flt.reads_passages
        assert np.array_equal(fields.passage_mask(flt, passage_doc), fields.documents_of(flt)[passage_doc])


def test_an_old_field_index_file_builds_the_passage_fields_when_first_asked(store, tmp_path):
    """A ``doc_fields.npz`` written before passage fields were kept in it (no ``passage_fields`` in its header) is
    read, and its passage fields are built from the passage records at the first passage condition."""
    docs, passages = store
    path = tmp_path / "doc_fields.npz"
    FieldIndex.build(docs, passages).save(path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if not k.startswith("p")}
    header = json.loads(arrays["header"].tobytes())
    del header["passage_fields"], header["passages"]
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    old = FieldIndex.load(path, docs, passages)
    assert old._passage_fields is None
    flt = SearchFilter(must=(Passage(Range("year", gte=2000)),))
    passage_doc = np.asarray([p["doc"] for p in passages], dtype=np.int64)
    assert np.array_equal(old.passage_mask(flt, passage_doc), FieldIndex.build(docs, passages).passage_mask(
        flt, passage_doc))


def test_two_threads_asking_for_an_old_field_index_s_passage_fields_build_them_once(store, monkeypatch):
    """The passage fields an older file lacks are built once however many threads ask at once (a server checks each
    request's filter in a worker thread): a second build cost its CPU again, and one that began as the first ended
    read the passage records the first had let go, and left no passage fields at all."""
    import threading

    from spanseek.core import fieldindex

    docs, passages = store
    old = FieldIndex.build(docs, passages)  # (its passage fields are built when first asked)
    calls, second, build = [], threading.Event(), fieldindex.fields_of

    def slow(metas):
        calls.append(1)
        if len(calls) == 1:
            second.wait(0.5)  # the other thread asks meanwhile
        else:
            second.set()
        return build(metas)

    monkeypatch.setattr(fieldindex, "fields_of", slow)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(old.passage_fields)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 2 and got[0] is got[1]
    assert sorted(got[0]) == sorted(FieldIndex.build(docs, passages).passage_fields) != []


@pytest.mark.parametrize("obj, message", [
    ({"must": [{"passage": {"key": "pages", "match": 1}}]},
     "filter.must[0].passage: filter field 'pages': no passage has it in its own metadata (known passage fields: "),
    ({"must": [{"not": {"passage": {"key": "year", "range": {"gte": "2020-01-01"}}}}]},
     "filter.must[0].not.passage: filter field 'year': a range of ISO-8601 dates, but the field holds number"),
    ({"must": [{"passage": {"key": "lang", "range": {"gte": 1}}}]},
     "filter.must[0].passage: filter field 'lang': a range of numbers, but the field holds string"),
])
def test_passage_conditions_are_checked_against_the_passages_fields(store, obj, message):
    docs, passages = store
    fields = FieldIndex.build(docs, passages)
    flt = SearchFilter.from_json(obj)
    with pytest.raises(FilterError) as refused:
        fields.check(flt)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("obj, message", [
    ({"must": [{"passage": {"doc_ids": ["a"]}}]}, "filter.must[0]: passage: doc_ids is a condition on documents"),
    ({"should": [{"passage": {"must": [{"title_prefix": "A"}]}}]},
     "filter.should[0]: passage.must[0]: title_prefix is a condition on documents"),
    ({"must": [{"passage": {"not": {"passage": {"key": "page", "match": 1}}}}]},
     "filter.must[0]: passage.not: a passage condition inside another"),
    ({"must": [{"passage": {"key": "page", "match": 1}, "key": "x"}]},
     "filter.must[0]: a passage condition has no other keys"),
    ({"must": [{"passage": [1]}]}, "filter.must[0].passage: expected a JSON object"),
])
def test_malformed_passage_conditions_name_their_place(obj, message):
    with pytest.raises(FilterError) as refused:
        SearchFilter.from_json(obj)
    assert str(refused.value).startswith(message)


def test_a_filter_too_large_counts_its_passage_conditions_and_says_so():
    """A ``passage`` condition counts one toward the filter's size, as a filter or ``not`` does, and the refusal lists
    it among what counts: 512 passage conditions over a field condition each, in one filter, are 1,025."""
    with pytest.raises(FilterError) as refused:
        SearchFilter.from_json({"must": [{"passage": {"key": "page", "match": p}} for p in range(512)]})
    assert str(refused.value).startswith("filter too large: 1025 conditions (at most 1024 in all; every filter, not, "
                                         "passage and field condition counts"), str(refused.value)


def test_a_delete_by_filter_refuses_a_passage_condition(store):
    docs, passages = store
    with pytest.raises(FilterError, match="a passage condition selects passages, not whole documents"):
        FieldIndex.build(docs, passages).documents_of(SearchFilter(must=(Passage(Match("lang", "en")),)))


# --- searches over an index with passage metadata --------------------------------------------------------------


@pytest.fixture(scope="module")
def paged_searcher(paged_index, tiny_model_dir):
    from spanseek.core.loading import open_searcher

    return open_searcher(paged_index, tiny_model_dir, device="cpu", precision="fp32")


QUESTIONS = ["Who built the castle?", "When was the railway bridge built?", "What did the poet write?"]
FILTERS = [
    {"must": [{"passage": {"key": "page", "range": {"gte": 2, "lte": 3}}}]},
    {"must": [{"passage": {"key": "section", "match": "s1"}}], "meta": {"lang": "en"}},
    {"should": [{"passage": {"key": "page", "match": 4}}, {"key": "lang", "match": "fr"}]},
    {"must_not": [{"passage": {"key": "section", "any": ["s0", "s2"]}}]},
]


def _allowed(index, obj: dict) -> np.ndarray:
    """(P,) bool: the passages that pass, by the oracle, one passage at a time."""
    return np.array([passage_oracle(obj, index.docs[p["doc"]], p) for p in index.passages])


def _key(hit) -> tuple:
    return hit.passage_id, hit.start, hit.end


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_passage_filter_returns_only_matching_passages_in_every_unit_and_mode(paged_searcher, unit, mode):
    """Every hit lies in a passage that passes; a phrase or passage search returns the unfiltered ranking of the
    passages that pass, with their scores; a document scores by its passages that pass only (its best passage's
    score), and the search is filled to ``top_k`` where enough units pass."""
    index = paged_searcher.index
    deep = SearchParams(unit="passage", mode=mode, top_k=len(index.passages))
    for obj in FILTERS:
        allowed = _allowed(index, obj)
        flt = SearchFilter.from_json(obj)
        params = SearchParams(unit=unit, mode=mode, top_k=5, filter=flt,
                              **({"merge_answers": False} if unit == "phrase" else {}))
        got = paged_searcher.search(QUESTIONS, params)
        if unit == "phrase":
            whole = paged_searcher.search(QUESTIONS, dataclasses.replace(params, filter=None, top_k=200))
        else:
            whole = paged_searcher.search(QUESTIONS, deep)
        for hits, every in zip(got, whole, strict=True):
            assert hits and all(allowed[h.passage_id] for h in hits), obj
            kept = [h for h in every if allowed[h.passage_id]]  # the unfiltered ranking of the passages that pass
            if unit == "doc":
                best: dict[str, float] = {}
                for h in kept:  # each document's best passage that passes
                    best.setdefault(h.doc_id, h.score)
                assert len(hits) == min(5, len(best)), obj
                if mode != "hybrid":  # (hybrid fuses over the filter's candidates: no unfiltered score to compare)
                    assert [(h.doc_id, round(h.score, 4)) for h in hits] == [
                        (d, round(s, 4)) for d, s in list(best.items())[:5]], obj
            else:
                assert len(hits) == min(5, len(kept)), obj
                if not (unit == "phrase" and mode == "hybrid"):  # (phrases fuse over a basis of the search's depth)
                    assert [(_key(h), round(h.score, 4)) for h in hits] == [
                        (_key(h), round(h.score, 4)) for h in kept[:5]], obj


def test_a_passage_filter_pages_with_a_cursor_in_the_filter(paged_searcher):
    """Deeper pages (offset) of a passage-filtered search continue its ranking, in matching passages only."""
    index = paged_searcher.index
    obj = FILTERS[0]
    allowed = _allowed(index, obj)
    flt = SearchFilter.from_json(obj)
    whole = paged_searcher.search(QUESTIONS, SearchParams(unit="passage", mode="dense", top_k=12, filter=flt))
    for offset in (0, 4, 8):
        page = paged_searcher.search(QUESTIONS, SearchParams(unit="passage", mode="dense", top_k=4, offset=offset,
                                                             filter=flt))
        for hits, every in zip(page, whole, strict=True):
            assert [h.passage_id for h in hits] == [h.passage_id for h in every[offset:offset + 4]]
            assert all(allowed[h.passage_id] for h in hits)
