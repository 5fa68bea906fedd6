"""A batch's work besides its scan grows with the batch and its candidates, not with the index: what a selection
needs per token is made once per selection, and a deepening round reads the units of its candidates only.

    .venv/bin/python -m pytest -q tests/core/test_batch_costs.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core import dense, flat_search
from spanseek.core.params import SearchFilter, SearchParams
from spanseek.core.selection import Selections


class Watched(np.ndarray):
    """A unit map that records each reduction over the whole of it (``max``, ``min``, ``sum``...)."""

    whole_reads: list[str] = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "reduce" and any(x is WATCHED.get("map") for x in inputs):
            Watched.whole_reads.append(ufunc.__name__)
        plain = [np.asarray(x) if isinstance(x, Watched) else x for x in inputs]
        return getattr(ufunc, method)(*plain, **kwargs)


WATCHED: dict = {}


def _questions(index, seed: int = 0, n: int = 6):
    rng = np.random.default_rng(seed)
    qs, qe = rng.standard_normal((2, n, index.vectors.shape[1])).astype(np.float32)
    qs[: min(n, 3)] = index.token_vectors(rng.choice(index.num_tokens, min(n, 3)))
    return qs, qe


@pytest.mark.parametrize("unit", ["passage", "doc"])
@pytest.mark.parametrize("filtered", [False, True])
def test_a_unit_searchs_rounds_read_the_units_of_their_candidates_only(tiny_searcher, monkeypatch, unit, filtered):
    """Counting a round's units and bounding its completions read the passage -> unit map at the candidates, never
    the whole (P,) map; the hits are those of a map that is not watched."""
    monkeypatch.setattr(dense, "UNIT_CANDIDATES", 1)  # completions are bounded, however few the candidates
    searcher, index = tiny_searcher, tiny_searcher.index
    qs, qe = _questions(index)
    flt = SearchFilter(doc_ids=tuple(d["id"] for d in index.docs[::2])) if filtered else None
    params = SearchParams(unit=unit, mode="dense", top_k=len(index.docs) + 2, filter=flt)  # deepens to the end
    plain = searcher.search_vectors(qs, qe, params)
    watched = np.asarray(searcher._unit_of_passage[unit]).view(Watched)
    monkeypatch.setitem(WATCHED, "map", watched)
    monkeypatch.setattr(Watched, "whole_reads", [])
    monkeypatch.setitem(searcher._unit_of_passage, unit, watched)
    bounded = []
    complete = dense.DenseLeg._complete
    monkeypatch.setattr(dense.DenseLeg, "_complete", lambda self, *a: (bounded.append(len(a[1])), complete(self, *a))[1])
    hits = searcher.search_vectors(qs, qe, params)
    assert [[(h.passage_id, h.start, h.end, h.score) for h in q] for q in hits] == \
        [[(h.passage_id, h.start, h.end, h.score) for h in q] for q in plain]
    assert bounded and Watched.whole_reads == []


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
