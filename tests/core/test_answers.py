"""Results users can act on (core.search, core.confidence): non-overlapping phrase hits, pagination, confidence and
abstention.

Oracles: non-overlapping hits are a brute-force greedy pass over a deep raw (overlapping) list; page n equals items
[n k, (n + 1) k) of one deep request for every unit and mode; confidences are recomputed from the features by hand;
abstention happens exactly when the best hit's confidence is below ``min_confidence``.

    .venv/bin/python -m pytest -q tests/core/test_answers.py
"""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from spanseek.core.confidence import (
    CALIBRATION_NAME,
    FEATURE_DEPTH,
    FEATURES,
    CalibrationError,
    Calibrator,
    LogisticModel,
    hit_features,
    load_calibrator,
)
from spanseek.core.hits import Hits
from spanseek.core.lexical import DEFAULT_FUSION
from spanseek.core.params import MODES, UNITS, SearchFilter, SearchParams, SearchParamsError
from spanseek.core.search import Searcher

N_FEATURES = len(FEATURES)


def questions(searcher: Searcher, n: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    texts = ["Who built the castle?", "When was the bridge built?", "Which river runs by the church?",
             "Who painted the tower in 1500?"][:n]
    q_start, q_end = searcher.encoder.encode(texts)
    return q_start, q_end, texts


def key(h) -> tuple:
    return (h.passage_id, h.start, h.end, h.text, round(h.score, 4))


def overlaps(a, b) -> bool:
    return a.passage_id == b.passage_id and max(a.start, b.start) < min(a.end, b.end)


@pytest.mark.parametrize("mode", MODES)
def test_phrase_hits_do_not_overlap_and_are_the_greedy_pick_of_the_raw_list(tiny_searcher, mode):
    qs, qe, texts = questions(tiny_searcher)
    raw = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=400, mode=mode, allow_overlap=True), None, texts)
    for k in (1, 3, 10):
        got = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=k, mode=mode), None, texts)
        for hits, deep in zip(got, raw, strict=True):
            want: list = []
            for h in deep:  # brute force: walk the deep raw list, keep what overlaps nothing kept
                if len(want) < k and not any(overlaps(h, w) for w in want):
                    want.append(h)
            assert not any(overlaps(a, b) for i, a in enumerate(hits) for b in hits[:i])
            assert len(hits) == len(want)  # filled to k whenever the deep list has k non-overlapping phrases
            if mode == "hybrid":  # its phrase scores z-normalise BM25 over the candidates, which a deeper search
                continue  # changes: the order is the deep list's only up to that shift
            assert [key(h) for h in hits] == [key(h) for h in want]
    if mode != "lexical":  # lexical mode answers each passage with its one best phrase: never overlapping
        assert any(overlaps(a, b) for deep in raw for i, a in enumerate(deep[:10]) for b in deep[:i]), \
            "the raw lists have no overlaps: this test would not notice a missing filter"


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_overlapping_hits_are_distinct_characters_and_filled_to_k(tiny_searcher, mode):
    """Two token spans that tidy to the same characters ("river" and "river .") were two identical hits with
    ``allow_overlap``: now one, the better, and the list is filled from further down."""
    qs, qe, texts = questions(tiny_searcher)
    hits = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=300, mode=mode, allow_overlap=True), None, texts)
    spans = tiny_searcher.dense.candidates(tiny_searcher.dense.batch(tiny_searcher._plan(SearchParams(
        top_k=400, mode="dense", allow_overlap=True)), qs, qe), 400, None)
    tidied = [[(h.passage_id, h.start, h.end) for h in (tiny_searcher.hits.hit(int(a), int(b), 0.0)
                                                          for a, b in zip(sp.starts, sp.ends, strict=True))]
              for sp in spans]
    assert any(len(set(t)) < len(t) for t in tidied), "no two spans tidy alike: this test would not notice"
    for got in hits:
        chars = [(h.passage_id, h.start, h.end) for h in got]
        assert len(chars) == len(set(chars)) == 300
        # (hybrid: the re-ranked head, then the fused order below it, scores shifted under the head's)
        assert all(a.score >= b.score for a, b in zip(got, got[1:], strict=False))


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
@pytest.mark.parametrize("overlap", [False, True])
def test_a_lone_punctuation_mark_is_never_a_phrase_hit(tiny_searcher, mode, overlap):
    """"." and "," were phrase hits (8 of 60 validation questions had one in their top 5), below better ones."""
    qs, qe, texts = questions(tiny_searcher)
    got = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=200, mode=mode, allow_overlap=overlap), None,
                                       texts)
    assert all(any(ch.isalnum() for ch in h.text) for hits in got for h in hits)
    assert sum(map(len, got)) > 50 * len(qs)  # lists long enough to hold a lone mark, overlapping or not
    merged = tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=50, mode=mode, merge_answers=True), None, texts)
    assert all(h.text not in (".", ",") for hits in merged for h in hits)


