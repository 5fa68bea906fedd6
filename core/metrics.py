"""Evaluation metrics with the one SQuAD answer normaliser.

Phrase: exact match and token F1 against any gold answer (max over answers), at rank 1 and EM over the top 10.
Passage: a passage is correct when a normalised gold answer occurs in the normalised passage (the open-domain
convention); acc@k, MRR@20 and precision@20. Document: correct when its title is the gold article title.
Confidence intervals resample whole articles (``cluster_bootstrap_ci``): questions of one article are not independent.
"""

from __future__ import annotations

import functools
import math
import re
import string
from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NO_PUNCT = str.maketrans("", "", string.punctuation)  # str.translate drops them: 4x faster than a filter


@functools.lru_cache(maxsize=8192)
def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces. Remembered for recent texts: a
    hybrid phrase search normalises each answer twice (re-ranking, then confidence)."""
    s = s.lower().translate(_NO_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    """Token F1 between prediction and the best-matching gold answer."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for a in answers:
        gold = normalize_answer(a).split()
        common = Counter(pred) & Counter(gold)
        same = sum(common.values())
        if same == 0:
            continue
        p, r = same / len(pred), same / len(gold)
        best = max(best, 2 * p * r / (p + r))
    return best


def passage_has_answer(passage: str, answers: Sequence[str]) -> bool:
    """Open-domain passage correctness: some normalised answer occurs in the normalised passage."""
    return answers_in(normalized_passage(passage), answers)


def normalized_passage(passage: str) -> str:
    """The passage as ``answers_in`` reads it: normalised, between spaces (normalise once, test many answers)."""
    return f" {normalize_answer(passage)} "


def answers_in(norm_passage: str, answers: Sequence[str]) -> bool:
    """Whether some non-empty normalised answer occurs, as whole words, in a ``normalized_passage``."""
    return any(f" {a} " in norm_passage for a in map(normalize_answer, answers) if a)


def pct(x: float) -> float:
    """A fraction as a percentage rounded to 0.1."""
    return round(100.0 * x, 1)


def accuracy_at(correct: Sequence[Sequence[bool]], k: int) -> float:
    """Fraction of questions with a correct item in their top k."""
    return sum(any(c[:k]) for c in correct) / max(1, len(correct))


def mrr_at(correct: Sequence[Sequence[bool]], k: int) -> float:
    total = 0.0
    for c in correct:
        for rank, ok in enumerate(c[:k], start=1):
            if ok:
                total += 1.0 / rank
                break
    return total / max(1, len(correct))


def precision_at(correct: Sequence[Sequence[bool]], k: int) -> float:
    """Mean fraction of correct items among the top k (missing items count as wrong)."""
    return sum(sum(c[:k]) / k for c in correct) / max(1, len(correct))


def cluster_bootstrap_ci(
    values: Sequence[float], groups: Sequence[Hashable], n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval (in percent, rounded to 0.1) of the mean of ``values``, resampling groups.

    Each draw picks as many groups as there are, with replacement, and takes the mean over all of their values.
    Questions of one article share a passage set and a topic, so their scores move together; resampling
    questions one by one would give too narrow an interval. With one value per group it is the plain bootstrap.
    """
    v = np.asarray(values, dtype=np.float64)
    if len(v) != len(groups):
        raise ValueError(f"{len(v)} values but {len(groups)} group labels")
    if len(v) == 0:
        raise ValueError("no values to bootstrap")
    _, g = np.unique(np.asarray([str(x) for x in groups]), return_inverse=True)
    sums, counts = np.bincount(g, weights=v), np.bincount(g).astype(np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(sums), np.full(len(sums), 1.0 / len(sums)), size=n_boot)  # (n_boot, groups)
    means = (draws @ sums) / (draws @ counts)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return pct(float(lo)), pct(float(hi))


def mcnemar_z(gained: int, lost: int) -> float:
    """McNemar's z of a paired comparison on the same questions, (gained - lost) / sqrt(gained + lost), rounded to
    0.1: ``gained`` the questions only the new system gets right, ``lost`` those only the reference gets right
    (|z| > 1.96: a difference at the 5% level). 0 without such questions: nothing tells the two apart."""
    if gained < 0 or lost < 0:
        raise ValueError(f"question counts must be >= 0, got gained={gained}, lost={lost}")
    if gained + lost == 0:
        return 0.0
    return round((gained - lost) / math.sqrt(gained + lost), 1)


def reliability(conf: np.ndarray, correct: np.ndarray, bins: int = 10) -> list[dict[str, float]]:
    """The reliability diagram: per non-empty bin of ``bins`` equal-width confidence bins ([0, 0.1), ..., [0.9, 1]
    for 10) its lower edge, share of the items, mean confidence and accuracy. ValueError for a NaN confidence, one
    outside [0, 1] (no bin holds it) or a length mismatch."""
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if len(conf) != len(correct):
        raise ValueError(f"{len(conf)} confidences but {len(correct)} correctness labels")
    if (nan := int(np.isnan(conf).sum())):
        raise ValueError(f"{nan} of {len(conf)} confidences are NaN; leave out the items that have no confidence")
    if (outside := (conf < 0.0) | (conf > 1.0)).any():
        raise ValueError(f"confidences must lie in [0, 1]: {int(outside.sum())} of {len(conf)} do not "
                         f"(e.g. {float(conf[outside][0]):g})")
    which = np.minimum((conf * bins).astype(int), bins - 1)  # 1.0 falls in the last bin
    return [{"from": b / bins, "share": float((which == b).mean()), "confidence": float(conf[which == b].mean()),
             "accuracy": float(correct[which == b].mean())} for b in range(bins) if (which == b).any()]


def calibration_error(conf: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: over ``bins`` equal-width confidence bins ([0, 0.1), ..., [0.9, 1] for 10),
    |accuracy - mean confidence| weighted by the share of items in the bin (``reliability``); empty bins count
    nothing (NaN without items). ValueError for a NaN confidence, one outside [0, 1] (no bin holds it) or a length
    mismatch."""
    rows = reliability(conf, correct, bins)
    return float(sum(r["share"] * abs(r["accuracy"] - r["confidence"]) for r in rows)) if rows else float("nan")
