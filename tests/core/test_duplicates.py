"""collapse_duplicates (core.duplicates): the collapsed list is a brute-force dedup of a deep ranking, pages of it are
slices of one list, copies are counted among what the search may return (filters, deletions, live writes), and a
search without it is unchanged.

    .venv/bin/python -m pytest -q tests/core/test_duplicates.py
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest

from spanseek.core.params import MODES, SearchFilter, SearchParams, SearchParamsError
from tests.conftest import corpus_with_copies

QUESTIONS = ["When did Alba build the castle?", "Who built the river bridge?", "empire battle treaty",
             "What did Hugo build in 1500?", "Cato tower wall", "In which year did Dara build the gate?"]
DEMO_INDEX = Path(os.environ.get("SPANSEEK_DEMO_INDEX", Path(__file__).resolve().parents[2] / "work" / "demo-index"))


def norm(text: str) -> str:
    return " ".join(text.split()).lower()


def brute_key(index, h, unit: str) -> object:
    """What a copy shares with its original, from the texts themselves (no hashes)."""
    if unit == "doc":
        d = index.passages[h.passage_id]["doc"]
        return tuple(norm(p["text"]) for p in index.passages if p["doc"] == d)
    if unit == "passage":
        return norm(h.passage)

    def at(i: int) -> int:
        return len("".join(h.passage[:i].split()))
    return norm(h.passage), at(h.start), at(h.end)


def brute_copies(index, h, unit: str, allowed_docs: set[int] | None = None) -> int:
    """How many passages (documents) of the allowed documents are copies of the hit's."""
    live = [d for d in range(len(index.docs)) if allowed_docs is None or d in allowed_docs]
    if unit == "doc":
        key = brute_key(index, h, "doc")
        return sum(tuple(norm(p["text"]) for p in index.passages if p["doc"] == d) == key for d in live)
    return sum(p["doc"] in live and norm(p["text"]) == norm(h.passage) for p in index.passages)


