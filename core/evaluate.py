"""Open-domain and reading-comprehension evaluation of a Searcher on questions with answers (``core.questions``).

Writes the metrics dict that ``spanseek eval`` saves (percentages rounded to 0.1):
``{"n_questions", "mode", "read", "phrase": {"em@1", "f1@1", "em@10", "merged_em@1"}, "passage": {"acc@1", "acc@5", "acc@20", "mrr@20", "p@20"},
"doc": {"acc@1", "acc@5"}, "rc": {"em", "f1"} (reading comprehension only), "ci95", "seconds", "questions_per_second"}``
(``doc`` only when questions name their document: a SQuAD article's title, or an open-domain file's title or doc_id;
over those questions only, with their count in ``doc.questions`` when others name none),
and ``unanswerable_skipped`` when questions without a gold answer (SQuAD v2's) were left out: nothing could match
them, so every metric would count them wrong. ``spanseek eval`` leaves them out before ``--limit`` samples its
questions, so N questions with an answer are evaluated and every unanswerable one of the file is counted.

``ci95`` holds 95% intervals of the headline metrics (phrase EM@1, passage acc@5, RC EM), from a bootstrap over
articles (each question's document: its doc_id where the file gives one, else its title; over questions when there
are fewer than ``MIN_ARTICLES_FOR_CLUSTERS``), and says which it used.

A model that ``spanseek train`` wrote records the questions it was trained on (``TRAINED_QUESTIONS``: a short hash
of each one's words); questions with the same words are counted in ``trained_questions`` with a warning, as its
scores on them overstate what it does on new questions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.dense import RC_DECODES
from spanseek.core.ids import new_id
from spanseek.core.io import Question, write_json_atomic
from spanseek.core.metrics import (
    accuracy_at,
    cluster_bootstrap_ci,
    exact_match,
    f1_score,
    mrr_at,
    passage_has_answer,
    pct,
    precision_at,
)
from spanseek.core.params import Hit, SearchParams
from spanseek.core.search import Searcher

log = logging.getLogger(__name__)

MIN_ARTICLES_FOR_CLUSTERS = 5
TRAINED_QUESTIONS = "trained_questions.json"  # in a model directory: the questions it was trained on, hashed


def question_key(text: str) -> str:
    """A question's entry in a model's ``TRAINED_QUESTIONS``: 12 hex digits of the SHA-1 of its words, case folded
    (the same question with other spacing or case has the same key)."""
    return hashlib.sha1(" ".join(text.split()).casefold().encode("utf-8")).hexdigest()[:12]


def write_trained_questions(model_dir: str | Path, questions: Iterable[str], source: str,
                            examples: str = "") -> None:
    """Record in ``model_dir`` the questions a model was trained on (``source``: the training file), and a digest
    of its training examples (``examples``: what a resumed run must train on again). ``questions`` counts them as the
    run's summary does (``train_questions``), each one trained on; ``keys`` holds each distinct text once (SQuAD's
    training file asks 259 of its texts more than once: 87,599 questions, 87,311 texts), ``distinct`` how many."""
    questions = list(questions)
    keys = sorted({question_key(q) for q in questions})
    write_json_atomic(Path(model_dir) / TRAINED_QUESTIONS, {"source": source, "examples": examples,
                                                            "questions": len(questions), "distinct": len(keys),
                                                            "keys": keys})


def trained_questions(model_dir: str | Path | None) -> dict[str, Any] | None:
    """A model directory's record of its training questions (``write_trained_questions``; ``keys`` as a set), or
    None: a bundled model, a model written before the record was kept, or a record that cannot be read (logged)."""
    if model_dir is None or not (path := Path(model_dir) / TRAINED_QUESTIONS).is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        record["keys"] = set(record["keys"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("%s: cannot be read (%s); questions it was trained on are not counted", path, e)
        return None
    return record


def count_trained(model_dir: str | Path | None, questions: list[Question]) -> int:
    """How many of ``questions`` have the words of a question the model in ``model_dir`` was trained on, warning
    when there are any."""
    record = trained_questions(model_dir)
    if record is None:
        return 0
    trained = sum(question_key(q.question) in record["keys"] for q in questions)
    if trained:
        log.warning("%d of %d questions have the words of questions %s was trained on (from %s): its scores on them "
                    "overstate what it does on new questions; evaluate on questions it was not trained on (a "
                    "training run writes its held-out ones to OUT/validation.json.gz)", trained, len(questions),
                    model_dir, record.get("source") or "its training file")
    return trained


def document_key(question: Question) -> tuple[str, str] | None:
    """What names a question's document: its doc_id where it has one, else its title (``is_gold_document``); None
    when it names neither (an open-domain question without a title or doc_id)."""
    if question.doc_id is not None:
        return ("id", question.doc_id)
    return ("title", question.title) if question.title else None


def document_groups(questions: list[Question]) -> list[str]:
    """Each question's group when an interval resamples articles (questions of one document move together): its
    document (``document_key``: "id:D", else "title:T"), or, naming neither, itself alone ("question I"). What
    ``spanseek eval`` and the paired benchmarks (bench/paired_models.py, bench/paired_accuracy.py) resample by."""
    # "title:T" keeps the titles' order, and with it the draws, of the resampling by title alone
    return [f"{k[0]}:{k[1]}" if (k := document_key(q)) is not None else f"question {i}"
            for i, q in enumerate(questions)]


def confidence_intervals(questions: list[Question], per_question: dict[str, list[float]]) -> dict[str, Any]:
    """95% bootstrap intervals of each per-question metric, resampling articles (each question's document:
    ``document_key``) when there are enough of them; a question that names no document is a group of its own."""
    by_article = len({k for q in questions if (k := document_key(q)) is not None}) >= MIN_ARTICLES_FOR_CLUSTERS
    groups = document_groups(questions) if by_article else [f"question {i}" for i in range(len(questions))]
    out: dict[str, Any] = {"by": "article" if by_article else "question", "groups": len(set(groups))}
    for name, values in per_question.items():
        out[name] = list(cluster_bootstrap_ci(values, groups))
    return out


def sample_questions(questions: list[Question], limit: int | None, seed: int = 13) -> list[Question]:
    """A fixed random sample of ``limit`` questions (all of them when limit is None)."""
    if limit is None or limit >= len(questions):
        return questions
    return random.Random(seed).sample(questions, limit)


def drop_unanswerable(questions: list[Question]) -> tuple[list[Question], int]:
    """The questions with a gold answer, and how many had none (SQuAD v2's unanswerable ones, logged)."""
    answerable = [q for q in questions if q.answers]
    unanswerable = len(questions) - len(answerable)
    if unanswerable:
        log.warning("%d of %d questions have no gold answer (SQuAD v2's unanswerable ones); they are not evaluated",
                    unanswerable, len(questions))
    return answerable, unanswerable


def answer_scores(prediction: str | None, answers: tuple[str, ...]) -> tuple[float, float]:
    """Exact match and F1 of a prediction (SQuAD's); both 0 without one (no hit): an answer that normalises to
    nothing ("The The") equals the empty string, but a search that found nothing has not answered."""
    if prediction is None:
        return 0.0, 0.0
    return exact_match(prediction, answers), f1_score(prediction, answers)


def passage_lookup(searcher: Searcher) -> dict[tuple[str, str], int]:
    """(document title, passage text) -> passage id, to find a question's gold passage in an index."""
    idx = searcher.index
    return {(idx.docs[p["doc"]]["title"], p["text"]): i for i, p in enumerate(idx.passages)}


def gold_passages(searcher: Searcher, questions: list[Question]) -> list[int]:
    """Each question's gold passage in the index (reading comprehension answers from it), found before anything is
    searched; ValueError naming how many the index lacks, the first one's id and article, and what to do."""
    lookup = passage_lookup(searcher)
    found = [lookup.get((q.title, q.context), -1) for q in questions]
    missing = [q for q, pid in zip(questions, found, strict=True) if pid < 0]
    if missing:
        q = missing[0]
        raise ValueError(f"question {q.id}: its gold passage is not in the index ({len(missing)} of {len(questions)} "
                         f"questions' passages are not, the first of article {q.title!r}); reading comprehension "
                         "answers from each question's own paragraph, so evaluate it on an index that holds the "
                         "question file's paragraphs (without --index, eval indexes them), or leave "
                         "--reading-comprehension out")
    return found


def is_gold_document(hit: Hit, question: Question) -> bool:
    """Whether a document hit is the question's document: the same corpus id where the question names one (an
    open-domain question file's ``doc_id``, in either Unicode spelling: ``core.ids``), else the same title (a SQuAD
    article's)."""
    if question.doc_id is None:
        return hit.title == question.title
    return new_id(hit.doc_id) == new_id(question.doc_id)


def _not_in_index(searcher: Searcher, questions: list[Question]) -> int:
    """How many questions' documents (by id or title) the index does not hold, warning when there are any: document
    accuracy counts them wrong."""
    titles = {d["title"] for d in searcher.index.docs}
    ids = {new_id(str(d["id"])) for d in searcher.index.docs} if any(q.doc_id is not None for q in questions) else set()
    missing = [q for q in questions if (new_id(q.doc_id) not in ids if q.doc_id is not None else q.title not in titles)]
    if missing:
        q = missing[0]
        what = f"doc_ids (e.g. {q.doc_id!r}) are no document id" if q.doc_id is not None else \
            f"articles (e.g. {q.title!r}) are no document title"
        log.warning("%d of %d questions' %s of the index: document accuracy counts them wrong (documents are matched "
                    "by the question's doc_id where it has one, else by title; build the index with `corpus "
                    "from-squad` of the same file to measure it)", len(missing), len(questions), what)
    return len(missing)


def evaluate(
    searcher: Searcher,
    questions: list[Question],
    reading_comprehension: bool = False,
    batch_size: int = 64,
    progress: bool = True,
    rc_decode: str = "answer",
    params: SearchParams | None = None,
    per_question: bool = False,
    unanswerable_skipped: int = 0,
) -> dict[str, Any]:
    """Run every question through phrase, passage and document search (and RC, decoded by ``rc_decode``: see
    ``Searcher.passage_best_span``) and compute the metrics; with ``per_question``, also each question's headline
    values and article (``per_question``), for paired comparisons of two models on the same questions.

    ``params`` gives the search settings (mode, fusion, nprobe, vector source, ...); unit, top_k and merge_answers
    are set per metric. The metrics record the mode used. Questions without an answer are left out and counted in
    ``unanswerable_skipped``, with the ``unanswerable_skipped`` the caller left out before (``drop_unanswerable``).
    """
    questions, unanswerable = drop_unanswerable(questions)
    unanswerable += unanswerable_skipped
    if not questions:  # the means below would be NaN, which is not even valid JSON
        raise ValueError("no questions to evaluate (an empty question file, --limit 0, or no question with an "
                         "answer)")
    if rc_decode not in RC_DECODES:
        raise ValueError(f"rc_decode must be one of {RC_DECODES}, got {rc_decode!r}")
    trained = count_trained(getattr(getattr(searcher.encoder, "model", None), "source", None), questions)
    # a document hit is right when it is the question's document: by corpus id where the question file names one,
    # else by title (the SQuAD article's); questions that name neither (open-domain lists) have no document metric
    named = [q for q in questions if document_key(q) is not None]  # a question that names none is not counted
    with_doc = bool(named)
    if with_doc:
        untitled = _not_in_index(searcher, named)
    else:
        untitled = 0
        log.info("no question names its document (a title or doc_id): document accuracy is not measured")
    t0 = time.perf_counter()
    em1, f11, em10, em1_merged, pas, docs, rc_em, rc_f1 = [], [], [], [], [], [], [], []
    base = params or SearchParams()
    # with read, reading comprehension is the reader's: its best span of the gold passage (each question's context)
    reading = searcher.reading if reading_comprehension and base.read else None
    gold = gold_passages(searcher, questions) if reading_comprehension and reading is None else []
    # each run takes the parameters that rank its unit: fusion ranks passages and documents, a lexical weight the
    # phrases and the score fusion of the others (``check_fusion`` refuses what would rank nothing)
    rrf = (base.fusion or getattr(searcher, "default_fusion", "score")) == "rrf"
    runs = {name: dataclasses.replace(
        base, unit=unit, top_k=k, merge_answers=merge, fusion=None if unit == "phrase" else base.fusion,
        lexical_weight=base.lexical_weight if unit == "phrase" or not rrf else None)
        for name, unit, k, merge in (("phrases", "phrase", 10, False), ("merged", "phrase", 1, True),
                                     ("passages", "passage", 20, False), ("documents", "doc", 5, False))}
    mode = [searcher.check_mode(p) for p in runs.values()][0]
    bar = tqdm(total=len(questions), desc="eval", unit="q", disable=not progress)
    for b in range(0, len(questions), batch_size):
        batch = questions[b : b + batch_size]
        texts = [q.question for q in batch]
        q_start, q_end = searcher.encoder.encode(texts)
        phrases, merged, passages, documents = (searcher.search_vectors(q_start, q_end, p, None, texts)
                                                for p in runs.values())
        read_rc = None
        if reading is not None:
            read_rc = [found[0].text if found else None for found in
                       reading.reader.read(texts, [q.context for q in batch], decode=rc_decode)]
        for i, q in enumerate(batch):
            em, f1 = answer_scores(phrases[i][0].text if phrases[i] else None, q.answers)
            em1.append(em)
            f11.append(f1)
            em10.append(float(any(exact_match(h.text, q.answers) for h in phrases[i][:10])))
            em1_merged.append(answer_scores(merged[i][0].text if merged[i] else None, q.answers)[0])
            pas.append([passage_has_answer(h.passage, q.answers) for h in passages[i]])
            if document_key(q) is not None:
                docs.append([is_gold_document(h, q) for h in documents[i]])
            if reading_comprehension:
                if read_rc is not None:
                    answer = read_rc[i]
                else:
                    answer = searcher.passage_best_span(gold[b + i], q_start[i], q_end[i], decode=rc_decode).text
                em, f1 = answer_scores(answer, q.answers)
                rc_em.append(em)
                rc_f1.append(f1)
        bar.update(len(batch))
    bar.close()
    seconds = time.perf_counter() - t0
    n = len(questions)
    out: dict[str, Any] = {
        "n_questions": n,
        "mode": mode,
        "read": base.read,
        "phrase": {"em@1": pct(float(np.mean(em1))), "f1@1": pct(float(np.mean(f11))), "em@10": pct(float(np.mean(em10))),
                   "merged_em@1": pct(float(np.mean(em1_merged)))},
        "passage": {
            "acc@1": pct(accuracy_at(pas, 1)),
            "acc@5": pct(accuracy_at(pas, 5)),
            "acc@20": pct(accuracy_at(pas, 20)),
            "mrr@20": pct(mrr_at(pas, 20)),
            "p@20": pct(precision_at(pas, 20)),
        },
    }
    if with_doc:
        out["doc"] = {"acc@1": pct(accuracy_at(docs, 1)), "acc@5": pct(accuracy_at(docs, 5))}
        if len(named) < n:  # over the questions that name their document only
            out["doc"]["questions"] = len(named)
    if reading_comprehension:
        out["rc"] = {"em": pct(float(np.mean(rc_em))), "f1": pct(float(np.mean(rc_f1)))}
    headline = {"phrase.em@1": em1, "passage.acc@5": [float(any(c[:5])) for c in pas]}
    if reading_comprehension:
        headline["rc.em"] = rc_em
    out["ci95"] = confidence_intervals(questions, headline)
    if per_question:
        out["per_question"] = {"id": [q.id for q in questions], "title": [q.title for q in questions],
                               "document": document_groups(questions), **headline}
    if unanswerable:
        out["unanswerable_skipped"] = unanswerable
    if untitled:
        out["doc"]["articles_not_in_index"] = untitled
    if trained:
        out["trained_questions"] = trained
    out["seconds"] = round(seconds, 3)
    out["questions_per_second"] = round(n / seconds, 1) if seconds > 0 else 0.0
    return out
