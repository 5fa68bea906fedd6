"""The lexical leg read from the postings (``core.lexical.Matches``) against the (B, P) arrays search made before
(``core.lexical_reference``): the same BM25 scores to the bit, the same units, scores and best passages, filtered or
not, on random corpora with many ties and on the demo corpus."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import numpy as np
import pytest

from spanseek.core.lexical import LexicalIndex
from spanseek.core.lexical_reference import (
    dense_lexical_units,
    dense_scores,
    dense_top,
    dense_unit_scores,
    dense_within,
    matches_of,
)
from spanseek.core.postings import Matches, matched_units, top_by_score, top_found

WORDS = [f"w{i}" for i in range(30)]
NO_TERM = "qzxvw"  # a word no passage holds


def random_corpus(seed: int) -> tuple[list[str], list[str], np.ndarray]:
    """Passages of a few dozen words (some copied, so that scores tie), questions with repeated, unknown and no
    terms, and each passage's document (runs of 1 to 4 passages)."""
    rng = random.Random(seed)
    passages = [" ".join(rng.choices(WORDS, weights=[1 / (i + 1) for i in range(30)], k=rng.randint(1, 20)))
                for _ in range(rng.randint(20, 80))]
    passages += rng.sample(passages, len(passages) // 3)  # copies: equal scores within and across documents
    rng.shuffle(passages)
    questions = [" ".join(rng.choices(WORDS + ["unknown"], k=rng.randint(1, 9))) for _ in range(12)]
    questions += ["", "the of and", NO_TERM, "w0 w0 w0 w1", "w29"]
    doc_of = np.repeat(np.arange(len(passages)), [rng.randint(1, 4) for _ in passages])[: len(passages)]
    return passages, questions, doc_of


def demo_corpus() -> tuple[list[str], list[str], np.ndarray]:
    from spanseek.core.io import read_corpus

    demo = Path(__file__).resolve().parents[2] / "data" / "demo" / "corpus.jsonl.gz"
    docs = list(read_corpus(demo))[:40]
    passages = [p for d in docs for p in d.paragraphs]
    doc_of = np.repeat(np.arange(len(docs)), [len(d.paragraphs) for d in docs])
    questions = [f"What is {p.split('.')[0]}?" for p in passages[::7]] + ["", "Who?", "the the", NO_TERM]
    return passages, questions, doc_of


CORPORA = [functools.partial(random_corpus, seed) for seed in range(4)] + [demo_corpus]


@pytest.mark.parametrize("corpus", range(len(CORPORA)))
def test_matches_hold_bm25s_scores_to_the_bit(corpus):
    """Each question's terms' postings summed give every passage the bits of bm25s' ``get_scores`` (terms in order,
    a repeated one twice; a float32 sum in another order differs in the last bit), and 0 to the others."""
    passages, questions, _ = CORPORA[corpus]()
    lexical = LexicalIndex.build(passages)
    terms = lexical.tokenize(questions)
    want = dense_scores(lexical, terms)
    got = lexical.matches(questions, terms)
    assert got.dense().view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert lexical.scores(questions).view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert (got.scores > 0).all() and all(np.all(np.diff(got.row(b)[0]) > 0) for b in range(len(got)))
    assert not len(got.row(questions.index(NO_TERM))[0])  # no term in the index: no match


@pytest.mark.parametrize("corpus", range(len(CORPORA)))
def test_matches_filtered_sliced_looked_up_and_ranked_as_the_array(corpus):
    """``within`` (a filter), ``of_questions``, ``at`` and ``top`` give what the (B, P) array gives: masked with
    ``np.where``, its rows taken, its entries read, ranked by a stable sort (ties by id)."""
    passages, questions, _ = CORPORA[corpus]()
    lexical = LexicalIndex.build(passages)
    matches = lexical.matches(questions)
    dense = matches.dense()
    allowed = np.random.default_rng(corpus).random(len(passages)) < 0.4
    assert matches.within(allowed).dense().tolist() == dense_within(dense, allowed).tolist()
    assert matches.within(np.zeros(len(passages), bool)).dense().tolist() == np.zeros_like(dense).tolist()
    picked = [3, 0, len(questions) - 1, 3]
    assert matches.of_questions(picked).dense().tolist() == dense[picked].tolist()
    assert matches.of_questions([]).dense().shape == (0, len(passages))
    for b in range(len(questions)):
        assert matches.at(b, np.arange(len(passages))).tolist() == dense[b].tolist()
    for k in (1, 3, len(passages) + 5):
        assert [a.tolist() for a in matches.top(k)] == [a.tolist() for a in dense_top(dense, k)]


def test_top_by_score_breaks_ties_at_the_cut_by_id():
    scores = np.array([2.0, 5.0, 2.0, 2.0, 5.0, 1.0], np.float32)
    ids = np.array([9, 4, 3, 7, 1, 0])
    assert top_by_score(scores, ids, 3).tolist() == [4, 1, 2]  # 5 (id 1), 5 (id 4), then the 2 with the lowest id
    assert top_by_score(scores, ids, 0).tolist() == []
    assert top_by_score(scores, ids, 10).tolist() == [4, 1, 2, 3, 0, 5]


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("corpus", range(len(CORPORA)))
def test_the_lexical_legs_units_are_those_of_the_array(corpus, filtered, shuffled):
    """``top_found`` and a unit's BM25 score (``matched_units``) from the matches against the old
    computation over the (B, P) array, for passages and documents, with a filter or not, at several cuts: the same
    units, scores and best passages in the same order (passages: ties at the cut by id, which the array's
    ``argpartition`` cut as it happened to; compared with a stable ranking of every passage there), and every unit's
    score that fusion reads (0 where none of its passages matches); documents holding runs of passages or not."""
    passages, questions, doc_of = CORPORA[corpus]()
    if shuffled:  # documents whose passages are not runs in passage order (a live index's replaced documents)
        doc_of = np.random.default_rng(corpus).permutation(doc_of)
    lexical = LexicalIndex.build(passages)
    unit_of_passage = {"passage": np.arange(len(passages)), "doc": doc_of}
    matches = lexical.matches(questions)
    dense = matches.dense()
    if filtered:
        allowed = np.random.default_rng(corpus).random(len(passages)) < 0.5
        matches, dense = matches.within(allowed), dense_within(dense, allowed)
    for n in (1, 2, 5, len(passages) + 1):
        got = top_found(matched_units(matches, doc_of), n)
        want = dense_lexical_units(dense, doc_of, False, n)
        assert [[a.tolist() for a in g] for g in got] == [[a.tolist() for a in w] for w in want]
        got = top_found(matched_units(matches), n)
        for row, (units, scores, best) in zip(dense, got, strict=True):
            top = np.argsort(-row, kind="stable")[:n]
            top = top[row[top] > 0]
            assert (units.tolist(), best.tolist(), scores.tolist()) == (top.tolist(), top.tolist(), row[top].tolist())
        untied = [b for b, row in enumerate(dense) if n >= len(row) or np.sort(row)[-n] != np.sort(row)[-n - 1]]
        want = dense_lexical_units(dense, unit_of_passage["passage"], True, n)
        assert [[a.tolist() for a in got[b]] for b in untied] == [[a.tolist() for a in want[b]] for b in untied]
    units = dense_unit_scores(dense, doc_of, int(doc_of.max()) + 1)
    for b in range(len(questions)):
        docs, best, _ = matched_units(matches, doc_of)[b]
        looked_up = np.zeros(units.shape[1])
        looked_up[docs] = best
        assert looked_up.tolist() == units[b].tolist()


def test_matches_of_an_array_are_its_positive_entries():
    dense = np.array([[0, 1.5, 0, 2], [0, 0, 0, 0], [3, 0, 0, 0.25]], np.float32)
    matches = matches_of(dense)
    assert matches.indptr.tolist() == [0, 2, 2, 4] and matches.passages.tolist() == [1, 3, 0, 3]
    assert matches.dense().tolist() == dense.tolist()
    empty = Matches.of_postings([], 2, 5)
    assert empty.dense().tolist() == np.zeros((2, 5)).tolist() and empty.top(2)[0].tolist() == [[-1, -1]] * 2


def test_a_batchs_documents_are_found_for_the_batch_at_once_not_a_question_at_a_time():
    """``matched_units`` for documents, a batch at once: 512 questions that each match a passage or two cost far less
    than 46 times what 11 do (one sort of the batch's (question, document) pairs; a sort and two reductions a
    question cost 50 times as much), and each question gets its own documents, none where it matches nothing."""
    import time

    passages = [f"w{i} w{i % 3}" for i in range(60)]
    doc_of = np.arange(60) // 3
    lexical = LexicalIndex.build(passages)
    few = lexical.matches(["w11", "", "w31 w4"] * 3 + ["w40"] * 2)
    many = lexical.matches(["w11", "", "w31 w4"] * 171 + ["w40"] * 5)

    def least(matches: Matches) -> float:
        best = float("inf")
        for _ in range(20):
            started = time.process_time()
            matched_units(matches, doc_of)
            best = min(best, time.process_time() - started)
        return best

    got = matched_units(many, doc_of)
    want = [[a.tolist() for a in matched_units(lexical.matches([q]), doc_of)[0]] for q in ("w11", "", "w31 w4")]
    assert [[a.tolist() for a in g] for g in got[:3]] == want and [[a.tolist() for a in g] for g in got[-5:]] == [
        [a.tolist() for a in matched_units(lexical.matches(["w40"]), doc_of)[0]]] * 5
    assert least(many) < 20 * least(few)  # (7 times now; 50 times a question at a time)
