"""Which passages a search may return: the index's deleted documents removed, a request's filter applied.

A ``Selection`` is made once per distinct filter (``core.search.Searcher`` keeps the recent ones) and is applied
inside each leg of the search, so ``top_k`` is still filled when enough passages pass:

- dense: a ``faiss.IDSelectorBitmap`` over token ids, given to faiss in the per-call search parameters
  (``PhraseIndex.search_parameters``), so MIPS returns only tokens of allowed passages (``search_ids``);
- lexical: the BM25 scores of the other passages are zeroed (only passages that match score above zero).

Deleted documents and filters select whole documents, so every span (which never crosses a passage) of an allowed
token lies in an allowed passage.

An exhaustive (flat) faiss index scores a batch of queries with one matrix product (BLAS), but falls back to one
query at a time when given a selector (faiss 1.15), which made a batch of 64 questions 3.4x slower with 20 of 22
documents allowed. When most tokens are allowed, ``search_ids`` therefore asks a flat index for more neighbours
without the selector and keeps the allowed ones; a question that did not get ``k`` of them (its nearest documents
are the deleted or filtered ones) is asked once more for 8x more, then with the selector. Either way the ids are
the same (but for the order of exact ties). IVF indexes always take the selector (they scan lists one query at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spanseek.core.faiss_spec import ivf_of
from spanseek.core.params import SearchFilter
from spanseek.core.store import PhraseIndex

# a flat index over-fetches (rather than take the selector) when at least this share of its tokens is allowed
OVERFETCH_MIN_ALLOWED = 0.5
OVERFETCH_TRIES, OVERFETCH_GROWTH = 2, 8  # then the questions still short take the selector


@dataclass(frozen=True)
class Selection:
    """The passages a search may return; ``passages`` None (and no selector) when every passage may be.

    passages: (P,) bool, allowed passages.
    selector: the faiss ``IDSelectorBitmap`` of their token ids (it reads ``bitmap``, kept alive here).
    unit_count: allowed units per unit name (``passage``, ``doc``): a unit search deepens until it finds
        ``min(top_k, unit_count)`` units.
    """

    passages: np.ndarray | None
    selector: Any
    bitmap: np.ndarray | None
    unit_count: dict[str, int]
    tokens: np.ndarray | None = None  # (N,) bool, allowed token ids

    @property
    def empty(self) -> bool:
        """No passage may be returned."""
        return self.passages is not None and not self.passages.any()


def allowed_documents(index: PhraseIndex, flt: SearchFilter | None) -> np.ndarray | None:
    """(D,) bool: documents not deleted that pass ``flt``; None when that is every document."""
    if flt is None and not len(index.deleted_docs):
        return None
    allowed = np.ones(len(index.docs), dtype=bool)
    allowed[index.deleted_docs] = False
    if flt is not None:
        allowed &= np.fromiter((flt.matches(d["id"], d["title"], d.get("meta") or {}) for d in index.docs),
                               dtype=bool, count=len(index.docs))
    return allowed


def select(index: PhraseIndex, flt: SearchFilter | None, unit_of_passage: dict[str, np.ndarray]) -> Selection:
    """The ``Selection`` of ``index`` for ``flt`` (``unit_of_passage``: each unit's number for every passage)."""
    import faiss

    docs = allowed_documents(index, flt)
    if docs is None:
        return Selection(None, None, None, {u: len(np.unique(m)) for u, m in unit_of_passage.items()})
    passage_doc = unit_of_passage["doc"]
    passages = docs[passage_doc]
    tokens = passages[index.token_passage]
    bitmap = np.packbits(tokens, bitorder="little")  # faiss reads bit (id & 7) of byte (id >> 3)
    selector = faiss.IDSelectorBitmap(len(tokens), faiss.swig_ptr(bitmap))
    counts = {u: len(np.unique(m[passages])) for u, m in unit_of_passage.items()}
    return Selection(passages, selector, bitmap, counts, tokens)


def search_ids(index: PhraseIndex, queries: np.ndarray, k: int, nprobe: int | None, sel: Selection,
               device: Any = None) -> np.ndarray:
    """(n, k) ids of the ``k`` best allowed tokens for each query (-1 where there are fewer), best first.

    ``device`` (a ``core.gpu.DeviceIndex``) serves each search it can; the others go to the CPU index."""
    faiss_index = index.faiss

    def search(x: np.ndarray, kk: int, selector: Any = None) -> np.ndarray:
        if device is not None:
            ids = device.search(x, kk, nprobe or index.default_nprobe, selector)
            if ids is not None:
                return ids
        return faiss_index.search(x, kk, params=index.search_parameters(nprobe, selector))[1]

    if sel.selector is None:
        return search(queries, k)
    assert sel.tokens is not None
    n = faiss_index.ntotal
    share = sel.tokens.mean() if len(sel.tokens) else 0.0
    if ivf_of(faiss_index) is not None or share < OVERFETCH_MIN_ALLOWED or k >= n:
        return search(queries, k, sel.selector)
    wide = min(n, int(k / share * 1.5) + 16)  # allowed ones are about a share of any neighbours
    out = np.full((len(queries), k), -1, dtype=np.int64)
    rows = np.arange(len(queries))
    for _ in range(OVERFETCH_TRIES):
        ids = search(queries[rows], wide)
        ok = ids >= 0
        ok[ok] = sel.tokens[ids[ok]]
        short = []
        for row, row_ids, row_ok in zip(rows.tolist(), ids, ok, strict=True):
            kept = row_ids[row_ok][:k]
            if len(kept) < k and wide < n:  # its nearest tokens are mostly not allowed
                short.append(row)
            else:  # (with every token searched, fewer than k are allowed)
                out[row, : len(kept)] = kept
        rows = np.asarray(short, dtype=np.int64)
        if not len(rows):
            return out
        wide = min(n, wide * OVERFETCH_GROWTH)
    out[rows] = search(queries[rows], k, sel.selector)
    return out


class Selections:
    """The ``select`` of the ``kept`` most recently used filters of one index (each holds N / 8 bytes of token
    bitmap). A plain dict, not an lru_cache of a bound method, so its owner is freed as soon as it is unused."""

    def __init__(self, index: PhraseIndex, unit_of_passage: dict[str, np.ndarray], kept: int = 64):
        self.index = index
        self.unit_of_passage = unit_of_passage
        self.kept = kept
        self.recent: dict[SearchFilter | None, Selection] = {}  # oldest first

    def get(self, flt: SearchFilter | None) -> Selection:
        sel = self.recent.pop(flt, None)
        if sel is None:
            sel = select(self.index, flt, self.unit_of_passage)
        self.recent[flt] = sel  # most recent last
        while len(self.recent) > self.kept:
            del self.recent[next(iter(self.recent))]
        return sel
