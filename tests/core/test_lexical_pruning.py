"""The lexical leg's pruned top-k (``core.postings.Postings``, MaxScore) against every match added up
(``Matches``, held to bm25s' own scores by ``test_lexical_matches.py``) and the (B, P) arrays search made before
(``core.lexical_reference``): the same units, scores to the bit, best passages and ties, at every cut, filtered or
not, for passages and documents, on random corpora whose questions hold terms that most passages hold, over a
base index and over a live snapshot's base and segment; and what fusion reads deeper than the top (any candidate's
score) the same. Every question is pruned here (``eager_most=-1``)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from spanseek.core import postings as postings_module
from spanseek.core.fusion import LexicalFusion
from spanseek.core.lexical import LexicalIndex
from spanseek.core.lexical_reference import dense_lexical_units, dense_unit_scores, dense_within
from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings
from spanseek.core.postings import Postings, matched_units, top_found

COMMON = ["year", "city", "state"]  # held by most passages
WORDS = COMMON + [f"w{i}" for i in range(40)]


def heavy_corpus(seed: int) -> tuple[list[list[str]], list[list[str]], np.ndarray]:
    """Passages' terms (a few common terms in most of them, the rest Zipf-like; some passages copied, so that scores
    tie), questions made mostly of common terms (repeated, unknown, none), and each passage's document."""
    rng = random.Random(seed)
    passages = []
    for _ in range(rng.randint(150, 300)):
        terms = [t for t in COMMON if rng.random() < 0.85]
        terms += rng.choices(WORDS[3:], weights=[1 / (i + 1) for i in range(40)], k=rng.randint(0, 12))
        passages.append(terms)
    passages += rng.sample(passages, len(passages) // 4)
    rng.shuffle(passages)
    questions = [rng.sample(COMMON, rng.randint(1, 3)) + rng.choices(WORDS, k=rng.randint(0, 3)) for _ in range(14)]
    questions += [[], ["unknown"], ["year", "year", "w39"], ["w39", "city"], COMMON, [rng.choice(WORDS[3:])]]
    doc_of = np.repeat(np.arange(len(passages)), [rng.randint(1, 5) for _ in passages])[: len(passages)]
    return passages, questions, doc_of


def pruned(postings: Postings) -> Postings:
    """The same postings with every question pruned, none added up whole."""
    return Postings.of_lists(postings.lists, postings.bounds, postings.n_passages, eager_most=-1)


def as_lists(found):
    return [[a.tolist() for a in f] for f in found]


def assert_pruned_as_every_match(postings: Postings, doc_of: np.ndarray, allowed: np.ndarray | None) -> None:
    """Top units of ``postings`` (pruned) at several cuts against the same of every match, and against the (B, P)
    array's documents; each passage's score looked up; the (B, k) top."""
    quick = pruned(postings) if allowed is None else pruned(postings).within(allowed)
    every = postings.matches() if allowed is None else postings.matches().within(allowed)
    dense = every.dense()
    for kept in (quick, postings if allowed is None else postings.within(allowed)):  # (pruned, and added up whole)
        assert kept.matches().dense().view(np.uint32).tolist() == dense.view(np.uint32).tolist()
    for n in (1, 2, 3, 7, 20, postings.n_passages + 1):
        for units in (None, doc_of):
            assert as_lists(quick.top_units(n, units)) == as_lists(top_found(matched_units(every, units), n))
        assert as_lists(quick.top_units(n, doc_of)) == as_lists(dense_lexical_units(dense, doc_of, False, n))
        assert [a.tolist() for a in quick.top(n)] == [a.tolist() for a in every.top(n)]
    for b in range(len(quick)):
        assert quick.at(b, np.arange(postings.n_passages)).view(np.uint32).tolist() == \
            dense[b].view(np.uint32).tolist()


@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_pruned_top_units_are_those_of_every_match(seed, filtered):
    passages, questions, doc_of = heavy_corpus(seed)
    if seed % 2:  # documents whose passages are not runs in passage order (a live index's replaced documents)
        doc_of = np.random.default_rng(seed).permutation(doc_of)
    lexical = LexicalIndex.of_terms(passages)
    allowed = np.random.default_rng(seed).random(len(passages)) < 0.3 if filtered else None
    assert_pruned_as_every_match(lexical.postings(["?"] * len(questions), questions), doc_of, allowed)


@pytest.mark.parametrize("seed", range(3))
def test_pruned_top_units_of_a_live_snapshot_are_those_of_every_match(seed):
    """Over a live snapshot's base (some of its passages deleted) and segment runs, scored as ``LiveLexical`` scores
    them."""
    passages, questions, doc_of = heavy_corpus(seed)
    dead = np.flatnonzero(np.random.default_rng(seed).random(len(passages) - 40) < 0.2)
    live = live_of(passages[:-40], passages[-40:], dead, (15, 16))
    got = live.postings(["?"] * len(questions), questions)
    assert got.matches().dense().view(np.uint32).tolist() == live.scores(["?"] * len(questions), questions).view(
        np.uint32).tolist()
    for terms, bounds in zip(got.lists, got.bounds, strict=True):  # (what it prunes by, its deleted passages counted)
        assert all(bound >= term.scores.max() for term, bound in zip(terms, bounds, strict=True))
    assert_pruned_as_every_match(got, doc_of, None)
    assert_pruned_as_every_match(got, doc_of, np.random.default_rng(seed).random(len(passages)) < 0.5)


@pytest.mark.parametrize("seed", range(2))
def test_fusion_reads_any_candidates_score_from_pruned_postings(seed):
    """What hybrid fusion reads deeper than the lexical top: the BM25 score of any unit the dense leg brings
    (``LexicalFusion.unit_scores``: a document's, its best passage's; 0 where none matches), filtered or not, equals
    the (B, P) array's."""
    passages, questions, doc_of = heavy_corpus(seed)
    lexical = LexicalIndex.of_terms(passages)
    fusion = LexicalFusion(lexical, None, None, {"passage": np.arange(len(passages)), "doc": doc_of},  # type: ignore
                           None)
    allowed = np.random.default_rng(seed).random(len(passages)) < 0.4
    every = lexical.matches(["?"] * len(questions), questions).dense()
    for postings, dense in ((pruned(lexical.postings(["?"] * len(questions), questions)), every),
                            (pruned(lexical.postings(["?"] * len(questions), questions)).within(allowed),
                             dense_within(every, allowed))):
        docs = dense_unit_scores(dense, doc_of, int(doc_of.max()) + 1)
        wanted = np.random.default_rng(seed).permutation(int(doc_of.max()) + 1)[:25]
        for b in range(len(questions)):
            assert fusion.unit_scores(postings, b, "doc", wanted).tolist() == docs[b][wanted].tolist()
            assert fusion.unit_scores(postings, b, "passage", wanted).tolist() == dense[b][wanted].tolist()


def test_a_common_terms_postings_are_looked_up_not_read_through(monkeypatch):
    """A question with a term that every passage holds and a rare one: its top 5 scores the rare term's passages and
    looks the common term up in them, instead of scoring all 20,000 passages (the top is still every match's)."""
    passages = [["common", f"t{i % 997}"] + (["rare"] if i % 4000 == 7 else []) for i in range(20_000)]
    lexical = LexicalIndex.of_terms(passages)
    looked_up: list[int] = []
    scored: list[int] = []
    scores_of, scored_in_full = postings_module.scores_of, postings_module.scored_in_full
    monkeypatch.setattr(postings_module, "scores_of", lambda held, s, wanted: looked_up.append(len(wanted)) or
                        scores_of(held, s, wanted))
    monkeypatch.setattr(postings_module, "scored_in_full", lambda *a: (lambda out: scored.append(len(out[0])) or out)(
        scored_in_full(*a)))
    postings = pruned(lexical.postings(["?"], [["common", "rare"]]))
    got = postings.top_units(5)
    assert scored == [5] and max(looked_up) <= 5  # the rare term's passages alone, the common term looked up there
    assert as_lists(got) == as_lists(top_found(matched_units(postings.matches()), 5))
    assert got[0][2].tolist() == [7, 4007, 8007, 12007, 16007]


def test_fusion_reads_a_whole_questions_candidates_from_its_matched_documents(monkeypatch):
    """A question whose postings are added up whole (the demo index's, every one) has every document it matches
    found with its top (once a batch, ``Postings.every_unit``): fusion reads a candidate document's BM25 score there,
    as it did before pruning, and looks up none of its passages' (a lookup of each document's passages cost a search
    of the demo index's documents 2 ms more a batch of 64); the scores are the (B, P) array's, filtered or not."""
    passages, questions, doc_of = heavy_corpus(5)
    lexical = LexicalIndex.of_terms(passages)
    fusion = LexicalFusion(lexical, None, None, {"passage": np.arange(len(passages)), "doc": doc_of},  # type: ignore
                           None)
    allowed = np.random.default_rng(5).random(len(passages)) < 0.4
    every = lexical.matches(["?"] * len(questions), questions).dense()
    wanted = np.random.default_rng(5).permutation(int(doc_of.max()) + 1)[:25]
    looked_up, found = [], []
    at, best_of_units = Postings.at, postings_module.best_of_units
    monkeypatch.setattr(Postings, "at", lambda self, b, p: looked_up.append(len(p)) or at(self, b, p))
    monkeypatch.setattr(postings_module, "best_of_units", lambda *a: found.append(1) or best_of_units(*a))
    for postings, dense in ((lexical.postings(["?"] * len(questions), questions), every),
                            (lexical.postings(["?"] * len(questions), questions).within(allowed),
                             dense_within(every, allowed))):
        assert postings.few.all()
        found.clear()
        top = postings.top_units(5, doc_of)
        docs = dense_unit_scores(dense, doc_of, int(doc_of.max()) + 1)
        for b in range(len(questions)):
            assert fusion.unit_scores(postings, b, "doc", wanted).tolist() == docs[b][wanted].tolist()
            if len(top[b][0]):  # (fusion's candidates are never none)
                assert fusion.unit_scores(postings, b, "doc", top[b][0]).tolist() == top[b][1].tolist()
        assert looked_up == [] and found == [1]  # (the batch's documents found once, for its top and fusion)


def live_of(base: list[list[str]], segment: list[list[str]], dead: np.ndarray, cuts: tuple[int, ...]) -> LiveLexical:
    """A live snapshot's BM25 (``LiveLexical``) over ``base`` passages' terms, ``dead`` of them deleted, and
    ``segment`` passages (each a document of its own) in runs cut at ``cuts``."""
    vocab: dict[str, int] = {}
    rows, cols = zip(*[(p, vocab.setdefault(t, len(vocab))) for p, ts in enumerate(base) for t in ts], strict=True)
    tf = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(base), len(vocab)))
    tf.sum_duplicates()
    terms = BaseTerms(tf, vocab, np.asarray([len(t) for t in base]))
    written = [terms.numbered([passage]) for passage in segment]
    runs = [SegmentPostings.of(written[a:b]) for a, b in zip((0, *cuts), (*cuts, len(segment)), strict=True)]
    return LiveLexical(SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene")), terms, runs,
                       dead)  # type: ignore[arg-type]


