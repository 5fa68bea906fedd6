"""Span search and aggregation (core.search) against brute force over the exact token vectors.

Oracle: the top phrase is the argmax over all valid spans; passage and document scores are the max over their
phrases; deepening returns exactly k unique units (all of them when the index has fewer); every hit's text is
its passage's characters [start, end) and never starts or ends inside a word.

    .venv/bin/python -m pytest -q tests/core/test_search.py
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from spanseek.core.params import UNITS, SearchParams
from spanseek.core.plan import StageTimes
from spanseek.core.search import Searcher
from spanseek.core.spans import best_span
from spanseek.core.text import FLAG_END, FLAG_START
from tests.conftest import make_paragraph, span_chars


def random_questions(rng: np.random.Generator, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    qs, qe = rng.standard_normal((2, n, dim)).astype(np.float32)
    return qs, qe


def passage_maxima(index, qs: np.ndarray, qe: np.ndarray, L: int, length_bias=None) -> list[tuple[float, int, int]]:
    """Brute force: for every passage, (best span score, start token, end token) over all its valid spans."""
    out = []
    for p in range(len(index.passages)):
        a, b = index.passage_range(p)
        vecs = index.token_vectors(np.arange(a, b))
        i, j, s = best_span(vecs @ qs, vecs @ qe, index.token_flags[a:b], L, length_bias)
        out.append((s, a + i, a + j))
    return out


def count_rounds(monkeypatch, searcher) -> list[int]:
    """Record the k of every round of the phrase search (deepening grows it) in the returned list."""
    rounds: list[int] = []
    round_ids = searcher.dense.round_ids

    def counting_round_ids(search, rows, k):
        rounds.append(k)
        return round_ids(search, rows, k)

    monkeypatch.setattr(searcher.dense, "round_ids", counting_round_ids)
    return rounds


def span_tokens(index, hit) -> list[tuple[int, int]]:
    """The (start, end) token ids a hit may be of, found from its character offsets within its passage (a tidied
    hit's, ``core.hits.tidy_span``: "Snider" is the span of "Snider" and of "Snider .")."""
    a, b = index.passage_range(hit.passage_id)
    starts = [a + int(i) for i in np.flatnonzero(index.token_flags[a:b] & FLAG_START > 0)]
    ends = [a + int(j) for j in np.flatnonzero(index.token_flags[a:b] & FLAG_END > 0)]
    return [(i, j) for i in starts for j in ends if i <= j and span_chars(index, i, j) == (hit.start, hit.end)]


def searcher_over(directory, docs: list[dict], model_dir):
    """Build an exact index of ``docs`` (corpus records) with the model in ``directory`` and open a searcher."""
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    corpus = directory / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(x) + "\n" for x in docs))
    build_index(corpus, model_dir, directory / "index", BuildOptions(progress=False, precision="fp32"))
    return open_searcher(directory / "index", model_dir, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def long_searcher(tmp_path_factory, tiny_model_dir):
    """An index whose first passage is ~20 windows long (tiny model: 30-token windows, stride 8), and a short
    second one with none of its words."""
    rng = random.Random(7)
    docs = [{"id": "long", "title": "Long", "paragraphs": [" ".join(make_paragraph(rng, 1) for _ in range(30))]},
            {"id": "short", "title": "Short", "paragraphs": ["Quantum zebras juggle violet xylophones near Oslo."]}]
    searcher = searcher_over(tmp_path_factory.mktemp("long"), docs, tiny_model_dir)
    a, b = searcher.index.passage_range(0)
    assert b - a > 10 * 30  # really many windows
    return searcher


@pytest.fixture(scope="module")
def small_searcher(tmp_path_factory, tiny_model_dir):
    """3 documents x 2 one-sentence passages: fewer tokens than the first search round's k (64), so passage and
    document search see every span and their scores must be the exact maxima."""
    rng = random.Random(11)
    docs = [{"id": f"s{i}", "title": f"Small {i}", "paragraphs": [make_paragraph(rng, 1)[:40] for _ in range(2)]}
            for i in range(3)]
    searcher = searcher_over(tmp_path_factory.mktemp("small"), docs, tiny_model_dir)
    assert searcher.index.faiss.ntotal <= 64
    return searcher


def test_top_phrase_matches_brute_force_on_a_long_passage(long_searcher):
    idx, L = long_searcher.index, long_searcher.max_answer_tokens
    qs, qe = random_questions(np.random.default_rng(1), 25, idx.vectors.shape[1])
    hits = long_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=1, mode="dense"))
    in_long = 0
    for b in range(len(qs)):
        s, i, j = max(passage_maxima(idx, qs[b], qe[b], L))
        [hit] = hits[b]
        assert hit.score == pytest.approx(s, rel=1e-4, abs=1e-4)
        assert (hit.start, hit.end) == span_chars(idx, i, j)
        assert hit.text == hit.passage[hit.start : hit.end]
        in_long += hit.passage_id == 0
    assert in_long > 10  # the oracle was exercised inside the multi-window passage


