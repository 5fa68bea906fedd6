"""The calibration fit (trainer.calibrate): the answer-absent index equals one built without the article, and
``spanseek train calibrate`` writes a calibrator the searcher then applies.

    .venv/bin/python -m pytest -q tests/trainer/test_calibrate.py
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from spanseek.core.confidence import CALIBRATION_NAME, Calibrator
from spanseek.core.loading import open_searcher
from spanseek.core.params import MODES, UNITS, SearchFilter, SearchParams
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.core.selection import allowed_documents
from spanseek.trainer.calibrate import collect, encode_questions, load_runs, save_runs, without_documents
from tests.conftest import make_squad


@pytest.fixture(scope="module")
def squad_index(tmp_path_factory, tiny_model_dir):
    """A SQuAD-format question file and the index of its articles (document i = article i)."""
    from spanseek.core.io import from_squad
    from spanseek.indexer.build import BuildOptions, build_index

    d = tmp_path_factory.mktemp("calibrate")
    with gzip.open(d / "q.json.gz", "wt", encoding="utf-8") as f:
        json.dump(make_squad(n_articles=4, n_paras=3), f)
    from_squad(d / "q.json.gz", d / "corpus.jsonl")
    build_index(d / "corpus.jsonl", tiny_model_dir, d / "index", BuildOptions(progress=False, precision="fp32"))
    return d


def test_without_documents_equals_an_index_built_without_them(squad_index, tiny_model_dir, tiny_searcher):
    from spanseek.indexer.build import BuildOptions, build_index

    d = squad_index
    lines = (d / "corpus.jsonl").read_text().splitlines()
    (d / "rest.jsonl").write_text("".join(line + "\n" for i, line in enumerate(lines) if i != 1))
    build_index(d / "rest.jsonl", tiny_model_dir, d / "rest", BuildOptions(progress=False, precision="fp32"))
    built, sliced = PhraseIndex(d / "rest"), without_documents(PhraseIndex(d / "index"), [1])
    assert sliced.docs == built.docs and sliced.passages == built.passages
    assert np.array_equal(sliced.passage_tokens, built.passage_tokens)
    assert np.array_equal(sliced.token_passage, built.token_passage)
    assert np.array_equal(sliced.token_flags, built.token_flags)
    assert np.allclose(np.asarray(sliced.vectors, np.float32), np.asarray(built.vectors, np.float32), atol=2e-3)
    texts = ["When did Ana build the tower?", "Who built the bridge in 1500?"]
    assert np.allclose(sliced.lexical.scores(texts), built.lexical.scores(texts), atol=1e-5)  # BM25 statistics too
    qs, qe = tiny_searcher.encoder.encode(texts)
    for unit in UNITS:
        for mode in MODES:
            params = SearchParams(unit=unit, mode=mode, top_k=5)
            want = Searcher(built).search_vectors(qs, qe, params, None, texts)
            got = Searcher(sliced).search_vectors(qs, qe, params, None, texts)
            for g, w in zip(got, want, strict=True):
                assert [(h.passage_id, h.start, h.end, h.doc_id) for h in g] == \
                    [(h.passage_id, h.start, h.end, h.doc_id) for h in w]
                assert np.allclose([h.score for h in g], [h.score for h in w], atol=5e-3)


def test_a_copy_without_documents_filters_and_deletes_its_own_documents(squad_index):
    """The copy numbers its documents anew: its deletion mask and its field index (filters by id, title and
    metadata) are its documents', not the original's."""
    from spanseek.core.fieldindex import FieldIndex

    index = PhraseIndex(squad_index / "index")
    index.fields  # noqa: B018  (the original's field index, read before the copy is made)
    index.deleted_docs = np.asarray([0, 2], np.int64)
    sub = without_documents(index, [1])
    assert sub.deleted_docs.tolist() == [0, 1]  # the original's document 2 is the copy's 1
    oracle = FieldIndex.build(sub.docs)
    for d, doc in enumerate(sub.docs):
        for flt in ({"doc_ids": [doc["id"]]}, {"title_prefix": doc["title"]}):
            got = sub.fields.documents_of(SearchFilter.from_json(flt))
            assert np.array_equal(got, oracle.documents_of(SearchFilter.from_json(flt))) and got[d], flt
    assert np.array_equal(allowed_documents(sub, None), [False, False, True])


def test_collect_searches_each_question_with_and_without_its_article(squad_index, tiny_searcher, tmp_path):
    from spanseek.core.io import load_squad, squad_questions

    index = PhraseIndex(squad_index / "index")
    questions = squad_questions(load_squad(squad_index / "q.json.gz"))[:12]
    qs, qe = encode_questions(tiny_searcher, questions)
    runs = collect(index, questions, qs, qe, units=["doc"], modes=["dense"], progress=False)
    present, absent = runs[("doc", "dense", "present")], runs[("doc", "dense", "absent")]
    assert sorted(r.question for r in present) == sorted(r.question for r in absent) == list(range(12))
    assert not any(r.labels.any() for r in absent)  # the gold document is never found once it is gone
    assert all(r.labels.sum() == 1 for r in present)  # and always among all the documents when it is there
    save_runs(runs, tmp_path / "examples.npz")
    again = load_runs(tmp_path / "examples.npz")
    assert again.keys() == runs.keys()
    for key, ranked in runs.items():
        assert [r.question for r in again[key]] == [r.question for r in ranked if len(r.labels)]
        for a, b in zip(again[key], [r for r in ranked if len(r.labels)], strict=True):
            assert np.array_equal(a.features, b.features) and np.array_equal(a.labels, b.labels)


def test_examples_keep_the_questions_whose_search_found_no_hit(tmp_path):
    """A question with no hit is an empty list in ``collect``'s runs, which bench/confidence scores as confidence 0
    and wrong; the examples file lost it, so a report from the file counted fewer questions and other figures than
    the run that wrote it. Files written without the record of lists still load, without those questions."""
    from spanseek.core.confidence import FEATURES
    from spanseek.trainer.calibrate import Ranked

    width = len(FEATURES)
    runs = {("passage", "lexical", "present"): [
        Ranked(0, np.ones((2, width)), np.array([True, False]), None),
        Ranked(1, np.zeros((0, width)), np.zeros(0, bool), None),
        Ranked(2, np.full((1, width), 2.0), np.array([True]), None)]}
    save_runs(runs, tmp_path / "ex.npz")
    again = load_runs(tmp_path / "ex.npz")[("passage", "lexical", "present")]
    assert [(r.question, r.features.shape, r.labels.tolist()) for r in again] == \
        [(0, (2, width), [True, False]), (1, (0, width), []), (2, (1, width), [True])]
    with np.load(tmp_path / "ex.npz") as z:  # as written before the lists were kept
        np.savez(tmp_path / "old.npz", **{k: z[k] for k in z.files if not k.endswith("/lists")})
    assert [r.question for r in load_runs(tmp_path / "old.npz")[("passage", "lexical", "present")]] == [0, 2]


def test_collect_in_batches_gathers_what_one_search_of_every_question_does(squad_index, tiny_searcher, monkeypatch):
    """Searching a job's questions a batch at a time (``SEARCH_BATCH``) gives every question the hits, features and
    labels one search of them all gives, in the same order."""
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.trainer import calibrate

    index = PhraseIndex(squad_index / "index")
    questions = squad_questions(load_squad(squad_index / "q.json.gz"))[:12]
    qs, qe = encode_questions(tiny_searcher, questions)
    got = {}
    for batch in (5, 1_000):
        monkeypatch.setattr(calibrate, "SEARCH_BATCH", batch)
        got[batch] = collect(index, questions, qs, qe, units=["phrase", "doc"], modes=["dense"], progress=False)
    assert got[5].keys() == got[1_000].keys()
    for key, ranked in got[1_000].items():
        assert [r.question for r in got[5][key]] == [r.question for r in ranked]
        for a, b in zip(got[5][key], ranked, strict=True):
            assert np.array_equal(a.labels, b.labels), (key, a.question)
            # float32 scores near 44 round to 4e-6, and a batch of another size sums them in another order: a margin
            # of two of them may differ by a few of those
            np.testing.assert_allclose(a.features, b.features, atol=1e-4, err_msg=str(key))


def test_calibrate_command_writes_a_calibrator_the_searcher_applies(squad_index, tiny_model_dir, tmp_path):
    import shutil

    from spanseek.cli import main

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    assert main(["train", "calibrate", "--index", str(squad_index / "index"), "--questions",
                 str(squad_index / "q.json.gz"), "--model", str(model), "--units", "phrase", "doc"]) == 0
    calibrator = Calibrator.load(model / CALIBRATION_NAME)
    assert set(calibrator.models) <= {f"{u}/{m}" for u in ("phrase", "doc") for m in MODES}
    assert "doc/dense" in calibrator.models and calibrator.fitted_on["n_questions"] > 0
    searcher = open_searcher(squad_index / "index", model, device="cpu", precision="fp32")
    assert searcher.calibrator is not None
    hits = searcher.search(["Who built the tower?"], SearchParams(unit="doc", mode="dense", top_k=3))[0]
    assert all(0 <= h.confidence <= 1 for h in hits)
    conf = [h.confidence for h in hits]
    assert conf == sorted(conf, reverse=True) or len(set(conf)) > 1



def test_calibrate_writes_nothing_it_cannot_fit_and_never_into_a_bundled_model(squad_index, tiny_model_dir, tmp_path,
                                                                              capsys, monkeypatch):
    """Questions none of whose articles the index holds gave an empty calibrator, written over the model's own (the
    bundled default's, for `--model default`, the installed package's file): now the run stops before writing, and
    before encoding a question, naming the questions file, the index and a document it lacks; a bundled model is
    refused without --out before anything is searched."""
    import shutil

    from spanseek.cli import main
    from spanseek.core.model import BUNDLED_MODELS, resolve_model
    from spanseek.trainer import calibrate

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / CALIBRATION_NAME).write_text("kept")
    other, data = tmp_path / "other.json", make_squad(n_articles=2, n_paras=2, seed=7)
    for article in data["data"]:  # articles the index does not hold
        article["title"] = f"Elsewhere {article['title']}"
    other.write_text(json.dumps(data))
    argv = ["train", "calibrate", "--index", str(squad_index / "index"), "--questions", str(other), "--units", "doc"]
    monkeypatch.setattr(calibrate, "encode_questions", lambda *a, **k: pytest.fail("questions were encoded"))
    assert main([*argv, "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert f"{other}: none of its " in err and f"documents is in --index {squad_index / 'index'} (by title: the " \
        "first names 'Elsewhere " in err and err.count("\n") == 1
    assert (model / CALIBRATION_NAME).read_text() == "kept"
    bundled = resolve_model("default") / CALIBRATION_NAME
    before = bundled.read_bytes()
    for name in ("default", str(resolve_model("default"))):  # by name or by its directory
        assert "default" in BUNDLED_MODELS and main([*argv, "--model", name]) == 2
        assert "bundled model" in capsys.readouterr().err and bundled.read_bytes() == before

def _synthetic_runs(n_articles: int = 6, per_article: int = 10, seed: int = 0):
    """Ranked lists of 3 hits per question whose label follows feature 0; question i is about article i // per."""
    from spanseek.core.confidence import FEATURES
    from spanseek.trainer.calibrate import Ranked

    rng = np.random.default_rng(seed)
    runs = {}
    for cond in ("present", "absent"):
        ranked = []
        for i in range(n_articles * per_article):
            x = rng.normal(size=(3, len(FEATURES)))
            ranked.append(Ranked(i, x, rng.random(3) < 1 / (1 + np.exp(-2 * x[:, 0])), None))
        runs[("phrase", "hybrid", cond)] = ranked
    groups = [f"article {i // per_article}" for i in range(n_articles * per_article)]
    return runs, groups


