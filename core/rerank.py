"""Hybrid phrase answers re-ranked by three cheap signals, with weights fitted on training questions.

Score fusion ranks a question's candidate phrases by ``dense span score + w x zscore(passage BM25)``. Two things it
cannot see decide many of its misses: an answer rarely repeats the question's own words ("Who designed the Eiffel
Tower?" is not answered by "the Eiffel Tower"), and the right answer tends to recur among the candidates (several
passages propose the same string). ``rerank_features`` measures both, beside the fused score, for every candidate:

- ``gap``: the fused score minus the best candidate's (0 for the best);
- ``question_overlap``: the share of the phrase's terms that occur in the question (terms as the lexical leg sees
  them: lower-cased, stop words removed, stemmed; 0 for a phrase with no terms);
- ``answer_mass``: the softmax of the fused scores over all candidates, summed over the candidates whose text
  normalises to the same answer (``core.metrics.normalize_answer``).

The first ``RERANK_DEPTH`` candidates of the fused ranking are re-ranked by the weighted sum of their features;
the candidates below them keep their fused order (and fused scores, shifted to continue the list). The weights are a logistic regression of "the
phrase is an exact answer" on training questions (``bench/hybrid.py fit``) and travel with the index's fusion
defaults (``core.lexical.DEFAULT_FUSION["phrase_rerank"]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from spanseek.core.lexical import tokenize
from spanseek.core.metrics import normalize_answer

RERANK_FEATURES = ("gap", "question_overlap", "answer_mass")
# the first RERANK_DEPTH candidates of the fused ranking are re-ranked (the features need their texts); the rest
# follow in fused order. A fixed depth keeps the first answers the same whatever page size is asked for.
RERANK_DEPTH = 10


def rerank_features(fused: np.ndarray, texts: Sequence[str], question: str,
                    terms: tuple[Sequence[Sequence[str]], Sequence[str]] | None = None) -> np.ndarray:
    """(n, len(RERANK_FEATURES)) features of one question's n candidate phrases (the head of its fused ranking),
    from their fused scores and texts; ``terms``: the texts' and the question's lexical terms (``tokenize``), when
    the caller has them."""
    fused = np.asarray(fused, dtype=np.float64)
    n = len(fused)
    if n == 0:
        return np.zeros((0, len(RERANK_FEATURES)))
    gap = fused - fused.max()
    prob = np.exp(gap)
    prob /= prob.sum()
    keys = [normalize_answer(t) or f"\x00{i}" for i, t in enumerate(texts)]  # an empty answer is a group of one
    mass: dict[str, float] = {}
    for key, p in zip(keys, prob.tolist(), strict=True):
        mass[key] = mass.get(key, 0.0) + p
    if terms is None:
        *span_terms, question_terms = tokenize([*texts, question])
    else:
        span_terms, question_terms = terms
    asked = set(question_terms)
    overlap = [sum(t in asked for t in terms) / len(terms) if terms else 0.0 for terms in span_terms]
    return np.stack([gap, np.asarray(overlap), np.asarray([mass[k] for k in keys])], axis=1)


def rerank_scores(features: np.ndarray, weights: Mapping[str, float]) -> np.ndarray:
    """The re-ranked score of each candidate: ``features @ weights`` (a feature without a weight counts 0)."""
    unknown = set(weights) - set(RERANK_FEATURES)
    if unknown:
        raise ValueError(f"unknown phrase re-ranking features {sorted(unknown)}; known: {', '.join(RERANK_FEATURES)}")
    return features @ np.asarray([float(weights.get(f, 0.0)) for f in RERANK_FEATURES])
