"""Fit the confidence calibrator (``core.confidence``) on training questions searched with their answer present and absent.

    spanseek train calibrate --index TRAIN_INDEX --questions TRAIN_QUESTIONS.json.gz --model MODEL_DIR

TRAIN_INDEX is an index of training articles (never the held-out ones: ``core.io.Holdout``) and TRAIN_QUESTIONS
their questions, in any format ``core.questions`` reads that gives each question's answers and its document (SQuAD,
or JSON Lines / CSV / TSV with ``answers`` and a ``title`` or ``doc_id``): the fit needs no passage, as it labels
the hits it finds, not the question's own passage. Every question is searched twice: over the whole index (its gold article present) and
over the index without its gold article (answer absent, the case a calibrator must learn to doubt). The second is
``without_documents``: the same token vectors, an exact faiss index of the rest and a BM25 index rebuilt over the
rest's passages, so scores and BM25 statistics are those of an index built without the article. Each hit of the
served list (``FEATURE_DEPTH`` deep, default search options) gives one example: its features and whether it is
correct (``core.confidence.LABELS``). Two L2-regularised logistic regressions per unit and mode are fitted
(scikit-learn): whether a hit is correct, on the answer-present lists, and whether the answer is present, on the lists
of both conditions (as many of each); they are written as plain numbers to ``MODEL_DIR/calibration.json``
(atomically), and their product at the caller's share of unanswerable questions is a hit's confidence. Each list's first hit
weighs as much as the rest of its list together (``hit_weights``): the first hit's confidence is the one a caller
abstains on, and unweighted it would be one example in ten.

``--forms question keywords`` asks every question also as a search box's keywords (``core.query_form``: "What is
the Grotto at Notre Dame?" as "Grotto Notre Dame") and fits the keyword lists their own pair of models per unit and
mode (``"unit/mode/keywords"``), which a search uses for a query that reads as keywords: keyword queries find the
exact answer less often at the same scores, and BM25 passages more often.

Fit it over an index of many training articles (a hundred, not a handful): with its answer absent, a question
meets the distractors of the rest of the index, and in a small index those are too weak, so the calibrator learns
to trust answers that a larger corpus would beat.

``bench/confidence.py`` runs the same collection on the validation articles and reports the calibration.
"""

from __future__ import annotations

import copy
import logging
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.confidence import (
    CALIBRATION_NAME,
    FEATURE_DEPTH,
    FEATURES,
    KEYWORDS,
    Calibrator,
    LogisticModel,
    hit_features,
)
from spanseek.core.fieldindex import FieldIndex
from spanseek.core.hits import Hit
from spanseek.core.io import CorpusError, Question, atomic_path, check_overwrite
from spanseek.core.lexical import LexicalIndex, passage_text
from spanseek.core.metrics import exact_match, passage_has_answer
from spanseek.core.params import MODES, UNITS, SearchParams
from spanseek.core.phrase_index import PhraseIndex, given_index
from spanseek.core.query_form import QUERY_FORMS, QueryForm, in_form
from spanseek.core.search import Searcher
from spanseek.trainer.arguments import check, positive
from spanseek.trainer.calibration_examples import Ranked, check_examples_out, load_meta, load_runs, save_runs

log = logging.getLogger(__name__)
CONDITIONS = ("present", "absent")
# questions searched in one call: a flat scan holds a batch's token scores within its byte budget, where thousands
# of questions at once are scored again for every round and their spans read token by token (the 4,488 validation
# questions' first search took over ten minutes in one call on a 2-core CPU)
SEARCH_BATCH = 256