def test_grouped_folds_never_put_one_article_in_train_and_test():
    from spanseek.trainer.calibrate import grouped_folds

    groups = [f"a{i % 7}" for i in range(100)]
    folds = grouped_folds(groups, k=5)
    assert len(folds) == 5
    tested = np.concatenate([test for _, test in folds])
    assert sorted(tested) == list(range(100))  # every example is held out exactly once
    g = np.asarray(groups)
    for train, test in folds:
        assert not set(g[train]) & set(g[test])
    assert len(grouped_folds(["a", "b", "a"], k=5)) == 2  # fewer articles than folds: one fold per article
    with pytest.raises(ValueError, match="at least 2 articles"):
        grouped_folds(["a", "a"], k=5)


def test_choose_c_prefers_a_fit_over_a_constant_and_fit_calibrator_uses_it(monkeypatch):
    import spanseek.trainer.calibrate as cal

    runs, groups = _synthetic_runs()
    seen: list[tuple[set[str], set[str]]] = []
    real = cal.grouped_folds

    def spy(g, k=5):
        folds = real(g, k)
        seen.extend((set(np.asarray(g)[tr]), set(np.asarray(g)[te])) for tr, te in folds)
        return folds

    monkeypatch.setattr(cal, "grouped_folds", spy)
    cv = cal.choose_c(runs, groups, [1e-6, 1.0])
    assert seen and all(not train & test for train, test in seen)  # hits split by their question's article
    r = cv["phrase/hybrid"]
    assert r["C"] == 1.0 and r["cv_log_loss"]["1.0"] < r["cv_log_loss"]["1e-06"]  # a near-constant fit loses
    calibrator = cal.fit_calibrator(runs, "fp", {}, {"phrase/hybrid": 1e-6})
    flat = calibrator.models["phrase/hybrid"]
    assert max(abs(c) for c in flat.coef) < 1e-3  # the per-unit/mode C is the one used
    assert max(abs(c) for c in cal.fit_calibrator(runs, "fp", {}, 1.0).models["phrase/hybrid"].coef) > 0.5


