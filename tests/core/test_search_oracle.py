"""The dense leg's fast path returns exactly the hits of the straightforward one, for every unit and mode.

The fast path (``DenseLeg.candidates``): on a flat index the batch's inner products are computed once and each
deepening round selects from them (``core.flat_search``), a round's units are counted from its candidate tokens,
each question is completed once, and a unit search completes only the candidates whose span may be their unit's
best. The straightforward path (``straightforward_candidates`` below, the search as
it was written first): every round asks faiss again (its own ``IndexFlat`` search, with the selection's selector)
and completes every question's candidates from the fine vectors, counting units among the completed spans. Same
hits in the same order; the same scores to float32 rounding (the fast path reads a flat index's token scores from
the batch's one matrix product, another BLAS than the fine vectors' numpy products).

    .venv/bin/python -m pytest -q tests/core/test_search_oracle.py
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from spanseek.core.dense import EMPTY_SPANS, BatchScores
from spanseek.core.params import MODES, UNITS, SearchFilter, SearchParams
from spanseek.core.selection import Selections


def straightforward_candidates(leg, plan, q_start, q_end, top_k, unit_of_passage):
    """Rounds of k x 4: faiss searches the questions still short of units, all are completed, units counted."""
    index = leg.index
    ntotal = index.faiss.ntotal
    unit = plan.params.unit
    k = min(ntotal, max(32, 2 * top_k) if unit == "phrase" else max(64, 8 * top_k))
    want = min(top_k, plan.selection.unit_count.get(unit, top_k))
    spans = [EMPTY_SPANS] * len(q_start)
    pending = list(range(len(q_start)))
    while pending:
        x = np.concatenate([q_start[pending], q_end[pending]])
        params = index.search_parameters(None, plan.selection.selector)
        ids = index.faiss.search(x, k, params=params)[1]
        still = []
        for row, b in enumerate(pending):
            # completed alone, its token scores read from the index's vectors
            spans[b] = leg.complete_all(BatchScores(leg, plan, q_start[[b]], q_end[[b]]),
                                        [(ids[row], ids[len(pending) + row])])[0]
            units = None if unit_of_passage is None else unit_of_passage[index.token_passage[spans[b].starts]]
            if units is not None and k < ntotal and len(np.unique(units)) < want:
                still.append(b)
        pending, k = still, min(ntotal, k * 4)
    return spans


def hit_rows(hits):
    return [[(h.passage_id, h.start, h.end, h.text) for h in q] for q in hits]


def hit_scores(hits) -> np.ndarray:
    """Every hit's score, dense and lexical components and confidence (nan where it has none), in order."""
    return np.asarray([[np.nan if x is None else x for x in (h.score, h.dense, h.lexical, h.confidence)]
                       for q in hits for h in q], dtype=np.float64).reshape(-1, 4)