def test_searcher_top_phrase_is_the_biased_brute_force_argmax(long_searcher):
    idx, L = long_searcher.index, long_searcher.max_answer_tokens
    bias = tuple(np.linspace(0.0, 6.0, L))  # strongly favours long spans, so the answers move
    biased = Searcher(idx, length_bias=bias)
    assert biased.length_bias == bias and long_searcher.length_bias == ()
    qs, qe = random_questions(np.random.default_rng(5), 25, idx.vectors.shape[1])
    plain = long_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=1, mode="dense"))
    moved = 0
    for b, [hit] in enumerate(biased.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=1, mode="dense"))):
        s, i, j = max(passage_maxima(idx, qs[b], qe[b], L, bias))
        assert hit.score == pytest.approx(s, rel=1e-4, abs=1e-4)
        assert (hit.start, hit.end) == span_chars(idx, i, j)
        moved += (hit.start, hit.end) != (plain[b][0].start, plain[b][0].end)
    assert moved > 5


@pytest.mark.parametrize("unit", UNITS)
def test_hits_round_trip_offsets_and_scores(tiny_searcher, unit):
    idx = tiny_searcher.index
    qs, qe = random_questions(np.random.default_rng(2), 8, idx.vectors.shape[1])
    n_units = {"phrase": 10, "passage": 10, "doc": len(idx.docs)}[unit]  # the tiny corpus has 6 documents
    for b, hits in enumerate(tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=10, mode="dense"))):
        assert len(hits) == n_units
        for hit in hits:
            passage = idx.passages[hit.passage_id]
            doc = idx.docs[passage["doc"]]
            assert hit.passage == passage["text"] and (hit.doc_id, hit.title) == (doc["id"], doc["title"])
            assert hit.text and hit.text == hit.passage[hit.start : hit.end]
            scores = []
            for i, j in span_tokens(idx, hit):
                if j - i < tiny_searcher.max_answer_tokens:  # (a longer span may tidy to the same characters)
                    vi, vj = idx.token_vectors(np.array([i, j]))
                    scores.append(float(vi @ qs[b] + vj @ qe[b]))
            assert any(s == pytest.approx(hit.score, rel=1e-4, abs=1e-4) for s in scores), (hit, scores)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_phrase_hits_are_unique_and_never_split_words(tiny_searcher):
    idx = tiny_searcher.index
    qs, qe = random_questions(np.random.default_rng(3), 10, idx.vectors.shape[1])
    n_split_tokens = int((idx.token_flags != FLAG_START | FLAG_END).sum())
    assert n_split_tokens > 20  # the corpus has multi-piece words, so the test can fail
    for hits in tiny_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=60, mode="dense")):
        assert len({(h.passage_id, h.start, h.end) for h in hits}) == len(hits)
        for h in hits:
            p = h.passage
            assert h.start == 0 or not (p[h.start - 1].isalnum() and p[h.start].isalnum()), (p, h.start)
            assert h.end == len(p) or not (p[h.end - 1].isalnum() and p[h.end].isalnum()), (p, h.end)


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_unit_score_is_the_max_over_its_phrases(small_searcher, unit):
    idx, L = small_searcher.index, small_searcher.max_answer_tokens
    n_units = len(idx.passages) if unit == "passage" else len(idx.docs)
    qs, qe = random_questions(np.random.default_rng(4), 8, idx.vectors.shape[1])
    for b, hits in enumerate(small_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=n_units, mode="dense"))):
        expected: dict[int, float] = {}
        for p, (s, _, _) in enumerate(passage_maxima(idx, qs[b], qe[b], L)):
            key = p if unit == "passage" else idx.passages[p]["doc"]
            expected[key] = max(expected.get(key, -np.inf), s)
        got = {(h.passage_id if unit == "passage" else idx.passages[h.passage_id]["doc"]): h.score for h in hits}
        assert len(hits) == n_units == len(got)  # all units, each once
        for key, score in got.items():
            assert score == pytest.approx(expected[key], rel=1e-4, abs=1e-4)
        assert [h.score for h in hits] == sorted(got.values(), reverse=True)


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_asking_for_more_units_than_exist_returns_all_without_exhausting_the_index(tiny_searcher, monkeypatch, unit):
    """Deepening stops once every unit of the index is found: it must not search all N tokens (k = N) for a
    top_k the index cannot fill (on a real index that costs minutes and gigabytes per question)."""
    idx = tiny_searcher.index
    n_units = len(idx.passages) if unit == "passage" else len(idx.docs)
    rounds = count_rounds(monkeypatch, tiny_searcher)
    qs, qe = random_questions(np.random.default_rng(9), 6, idx.vectors.shape[1])
    for hits in tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=n_units + 10, mode="dense")):
        keys = [h.passage_id if unit == "passage" else h.doc_id for h in hits]
        assert len(keys) == len(set(keys)) == n_units
    assert max(rounds) < idx.faiss.ntotal, rounds