def test_choosing_c_from_examples_needs_the_questions_file(tiny_model_dir, tmp_path):
    from spanseek.trainer.calibrate import calibrate

    runs, _ = _synthetic_runs()
    save_runs(runs, tmp_path / "ex.npz")
    with pytest.raises(ValueError, match="needs --questions"):
        calibrate(None, None, str(tiny_model_dir), tmp_path / "cal.json", c=[0.1, 1.0], from_examples=tmp_path / "ex.npz")
    calibrate(None, None, str(tiny_model_dir), tmp_path / "cal.json", c=[1.0], from_examples=tmp_path / "ex.npz")
    assert Calibrator.load(tmp_path / "cal.json").fitted_on["C"] == 1.0  # one C: no cross-validation, as before


def test_first_hits_weigh_as_much_as_the_rest_of_their_list():
    from spanseek.trainer.calibrate import hit_weights

    assert hit_weights([3, 1, 0, 2]).tolist() == [2, 1, 1, 1, 1, 1]
    assert hit_weights([]).tolist() == [] and hit_weights([0]).tolist() == []


def test_weighted_fit_equals_a_fit_on_repeated_examples():
    from spanseek.core.confidence import FEATURES
    from spanseek.trainer.calibrate import fit_logistic

    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, len(FEATURES)))
    y = rng.random(60) < 1 / (1 + np.exp(-x[:, 1]))
    w = rng.integers(1, 4, size=60)
    weighted = fit_logistic(x, y, 1.0, weight=w.astype(float))
    repeated = fit_logistic(np.repeat(x, w, axis=0), np.repeat(y, w), 1.0)
    # the same objective up to the standardisation, which the weighted fit takes from the unrepeated rows
    probe = rng.normal(size=(20, len(FEATURES)))
    assert np.allclose(weighted.predict(probe), repeated.predict(probe), atol=0.03)
    unweighted = fit_logistic(x, y, 1.0)
    assert not np.allclose(weighted.predict(probe), unweighted.predict(probe), atol=0.03)


