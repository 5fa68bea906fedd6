"""Span scoring: the score of every span of a passage, its best span or answer, and merging spans by answer text.

Pure functions of token scores (no index): the searcher (``core.search``) completes candidate spans with them, and
reading comprehension (``Searcher.passage_best_span``, ``spanseek eval --reading-comprehension``) decodes with
``best_span`` (``decode="span"``) or ``best_answer`` (the default), which sums the probability of spans that give
the same answer string. A span (i, j) has i <= j < i + max_answer_tokens and scores
q_start . h_i + q_end . h_j + b(j - i), b being the model's span length bias.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spanseek.core.metrics import normalize_answer
from spanseek.core.text import FLAG_END, FLAG_START

log = logging.getLogger(__name__)
NO_SPAN = "no valid span: the passage is empty, or none of its tokens may start or end a phrase"
ANSWER_CANDIDATES = 64  # spans best_answer sums over: the softmax mass past them is negligible


@dataclass(frozen=True)
class Spans:
    """Candidate spans of one question, sorted by score (descending). Arrays of equal length."""

    starts: np.ndarray
    ends: np.ndarray
    scores: np.ndarray


def by_group_then_score(groups: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The positions of ``scores`` ordered by ``groups`` (integers >= 0), then by score, best first; equal scores of
    a group keep their order: ``np.lexsort((-scores, groups))``, as a stable sort by score followed by a stable sort
    by group, which sorts small group numbers by radix (3x faster than lexsort for 48k spans of 64 questions)."""
    order = np.argsort(-scores, kind="stable")
    g = groups[order]
    if len(g) and int(g.max()) < 1 << 15:
        g = g.astype(np.int16)
    return order[np.argsort(g, kind="stable")]


@functools.cache
def numpy_blas():
    """A threadpoolctl controller of numpy's own BLAS library (not faiss's, not torch's).

    Span completion runs small (U, d) @ (d, 2) products under ``numpy_blas().limit(limits=1)``. Left multi-threaded,
    numpy's OpenBLAS wakes its worker threads for them, and they busy-wait on the cores long after: measured on
    the demo index (2 cores), the next faiss search of a 32-question batch took 80 ms instead of 41.
    """
    from threadpoolctl import ThreadpoolController

    # numpy wheels vendor their BLAS next to the package: site-packages/numpy.libs (Linux), numpy/.dylibs (macOS)
    package = Path(np.__file__).resolve().parent
    homes = (str(package) + os.sep, str(package.with_name("numpy.libs")) + os.sep)
    controller = ThreadpoolController()
    mine = [
        c.filepath for c in controller.lib_controllers
        if c.user_api == "blas" and str(Path(c.filepath).resolve()).startswith(homes)
    ]
    if not mine:  # numpy on a system/conda BLAS: nothing to limit here (its threads may still spin)
        log.warning("numpy's BLAS library was not found among %s; span completion runs it unlimited",
                    [c.filepath for c in controller.lib_controllers if c.user_api == "blas"])
    return controller.select(filepath=mine)


def length_scores(length_bias: Sequence[float] | None, max_answer_tokens: int) -> np.ndarray:
    """(max_answer_tokens,) score added to a span of k + 1 tokens: the model's length bias (its last entry repeated past its end, for
    a longer ``max_answer_tokens`` than it was fitted for), or zeros when the model has none."""
    n = max_answer_tokens
    if not length_bias:
        return np.zeros(n, np.float32)
    b = np.asarray(length_bias, dtype=np.float32)
    return b[:n] if n <= len(b) else np.concatenate([b, np.full(n - len(b), b[-1], np.float32)])


