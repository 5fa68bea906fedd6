"""The lexical leg and fusion: hand-computed RRF and score fusion, BM25 against bm25s itself, SearchParams checks,
and the searcher's lexical and hybrid modes on the tiny index."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from spanseek.core.lexical import (
    FusionBasis,
    LexicalIndex,
    passage_text,
    rrf_fuse,
    score_fuse,
    tokenize,
    zscore,
)
from spanseek.core.params import SearchParams, SearchParamsError
from spanseek.core.postings import Postings, matched_units


def test_rrf_by_hand():
    dense = np.array([3.0, 1.0, 2.0])  # dense ranks 1, 3, 2
    lexical = np.array([0.0, 5.0, 4.0])  # lexical ranks: b 1, c 2; a has no lexical match
    fused = rrf_fuse(dense, lexical, k=60)
    expected = [1 / 61, 1 / 63 + 1 / 61, 1 / 62 + 1 / 62]
    assert fused == pytest.approx(expected)
    assert list(np.argsort(-fused)) == [1, 2, 0]  # b (1st and 3rd) just beats c (2nd in both); a is in one list


def test_score_fusion_by_hand():
    dense = np.array([1.0, 2.0, 3.0])  # z: -1.2247, 0, 1.2247
    lexical = np.array([9.0, 6.0, 3.0])  # z: 1.2247, 0, -1.2247
    z = math.sqrt(1.5)
    assert zscore(dense) == pytest.approx([-z, 0.0, z])
    assert score_fuse(dense, lexical, 0.5) == pytest.approx([-z + 0.5 * z, 0.0, z - 0.5 * z])
    assert score_fuse(dense, lexical, 2.0) == pytest.approx([-z + 2 * z, 0.0, z - 2 * z])
    assert zscore(np.array([4.0, 4.0])).tolist() == [0.0, 0.0]  # no spread: the leg says nothing


def test_zscore_has_the_bits_of_numpys_mean_and_std():
    """zscore sums directly what ``x.mean()`` and ``x.std()`` sum: the same bits for float64 and float32 scores of
    any length and scale (past numpy's 8-way unrolled and 128-long pairwise blocks), none for none."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        x = rng.standard_normal(int(rng.integers(1, 400))) * 10.0 ** rng.integers(-3, 4)
        if rng.random() < 0.3:
            x = np.round(x, 1).astype(np.float32)  # BM25-like: few distinct values, ties
        x64 = np.asarray(x, np.float64)
        want = (x64 - x64.mean()) / x64.std() if x64.std() > 1e-9 else np.zeros_like(x64)
        assert np.array_equal(zscore(x), want)
    assert zscore(np.zeros(0)).shape == (0,)


TOY = [("Castles", "The castle was built by Alba in 1200."), ("Rivers", "Rivers flow to the sea past the castle."),
       ("Kings", "A castle of the sea kings, built of stone."), ("Poets", "The poet wrote of harbours."),
       ("Bridges", "Engines crossed the railway bridge to the island.")]
QUESTIONS = ["who built the castles?", "where do rivers flow", "railway bridges and engines", "stone castle kings",
             "poets writing"]


def test_lexical_ranking_equals_bm25s(tmp_path):
    import bm25s
    import Stemmer

    texts = [passage_text(t, p) for t, p in TOY]
    ours = LexicalIndex.build(texts, "folded")  # (folded2 stops "who", which bm25s keeps)
    ours.save(tmp_path / "lex")
    ours = LexicalIndex.load(tmp_path / "lex")  # and it survives a round trip
    theirs = bm25s.BM25()
    stem = Stemmer.Stemmer("english")
    theirs.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
    q = bm25s.tokenize(QUESTIONS, stopwords="en", stemmer=stem, return_ids=False, show_progress=False)
    ids, scores = theirs.retrieve(q, k=3, show_progress=False, n_threads=1)
    got_ids, got_scores = ours.top(QUESTIONS, 3)
    matched = scores > 0
    assert np.array_equal(np.where(matched, ids, -1), got_ids)
    assert np.allclose(np.where(matched, scores, 0), got_scores, rtol=1e-5)
    assert tokenize(["The castles were built"]) == [["castl", "were", "built"]]  # stemmed; "the" is a stop word


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_save_stopped_while_it_writes_leaves_the_saved_index_whole(tmp_path, monkeypatch, stop):
    """The lexical index was written beside the old one, and the old one removed before the new one was renamed in:
    a stop between the two left no lexical index, and a stop while writing left ``lex.tmp``."""
    old = LexicalIndex.build([passage_text(t, p) for t, p in TOY])
    old.save(tmp_path / "lex")
    new = LexicalIndex.build([passage_text(t, p) for t, p in TOY[:2]])

    def stopped(path, **kwargs):
        Path(path).mkdir(exist_ok=True)  # as bm25s does
        (Path(path) / "params.index.json").write_text("{")  # half written
        raise stop("stopped")

    monkeypatch.setattr(new.retriever, "save", stopped)
    with pytest.raises(stop):
        new.save(tmp_path / "lex")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lex"]
    assert LexicalIndex.load(tmp_path / "lex").top(QUESTIONS, 3)[0].tolist() == old.top(QUESTIONS, 3)[0].tolist()


def test_tokenize_gives_bm25s_tokens():
    """The ``plain`` analyzer against bm25s's own tokenizer, on the demo corpus's passages and questions-like edge
    cases: stop words only, one-letter words, digits and underscores, accents and other scripts, empty text; the
    ``folded`` one gives the same tokens for ASCII text."""
    import bm25s

    from spanseek.core.io import read_corpus
    from spanseek.core.lexical import STOPWORDS, _stemmer

    demo = Path(__file__).resolve().parents[2] / "data" / "demo" / "corpus.jsonl.gz"
    texts = [p for d in read_corpus(demo) for p in d.paragraphs][:60]
    texts += ["", "the a of and", "I a x", "Who was the U.S. president in 1999?", "snake_case and CamelCase words",
              "Müller's café in Zürich", "東京 タワー", "running runs ran", "THE RUNNING MAN", "e-mail, re-entry"]
    expected = bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=_stemmer(), return_ids=False, show_progress=False)
    assert tokenize(texts, "plain") == expected
    assert tokenize([]) == tokenize([], "plain") == []
    ascii_only = [i for i, t in enumerate(texts) if t.isascii()]
    assert [tokenize(texts, "folded")[i] for i in ascii_only] == [expected[i] for i in ascii_only]


