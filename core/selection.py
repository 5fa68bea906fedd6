"""Which passages a search may return: the index's deleted documents removed, a request's filter applied.

A ``Selection`` is made once per distinct filter (``core.search.Searcher`` keeps the recent ones) and is applied
inside each leg of the search, so ``top_k`` is still filled when enough passages pass:

- dense: a ``faiss.IDSelectorBitmap`` over token ids, given to faiss in the per-call search parameters
  (``PhraseIndex.search_parameters``), so MIPS returns only tokens of allowed passages;
- lexical: the BM25 scores of the other passages are zeroed (only passages that match score above zero).

Deleted documents and filters select whole documents, so every span (which never crosses a passage) of an allowed
token lies in an allowed passage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spanseek.core.params import SearchFilter
from spanseek.core.store import PhraseIndex


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
    return Selection(passages, selector, bitmap, counts)
