"""Search filters (document ids, title prefix, metadata equality) against a brute-force oracle.

Oracle: search everything with a top_k large enough to return every unit, keep the hits whose document passes the
filter (in Python), and compare the first top_k with the filtered search (dense and lexical modes; hybrid passages
and documents, whose fusion depends on the depth of the list, against a filtered search ranked as deep; hybrid
phrases: every hit must pass and top_k must be filled). The index has a deleted document too: the filter and the
deletion mask combine.

    .venv/bin/python -m pytest -q tests/core/test_filters.py
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from spanseek.core.filters import MAX_FILTER_CONDITIONS, MAX_FILTER_DEPTH, FilterError
from spanseek.core.params import SearchFilter, SearchParams, SearchParamsError
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.plan import Plan, StageTimes
from spanseek.core.ranking import Ranking
from spanseek.core.search import Searcher
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.lifecycle import delete_documents
from tests.conftest import make_corpus

QUESTIONS = ["Who built the castle in 1500?", "When did Cato build the bridge?", "Which river and mountain?",
             "the king and the queen"]
DELETED = "d7"
FILTERS = {
    "ids": SearchFilter(doc_ids=("d2", "d5", "d9", DELETED, "unknown")),
    "prefix": SearchFilter(title_prefix="Title 1"),  # Title 1, Title 10, Title 11
    "meta": SearchFilter(meta={"lang": "en"}),  # type: ignore[arg-type]  (a mapping is accepted)
    "meta two keys": SearchFilter(meta={"lang": "fr", "year": 2001}),  # type: ignore[arg-type]
    "all three": SearchFilter(doc_ids=("d1", "d3", "d4", "d10"), title_prefix="Title 1", meta=(("lang", "en"),)),
    "nothing": SearchFilter(meta=(("lang", "xx"),)),
    "deleted only": SearchFilter(doc_ids=(DELETED,)),
}


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, tiny_model_dir):
    d = tmp_path_factory.mktemp("filters")
    docs = make_corpus(seed=21, n_docs=12, n_paras=3)
    for i, doc in enumerate(docs):
        doc["meta"] = {"lang": "en" if i % 2 else "fr", "year": 2000 + i % 3, "draft": i % 4 == 0}
    (d / "c.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs))
    build_index(d / "c.jsonl", tiny_model_dir, d / "idx",
                BuildOptions(factory="Flat", progress=False, precision="fp32", gpu=False))
    delete_documents(d / "idx", [DELETED])
    return Searcher(PhraseIndex(d / "idx"))


def _vectors(searcher: Searcher):
    rng = np.random.default_rng(1)
    shape = (len(QUESTIONS), searcher.index.vectors.shape[1])
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def _search(searcher: Searcher, **params):
    qs, qe = _vectors(searcher)
    return searcher.search_vectors(qs, qe, SearchParams(**params), questions=QUESTIONS)


def _passes(searcher: Searcher, flt: SearchFilter, doc_id: str) -> bool:
    doc = next(d for d in searcher.index.docs if d["id"] == doc_id)
    return doc_id != DELETED and flt.matches(doc["id"], doc["title"], doc.get("meta", {}))


def _fill(searcher: Searcher, flt: SearchFilter, unit: str, top_k: int) -> int:
    """How many hits a search that fills top_k returns: top_k, or fewer when fewer units pass."""
    index = searcher.index
    docs = [i for i, d in enumerate(index.docs) if _passes(searcher, flt, d["id"])]
    passages = [p for p in index.passages if p["doc"] in docs]
    return min(top_k, {"phrase": top_k * bool(docs), "passage": len(passages), "doc": len(docs)}[unit])


def _key(hit):
    return hit.doc_id, hit.passage_id, hit.start, hit.end, round(hit.score, 4)


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
@pytest.mark.parametrize("mode", ["dense", "lexical"])
@pytest.mark.parametrize("name", FILTERS)
def test_filters_match_the_brute_force_oracle(searcher, name, mode, unit):
    flt, top_k = FILTERS[name], 3
    everything = _search(searcher, unit=unit, mode=mode, top_k=100_000)
    filtered = _search(searcher, unit=unit, mode=mode, top_k=top_k, filter=flt)
    # Phrases are found from the top max(32, 2 top_k) start and end tokens (in both searches alike), so a shallow
    # phrase search may miss a span that completing every token finds: the phrase oracle compares searches deep
    # enough to complete every token, and checks that the shallow one's hits are true spans with their scores.
    deep = filtered if unit != "phrase" else _search(searcher, unit=unit, mode=mode, top_k=100_000, filter=flt)
    for hits, got, shallow in zip(everything, deep, filtered, strict=True):
        want = [h for h in hits if _passes(searcher, flt, h.doc_id)]
        assert [_key(h) for h in got[:top_k]] == [_key(h) for h in want[:top_k]]
        assert {_key(h) for h in shallow} <= {_key(h) for h in want}
    if name in ("nothing", "deleted only"):
        assert not any(filtered)
    elif mode == "dense":  # every unit has phrases: top_k is filled whenever that many units pass
        assert all(len(hits) == _fill(searcher, flt, unit, top_k) for hits in filtered)


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
@pytest.mark.parametrize("name", FILTERS)
def test_hybrid_honours_filters_and_fills_top_k(searcher, name, unit):
    flt = FILTERS[name]
    expected = _fill(searcher, flt, unit, 3)
    for hits in _search(searcher, unit=unit, mode="hybrid", top_k=3, filter=flt):
        assert all(_passes(searcher, flt, h.doc_id) for h in hits)
        assert len(hits) == expected


def test_merged_answers_honour_filters(searcher):
    flt = FILTERS["meta"]
    for hits in _search(searcher, unit="phrase", top_k=5, merge_answers=True, filter=flt, mode="dense"):
        assert len(hits) == 5 and all(_passes(searcher, flt, h.doc_id) for h in hits)


def test_true_and_1_are_different_filters_for_the_cache_and_for_batching(searcher):
    """``true`` and ``1`` compare and hash equal in Python: as filters (selection cache keys, batch grouping keys)
    they must not, or one request's filter answers another's (here: a boolean field refuses the number)."""
    as_bool, as_int = SearchFilter(meta={"draft": True}), SearchFilter(meta={"draft": 1})  # type: ignore[arg-type]
    assert as_bool != as_int and SearchParams(filter=as_bool) != SearchParams(filter=as_int)
    assert len({as_bool: 0, as_int: 1}) == 2 and SearchFilter(meta={"year": 2001}) == SearchFilter(meta={"year": 2001.0})
    for first, second in [(as_bool, as_int), (as_int, as_bool)]:
        searcher._selections.recent.clear()
        for flt in (first, second):
            if flt is as_int:  # the drafts are booleans: a number is refused, cached boolean selection or not
                with pytest.raises(FilterError, match="'draft': 1 is a number, but the field holds boolean"):
                    _search(searcher, unit="doc", mode="dense", top_k=5, filter=flt)
            else:
                hits = _search(searcher, unit="doc", mode="dense", top_k=5, filter=flt)
                assert all(hits) and all(h.doc_id in {"d0", "d4", "d8"} for r in hits for h in r)


def test_filters_are_hashable_values_and_validated():
    a = SearchFilter(doc_ids=["b", "a", "b"], meta={"y": 1, "x": "s"})  # type: ignore[arg-type]
    b = SearchFilter(doc_ids=("a", "b"), meta=(("x", "s"), ("y", 1)))
    assert a == b and hash(SearchParams(filter=a)) == hash(SearchParams(filter=b))
    assert a.doc_ids == ("b", "a") and a.meta == (("x", "s"), ("y", 1))  # each id once, in the order given
    assert SearchFilter(meta=(("draft", True),)).matches("d", "t", {"draft": True})
    assert not SearchFilter(meta=(("draft", True),)).matches("d", "t", {"draft": 1})  # true is not 1
    assert not SearchFilter(meta=(("n", 1),)).matches("d", "t", {"n": True})
    assert SearchFilter(meta=(("n", 1),)).matches("d", "t", {"n": 1.0})
    assert not SearchFilter(meta=(("n", None),)).matches("d", "t", {})  # a missing key is not null
    for bad, message in [
        (dict(doc_ids=[]), "doc_ids is empty"),
        (dict(doc_ids="d1"), "list of strings"),
        (dict(doc_ids=[1]), "list of strings"),
        (dict(title_prefix=3), "title_prefix must be a string"),
        (dict(meta={"a": {"b": 1}}), "'a': a value must be"),
        (dict(meta={"a": [1]}), "'a': a value must be"),
        (dict(meta={"a": float("nan")}), "'a': a value must be"),
        (dict(meta=[("a", 1), ("a", 2)]), "names a key twice"),
    ]:
        with pytest.raises(SearchParamsError, match=message):
            SearchFilter(**bad)  # type: ignore[arg-type]
    with pytest.raises(SearchParamsError, match="filter must be a SearchFilter"):
        SearchParams(filter={"doc_ids": ["a"]})  # type: ignore[arg-type]


def test_a_filter_is_keyed_once_however_often_it_is_hashed_or_compared(monkeypatch):
    """A request's filter is hashed and compared once per question of its batch (grouping by parameters, the
    selection cache): its key was made again each time, and a filter of 100,000 values held the worker (and every
    other request's batch) for seconds. The key is made once; equality is still by value, in any order."""
    from spanseek.core import filters

    made = []
    for cls in (filters.AnyOf, filters.SearchFilter):
        def counted(self, _key=cls._key):
            made.append(id(self))
            return _key(self)
        monkeypatch.setattr(cls, "_key", counted)
    big = SearchFilter.from_json({"should": [{"key": "tag", "any": [str(i) for i in range(1000)]}, {"doc_ids": ["d1"]}]})
    params = [SearchParams(filter=big) for _ in range(32)]
    assert len({p: None for p in params}) == 1 and len({hash(big) for _ in range(32)}) == 1
    assert len(made) == 3 and len(set(made)) == 3  # the filter, its any and its nested filter: each keyed once
    same = SearchFilter.from_json({"should": [{"key": "tag", "any": [str(i) for i in reversed(range(1000))] + ["7"]},
                                              {"doc_ids": ["d1"]}]})
    assert same == big and hash(same) == hash(big) and SearchParams(filter=same) in {p: None for p in params}
    assert filters.AnyOf("n", (1, True)) == filters.AnyOf("n", (True, 1.0))  # a number equals the same number
    assert filters.AnyOf("n", (1,)) != filters.AnyOf("n", (True,)) and filters.AnyOf("n", (0,)) != filters.AnyOf("n", (False,))
    assert len({filters.AnyOf("n", (1,)), filters.AnyOf("n", (True,))}) == 2  # true is not 1


# Filters that constrain nothing: every part is absent or passes every document (an empty meta or title prefix, a
# nested filter that passes everything, a should of which one condition passes everything, a must_not of
# conditions that pass nothing)
PASSES_EVERYTHING = [
    {}, {"meta": {}}, {"title_prefix": ""}, {"must": [{}]}, {"must": [{"meta": {}}, {"title_prefix": ""}]},
    {"should": [{}]}, {"should": [{"key": "lang", "match": "en"}, {"meta": {}}]}, {"must_not": [{"not": {}}]},
    {"must": [{"must": [{"should": [{"title_prefix": ""}]}]}]}, {"must": [{"not": {"must_not": [{}]}}]},
    {"meta": {}, "title_prefix": "", "must": [{}], "should": [{}], "must_not": [{"not": {"meta": {}}}]},
]
# ... and filters that do: a part that holds for some documents only, or for none
CONSTRAINING = [
    {"doc_ids": ["d1"]}, {"title_prefix": "Title 1"}, {"meta": {"lang": "en"}}, {"must": [{}, {"meta": {"lang": "en"}}]},
    {"should": [{"key": "lang", "match": "en"}]}, {"must_not": [{"key": "lang", "match": "en"}]},
    {"must": [{"title_prefix": "", "must_not": [{"key": "draft", "match": True}]}]},
    # a should passes nothing only when every one of its conditions does: here one constrains, so the filter it
    # sits in constrains, and a must_not of that filter constrains too
    {"should": [{"not": {}}, {"meta": {"lang": "en"}}]},
    {"must_not": [{"should": [{"not": {}}, {"meta": {"lang": "en"}}]}]},
]
PASSES_NOTHING = [{"must_not": [{}]}, {"must": [{"not": {}}]}, {"should": [{"not": {"meta": {}}}]},
                  {"must": [{"must_not": [{"title_prefix": ""}]}]}, {"must_not": [{"should": [{}, {"doc_ids": ["x"]}]}]},
                  {"should": [{"not": {}}, {"must_not": [{}]}]}]


def test_a_filter_passes_everything_when_no_part_constrains_anything(searcher):
    """``passes_everything`` (what a delete by filter refuses) is structural: an empty meta, an empty title prefix or
    a nested filter that passes everything constrains nothing, as an absent part does; a must_not of such a filter
    passes nothing, which is not everything. The definition (``matches``) agrees over every document."""
    docs = [(d["id"], d["title"], d.get("meta", {})) for d in searcher.index.docs]
    for body in PASSES_EVERYTHING:
        flt = SearchFilter.from_json(body)
        assert flt.passes_everything, body
        assert all(flt.matches(*d) for d in docs), body
    for body in CONSTRAINING + PASSES_NOTHING:
        flt = SearchFilter.from_json(body)
        assert not flt.passes_everything, body
        assert not all(flt.matches(*d) for d in docs), body
    for body in PASSES_NOTHING:
        assert not any(SearchFilter.from_json(body).matches(*d) for d in docs), body


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_a_filter_that_passes_everything_searches_as_no_filter(tiny_searcher, unit, mode):
    """On an index with no deletions a search with no filter selects nothing; one whose filter constrains nothing
    returns the same hits, and one whose filter passes nothing returns none."""
    texts = ["Who built the castle in 1500?", "When did Cato build the bridge?"]
    rng = np.random.default_rng(3)
    qs, qe = rng.standard_normal((2, len(texts), tiny_searcher.index.vectors.shape[1])).astype(np.float32)

    def search(body):
        flt = None if body is None else SearchFilter.from_json(body)
        params = SearchParams(unit=unit, top_k=4, mode=mode, filter=flt)
        return [[_key(h) for h in hits] for hits in tiny_searcher.search_vectors(qs, qe, params, questions=texts)]

    plain = search(None)
    assert all(plain)
    for body in PASSES_EVERYTHING:
        if not list(SearchFilter.from_json(body).leaves()):  # (the tiny corpus has no metadata fields)
            assert search(body) == plain, body
    assert search({"must_not": [{}]}) == [[], []]


def test_a_where_value_beyond_a_float_is_a_search_params_error(searcher):
    """An integer no float holds (``--where year=1`` and 400 zeros reads as one, as does JSON) made a search over the
    field index raise a bare OverflowError; the filter refuses it, naming the field: a FilterError, which is a
    SearchParamsError (HTTP 400), before any search. Large numbers within a float's range still search."""
    from spanseek.core.filters import Match, Range

    for make in (lambda: SearchFilter(meta=(("year", 10**400),)), lambda: Match("year", -(10**400)),
                 lambda: Range("year", lte=10**400)):
        with pytest.raises(FilterError, match=r"'year': .*within about ±1\.8e308.*an integer of about 401 digits") as e:
            make()
        assert e.value.field == "year" and isinstance(e.value, SearchParamsError)
    within = SearchFilter(must=[Match("year", 10**300), Range("year", gt=-(10**300))])  # floats hold these
    assert all(not hits for hits in _search(searcher, unit="doc", mode="dense", top_k=3, filter=within))


@pytest.mark.parametrize("levels", [MAX_FILTER_DEPTH + 1, 40, 250])
def test_a_filter_nested_too_deeply_says_so_however_deep(levels):
    """Nested filters are made inside out, so the first one over the limit is the one refused: the message names
    the limit, not that inner filter's size ("17 conditions nested 17 deep" for any depth, before)."""
    flt = SearchFilter(doc_ids=["a"])
    with pytest.raises(FilterError) as refused:
        for _ in range(levels):
            flt = SearchFilter(must=[flt])
    assert str(refused.value) == f"filter nested too deeply: more than {MAX_FILTER_DEPTH} levels of filters, not and passage"
    with pytest.raises(FilterError, match=rf"filter too large: {MAX_FILTER_CONDITIONS + 1} conditions \(at most"):
        SearchFilter(must=[SearchFilter(doc_ids=[str(i)]) for i in range(MAX_FILTER_CONDITIONS)])


def test_hits_carry_their_paragraph_number(searcher):
    index = searcher.index
    for hits in _search(searcher, unit="passage", top_k=20, mode="dense"):
        for h in hits:
            doc = next(i for i, d in enumerate(index.docs) if d["id"] == h.doc_id)
            own = [p for p in range(len(index.passages)) if index.passages[p]["doc"] == doc]
            assert h.paragraph == own.index(h.passage_id) and h.to_dict()["paragraph"] == h.paragraph


@pytest.mark.parametrize("k", [1, 7, 40, 400])
def test_a_flat_index_over_fetches_the_same_ids_as_the_selector_gives(searcher, monkeypatch, k):
    """``search_ids`` on a flat index: asking for more neighbours without the selector and keeping the allowed ones
    (most tokens allowed) gives what faiss gives with the selector; also for questions aimed at the tokens that are
    not allowed, whose nearest neighbours are mostly those (they are asked again, deeper, then with the selector)."""
    from spanseek.core import selection

    index = searcher.index
    sel = selection.select(index, SearchFilter(doc_ids=tuple(f"d{i}" for i in range(1, 12))),
                           searcher._selections.layout)
    assert sel.passages is not None
    barred = np.flatnonzero(~sel.passages[index.token_passage])  # the tokens of d0 and of the deleted document
    aimed = 4 * index.token_vectors(barred[:: max(1, len(barred) // 6)][:6])
    queries = np.concatenate([*_vectors(searcher), aimed]).astype(np.float32)
    monkeypatch.setattr(selection, "OVERFETCH_MIN_ALLOWED", 1.01)  # never over-fetch: the selector
    with_selector = selection.search_ids(index, queries, k, None, sel)
    monkeypatch.setattr(selection, "OVERFETCH_MIN_ALLOWED", 0.0)
    over_fetched = selection.search_ids(index, queries, k, None, sel)
    def scores(ids):
        return np.einsum("qkd,qd->qk", index.token_vectors(ids), queries)

    # the same ids but for the order of exact ties (identical tokens score the same)
    assert np.allclose(scores(over_fetched), scores(with_selector), rtol=1e-5, atol=1e-5)
    assert np.mean(over_fetched == with_selector) > 0.99
    assert sel.passages[index.token_passage[with_selector]].all() and (with_selector >= 0).all()
    assert (over_fetched >= 0).all() and sel.passages[index.token_passage[over_fetched]].all()


def clustered_tokens(n: int = 2000, d: int = 16, barred: int = 600, seed: int = 0):
    """A flat index of ``n`` random tokens, 10 a passage, whose first ``barred`` tokens (the passages a filter
    leaves out: 70% of the tokens stay allowed) lie close to one direction, and that direction (the question aimed at
    them: its nearest tokens, many times k deep, are all left out)."""
    import faiss

    from spanseek.core.phrase_index import faiss_search_parameters
    from spanseek.core.selection import Selection

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    direction = np.zeros(d, np.float32)
    direction[0] = 1.0
    x[:barred] = 0.2 * x[:barred] + 10 * direction
    flat = faiss.IndexFlatIP(d)
    flat.add(x)
    token_passage = np.arange(n) // 10
    passages = np.arange(n // 10) >= barred // 10
    def search_parameters(nprobe, selector=None):
        return None if selector is None else faiss_search_parameters(flat, 1, selector)

    index = SimpleNamespace(faiss=flat, token_passage=token_passage, search_parameters=search_parameters)
    selector = faiss.IDSelectorBatch(np.flatnonzero(passages[token_passage]).astype(np.int64))
    sel = Selection(passages, selector, None, {}, None, float(passages[token_passage].mean()), (selector,))
    return index, sel, x, direction


@pytest.mark.parametrize("k", [1, 5, 40])
def test_a_question_whose_nearest_tokens_are_all_left_out_still_gets_k_allowed_ones(k):
    """Over-fetching without the selector finds no allowed token among a question's nearest when they all belong to
    the passages a filter leaves out: that question is asked again, deeper, then with the selector, and gets the k
    best allowed tokens (brute force), as the questions whose neighbours are allowed do."""
    from spanseek.core import selection

    index, sel, x, direction = clustered_tokens()
    rng = np.random.default_rng(k)
    queries = np.concatenate([direction[None] * 3, rng.standard_normal((3, x.shape[1]))]).astype(np.float32)
    assert selection.OVERFETCH_MIN_ALLOWED <= sel.token_share < 1.0  # the over-fetching path
    allowed = np.flatnonzero(sel.passages[index.token_passage])
    scores = queries @ x[allowed].T
    want = allowed[np.argsort(-scores, axis=1, kind="stable")[:, :k]]
    got = selection.search_ids(index, queries, k, None, sel)
    assert got.tolist() == want.tolist()
    assert not sel.passages[index.token_passage[index.faiss.search(queries[:1], 200)[1]]].any()  # all left out


@pytest.mark.parametrize("k", [2, 4, 30, 500])
def test_the_allowed_tokens_scored_whole_rank_best_first_the_larger_id_first_among_ties(k):
    """``selected_top`` (an IVF index's small selections, every allowed token scored): the k best of the allowed
    tokens (``Selection.allowed_ids``), best first, the larger id first among equal scores (faiss's order; a
    duplicated passage's tokens tie exactly), -1 past the allowed ones."""
    from spanseek.core import selection

    rng = np.random.default_rng(k)
    x = rng.standard_normal((400, 8)).astype(np.float32)
    x[50] -= (x[50] @ x[45]) / (x[45] @ x[45]) * x[45]
    x[[45, 50]] *= 4  # long tokens at right angles: each is its own best match
    x[200:240] = x[40:80]  # a duplicated passage's tokens: exact ties
    token_passage = np.arange(400) // 10
    passages = rng.random(40) < 0.5
    passages[[4, 5, 6, 7, 20, 21, 22, 23]] = True  # both copies allowed
    index = SimpleNamespace(token_passage=token_passage, token_scores=lambda ids, q: x[ids] @ q)
    queries = np.concatenate([x[[45, 210]], rng.standard_normal((2, 8))]).astype(np.float32)
    allowed = np.flatnonzero(passages[token_passage])
    got = selection.selected_top(index, queries, k, allowed)
    every = index.token_scores(allowed, np.ascontiguousarray(queries.T)).T  # the scores selected_top ranks by
    for scores_of_allowed, row in zip(every, got, strict=True):  # the oracle: all of them by score, then larger id
        want = allowed[np.lexsort((-allowed, -scores_of_allowed))][:k]
        assert row[row >= 0].tolist() == want.tolist()  # the cut too: of tied copies, the larger ids are kept
    for q, row in zip(queries, got, strict=True):
        kept = row[row >= 0]
        assert len(kept) == min(k, len(allowed)) and (row[len(kept):] == -1).all()
        assert len(set(kept.tolist())) == len(kept) and passages[token_passage[kept]].all()
        scores = x[kept] @ q
        np.testing.assert_allclose(scores, np.sort(x[allowed] @ q)[::-1][: len(kept)], rtol=1e-6)
        assert kept.tolist() == kept[np.lexsort((-kept, -scores))].tolist()
    # a token and its copy tie at the top
    assert got[0, :2].tolist() == [205, 45] and got[1, :2].tolist() == [210, 50]
    if k == 2:  # token 50 and its copy 210 tie at the cut of 1: the copy (the larger id) is kept, as at k = 2
        assert selection.selected_top(index, queries[1:2], 1, allowed)[0, 0] == 210


@pytest.fixture(scope="module")
def ivf_searcher(tmp_path_factory, tiny_model_dir, searcher):
    """The filters' corpus as an IVF index searched at nprobe 1 (of 8 lists), the same document deleted."""
    d = tmp_path_factory.mktemp("filters-ivf")
    corpus = searcher.index.dir.parent / "c.jsonl"
    build_index(corpus, tiny_model_dir, d / "idx", BuildOptions(factory="IVF8,Flat", nprobe=1, progress=False,
                                                              precision="fp32", gpu=False))
    delete_documents(d / "idx", [DELETED])
    return Searcher(PhraseIndex(d / "idx"))


def _keys(hits, places: int = 3) -> list[tuple]:
    return [(h.doc_id, h.passage_id, h.start, h.end, round(h.score, places)) for h in hits]


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_an_ivf_index_fills_top_k_with_a_selective_filter_as_an_exact_index_does(searcher, ivf_searcher, unit):
    """An IVF index scans the lists nearest each query, where few of a small filter's tokens lie: the allowed tokens
    are then scored one by one from the fine vectors (as the exact index's own vectors score them), so the hits are
    the exact index's, and top_k is filled whenever that many units pass."""
    from spanseek.core import selection

    flt = SearchFilter(doc_ids=("d2", "d5"))
    assert ivf_searcher.selection(flt).token_share * ivf_searcher.index.faiss.ntotal <= selection.EXACT_SELECTED_TOKENS
    got = _search(ivf_searcher, unit=unit, mode="dense", top_k=20, filter=flt)
    want = _search(searcher, unit=unit, mode="dense", top_k=20, filter=flt)
    assert [_keys(h) for h in got] == [_keys(h) for h in want]
    assert all(len(hits) == _fill(searcher, flt, unit, 20) for hits in got)


def test_a_larger_selection_on_an_ivf_index_probes_lists_in_proportion(ivf_searcher, monkeypatch):
    """Above EXACT_SELECTED_TOKENS a filtered IVF search divides nprobe by the allowed share of the tokens: the lists
    probed hold about as many allowed tokens as an unfiltered search's."""
    from spanseek.core import selection

    monkeypatch.setattr(selection, "EXACT_SELECTED_TOKENS", 0)
    probes = []
    search_parameters = ivf_searcher.index.search_parameters
    monkeypatch.setattr(ivf_searcher.index, "search_parameters",
                        lambda nprobe, selector=None: probes.append(nprobe) or search_parameters(nprobe, selector))
    flt = SearchFilter(doc_ids=("d2", "d5"))
    share = ivf_searcher.selection(flt).token_share
    hits = _search(ivf_searcher, unit="passage", mode="dense", top_k=20, filter=flt)
    # (questions whose lists still hold fewer than k allowed tokens are searched again over more, up to all 8)
    assert probes and probes[0] == min(8, int(np.ceil(1 / share))) and set(probes) <= {probes[0], 8}
    assert all(len(h) == _fill(ivf_searcher, flt, "passage", 20) for h in hits)


PICKLED_IN_ANOTHER_PROCESS = """
import pickle, sys
from spanseek.core.filters import AnyOf, Match, Not, Range, SearchFilter
flt = SearchFilter.from_json({FILTER!r})
hash(flt), flt == flt  # its key and hash made and kept, as a request's are before it is cached or sent on
sys.stdout.buffer.write(pickle.dumps(flt))
"""


def test_a_filter_pickled_in_another_process_is_equal_and_hashes_as_a_fresh_one():
    """A filter crosses processes pickled (a worker pool, a cache kept on disk): it carried the hash it had kept,
    made with that process's string hashing (PYTHONHASHSEED), so there it was equal to a fresh filter but hashed
    otherwise, and missed it in every dict and set (a cached selection, a batch's grouping)."""
    import os
    import pickle
    import subprocess
    import sys

    flt = {"doc_ids": ["b", "a"], "title_prefix": "T", "meta": {"lang": "en", "draft": False},
           "must": [{"key": "tags", "any": ["x", "y", 1, True]}, {"not": {"key": "k", "match": "v"}},
                    {"key": "date", "range": {"gte": "2024-01-01"}}],
           "should": [{"doc_ids": ["c"]}, {"title_prefix": "U"}]}
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"  # another string hashing than this process's
    pickled = subprocess.run([sys.executable, "-c", PICKLED_IN_ANOTHER_PROCESS.replace("{FILTER!r}", repr(flt))],
                             capture_output=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
    got, fresh = pickle.loads(pickled), SearchFilter.from_json(flt)
    assert got == fresh and hash(got) == hash(fresh)
    assert {fresh: 1}.get(got) == 1 and {SearchParams(filter=fresh): 1}.get(SearchParams(filter=got)) == 1
    for mine, theirs in zip(fresh.must or (), got.must or (), strict=True):  # its conditions too
        assert hash(mine) == hash(theirs) and mine == theirs
    again = pickle.loads(pickle.dumps(got))  # and here, a round trip keeps it
    assert again == fresh and hash(again) == hash(fresh) and again.to_json() == fresh.to_json()


def test_a_large_filter_is_made_without_sorting_its_ids_or_checking_each_value_in_python(monkeypatch):
    """A request's filter of 60,000 ids or values was sorted and checked one value at a time in Python: tens of ms of
    every such request. Ids are now kept in the order given (each once) and compared as a set; values are judged by
    their types, and numbers by one finiteness check, so no value meets the per-value check unless one is unfit."""
    from spanseek.core import filters

    checked = []
    monkeypatch.setattr(filters, "_scalar", lambda where, v, key=None: checked.append(v) or v)
    ids = [f"doc-{i:05d}" for i in reversed(range(20_000))]
    flt = SearchFilter(doc_ids=[*ids, ids[0]], must=[filters.AnyOf("tag", ids), filters.AnyOf("n", range(20_000)),
                                                     filters.AnyOf("x", [1.5, True, None, -(10**300)])])
    assert flt.doc_ids == tuple(ids) and checked == []  # the order given, the repeated id once; no value checked
    assert flt == SearchFilter(doc_ids=sorted(ids), must=[filters.AnyOf("tag", sorted(ids)),
                                                          filters.AnyOf("n", reversed(range(20_000))),
                                                          filters.AnyOf("x", [None, True, -(10**300), 1.5])])
    assert hash(flt) == hash(SearchFilter.from_json(flt.to_json()))
    assert SearchFilter(doc_ids=["a", "b"]) != SearchFilter(doc_ids=["a", "b", "c"])
    monkeypatch.undo()
    for values, shown in [([*range(5), 10**400], "an integer of about 401 digits"), ([1, float("inf")], "inf"),
                          (["a", {"b": 1}], "{'b': 1}"), ([1, [2]], "[2]")]:
        with pytest.raises(FilterError, match=f"any on 'k': a value must be .* got {re.escape(shown)}$"):
            filters.AnyOf("k", values)
    with pytest.raises(FilterError, match="filter doc_ids must be a list of strings, got 7 at position 2$"):
        SearchFilter(doc_ids=["a", "b", 7])
    assert filters.AnyOf("k", ["a", 1, None, 2.5]).values == ("a", 1, None, 2.5)


SELECTING = [name for name in FILTERS if name not in ("nothing", "deleted only")]


@pytest.mark.parametrize("fusion", ["score", "rrf"])
@pytest.mark.parametrize("unit", ["passage", "doc"])
@pytest.mark.parametrize("name", SELECTING)
def test_a_hybrid_filter_selects_the_unfiltered_hits_with_their_scores(searcher, name, unit, fusion):
    """Hybrid passages and documents fuse their legs over the candidates of the same search without the filter: the
    filtered list is the unfiltered one restricted to the filter, scores and all (both ranked to every unit), and a
    shallow filtered search scores each of its units as the shallow unfiltered search does."""
    flt, top_k = FILTERS[name], 3
    everything = _search(searcher, unit=unit, mode="hybrid", fusion=fusion, top_k=100_000)
    deep = _search(searcher, unit=unit, mode="hybrid", fusion=fusion, top_k=top_k, rank_window=100_000, filter=flt)
    for hits, got in zip(everything, deep, strict=True):
        want = [h for h in hits if _passes(searcher, flt, h.doc_id)]
        assert [_key(h) for h in got] == [_key(h) for h in want[:top_k]]
    unfiltered = _search(searcher, unit=unit, mode="hybrid", fusion=fusion, top_k=top_k)
    shallow = _search(searcher, unit=unit, mode="hybrid", fusion=fusion, top_k=top_k, filter=flt)
    for hits, got in zip(unfiltered, shallow, strict=True):
        score = {(h.doc_id, h.passage_id): h.score for h in hits}
        assert all(h.score == score[h.doc_id, h.passage_id] for h in got if (h.doc_id, h.passage_id) in score)
        assert all(_passes(searcher, flt, h.doc_id) for h in got)


def _calibrated(searcher: Searcher) -> Searcher:
    """``searcher``'s index with a calibrator for every unit and mode (fitted, it says, under the index's fusion):
    confidence rises with the answer's probability, and falls with the rank and the gap to the best."""
    from spanseek.core.confidence import FEATURES, Calibrator, LogisticModel

    n = len(FEATURES)
    coef = tuple({"gap_to_best": -1.0, "log_rank": -2.0, "answer_prob": 2.0}.get(f, 0.0) for f in FEATURES)
    model = LogisticModel((0.0,) * n, (1.0,) * n, coef, 1.0)
    fitted = {"fusion": "score", "weights": dict(searcher.lexical_weights), "phrase_rerank": searcher.phrase_rerank}
    return Searcher(searcher.index, calibrator=Calibrator(
        {f"{u}/{m}": model for u in ("phrase", "passage", "doc") for m in ("dense", "lexical", "hybrid")}, "fp",
        {"fusion": fitted}))


def _unit_key(hit, unit: str):
    return (hit.passage_id, hit.start, hit.end) if unit == "phrase" else hit.passage_id if unit == "passage" else \
        hit.doc_id


NEWLY_COVERED = [("dense", "phrase"), ("dense", "passage"), ("dense", "doc"), ("lexical", "phrase"),
                 ("lexical", "passage"), ("lexical", "doc"), ("hybrid", "phrase")]


@pytest.mark.parametrize(("mode", "unit"), NEWLY_COVERED)
@pytest.mark.parametrize("name", SELECTING)
def test_a_filtered_list_is_the_unfiltered_one_restricted_with_its_scores_and_confidences(searcher, name, mode, unit):
    """In every mode and unit a filter selects: the filtered list is the unfiltered one restricted to the filter (both
    ranked as deep; hybrid phrases fuse against the unfiltered candidate passages and re-rank the unfiltered head), and
    each filtered hit listed in the unfiltered page reads the confidence it has there (from its place in that list,
    not from its place among the few that pass), and the score where no re-ranking head moves it. Phrases: near, not
    equal: the answer mass also counts the same answer's phrases that pass below the unfiltered page, and a hybrid
    search of fewer tokens finds more of the passing passages' spans, which join the re-ranked head."""
    from spanseek.core.confidence import FEATURE_DEPTH

    calibrated, flt, top_k = _calibrated(searcher), FILTERS[name], 3
    deep = 100_000 if unit != "phrase" else 200
    everything = _search(calibrated, unit=unit, mode=mode, top_k=deep)
    ranked = _search(calibrated, unit=unit, mode=mode, top_k=top_k, rank_window=deep, filter=flt)
    for hits, got in zip(everything, ranked, strict=True):
        want = [h for h in hits if _passes(searcher, flt, h.doc_id)]
        assert [_key(h) for h in got] == [_key(h) for h in want[:top_k]]
    unfiltered = _search(calibrated, unit=unit, mode=mode, top_k=FEATURE_DEPTH[unit])
    shallow = _search(calibrated, unit=unit, mode=mode, top_k=top_k, filter=flt)
    for hits, got in zip(unfiltered, shallow, strict=True):
        listed = {_unit_key(h, unit): h for h in hits}
        for h in (h for h in got if _unit_key(h, unit) in listed):
            if (mode, unit) != ("hybrid", "phrase"):
                assert h.score == pytest.approx(listed[_unit_key(h, unit)].score, abs=1e-4)
            near = {"hybrid": 0.1, "dense": 0.05, "lexical": 0.05}[mode] if unit == "phrase" else 1e-4
            assert h.confidence == pytest.approx(listed[_unit_key(h, unit)].confidence, abs=near)


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_narrow_filter_of_low_ranked_units_is_as_unsure_of_them_as_the_unfiltered_search(searcher, mode, unit):
    """Confidence is read from a hit's place in the list without the filter, in every mode and unit: the best hit of
    documents that hold only units ranked low unfiltered is as unsure as there (a filter does not make it the
    confident first hit of a short list), and ``min_confidence`` abstains on it."""
    calibrated = _calibrated(searcher)
    unfiltered = _search(calibrated, unit=unit, mode=mode, top_k=5)
    qs, qe = _vectors(calibrated)
    checked = 0
    for q, hits in enumerate(unfiltered):
        best = {h.doc_id for h in hits[:3]}
        low = [h for h in hits[3:5] if h.doc_id not in best]  # the 4th and 5th hits, in documents of no better one
        if not low:
            continue
        flt = SearchFilter(doc_ids=tuple(dict.fromkeys(h.doc_id for h in low)))
        got = calibrated.search_vectors(qs[q:q + 1], qe[q:q + 1], SearchParams(unit=unit, mode=mode, top_k=5,
                                                                               filter=flt), questions=[QUESTIONS[q]])[0]
        listed = {_unit_key(h, unit): h.confidence for h in hits}
        if _unit_key(got[0], unit) in listed:
            near = 0.05 if unit == "phrase" else 1e-4
            assert got[0].confidence == pytest.approx(listed[_unit_key(got[0], unit)], abs=near)
        assert got[0].confidence < hits[0].confidence
        abstains = SearchParams(unit=unit, mode=mode, top_k=5, filter=flt,
                                min_confidence=(got[0].confidence + hits[0].confidence) / 2)
        assert calibrated.search_vectors(qs[q:q + 1], qe[q:q + 1], abstains, questions=[QUESTIONS[q]])[0].no_answer
        checked += 1
    assert checked


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_search_without_a_filter_searches_once_and_as_the_stages_rank(searcher, mode, unit, monkeypatch):
    """Without a filter nothing is searched twice: every hit and confidence is what the stages give the plan alone
    (the search once, ranked, then paged)."""
    from spanseek.core.confidence import FEATURE_DEPTH

    calibrated = _calibrated(searcher)
    params = SearchParams(unit=unit, mode=mode, top_k=4)
    qs, qe = _vectors(calibrated)
    plan = calibrated._plan(params).but(top_k=max(params.depth, FEATURE_DEPTH[unit]), offset=0)
    ranked, _ = calibrated.ranking.deep(plan, qs, qe, QUESTIONS, StageTimes())
    want = calibrated.pager.pages(ranked, params, plan, QUESTIONS)
    searches = []
    ranked_deep = Ranking.deep
    monkeypatch.setattr(Ranking, "deep", lambda self, *a, **k: searches.append(1) or ranked_deep(self, *a, **k))
    assert calibrated.search_vectors(qs, qe, params, questions=QUESTIONS) == want
    assert len(searches) == 1


def test_a_filtered_hybrid_search_computes_the_flat_scans_products_once(searcher, monkeypatch):
    """The search without the filter that a filtered hybrid unit search runs first computes the products of the
    batch; the filtered scan takes them over rather than computing them again."""
    from spanseek.core.flat_search import FlatScan

    computed = []
    score = FlatScan._score
    monkeypatch.setattr(FlatScan, "_score", lambda self, *a: computed.append(self) or score(self, *a))
    _search(searcher, unit="doc", mode="hybrid", top_k=3, filter=FILTERS["ids"])
    assert len(computed) == 1


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_filtered_search_scores_bm25_once_for_both_searches(searcher, mode, unit, monkeypatch):
    """The filtered search takes over its unfiltered search's BM25 postings of the questions (``Plan.bm25``) rather
    than finding them again, and finds the same hits as when it finds them itself."""
    calibrated = _calibrated(searcher)
    lexical = calibrated.lexical
    scored, postings = [], type(lexical).postings
    monkeypatch.setattr(type(lexical), "postings", lambda self, *a: scored.append(1) or postings(self, *a))
    params = dict(unit=unit, mode=mode, top_k=3, filter=FILTERS["ids"])
    once = _search(calibrated, **params)
    assert len(scored) == 1
    monkeypatch.setattr(Plan, "bm25", property(lambda self: None, lambda self, v: None), raising=False)
    assert _search(calibrated, **params) == once


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_a_filtered_hybrid_search_of_no_questions_finds_nothing(searcher, unit):
    """A batch with no question to search (``Searcher.search`` of blank questions only searches none) gets no hits
    under a filter as without one, rather than failing in the search without the filter that fusion runs first."""
    empty = np.zeros((0, searcher.index.vectors.shape[1]), np.float32)
    for flt in (None, FILTERS["ids"]):
        params = SearchParams(unit=unit, mode="hybrid", top_k=3, filter=flt)
        assert searcher.search_vectors(empty, empty, params, questions=[]) == []
