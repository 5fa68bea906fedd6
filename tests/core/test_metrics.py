"""Metrics against hand-computed values (core.metrics).

    .venv/bin/python -m pytest -q tests/core/test_metrics.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.metrics import (
    accuracy_at,
    cluster_bootstrap_ci,
    exact_match,
    f1_score,
    mrr_at,
    normalize_answer,
    passage_has_answer,
    pct,
    precision_at,
)


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a  cat, AN apple and   the dog. ", "cat apple and dog"),
        ("theory of the atom", "theory of atom"),  # 'the' only as a whole word
        ("U.S.A.", "usa"),
        ("", ""),
    ],
)
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_normalize_answer_equals_the_squad_script_on_random_text():
    """The official script's steps, one by one (punctuation dropped character by character), on random strings of
    letters, digits, ASCII punctuation, spaces and non-ASCII characters."""
    import random
    import re
    import string

    def squad(s: str) -> str:
        s = s.lower()
        s = "".join(ch for ch in s if ch not in set(string.punctuation))
        s = re.sub(r"\b(a|an|the)\b", " ", s)
        return " ".join(s.split())

    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + string.punctuation + "  \t\u00e9\u2013\u00bfThe an A"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert normalize_answer(text) == squad(text), text


def test_exact_match():
    assert exact_match("the Eiffel Tower", ["Eiffel tower."]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower", "Paris"]) == 0.0
    assert exact_match("paris", ["Eiffel Tower", "Paris"]) == 1.0


def test_f1_hand_computed():
    # pred {new, york, city} vs gold {new, york}: P = 2/3, R = 1 -> F1 = 0.8
    assert f1_score("New York City", ["New York"]) == pytest.approx(0.8)
    # pred {a1, b1, c1, d1} vs gold {b1, x1}: P = 1/4, R = 1/2 -> F1 = 2 * 1/8 / (3/4) = 1/3
    assert f1_score("a1 b1 c1 d1", ["b1 x1"]) == pytest.approx(1 / 3)
    # max over gold answers; repeated tokens count with multiplicity: {to, to, be} vs {to, be}: P=2/3, R=1
    assert f1_score("to to be", ["zzz", "to be"]) == pytest.approx(0.8)
    assert f1_score("paris", ["london"]) == 0.0
    assert f1_score("", ["london"]) == 0.0


def test_passage_has_answer_whole_words_after_normalisation():
    passage = "In 1841, the Great Western Railway reached Bristol."
    assert passage_has_answer(passage, ["great western railway"])
    assert passage_has_answer(passage, ["1841"])
    assert not passage_has_answer(passage, ["184"])  # not a substring of a word
    assert not passage_has_answer(passage, ["Bristo"])
    assert not passage_has_answer(passage, ["the", ""])  # normalises to nothing: never counts
    assert passage_has_answer(passage, ["London", "Bristol!"])


def test_ranking_metrics_hand_computed():
    correct = [
        [False, True, False, True],  # first hit at rank 2
        [True, False, False, False],  # rank 1
        [False, False, False, False],  # none
        [False, False, True],  # rank 3, only 3 results
    ]
    assert accuracy_at(correct, 1) == pytest.approx(1 / 4)
    assert accuracy_at(correct, 2) == pytest.approx(2 / 4)
    assert accuracy_at(correct, 3) == pytest.approx(3 / 4)
    assert mrr_at(correct, 4) == pytest.approx((1 / 2 + 1 + 0 + 1 / 3) / 4)
    assert mrr_at(correct, 2) == pytest.approx((1 / 2 + 1) / 4)
    # P@4: 2/4, 1/4, 0, 1/4 (the missing 4th result counts as wrong)
    assert precision_at(correct, 4) == pytest.approx((0.5 + 0.25 + 0 + 0.25) / 4)
    assert accuracy_at([], 5) == 0.0 and mrr_at([], 5) == 0.0 and precision_at([], 5) == 0.0


def test_pct_rounds_to_a_tenth():
    assert pct(2 / 3) == 66.7
    assert pct(0.12345) == 12.3
    assert pct(1.0) == 100.0


def test_bootstrap_of_independent_values_matches_the_normal_interval():
    # 400 questions, half right, one per group: the normal 95% interval is 50 +- 1.96 * 2.5 = [45.1, 54.9]
    values = [1.0, 0.0] * 200
    lo, hi = cluster_bootstrap_ci(values, list(range(400)))
    assert lo == pytest.approx(45.1, abs=0.8) and hi == pytest.approx(54.9, abs=0.8)


def test_bootstrap_over_correlated_groups_is_wider():
    # 20 articles of 20 questions; an article's questions are all right or all wrong. Resampling articles sees
    # 20 independent units (interval ~ sqrt(20) x wider than treating the 400 questions as independent).
    values = np.repeat([1.0, 0.0] * 10, 20)
    articles = np.repeat(np.arange(20), 20)
    lo_a, hi_a = cluster_bootstrap_ci(values, articles)
    lo_q, hi_q = cluster_bootstrap_ci(values, np.arange(400))
    assert lo_a < 50.0 < hi_a
    assert (hi_a - lo_a) > 3 * (hi_q - lo_q)


def test_bootstrap_of_constant_values_has_no_width_and_is_deterministic():
    assert cluster_bootstrap_ci([1.0] * 30, ["a", "b", "c"] * 10) == (100.0, 100.0)
    values, groups = np.random.default_rng(1).random(100), np.arange(100) % 7
    assert cluster_bootstrap_ci(values, groups, seed=3) == cluster_bootstrap_ci(values, groups, seed=3)


def test_bootstrap_rejects_mismatched_or_empty_input():
    with pytest.raises(ValueError, match="3 values but 2 group labels"):
        cluster_bootstrap_ci([1, 0, 1], ["a", "b"])
    with pytest.raises(ValueError, match="no values"):
        cluster_bootstrap_ci([], [])