@pytest.mark.parametrize(("unit", "k"), [("passage", 1), ("passage", 17), ("passage", 24), ("doc", 1), ("doc", 5), ("doc", 6)])
def test_deepening_returns_exactly_k_unique_units(tiny_searcher, unit, k):
    idx, L = tiny_searcher.index, tiny_searcher.max_answer_tokens
    assert (len(idx.passages), len(idx.docs)) == (24, 6)
    qs, qe = random_questions(np.random.default_rng(5), 6, idx.vectors.shape[1])
    for b, hits in enumerate(tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=k, mode="dense"))):
        keys = [h.passage_id if unit == "passage" else h.doc_id for h in hits]
        assert len(keys) == len(set(keys)) == k
        best = passage_maxima(idx, qs[b], qe[b], L)
        top_passage = max(range(len(best)), key=lambda p: best[p][0])
        top_key = top_passage if unit == "passage" else idx.docs[idx.passages[top_passage]["doc"]]["id"]
        assert keys[0] == top_key  # the unit holding the best phrase comes first
        for h in hits:  # a unit never scores above its exact best phrase
            unit_best = [s for p, (s, _, _) in enumerate(best)
                         if (p == h.passage_id if unit == "passage" else idx.passages[p]["doc"] == idx.passages[h.passage_id]["doc"])]
            assert h.score <= max(unit_best) + 1e-4


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_deepening_finds_a_small_unit_beside_a_long_one(long_searcher, monkeypatch, unit):
    """Questions whose first-round candidates (top 64 start and end tokens) all lie in the long passage."""
    idx = long_searcher.index
    vecs = idx.token_vectors(np.arange(idx.num_tokens))
    short = np.arange(*idx.passage_range(1))
    rng = np.random.default_rng(8)
    pick = rng.choice(idx.passage_range(0)[1], size=(2, 200))  # aim at tokens of the long passage
    qs, qe = vecs[pick] + 0.1 * rng.standard_normal((2, 200, vecs.shape[1])).astype(np.float32)
    top_s = np.argsort(-(qs @ vecs.T), axis=1)[:, :64]
    top_e = np.argsort(-(qe @ vecs.T), axis=1)[:, :64]
    missed = ~np.isin(top_s, short).any(axis=1) & ~np.isin(top_e, short).any(axis=1)
    assert missed.sum() >= 3
    rounds = count_rounds(monkeypatch, long_searcher)
    for hits in long_searcher.search_vectors(qs[missed], qe[missed], SearchParams(unit=unit, top_k=2, mode="dense")):
        assert sorted(h.title for h in hits) == ["Long", "Short"]
    assert rounds[0] == 64 and len(rounds) > 1 and rounds == sorted(rounds)  # it deepened, with a growing k


def test_bad_arguments_are_refused(tiny_searcher):
    qs, qe = random_questions(np.random.default_rng(6), 1, tiny_searcher.index.vectors.shape[1])
    with pytest.raises(ValueError, match="unit must be one of"):
        tiny_searcher.search_vectors(qs, qe, SearchParams(unit="sentence", mode="dense"))
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        tiny_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=0, mode="dense"))


def test_query_vectors_of_the_wrong_shape_or_not_finite_are_refused_naming_them(tiny_searcher):
    """They failed deep in numpy (a (d,) vector), torch (another model's dimensions) or an IndexError (fewer q_end rows),
    and a NaN row silently got no hits."""
    d = tiny_searcher.index.vectors.shape[1]
    qs, qe = random_questions(np.random.default_rng(7), 2, d)
    params = SearchParams(unit="passage", top_k=2, mode="dense")
    nan = qs.copy()
    nan[1, 3] = np.nan
    for q_start, q_end, words in ((qs[0], qe[0], rf"q_start must be a \(questions, {d}\) array.*got shape \({d},\) "
                                                 r"\(one question's: q_start\[None\]\)"),
                                  (qs, qe[:, :-1], rf"q_end must be a \(questions, {d}\) array.*got shape \(2, {d - 1}\)"),
                                  (qs, qe[:1], "q_start and q_end must have one row per question, got 2 and 1 rows"),
                                  (nan, qe, r"q_start holds NaN or infinite values \(row 1\)"),
                                  ([["a"] * d], qe[:1], "q_start must be a .* array of numbers")):
        with pytest.raises(ValueError, match=words):
            tiny_searcher.search_vectors(q_start, q_end, params)
    # what converts to float32 rows is taken as it is: float64, lists
    expected = tiny_searcher.search_vectors(qs, qe, params)
    assert tiny_searcher.search_vectors(qs.astype(np.float64), qe.tolist(), params) == expected


