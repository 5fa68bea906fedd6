"""A live snapshot's BM25 (``core.live_lexical.LiveLexical``) scores by the variant its base's lexical part was built
with: every passage's score against bm25s' own index of the live passages built with that variant, and a variant it
cannot score live refused, named.

    .venv/bin/python -m pytest -q tests/core/test_live_lexical.py
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from spanseek.core.lexical import LexicalIndex
from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings


def bm25s_index(terms: list[list[str]], method: str, idf_method: str | None = None) -> LexicalIndex:
    """bm25s' index of passages given as their terms, scored by ``method`` (and ``idf_method``)."""
    import bm25s

    retriever = bm25s.BM25(method=method, idf_method=idf_method)
    vocab = {t: i for i, t in enumerate(sorted({t for ts in terms for t in ts}))}
    retriever.index(([[vocab[t] for t in ts] for ts in terms], vocab), show_progress=False)
    return LexicalIndex(retriever, len(terms))


def base_terms(terms: list[list[str]]) -> BaseTerms:
    import scipy.sparse as sp

    vocab: dict[str, int] = {}
    rows, cols = zip(*[(p, vocab.setdefault(t, len(vocab))) for p, ts in enumerate(terms) for t in ts], strict=True)
    tf = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(terms), len(vocab)))
    tf.sum_duplicates()
    return BaseTerms(tf, vocab, np.asarray([len(t) for t in terms]))


@pytest.mark.parametrize(("method", "idf_method"), [("lucene", None), ("robertson", None), ("atire", None),
                                                    ("lucene", "bm25l"), ("atire", "bm25+")])
def test_a_snapshot_scores_by_its_base_s_bm25_variant(method, idf_method):
    """Base passages (some deleted) and written ones, scored live, against bm25s built with the base's variant over
    the live passages alone (the deleted ones score 0)."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(10)]
    base = [[rng.choice(words[:8]) for _ in range(rng.randint(1, 6))] for _ in range(30)]
    written = [[rng.choice(words) for _ in range(rng.randint(1, 6))] for _ in range(4)]
    terms = base_terms(base)
    dead = np.asarray([3, 11, 12, 20])
    live = LiveLexical(bm25s_index(base, method, idf_method), terms,
                       [SegmentPostings.of([terms.numbered(written)])], dead)
    questions = [rng.sample(words, 3) for _ in range(8)]
    got = live.scores(["?"] * len(questions), questions)
    alive = [p for p in range(len(base)) if p not in set(dead.tolist())]
    oracle = bm25s_index([base[p] for p in alive] + written, method, idf_method)
    want = np.zeros_like(got)
    for q, question in enumerate(questions):
        scores = oracle.retriever.get_scores([t for t in question if t in oracle.retriever.vocab_dict])
        want[q, alive + list(range(len(base), len(base) + len(written)))] = scores
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["bm25l", "bm25+"])
def test_a_variant_that_scores_passages_without_the_terms_is_refused_named(method):
    terms = [["w1", "w2"], ["w2", "w3"]]
    with pytest.raises(ValueError, match=re.escape(f"'{method}'")):
        LiveLexical(bm25s_index(terms, method), base_terms(terms), [], np.zeros(0, np.int64))
