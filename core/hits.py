"""A search hit, defined once: its fields, how one is built from token ids, and the overlap rules of phrase hits.

``Hit`` is what every unit returns (the phrase, its place in its passage, the passage and document it is from, the
scores behind its rank); the service's response (``service.schemas``) and the client (``spanseek.client``) are
derived from its fields. ``HitBuilder`` turns an index's token ids into hits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from spanseek.core.store import PhraseIndex


@dataclass(frozen=True)
class Hit:
    """One result: the best phrase (of the unit), its character span in its passage, and where it is from.

    ``dense`` and ``lexical`` are the two legs' scores behind ``score``: the dense span (or unit) score and the
    passage's (or document's) BM25 score; ``lexical`` is None in dense mode. ``read`` is the reader's span score when
    the hit was read (``SearchParams.read``), else None.
    """

    text: str
    score: float
    start: int
    end: int
    passage_id: int
    passage: str
    doc_id: str
    title: str
    paragraph: int = 0  # the passage's number within its document (0-based)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # the document's metadata from the corpus
    dense: float | None = None
    lexical: float | None = None
    confidence: float | None = None  # probability that the hit is correct (core.confidence); None: no calibrator
    read: float | None = None  # the reader's score of this answer (reading at search time); None: not read

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in HIT_FIELDS}  # asdict's deep copy costs 10x, per hit


HIT_FIELDS = tuple(f.name for f in fields(Hit))


class Hits(list[Hit]):
    """One question's hits, best first; ``no_answer`` is True when the search abstained (``min_confidence``)."""

    def __init__(self, hits: Sequence[Hit] = (), no_answer: bool = False):
        super().__init__(hits)
        self.no_answer = no_answer


class HitBuilder:
    """Hits and span texts from an index's token ids."""

    def __init__(self, index: PhraseIndex):
        self.index = index

    def span_text(self, start_tok: int, end_tok: int) -> str:
        idx = self.index
        text = idx.passages[int(idx.token_passage[start_tok])]["text"]
        return text[int(idx.token_offsets[start_tok, 0]) : int(idx.token_offsets[end_tok, 1])]

    def hit(self, start_tok: int, end_tok: int, score: float, dense: float | None = None,
            lexical: float | None = None) -> Hit:
        """The hit of the span from token ``start_tok`` to ``end_tok`` (inclusive)."""
        idx = self.index
        p = int(idx.token_passage[start_tok])
        a, b = int(idx.token_offsets[start_tok, 0]), int(idx.token_offsets[end_tok, 1])
        return self.passage_hit(p, a, b, score, dense, lexical)

    def passage_hit(self, p: int, a: int, b: int, score: float, dense: float | None = None,
                    lexical: float | None = None, read: float | None = None) -> Hit:
        """The hit of characters [a, b) of passage ``p``."""
        passage = self.index.passages[p]
        doc = self.index.docs[passage["doc"]]
        return Hit(
            text=passage["text"][a:b], score=score, start=a, end=b, passage_id=p,
            passage=passage["text"], doc_id=doc["id"], title=doc["title"], paragraph=int(passage["para"]),
            meta=doc.get("meta", {}), dense=dense, lexical=lexical, read=read,
        )


def non_overlapping(hits: Sequence[Hit], k: int) -> list[Hit]:
    """The first ``k`` hits (greedy, best first) whose phrases do not overlap a phrase kept before them: two hits
    overlap when they are in the same passage and their character ranges intersect."""
    kept: list[Hit] = []
    taken: dict[int, list[tuple[int, int]]] = {}
    for h in hits:
        spans = taken.setdefault(h.passage_id, [])
        if any(h.start < e and s < h.end for s, e in spans):
            continue
        spans.append((h.start, h.end))
        kept.append(h)
        if len(kept) == k:
            break
    return kept


def non_overlapping_spans(starts: np.ndarray, ends: np.ndarray, order: np.ndarray, k: int) -> np.ndarray:
    """``non_overlapping`` on spans: the first ``k`` of ``order`` (best first) whose token range does not intersect
    one kept before them. Token ids run through each passage in turn, so intersecting token ranges are exactly
    intersecting character ranges in one passage."""
    kept: list[int] = []
    for i in order.tolist():
        s, e = starts[i], ends[i]
        if any(s <= ends[j] and starts[j] <= e for j in kept):
            continue
        kept.append(i)
        if len(kept) == k:
            break
    return np.asarray(kept, dtype=np.int64)


def first_per_unit(units: np.ndarray) -> np.ndarray:
    """Positions of each unit's first occurrence in ``units``, in order of appearance."""
    _, first = np.unique(units, return_index=True)
    return np.sort(first)
