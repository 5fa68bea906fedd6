"""collapse_duplicates="near" (core.duplicates): near copies (lightly edited copies, boilerplate variants) are
collapsed as a brute-force alignment of the ranked texts says, paragraphs that merely share a sentence are not, the
word-count and word-bag bounds never turn a near copy away, and "exact" is the exact mode.

    .venv/bin/python -m pytest -q tests/core/test_near_duplicates.py
"""

from __future__ import annotations

import collections
import difflib
import json
import os
import random
from pathlib import Path

import pytest

from spanseek.core.duplicates import NEAR_SIMILARITY, Words, normalise_passage, similar, similarity
from spanseek.core.params import MODES, SearchFilter, SearchParams
from tests.conftest import make_corpus
from tests.core.test_duplicates import DEMO_INDEX, brute_key, norm, rows

QUESTIONS = ["When did Cato build the river empire?", "Who built the village language?", "Acme rights reserved",
             "What did Hugo build in 1794?", "Gala painter harbour church", "In which year did Fenn build it?"]


def near_corpus() -> list[dict]:
    """``make_corpus`` plus near copies: n1 holds d0's second paragraph with two words changed, and a paragraph that
    shares only its first sentence with d1's second; n2 is d2 with a word changed in each paragraph; n3 and n4 are
    one notice, a year apart; n5 holds d0's second paragraph as it is."""
    docs = make_corpus(seed=5, n_docs=6, n_paras=3)
    edited = docs[0]["paragraphs"][1].replace("1129", "1130").replace("painter", "sculptor")
    shares = docs[1]["paragraphs"][1].split(". ")[0] + ". In 1500 Nora built the lake tower. Ivo sailed the sea."
    docs.append({"id": "n1", "title": "Edited", "paragraphs": [edited, shares]})
    docs.append({"id": "n2", "title": "Title 2 revised",
                 "paragraphs": [p.replace(" built ", " raised ", 1) for p in docs[2]["paragraphs"]]})
    notice = "This page was last edited on {} at 10:12. Text is available under the Acme Corp license; all rights reserved."
    docs.append({"id": "n3", "title": "Notice", "paragraphs": [notice.format("3 March 2021")]})
    docs.append({"id": "n4", "title": "Notice", "paragraphs": [notice.format("14 June 2022")]})
    docs.append({"id": "n5", "title": "Copy", "paragraphs": [docs[0]["paragraphs"][1]]})
    return docs


@pytest.fixture(scope="module")
def near_searcher(tmp_path_factory, tiny_model_dir):
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    tmp = tmp_path_factory.mktemp("near")
    (tmp / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in near_corpus()))
    build_index(tmp / "corpus.jsonl", tiny_model_dir, tmp / "index", BuildOptions(progress=False, precision="fp32"))
    return open_searcher(tmp / "index", tiny_model_dir, device="cpu", precision="fp32")


def ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, norm(a).split(), norm(b).split(), autojunk=False).ratio()


def text_of(index, h, unit: str) -> str:
    if unit != "doc":
        return h.passage
    d = index.passages[h.passage_id]["doc"]
    return " ".join(p["text"] for p in index.passages if p["doc"] == d)


