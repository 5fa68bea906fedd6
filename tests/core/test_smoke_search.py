"""Oracle: the searcher's top phrase equals the brute-force argmax over all valid spans of the exact vectors."""

from __future__ import annotations

import numpy as np

from spanseek.core.params import SearchParams
from spanseek.core.spans import best_span
from tests.conftest import span_chars


def test_top_phrase_matches_brute_force(tiny_searcher):
    idx = tiny_searcher.index
    rng = np.random.default_rng(0)
    vecs = idx.token_vectors(np.arange(idx.num_tokens))
    L = tiny_searcher.max_answer_tokens
    for _ in range(20):
        qs, qe = rng.standard_normal((2, 1, vecs.shape[1])).astype(np.float32)
        best = (-np.inf, None)
        for p in range(len(idx.passages)):
            a, b = idx.passage_range(p)
            i, j, s = best_span(vecs[a:b] @ qs[0], vecs[a:b] @ qe[0], idx.token_flags[a:b], L)
            if s > best[0]:
                best = (s, (a + i, a + j))
        hit = tiny_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=1, mode="dense"))[0][0]
        s, (i, j) = best
        assert np.isclose(hit.score, s, rtol=1e-4, atol=1e-4)
        assert (hit.start, hit.end) == span_chars(idx, i, j)  # the tokens' characters as an answer reads them
        assert hit.text == hit.passage[hit.start : hit.end]