def test_questions_in_a_numpy_array_are_searched_as_a_list(tiny_searcher):
    """A column of a table (a 1-D numpy array of strings) was refused; a 2-D one is, naming its shape."""
    asked = ["When did Alba build the castle?", "Who built the bridge?"]
    params = SearchParams(unit="passage", top_k=2, mode="dense")
    expected = tiny_searcher.search(asked, params)
    assert tiny_searcher.search(np.array(asked), params) == expected
    assert tiny_searcher.search(np.array(asked, dtype=object), params) == expected
    with pytest.raises(TypeError, match=r"questions must be a list of strings, got ndarray of shape \(1, 2\)"):
        tiny_searcher.search(np.array([asked]), params)
    with pytest.raises(TypeError, match=r"questions\[1\] must be a string, got int"):
        tiny_searcher.search(np.array(["who?", 3], dtype=object), params)


def test_text_search_encodes_questions(tiny_searcher):
    timings = StageTimes()
    [hits] = tiny_searcher.search(["When did Alba build the castle?"], SearchParams(unit="passage", top_k=3, mode="dense"), timings=timings)
    qs, qe = tiny_searcher.encoder.encode(["When did Alba build the castle?"])
    assert hits == tiny_searcher.search_vectors(qs, qe, SearchParams(unit="passage", top_k=3, mode="dense"))[0]
    assert timings.encode > 0 and timings.search > 0 and timings.read == 0


def test_best_span_brute_force_hand_example():
    start = np.array([1.0, 5.0, 0.0, 2.0])
    end = np.array([0.0, 1.0, 3.0, 9.0])
    all_ok = np.full(4, FLAG_START | FLAG_END, dtype=np.uint8)
    assert best_span(start, end, all_ok, 3) == (1, 3, 14.0)  # 5 + 9, length 3
    assert best_span(start, end, all_ok, 2) == (3, 3, 11.0)  # 2 + 9 beats 5 + 3
    flags = all_ok.copy()
    flags[3] = FLAG_END  # token 3 continues a word: may end but not start
    assert best_span(start, end, flags, 2) == (2, 3, 9.0)  # 0 + 9 beats 5 + 3
    flags[1] = FLAG_START  # token 1 is followed by a piece of its word: may not end
    assert best_span(start, end, flags, 1) == (2, 2, 3.0)  # single tokens: only 0 (1 + 0) and 2 (0 + 3) are valid


@pytest.mark.parametrize("factory", ["IVF4,Flat", "OPQ4,IVF4,PQ4x4fs", "IDMap2,IVF4,Flat"])
def test_per_call_nprobe_equals_setting_it_and_leaves_the_index_alone(factory):
    """faiss per-call parameters give what setting nprobe on the index gives, and never change the stored default."""
    import faiss

    from spanseek.core.phrase_index import faiss_search_parameters

    rng = np.random.default_rng(0)
    index = faiss.index_factory(8, factory, faiss.METRIC_INNER_PRODUCT)
    x = rng.standard_normal((400, 8)).astype(np.float32)
    index.train(x)
    if factory.startswith("IDMap2"):
        index.add_with_ids(x, np.arange(400))
    else:
        index.add(x)
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = 1
    _, stored = index.search(x[:20], 5)
    for nprobe in (1, 4):
        _, per_call = index.search(x[:20], 5, params=faiss_search_parameters(index, nprobe))
        ivf.nprobe = nprobe
        _, mutated = index.search(x[:20], 5)
        ivf.nprobe = 1
        assert (per_call == mutated).all()
    assert ivf.nprobe == 1
    _, again = index.search(x[:20], 5)
    assert (again == stored).all()
    _, wide = index.search(x[:20], 5, params=faiss_search_parameters(index, 4))
    assert (wide != stored).any()  # nprobe took effect


def test_batched_flat_search_equals_per_query_search():
    """tune_faiss sends batches through BLAS; each query's neighbours must equal searching it alone."""
    import faiss

    from spanseek.core.phrase_index import FAISS_BLAS_MIN_QUERIES, tune_faiss

    rng = np.random.default_rng(0)
    d = 48
    base = rng.standard_normal((20_000, d)).astype(np.float32)
    index = faiss.IndexFlatIP(d)
    index.add(base)
    queries = rng.standard_normal((3 * FAISS_BLAS_MIN_QUERIES, d)).astype(np.float32)
    before = faiss.cvar.distance_compute_blas_threshold, faiss.cvar.distance_compute_blas_database_bs
    try:
        tune_faiss(d)
        # faiss 1.15 takes BLAS when queries x dim reaches the threshold: from FAISS_BLAS_MIN_QUERIES queries on
        assert (FAISS_BLAS_MIN_QUERIES - 1) * d < faiss.cvar.distance_compute_blas_threshold <= FAISS_BLAS_MIN_QUERIES * d
        scores, ids = index.search(queries, 10)
        alone = [index.search(q[None], 10) for q in queries]
    finally:
        faiss.cvar.distance_compute_blas_threshold, faiss.cvar.distance_compute_blas_database_bs = before
    exact = np.argsort(-(queries @ base.T), axis=1, kind="stable")[:, :10]
    assert (ids == exact).mean() > 0.999  # float rounding may swap exact ties only
    for row, (s, i) in enumerate(alone):
        np.testing.assert_allclose(scores[row], s[0], rtol=1e-4, atol=1e-4)
        assert (ids[row] == i[0]).mean() > 0.9