def test_examples_carry_what_they_were_searched_on_into_a_refit(tiny_model_dir, tmp_path):
    from spanseek.trainer.calibrate import calibrate, load_meta

    runs, _ = _synthetic_runs()
    fusion = {"fusion": "score", "weights": {"phrase": 4.0}, "phrase_rerank": {"gap": 1.0}}
    save_runs(runs, tmp_path / "ex.npz", {"index": "train-idx", "fusion": fusion})
    assert load_meta(tmp_path / "ex.npz") == {"index": "train-idx", "fusion": fusion}
    assert load_runs(tmp_path / "ex.npz").keys() == runs.keys()  # the record is not read as examples
    calibrate(None, None, str(tiny_model_dir), tmp_path / "cal.json", from_examples=tmp_path / "ex.npz")
    cal = Calibrator.load(tmp_path / "cal.json")
    assert cal.fitted_on["fusion"] == fusion and cal.fitted_on["index"] == "train-idx"
    assert cal.applies("phrase", "hybrid", "score", 4.0, {"gap": 1.0})  # so a refit calibrator still applies
    assert not cal.applies("phrase", "hybrid", "score", 4.0, {"gap": 2.0})


def _lists(rng, n: int, present: bool):
    """n ranked lists of 3 hits: correct with probability sigmoid(2 x0) when the answer is present (never when it
    is absent); absent lists score lower on feature 1, which is what tells the two apart."""
    from spanseek.core.confidence import FEATURES
    from spanseek.trainer.calibrate import Ranked

    out = []
    for i in range(n):
        x = rng.normal(size=(3, len(FEATURES)))
        x[:, 1] += 0.0 if present else -1.5
        labels = (rng.random(3) < 1 / (1 + np.exp(-2 * x[:, 0]))) if present else np.zeros(3, bool)
        out.append(Ranked(i, x, labels, None))
    return out