def test_overlap_filter_also_applies_to_merged_answers(tiny_searcher):
    qs, qe, texts = questions(tiny_searcher)
    for hits in tiny_searcher.search_vectors(qs, qe, SearchParams(top_k=8, merge_answers=True, mode="dense")):
        assert not any(overlaps(a, b) for i, a in enumerate(hits) for b in hits[:i])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
def test_page_n_is_a_slice_of_one_deep_request(tiny_searcher, unit, mode):
    qs, qe, texts = questions(tiny_searcher)
    k = 3
    for page in (1, 2):
        deep = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, mode=mode, top_k=(page + 1) * k), None, texts)
        got = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, mode=mode, top_k=k, offset=page * k), None,
                                           texts)
        for hits, want in zip(got, deep, strict=True):
            assert [key(h) for h in hits] == [key(h) for h in want[page * k : (page + 1) * k]]
    far = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, mode=mode, top_k=k, offset=10_000), None, texts)
    assert all(hits == [] for hits in far)  # past the end: an empty page, not an error


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
def test_pages_of_one_rank_window_join_into_its_list(tiny_searcher, unit, mode, monkeypatch):
    """Page n was cut from a ranking offset + top_k deep, and a deeper ranking weighs more candidates (fused scores,
    span completion, deepening), so the pages of a question repeated and skipped hits (on the demo index). Pages
    asked with one rank_window are ranked that deep, and are slices of that window's list: joined, they are the
    list, confidences included."""
    qs, qe, texts = questions(tiny_searcher)
    k, window = 3, 12
    ranked, depths = tiny_searcher.ranking.deep, []
    monkeypatch.setattr(tiny_searcher.ranking, "deep", lambda plan, *a: depths.append(plan.top_k) or ranked(plan, *a))
    whole = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, mode=mode, top_k=window), None, texts)
    pages = [tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, mode=mode, top_k=k, offset=p * k,
                                                               rank_window=window), None, texts)
             for p in range(window // k)]
    assert set(depths) == {window} and len(depths) >= 3  # (pages past the last document search nothing)
    for b, want in enumerate(whole):
        joined = [h for page in pages for h in page[b]]
        assert [(*key(h), h.confidence) for h in joined] == [(*key(h), h.confidence) for h in want]


def test_a_small_rank_window_works_where_the_search_ranks_deeper_inside(tiny_searcher):
    """The window was carried into the searches made inside: a calibrated searcher ranks at least FEATURE_DEPTH
    deep, merged answers from 64 phrases, deepening 4x further, and each refused the window as too small."""
    qs, qe, texts = questions(tiny_searcher)
    calibrated = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=calibrator())
    for searcher, params in ((calibrated, SearchParams(unit="doc", top_k=3, rank_window=3, mode="hybrid")),
                             (calibrated, SearchParams(unit="passage", top_k=2, offset=2, rank_window=6)),
                             (tiny_searcher, SearchParams(top_k=2, rank_window=5, merge_answers=True)),
                             (tiny_searcher, SearchParams(top_k=3, rank_window=3, mode="dense",
                                                          filter=SearchFilter(doc_ids=("d1",))))):
        got = searcher.search_vectors(qs, qe, params, None, texts)
        whole = searcher.search_vectors(qs, qe, dataclasses.replace(params, top_k=params.rank_window, offset=0,
                                                                    rank_window=None), None, texts)
        for page, full in zip(got, whole, strict=True):
            assert [key(h) for h in page] == [key(h) for h in full[params.offset : params.offset + params.top_k]]


