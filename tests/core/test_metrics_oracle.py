"""Every metric of core.metrics against an independent oracle written from its definition, on thousands of random
and adversarial inputs.

    .venv/bin/python -m pytest -q tests/core/test_metrics_oracle.py

The SQuAD oracle follows the official v1.1 evaluation's definition: lower case, drop ASCII punctuation, drop the
articles a/an/the as whole words, collapse white space; exact match and token-bag F1 (0 when no token is shared),
each the maximum over the reference answers.
"""

from __future__ import annotations

import math
import random
import re
import string
from collections import Counter

import numpy as np
import pytest

from spanseek.core.metrics import (
    accuracy_at,
    calibration_error,
    cluster_bootstrap_ci,
    exact_match,
    f1_score,
    mcnemar_z,
    mrr_at,
    passage_has_answer,
    precision_at,
    reliability,
)

# pieces that stress each step: articles glued to words and repeated, Unicode punctuation and spaces that SQuAD keeps,
# case pairs that change length when lowered, numbers with separators, combining marks, non-Latin digits
PIECES = [*"abcdehnt ,.-'\"$%", "the", "The", "THE", "a", "A", "an", "An", "the the", "a an the", "1,000", "3.14",
          "-84", "théâtre", "Æ", "ß", "İ", "ǅ", "ﬁ", "e\u0301", "٣", "\u00a0", "\u2009", "\u3000", "\t", "\n", "\u2013",
          "\u201cq\u201d", "«", "»", "。", "¿", "¡", "(", ")", "an's", "the-a", "a.", "_the_", "anthem", "theta"]


PUNCTUATION = set(string.punctuation)


def squad_normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_em(prediction: str, answers: list[str]) -> float:
    return max(float(squad_normalize(prediction) == squad_normalize(a)) for a in answers)


def squad_f1(prediction: str, answers: list[str]) -> float:
    def one(gold: str) -> float:
        pred_tokens, gold_tokens = squad_normalize(prediction).split(), squad_normalize(gold).split()
        same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
        if same == 0:
            return 0.0
        precision, recall = same / len(pred_tokens), same / len(gold_tokens)
        return 2 * precision * recall / (precision + recall)

    return max(one(a) for a in answers)


def random_text(rng: random.Random, most: int = 8) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, most)))


def test_em_and_f1_equal_the_squad_definition_on_random_and_adversarial_strings():
    rng = random.Random(7)
    cases = [(random_text(rng), [random_text(rng) for _ in range(rng.randint(1, 3))]) for _ in range(20000)]
    # an answer drawn from the prediction's own words, to reach EM 1 and partial F1 often
    for _ in range(5000):
        words = [rng.choice(PIECES) for _ in range(rng.randint(1, 6))]
        cases.append((" ".join(words), [" ".join(rng.sample(words, rng.randint(1, len(words)))), random_text(rng)]))
    cases += [("", [""]), ("the", ["a"]), ("the the", ["an"]), ("1,000", ["1000"]), ("1,000", ["1 000"]),
              ("The Beatles", ["beatles!"]), ("\u201cBeatles\u201d", ["Beatles"]), ("a b a", ["a b"]), ("x x", ["x"])]
    hits = 0
    for prediction, answers in cases:
        assert exact_match(prediction, answers) == squad_em(prediction, answers), (prediction, answers)
        assert abs(f1_score(prediction, answers) - squad_f1(prediction, answers)) < 1e-12, (prediction, answers)
        hits += squad_em(prediction, answers) == 1.0
    assert hits > 1000  # the cases reach both outcomes


def test_passage_has_answer_is_a_run_of_whole_normalised_words():
    """Definition: some answer that normalises to at least one word occurs as a contiguous run of the normalised
    passage's words."""
    def contains(passage: str, answers: list[str]) -> bool:
        words = squad_normalize(passage).split()
        for answer in answers:
            gold = squad_normalize(answer).split()
            if gold and any(words[i : i + len(gold)] == gold for i in range(len(words) - len(gold) + 1)):
                return True
        return False

    rng = random.Random(3)
    found = 0
    for _ in range(10000):
        passage = random_text(rng, 20)
        words = passage.split()
        answers = [random_text(rng, 3)]
        if words:
            a = rng.randrange(len(words))
            answers.append(" ".join(words[a : a + rng.randint(1, 3)]))
        assert passage_has_answer(passage, answers) == contains(passage, answers), (passage, answers)
        found += contains(passage, answers)
    assert 1000 < found < 10000


def test_ranking_metrics_equal_their_definitions_on_random_lists():
    rng = random.Random(5)
    for _ in range(300):
        rows = [[rng.random() < 0.2 for _ in range(rng.randint(0, 25))] for _ in range(rng.randint(1, 30))]
        for k in (1, 5, 20):
            first = [next((r for r, ok in enumerate(row[:k], start=1) if ok), None) for row in rows]
            assert accuracy_at(rows, k) == pytest.approx(sum(f is not None for f in first) / len(rows))
            assert mrr_at(rows, k) == pytest.approx(sum(1 / f for f in first if f is not None) / len(rows))
            assert precision_at(rows, k) == pytest.approx(sum(sum(row[:k]) / k for row in rows) / len(rows))