def without_documents(index: PhraseIndex, drop: Iterable[int]) -> PhraseIndex:
    """An in-memory copy of ``index`` without the documents ``drop`` (positions in ``index.docs``), as if built
    without them: token vectors are encoded passage by passage, so the rest's vectors are unchanged; the copy gets
    an exact (flat) faiss index of them, a BM25 index rebuilt over its passages, and the field index and deletion
    mask of its own documents (numbered as it numbers them)."""
    import faiss

    drop = set(drop)
    keep_docs = [d for d in range(len(index.docs)) if d not in drop]
    new_doc = {d: i for i, d in enumerate(keep_docs)}
    keep_p = [p for p, rec in enumerate(index.passages) if rec["doc"] in new_doc]
    pt = index.passage_tokens
    tokens = np.concatenate([np.arange(pt[p], pt[p + 1]) for p in keep_p]) if keep_p else np.zeros(0, np.int64)
    lengths = np.asarray([pt[p + 1] - pt[p] for p in keep_p], dtype=np.int64)
    sub = copy.copy(index)
    sub.vectors = np.asarray(index.vectors[tokens])
    sub.token_offsets = np.asarray(index.token_offsets[tokens])
    sub.token_flags = index.token_flags[tokens]
    sub.token_passage = np.repeat(np.arange(len(keep_p), dtype=np.int32), lengths)
    sub.passage_tokens = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    sub.passages = [{**index.passages[p], "doc": new_doc[index.passages[p]["doc"]]} for p in keep_p]
    sub.docs = [index.docs[d] for d in keep_docs]
    sub.deleted_docs = np.asarray([new_doc[d] for d in index.deleted_docs.tolist() if d in new_doc], np.int64)
    sub.fields = FieldIndex.build(sub.docs, sub.passages)
    sub.codes = None
    sub.vector_source = "fine"
    flat = faiss.IndexFlatIP(index.vectors.shape[1])
    flat.add(np.asarray(sub.vectors, dtype=np.float32))
    sub.faiss = flat
    if index.lexical is not None:
        sub.lexical = LexicalIndex.build([passage_text(sub.docs[r["doc"]]["title"], r["text"]) for r in sub.passages],
                                         index.lexical.analyzer)  # the analyzer of the index it is fitted for
    return sub


def is_correct(unit: str, hit: Hit, question: Question) -> bool:
    """Whether a hit answers the question (``core.confidence.LABELS``); a document hit is right when it is the
    question's document (``core.evaluate.is_gold_document``: by doc_id where the question has one, else by title)."""
    from spanseek.core.evaluate import is_gold_document

    if unit == "phrase":
        return bool(exact_match(hit.text, question.answers))
    if unit == "passage":
        return passage_has_answer(hit.passage, question.answers)
    return is_gold_document(hit, question)


def gold_key(question: Question) -> tuple[str, str]:
    """What names a question's document (``core.evaluate.document_key``; ("title", "") for one that names none)."""
    from spanseek.core.evaluate import document_key

    return document_key(question) or ("title", "")


def read_calibration_questions(path: str | Path, limit: int | None = None) -> list[Question]:
    """The questions of ``path`` (``core.questions.read_questions``: SQuAD, JSON Lines, CSV, TSV), a fixed sample of
    ``limit``; CorpusError for a file that cannot label hits: plain text (no answers), or a question that names no
    document (neither a title nor a doc_id: its document cannot be taken out of the index)."""
    from spanseek.core.evaluate import sample_questions
    from spanseek.core.questions import FORMAT_NAMES, read_questions

    qf = read_questions(path)
    if qf.format == "text":
        raise CorpusError(f"{path}: {FORMAT_NAMES[qf.format]}, one question a line without answers; calibrating "
                          "labels each hit by the question's answers and document: give SQuAD-format JSON, or JSON "
                          "Lines / CSV / TSV with answers and a title or doc_id")
    unnamed = next((n for n, q in zip(qf.lines, qf.questions, strict=True) if q.doc_id is None and not q.title), None)
    if unnamed is not None:
        raise CorpusError(f"{path}:{unnamed}: the question names no document (a title or doc_id); calibrating "
                          "searches each question also without its document, so every question must name it")
    return sample_questions(qf.questions, limit)