def test_a_rank_window_shallower_than_the_page_is_refused():
    with pytest.raises(SearchParamsError, match=r"rank_window must be at least offset \+ top_k \(13\), got 12"):
        SearchParams(top_k=3, offset=10, rank_window=12)
    for bad in (0, 2.5, True):
        with pytest.raises(SearchParamsError, match="rank_window"):
            SearchParams(rank_window=bad)  # type: ignore[arg-type]
    assert SearchParams(top_k=3, offset=9, rank_window=12).depth == 12 and SearchParams(top_k=3, offset=9).depth == 12


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_a_page_past_the_last_unit_is_empty_and_searches_nothing(tiny_searcher, unit, monkeypatch):
    qs, qe, texts = questions(tiny_searcher)
    n = tiny_searcher.selection(None).unit_count[unit]
    every = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=n), None, texts)
    last = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=3, offset=n - 1), None, texts)
    assert [[key(h) for h in hits] for hits in last] == [[key(h) for h in hits[n - 1 :]] for hits in every]
    assert any(last), "no question found every unit: this test would not notice a page cut one unit short"
    monkeypatch.setattr(tiny_searcher.ranking, "ranked", lambda *a, **k: pytest.fail("searched for a page past the end"))
    past = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=3, offset=n), None, texts)
    assert len(past) == len(qs) and all(hits == [] and not hits.no_answer for hits in past)


def test_blank_questions_get_no_hits_in_process_as_from_the_service(tiny_searcher):
    """search([""]) encoded an empty question and answered with the index's best hits; the service and the CLI
    answer none. The other questions of the call are answered as alone."""
    texts = ["Who built the castle in 1500?", "", " \u200b\n", "Who painted the tower in 1500?"]
    got = tiny_searcher.search(texts, SearchParams(top_k=3))
    alone = tiny_searcher.search([texts[0], texts[3]], SearchParams(top_k=3))
    assert [len(h) for h in got[1:3]] == [0, 0] and not got[1].no_answer
    assert [[key(h) for h in x] for x in (got[0], got[3])] == [[key(h) for h in x] for x in alone] and got[0]
    assert tiny_searcher.search(["", "  "]) == [[], []] and tiny_searcher.search([]) == []


def test_search_arguments_of_the_wrong_type_say_what_is_wrong(tiny_searcher):
    for questions, params, words in (
            ("Who built it?", SearchParams(), r"questions must be a list of strings, got str \(search\(\[question\]\)"),
            (["ok", None], SearchParams(), r"questions\[1\] must be a string, got NoneType"),
            ([b"who"], SearchParams(), r"questions\[0\] must be a string, got bytes"),
            (["who\ud800"], SearchParams(), r"questions\[0\] holds a lone surrogate"),
            (["ok"], {"unit": "doc"}, r"params must be a SearchParams, got dict \(SearchParams\(\*\*options\)\)"),
            (["ok"], None, "params must be a SearchParams, got NoneType")):
        with pytest.raises(TypeError, match=words):
            tiny_searcher.search(questions, params)
    with pytest.raises(SearchParamsError, match="unit must be one of phrase, passage, doc; got None"):
        SearchParams(unit=None)  # type: ignore[arg-type]


def test_bad_offsets_and_confidences_are_refused():
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(SearchParamsError, match="offset"):
            SearchParams(offset=bad)  # type: ignore[arg-type]
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(SearchParamsError, match="min_confidence"):
            SearchParams(min_confidence=bad)  # type: ignore[arg-type]
    for name in ("merge_answers", "allow_overlap"):  # "no" was true
        with pytest.raises(SearchParamsError, match=f"{name} must be true or false, got 'no'"):
            SearchParams(**{name: "no"})
    assert hash(SearchParams(offset=3, min_confidence=0.5, allow_overlap=True))  # the batcher groups by params


