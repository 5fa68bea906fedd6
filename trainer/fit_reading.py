"""Fitting reading at search time (core.reading): how read spans combine with retrieval, and how many passages to read.

    spanseek train fit-reading --train ../shared/data/squad-v1.1-train.json.gz --reader runs/reader/last \
        --out runs/reader/last

The questions come from training articles that the reader never trained on (``spanseek train reader`` keeps the
articles of ``--reserve-offset`` out) and that no evaluation uses; they are searched over an index of those
articles' paragraphs with the phrase model, each question's top passages (and top documents' best passages) are
read once at the deepest ``--read-passages``, and for each depth a logistic model per unit is fitted on the read
candidates' ``READ_FEATURES`` (labels: the span is an exact answer; the passage holds an answer; the document is the
question's article). The default depth is the fewest passages whose phrase EM@1 comes within ``--tolerance`` of the
best depth's. ``OUT/reading.json`` records the models of every depth (a request reading another number of passages
is scored by that depth's), the default depth and what they were fitted on.

``--absent-questions N`` reads N questions of other training articles (neither the fit's nor held out) over the same
index as well, every span read for them labelled wrong: the fit's own questions are retrieved almost always right,
so without them the models never see retrieval that found nothing, and read a question the index cannot answer as
confidently as one it can. The models are fitted on both; each unit's first-hit calibration on the answerable
questions alone, so that a confidence at ``unanswerable_prior`` 0 still assumes the answer is in the index.
``--reads FILE`` keeps the reads (gzipped JSON, never a pickle: a file named on the command line is read as data,
not run as code), and a rerun with the same questions and reading settings fits from them without reading again.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.encoding import pick_device
from spanseek.core.evaluate import sample_questions
from spanseek.core.holdout import Holdout
from spanseek.core.io import (
    Question,
    atomic_path,
    other_files,
    squad_documents,
    squad_questions,
    write_corpus,
)
from spanseek.core.loading import open_searcher
from spanseek.core.metrics import calibration_error, exact_match, passage_has_answer
from spanseek.core.model import resolve_model
from spanseek.core.params import HIT_FIELDS, Hit, SearchParams
from spanseek.core.reader import READER_CONFIG_NAME, PassageReader, ReadSpan, resolve_reader
from spanseek.core.reading import (
    READ_FEATURES,
    READING_NAME,
    Candidate,
    Reading,
    ReadingStage,
    judge_search,
    known,
    read_features,
)
from spanseek.trainer.arguments import FitReadingConfig
from spanseek.trainer.calibrate import fit_logistic
from spanseek.trainer.data import load_training, reserved_articles_hint


@dataclasses.dataclass
class Read:
    """One question's read candidates per unit (phrase and passage share the passages read)."""

    question: Question
    candidates: dict[str, list[Candidate]]
    sources: dict[str, list]
    retrieval: dict[str, float | None]  # per unit, the calibrator's log-odds of the first unit read (``judge``)
    absent: bool = False  # its article is not in the index: whatever is read is wrong


def label(unit: str, c: Candidate, q: Question) -> float:
    """Whether a read candidate is right for its unit."""
    if unit == "phrase":
        return exact_match(c.span.text, q.answers)
    if unit == "passage":
        return float(passage_has_answer(c.source.passage, q.answers))
    return float(c.source.title == q.title)