def brute_near(index, hits, unit: str, k: int) -> list:
    """The first k hits that are no copy of a hit before them and no near copy of a kept one, from the texts."""
    seen, kept = set(), []
    for h in hits:
        key = brute_key(index, h, unit)
        if key in seen:
            continue
        seen.add(key)
        if any(ratio(text_of(index, x, unit), text_of(index, h, unit)) >= NEAR_SIMILARITY
               and (unit != "phrase" or (norm(x.text) == norm(h.text) and norm(x.passage) != norm(h.passage)))
               for x in kept):
            continue
        if len(kept) < k:
            kept.append(h)
    return kept


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_near_collapsed_list_is_the_brute_force_one_of_a_deep_ranking(near_searcher, monkeypatch, unit, mode):
    from spanseek.core import ranking

    index, depth = near_searcher.index, 400 if unit == "phrase" else 40
    if mode == "hybrid":  # fusion's scores depend on the depth: rank as deep as the list compared with
        monkeypatch.setattr(ranking, "COLLAPSE_DEPTH", depth // 8)
    deep = near_searcher.search(QUESTIONS, SearchParams(unit, depth, mode=mode))
    got = near_searcher.search(QUESTIONS, SearchParams(unit, 8, mode=mode, collapse_duplicates="near"))
    exact = near_searcher.search(QUESTIONS, SearchParams(unit, 8, mode=mode, collapse_duplicates=True))
    fewer = 0
    for full, hits, plain in zip(deep, got, exact, strict=True):
        assert rows(hits) == rows(brute_near(index, full, unit, 8))
        fewer += rows(hits) != rows(plain)
    assert fewer  # near copies were in the rankings, and went


def test_a_near_copy_counts_with_its_copies_and_a_shared_sentence_does_not(near_searcher):
    index = near_searcher.index
    original = norm(index.passages[next(p for p, q in enumerate(index.passages)
                                        if index.docs[q["doc"]]["id"] == "d0" and q["para"] == 1)]["text"])
    hits = near_searcher.search(["x"], SearchParams("passage", 40, mode="dense", collapse_duplicates="near"))[0]
    group = [h for h in hits if ratio(h.passage, original) >= NEAR_SIMILARITY]
    assert len(group) == 1  # d0's paragraph, its copy in n5 and its edit in n1: one hit
    assert group[0].copies == 3 and sorted([group[0].doc_id, *group[0].copy_doc_ids]) == ["d0", "n1", "n5"]
    notices = [h for h in hits if "acme" in norm(h.passage)]
    assert len(notices) == 1 and notices[0].copies == 2
    shares = [h for h in hits if index.docs[index.passages[h.passage_id]["doc"]]["id"] == "n1" and h.paragraph == 1]
    assert len(shares) == 1 and shares[0].copies == 1  # shares a sentence with d1's paragraph: its own hit
    docs = near_searcher.search(["x"], SearchParams("doc", 20, mode="dense", collapse_duplicates="near"))[0]
    assert sorted(h.doc_id for h in docs if h.doc_id in ("d2", "n2")) in (["d2"], ["n2"])
    # a filter that leaves the edit out counts the exact copies only
    flt = SearchFilter(doc_ids=[d["id"] for d in index.docs if d["id"] != "n1"])
    kept = [h for h in near_searcher.search(["x"], SearchParams("passage", 40, mode="dense", filter=flt,
                                                                collapse_duplicates="near"))[0]
            if ratio(h.passage, original) >= NEAR_SIMILARITY]
    assert len(kept) == 1 and kept[0].copies == 2 and "n1" not in kept[0].copy_doc_ids


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_exact_is_the_exact_mode(near_searcher, unit):
    on = near_searcher.search(QUESTIONS, SearchParams(unit, 5, mode="hybrid", collapse_duplicates=True))
    exact = near_searcher.search(QUESTIONS, SearchParams(unit, 5, mode="hybrid", collapse_duplicates="exact"))
    assert [[h.to_dict() for h in q] for q in exact] == [[h.to_dict() for h in q] for q in on]


def test_the_bounds_never_turn_a_near_copy_away():
    """``similar`` skips the alignment where the word counts or bags bound the similarity below the threshold: on
    random edits of random texts it says what the alignment says."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(30)]
    agree = near = 0
    for _ in range(3000):
        a = [rng.choice(vocab) for _ in range(rng.randint(0, 30))]
        b = list(a)
        for _ in range(rng.randint(0, 12)):  # edits: change, drop or add a word
            at, what = rng.randint(0, max(0, len(b) - 1)), rng.random()
            if what < 0.4 and b:
                b[at] = rng.choice(vocab)
            elif what < 0.7 and b:
                del b[at]
            else:
                b.insert(at, rng.choice(vocab))
        x, y = Words.of(" ".join(a)), Words.of(" ".join(b))
        want = similarity(x, y) >= NEAR_SIMILARITY
        agree += similar(x, y) == want
        near += want
    assert agree == 3000 and 300 < near < 2700


@pytest.mark.parametrize(("a", "b", "near"), [
    ("Copyright 2023 Acme Corp. All rights reserved.", "Copyright 2024 Acme Corp. All rights reserved.", True),
    ("This page was last edited on 3 March 2021, at 10:12. Text is available under the Creative Commons License.",
     "This page was last edited on 14 June 2022, at 08:40. Text is available under the Creative Commons License.",
     True),
    ("The castle was built in 1340. It burned in 1500 and was rebuilt by the duke's heirs over the next decade.",
     "The castle was built in 1340. Its chapel holds the tombs of four abbots and a painted wooden ceiling.", False),
    ("", "", True),
    ("one", "", False),
])
def test_near_copies_and_texts_that_share_a_sentence(a, b, near):
    assert similar(Words.of(a), Words.of(b)) is near


@pytest.mark.slow
@pytest.mark.skipif(not (DEMO_INDEX / "manifest.json").is_file(), reason="no demo index")
def test_the_demo_corpus_edited_paragraph_is_collapsed_and_the_paris_clubs_are_not():
    """Passage 746 is 737 lightly edited (0.74); 767 and 846, on the Paris clubs, share one sentence (0.41)."""
    passages = [json.loads(line) for line in (DEMO_INDEX / "passages.jsonl").open()]
    words = {p: Words.of(passages[p]["text"]) for p in (737, 746, 767, 846)}
    assert similar(words[737], words[746]) and not similar(words[767], words[846])
    assert similarity(words[737], words[746]) == pytest.approx(0.74, abs=0.01)
    assert similarity(words[767], words[846]) == pytest.approx(0.41, abs=0.01)

    from spanseek.core.loading import open_searcher

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    searcher = open_searcher(Path(DEMO_INDEX), "default")
    question = ["What are the two contrasting viewpoints on time?"]
    plain = searcher.search(question, SearchParams("passage", 5))[0]
    assert {737, 746} <= {h.passage_id for h in plain}
    hits = searcher.search(question, SearchParams("passage", 5, collapse_duplicates="near"))[0]
    assert len(hits) == 5 and len({h.passage_id for h in hits} & {737, 746}) == 1
    clubs = ["Which football club is based in Paris?"]
    plain = searcher.search(clubs, SearchParams("passage", 10))[0]
    near = searcher.search(clubs, SearchParams("passage", 10, collapse_duplicates="near"))[0]
    assert {767, 846} <= {h.passage_id for h in plain} and {767, 846} <= {h.passage_id for h in near}


@pytest.mark.parametrize(("argv", "value"), [
    ([], False), (["--collapse-duplicates"], True), (["--collapse-duplicates-exact"], "exact"),
    (["--collapse-duplicates-near"], "near"), (["--collapse-duplicates", "--no-collapse-duplicates"], False),
    (["--collapse-duplicates", "near"], "near"), (["--collapse-duplicates=near"], "near"),
    (["--collapse-duplicates", "exact"], "exact"), (["--collapse-duplicates=exact"], "exact"),
    (["--collapse-duplicates=true"], True), (["--collapse-duplicates", "--collapse-duplicates=false"], False),
    (["--collapse-duplicates", "--", "near"], True),
])
def test_the_search_flags_take_the_http_values(argv, value):
    """``--collapse-duplicates`` takes the values of the HTTP field, as a word after it or after ``=``; a question
    after the flag stays a question (and so does a choice's word after ``--``)."""
    import argparse

    from spanseek.core.options import OptionsParser, add_options, from_args

    parser = OptionsParser()
    add_options(parser, SearchParams)
    parser.add_argument("questions", nargs="*")
    args = parser.parse_args([*argv, "who built it?"])
    assert args.questions == (["near", "who built it?"] if "--" in argv else ["who built it?"])
    params = from_args(SearchParams, argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "questions"}))
    assert params.collapse_duplicates == value and type(params.collapse_duplicates) is type(value)