def test_a_hits_copy_with_changes_equals_dataclasses_replace_and_refuses_unknown_fields():
    import dataclasses

    from spanseek.core.params import HIT_FIELDS, Hit

    hit = Hit(text="1340", score=2.5, start=4, end=8, passage_id=3, passage="in 1340 ...", doc_id="d", title="t",
              paragraph=1, meta={"lang": "en"}, dense=2.0, lexical=1.5)
    for changes in ({"confidence": 0.25}, {"score": -1.0, "read": 3.0}, {}):
        copy = hit.but(**changes)
        assert copy == dataclasses.replace(hit, **changes) and copy is not hit
        assert all(getattr(copy, f) == changes.get(f, getattr(hit, f)) for f in HIT_FIELDS)
    assert hit.confidence is None  # the original is left as it was
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.but(confidence=0.5).score = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field 'confidense'"):
        hit.but(confidense=0.5)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def calibrator(coef=(1.0, 0.5, -0.5, -0.3, 2.0, 0.2, 0.1), intercept=-0.2, fingerprint="fp", mean=None,
               scale=None) -> Calibrator:
    model = LogisticModel(tuple(mean if mean is not None else [0.0] * N_FEATURES),
                          tuple(scale if scale is not None else [1.0] * N_FEATURES), tuple(coef), intercept)
    fusion = {"fusion": DEFAULT_FUSION["fusion"], "weights": DEFAULT_FUSION["weights"],  # the tiny index's
              "phrase_rerank": DEFAULT_FUSION["phrase_rerank"]}
    return Calibrator({f"{u}/{m}": model for u in UNITS for m in MODES}, fingerprint, {"fusion": fusion})


def test_features_by_brute_force():
    texts = ["1340", "In 1340", "the 1340", "Rotterdam", "1340"]
    scores = [10.0, 9.0, 8.5, 7.0, 6.0]
    f = hit_features("phrase", scores, scores, [None] * 5, texts)
    col = {name: f[:, i] for i, name in enumerate(FEATURES)}
    # "the 1340" normalises to "1340", "In 1340" to "in 1340": the next *different* answer below rank 0 is rank 1
    assert list(col["margin"]) == [1.0, 0.5, 1.5, 1.0, 0.0]
    p = np.exp(np.asarray(scores) - 10) / np.exp(np.asarray(scores) - 10).sum()
    assert np.allclose(col["answer_prob"], [p[0] + p[2] + p[4], p[1], p[0] + p[2] + p[4], p[3], p[0] + p[2] + p[4]])
    assert list(col["gap_to_best"]) == [0.0, 1.0, 1.5, 3.0, 4.0] and np.allclose(col["log_rank"], np.log1p(range(5)))
    assert list(col["log_lexical"]) == [0.0] * 5
    passages = hit_features("passage", scores, scores, [3.0, None, 1.0, 0.0, 2.0], texts)
    assert list(passages[:, FEATURES.index("margin")]) == [1.0, 0.5, 1.5, 1.0, 0.0]  # units: the next hit
    assert np.allclose(passages[:, FEATURES.index("log_lexical")], np.log1p([3.0, 0.0, 1.0, 0.0, 2.0]))