def test_a_live_snapshot_scores_a_common_terms_postings_only_where_it_looks_them_up(monkeypatch):
    """A live snapshot prunes as its base does: for a question with a term that every passage holds and a rare one,
    its top 5 scores the rare term's passages (some deleted, some written since) and the common term's only there,
    not its 20,000 postings; the bound it prunes by is no less than any of the term's scores; the top, scores and
    ties are every match's, to the bit."""
    base = [["common", f"t{i % 997}"] + (["rare"] * (1 + i % 3) if i % 4000 == 7 else []) for i in range(20_000)]
    segment = [["common", "rare", "t1"], ["t2"], ["common", "rare"], ["common"]]
    dead = np.asarray([3, 4007, 12007, 19_999])  # a rare passage deleted among them
    live = live_of(base, segment, dead, (1, 3))
    scored: list[int] = []
    score = LiveLexical._scored
    monkeypatch.setattr(LiveLexical, "_scored", lambda self, idf, tf, length: scored.append(len(tf)) or
                        score(self, idf, tf, length))
    monkeypatch.setattr(postings_module, "EAGER_MOST", -1)  # (as a question of over 65,536 postings is)
    postings = live.postings(["?"], [["common", "rare"]])
    got = postings.top_units(5)
    assert sum(scored) < 100  # (its 7 rare passages, 5 of the common term's looked up, the bounds' few)
    every = postings.matches()
    assert as_lists(got) == as_lists(top_found(matched_units(every), 5))
    assert sorted(got[0][2].tolist()) == [7, 8007, 16007, 20_000, 20_002]  # (not the deleted 4007 and 12007)
    assert all(bound >= term.scores.max() for term, bound in zip(postings.lists[0], postings.bounds[0], strict=True))
    assert postings.at(0, np.arange(live.n_passages)).view(np.uint32).tolist() == \
        every.dense()[0].view(np.uint32).tolist()