@pytest.mark.parametrize(("argv", "value", "questions"), [
    (["--collapse-duplicates", "true", "who?"], True, ["who?"]),
    (["--collapse-duplicates", "false", "who?"], False, ["who?"]),
    (["--collapse-duplicates", "near", "--collapse-duplicates", "false", "who?"], False, ["who?"]),
    (["--collapse-duplicates", "true", "exact"], True, ["exact"]),
    (["--collapse-duplicates", "false", "true"], False, ["true"]),
    (["--collapse-duplicates", "--", "true"], True, ["true"]),
    (["--collapse-duplicates", "--", "false", "near"], True, ["false", "near"]),
    (["--no-collapse-duplicates", "true"], False, ["true"]),
])
def test_the_search_command_reads_true_and_false_after_the_flag_as_its_value(argv, value, questions):
    """``spanseek search --collapse-duplicates true QUESTION`` collapses copies (true and false are values of the
    flag as exact and near are, not questions); the flag takes one value, so the next such word is a question, and
    a question that is one of these words is given after ``--``."""
    from spanseek.cli import build_parser

    args = build_parser().parse_args(["search", "--index", "x", *argv])
    assert (args.collapse_duplicates, args.questions) == (value, questions)


def test_a_search_flag_value_that_is_no_choice_is_refused_naming_the_choices(capsys):
    from spanseek.cli import main

    with pytest.raises(SystemExit, match="2"):
        main(["search", "--index", "x", "--collapse-duplicates=close", "who?"])
    assert capsys.readouterr().err.endswith("spanseek search: error: argument --collapse-duplicates: invalid choice: "
                                            "'close' (choose from 'true', 'false', 'exact', 'near')\n")