def test_top_passages_breaks_ties_by_id_and_drops_non_matches():
    from spanseek.core.lexical_reference import matches_of

    ids, scores = matches_of(np.array([[0.0, 2.0, 1.0, 2.0]], np.float32)).top(4)
    assert ids.tolist() == [[1, 3, 2, -1]] and scores.tolist() == [[2.0, 2.0, 1.0, 0.0]]


@pytest.mark.parametrize("fields", [{"unit": "sentence"}, {"top_k": 0}, {"top_k": 2.5}, {"nprobe": 0},
                                    {"max_answer_tokens": -1}, {"mode": "sparse"}, {"fusion": "max"},
                                    {"lexical_weight": -0.5}, {"lexical_weight": float("nan")},
                                    {"lexical_weight": 1e308}, {"lexical_weight": float("inf")},
                                    {"vector_source": "disk"}, {"unit": "doc", "merge_answers": True}])
def test_search_params_refuse_bad_values(fields):
    with pytest.raises(SearchParamsError, match=next(iter(fields)) if "merge_answers" not in fields else "merge"):
        SearchParams(**fields)


@pytest.mark.parametrize(("fields", "names"), [
    ({"mode": "dense", "fusion": "score"}, ("fusion", "mode=dense")),
    ({"mode": "lexical", "fusion": "rrf"}, ("fusion", "mode=lexical")),
    ({"mode": "dense", "lexical_weight": 2.0}, ("lexical_weight", "mode=dense")),
    ({"mode": "lexical", "lexical_weight": 0.0}, ("lexical_weight", "mode=lexical")),
    ({"unit": "passage", "fusion": "rrf", "lexical_weight": 2.0}, ("lexical_weight", "fusion=rrf")),
    ({"unit": "doc", "mode": "hybrid", "fusion": "rrf", "lexical_weight": 1.0}, ("lexical_weight", "fusion=rrf")),
])
def test_search_params_refuse_a_fusion_parameter_that_would_be_ignored(fields, names):
    """fusion and lexical_weight weigh the two legs of hybrid mode together: asked of one leg alone, or a weight asked
    of rank fusion (which has none), they were accepted and did nothing. Refused as read_passages without read is,
    naming both parameters."""
    with pytest.raises(SearchParamsError) as refused:
        SearchParams(**fields)
    assert all(name in str(refused.value) for name in names), str(refused.value)


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_the_searcher_refuses_what_its_defaults_would_ignore(tiny_searcher, unit, monkeypatch):
    """What a request leaves out takes the index's defaults; a parameter those make useless is refused there: fusion
    for phrases (ranked by dense + lexical_weight x BM25, without fusion), any fusion parameter when the default
    mode is not hybrid, a lexical weight when the default fusion is rrf."""
    if unit == "phrase":
        with pytest.raises(SearchParamsError, match="fusion applies to the passage and doc units"):
            tiny_searcher.check_mode(SearchParams(unit=unit, fusion="score"))
        with pytest.raises(SearchParamsError, match="fusion applies to the passage and doc units"):
            tiny_searcher.search(["Who built the castle?"], SearchParams(unit=unit, mode="hybrid", fusion="rrf"))
    else:
        tiny_searcher.check_mode(SearchParams(unit=unit, fusion="rrf"))
    tiny_searcher.check_mode(SearchParams(unit=unit, lexical_weight=2.0))
    monkeypatch.setattr(tiny_searcher, "default_mode", "dense")
    for fields in ({"lexical_weight": 2.0}, {"fusion": "score"} if unit != "phrase" else {"lexical_weight": 0.5}):
        with pytest.raises(SearchParamsError, match=rf"{next(iter(fields))} applies to mode=hybrid.*default mode"):
            tiny_searcher.check_mode(SearchParams(unit=unit, **fields))
    tiny_searcher.check_mode(SearchParams(unit=unit, mode="hybrid", lexical_weight=2.0))
    monkeypatch.setattr(tiny_searcher, "default_mode", "hybrid")
    monkeypatch.setattr(tiny_searcher, "default_fusion", "rrf")
    if unit == "phrase":  # phrases are ranked by the weight whatever the fusion
        tiny_searcher.check_mode(SearchParams(unit=unit, lexical_weight=2.0))
    else:
        with pytest.raises(SearchParamsError, match="lexical_weight.*fusion=rrf.*default"):
            tiny_searcher.check_mode(SearchParams(unit=unit, lexical_weight=2.0))
        tiny_searcher.check_mode(SearchParams(unit=unit, fusion="score", lexical_weight=2.0))