def test_confidence_is_calibrated_at_the_prior_the_caller_gives():
    """Fitted on lists with the answer present and absent, the product of the correctness and presence models is
    calibrated on answerable questions at prior 0 and on a half-unanswerable mix at prior 0.5; one model fitted on
    the mix (the version-1 calibrator) is not calibrated on answerable questions."""
    from spanseek.core.metrics import calibration_error
    from spanseek.trainer.calibrate import fit_calibrator, fit_logistic, hit_weights

    rng = np.random.default_rng(0)
    runs = {("phrase", "dense", c): _lists(rng, 3000, c == "present") for c in ("present", "absent")}
    calibrator = fit_calibrator(runs, "fp", {})
    assert set(calibrator.present) == {"phrase/dense"}
    test_present, test_absent = _lists(rng, 3000, True), _lists(rng, 3000, False)

    def ece(cal, lists, prior):
        x = np.concatenate([r.features for r in lists])
        y = np.concatenate([r.labels for r in lists])
        return calibration_error(cal.predict("phrase/dense", x, prior), y)

    assert ece(calibrator, test_present, 0.0) < 0.03
    assert ece(calibrator, test_present + test_absent, 0.5) < 0.03
    both = [r for c in ("present", "absent") for r in runs[("phrase", "dense", c)]]
    x, y = np.concatenate([r.features for r in both]), np.concatenate([r.labels for r in both])
    one_model = Calibrator({"phrase/dense": fit_logistic(x, y, weight=hit_weights([3] * len(both)))}, "fp", {})
    assert ece(one_model, test_present, 0.0) > 0.05  # under-confident where every answer is in the index
    # Bayes' rule on the presence odds: prior 1 leaves nothing, a larger prior never raises a confidence
    x = np.concatenate([r.features for r in test_present[:50]])
    by_prior = [calibrator.predict("phrase/dense", x, p) for p in (0.0, 0.2, 0.5, 0.9, 1.0)]
    assert all((a >= b).all() for a, b in zip(by_prior, by_prior[1:], strict=False))
    assert (by_prior[-1] == 0).all() and (by_prior[0] == calibrator.models["phrase/dense"].predict(x)).all()


def test_a_version_1_calibration_file_still_loads_and_ignores_the_prior(tmp_path):
    from spanseek.trainer.calibrate import fit_calibrator

    rng = np.random.default_rng(1)
    runs = {("phrase", "dense", c): _lists(rng, 200, c == "present") for c in ("present", "absent")}
    fitted = fit_calibrator(runs, "fp", {})
    old = {k: v for k, v in fitted.to_dict().items() if k != "present"} | {"version": 1}
    (tmp_path / CALIBRATION_NAME).write_text(json.dumps(old))
    loaded = Calibrator.load(tmp_path / CALIBRATION_NAME)
    assert loaded.present == {} and loaded.models == fitted.models
    args = ("phrase", "dense", [3.0, 2.0], [3.0, 2.0], [None, None], ["a", "b"])
    assert loaded.confidences(*args, unanswerable_prior=0.0) == loaded.confidences(*args, unanswerable_prior=0.9)
    assert fitted.confidences(*args, unanswerable_prior=0.9) < fitted.confidences(*args)