def test_span_completion_runs_numpy_blas_single_threaded(tiny_searcher, monkeypatch):
    """Only numpy's own BLAS is limited (faiss's and torch's keep their threads), only inside the block, and
    span completion runs inside it."""
    import contextlib

    from spanseek.core import dense as search_module

    selected = search_module.numpy_blas().info()
    if not selected:
        pytest.skip("numpy here has no BLAS library of its own (not a PyPI wheel)")
    assert all("numpy" in lib["filepath"] and "faiss" not in lib["filepath"] for lib in selected)
    before = [lib["num_threads"] for lib in selected]
    with search_module.numpy_blas().limit(limits=1):
        assert all(lib["num_threads"] == 1 for lib in search_module.numpy_blas().info())
    assert [lib["num_threads"] for lib in search_module.numpy_blas().info()] == before

    entered: list[bool] = []

    class Spy:
        def limit(self, limits):
            entered.append(limits == 1)
            return contextlib.nullcontext()

    monkeypatch.setattr(search_module, "numpy_blas", lambda: Spy())
    rng = np.random.default_rng(0)
    qs, qe = random_questions(rng, 2, tiny_searcher.index.vectors.shape[1])
    tiny_searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=3, mode="dense"))
    assert entered == [True]


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 30, 500])
def test_spannable_tokens_are_those_whose_window_holds_a_valid_span(long_searcher, max_tokens):
    """A token starts (ends) some span exactly when it may start (end) one and its forward (backward) window has a
    valid end (start): every token of the index, window lengths from one token to longer than any passage."""
    from spanseek.core.text import FLAG_END, FLAG_START

    leg, index = long_searcher.dense, long_searcher.index
    tokens = np.arange(index.num_tokens)
    can_start, can_end = leg.spannable(max_tokens)
    flags = index.token_flags
    assert (can_start == ((flags & FLAG_START > 0) & leg.window(tokens, max_tokens, True)[1].any(axis=1))).all()
    assert (can_end == ((flags & FLAG_END > 0) & leg.window(tokens, max_tokens, False)[1].any(axis=1))).all()
    assert can_start.any() and can_end.any() and leg.spannable(max_tokens)[0] is can_start  # found once