def questions_by_document(index: PhraseIndex, questions: Sequence[Question]) -> dict[int, list[int]]:
    """The questions (positions in ``questions``) of each document of ``index`` (a position in ``index.docs``) that
    is some question's document (``gold_key``: by doc_id where the question has one, else by title)."""
    doc_of = {("title", d["title"]): i for i, d in enumerate(index.docs)}
    if any(q.doc_id is not None for q in questions):
        doc_of.update({("id", str(d["id"])): i for i, d in enumerate(index.docs)})
    by_doc: dict[int, list[int]] = {}
    for i, q in enumerate(questions):
        if gold_key(q) in doc_of:
            by_doc.setdefault(doc_of[gold_key(q)], []).append(i)
    return by_doc


def collect(
    index: PhraseIndex, questions: Sequence[Question], q_start: np.ndarray, q_end: np.ndarray,
    units: Sequence[str] = UNITS, modes: Sequence[str] = MODES, calibrator: Calibrator | None = None,
    progress: bool = True,
) -> dict[tuple[str, str, str], list[Ranked]]:
    """Search every question with its gold document present and absent; per (unit, mode, condition) its ranked
    hits' features and labels. Questions whose document (``gold_key``) is not in the index are skipped (with a warning)."""
    by_doc = questions_by_document(index, questions)
    skipped = len(questions) - sum(map(len, by_doc.values()))
    if skipped:
        log.warning("%d questions have a gold document that is not in the index; skipped", skipped)
    if index.lexical is None:
        modes = [m for m in modes if m == "dense"]
    out: dict[tuple[str, str, str], list[Ranked]] = {}
    full = Searcher(index, calibrator=calibrator)
    jobs = [("present", full, sorted(i for rows in by_doc.values() for i in rows))]
    jobs += [("absent", None, rows) for rows in by_doc.values()]
    docs = iter(by_doc)
    for condition, searcher, rows in tqdm(jobs, desc="searching", disable=not progress):
        if searcher is None:
            searcher = Searcher(without_documents(index, [next(docs)]), calibrator=calibrator)
        for unit in units:
            for mode in modes:
                params = SearchParams(unit=unit, mode=mode, top_k=FEATURE_DEPTH[unit])  # type: ignore[arg-type]
                hits = [h for a in range(0, len(rows), SEARCH_BATCH) for h in searcher.search_vectors(
                    q_start[rows[a : a + SEARCH_BATCH]], q_end[rows[a : a + SEARCH_BATCH]], params, None,
                    [questions[i].question for i in rows[a : a + SEARCH_BATCH]])]
                for i, h in zip(rows, hits, strict=True):
                    feats = hit_features(unit, [x.score for x in h], [x.dense for x in h], [x.lexical for x in h],
                                         [x.text for x in h])
                    labels = np.asarray([is_correct(unit, x, questions[i]) for x in h], dtype=bool)
                    conf = None if calibrator is None or not h or h[0].confidence is None else np.asarray(
                        [x.confidence for x in h])
                    out.setdefault((unit, mode, condition), []).append(Ranked(i, feats, labels, conf))
    return out


def hit_weights(lengths: Sequence[int]) -> np.ndarray:
    """Example weights of ranked lists of these lengths, concatenated: a list's first hit weighs as much as the rest
    of its list together (``n - 1``, at least 1), every other hit 1."""
    return np.concatenate([np.r_[max(n - 1, 1), np.ones(n - 1)] for n in lengths if n]) if any(lengths) \
        else np.zeros(0)