def _open_domain(squad_index, tmp_path, by: str) -> tuple[list, object]:
    """The SQuAD file's questions as JSON Lines naming their document by title or by the corpus id."""
    from spanseek.core.io import load_squad, squad_questions

    questions = squad_questions(load_squad(squad_index / "q.json.gz"))
    ids = {json.loads(line)["title"]: json.loads(line)["id"]
           for line in (squad_index / "corpus.jsonl").read_text().splitlines()}
    path = tmp_path / f"q-{by}.jsonl"
    path.write_text("".join(json.dumps({"id": q.id, "question": q.question, "answers": list(q.answers),
                                        **({"title": q.title} if by == "title" else {"doc_id": ids[q.title]})}) + "\n"
                            for q in questions), encoding="utf-8")
    return questions, path


@pytest.mark.parametrize("by", ["title", "doc_id"])
def test_calibrate_reads_open_domain_questions_as_the_same_squad_ones(squad_index, tiny_searcher, tmp_path, by):
    """Calibrating needs a question's answers and document, not its passage: JSON Lines with answers and a title or
    doc_id give the examples the SQuAD file does (they were refused as not SQuAD)."""
    from spanseek.trainer.calibrate import read_calibration_questions

    questions, path = _open_domain(squad_index, tmp_path, by)
    got = read_calibration_questions(path, limit=12)
    want = read_calibration_questions(squad_index / "q.json.gz", limit=12)
    assert [(q.id, q.question, q.answers) for q in got] == [(q.id, q.question, q.answers) for q in want]
    index = PhraseIndex(squad_index / "index")
    qs, qe = encode_questions(tiny_searcher, want)
    runs = {name: collect(index, qq, qs, qe, units=["passage", "doc"], modes=["dense"], progress=False)
            for name, qq in (("squad", want), ("open", got))}
    assert runs["open"].keys() == runs["squad"].keys()
    for key, ranked in runs["squad"].items():
        assert [r.question for r in runs["open"][key]] == [r.question for r in ranked] and ranked
        for a, b in zip(runs["open"][key], ranked, strict=True):
            assert np.array_equal(a.labels, b.labels) and np.array_equal(a.features, b.features), key
    assert all(r.labels.sum() == 1 for r in runs["open"][("doc", "dense", "present")])


def test_calibrate_command_takes_json_lines_and_refuses_what_cannot_label_hits(squad_index, tiny_model_dir,
                                                                              tmp_path, capsys):
    import shutil

    from spanseek.cli import main

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    _, path = _open_domain(squad_index, tmp_path, "doc_id")
    argv = ["train", "calibrate", "--index", str(squad_index / "index"), "--model", str(model), "--units", "doc",
            "--modes", "dense", "--questions"]
    assert main([*argv, str(path)]) == 0
    assert "doc/dense" in Calibrator.load(model / CALIBRATION_NAME).models
    capsys.readouterr()
    (tmp_path / "no-doc.jsonl").write_text('{"question": "Who?", "answers": ["x"], "title": "A"}\n'
                                           '{"question": "When?", "answers": ["y"]}\n', encoding="utf-8")
    (tmp_path / "q.txt").write_text("Who built the tower?\n", encoding="utf-8")
    for name, said in (("no-doc.jsonl", r"no-doc\.jsonl:2: the question names no document \(a title or doc_id\)"),
                       ("q.txt", r"q\.txt: plain text, one question a line without answers")):
        assert main([*argv, str(tmp_path / name)]) == 2
        assert re.search(said, capsys.readouterr().err)


def test_calibrate_command_refuses_a_bad_questions_file_before_it_loads_the_model(tiny_model_dir, tiny_index, tmp_path,
                                                                                 capsys, monkeypatch):
    """A bad line in --questions was reported only once the model and index were loaded."""
    from spanseek.cli import main
    from spanseek.core import loading

    def loaded(*args, **kwargs):
        pytest.fail("the model was loaded before the questions were read")

    monkeypatch.setattr(loading, "open_searcher", loaded)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Who?", "answers": ["x"], "title": "A"}\n{"question": "When?", "answers": [\n',
                   encoding="utf-8")
    argv = ["train", "calibrate", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--out",
            str(tmp_path / "calibration.json"), "--questions", str(bad)]
    assert main(argv) == 2
    assert re.search(r"bad\.jsonl:2: ", capsys.readouterr().err)
    assert not (tmp_path / "calibration.json").exists()


