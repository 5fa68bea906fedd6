"""The lexical leg over every passage: the (B, P) arrays that search computed before it read the postings.

Reference only, not on a search's path: the oracle that ``tests/core/test_lexical_matches.py`` holds
``core.lexical.Matches`` and ``core.fusion.LexicalFusion`` to (the same scores, bit for bit, the same units and best
passages), and the "before" of ``python bench/lexical_scale.py``. Each function is the computation search made, over
a dense (B, P) float32 array of every passage's BM25 score for every question (0 where no term of it occurs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spanseek.core.lexical import LexicalIndex
from spanseek.core.postings import Matches


def matches_of(scores: np.ndarray) -> Matches:
    """(B, P) scores as ``Matches``: each row's positive scores."""
    return Matches.of_postings([(b, np.flatnonzero(row > 0), row[row > 0]) for b, row in enumerate(scores)],
                               len(scores), scores.shape[1])


def dense_scores(lexical: LexicalIndex, terms: Sequence[list[str]]) -> np.ndarray:
    """(B, P) float32: bm25s' ``get_scores`` of each question's terms, a full-length array each."""
    out = np.zeros((len(terms), lexical.n_passages), np.float32)
    for b, tokens in enumerate(terms):
        if tokens:
            out[b] = lexical.retriever.get_scores(tokens)
    return out


def dense_within(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """A filter's mask over (B, P) scores: the passages not ``allowed`` score 0."""
    return np.where(allowed[None, :], scores, 0)


def dense_top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, P) scores -> (B, k) ids of the best positive scores, best first, ties by id; -1 / 0 where fewer match."""
    k = min(k, scores.shape[1])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(scores, order, axis=1)
    return np.where(top > 0, order, -1), np.where(top > 0, top, 0.0).astype(np.float32)


def unit_order(unit_of_passage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's passages together (a stable sort by unit) and where each unit's run of them starts."""
    order = np.argsort(unit_of_passage, kind="stable")
    ranked = unit_of_passage[order]
    return order, np.flatnonzero(np.r_[len(order) > 0, ranked[1:] != ranked[:-1]])


def dense_lexical_units(scores: np.ndarray, unit_of_passage: np.ndarray, passage_unit: bool, n: int
                        ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per row of (B, P) ``scores``, its top ``n`` units (units, their scores, their best passages), best first:
    passages (``passage_unit``) by an ``np.argpartition`` of the row (ties at the n-th place cut as it cuts them),
    then sorted by score and id; other units ranked for the batch at once from each unit's run of passages, a unit's
    best passage the first of its run with its best score, ties by best passage. Only matching units."""
    if passage_unit:
        out = []
        for row in scores:
            k = min(n, len(row))
            top = np.argpartition(-row, k - 1)[:k] if k < len(row) else np.arange(len(row))
            top = top[np.lexsort((top, -row[top]))]
            top = top[row[top] > 0]
            out.append((unit_of_passage[top], row[top], top))
        return out
    order, starts = unit_order(unit_of_passage)
    ranked = scores[:, order]
    best = np.maximum.reduceat(ranked, starts, axis=1)  # (B, U) each unit's best score
    lengths = np.diff(np.r_[starts, len(order)])
    at = np.where(ranked == np.repeat(best, lengths, axis=1), np.arange(len(order)), len(order))
    passage = order[np.minimum.reduceat(at, starts, axis=1)]
    units = unit_of_passage[order[starts]]
    top = np.lexsort((passage, -best), axis=1)[:, :n]
    return [(units[t[best[b, t] > 0]], best[b, t[best[b, t] > 0]], passage[b, t[best[b, t] > 0]])
            for b, t in enumerate(top)]


def dense_unit_scores(scores: np.ndarray, unit_of_passage: np.ndarray, n_units: int) -> np.ndarray:
    """(B, n_units) float64: each unit's BM25 score, its best passage's (0 when none matches)."""
    order, starts = unit_order(unit_of_passage)
    out = np.zeros((len(scores), n_units))
    if scores.size:
        best = np.maximum.reduceat(scores[:, order], starts, axis=1)
        out[:, unit_of_passage[order[starts]]] = np.maximum(best, 0)
    return out