def fit_logistic(x: np.ndarray, y: np.ndarray, c: float = 1.0, features: Sequence[str] = FEATURES,
                 weight: np.ndarray | None = None, known: Sequence[str] = FEATURES) -> LogisticModel:
    """An L2-regularised logistic regression on standardised features (scikit-learn), as plain numbers, with
    optional example weights; ``x``'s columns are ``known``, and those not in ``features`` get weight 0."""
    from sklearn.linear_model import LogisticRegression

    unknown = set(features) - set(known)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {', '.join(known)}")
    use = np.asarray([f in features for f in known])
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a constant feature (no lexical leg) contributes nothing
    lr = LogisticRegression(C=c, max_iter=1000).fit(((x - mean) / scale)[:, use], y, sample_weight=weight)
    coef = np.zeros(len(known))
    coef[use] = lr.coef_[0]
    return LogisticModel(tuple(map(float, mean)), tuple(map(float, scale)), tuple(map(float, coef)),
                         float(lr.intercept_[0]))


def _examples(runs: dict[tuple[str, str, str], list[Ranked]], unit: str, mode: str,
              conditions: Sequence[str] = ("present",)) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels, question and weight (``hit_weights``) of every hit of one unit/mode under ``conditions``;
    the labels are whether the hit is correct, or with both conditions, whether its list had the answer present."""
    ranked = [(cond, r) for cond in conditions for r in runs.get((unit, mode, cond), [])]
    lengths = [len(r.labels) for _, r in ranked]
    x = np.concatenate([r.features for _, r in ranked])
    if len(conditions) == 1:
        y = np.concatenate([r.labels for _, r in ranked])
    else:
        y = np.repeat([cond == "present" for cond, _ in ranked], lengths)
    q = np.repeat([r.question for _, r in ranked], lengths)
    return x, y, q, hit_weights(lengths)


def grouped_folds(groups: Sequence[str], k: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) positions of ``k`` folds in which every group (an article's title) lies in one test fold only,
    so a held-out score measures the fit on articles it has not seen (scikit-learn GroupKFold; fewer folds when
    there are fewer groups)."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    if n_groups < 2:
        raise ValueError(f"grouped cross-validation needs at least 2 articles, got {n_groups}")
    splitter = GroupKFold(n_splits=min(k, n_groups))
    return list(splitter.split(np.zeros(len(groups)), groups=np.asarray(groups)))


def choose_c(runs: dict[tuple[str, str, str], list[Ranked]], groups: Sequence[str], cs: Sequence[float], k: int = 5,
             features: Sequence[str] = FEATURES) -> dict[str, dict[str, Any]]:
    """Per unit/mode, the C of ``cs`` with the lowest held-out log loss (weighted as the fit is) when the examples are
    split by article (``groups[question]``: every hit of an article's questions lies in one fold) and the loss of
    each C."""
    from sklearn.metrics import log_loss

    out: dict[str, dict[str, Any]] = {}
    for unit, mode in sorted({(u, m) for u, m, _ in runs}):
        x, y, q, w = _examples(runs, unit, mode)
        if y.all() or not y.any():
            continue
        hit_groups = [groups[i] for i in q]
        losses = {}
        for c in cs:
            pred = np.empty(len(y))
            for train, test in grouped_folds(hit_groups, k):
                pred[test] = fit_logistic(x[train], y[train], c, features, w[train]).predict(x[test]) \
                    if 0 < y[train].sum() < len(train) else y[train].mean()
            losses[c] = float(log_loss(y, np.clip(pred, 1e-6, 1 - 1e-6), labels=[False, True], sample_weight=w))
        best = min(losses, key=lambda c: (losses[c], c))
        out[f"{unit}/{mode}"] = {"C": best, "cv_log_loss": {str(c): round(v, 5) for c, v in losses.items()}}
    return out


def fit_calibrator(runs: dict[tuple[str, str, str], list[Ranked]], fingerprint: str, fitted_on: dict[str, Any],
                   c: float | Mapping[str, float] = 1.0, features: Sequence[str] = FEATURES) -> Calibrator:
    """Per unit/mode, the correctness model over the hits of the answer-present lists and the presence model over
    the hits of both conditions (labelled by their list's condition); ``c`` one C for all or one per
    ``"unit/mode"`` (``choose_c``)."""
    models, present = {}, {}
    for unit, mode in sorted({(u, m) for u, m, _ in runs}):
        key = f"{unit}/{mode}"
        x, y, _, w = _examples(runs, unit, mode)
        if y.all() or not y.any():
            log.warning("%s: every hit is %s; no model fitted", key, "correct" if y.all() else "wrong")
            continue
        models[key] = fit_logistic(x, y, c[key] if isinstance(c, Mapping) else c, features, w)
        if (unit, mode, "absent") in runs:
            x, y, _, w = _examples(runs, unit, mode, CONDITIONS)
            present[key] = fit_logistic(x, y, c[key] if isinstance(c, Mapping) else c, features, w)
    return Calibrator(models, fingerprint, {**fitted_on, "examples": {
        f"{u}/{m}/{cond}": sum(len(r.labels) for r in rs) for (u, m, cond), rs in sorted(runs.items())}}, present)


def split_keyword_runs(runs: dict[tuple[str, str, str], list[Ranked]], forms: Sequence[str], n_questions: int
                       ) -> dict[tuple[str, str, str], list[Ranked]]:
    """The lists of the questions asked in a keyword form (any but ``question``; form ``k``'s questions lie at
    positions ``k * n_questions`` onwards) under mode ``"MODE/keywords"``: ``fit_calibrator`` then fits them the
    models that judge keyword queries (``core.confidence.model_key``), and the questions theirs."""
    if all(form == "question" for form in forms):
        return runs
    out: dict[tuple[str, str, str], list[Ranked]] = {}
    for (unit, mode, cond), ranked in runs.items():
        for r in ranked:
            keywords = forms[r.question // n_questions] != "question"
            out.setdefault((unit, f"{mode}/{KEYWORDS}" if keywords else mode, cond), []).append(r)
    return out


def encode_questions(searcher: Searcher, questions: Sequence[Question], batch: int = 64,
                     cache: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(Q, d) q_start and q_end of every question, encoded once (read from / written to the npz ``cache``)."""
    if cache is not None and Path(cache).is_file():
        try:
            z = np.load(cache)  # allow_pickle stays off
            if not isinstance(z, np.lib.npyio.NpzFile) or not {"q_start", "q_end"} <= set(z.files):
                raise ValueError(cache)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile):
            raise CorpusError(f"{cache}: not a cache of encoded questions (the .npz of q_start and q_end that "
                              "--cache writes); delete it or name a new file") from None
        if len(z["q_start"]) != len(questions):
            raise ValueError(f"{cache} holds {len(z['q_start'])} encoded questions, not {len(questions)}; delete it")
        return z["q_start"], z["q_end"]
    parts = [searcher.encoder.encode([q.question for q in questions[i : i + batch]])
             for i in tqdm(range(0, len(questions), batch), desc="encoding questions", leave=False)]
    q_start, q_end = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    if cache is not None:
        with atomic_path(cache) as tmp, open(tmp, "wb") as f:
            np.savez(f, q_start=q_start, q_end=q_end)
    return q_start, q_end


def with_keyword_models(base: Calibrator, fit: Calibrator, where: str = "--add-to") -> Calibrator:
    """``base`` with the keyword queries' models of ``fit`` added (``"unit/mode/keywords"``, replacing base's own of
    those keys): base's other models stay as they are, and what the keyword models were fitted on is recorded under
    ``fitted_on["keywords"]``. Refused (ValueError naming ``where``) when the fit has no keyword models, or was made
    for another model or, in hybrid mode, under another fusion (base's decides whether a model applies)."""
    keys = [k for k in fit.models if k.endswith(f"/{KEYWORDS}")]
    if not keys:
        raise ValueError(f"--add-to {where}: adds the models of keyword queries, and this fit has none "
                         "(fit them with --forms question keywords)")
    if base.model_fingerprint != fit.model_fingerprint:
        raise ValueError(f"--add-to {where}: fitted for another model (fingerprint {base.model_fingerprint[:12]}, "
                         f"this model's {fit.model_fingerprint[:12]})")
    if any(k.split("/")[1] == "hybrid" for k in keys) and base.fitted_on.get("fusion") != fit.fitted_on.get("fusion"):
        raise ValueError(f"--add-to {where}: fitted under the fusion {base.fitted_on.get('fusion')}, this fit under "
                         f"{fit.fitted_on.get('fusion')} (hybrid scores move with it)")
    return replace(base, models={**base.models, **{k: fit.models[k] for k in keys}},
                   present={**base.present, **{k: fit.present[k] for k in keys if k in fit.present}},
                   fitted_on={**base.fitted_on, KEYWORDS: {**fit.fitted_on, "models": keys}})


def calibrate(index_dir: str | Path | None, questions_path: str | Path | None, model: str, out: str | Path | None = None,
              units: Sequence[str] = UNITS, modes: Sequence[str] = MODES, c: float | Sequence[float] = 1.0,
              limit: int | None = None, cache: str | Path | None = None,
              examples: str | Path | None = None, features: Sequence[str] = FEATURES,
              from_examples: str | Path | None = None, forms: Sequence[QueryForm] = ("question",),
              add_to: str | Path | None = None) -> Calibrator:
    """Fit and write the model's calibrator (default ``MODEL_DIR/calibration.json``); returns it. ``from_examples``
    refits on the examples an earlier run wrote (``examples``) instead of searching again (``questions_path`` and
    ``limit`` must then be the ones it searched, to know each question's article). Several ``c`` values: each
    unit/mode gets the one with the best held-out log loss across articles (``choose_c``, 5 grouped folds).
    ``forms``: every question is asked in each of these forms (``core.query_form``: as it is, as keywords, ...);
    the keyword forms' lists fit the models of keyword queries (``split_keyword_runs``), the questions' the rest
    (examples record their forms; a refit reads them from there). ``add_to``: a calibration file whose models are
    kept as they are, with this fit's keyword models added (``with_keyword_models``), written instead of the fit."""
    from spanseek.core.loading import open_searcher
    from spanseek.core.model import BUNDLED_MODELS, given_model, model_fingerprint, resolve_model
    cs = [float(c)] if isinstance(c, (int, float)) else [float(v) for v in c]
    check(bool(cs) and all(map(positive, cs)), "--C", "numbers > 0 (inverse L2 strengths)", cs)
    check(limit is None or limit >= 1, "--limit", "an integer >= 1 (leave it out to use every question)", limit)
    for flag, path in (("--out", out), ("--examples", examples), ("--cache", cache)):  # found before the searches
        check(path is None or not Path(path).is_dir(), flag, "a file to write, not a directory", path)
    check_overwrite("--out", out, "model_fingerprint", "a calibration file")  # (a question file was replaced)
    check_examples_out(examples)
    if index_dir is not None:  # cheap: named before the model is found
        given_index(index_dir, "--index")
    for flag, path in (("--questions", questions_path), ("--from-examples", from_examples), ("--add-to", add_to)):
        check(path is None or (Path(path).exists() and not Path(path).is_dir()), flag, "a file that exists", path)
    given_model(model, "--model")
    model_dir = resolve_model(model)
    bundled = {path.resolve() for path in BUNDLED_MODELS.values()}
    if out is None and model_dir.resolve() in bundled:  # its file is the installed package's: every search reads it
        raise ValueError(f"--model {model} is a bundled model, whose calibration.json the installed package serves: "
                         "copy its directory and calibrate the copy (--model COPY), or write the fit elsewhere (--out)")
    check("question" in forms and set(forms) <= set(QUERY_FORMS), "--forms",
          f"forms among {', '.join(QUERY_FORMS)}, question one of them (the models every query falls back on)", forms)
    forms = list(dict.fromkeys(forms))
    base = None if add_to is None else Calibrator.load(add_to)  # read now: a damaged file is named before any search
    questions: list[Question] = []
    if from_examples is not None:
        fitted_on: dict[str, Any] = {**load_meta(from_examples), "examples_file": Path(from_examples).name}
        forms = fitted_on.get("forms", ["question"])  # what the examples were searched as
    if from_examples is not None and len(cs) > 1:
        if questions_path is None:
            raise ValueError("choosing C across articles needs --questions (the file the examples were searched for)")
        questions = [q for form in forms for q in in_form(read_calibration_questions(questions_path, limit), form)]
    if from_examples is not None:
        runs = load_runs(from_examples)
    elif index_dir is None or questions_path is None:
        raise ValueError("calibrating needs an index and its questions (or examples written by an earlier run)")
    else:
        sample = read_calibration_questions(questions_path, limit)  # a bad line is named before the model loads
        if not sample:
            raise CorpusError(f"{questions_path}: no questions to calibrate on")
        searcher = open_searcher(index_dir, model, calibrated=False)  # the file it replaces may be damaged
        if not questions_by_document(searcher.index, sample):  # named before the questions are encoded
            kind, name = gold_key(sample[0])
            raise CorpusError(f"{questions_path}: none of its {len(sample)} questions' documents is in --index "
                              f"{index_dir} (by {'doc_id' if kind == 'id' else 'title'}: the first names {name!r}); "
                              "calibrate over an index of the questions' own articles")
        questions = [q for form in forms for q in in_form(sample, form)]  # each form's questions in turn
        q_start, q_end = encode_questions(searcher, questions, cache=cache)
        runs = collect(searcher.index, questions, q_start, q_end, units, modes)
        fusion = searcher.index.fusion_defaults  # hybrid scores depend on it: the calibrator applies under it only
        fitted_on = {"index": str(Path(index_dir).name), "questions": str(Path(questions_path).name),
                     "n_questions": len(sample), "forms": forms, "documents": len(searcher.index.docs),
                     "fusion": {"fusion": fusion["fusion"], "weights": fusion["weights"],
                                "phrase_rerank": fusion.get("phrase_rerank")}}
        if examples is not None:
            save_runs(runs, examples, fitted_on)
    runs = split_keyword_runs(runs, forms, int(fitted_on.get("n_questions") or 0))
    chosen: float | dict[str, float] = cs[0]
    if len(cs) > 1:
        cv = choose_c(runs, [str(gold_key(q)) for q in questions], cs, features=features)
        chosen = {key: r["C"] for key, r in cv.items()}
        fitted_on["grouped_cv"] = {"folds": 5, "by": "article", "loss": "log loss", "by_unit_mode": cv}
    fitted_on.update({"absent": "each question also searched over the index without its gold document: the "
                                "presence model's examples", "C": chosen,
                      "features": [f for f in FEATURES if f in features],
                      "weights": "each list's first hit weighs as much as the rest of its list"})
    calibrator = fit_calibrator(runs, model_fingerprint(model_dir), fitted_on, chosen, features)
    if base is not None and calibrator.models:
        calibrator = with_keyword_models(base, calibrator, str(add_to))
    if not calibrator.models:  # nothing written: the model's calibrator, if it has one, is kept
        raise ValueError(f"no hits to fit on: none of the {len(questions)} questions found its gold document in the "
                         "index (calibrate over an index of the questions' own articles)" if questions else
                         f"{from_examples}: no examples to fit on")
    calibrator.save(out or model_dir / CALIBRATION_NAME)
    return calibrator


__all__ = ["CONDITIONS", "Ranked", "calibrate", "check_examples_out", "choose_c", "collect", "encode_questions",
           "fit_calibrator", "fit_logistic", "gold_key", "grouped_folds", "hit_weights", "is_correct", "load_meta",
           "load_runs", "questions_by_document", "read_calibration_questions", "save_runs", "split_keyword_runs",
           "with_keyword_models", "without_documents"]