def examples(reads: list[Read], unit: str, depth: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Features and labels of the candidates read at ``depth`` (phrase: every span; passage and doc: each unit's
    best span by reader score), and each question's number of candidates."""
    xs, ys, sizes = [], [], []
    for r in reads:
        cands = [c for c in r.candidates[unit] if c.rank < depth]
        if unit != "phrase":
            best: dict[int, Candidate] = {}
            for c in cands:
                if c.rank not in best or c.span.score > best[c.rank].span.score:
                    best[c.rank] = c
            cands = list(best.values())
        xs.append(read_features(cands, r.sources[unit][:depth], r.retrieval[unit]))
        ys.append(np.array([0.0 if r.absent else label(unit, c, r.question) for c in cands]))
        sizes.append(len(cands))
    x = np.concatenate(xs)
    # a question no calibrator judged reads as the mean of those judged (as a search does: ``known``); none judged,
    # the feature is constant and weighs nothing
    missing = np.isnan(x)
    judged = np.where(missing, 0.0, x).sum(axis=0) / np.maximum((~missing).sum(axis=0), 1)
    return known(x, judged), np.concatenate(ys), sizes


def fit(x: np.ndarray, y: np.ndarray, unit: str, features: Sequence[str] = READ_FEATURES):
    """The logistic model of one unit's candidates over ``features`` (the others weigh 0); ValueError when they
    are all right or all wrong."""
    if len(set(y.tolist())) < 2:
        raise ValueError(f"every {unit} candidate read is {'right' if len(y) and y[0] else 'wrong'} ({len(y)} "
                         "candidates): nothing to fit; use more --questions, or a trained --reader")
    return fit_logistic(x, y, features=features, known=READ_FEATURES)


def first_hits(model, x: np.ndarray, y: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each question's best-scored candidate: its score (log-odds) and whether it is right."""
    logit, scores, right, start = model.logit(x), [], [], 0
    for n in sizes:
        if n:
            best = start + int(np.argmax(logit[start:start + n]))
            scores.append(logit[best])
            right.append(y[best])
        start += n
    return np.asarray(scores), np.asarray(right)


def calibrate_first_hits(scores: np.ndarray, right: np.ndarray) -> tuple[float, float]:
    """(a, b) of sigmoid(a x score + b) fitted to the first hits' correctness (Platt scaling): a model fitted over
    every candidate is over-confident for the best of them, which is the hit users read."""
    from sklearn.linear_model import LogisticRegression

    if len(set(right.tolist())) < 2:
        return 1.0, 0.0
    lr = LogisticRegression(C=100.0).fit(scores[:, None], right)
    return float(lr.coef_[0, 0]), float(lr.intercept_[0])


def first_hit_confidences(model, calibration: tuple[float, float], reads: list[Read], unit: str, depth: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Each question's best-scored candidate at ``depth``: its confidence (``calibration``: its (a, b)) and whether
    it is right."""
    scores, right = first_hits(model, *examples(reads, unit, depth))
    return 1 / (1 + np.exp(-(calibration[0] * scores + calibration[1]))), right


def first_hit_accuracy(model, x: np.ndarray, y: np.ndarray, sizes: list[int]) -> float:
    """Share of questions whose best-scored candidate is right (percent)."""
    logit, right, start = model.logit(x), 0.0, 0
    for n in sizes:
        if n:
            right += y[start + int(np.argmax(logit[start:start + n]))]
        start += n
    return round(100 * right / max(1, len(sizes)), 2)


def present(reads: list[Read]) -> list[Read]:
    """The reads of questions whose article is in the index."""
    return [r for r in reads if not r.absent]


def fit_depth(reads: list[Read], depth: int, phrase_model, features: Sequence[str] = READ_FEATURES
              ) -> tuple[dict, dict, dict[str, Any]]:
    """Per unit, the logistic model and first-hit calibration of reading ``depth`` passages (the phrase model is
    given: it was fitted when choosing the depth), and a report of their first hits' accuracy and calibration.

    The models are fitted on every read, those of questions without their article too (all wrong), so that they
    learn what weak retrieval says; the calibration, on the questions whose answer is in the index alone: a hit's
    confidence at ``unanswerable_prior`` 0 assumes the answer is there (a request's prior discounts it,
    ``core.reading.shifted``)."""
    models, report, calibration = {"phrase": phrase_model}, {}, {}
    absent = [r for r in reads if r.absent]
    for unit in ("phrase", "passage", "doc"):
        if unit != "phrase":
            models[unit] = fit(*examples(reads, unit, depth)[:2], unit, features)
        x, y, sizes = examples(present(reads), unit, depth)
        if unit != "phrase":
            report[f"{unit}_acc@1"] = first_hit_accuracy(models[unit], x, y, sizes)
        scores, right = first_hits(models[unit], x, y, sizes)
        calibration[unit] = calibrate_first_hits(scores, right)
        a, b = calibration[unit]
        report[f"{unit}_first_hit_ece"] = {
            "uncalibrated": round(calibration_error(1 / (1 + np.exp(-scores)), right), 4),
            "calibrated": round(calibration_error(1 / (1 + np.exp(-(a * scores + b))), right), 4)}
        for name, group in (("present", present(reads)), ("absent", absent)):
            if group:  # the mean confidence of the first hits of questions with and without their article
                conf = first_hit_confidences(models[unit], calibration[unit], group, unit, depth)[0]
                report[f"{unit}_first_hit_confidence_{name}"] = round(float(conf.mean()), 4)
    return models, calibration, report


def read_questions(cfg: FitReadingConfig, questions: list[Question], index: str | Path,
                   absent: Sequence[Question] = ()) -> dict[int, list[Read]]:
    """Every question's top passages and documents read once per window width, at the deepest depth; ``absent``:
    questions whose article the index does not hold, read as well (``Read.absent``)."""
    searcher = open_searcher(index, cfg.model, device=cfg.device, precision=cfg.precision)
    reader = PassageReader.load(resolve_reader(cfg.reader), pick_device(cfg.device),
                                precision="fp32" if cfg.precision == "auto" else cfg.precision)
    depth = max(cfg.depths)
    stages = {w: ReadingStage(reader, Reading(depth, cfg.spans_per_passage, {}, window_chars=w), searcher.hits)
              for w in cfg.windows}
    base = SearchParams(mode=cfg.mode)
    reads: dict[int, list[Read]] = {w: [] for w in cfg.windows}
    assert searcher.encoder is not None
    asked = [*questions, *absent]
    for b in tqdm(range(0, len(asked), 32), desc="reading", unit="batch", disable=not cfg.progress):
        batch = asked[b:b + 32]
        texts = [q.question for q in batch]
        q_start, q_end = searcher.encoder.encode(texts)
        found, first = {}, {}
        for unit in ("passage", "doc"):
            params = dataclasses.replace(base, unit=unit, top_k=depth)
            found[unit] = [list(hits) for hits in searcher.search_vectors(q_start, q_end, params, None, texts)]
            first[unit] = judge_search(searcher, params, found[unit], q_start, q_end, texts).first or [None] * len(batch)
        for w, stage in stages.items():
            read_p = stage.candidates(texts, found["passage"], depth)
            read_d = stage.candidates(texts, found["doc"], depth)
            for i, q in enumerate(batch):
                reads[w].append(Read(q, {"phrase": read_p[i], "passage": read_p[i], "doc": read_d[i]},
                                     {"phrase": found["passage"][i], "passage": found["passage"][i],
                                      "doc": found["doc"][i]},
                                     {"phrase": first["passage"][i], "passage": first["passage"][i],
                                      "doc": first["doc"][i]}, absent=b + i >= len(questions)))
    return reads


def absent_questions(cfg: FitReadingConfig, data: list[dict[str, Any]]) -> list[Question]:
    """``--absent-questions`` questions of the training articles that are neither the fit's nor held out, a fixed
    sample: searched over the fit articles' index, their answer is not there, and whatever is read for them is
    wrong."""
    fit_articles, held = Holdout(cfg.holdout_every, cfg.articles_offset), cfg.holdout
    others = [a for i, a in enumerate(data) if not fit_articles.held(i) and not held.held(i)]
    return sample_questions([q for q in squad_questions(others) if q.answers], cfg.absent_questions,
                            seed=cfg.seed + 1) if cfg.absent_questions else []


def read_settings(cfg: FitReadingConfig, questions: Sequence[Question], absent: Sequence[Question]
                  ) -> dict[str, Any]:
    """What a fit's reads depend on: a ``--reads`` file made with other settings is not reused."""
    return {"questions": [q.id for q in questions], "absent": [q.id for q in absent], "index": cfg.index,
            "reader": cfg.reader, "model": cfg.model, "mode": cfg.mode, "read_passages": max(cfg.depths),
            "windows": list(cfg.windows), "spans_per_passage": cfg.spans_per_passage, "precision": cfg.precision}


READS_FORMAT, READS_VERSION = "spanseek fit-reading reads", 1


def _number(value: Any) -> Any:
    """A numpy scalar of the reads (a reader's score) as the Python number JSON writes."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} {value!r} cannot be kept in a --reads file")


def save_reads(path: str | Path, made_with: dict[str, Any], reads: dict[int, list[Read]]) -> None:
    """``reads`` and the settings they were made with at ``path`` (``--reads``), atomically, as gzipped JSON: each hit
    once (a passage read is the source of several candidates and units), the reads naming it by its number."""
    hits: list[dict[str, Any]] = []
    number: dict[int, int] = {}  # by identity: the reads hold the same hit object many times

    def hit(h: Hit) -> int:
        if id(h) not in number:
            number[id(h)] = len(hits)
            hits.append({f: getattr(h, f) for f in HIT_FIELDS})
        return number[id(h)]

    kept = {"format": READS_FORMAT, "version": READS_VERSION, "made_with": made_with, "hits": hits, "reads": {
        str(window): [{"question": dataclasses.asdict(r.question), "absent": r.absent, "retrieval": r.retrieval,
                       "sources": {u: [hit(h) for h in hs] for u, hs in r.sources.items()},
                       "candidates": {u: [{"source": hit(c.source), "rank": c.rank, "span": dataclasses.asdict(c.span)}
                                          for c in cs] for u, cs in r.candidates.items()}}
                      for r in window_reads] for window, window_reads in reads.items()}}
    with atomic_path(path) as tmp, open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(kept, default=_number).encode())


def load_reads(path: str | Path) -> tuple[dict[str, Any], dict[int, list[Read]]]:
    """The settings and reads ``save_reads`` wrote at ``path``; ValueError naming the file when it is something else,
    damaged, or of another version of this format (nothing in it is run: it is JSON)."""
    not_reads = f"--reads {path} is not a file of reads that `spanseek train fit-reading --reads` wrote"
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            kept = json.load(f)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{not_reads} ({e}); give a new file, or remove it") from None
    if not isinstance(kept, dict) or kept.get("format") != READS_FORMAT:
        raise ValueError(f"{not_reads}; give a new file, or remove it")
    if kept.get("version") != READS_VERSION:
        raise ValueError(f"--reads {path} holds reads in format version {kept.get('version')!r}, and this version of "
                         f"spanseek reads {READS_VERSION}; remove it to read again")
    try:
        hits = [Hit(**h) for h in kept["hits"]]
        reads = {int(window): [Read(
            Question(**{**r["question"], "answers": tuple(r["question"]["answers"]),
                        "answer_starts": tuple(r["question"]["answer_starts"])}),
            {u: [Candidate(hits[c["source"]], c["rank"], ReadSpan(**c["span"])) for c in cs]
             for u, cs in r["candidates"].items()},
            {u: [hits[i] for i in hs] for u, hs in r["sources"].items()}, r["retrieval"], absent=r["absent"])
            for r in window_reads] for window, window_reads in kept["reads"].items()}
        made_with = dict(kept["made_with"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"--reads {path} is damaged ({type(e).__name__}: {e}); remove it to read again") from None
    return made_with, reads


def kept_reads(path: str, made_with: dict[str, Any]) -> dict[int, list[Read]] | None:
    """The reads an earlier fit kept in ``path`` (``--reads``) if they were made with these settings; None when there
    is no such file; ValueError naming the file when it holds something else or reads made otherwise."""
    if Path(path).is_dir():
        raise ValueError(f"--reads {path} is a folder; give the file to keep the reads in")
    if not Path(path).is_file():
        return None
    kept, reads = load_reads(path)
    if differ := sorted(k for k, v in made_with.items() if kept.get(k) != v):
        raise ValueError(f"--reads {path} holds reads made with other {', '.join(differ)} than this fit's; give a "
                         "new file, or remove it to read again")
    return reads


def check_reading_out(out: str | Path) -> None:
    """Refuse an ``--out`` that ``reading.json`` cannot go into beside its reader: a file (it failed once the whole
    fit was done), or a directory of other files (a phrase model's, an index's: it was written among them)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} is a file; it names the reader directory to write {READING_NAME} into "
                         "(usually --reader's)")
    if (other := other_files(path, [READING_NAME])) and not (path / READER_CONFIG_NAME).is_file():
        raise ValueError(f"--out {out} is not a reader directory (no {READER_CONFIG_NAME}; it holds {other}): "
                         f"{READING_NAME} goes beside its reader; give the reader's directory (usually --reader's) or "
                         "a new one")


def fit_reading(cfg: FitReadingConfig) -> dict[str, Any]:
    resolve_reader(cfg.reader)  # a mistyped reader or model is named now, not once an index is built for minutes
    if cfg.index is None:
        resolve_model(cfg.model)
    check_reading_out(cfg.out)
    data = load_training(cfg.train)
    articles = [a for i, a in enumerate(data) if Holdout(cfg.holdout_every, cfg.articles_offset).held(i)]
    questions = sample_questions([q for q in squad_questions(articles) if q.answers], cfg.questions, seed=cfg.seed)
    if not questions:  # (an index of no articles was refused naming its temporary corpus)
        raise ValueError(f"--train {cfg.train}: no answered questions in the articles the fit reads "
                         f"{reserved_articles_hint(cfg.holdout_every, cfg.articles_offset, data)}")
    absent = absent_questions(cfg, data)
    made_with = read_settings(cfg, questions, absent)
    reads = kept_reads(cfg.reads, made_with) if cfg.reads else None
    if reads is None:
        with tempfile.TemporaryDirectory(prefix="spanseek-fit-reading-") as tmp:
            index = cfg.index
            if index is None:
                from spanseek.indexer.build import BuildOptions, build_index

                corpus = Path(tmp) / "corpus.jsonl"
                write_corpus(corpus, squad_documents(articles))
                index = str(Path(tmp) / "index")
                build_index(corpus, cfg.model, index, BuildOptions(progress=cfg.progress, precision=cfg.precision))
            reads = read_questions(cfg, questions, index, absent)
        if cfg.reads:
            save_reads(cfg.reads, made_with, reads)
    by_setting: dict[tuple[int, int], dict[str, Any]] = {}  # (depth, window) -> EM@1 and the phrase model
    for window, window_reads in reads.items():
        for depth in cfg.depths:
            model = fit(*examples(window_reads, "phrase", depth)[:2], "phrase", cfg.feature_names)
            em = first_hit_accuracy(model, *examples(present(window_reads), "phrase", depth))
            by_setting[depth, window] = {"phrase_em@1": em, "model": model}
    best = max(v["phrase_em@1"] for v in by_setting.values())
    # the cheapest setting within tolerance of the best: reading cost grows with the passages and the characters read
    depth, window = min((k for k, v in by_setting.items() if v["phrase_em@1"] >= best - cfg.tolerance),
                        key=lambda k: (k[0] * (1.0 if k[1] == 0 else min(1.0, (2 * k[1] + 40) / 750)),
                                       -by_setting[k]["phrase_em@1"]))
    chosen = {"read_passages": depth, "window_chars": window}
    if cfg.default_passages is not None:  # the window stays the fit's choice
        depth = cfg.default_passages
    fits = {d: fit_depth(reads[window], d, by_setting[d, window]["model"], cfg.feature_names) for d in cfg.depths}
    models, calibration, report = fits[depth]
    fitted_on = {
        "questions": len(questions), "articles": len(articles), "absent_questions": len(absent),
        "train": str(cfg.train),
        "articles_offset": cfg.articles_offset, "holdout_every": cfg.holdout_every, "model": str(cfg.model),
        "mode": cfg.mode, "features": list(cfg.feature_names), "phrase_em@1_by_read_passages_and_window": {
            f"{d}/{w}": v["phrase_em@1"] for (d, w), v in sorted(by_setting.items())},
        "fit_chose": chosen, "default_passages": "--default-passages" if cfg.default_passages is not None else "fit",
        **report,
    }
    reading = Reading(depth, cfg.spans_per_passage, models, fitted_on, window_chars=window, calibration=calibration,
                      depths={d: Reading(d, cfg.spans_per_passage, m, window_chars=window, calibration=c)
                              for d, (m, c, _) in fits.items() if d != depth})
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    reading.save(out / READING_NAME)
    return {"reading": str(out / READING_NAME), "read_passages": depth, "window_chars": window, **fitted_on}
