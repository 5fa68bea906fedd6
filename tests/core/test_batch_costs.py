"""A batch's work besides its scan grows with the batch and its candidates, not with the index: what a selection
needs per token is made once per selection.

    .venv/bin/python -m pytest -q tests/core/test_batch_costs.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core import flat_search
from spanseek.core.params import SearchFilter, SearchParams
from spanseek.core.selection import Selections


def _questions(index, seed: int = 0, n: int = 6):
    rng = np.random.default_rng(seed)
    qs, qe = rng.standard_normal((2, n, index.vectors.shape[1])).astype(np.float32)
    qs[: min(n, 3)] = index.token_vectors(rng.choice(index.num_tokens, min(n, 3)))
    return qs, qe


@pytest.mark.parametrize("selection", ["filter", "deleted"])
def test_every_batch_of_a_selection_scans_with_the_same_allowed_tokens(tiny_searcher, monkeypatch, selection):
    """The (N,) allowed-token mask a flat scan is given is the selection's, made at its first batch: later batches
    of the same filter (or of the index's deletions) are given that very array, not a new one from the token map."""
    searcher, index = tiny_searcher, tiny_searcher.index
    flt = None
    if selection == "deleted":
        monkeypatch.setattr(index, "deleted_docs", np.arange(0, len(index.docs), 3, dtype=np.int64))
        monkeypatch.setattr(searcher, "_selections", Selections(index, searcher._unit_of_passage, 1 << 20))
    else:
        flt = SearchFilter(doc_ids=tuple(d["id"] for d in index.docs[1::2]))
    given = []
    init = flat_search.FlatScan.__init__

    def recording(self, faiss_index, queries, allowed, *args, **kwargs):
        given.append(allowed)
        init(self, faiss_index, queries, allowed, *args, **kwargs)

    monkeypatch.setattr(flat_search.FlatScan, "__init__", recording)
    for seed in range(3):
        qs, qe = _questions(index, seed, n=1 + seed)
        searcher.search_vectors(qs, qe, SearchParams(unit="doc", mode="dense", top_k=3, filter=flt))
    allowed = searcher.selection(flt).passages[index.token_passage]
    assert len(given) == 3 and all(g is given[0] for g in given) and np.array_equal(given[0], allowed)