@pytest.mark.parametrize("unit", UNITS)
def test_a_deeper_list_changes_no_feature_of_its_first_hits_but_the_last_ones_margin(unit):
    """answer_prob is the softmax of the dense scores over the first ``FEATURE_DEPTH[unit]`` hits (by hand), so the
    hits past them (as a deeper page asks for) change none of those hits' features, but for the last one's margin
    (which then reads the next hit below instead of itself)."""
    depth = FEATURE_DEPTH[unit]
    rng = np.random.default_rng(len(unit))
    dense = sorted(rng.normal(size=depth + 6).tolist(), reverse=True)
    texts = [f"answer {i}" for i in range(len(dense))]  # distinct answers: each hit's answer_prob is its own
    deep = hit_features(unit, dense, dense, [None] * len(dense), texts)
    top = np.exp(np.asarray(dense[:depth]) - dense[0])
    assert deep[:depth, FEATURES.index("answer_prob")] == pytest.approx(top / top.sum())
    shallow = hit_features(unit, dense[:depth], dense[:depth], [None] * depth, texts[:depth])
    margin = FEATURES.index("margin")
    assert np.array_equal(np.delete(deep[:depth], margin, axis=1), np.delete(shallow, margin, axis=1))
    assert deep[: depth - 1, margin].tolist() == shallow[: depth - 1, margin].tolist()
    assert shallow[-1, margin] == 0.0 and deep[depth - 1, margin] == dense[depth - 1] - dense[depth]


@pytest.mark.parametrize("seed", range(4))
def test_margins_equal_the_next_different_answer_found_by_a_loop(seed):
    """The margin against a plain loop (the next hit below with another normalised answer, else the last hit), on
    lists where answers repeat anywhere; and a batch's confidences are each question's own."""
    from spanseek.core.metrics import normalize_answer

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    texts = [str(rng.choice(["Paris", "paris", "the Paris", "Lyon", "", "Nice", "a Nice"])) for _ in range(n)]
    scores = sorted(rng.normal(size=n).tolist(), reverse=True)
    keys = [normalize_answer(t) or f"\x00{i}" for i, t in enumerate(texts)]
    loop = [scores[i] - next((scores[j] for j in range(i + 1, n) if keys[j] != keys[i]), scores[-1]) for i in range(n)]
    assert hit_features("phrase", scores, scores, [None] * n, texts)[:, FEATURES.index("margin")].tolist() == loop
    fitted = calibrator(coef=tuple(rng.normal(size=N_FEATURES).tolist()))
    lists = [(scores[:m], scores[:m], [None] * m, texts[:m]) for m in (n, 0, max(1, n // 2))]
    assert fitted.confidences_of_hits("phrase", "dense", lists) == [
        fitted.confidences("phrase", "dense", *q) for q in lists]


@pytest.mark.parametrize("unit", UNITS)
def test_confidence_and_abstention(tiny_searcher, unit):
    qs, qe, texts = questions(tiny_searcher)
    for mode in MODES:
        # standardise with the features' own spread, so the confidences spread over (0, 1)
        lists = tiny_searcher.search_vectors(qs, qe, SearchParams(unit=unit, mode=mode, top_k=FEATURE_DEPTH[unit]),
                                             None, texts)
        f = np.concatenate([hit_features(unit, [h.score for h in hs], [h.dense for h in hs], [h.lexical for h in hs],
                                         [h.text for h in hs]) for hs in lists])
        cal = calibrator(mean=f.mean(axis=0), scale=np.maximum(f.std(axis=0), 1e-3))
        searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=cal)
        params = SearchParams(unit=unit, mode=mode, top_k=4)
        got = searcher.search_vectors(qs, qe, params, None, texts)
        deep = searcher.search_vectors(qs, qe, dataclasses.replace(params, top_k=FEATURE_DEPTH[unit]), None, texts)
        for hits, ranked in zip(got, deep, strict=True):
            assert isinstance(hits, Hits) and not hits.no_answer  # (lexical: no hits when no word matches)
            # the confidence of a hit is the model applied to the features of the FEATURE_DEPTH-deep list
            f = hit_features(unit, [h.score for h in ranked], [h.dense for h in ranked], [h.lexical for h in ranked],
                             [h.text for h in ranked])
            m = cal.models[f"{unit}/{mode}"]
            want = sigmoid((f - np.asarray(m.mean)) / np.asarray(m.scale) @ np.asarray(m.coef) + m.intercept)
            assert np.allclose([h.confidence for h in hits], want[: len(hits)], atol=1e-4)
            assert all(0 <= h.confidence <= 1 for h in hits)
        best = np.asarray([hits[0].confidence if hits else -1.0 for hits in got])
        cut = float(np.median(best)) + 1e-6
        assert cut < 1 and len(set(best[best >= 0])) > 1
        gated = searcher.search_vectors(qs, qe, dataclasses.replace(params, min_confidence=cut), None, texts)
        for hits, conf, full in zip(gated, best, got, strict=True):
            assert hits.no_answer == (conf < cut)
            assert list(hits) == ([] if conf < cut else list(full))
        assert any(h.no_answer for h in gated) and not all(h.no_answer for h in gated)


def test_without_a_calibrator_confidence_is_none_and_min_confidence_is_refused(tiny_searcher):
    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder)
    hits = searcher.search(["Who built the castle?"], SearchParams(top_k=3))[0]
    assert hits and all(h.confidence is None for h in hits)
    with pytest.raises(SearchParamsError, match="calibrat"):
        searcher.search(["Who built the castle?"], SearchParams(min_confidence=0.5))
    partial = Calibrator({"phrase/dense": calibrator().models["phrase/dense"]}, "fp", {})
    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=partial)
    question = ["Who built the castle?"]
    assert searcher.search(question, SearchParams(mode="dense"))[0][0].confidence is not None
    assert searcher.search(question, SearchParams(mode="lexical", unit="passage"))[0][0].confidence is None
    with pytest.raises(SearchParamsError, match="unit=passage, mode=lexical"):
        searcher.check_mode(SearchParams(mode="lexical", unit="passage", min_confidence=0.1))