def test_search_params_are_hashable_and_equal_by_value():
    assert {SearchParams("passage", 3, mode="hybrid"): 1}[SearchParams(unit="passage", top_k=3, mode="hybrid")] == 1


def questions_of(searcher, n=6, seed=0):
    """Texts made of the corpus's own words (so BM25 matches), with random question vectors."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(searcher.index.passages[int(p)]["text"].split()[2:6]) for p in rng.choice(
        len(searcher.index.passages), n, replace=False)]
    d = searcher.index.vectors.shape[1]
    return texts, rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((n, d)).astype(np.float32)


def test_lexical_passage_mode_is_the_bm25_ranking(tiny_searcher):
    texts, qs, qe = questions_of(tiny_searcher)
    hits = tiny_searcher.search_vectors(qs, qe, SearchParams(unit="passage", top_k=5, mode="lexical"), None, texts)
    ids, scores = tiny_searcher.lexical.top(texts, 5)
    for b, row in enumerate(hits):
        assert [h.passage_id for h in row] == [i for i in ids[b].tolist() if i >= 0]
        assert [h.lexical for h in row] == pytest.approx(scores[b][: len(row)].tolist())


def test_a_span_found_through_a_lexical_passage_is_its_brute_force_best_span(tiny_searcher):
    texts, qs, qe = questions_of(tiny_searcher, seed=1)
    for params in (SearchParams(unit="phrase", top_k=5, mode="lexical"), SearchParams(unit="passage", top_k=5,
                                                                                      mode="lexical")):
        for b, row in enumerate(tiny_searcher.search_vectors(qs, qe, params, None, texts)):
            assert row
            for h in row:
                oracle = tiny_searcher.passage_best_span(h.passage_id, qs[b], qe[b], decode="span")
                assert (h.start, h.end, h.text) == (oracle.start, oracle.end, oracle.text)
                assert h.dense == pytest.approx(oracle.score, rel=1e-4, abs=1e-4)


def test_hybrid_phrase_score_is_dense_plus_weighted_lexical(tiny_searcher, monkeypatch):
    monkeypatch.setattr(tiny_searcher, "phrase_rerank", None)  # the fused score itself (core.rerank re-ranks it)
    texts, qs, qe = questions_of(tiny_searcher, seed=2)
    plain = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=5, mode="hybrid", lexical_weight=0.0), None, texts)
    dense = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=5, mode="dense"), None, texts)
    for p, d in zip(plain, dense, strict=True):
        # weight 0: the dense ranking, except that lexical passages' spans may join (never below the dense best)
        assert p[0].score >= d[0].score - 1e-5
        assert all(h.score == pytest.approx(h.dense) for h in p)
    heavy = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=3, mode="hybrid", lexical_weight=100.0), None,
                                         texts)
    ids, _ = tiny_searcher.lexical.top(texts, 1)
    for b, row in enumerate(heavy):  # a huge weight: the lexical top passage answers first
        assert row[0].passage_id == ids[b][0]
        assert row[0].lexical is not None and row[0].dense is not None


@pytest.mark.parametrize("unit", ["passage", "doc"])
@pytest.mark.parametrize("fusion", ["score", "rrf"])
def test_hybrid_units_are_unique_and_carry_both_components(tiny_searcher, unit, fusion):
    texts, qs, qe = questions_of(tiny_searcher, seed=3)
    for row in tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=4, mode="hybrid", fusion=fusion),
                                            None, texts):
        keys = [h.passage_id if unit == "passage" else h.doc_id for h in row]
        assert len(keys) == len(set(keys)) == 4
        assert [h.score for h in row] == sorted((h.score for h in row), reverse=True)
        assert all(h.dense is not None and h.lexical is not None for h in row)


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_hybrid_unit_score_fusion_weighs_the_lexical_leg_by_the_requests_weight(tiny_searcher, unit):
    """Score fusion ranks units by zscore(dense) + w x zscore(lexical) over their candidates: at w = 0 in the dense
    leg's order, at a huge w in the lexical leg's (ties there by dense), the weight asked for and not the index's
    default (1)."""
    texts, qs, qe = questions_of(tiny_searcher, seed=7)

    def ranked(weight):
        params = SearchParams(unit=unit, top_k=6, mode="hybrid", fusion="score", lexical_weight=weight)
        return tiny_searcher.search_vectors(qs, qe, params, None, texts)

    moved = 0
    for alone, heavy in zip(ranked(0.0), ranked(1000.0), strict=True):
        assert len(alone) == len(heavy) == 6
        assert [h.dense for h in alone] == sorted((h.dense for h in alone), reverse=True)
        assert [(h.lexical, h.dense) for h in heavy] == sorted(((h.lexical, h.dense) for h in heavy), reverse=True)
        moved += [h.passage_id for h in alone] != [h.passage_id for h in heavy]
    assert moved  # the two legs disagree on these questions, so a weight left unused fails one of the orders


def test_a_documents_lexical_score_is_its_best_passages(tiny_searcher):
    """Each matching document's BM25 score for each question (``matched_units``, and looked up as fusion reads a
    candidate's, ``unit_scores``, from the postings added up or pruned) against a loop over its passages: their
    maximum, its best passage the first with it; and a hybrid document hit carries its document's (0 when none of its
    passages matches)."""
    fusion = tiny_searcher.fusion
    texts, qs, qe = questions_of(tiny_searcher, seed=5)
    matches = tiny_searcher.lexical.matches(texts)
    lexical = matches.dense()
    doc_of = fusion.unit_of_passage["doc"]
    every = np.arange(int(doc_of.max()) + 1)
    postings = tiny_searcher.lexical.postings(texts)
    pruned = Postings.of_lists(postings.lists, postings.bounds, postings.n_passages, eager_most=-1)
    for b, row in enumerate(lexical):
        want = [row[doc_of == d].max(initial=0) for d in every]
        assert fusion.unit_scores(postings, b, "doc", every).tolist() == want
        assert fusion.unit_scores(pruned, b, "doc", every).tolist() == want
    for row, (docs, best, passages) in zip(lexical, matched_units(matches, doc_of), strict=True):
        want = [d for d in range(int(doc_of.max()) + 1) if row[doc_of == d].max(initial=0) > 0]
        assert docs.tolist() == want
        assert best.tolist() == [row[doc_of == d].max() for d in want]
        assert passages.tolist() == [int(np.flatnonzero((doc_of == d) & (row == row[doc_of == d].max()))[0])
                                     for d in want]
    hits = tiny_searcher.search_vectors(qs, qe, SearchParams(unit="doc", top_k=3, mode="hybrid"), None, texts)
    for b, row in enumerate(hits):
        for h in row:
            assert h.lexical == pytest.approx(lexical[b][doc_of == doc_of[h.passage_id]].max())


def test_lexical_and_hybrid_need_the_question_texts(tiny_searcher):
    _, qs, qe = questions_of(tiny_searcher)
    with pytest.raises(ValueError, match="needs the question texts"):
        tiny_searcher.search_vectors(qs, qe, SearchParams(mode="hybrid"))


@pytest.mark.parametrize(("text", "terms"), [
    ("René Gérard", ["rene", "gerard"]), ("Rene\u0301 Ge\u0301rard", ["rene", "gerard"]),  # composed or not
    ("HAUPTSTRASSE", ["hauptstrass"]), ("Hauptstraße", ["hauptstrass"]), ("İstanbul", ["istanbul"]),
    ("ﬁrst ﬂag", ["first", "flag"]), ("Ｔｏｙｏｔａ", ["toyota"]), ("Łódź", ["lodz"]), ("Đà Nẵng", ["da", "nang"]),
    ("Donau\u00addampf", ["donaudampf"]), ("blood\u200bstone", ["bloodston"]),  # invisible characters inside a word
    ("ёлка йод", ["елка", "йод"]),  # Cyrillic keeps its marks (й is another letter) but for ё
    ("नई दिल्ली", ["नई", "दिल्ली"]),  # vowel signs stay in their word
    ("龙井茶", ["龙井", "井茶"]), ("茶", ["茶"]), ("富士山の", ["富士", "士山", "山の"]),  # character pairs
])
def test_the_folded_analyzer_reads_words_however_they_are_written(text, terms):
    assert tokenize([text], "folded") == tokenize([text], "folded2") == tokenize([text], "folded3") == [terms]


@pytest.mark.parametrize(("text", "terms"), [
    ("World War 2", ["world", "war", "2"]), ("Type 1 diabetes", ["type", "1", "diabet"]),
    ("vitamin C", ["vitamin", "c"]), ("C++", ["c"]), ("Ｃ＃ and F#", ["c", "f"]),
    ("U.S.A.", ["usa"]), ("the USA", ["usa"]), ("J.K. Rowling", ["jk", "rowl"]), ("U.S.A. Москва", ["usa", "москва"]),
    ("Tom's dog, don’t", ["tom", "dog", "don"]),  # no "s" nor "t" of an apostrophe's
    ("3.5 km", ["3", "5", "km"]), ("x_y _", ["x_i"]),
    ("Who wrote what, when, where and which? Why, how, whose and whom?", ["wrote"]),
    ("vitamin A", ["vitamin"]),  # ("a" stays a stop word)
])
def test_folded2_keeps_one_character_words_and_acronyms_and_stops_question_words(text, terms):
    assert tokenize([text], "folded2") == [terms]


ANALYZED = [("World War I", "World War 1 began in 1914 in Europe."), ("World War II", "World War 2 began in 1939."),
            ("Vitamins", "Vitamin C prevents scurvy; vitamin D is made in the skin."),
            ("Diabetes", "Type 1 diabetes is not type 2 diabetes."),
            ("USA", "The U.S.A. is a federal republic; the USA has 50 states."),
            ("Languages", "C++ and C are languages; who wrote what, when and which, and how?")]
ASKED = ["When did World War 2 begin?", "Who wrote C++?", "Which vitamin prevents scurvy?", "What is type 1 diabetes?",
         "How many states does the U.S.A. have?", "who what when"]


def test_folded2_finds_the_passage_its_one_character_words_and_acronyms_name():
    """BM25 with ``folded2`` tells World War 2 from World War 1 and finds the USA by "U.S.A."; a question of question
    words alone matches nothing (with ``folded`` the wars tied, the lower id first, and "who what when" found the
    passage that holds those words)."""
    ids, _ = LexicalIndex.build([passage_text(t, p) for t, p in ANALYZED], "folded2").top(ASKED, 2)
    assert ids.tolist() == [[1, 0], [5, 2], [2, -1], [3, 0], [4, -1], [-1, -1]]


def test_an_index_built_with_folded_keeps_it_and_finds_what_it_found_before(tmp_path):
    """An index whose lexical part was built with ``folded`` loads with it and gives the hits and scores it gave
    before ``folded2`` existed, to the bit (recorded with that version)."""
    LexicalIndex.build([passage_text(t, p) for t, p in ANALYZED], "folded").save(tmp_path / "lex")
    lexical = LexicalIndex.load(tmp_path / "lex")
    assert lexical.analyzer == "folded"
    ids, scores = lexical.top(ASKED, 3)
    assert ids.tolist() == [[0, 1, 5], [5, -1, -1], [2, 5, -1], [3, 5, -1], [4, 5, -1], [5, -1, -1]]
    assert scores.tolist() == [[1.1675546169281006, 1.1675546169281006, 0.5722151398658752],
                               [1.1444302797317505, 0.0, 0.0], [2.2397162914276123, 0.5722151398658752, 0.0],
                               [2.0641262531280518, 0.5722151398658752, 0.0],
                               [0.6094885468482971, 0.5722151398658752, 0.0], [1.7166454792022705, 0.0, 0.0]]


def test_an_unknown_analyzer_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown lexical analyzer 'folded9'; known: plain, folded, folded2, folded3"):
        tokenize(["x"], "folded9")


@pytest.mark.parametrize(("text", "terms"), [
    ("C++", ["c++"]), ("Ｃ＃ and F#", ["c#", "f#"]), ("C, C++ and C#", ["c", "c++", "c#"]),  # three terms
    ("vitamin A", ["vitamin", "a"]), ("Group A streptococcus", ["group", "a", "streptococcus"]),
    ("Vitamin A.", ["vitamin", "a"]), ("blood type A-positive", ["blood", "type", "a", "posit"]),
    ("it has a cat", ["has", "cat"]), ("A cat. A dog", ["cat", "dog"]), ("Is it A?", []),  # an article, or after a stop word
    ("vitamin a", ["vitamin"]),  # written small it reads as the article
    ("Tom's A", ["tom"]),  # (not the "s" of an apostrophe's: the letter follows no word)
])
def test_folded3_keeps_languages_named_by_a_letter_and_a_capital_letter_after_a_word(text, terms):
    assert sorted(tokenize([text], "folded3")[0]) == sorted(terms)  # (a kept letter comes after the words)


def test_folded3_tells_c_from_c_plus_plus_and_finds_vitamin_a():
    """BM25 with ``folded3`` finds the passage on C# for "C#", on C++ for "C++", and the vitamin A passage for
    "vitamin A" (with ``folded2`` the three languages were one term "c", and "vitamin A" was "vitamin")."""
    passages = ["C is a systems language.", "C++ adds classes to C.", "C# runs on .NET.",
                "Vitamin D is made in the skin.", "Vitamin A is found in carrots."]
    asked = ["What is C#?", "Who made C++?", "Which food has vitamin A?"]
    ids, _ = LexicalIndex.build(passages, "folded3").top(asked, 1)
    assert ids[:, 0].tolist() == [2, 1, 4]
    old, _ = LexicalIndex.build(passages, "folded2").top(asked, 1)
    assert old[:, 0].tolist() != [2, 1, 4]


def test_an_index_built_with_folded2_keeps_its_terms_when_folded3_exists(tmp_path):
    """``folded2`` is what it was: an index built with it loads with it, and its terms are those it had."""
    LexicalIndex.build([passage_text(t, p) for t, p in ANALYZED], "folded2").save(tmp_path / "lex")
    lexical = LexicalIndex.load(tmp_path / "lex")
    assert lexical.analyzer == "folded2" and lexical.tokenize(["C++ and C#, vitamin A"]) == [["c", "c", "vitamin"]]


def test_a_subset_fused_against_its_whole_list_scores_as_it_does_in_the_list():
    """A filtered search's candidates fused against the unfiltered candidates (``FusionBasis``) score, to the bit, as
    they do among all of them, with either fusion; ties in either leg (BM25 ties are common) keep their ranks; a
    candidate that is not in the basis ranks as the first of the basis's scores it equals."""
    rng = np.random.default_rng(3)
    dense = rng.integers(0, 6, 40).astype(np.float64)  # few values: many ties
    lexical = np.where(rng.random(40) < 0.3, 0.0, rng.integers(1, 5, 40)).astype(np.float64)
    units = rng.permutation(1000)[:40]
    basis = FusionBasis(units, dense, lexical)
    subset = np.sort(rng.choice(40, 7, replace=False))
    got = score_fuse(dense[subset], lexical[subset], 0.7, basis)
    assert np.array_equal(got, score_fuse(dense, lexical, 0.7)[subset])
    assert np.array_equal(rrf_fuse(dense[subset], lexical[subset], basis=basis, units=units[subset]),
                          rrf_fuse(dense, lexical)[subset])
    outside = rrf_fuse(np.array([dense.max() + 1, 2.0]), np.array([0.0, 3.0]), basis=basis,
                       units=np.array([5000, 5001]))
    assert outside.tolist() == [1 / 61, 1 / (61 + (dense > 2).sum()) + 1 / (61 + (lexical > 3).sum())]
    assert basis.where(np.array([units[4], 5000])).tolist() == [4, -1]
    assert FusionBasis(np.zeros(0, np.int64), np.zeros(0), np.zeros(0)).where(np.array([1])).tolist() == [-1]
    assert zscore(np.array([1.0, 2.0]), np.zeros(0)).tolist() == [0.0, 0.0]  # no unfiltered candidates: no signal


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_search_with_every_question_pruned_finds_the_same_hits(tiny_searcher, monkeypatch, unit):
    """The lexical and hybrid legs give the same hits, scores and lexical parts whether a question's BM25 postings are
    added up whole or its top is pruned (``core.postings.EAGER_MOST``), with a filter or not."""
    from spanseek.core import postings
    from spanseek.core.params import SearchFilter

    texts, qs, qe = questions_of(tiny_searcher, n=8, seed=3)
    texts[0] += " the of what did"  # (common words with the corpus's own)
    kept = SearchFilter(doc_ids=tuple(d["id"] for d in tiny_searcher.index.docs[::2]))
    searches = [SearchParams(unit=unit, top_k=4, mode=mode, filter=flt) for mode in ("lexical", "hybrid")
                for flt in (None, kept)]
    whole = [tiny_searcher.search_vectors(qs, qe, params, None, texts) for params in searches]
    monkeypatch.setattr(postings, "EAGER_MOST", -1)
    assert [tiny_searcher.search_vectors(qs, qe, params, None, texts) for params in searches] == whole
    assert any(hits for rows in whole for hits in rows)