@pytest.mark.parametrize("best_only", [False, True])
@pytest.mark.parametrize("held", [False, True, "rescored"], ids=["vectors-read", "flat-scan-held", "fp16-scan"])
def test_passage_spans_of_a_batch_are_each_questions_alone(long_searcher, held, best_only):
    """Passages of several questions completed together (one passage shared, one question with none): each
    question's spans, in order and to the bit, are those of its passages completed alone; with a fp16 scan's exact
    scores too, each question's scan its own."""
    import dataclasses

    from spanseek.core.dense import BatchScores
    from spanseek.core.flat_search import FlatScan

    searcher = long_searcher
    index, leg = searcher.index, searcher.dense
    plan = searcher._plan(SearchParams(unit="passage"))
    qs, qe = random_questions(np.random.default_rng(12), 3, index.vectors.shape[1])
    n = len(index.passages)
    groups = [np.arange(n)[::-2], np.zeros(0, np.int64), np.array([0, n - 1])]
    vectors = index.token_vectors(np.arange(index.num_tokens))
    scan = np.concatenate([qs @ vectors.T, qe @ vectors.T]) if held is True else None
    half = dataclasses.replace(leg.half_vectors(), used=True)

    def batch_scores(rows):
        if held == "rescored":
            rescored = FlatScan(index.faiss, np.concatenate([qs[rows], qe[rows]]), None, half=half)
            assert rescored.half is not None
            return BatchScores(leg, plan, qs[rows], qe[rows], rescored=rescored)
        return BatchScores(leg, plan, qs[rows], qe[rows], (lambda: scan[np.r_[rows, 3 + rows]]) if held else None)

    scores = batch_scores(np.arange(3))
    together = leg.passage_spans(groups, scores, best_only=best_only)
    assert len(together[0].starts) and not len(together[1].starts)
    for b, group in enumerate(groups):
        one = batch_scores(np.array([b]))
        alone = leg.passage_spans([group], one, best_only=best_only)[0]
        for got, want in zip((together[b].starts, together[b].ends, together[b].scores),
                             (alone.starts, alone.ends, alone.scores), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("held", [False, True], ids=["vectors-read", "flat-scan-held"])
def test_passage_spans_hold_each_passage_exact_best_span(long_searcher, held):
    """Every start token completed with its best end (one span each), by score; ``best_only`` keeps each passage's
    reading-comprehension best span (brute force), whether the token scores are read from the fine vectors or from
    a flat scan's held product."""
    from spanseek.core.dense import BatchScores

    searcher = long_searcher
    index, leg = searcher.index, searcher.dense
    plan = searcher._plan(SearchParams(unit="passage"))
    passages = np.arange(len(index.passages))
    qs, qe = (x[0] for x in random_questions(np.random.default_rng(11), 1, index.vectors.shape[1]))
    maxima = passage_maxima(index, qs, qe, plan.max_tokens, leg.length_bias)
    vectors = index.token_vectors(np.arange(index.num_tokens))
    scan = np.stack([vectors @ qs, vectors @ qe]) if held else None  # (2B, N) as a flat scan holds them
    scores = BatchScores(leg, plan, qs[None], qe[None], (lambda: scan) if held else None)
    every = leg.passage_spans([passages], scores)[0]
    best = leg.passage_spans([passages], scores, best_only=True)[0]
    assert len(np.unique(every.starts)) == len(every.starts) and (np.diff(every.scores) <= 0).all()
    assert (np.diff(best.scores) <= 0).all()
    got = {int(index.token_passage[i]): (float(s), int(i), int(j))
           for i, j, s in zip(best.starts, best.ends, best.scores, strict=True)}
    assert sorted(got) == [p for p in passages.tolist() if np.isfinite(maxima[p][0])]
    for p, (s, i, j) in got.items():
        assert (i, j) == maxima[p][1:] and s == pytest.approx(maxima[p][0], abs=1e-4), p
    first = {}
    for i, j, s in zip(every.starts, every.ends, every.scores, strict=True):  # each passage's first in the full list
        first.setdefault(int(index.token_passage[i]), (float(s), int(i), int(j)))
    assert first == got


@pytest.mark.parametrize("aim", ["zero-start", "token-start", "random"])
def test_each_passages_best_span_is_the_first_of_its_passage_among_every_span(long_searcher, aim):
    """``best_only`` completes only the starts that may be their passage's best (a bound from the passage's best end
    score): the span kept for each passage is, to the bit, the first of that passage in the full ranking of every
    start's span, ties included (a zero start vector ties every start of a passage)."""
    from spanseek.core.dense import BatchScores

    searcher = long_searcher
    index, leg = searcher.index, searcher.dense
    plan = searcher._plan(SearchParams(unit="passage"))
    rng = np.random.default_rng(3)
    qs, qe = (x[0] for x in random_questions(rng, 1, index.vectors.shape[1]))
    if aim == "zero-start":
        qs = np.zeros_like(qs)
    elif aim == "token-start":
        qs = index.token_vectors(np.array([index.num_tokens // 2]))[0]
    vectors = index.token_vectors(np.arange(index.num_tokens))
    scan = np.stack([vectors @ qs, vectors @ qe])
    scores = BatchScores(leg, plan, qs[None], qe[None], lambda: scan)
    passages = np.arange(len(index.passages))
    every = leg.passage_spans([passages], scores)[0]
    best = leg.passage_spans([passages], scores, best_only=True)[0]
    first: dict[int, tuple[int, int, float]] = {}
    for i, j, s in zip(every.starts.tolist(), every.ends.tolist(), every.scores.tolist(), strict=True):
        first.setdefault(int(index.token_passage[i]), (i, j, s))
    got = {int(index.token_passage[i]): (i, j, s)
           for i, j, s in zip(best.starts.tolist(), best.ends.tolist(), best.scores.tolist(), strict=True)}
    assert got == first


@pytest.mark.parametrize("unit", UNITS)
def test_hits_hold_every_field_as_the_constructor_makes_them(tiny_searcher, unit):
    """Hits are made without the frozen constructor (``Hit.of_fields``): each must still be the Hit its constructor
    makes from the same values, every field present (a field added to Hit and not to the builder fails here)."""
    from spanseek.core.params import HIT_FIELDS, Hit

    hits = tiny_searcher.search(["What is the capital?"], SearchParams(unit=unit, top_k=3))[0]
    assert hits
    for h in hits:
        assert set(vars(h)) == set(HIT_FIELDS)
        assert h == Hit(**h.to_dict())
        assert h.but(score=1.5) == Hit(**{**h.to_dict(), "score": 1.5})


@pytest.mark.parametrize("held", [False, True, "rescored"], ids=["vectors-read", "flat-scan-held", "fp16-scan"])
def test_some_questions_of_a_batch_read_the_batchs_own_scores(long_searcher, held):
    """``BatchScores.of_questions`` (and a pick of a pick): question i of the pick scores any token to the bit as the
    batch's question ``picked[i]`` does, through ``of_rows`` and ``of``."""
    import dataclasses

    from spanseek.core.dense import BatchScores
    from spanseek.core.flat_search import FlatScan

    index, leg = long_searcher.index, long_searcher.dense
    plan = long_searcher._plan(SearchParams(unit="passage"))
    qs, qe = random_questions(np.random.default_rng(21), 5, index.vectors.shape[1])
    if held == "rescored":
        half = dataclasses.replace(leg.half_vectors(), used=True)
        scan = FlatScan(index.faiss, np.concatenate([qs, qe]), None, half=half)
        assert scan.half is not None
        scores = BatchScores(leg, plan, qs, qe, rescored=scan)
    else:
        vectors = index.token_vectors(np.arange(index.num_tokens))
        product = np.concatenate([qs @ vectors.T, qe @ vectors.T])
        scores = BatchScores(leg, plan, qs, qe, (lambda: product) if held else None)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, index.num_tokens, 40)
    picked = np.array([4, 1, 3])
    for pick, rows in ((scores.of_questions(picked), picked),
                       (scores.of_questions(picked).of_questions(np.array([2, 0])), picked[[2, 0]])):
        questions = rng.integers(0, len(rows), len(ids))
        assert len(pick) == len(rows)
        np.testing.assert_array_equal(pick.of_rows(questions, ids), scores.of_rows(rows[questions], ids))
        np.testing.assert_array_equal(pick.of(1, ids[:7]), scores.of(int(rows[1]), ids[:7]))


def test_the_transposed_vectors_follow_the_index(long_searcher, monkeypatch):
    """The dense leg keeps one transposed copy of a flat index's vectors for the pieces product, made once, and
    made again once the index holds other vectors; searches with it find what searches without it find."""
    import faiss

    from spanseek.core import flat_search
    from spanseek.core.dense import DenseLeg

    monkeypatch.setattr(flat_search, "PRODUCT", "pieces")
    index = long_searcher.index
    xb = flat_search.flat_vectors(index.faiss)
    leg = DenseLeg(index, long_searcher.length_bias)
    first = leg.transposed_vectors()
    assert first is not None and np.array_equal(first, xb.T) and leg.transposed_vectors() is first
    leg.drop_transposed()  # a segmented searcher serves instead: let go, and made again by the next flat scan
    assert leg._transposed is None and np.array_equal(leg.transposed_vectors(), first)
    first = leg.transposed_vectors()
    questions = ["When was the zebra built?", "Who juggles near Oslo?"] * 17  # 68 query rows: the pieces product
    params = SearchParams(unit="passage", top_k=3, mode="dense")
    used, scores_into = [], flat_search.scores_into

    def recording(queries, xb, out, workers=None, xt=None):
        used.append(xt is not None)
        return scores_into(queries, xb, out, workers, xt)

    monkeypatch.setattr(flat_search, "scores_into", recording)
    # the searcher's own leg may have been made under MKL's product (an Intel CPU), which keeps no copy: this one
    for holder in (long_searcher, long_searcher.ranking):
        monkeypatch.setattr(holder, "dense", leg)
    with_copy = long_searcher.search(questions, params)
    monkeypatch.setattr(flat_search, "TRANSPOSED_BYTES", 0)
    without = DenseLeg(index, long_searcher.length_bias)
    assert without.transposed_vectors() is None
    for holder in (long_searcher, long_searcher.ranking):
        monkeypatch.setattr(holder, "dense", without)
    assert long_searcher.search(questions, params) == with_copy
    assert used == [True, False]  # one product each, with the copy and without it
    grown = faiss.IndexFlatIP(xb.shape[1])
    grown.add(np.concatenate([xb, xb[:3]]))
    monkeypatch.setattr(flat_search, "TRANSPOSED_BYTES", 1 << 30)
    monkeypatch.setattr(index, "faiss", grown)
    again = leg.transposed_vectors()
    assert again is not None and again.shape == (xb.shape[1], len(xb) + 3)


@pytest.mark.parametrize(("top_k", "merge"), [(150, False), (80, True)], ids=["phrases", "answers"])
def test_a_deeper_phrase_search_ranks_the_batchs_product_again(long_searcher, monkeypatch, top_k, merge):
    """Questions that found too few phrases (or distinct answers) are searched deeper from the batch's own product
    (one product of the index for the batch, however many rounds), and each finds what it finds searched alone."""
    from spanseek.core import flat_search

    products = []
    scores_into = flat_search.scores_into

    def counting(queries, xb, out, workers=None, xt=None):
        products.append(len(queries))
        return scores_into(queries, xb, out, workers, xt)

    monkeypatch.setattr(flat_search, "scores_into", counting)
    rounds = count_rounds(monkeypatch, long_searcher)
    questions = ["When was the zebra built?", "Who juggles near Oslo?", "What did Ada build?"]
    params = SearchParams(unit="phrase", top_k=top_k, merge_answers=merge, mode="dense")
    together = long_searcher.search(questions, params)
    assert len(rounds) > 1  # a phrase search ranks once a call: some question deepened
    assert products == [2 * len(questions)]  # and the product was the batch's, once
    for question, hits in zip(questions, together, strict=True):
        alone = long_searcher.search([question], params)[0]
        assert [(h.passage_id, h.start, h.end) for h in hits] == [(h.passage_id, h.start, h.end) for h in alone]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in alone], rtol=1e-5)


def test_a_phrase_never_spans_a_paragraph_break_inside_a_passage(tmp_path, tiny_model_dir, monkeypatch):
    """A corpus packs short paragraphs and headings into one passage ("\\n\\n" between them): answers ran across the
    join ("validation\\n\\nMPNet-base", a heading and the next paragraph's first words)."""
    from spanseek.core.hits import HitBuilder

    paragraphs = [f"{make_paragraph(random.Random(i), 2)}\n\nHeading {i}\n\n{make_paragraph(random.Random(i + 50), 2)}"
                  for i in range(6)]
    searcher = searcher_over(tmp_path, [{"id": "d", "title": "T", "paragraphs": paragraphs}],
                             tiny_model_dir)
    qs, qe = random_questions(np.random.default_rng(4), 40, searcher.index.vectors.shape[1])

    def texts() -> list[str]:
        return [h.text for hits in searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=10, mode="dense"))
                for h in hits]

    assert texts() and not any("\n\n" in t for t in texts())
    monkeypatch.setattr(HitBuilder, "answers", lambda self, starts, ends: np.arange(len(starts)))
    assert any("\n\n" in t for t in texts())  # the filter had spans to drop