def ece_oracle(conf: list[float], correct: list[bool], bins: int = 10) -> float:
    """Equal-width bins [b/bins, (b+1)/bins), the last one closed at 1; each non-empty bin's |accuracy - mean
    confidence| weighted by its share of the items."""
    total = 0.0
    for b in range(bins):
        inside = [i for i, c in enumerate(conf) if b / bins <= c < (b + 1) / bins or (b == bins - 1 and c == 1.0)]
        if inside:
            accuracy = sum(correct[i] for i in inside) / len(inside)
            mean_conf = sum(conf[i] for i in inside) / len(inside)
            total += len(inside) / len(conf) * abs(accuracy - mean_conf)
    return total


def test_calibration_error_equals_equal_width_binning_with_empty_bins_and_the_ends():
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randint(1, 60)
        # confidences away from the bin edges (where the oracle's b / bins and the product differ in the last bit),
        # and the ends 0 and 1 themselves
        conf = [rng.choice([0.0, 1.0, round(rng.uniform(0, 1), 3) + 0.0004]) for _ in range(n)]
        conf = [min(c, 1.0) for c in conf]
        correct = [rng.random() < c for c in conf]
        assert calibration_error(np.asarray(conf), np.asarray(correct)) == pytest.approx(ece_oracle(conf, correct))
    assert calibration_error(np.asarray([1.0, 1.0]), np.asarray([True, False])) == pytest.approx(0.5)  # bin 9
    assert calibration_error(np.asarray([0.0, 0.0]), np.asarray([False, False])) == 0.0  # bin 0
    assert math.isnan(calibration_error(np.asarray([]), np.asarray([])))


def test_reliability_gives_each_nonempty_bins_share_confidence_and_accuracy():
    conf = np.asarray([0.05, 0.15, 0.15, 0.95, 1.0])
    correct = np.asarray([False, True, False, True, True])
    assert reliability(conf, correct) == [
        {"from": 0.0, "share": 0.2, "confidence": 0.05, "accuracy": 0.0},
        {"from": 0.1, "share": 0.4, "confidence": pytest.approx(0.15), "accuracy": 0.5},
        {"from": 0.9, "share": 0.4, "confidence": pytest.approx(0.975), "accuracy": 1.0}]
    assert reliability(np.asarray([]), np.asarray([])) == []
    with pytest.raises(ValueError, match="must lie in"):
        reliability(np.asarray([1.5]), np.asarray([True]))


@pytest.mark.parametrize(("conf", "correct", "message"), [
    ([0.9, float("nan")], [True, False], "1 of 2 confidences are NaN"),
    ([0.9, 1.5], [True, False], r"must lie in \[0, 1\]: 1 of 2 do not \(e.g. 1.5\)"),
    ([-0.15, 0.5], [True, False], r"must lie in \[0, 1\]"),
    ([0.9, 0.5], [True], "2 confidences but 1 correctness labels"),
])
def test_calibration_error_refuses_what_it_cannot_bin(conf, correct, message):
    """A NaN or out-of-range confidence used to fall into no bin (NaN, -0.15) or the last one (1.5) while counting in
    the weights: a wrong ECE, not an error."""
    with pytest.raises(ValueError, match=message):
        calibration_error(np.asarray(conf), np.asarray(correct))


def test_mcnemar_z_of_the_discordant_pairs():
    """z = (b - c) / sqrt(b + c) over the questions only one system gets right: the figures the results cite
    (81 won / 42 lost: z 3.5; 184 / 129: 3.1; 90 / 57: 2.7), its sign, and 0 with no discordant pair, where
    nothing tells the two systems apart (not a division by zero)."""
    assert (mcnemar_z(81, 42), mcnemar_z(184, 129), mcnemar_z(90, 57)) == (3.5, 3.1, 2.7)
    assert mcnemar_z(42, 81) == -3.5 and mcnemar_z(5, 5) == 0.0 and mcnemar_z(0, 0) == 0.0
    assert mcnemar_z(4, 0) == 2.0
    with pytest.raises(ValueError, match="gained=-1"):
        mcnemar_z(-1, 3)


def test_bootstrap_draws_whole_articles_and_averages_over_their_questions():
    """Oracle: draw as many articles as there are, with replacement, pool all their questions, take the mean; the
    2.5th and 97.5th percentiles of those means. Articles of unequal size tell the mean over questions (what eval
    reports) from the mean of article means."""
    sizes, rates = [60, 5, 5, 10, 20, 8, 12], [0.9, 0.0, 0.2, 0.4, 0.5, 0.1, 0.3]
    values = np.concatenate([np.arange(n) < round(n * r) for n, r in zip(sizes, rates, strict=True)]).astype(float)
    groups = np.repeat([f"article-{i}" for i in range(len(sizes))], sizes)
    rng = np.random.default_rng(123)
    by_article = [values[groups == g] for g in np.unique(groups)]
    means = []
    for _ in range(20000):
        drawn = [by_article[i] for i in rng.integers(0, len(by_article), len(by_article))]
        means.append(np.concatenate(drawn).mean())
    want = 100 * np.percentile(means, [2.5, 97.5])
    got = cluster_bootstrap_ci(values, groups, n_boot=20000)
    assert got == pytest.approx(want, abs=1.0)
    article_means = [np.mean([by_article[i].mean() for i in rng.integers(0, 7, 7)]) for _ in range(20000)]
    assert abs(100 * np.percentile(article_means, 97.5) - got[1]) > 3  # the other statistic would be told apart