def _form_lists(rng, n: int, shift: float, first: int = 0):
    """n answer-present ranked lists of 3 hits, correct with probability sigmoid(2 x0 - shift): at the same
    features a keyword query (shift 2) is right less often than a question (shift 0)."""
    from spanseek.core.confidence import FEATURES
    from spanseek.trainer.calibrate import Ranked

    out = []
    for i in range(n):
        x = rng.normal(size=(3, len(FEATURES)))
        out.append(Ranked(first + i, x, rng.random(3) < 1 / (1 + np.exp(shift - 2 * x[:, 0])), None))
    return out


def test_keyword_forms_fit_their_own_models_and_keyword_queries_get_them():
    """Questions asked as keywords (positions n onwards) fit "unit/mode/keywords" models; a keyword query's hits
    are judged by them, a question's by the question models: each calibrated on its own form, where one model for
    both would be over-confident on keywords."""
    from spanseek.core.metrics import calibration_error
    from spanseek.trainer.calibrate import fit_calibrator, split_keyword_runs

    rng = np.random.default_rng(1)
    n = 3000
    runs = {("phrase", "dense", "present"): _form_lists(rng, n, 0.0) + _form_lists(rng, n, 2.0, first=n)}
    split = split_keyword_runs(runs, ["question", "keywords"], n)
    assert {k: len(v) for k, v in split.items()} == {("phrase", "dense", "present"): n,
                                                    ("phrase", "dense/keywords", "present"): n}
    assert split_keyword_runs(runs, ["question"], 2 * n) is runs
    calibrator = fit_calibrator(split, "fp", {})
    assert set(calibrator.models) == {"phrase/dense", "phrase/dense/keywords"}
    questions, keywords = _form_lists(rng, 2000, 0.0), _form_lists(rng, 2000, 2.0)

    def ece(lists, as_keywords):
        got = calibrator.confidences_of_hits("phrase", "dense", [(r.features[:, 0], [None] * 3, [None] * 3, "abc")
                                                                 for r in lists], keywords=[as_keywords] * len(lists))
        return calibration_error(np.concatenate(got), np.concatenate([r.labels for r in lists]))

    assert ece(questions, False) < 0.03 and ece(keywords, True) < 0.03
    assert ece(keywords, False) > 0.1  # the question models on keyword queries: over-confident
    mixed = fit_calibrator(runs, "fp", {})  # one model for both forms: calibrated on neither
    assert calibration_error(*(np.concatenate(a) for a in zip(*[
        (mixed.predict("phrase/dense", r.features), r.labels) for r in keywords], strict=True))) > 0.05


def test_a_keyword_query_gets_the_keyword_models_confidence_in_a_search(tiny_searcher):
    """The searcher judges the hits of a query that reads as keywords by the keyword models, of a question by the
    question models, in one batch; a calibrator without keyword models judges both by the question models."""
    from spanseek.core.confidence import FEATURES, LogisticModel

    def constant(p: float) -> LogisticModel:
        k = len(FEATURES)
        return LogisticModel((0.0,) * k, (1.0,) * k, (0.0,) * k, float(np.log(p / (1 - p))))

    both = Calibrator({"passage/dense": constant(0.9), "passage/dense/keywords": constant(0.2)}, "fp", {})
    params = SearchParams(unit="passage", mode="dense", top_k=3)
    queries = ["Who built the tower?", "tower built 1850"]
    for calibrator, want in ((both, [0.9, 0.2]), (Calibrator({"passage/dense": constant(0.9)}, "fp", {}), [0.9, 0.9])):
        searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=calibrator)
        hits = searcher.search(queries, params)
        assert [{round(h.confidence, 4) for h in hs} for hs in hits] == [{w} for w in want]