class _ReadScores:
    """A dense leg that scores token ids by reading their vectors (``DenseLeg.scores``' contract)."""

    def scores(self, vectors: np.ndarray, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        return (vectors[ids] @ queries).astype(np.float32)


def _read_batch(n_questions: int, n_tokens: int, seed: int = 0):
    from types import SimpleNamespace

    from spanseek.core.dense import BatchScores

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n_tokens, 4)).astype(np.float32)
    q_start, q_end = (rng.standard_normal((n_questions, 4)).astype(np.float32) for _ in range(2))
    return BatchScores(_ReadScores(), SimpleNamespace(vectors=vectors), q_start, q_end), vectors, rng


def test_scores_of_rows_read_each_rows_question_and_token():
    """Rows of many questions in any order, against each row's own products (brute force)."""
    scores, vectors, rng = _read_batch(7, 50)
    questions = rng.integers(0, 7, 300)
    ids = rng.integers(0, 50, 300)
    for distinct in (True, False):
        got = scores.of_rows(questions, ids, distinct=distinct)
        want = np.stack([np.einsum("nd,nd->n", vectors[ids], scores.q_start[questions]),
                         np.einsum("nd,nd->n", vectors[ids], scores.q_end[questions])], axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert scores.of_rows(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0, 2)


def test_scores_of_rows_cost_grows_linearly_with_the_batch():
    """A mask over every row per question made a batch of B questions cost B^2: 10,000 questions in one
    ``Searcher.search`` did not finish in 15 minutes. 20,000 questions of 20 rows each take well under a second of
    CPU time now (about 10 s before)."""
    import time

    scores, _, rng = _read_batch(20_000, 1_000)
    questions = rng.permutation(np.repeat(np.arange(20_000), 20))
    ids = rng.integers(0, 1_000, len(questions))
    start = time.process_time()
    assert scores.of_rows(questions, ids).shape == (len(ids), 2)
    assert time.process_time() - start < 4.0


def test_one_searcher_shared_by_threads_answers_as_one_by_one(tiny_searcher):
    """A web app's thread pool shares one Searcher: every unit and mode the index serves, with and without a filter,
    searched from 8 threads at once, gives each call the hits it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    from spanseek.core.filters import SearchFilter

    questions = ["When did Alba build the castle?", "Who built the river bridge?", "What was built in 1340?", "Who?"]
    some = SearchFilter(doc_ids=tuple(d["id"] for d in tiny_searcher.index.docs[::2]))
    params = [SearchParams(unit=unit, mode=mode, top_k=3, filter=flt) for unit in UNITS
              for mode in tiny_searcher.modes for flt in (None, some)]
    calls = [(questions[i % 4 : i % 4 + 1 + i % 3], params[i % len(params)]) for i in range(4 * len(params))]

    def run(call):
        return [[hit.to_dict() for hit in hits] for hits in tiny_searcher.search(*call)]

    alone = [run(call) for call in calls]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(run, calls, timeout=120))
    assert together == alone