def test_a_hybrid_calibrator_applies_only_under_the_fusion_it_was_fitted_with(tiny_searcher):
    """Hybrid scores move with the lexical weight: a calibrator fitted under another weight (or an unrecorded one)
    gives no confidence, and min_confidence is refused, rather than a miscalibrated number."""
    question = ["Who built the castle?"]
    w = DEFAULT_FUSION["weights"]["phrase"]
    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=calibrator())
    assert searcher.search(question, SearchParams(mode="hybrid"))[0][0].confidence is not None
    assert searcher.search(question, SearchParams(mode="hybrid", lexical_weight=w + 1))[0][0].confidence is None
    with pytest.raises(SearchParamsError, match="lexical weight"):
        searcher.check_mode(SearchParams(mode="hybrid", lexical_weight=w + 1, min_confidence=0.1))
    passage = SearchParams(mode="hybrid", unit="passage")
    assert searcher.search(question, passage)[0][0].confidence is not None
    assert searcher.search(question, dataclasses.replace(passage, fusion="rrf"))[0][0].confidence is None
    # fitted before phrases were re-ranked (or under other re-ranking weights): phrases get none, passages do
    fitted = calibrator().fitted_on["fusion"]
    for rerank in (None, {**DEFAULT_FUSION["phrase_rerank"], "gap": 1.0}):
        other = Calibrator(calibrator().models, "fp", {"fusion": {**fitted, "phrase_rerank": rerank}})
        searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=other)
        assert searcher.search(question, SearchParams(mode="hybrid"))[0][0].confidence is None
        assert searcher.search(question, passage)[0][0].confidence is not None
    unrecorded = Calibrator(calibrator().models, "fp", {})
    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=unrecorded)
    assert searcher.search(question, SearchParams(mode="hybrid"))[0][0].confidence is None
    assert searcher.search(question, SearchParams(mode="dense"))[0][0].confidence is not None


def test_calibration_file_round_trip_and_errors(tmp_path, caplog):
    cal = calibrator(fingerprint="abc")
    cal.save(tmp_path / "calibration.json")
    again = load_calibrator(tmp_path, "abc")
    assert again is not None and again.models == cal.models and again.fitted_on == cal.fitted_on
    with caplog.at_level(logging.WARNING):
        assert load_calibrator(tmp_path, "other") is None  # fitted for other weights: no confidence, not a wrong one
    assert "fitted for model abc" in caplog.text
    assert load_calibrator(tmp_path / "nowhere", "abc") is None
    d = json.loads((tmp_path / "calibration.json").read_text())
    d["models"]["phrase/dense"]["coef"] = [1.0, 2.0]
    (tmp_path / "calibration.json").write_text(json.dumps(d))
    with pytest.raises(CalibrationError, match=r"calibration.json.*phrase/dense.*expected 7 numbers"):
        load_calibrator(tmp_path, "abc")
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.raises(CalibrationError, match="calibration.json"):
        load_calibrator(tmp_path, "abc")