def test_calibrate_command_fits_keyword_forms_and_refits_them_from_examples(squad_index, tiny_model_dir, tmp_path,
                                                                           capsys):
    from spanseek.cli import main

    argv = ["train", "calibrate", "--model", str(tiny_model_dir), "--units", "doc", "--modes", "dense", "--limit", "8",
            "--index", str(squad_index / "index"), "--questions", str(squad_index / "q.json.gz")]
    assert main([*argv, "--forms", "question", "keywords", "--examples", str(tmp_path / "ex.npz"),
                 "--out", str(tmp_path / "cal.json")]) == 0
    calibrator = Calibrator.load(tmp_path / "cal.json")
    assert set(calibrator.models) == {"doc/dense", "doc/dense/keywords"}
    assert calibrator.fitted_on["forms"] == ["question", "keywords"] and calibrator.fitted_on["n_questions"] == 8
    assert len(load_runs(tmp_path / "ex.npz")[("doc", "dense", "present")]) == 16  # each question in both forms
    # a refit reads the forms from the examples, and chooses C across the articles of both forms' questions
    assert main(["train", "calibrate", "--model", str(tiny_model_dir), "--from-examples", str(tmp_path / "ex.npz"),
                 "--questions", str(squad_index / "q.json.gz"), "--limit", "8", "--C", "0.1", "1",
                 "--out", str(tmp_path / "refit.json")]) == 0
    assert set(Calibrator.load(tmp_path / "refit.json").models) == {"doc/dense", "doc/dense/keywords"}
    capsys.readouterr()
    assert main([*argv, "--forms", "keywords", "--out", str(tmp_path / "kw.json")]) == 2
    assert "--forms" in capsys.readouterr().err and not (tmp_path / "kw.json").exists()


def test_keyword_models_are_added_to_a_calibration_file_whose_own_models_stay_as_they_are(squad_index, tiny_model_dir,
                                                                                        tmp_path, capsys):
    from spanseek.cli import main

    argv = ["train", "calibrate", "--model", str(tiny_model_dir), "--units", "doc", "--modes", "dense", "--limit", "8",
            "--index", str(squad_index / "index"), "--questions", str(squad_index / "q.json.gz")]
    assert main([*argv, "--C", "0.1", "--out", str(tmp_path / "base.json")]) == 0  # the question models alone
    base = Calibrator.load(tmp_path / "base.json")
    assert main([*argv, "--forms", "question", "keywords", "--add-to", str(tmp_path / "base.json"),
                 "--out", str(tmp_path / "added.json")]) == 0
    added = Calibrator.load(tmp_path / "added.json")
    assert set(added.models) == {"doc/dense", "doc/dense/keywords"}
    assert added.models["doc/dense"] == base.models["doc/dense"]  # fitted at C 0.1; this fit's own were at C 1
    assert added.present["doc/dense"] == base.present["doc/dense"] and "doc/dense/keywords" in added.present
    assert added.fitted_on["C"] == 0.1 and added.fitted_on["keywords"]["models"] == ["doc/dense/keywords"]
    assert added.fitted_on["keywords"]["forms"] == ["question", "keywords"]
    capsys.readouterr()
    # a fit without keyword models has nothing to add; a file that is no calibrator is named before any search
    assert main([*argv, "--add-to", str(tmp_path / "base.json"), "--out", str(tmp_path / "none.json")]) == 2
    assert "--forms question keywords" in capsys.readouterr().err and not (tmp_path / "none.json").exists()
    (tmp_path / "bad.json").write_text("{}")
    assert main([*argv, "--forms", "question", "keywords", "--add-to", str(tmp_path / "bad.json"),
                 "--out", str(tmp_path / "bad-out.json")]) == 2
    assert "bad.json" in capsys.readouterr().err and not (tmp_path / "bad-out.json").exists()


def test_keyword_models_of_another_model_or_fusion_are_not_added():
    from spanseek.trainer.calibrate import fit_calibrator, with_keyword_models

    rng = np.random.default_rng(0)
    questions, keywords = ({("phrase", mode, "present"): _form_lists(rng, 200, shift)}
                           for mode, shift in (("hybrid", 0.0), ("hybrid/keywords", 2.0)))
    fusion = {"fusion": "score", "weights": {"phrase": 0.5}}
    base = fit_calibrator(questions, "fp", {"fusion": fusion})
    added = with_keyword_models(base, fit_calibrator(keywords, "fp", {"fusion": fusion}))
    assert set(added.models) == {"phrase/hybrid", "phrase/hybrid/keywords"}
    assert added.models["phrase/hybrid"] == base.models["phrase/hybrid"]
    with pytest.raises(ValueError, match="another model"):
        with_keyword_models(base, fit_calibrator(keywords, "other", {"fusion": fusion}))
    with pytest.raises(ValueError, match="under the fusion"):
        with_keyword_models(base, fit_calibrator(keywords, "fp", {"fusion": {**fusion, "weights": {"phrase": 1.0}}}))
    with pytest.raises(ValueError, match="has none"):
        with_keyword_models(base, base)