def span_scores(
    start_scores: np.ndarray, end_scores: np.ndarray, flags: np.ndarray, max_answer_tokens: int,
    length_bias: Sequence[float] | None = None,
) -> np.ndarray:
    """(n, n) score of every span (i, j): start_scores[i] + end_scores[j] + the length bias of j - i; -inf where the
    span is not valid (j < i, j - i >= max_answer_tokens, i not a possible start or j not a possible end)."""
    n = len(start_scores)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    length = j - i
    valid = (length >= 0) & (length < max_answer_tokens)
    valid &= (flags[:, None] & FLAG_START > 0) & (flags[None, :] & FLAG_END > 0)
    bias = length_scores(length_bias, max_answer_tokens)[np.clip(length, 0, max_answer_tokens - 1)]
    return np.where(valid, start_scores[:, None] + end_scores[None, :] + bias, -np.inf)


def best_span(
    start_scores: np.ndarray, end_scores: np.ndarray, flags: np.ndarray, max_answer_tokens: int,
    length_bias: Sequence[float] | None = None,
) -> tuple[int, int, float]:
    """Brute force: the valid span (i, j), i <= j < i + max_answer_tokens, maximising start_scores[i] + end_scores[j] (+ length bias);
    ties go to the smallest (i, j). Raises ValueError when there is no valid span."""
    total = span_scores(start_scores, end_scores, flags, max_answer_tokens, length_bias)
    n = len(start_scores)
    if not np.isfinite(total).any():
        raise ValueError(NO_SPAN)
    flat = int(np.argmax(total))
    return flat // n, flat % n, float(total.flat[flat])


def best_answer(
    start_scores: np.ndarray, end_scores: np.ndarray, flags: np.ndarray, max_answer_tokens: int,
    text_of: Callable[[int, int], str], length_bias: Sequence[float] | None = None,
    candidates: int = ANSWER_CANDIDATES,
) -> tuple[int, int, float]:
    """The span whose answer string is most probable: the Bayes decision for exact match.

    The span scores' softmax over a passage is what the span-level loss trains, so a span's probability is
    exp(score) / Z. Exact match compares normalised strings (``core.metrics.normalize_answer``), and several spans
    often give the same one ("the Sun" and "Sun", or a name said twice), so the probability of an answer is the
    sum over its spans. Among the ``candidates`` best spans this returns the best span of the answer with the
    largest sum, scored log sum exp(score) of its spans (never below its best span's score).
    """
    total = span_scores(start_scores, end_scores, flags, max_answer_tokens, length_bias).ravel()
    n = len(start_scores)
    k = min(candidates, int(np.isfinite(total).sum()))
    if k <= 1:
        return best_span(start_scores, end_scores, flags, max_answer_tokens, length_bias)
    top = np.sort(np.argpartition(-total, k - 1)[:k])  # ascending, so ties rank as in best_span
    top = top[np.argsort(-total[top], kind="stable")]  # best first, so an answer's first span is its best one
    r, score = merge_by_answer([text_of(int(f) // n, int(f) % n) for f in top], total[top])[0]
    return int(top[r]) // n, int(top[r]) % n, score


def merge_by_answer(texts: Sequence[str], scores: Sequence[float] | np.ndarray) -> list[tuple[int, float]]:
    """Group candidates, given best first, by their normalised text (``core.metrics.normalize_answer``).

    Returns one (index of the answer's best candidate, log sum exp of its candidates' scores) per answer, best
    answer first; ties keep the order of the answers' best candidates. Candidates that normalise to nothing
    (an article, a punctuation mark) are never merged: each stays on its own.
    """
    s = np.asarray(scores, dtype=np.float64)
    finite = s[np.isfinite(s)]
    top = float(finite.max()) if len(finite) else 0.0
    prob = np.exp(s - top)
    mass: dict[str, float] = {}
    first: dict[str, int] = {}
    for r, text in enumerate(texts):
        key = normalize_answer(text) or f"\x00{r}"  # an empty answer is a group of one
        mass[key] = mass.get(key, 0.0) + float(prob[r])
        first.setdefault(key, r)
    order = sorted(mass, key=lambda a: (-mass[a], first[a]))
    with np.errstate(divide="ignore"):  # an answer of -inf scores has mass 0: log 0 = -inf
        return [(first[a], top + float(np.log(mass[a]))) for a in order]
