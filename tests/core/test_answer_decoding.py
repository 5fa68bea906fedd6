"""Span length bias and answer-string decoding (core.search.length_scores / best_span / best_answer, Searcher).

Oracles (the searcher's top phrase under a length bias against brute force is in test_search.py): ``best_answer`` equals ``best_span`` when no two candidate spans read the same, and sums the probability
of spans that do (hand example).

    .venv/bin/python -m pytest -q tests/core/test_answer_decoding.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.config import EncoderConfig
from spanseek.core.metrics import normalize_answer
from spanseek.core.params import SearchParams
from spanseek.core.spans import best_answer, best_span, length_scores, merge_by_answer
from spanseek.core.text import FLAG_END, FLAG_START
from tests.conftest import span_chars
from tests.core.test_search import random_questions

ALL_OK = FLAG_START | FLAG_END


def test_length_scores_pads_with_the_last_entry_and_truncates():
    assert length_scores((), 3).tolist() == [0.0, 0.0, 0.0]
    assert length_scores((0.0, -1.0, -2.0), 2).tolist() == [0.0, -1.0]
    assert length_scores((0.0, -1.0), 4).tolist() == [0.0, -1.0, -1.0, -1.0]


def test_best_span_adds_the_length_bias():
    start = np.array([1.0, 5.0, 0.0, 2.0])
    end = np.array([0.0, 1.0, 3.0, 9.0])
    flags = np.full(4, ALL_OK, dtype=np.uint8)
    assert best_span(start, end, flags, 3) == (1, 3, 14.0)  # 5 + 9, three tokens
    # three-token spans cost 4: 2 + 9 (one token) = 11 now beats 5 + 9 - 4 = 10
    assert best_span(start, end, flags, 3, (0.0, 0.0, -4.0)) == (3, 3, 11.0)


def test_best_answer_sums_spans_that_read_the_same():
    # tokens: "the Sun Moon Sun"; first with single-token spans only (L = 1)
    words = ["the", "Sun", "Moon", "Sun"]
    start = np.array([0.0, 1.0, 1.5, 1.0])
    end = np.zeros(4)
    flags = np.full(4, ALL_OK, dtype=np.uint8)

    def text(i, j):
        return " ".join(words[i : j + 1])

    # best span: "Moon" (1.5); but "Sun" is read twice (1.0 + 1.0), and "the Sun" normalises to "sun" too
    assert best_span(start, end, flags, 1)[:2] == (2, 2)
    i, j, score = best_answer(start, end, flags, 1, text)
    assert (i, j) == (1, 1)  # the best span of the winning answer
    assert score == pytest.approx(np.log(2 * np.exp(1.0)))
    # L = 2 adds "the Sun" (0 + 0, normalised "sun"), "Sun Moon" (1 + 0) and "Moon Sun" (1.5 + 0)
    i, j, score = best_answer(start, end, flags, 2, text)
    assert text(i, j) == "Sun"  # e + e + 1 = 6.4 against e^1.5 = 4.5 for "Moon" and for "Moon Sun"
    assert score == pytest.approx(np.log(2 * np.exp(1.0) + 1.0))
    assert best_answer(start, end, flags, 1, text, candidates=1)[:2] == (2, 2)  # one candidate: the best span


def test_best_answer_is_best_span_when_every_span_reads_differently():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        start, end = rng.standard_normal((2, n))
        flags = rng.choice([FLAG_START, FLAG_END, ALL_OK, 0], n, p=[0.2, 0.2, 0.5, 0.1]).astype(np.uint8)
        flags[0] = ALL_OK  # at least one valid span
        bias = rng.standard_normal(5)
        i, j, s = best_answer(start, end, flags, 5, lambda a, b: f"w{a} w{b}", tuple(bias))  # distinct texts
        assert (i, j) == best_span(start, end, flags, 5, tuple(bias))[:2]
        assert s >= best_span(start, end, flags, 5, tuple(bias))[2] - 1e-9  # log-sum-exp of the others too


@pytest.mark.parametrize("bias", [None, (0.0, 3.0, -2.0, 1.0, -1.0, 4.0)])
def test_passage_decodes_span_and_answer(tiny_searcher, bias):
    """passage_best_span against best_span / best_answer on the passage's vectors, with and without a length bias."""
    from spanseek.core.search import Searcher

    idx, L = tiny_searcher.index, tiny_searcher.max_answer_tokens
    searcher = tiny_searcher if bias is None else Searcher(idx, length_bias=bias)
    qs, qe = random_questions(np.random.default_rng(6), 5, idx.vectors.shape[1])
    a, z = idx.passage_range(0)
    vecs = idx.token_vectors(np.arange(a, z))
    offs = idx.token_offsets[a:z]
    text = idx.passages[0]["text"]
    moved = 0
    for b in range(len(qs)):
        args = (vecs @ qs[b], vecs @ qe[b], idx.token_flags[a:z], L)
        for decode, (i, j, s) in [("span", best_span(*args, bias)),
                                  ("answer", best_answer(*args, lambda x, y: text[offs[x, 0] : offs[y, 1]], bias))]:
            hit = searcher.passage_best_span(0, qs[b], qe[b], decode=decode)
            assert (hit.start, hit.end) == span_chars(idx, a + i, a + j)
            assert hit.score == pytest.approx(s, rel=1e-4, abs=1e-4)
        moved += best_span(*args, bias)[:2] != best_span(*args)[:2]
    assert bias is None or moved > 0  # the bias changed some answers, so dropping it would fail the test
    with pytest.raises(ValueError, match="decode must be one of"):
        searcher.passage_best_span(0, qs[0], qe[0], decode="beam")