def test_long_texts_are_compared_in_linear_time_by_shared_word_triples():
    """The in-order alignment takes time growing with the square of the words (21 s for two 30,000-word documents):
    past NEAR_ALIGN_WORDS words the shared word triples stand for it. They find a lightly edited long copy, keep two
    long texts sharing a third apart, and read no more than the alignment for words changed in place."""
    import random
    import time

    from spanseek.core.duplicates import NEAR_ALIGN_WORDS, shingle_similarity

    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(3000)] + ["the", "of", "and"] * 300
    n = 30_000
    base = [rng.choice(vocab) for _ in range(n)]
    edited = list(base)
    for _ in range(n // 50):
        edited[rng.randrange(n)] = rng.choice(vocab)
    sharing = base[: n // 3] + [rng.choice(vocab) for _ in range(2 * n // 3)]
    started = time.process_time()
    assert similar(Words.of(" ".join(base)), Words.of(" ".join(edited)))
    assert not similar(Words.of(" ".join(base)), Words.of(" ".join(sharing)))
    assert time.process_time() - started < 5  # the alignment alone took 21 s for the first pair
    for _ in range(20):  # edits in place: at most what the alignment reads, on texts short enough to align
        m = rng.randrange(5, NEAR_ALIGN_WORDS)
        x = [rng.choice(vocab) for _ in range(m)]
        y = [w if rng.random() > 0.1 else rng.choice(vocab) for w in x]
        wx, wy = Words.of(" ".join(x)), Words.of(" ".join(y))
        assert shingle_similarity(wx, wy) <= similarity(wx, wy) + 1e-9


def test_texts_of_few_words_repeated_are_aligned_without_their_common_words():
    """Two 2,000-word texts of a few words repeated (a table of 0s and 1s) took 0.4-0.8 s a pair to align, as the
    alignment visits every pair of places holding the same word: past NEAR_ALIGN_PAIRS of them, the words that make up
    over 1% of a text are left out of the alignment, so unrelated tables stay apart, quickly, while ordinary texts of as
    many words align in full."""
    import time

    from spanseek.core.duplicates import NEAR_ALIGN_PAIRS, NEAR_ALIGN_WORDS, align_pairs

    rng = random.Random(0)

    def text(vocab: list[str]) -> Words:
        return Words.of(" ".join(rng.choice(vocab) for _ in range(NEAR_ALIGN_WORDS)))

    pairs = [(text(["0", "1"]), text(["0", "1"])) for _ in range(10)]
    started = time.process_time()
    for a, b in pairs:
        assert align_pairs(a, b) > NEAR_ALIGN_PAIRS
        assert not similar(a, b)
        assert similarity(a, b) == difflib.SequenceMatcher(None, a.words, b.words).ratio()
    assert time.process_time() - started < 1.5  # the full alignments took 4-8 s
    vocab = [f"w{i}" for i in range(3000)] + ["the", "of", "and"] * 300
    a, b = text(vocab), text(vocab)
    assert align_pairs(a, b) <= NEAR_ALIGN_PAIRS
    assert similarity(a, b) == difflib.SequenceMatcher(None, a.words, b.words, autojunk=False).ratio()


def test_the_words_kept_for_near_comparisons_are_bounded_in_words(monkeypatch):
    """A document's words are the whole document's: the texts kept for the next searches hold at most
    NEAR_CACHE_WORDS words in all (4,096 books of 100,000 words would hold 28 GB), and a text longer than that is
    compared without being kept."""
    from types import SimpleNamespace

    import numpy as np

    from spanseek.core import duplicates

    monkeypatch.setattr(duplicates, "NEAR_CACHE_WORDS", 10_000, raising=False)
    rng = random.Random(0)
    lengths = [3_000] * 12 + [12_000]
    docs = [" ".join(rng.choice(["a", "b", "c", "d"]) for _ in range(n)) for n in lengths]
    index = SimpleNamespace(passages=[{"text": t} for t in docs], docs=[{"id": f"d{i}"} for i in range(len(docs))])
    copies = duplicates.Copies(index, np.arange(len(docs), dtype=np.int64), np.arange(len(docs)))  # type: ignore[arg-type]
    for i, n in enumerate(lengths):
        assert len(copies.words("doc", i).words) == n
        assert sum(len(w.words) for w in copies._words.values()) <= 10_000
    assert copies.words("doc", 11).words == docs[11].split()


@pytest.mark.parametrize("kinds", [2, 5, 10])
def test_long_texts_of_few_words_repeated_are_compared_by_longer_word_runs(kinds):
    """Two unrelated 6,000-word texts of a few words repeated (long tables of digits) share most of their few word
    triples: they read 0.78 alike over 10 words and were collapsed as near copies. Their n-grams grow until they are
    mostly distinct, so such texts stay apart while a copy with 1% of its words changed is still a near copy, and
    prose is compared by its triples as before."""
    from spanseek.core.duplicates import shingle_similarity

    rng = random.Random(kinds)
    vocab = [str(i) for i in range(kinds)]
    x = [rng.choice(vocab) for _ in range(6000)]
    a, other = Words.of(" ".join(x)), Words.of(" ".join(rng.choice(vocab) for _ in range(6000)))
    edited = Words.of(" ".join(w if rng.random() > 0.01 else rng.choice(vocab) for w in x))
    assert not similar(a, other)
    assert similar(a, edited)
    prose = [f"w{i}" for i in range(3000)] + ["the", "of", "and"] * 300
    p, q = (Words.of(" ".join(rng.choice(prose) for _ in range(6000))) for _ in range(2))
    grams = [collections.Counter(zip(w.words, w.words[1:], w.words[2:], strict=False)) for w in (p, q)]
    assert shingle_similarity(p, q) == 2 * sum((grams[0] & grams[1]).values()) / sum(sum(g.values()) for g in grams)


def _near_ranking(n_copies: int, words: int = 40):
    """Copies over two distinct texts A and B and ``n_copies`` texts that each change one word of B, as passages
    ranked A, B, B1, B2, ...; and the ranking's hits."""
    rng = random.Random(3)
    a, b = ([f"{tag}{rng.randrange(10**6)}" for _ in range(words)] for tag in "ab")
    return _ranking_of([" ".join(a), " ".join(b)] + [" ".join(b[:i % words] + [f"e{i}"] + b[i % words + 1:])
                                                     for i in range(n_copies)])


def _ranking_of(texts: list[str]):
    """``texts`` as passages of one document each, ranked in order: their ``Copies``, hits and an open selection."""
    from types import SimpleNamespace

    import numpy as np

    from spanseek.core import duplicates
    from spanseek.core.params import Hit

    index = SimpleNamespace(passages=[{"text": t} for t in texts], docs=[{"id": f"d{i}"} for i in range(len(texts))])
    copies = duplicates.Copies(index, duplicates.hash_passages(index.passages), np.arange(len(texts)))  # type: ignore[arg-type]
    hits = [Hit(text="x", score=-i, start=0, end=1, passage_id=i, passage=t, doc_id=f"d{i}", title="t")
            for i, t in enumerate(texts)]
    return copies, hits, SimpleNamespace(passages=None, docs=None)


def test_near_comparisons_stop_at_the_page_budget_and_the_rest_collapses_as_exact_copies(monkeypatch):
    """A ranking of near copies of one kept hit compared each with every kept hit: one question at top_k 100 compared
    840,000 pairs (89 s). The comparisons stop at NEAR_WORK a page's hit, the same in every search (a pair compared
    before costs what it did), and the hits past it are kept as they come (no near copies)."""
    from spanseek.core import duplicates

    copies, hits, selection = _near_ranking(8)
    whole = duplicates.collapse_near(hits, 3, "passage", copies, selection)
    assert [h.passage_id for h in whole] == [0, 1] and whole[1].copies == 9  # B and its 8 near copies
    each = duplicates.compared(copies.words("passage", 1), copies.words("passage", 2))[1]
    monkeypatch.setattr(duplicates, "NEAR_WORK", each)  # a page of 3: 3 aligned pairs, and A's bags with the others'
    for _ in range(2):  # the second time every pair is known
        budget = duplicates.NearBudget.for_page(3)
        page = duplicates.collapse_near(hits, 3, "passage", copies, selection, budget)
        # B1 and B2 compared with A and B; B3's alignment with B would go past what is left after the bags' checks:
        # not made, and B3 is kept as the hits after it are, unless exact copies
        assert [h.passage_id for h in page] == [0, 1, 4] and page[1].copies == 3
        assert budget.spent and 0 <= budget.left < each


def test_a_deeper_ranking_past_the_budget_keeps_the_near_copies_an_earlier_one_found():
    """A page left short is ranked again deeper with the question's budget: past it, the near copies the first
    ranking had found came back onto the page (they were collapsed by exact copies only, from the top)."""
    from spanseek.core import duplicates

    copies, hits, selection = _near_ranking(8)
    each = duplicates.compared(copies.words("passage", 1), copies.words("passage", 2))[1]
    bags = duplicates.compared(copies.words("passage", 0), copies.words("passage", 1))[1]  # A's with B's (no alignment)
    reads = sum(copies.reading_work("passage", i) for i in range(3))  # A's, B's and B1's words, each read once
    budget = duplicates.NearBudget(reads + 2 * bags + each)  # the first ranking's: B and B1 with A, B1 with B
    first = duplicates.collapse_near(hits[:3], 3, "passage", copies, selection, budget)
    assert [(h.passage_id, h.copies) for h in first] == [(0, 1), (1, 2)] and budget.left == 0  # B1 a copy of B
    deeper = duplicates.collapse_near(hits, 3, "passage", copies, selection, budget)
    assert [(h.passage_id, h.copies) for h in deeper] == [(0, 1), (1, 2), (3, 1)]  # B1 still B's; B2 kept as it came


def test_the_worst_near_ranking_aligns_a_bounded_number_of_pairs(monkeypatch):
    """Every hit of a deep ranking a near copy of the page's second hit: the alignments stop at the budget."""
    from spanseek.core import duplicates

    copies, hits, selection = _near_ranking(2000)
    monkeypatch.setattr(duplicates, "NEAR_WORK", 10_000)  # (a tenth of it: the test's time)
    aligned = []
    real = duplicates.similarity
    monkeypatch.setattr(duplicates, "similarity", lambda a, b: aligned.append(1) or real(a, b))
    page = duplicates.collapse_near(hits, 10, "passage", copies, selection)
    pair = duplicates.compared(copies.words("passage", 1), copies.words("passage", 2))[1] + duplicates.PAIR_WORK
    assert len(page) == 10 and len(aligned) <= duplicates.NEAR_WORK * 10 // pair + 1 < 2000


def _oracle_page(hits, k: int, copies) -> list[tuple[int, int]]:
    """Near collapsing without a budget, by brute force: each hit, unless an exact copy of a hit before it, is a near
    copy of the first kept hit whose words ``similar`` says it is, else kept while the page has room; a kept hit counts
    its own copies and its near copies' (every passage here is its own document's, so copies are equal keys)."""
    keys = [normalise_passage(h.passage) for h in hits]
    kept: list[int] = []
    members: dict[int, set[str]] = {}
    for i, h in enumerate(hits):
        if keys[i] in keys[:i]:
            continue
        of = next((j for j in kept if similar(Words.of(hits[j].passage), Words.of(h.passage))), None)
        if of is not None:
            members[of].add(keys[i])
        elif len(kept) < k:
            kept.append(i)
            members[i] = {keys[i]}
    return [(hits[i].passage_id, sum(key in members[i] for key in keys)) for i in kept]


@pytest.mark.parametrize("seed", range(6))
def test_near_collapsing_within_the_budget_is_the_brute_force_one_and_never_goes_past_it(seed):
    """Rankings of short texts, lightly edited copies and exact copies of one another: with the budget the page
    needs, the page (its hits and their copies) is the brute-force one's; with less, no comparison takes the budget
    past zero, and no kept hit is a near copy of another kept hit the budget compared it with."""  # (old: -1 left)
    from spanseek.core import duplicates

    rng = random.Random(seed)
    roots = [[f"w{rng.randrange(60)}" for _ in range(rng.randrange(5, 30))] for _ in range(4)]
    texts = []
    for _ in range(24):
        words = list(rng.choice(roots if not texts or rng.random() < 0.6 else [t.split() for t in texts]))
        for _ in range(rng.randrange(4)):
            words[rng.randrange(len(words))] = f"e{rng.randrange(99)}"
        texts.append(" ".join(words).upper() if rng.random() < 0.2 else " ".join(words))
    copies, hits, selection = _ranking_of(texts)
    k = rng.randrange(2, 6)
    budget = duplicates.NearBudget(10**9)
    page = duplicates.collapse_near(hits, k, "passage", copies, selection, budget)
    assert [(h.passage_id, h.copies) for h in page] == _oracle_page(hits, k, copies)
    needed = 10**9 - budget.left
    for work in (needed, needed - 1, needed // 2, needed // 5):
        budget = duplicates.NearBudget(work)
        short = duplicates.collapse_near(hits, k, "passage", copies, selection, budget)
        assert budget.left >= 0
        if work == needed:
            assert short == page
        for x in short:
            for y in short:
                pair = ("passage", x.passage_id, y.passage_id)
                assert pair not in budget.charged or not similar(Words.of(x.passage), Words.of(y.passage))


def test_a_pair_of_long_documents_past_the_budget_is_not_compared_and_collapses_as_exact_copies(monkeypatch):
    """Two long near copies cost ALIGN_WORK a word to compare (their word triples): two 100,000-word documents
    4,000,000, eight times a page of 10's budget; here two of 5,000 words, 200,000 against a page of 2's 100,000. The
    reading of their words and the checks before the comparison are charged, the comparison is not made, and the pair
    is kept apart; an exact copy of either still collapses into it."""
    from spanseek.core import duplicates

    rng = random.Random(7)
    long = [f"w{rng.randrange(10_000)}" for _ in range(5_000)]
    edited = long[:2_500] + ["changed"] + long[2_501:]
    copies, hits, selection = _ranking_of([" ".join(long), " ".join(edited), " ".join(edited).upper()])
    a, b = copies.words("passage", 0), copies.words("passage", 1)
    reads = copies.reading_work("passage", 0) + copies.reading_work("passage", 1)
    checks = duplicates.PAIR_WORK + len(a.bag) + len(b.bag)
    assert duplicates.compared(a, b) == (True, checks + duplicates.ALIGN_WORK * 10_000)  # near copies, past 100,000
    monkeypatch.setattr(duplicates, "similarity", lambda a, b: pytest.fail("compared past the budget"))
    budget = duplicates.NearBudget.for_page(2)
    page = duplicates.collapse_near(hits, 2, "passage", copies, selection, budget)
    assert [(h.passage_id, h.copies) for h in page] == [(0, 1), (1, 2)]
    assert budget.left == 2 * duplicates.NEAR_WORK - reads - checks


def test_reading_long_texts_is_charged_and_stops_at_the_budget(monkeypatch):
    """Building a text's word list is work too: a ranking of long texts whose word counts rule every pair out at
    PAIR_WORK a pair read 6.4 million words (2 s; 10.8 s over a question's four rankings) for a page of 10 within its
    500,000. Each text is charged a unit per READ_CHARS characters, once a question, before it is read: the texts
    read stay within the budget, and a text that would take it past is not read."""
    from spanseek.core import duplicates

    rng = random.Random(11)
    texts = [" ".join(f"s{rng.randrange(10**6)}" for _ in range(20))]  # the kept hit: 20 words
    texts += [" ".join(f"l{rng.randrange(10**6)}" for _ in range(400)) for _ in range(60)]  # 400 words: no near copy
    copies, hits, selection = _ranking_of(texts)
    read: list[int] = []
    real = duplicates.Words.of.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(duplicates.Words, "of", classmethod(lambda cls, t: read.append(len(t)) or real(cls, t)))
    budget = duplicates.NearBudget(20_000)
    page = duplicates.collapse_near(hits, 1, "passage", copies, selection, budget)
    assert [h.passage_id for h in page] == [0] and budget.spent and budget.left >= 0
    assert sum(read) <= 20_000 * duplicates.READ_CHARS  # (old: all 61 texts, 189,460 characters)
    charged = sum(copies.reading_work("passage", i) for i in range(len(texts)) if ("passage", i) in budget.charged)
    assert len(read) == sum(("passage", i) in budget.charged for i in range(len(texts))) < len(texts)
    assert charged + duplicates.PAIR_WORK * (len(read) - 1) == 20_000 - budget.left