@pytest.mark.parametrize("scan", ["float32", "fp16"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("selection", ["none", "filter", "deleted"])
def test_fast_path_hits_equal_the_straightforward_path(tiny_searcher, monkeypatch, unit, mode, selection, scan):
    """``scan``: the flat scan ranks from float32 products, or (whatever this CPU is) from fp16 ones, the token
    scores then the scan's exact ones. ``selection``: every document, a filter to every other one, or every third
    one deleted."""
    from spanseek.core import dense, flat_search

    monkeypatch.setattr(dense, "UNIT_CANDIDATES", 1)  # unit searches bound their candidates, however few
    monkeypatch.setattr(flat_search, "APPROXIMATE", scan == "fp16")
    used = dataclasses.replace(tiny_searcher.dense.half_vectors(), used=True)  # whatever this CPU multiplies natively
    monkeypatch.setattr(tiny_searcher.dense, "half_vectors", lambda: used)
    monkeypatch.setattr(flat_search, "EXACT_SHARE", float("inf"))  # the tiny index: candidates are most tokens
    monkeypatch.setattr(flat_search, "half_product",  # a product that rounds once, whatever this CPU's does
                        lambda q, half, out: out.copy_((q.half().float() @ half.float().T).half()))
    ranked = []
    certified = flat_search.FlatScan._certified_top
    monkeypatch.setattr(flat_search.FlatScan, "_certified_top",
                        lambda self, *a: (certified(self, *a), ranked.append(self.fell_back))[0])
    searcher = tiny_searcher
    index = searcher.index
    assert searcher.dense.flat_holds_fine  # token scores are read from the flat scan's held product
    if selection == "deleted":  # a fresh selection cache: the index's documents are others now
        monkeypatch.setattr(index, "deleted_docs", np.arange(0, len(index.docs), 3, dtype=np.int64))
        monkeypatch.setattr(searcher, "_selections", Selections(index, searcher._unit_of_passage, 1 << 20))
    filtered = selection != "none"
    rng = np.random.default_rng(zlib.crc32(f"{unit}/{mode}/{filtered}".encode()))
    qs, qe = rng.standard_normal((2, 12, index.vectors.shape[1])).astype(np.float32)
    qs[:4] = index.token_vectors(rng.choice(index.num_tokens, 4))  # questions aimed at tokens: close scores
    texts = [f"when did {p['text'].split()[3]} build it" for p in index.passages[:12]]
    flt = SearchFilter(doc_ids=tuple(d["id"] for d in index.docs[::2])) if selection == "filter" else None
    for top_k in (1, 3, len(index.docs) + 2):
        params = SearchParams(unit=unit, mode=mode, top_k=top_k, filter=flt)
        fast = searcher.search_vectors(qs, qe, params, None, texts)
        with monkeypatch.context() as m:
            # the straightforward spans are always deduplicated and sorted; the fast path's unit searches are not
            m.setattr(searcher.dense, "candidates", lambda batch, top_k, units, dedupe=True: straightforward_candidates(
                searcher.dense, batch.plan, batch.scores.q_start, batch.scores.q_end, top_k, units))
            plain = searcher.search_vectors(qs, qe, params, None, texts)
        assert hit_rows(fast) == hit_rows(plain), (unit, mode, selection, top_k)
        np.testing.assert_allclose(hit_scores(fast), hit_scores(plain), rtol=1e-6, atol=1e-5, equal_nan=True)
        assert any(fast), "no hits at all: the comparison is empty"
        gone = {index.docs[d]["id"] for d in index.deleted_docs}
        assert not any(h.doc_id in gone for q in fast for h in q)
    assert (len(ranked) > 0) == (scan == "fp16" and mode != "lexical") and not any(ranked)


@pytest.mark.parametrize("seed", range(5))
def test_each_units_best_span_equals_the_first_of_its_unit_after_deduplication(tiny_searcher, seed):
    """``best_per_unit`` over raw spans (duplicates, ties, any order) picks what deduplicating them and then taking
    each unit's first span does: the same spans, scores and order."""
    from spanseek.core.dense import dedupe_grouped
    from spanseek.core.hits import first_per_unit

    rng = np.random.default_rng(seed)
    fusion, index = tiny_searcher.fusion, tiny_searcher.index
    n, groups = 300, 4
    starts = rng.integers(0, index.num_tokens - 3, n)
    ends = starts + rng.integers(0, 3, n)
    scores = rng.integers(0, 12, n).astype(np.float32)  # many ties
    dup = rng.integers(0, n, 60)  # the same spans again, some better, some worse
    starts, ends = np.r_[starts, starts[dup]], np.r_[ends, ends[dup]]
    scores = np.r_[scores, scores[dup] + rng.integers(-2, 3, 60)].astype(np.float32)
    group = rng.integers(0, groups, len(starts))
    for unit in ("passage", "doc"):
        best = fusion.best_per_unit(group, starts, ends, scores, unit, groups + 1)
        deduped = dedupe_grouped(group, starts, ends, scores, index.num_tokens, groups + 1)
        assert best[groups] is EMPTY_SPANS  # a group without spans
        for got, sp in zip(best, deduped, strict=True):
            first = first_per_unit(fusion.unit_of_passage[unit][index.token_passage[sp.starts]])
            assert got.starts.tolist() == sp.starts[first].tolist() and got.ends.tolist() == sp.ends[first].tolist()
            assert got.scores.tolist() == sp.scores[first].tolist()


@pytest.mark.parametrize("bias", [None, (0.0, 3.0, 6.0, 9.0, 12.0, 15.0)],
                         ids=["model-bias", "long-spans-favoured"])
@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_a_unit_search_completes_only_candidates_that_may_be_their_units_best(tiny_searcher, monkeypatch, unit,
                                                                              bias):
    """Completing for a unit search leaves out candidates whose span cannot beat their unit's best: fewer spans,
    the others in the same order, and each unit's best span (and the deduplicated ranking's first of each unit)
    exactly as when every candidate is completed. Questions aimed at tokens give close scores and ties. A length
    bias that favours longer spans raises every candidate's bound by its largest entry."""
    from spanseek.core import dense
    from spanseek.core.hits import first_per_unit
    from spanseek.core.search import Searcher

    monkeypatch.setattr(dense, "UNIT_CANDIDATES", 1)  # bound the tiny index's units however few candidates they have

    searcher = tiny_searcher if bias is None else Searcher(tiny_searcher.index, length_bias=bias)
    index, leg = searcher.index, searcher.dense
    rng = np.random.default_rng(11)
    qs, qe = rng.standard_normal((2, 8, index.vectors.shape[1])).astype(np.float32)
    qs[:3] = index.token_vectors(rng.choice(index.num_tokens, 3))
    qe[:3] = qs[:3]
    plan = searcher._plan(SearchParams(unit=unit, top_k=3))
    batch = leg.batch(plan, qs, qe)
    ids = batch.search(np.arange(8), min(index.num_tokens, 256))
    candidates = [(ids[b], ids[8 + b]) for b in range(8)]
    units = searcher.fusion.unit_of_passage[unit]
    everything = leg.complete_all(batch.scores, candidates, dedupe=False)
    worth = leg.complete_all(batch.scores, candidates, dedupe=False, unit_of_passage=units)
    assert sum(len(sp.starts) for sp in worth) < sum(len(sp.starts) for sp in everything)  # some were left out
    for all_b, kept_b in zip(everything, worth, strict=True):
        pairs = list(zip(all_b.starts.tolist(), all_b.ends.tolist(), all_b.scores.tolist(), strict=True))
        it = iter(pairs)
        assert all(p in it for p in zip(kept_b.starts.tolist(), kept_b.ends.tolist(), kept_b.scores.tolist(),
                                        strict=True))  # a subsequence: the same order
    best = [searcher.fusion.best_per_unit(np.repeat(np.arange(8), [len(sp.starts) for sp in sps]),
                                          np.concatenate([sp.starts for sp in sps]),
                                          np.concatenate([sp.ends for sp in sps]),
                                          np.concatenate([sp.scores for sp in sps]), unit, 8)
            for sps in (everything, worth)]
    for a, b in zip(*best, strict=True):
        assert (a.starts.tolist(), a.ends.tolist(), a.scores.tolist()) == (b.starts.tolist(), b.ends.tolist(),
                                                                           b.scores.tolist())
    deduped = [leg.complete_all(batch.scores, candidates, unit_of_passage=u) for u in (None, units)]
    for a, b in zip(*deduped, strict=True):
        fa = first_per_unit(units[index.token_passage[a.starts]])
        fb = first_per_unit(units[index.token_passage[b.starts]])
        assert (a.starts[fa].tolist(), a.scores[fa].tolist()) == (b.starts[fb].tolist(), b.scores[fb].tolist())


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_the_lexical_legs_units_are_those_of_ranking_every_passage(tiny_searcher, unit):
    """``top_found`` (documents: ranked for the batch at once from each unit's run of passages) gives what ranking
    every passage by BM25 (ties by passage id) and taking each unit's first gives: the same units, scores and best
    passages, in order, only those that match; with ties within and across units and at the cut."""
    from spanseek.core.hits import first_per_unit
    from spanseek.core.lexical_reference import matches_of
    from spanseek.core.postings import matched_units, top_found

    fusion = tiny_searcher.fusion
    unit_of_passage = fusion.unit_of_passage[unit]
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 4, size=(6, len(unit_of_passage))).astype(np.float32)  # many ties, many zeros
    scores[0] = 0  # nothing matches
    cuts = (1, 2, 3, 7, len(unit_of_passage) + 1)
    for n in cuts:
        got = top_found(matched_units(matches_of(scores), None if unit == "passage" else unit_of_passage), n)
        for row, (units, unit_scores, passages) in zip(scores, got, strict=True):
            top = np.argsort(-row, kind="stable")
            top = top[first_per_unit(unit_of_passage[top])][:n]
            top = top[row[top] > 0]
            assert units.tolist() == unit_of_passage[top].tolist() and passages.tolist() == top.tolist()
            assert unit_scores.tolist() == row[top].tolist()


@pytest.mark.parametrize("product", ["blas", "per_row"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
def test_a_batch_gives_each_question_the_hits_it_gets_searched_alone(tiny_searcher, monkeypatch, unit, mode, product):
    """Questions searched together (batches of 3 and of 11: query rows on both sides of ``SMALL_ROWS``, whose
    products are summed by different kernels) get the hits each gets alone: the same passages and spans in the same
    order, the scores to float32 rounding. ``per_row``: the scan's product is one whose bits do not depend on the
    other rows (float64 sums rounded once), and then every score, dense and lexical part and confidence has the same
    bits too: nothing after the product depends on the batch."""
    from spanseek.core import flat_search

    if product == "per_row":
        def per_row(queries, xb, out, workers=None, xt=None):
            out[:] = (queries.astype(np.float64) @ xb.T.astype(np.float64)).astype(np.float32)
            return out

        monkeypatch.setattr(flat_search, "scores_into", per_row)
    index = tiny_searcher.index
    rng = np.random.default_rng(zlib.crc32(f"alone/{unit}/{mode}".encode()))
    qs, qe = rng.standard_normal((2, 11, index.vectors.shape[1])).astype(np.float32)
    qs[:4] = index.token_vectors(rng.choice(index.num_tokens, 4))  # aimed at tokens: close scores
    texts = [f"when did {p['text'].split()[3]} build it" for p in index.passages[:11]]
    params = SearchParams(unit=unit, mode=mode, top_k=4)
    alone = [tiny_searcher.search_vectors(qs[i:i + 1], qe[i:i + 1], params, None, texts[i:i + 1])[0]
             for i in range(len(texts))]
    assert any(alone), "no hits at all: the comparison is empty"
    for size in (3, 11):
        together = [hits for a in range(0, len(texts), size)
                    for hits in tiny_searcher.search_vectors(qs[a:a + size], qe[a:a + size], params, None,
                                                             texts[a:a + size])]
        assert hit_rows(together) == hit_rows(alone), (unit, mode, size)
        if product == "per_row":
            np.testing.assert_array_equal(hit_scores(together), hit_scores(alone))
        else:
            np.testing.assert_allclose(hit_scores(together), hit_scores(alone), rtol=1e-5, atol=1e-5, equal_nan=True)