def test_best_answer_returns_the_best_span_of_the_winning_answer():
    words = ["Sun", "Moon", "Sun"]
    start = np.array([1.0, 1.8, 1.4])  # "Sun" at 0 (1.0) and at 2 (1.4): the second is its best span
    flags = np.full(3, ALL_OK, dtype=np.uint8)
    i, j, _ = best_answer(start, np.zeros(3), flags, 1, lambda a, b: " ".join(words[a : b + 1]))
    assert (i, j) == (2, 2)


def test_empty_answers_are_never_merged():
    # "the", "," and "a" all normalise to nothing: summed they would beat "Paris"
    merged = merge_by_answer(["Paris", "the", ",", "a"], [2.0, 1.0, 1.0, 1.0])
    assert merged[0] == (0, 2.0) and len(merged) == 4


def test_no_valid_span_is_a_clear_error():
    flags = np.zeros(3, dtype=np.uint8)  # no token may start or end a phrase
    for decode in (best_span, lambda *a: best_answer(*a, lambda x, y: "")):
        with pytest.raises(ValueError, match="no valid span"):
            decode(np.zeros(3), np.zeros(3), flags, 2)
    with pytest.raises(ValueError, match="no valid span"):
        best_span(np.zeros(0), np.zeros(0), np.zeros(0, np.uint8), 2)


def test_config_length_bias_round_trips_and_is_checked(tmp_path):
    cfg = EncoderConfig(max_answer_tokens=3, length_bias=(0.0, -0.5, -1.0))
    cfg.save(tmp_path / "c.json")
    assert EncoderConfig.load(tmp_path / "c.json") == cfg
    assert EncoderConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != "length_bias"}).length_bias == ()
    with pytest.raises(ValueError, match=r"length_bias must have max_answer_tokens \(3\) entries, got 2"):
        EncoderConfig(max_answer_tokens=3, length_bias=(0.0, 1.0))
    with pytest.raises(ValueError, match="length_bias must be a list of numbers, got None"):
        EncoderConfig.from_dict({"max_answer_tokens": 2, "length_bias": None})
    with pytest.raises(ValueError, match="length_bias must be a list of numbers, got '01'"):
        EncoderConfig.from_dict({"max_answer_tokens": 2, "length_bias": "01"})
    with pytest.raises(ValueError, match="length_bias must be finite"):
        EncoderConfig(max_answer_tokens=2, length_bias=(0.0, float("nan")))


def test_merge_by_answer_hand_example():
    # best first: "Sun" 2.0, "Moon" 1.9, "the Sun" 1.0 (reads "sun"), "Mars" 0.5
    merged = merge_by_answer(["Sun", "Moon", "the Sun", "Mars"], [2.0, 1.9, 1.0, 0.5])
    assert [r for r, _ in merged] == [0, 1, 3]  # each answer's best candidate, best answer first
    assert merged[0][1] == pytest.approx(np.log(np.exp(2.0) + np.exp(1.0)))
    assert [s for _, s in merged[1:]] == pytest.approx([1.9, 0.5])
    # summing can reorder: two weaker phrases of one answer beat a stronger single one
    assert merge_by_answer(["Moon", "Sun", "sun."], [2.0, 1.5, 1.5])[0][0] == 1


def test_merged_phrase_search_groups_the_unmerged_candidates(tiny_searcher):
    """Oracle: merging = grouping the best max(64, 4 top_k) unmerged phrases by normalised text, by brute force."""
    idx = tiny_searcher.index
    qs, qe = random_questions(np.random.default_rng(7), 6, idx.vectors.shape[1])
    merged = tiny_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=5, merge_answers=True, mode="dense",
                                                               allow_overlap=True))
    grouped_any = False
    raw = SearchParams(unit="phrase", top_k=64, mode="dense", allow_overlap=True)
    for b, cands in enumerate(tiny_searcher.search_vectors(qs, qe, raw)):
        groups: dict[str, list] = {}
        for h in cands:
            groups.setdefault(normalize_answer(h.text), []).append(h)
        grouped_any |= any(len(g) > 1 for g in groups.values())
        expected = sorted(((float(np.log(np.sum(np.exp([h.score for h in g])))), g[0]) for g in groups.values()),
                          key=lambda x: -x[0])[:5]
        assert [(h.text, h.passage_id, h.start) for h in merged[b]] == [(g.text, g.passage_id, g.start)
                                                                        for _, g in expected]
        assert [h.score for h in merged[b]] == pytest.approx([s for s, _ in expected], rel=1e-5)
        assert len({normalize_answer(h.text) for h in merged[b]}) == len(merged[b])
    assert grouped_any  # some answer had several phrases, so the test can fail
    with pytest.raises(ValueError, match="merge_answers applies to unit=phrase"):
        tiny_searcher.search_vectors(qs, qe, SearchParams(unit="passage", top_k=5, merge_answers=True, mode="dense"))
