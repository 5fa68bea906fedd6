"""Hybrid phrase re-ranking: features by hand, the searcher's re-ranked head against re-ranking the fused list
by hand, page-size independence and the score order of the list below the head."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from spanseek.core.rerank import RERANK_DEPTH, rerank_features, rerank_scores

from .test_lexical import questions_of


def test_features_by_hand():
    fused = [2.0, 1.0, 1.0, 0.0]
    texts = ["the Eiffel Tower", "Gustave Eiffel", "gustave eiffel.", "the"]
    f = rerank_features(fused, texts, "Who designed the Eiffel Tower?")
    z = math.exp(0) + 2 * math.exp(-1) + math.exp(-2)
    assert f[:, 0] == pytest.approx([0.0, -1.0, -1.0, -2.0])
    # terms are stemmed and stop words dropped: "the" has none, so its overlap is 0
    assert f[:, 1] == pytest.approx([1.0, 0.5, 0.5, 0.0])
    # "Gustave Eiffel" and "gustave eiffel." are one answer; the empty answer stays on its own
    assert f[:, 2] == pytest.approx([1 / z, 2 * math.exp(-1) / z, 2 * math.exp(-1) / z, math.exp(-2) / z])
    assert rerank_features([], [], "anything").shape == (0, 3)


def test_scores_are_the_weighted_features_and_unknown_names_fail():
    f = np.array([[0.0, 1.0, 0.5], [-1.0, 0.0, 0.25]])
    assert rerank_scores(f, {"gap": 2.0, "answer_mass": 4.0}) == pytest.approx([2.0, -1.0])
    with pytest.raises(ValueError, match="unknown phrase re-ranking features"):
        rerank_scores(f, {"gap": 1.0, "length": 1.0})


WEIGHTS = {"gap": 0.5, "question_overlap": -3.0, "answer_mass": 2.0}


def test_searcher_reranks_the_fused_head_as_by_hand(tiny_searcher, monkeypatch):
    texts, qs, qe = questions_of(tiny_searcher, seed=4)
    params = SearchParams(top_k=RERANK_DEPTH, mode="hybrid", allow_overlap=True)
    monkeypatch.setattr(tiny_searcher, "phrase_rerank", None)
    fused = tiny_searcher.search_vectors(qs, qe, params, None, texts)
    monkeypatch.setattr(tiny_searcher, "phrase_rerank", WEIGHTS)
    reranked = tiny_searcher.search_vectors(qs, qe, params, None, texts)
    changed = 0
    for question, before, after in zip(texts, fused, reranked, strict=True):
        score = rerank_scores(rerank_features([h.score for h in before], [h.text for h in before], question), WEIGHTS)
        order = np.argsort(-score, kind="stable")
        assert [(h.start, h.passage_id) for h in after] == [(before[i].start, before[i].passage_id) for i in order]
        assert [h.score for h in after] == pytest.approx(score[order].tolist())
        assert [h.dense for h in after] == [before[i].dense for i in order]  # the components are the fused list's
        changed += [h.text for h in after] != [h.text for h in before]
    assert changed  # the weights do move answers on these questions


def test_reranked_answers_do_not_depend_on_page_size(tiny_searcher, monkeypatch):
    monkeypatch.setattr(tiny_searcher, "phrase_rerank", WEIGHTS)
    texts, qs, qe = questions_of(tiny_searcher, seed=5)
    short = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=3, mode="hybrid", allow_overlap=True), None, texts)
    long = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=16, mode="hybrid", allow_overlap=True), None, texts)
    for s, lg in zip(short, long, strict=True):
        assert [(h.start, h.end, h.score) for h in s] == [(h.start, h.end, h.score) for h in lg[:3]]
        # below the re-ranked head the fused order goes on, its scores never above the head's
        assert [h.score for h in lg] == sorted((h.score for h in lg), reverse=True)


def test_terms_of_a_batch_are_each_texts_own():
    """Re-ranking tokenises a whole batch's candidates and questions in one call: each text's terms must not depend
    on the texts beside it (bm25s builds its vocabulary per call)."""
    from spanseek.core.lexical import tokenize

    texts = ["Who designed the Eiffel Tower?", "", "the of and", "Gustave Eiffel's designs", "1889 — Paris",
             "Zürich's ÉCOLE polytechnique", "towers tower towering", "a b c", "Eiffel"]
    assert tokenize(texts) == [terms for t in texts for terms in tokenize([t])]
    assert tokenize(texts[::-1]) == tokenize(texts)[::-1]


def test_a_batch_of_hybrid_phrase_searches_answers_each_question_as_alone(tiny_searcher, monkeypatch):
    monkeypatch.setattr(tiny_searcher, "phrase_rerank", WEIGHTS)
    texts, qs, qe = questions_of(tiny_searcher, seed=6)
    params = SearchParams(top_k=5, mode="hybrid")
    batch = tiny_searcher.search_vectors(qs, qe, params, None, texts)
    for b, hits in enumerate(batch):
        [alone] = tiny_searcher.search_vectors(qs[b:b + 1], qe[b:b + 1], params, None, texts[b:b + 1])
        assert [(h.passage_id, h.start, h.end) for h in hits] == [(h.passage_id, h.start, h.end) for h in alone]
        assert [h.score for h in hits] == pytest.approx([h.score for h in alone], abs=1e-5)