@pytest.mark.parametrize("name", ["default", "default-2026-11", "base"])
def test_the_bundled_models_calibrators_apply_to_a_new_index(name):
    """Each shipped calibration.json was fitted for its bundled weights and under the current fusion defaults (every
    new index records those), so hybrid hits of a freshly built index carry a confidence for every unit."""
    from spanseek.core.model import model_fingerprint, resolve_model

    model_dir = resolve_model(name)
    cal = Calibrator.load(model_dir / CALIBRATION_NAME)
    assert cal.model_fingerprint == model_fingerprint(model_dir)
    for unit in UNITS:
        assert cal.applies(unit, "hybrid", DEFAULT_FUSION["fusion"], DEFAULT_FUSION["weights"][unit],
                           DEFAULT_FUSION["phrase_rerank"]), unit


def test_the_unanswerable_prior_comes_from_the_request_else_the_searcher(tiny_searcher):
    """With a presence model, confidence = correctness x presence at the prior (Bayes' rule on the presence odds,
    fitted at even odds); the request's prior wins over the searcher's, which applies when the request has none."""
    question = ["Who built the castle?"]
    params = SearchParams(mode="dense", top_k=3)
    # the features of the list the confidences read (FEATURE_DEPTH deep), standardised by their own spread so that
    # both models' probabilities lie inside (0, 1), where a wrong product or prior shift shows
    ranked = tiny_searcher.search(question, dataclasses.replace(params, top_k=FEATURE_DEPTH["phrase"]))[0]
    features = hit_features("phrase", [h.score for h in ranked], [h.dense for h in ranked],
                            [h.lexical for h in ranked], [h.text for h in ranked])
    base = calibrator(coef=(0.25, 0.125, -0.125, -0.075, 0.5, 0.05, 0.025), mean=features.mean(axis=0),
                      scale=np.maximum(features.std(axis=0), 1e-3))
    present = {k: dataclasses.replace(m, intercept=0.3) for k, m in base.models.items()}
    cal = Calibrator(base.models, "fp", base.fitted_on, present)
    correct = base.models["phrase/dense"].predict(features)[:3]
    presence_logit = present["phrase/dense"].logit(features)[:3]
    plain = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=base).search(question, params)[0]
    assert [h.confidence for h in plain] == [round(float(p), 4) for p in correct]
    assert all(0.01 < p < 0.99 for p in [*correct, *sigmoid(presence_logit)])  # not saturated
    at_zero = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=cal).search(question, params)[0]
    assert [h.confidence for h in at_zero] == [h.confidence for h in plain]  # prior 0: the answer is there
    wary = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=cal, unanswerable_prior=0.5)
    half = wary.search(question, params)[0]
    assert [h.confidence for h in half] == [round(float(p), 4) for p in correct * sigmoid(presence_logit)]
    asked = wary.search(question, dataclasses.replace(params, unanswerable_prior=0.0))[0]
    assert [h.confidence for h in asked] == [h.confidence for h in at_zero]
    # at even odds the shift is 0 either way: a prior of 0.2 multiplies the presence odds by 0.8 / 0.2
    low = wary.search(question, dataclasses.replace(params, unanswerable_prior=0.2))[0]
    assert [h.confidence for h in low] == [round(float(p), 4)
                                           for p in correct * sigmoid(presence_logit + np.log(0.8 / 0.2))]
    assert all(a.confidence > b.confidence for a, b in zip(low, half, strict=True))  # fewer unanswerable: surer
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(SearchParamsError, match="unanswerable_prior"):
            SearchParams(unanswerable_prior=bad)  # type: ignore[arg-type]