def rows(hits) -> list[tuple]:
    return [(h.passage_id, h.start, h.end, h.text) for h in hits]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_collapsed_list_is_the_brute_force_dedup_of_a_deep_ranking(dup_searcher, monkeypatch, unit, mode):
    """Hybrid fusion standardises over the candidates, so its ranking depends on its depth: there the collapsing
    search is made to rank as deep as the list it is compared with."""
    from spanseek.core import ranking

    index, depth = dup_searcher.index, 400 if unit == "phrase" else 40
    if mode == "hybrid":
        monkeypatch.setattr(ranking, "COLLAPSE_DEPTH", depth // 5)
    deep = dup_searcher.search(QUESTIONS, SearchParams(unit, depth, mode=mode))
    got = dup_searcher.search(QUESTIONS, SearchParams(unit, 5, mode=mode, collapse_duplicates=True))
    collapsed_any = False
    for full, hits in zip(deep, got, strict=True):
        seen, want = set(), []
        for h in full:
            key = brute_key(index, h, unit)
            if key not in seen:
                seen.add(key)
                want.append(h)
        collapsed_any |= len(want) < len(full)
        assert rows(hits) == rows(want[:5])
        assert [h.score for h in hits] == pytest.approx([h.score for h in want[:5]], abs=1e-4)
        for h in hits:
            assert h.copies == brute_copies(index, h, unit)
            assert len(h.copy_doc_ids) <= h.copies - 1
    assert collapsed_any  # the corpus's copies were in the rankings


@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_kept_hit_is_as_confident_as_in_the_search_without_collapsing(dup_searcher, unit, mode, filtered):
    """Collapsing selects hits, as a filter does: each kept hit's confidence is read from its place in the ranking
    without collapsing (rank, margin to the next hit, the answer mass over the first hits), so a hit whose copy
    ranked right below it is no more confident for the copy's going. (A page of 5 in a rank_window of 10 is ranked
    10 deep, as the plain search of 10: its hits are those of the plain search's first 10, or below them. A filtered
    hybrid search fuses a deeper round among the filter's candidates, scoring its hits apart: they are read with the
    scores the plain search gives them, and read exactly as there.)"""
    from tests.core.test_filters import _calibrated

    calibrated = _calibrated(dup_searcher)
    calibrated.encoder = dup_searcher.encoder
    flt = SearchFilter(doc_ids=[d["id"] for d in dup_searcher.index.docs if d["id"] != "d5"]) if filtered else None
    plain = calibrated.search(QUESTIONS, SearchParams(unit, 10, mode=mode, filter=flt))
    got = calibrated.search(QUESTIONS, SearchParams(unit, 5, rank_window=10, mode=mode, filter=flt,
                                                    collapse_duplicates=True))
    moved = 0
    for full, hits in zip(plain, got, strict=True):
        confidence = {rows([h])[0]: h.confidence for h in full}
        shared = [h for h in hits if rows([h])[0] in confidence]
        assert all(h.confidence is not None for h in hits) and shared
        assert [h.confidence for h in shared] == [confidence[rows([h])[0]] for h in shared]
        moved += [rows([h]) for h in shared] != [rows([h]) for h in full[: len(shared)]]
    assert moved  # some kept hits rose past a dropped copy


def test_copies_and_their_documents(dup_searcher):
    """The copy of d0's paragraph stands for three passages, in d0, d6 and d8; d1 and d7 are one document."""
    index = dup_searcher.index
    copied = next(p for p, q in enumerate(index.passages) if index.docs[q["doc"]]["id"] == "d0" and q["para"] == 1)
    hits = dup_searcher.search(["x"], SearchParams("passage", 40, mode="dense", collapse_duplicates=True))[0]
    hit = next(h for h in hits if norm(h.passage) == norm(index.passages[copied]["text"]))
    assert hit.copies == 3
    assert sorted([hit.doc_id, *hit.copy_doc_ids]) == ["d0", "d6", "d8"]
    docs = dup_searcher.search(["x"], SearchParams("doc", 20, mode="dense", collapse_duplicates=True))[0]
    assert sorted(h.doc_id for h in docs if h.doc_id in ("d1", "d7")) in (["d1"], ["d7"])
    twin = next(h for h in docs if h.doc_id in ("d1", "d7"))
    assert twin.copies == 2 and twin.copy_doc_ids == [{"d1": "d7", "d7": "d1"}[twin.doc_id]]
    assert len(docs) == len(index.docs) - 1  # every document, the twin once
    respaced = [h for h in hits if norm(h.passage) == norm(corpus_with_copies()[2]["paragraphs"][0])]
    assert len(respaced) == 1 and respaced[0].copies == 2  # other spacing and case: still a copy


def test_a_page_is_ranked_at_most_collapse_max_times_deeper(dup_searcher, monkeypatch):
    """A paragraph held by thousands of documents made a page rank deeper and deeper until it filled, the whole index
    for one question; the ranking now stops at COLLAPSE_MAX times the page's depth, the page then short. The 25
    passages hold 19 distinct texts: a page of 19 fills from the deeper ranking, and is short without it."""
    from spanseek.core import ranking

    params = SearchParams("passage", 19, mode="dense", collapse_duplicates=True)
    full = dup_searcher.search(["x"], params)[0]
    assert len(full) == 19
    monkeypatch.setattr(ranking, "COLLAPSE_MAX", 1)  # no ranking deeper than the page
    short = dup_searcher.search(["x"], params)[0]
    assert 0 < len(short) < 19 and rows(short) == rows(full)[: len(short)]


@pytest.mark.parametrize("unit", ["phrase", "passage"])
def test_pages_are_slices_of_one_collapsed_list(dup_searcher, unit):
    whole = dup_searcher.search(QUESTIONS, SearchParams(unit, 12, mode="dense", collapse_duplicates=True))
    pages = [dup_searcher.search(QUESTIONS, SearchParams(unit, 4, offset=o, rank_window=12, mode="dense",
                                                         collapse_duplicates=True)) for o in (0, 4, 8)]
    for q, hits in enumerate(whole):
        assert sum((rows(p[q]) for p in pages), []) == rows(hits)
        assert len(set(rows(hits))) == len(hits)


def test_a_filter_that_excludes_the_better_copy_keeps_the_other(dup_searcher):
    index = dup_searcher.index
    text = norm(corpus_with_copies()[0]["paragraphs"][1])
    first = next(h for h in dup_searcher.search(["x"], SearchParams("passage", 40, mode="dense",
                                                                    collapse_duplicates=True))[0]
                 if norm(h.passage) == text)
    others = [d["id"] for d in index.docs if d["id"] != first.doc_id]
    flt = SearchFilter(doc_ids=others)
    hits = dup_searcher.search(["x"], SearchParams("passage", 40, mode="dense", collapse_duplicates=True,
                                                   filter=flt))[0]
    kept = [h for h in hits if norm(h.passage) == text]
    assert len(kept) == 1 and kept[0].doc_id != first.doc_id
    assert kept[0].copies == 2 and first.doc_id not in kept[0].copy_doc_ids
    only = dup_searcher.search(["x"], SearchParams("passage", 40, mode="dense", collapse_duplicates=True,
                                                   filter=SearchFilter(doc_ids=["d8"])))[0]
    assert [h.copies for h in only if norm(h.passage) == text] == [1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_page_without_copies_is_the_page_without_collapsing(dup_searcher, unit, mode):
    """(top_k 1 always holds no copy; top_k 3 where it holds none)"""
    index, clean = dup_searcher.index, 0
    for k in (1, 3):
        plain = dup_searcher.search(QUESTIONS, SearchParams(unit, k, mode=mode))
        got = dup_searcher.search(QUESTIONS, SearchParams(unit, k, mode=mode, collapse_duplicates=True))
        for q, hits in enumerate(plain):
            if len({brute_key(index, h, unit) for h in hits}) == len(hits):
                assert [h.but(copies=None, copy_doc_ids=None) for h in got[q]] == hits
                clean += 1
    assert clean >= len(QUESTIONS)


def test_without_it_the_hits_are_unchanged_and_carry_no_copy_fields(dup_searcher):
    hits = dup_searcher.search(QUESTIONS, SearchParams("passage", 10, mode="dense"))
    assert all(h.copies is None and "copies" not in h.to_dict() and "copy_doc_ids" not in h.to_dict()
               for q in hits for h in q)
    ids = [h.passage_id for h in hits[0]]
    assert len(ids) > len({norm(h.passage) for h in hits[0]})  # the copies are there, each its own hit
    on = dup_searcher.search(QUESTIONS[:1], SearchParams("passage", 1, mode="dense", collapse_duplicates=True))[0][0]
    assert on.to_dict()["copies"] >= 1


def test_merge_answers_counts_each_copy_once(dup_searcher):
    """Merged answers are summed over the collapsed phrases: a copy adds nothing to its answer's score."""
    merged = dup_searcher.search(QUESTIONS, SearchParams("phrase", 5, mode="dense", merge_answers=True,
                                                         collapse_duplicates=True))
    assert all(h.copies is not None for q in merged for h in q)


@pytest.mark.parametrize("params, message", [
    ({"collapse_duplicates": "yes"}, "collapse_duplicates must be true, false, .exact. or .near., got .yes."),
    ({"collapse_duplicates": True, "read": True}, "collapse_duplicates does not apply with read"),
])
def test_bad_values_are_refused_naming_them(params, message):
    with pytest.raises(SearchParamsError, match=message):
        SearchParams("passage", 5, **params)


def test_a_written_copy_of_an_indexed_paragraph_collapses_with_it(tmp_path, dup_searcher, tiny_model_dir):
    from spanseek.core.io import document_from_json
    from spanseek.core.model import load_model
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.live import DocumentEncoder, LiveStore

    encoder = DocumentEncoder(load_model(tiny_model_dir), None, precision="fp32", chunk_tokens=40)
    published: list = []
    store = LiveStore(tmp_path / "live", dup_searcher.index.dir, dup_searcher.index, encoder,
                      lambda snap: published.append(searcher_over(dup_searcher, snap)))
    text = corpus_with_copies()[3]["paragraphs"][2]
    doc = document_from_json({"id": "w1", "title": "Written", "paragraphs": [text.lower()]}, "test")
    assert doc is not None
    store.upsert([doc], [encoder.encode(doc)])
    searcher = published[-1]
    hits = searcher.search(["x"], SearchParams("passage", 40, mode="dense", collapse_duplicates=True))[0]
    kept = [h for h in hits if norm(h.passage) == norm(text)]
    assert len(kept) == 1 and kept[0].copies == 2
    assert sorted([kept[0].doc_id, *kept[0].copy_doc_ids]) == ["d3", "w1"]
    assert store.delete(["d3"])[0] == ["d3"]
    after = published[-1].search(["x"], SearchParams("passage", 40, mode="dense", collapse_duplicates=True))[0]
    assert [(h.doc_id, h.copies) for h in after if norm(h.passage) == norm(text)] == [("w1", 1)]


@pytest.mark.slow
@pytest.mark.skipif(not (DEMO_INDEX / "manifest.json").is_file(), reason="no demo index")
def test_the_demo_corpus_copied_paragraph_is_one_hit():
    """The demo corpus holds a Catalan paragraph twice (passages 207 and 214, one document)."""
    from spanseek.core.loading import open_searcher

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    searcher = open_searcher(DEMO_INDEX, "default")
    question = ["How many stressed vowel phonemes does Catalan have?"]
    plain = searcher.search(question, SearchParams("passage", 5))[0]
    assert {207, 214} <= {h.passage_id for h in plain}
    hits = searcher.search(question, SearchParams("passage", 5, collapse_duplicates=True))[0]
    assert len(hits) == 5 and len({h.passage_id for h in hits} & {207, 214}) == 1
    assert hits[0].copies == 2 and hits[0].copy_doc_ids == [hits[0].doc_id]
    deeper = searcher.search(question, SearchParams("passage", 20))[0]  # the ranking the short page was filled from
    assert [h.passage_id for h in hits[1:]] == [h.passage_id for h in deeper if h.passage_id not in (207, 214)][:4]
    assert np.all(np.diff([h.score for h in hits]) <= 0)


def test_searches_in_two_threads_find_the_copies_once(monkeypatch):
    """Two threads whose first searches collapse copies at once each found the index's copies (hashing every
    passage): the second waits for the first's now, and both read the same table."""
    import threading
    import types

    from spanseek.core import ranking

    found: list[int] = []
    both_in = threading.Barrier(2, timeout=0.3)  # the old code let both threads in here; now the barrier times out

    def of(index, passage_doc):
        found.append(1)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_in.wait()
        return object()

    monkeypatch.setattr(ranking.Copies, "of", of)
    stage = ranking.Ranking(None, None, types.SimpleNamespace(index=None), {"doc": np.zeros(0)})  # type: ignore[arg-type]
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(stage.copies())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 1 and len(got) == 2 and got[0] is got[1] is stage.copies()
