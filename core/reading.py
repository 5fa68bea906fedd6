"""Reading at search time: the top passages of a search read by the cross-attention reader (``core.reader``).

A request with ``read`` is searched as usual (phrase unit: for passages), then the reader reads the passages of the
top ``read_passages`` units of each question, all pairs of a batch in one batched pass (pairs read recently are
remembered), and keeps each passage's best ``spans_per_passage`` spans. Every read span becomes a candidate with
the features ``READ_FEATURES`` (the reader's score and margin, how much of the reader's mass and how many passages
agree on the same answer text, the passage's retrieval score and rank, the span's lead over the reader's "no answer
here" score in its window, and how strong the whole retrieval is: the log-odds of the first unit retrieved being
right, by the phrase model's calibrator, as a search without read judges it), and a logistic model per unit and number
of passages read, fitted on training questions (``spanseek train fit-reading``, stored as ``reading.json`` in the reader's directory), turns
them into the hit's score (its log-odds) and ``confidence`` (its probability):

- phrase: read spans ranked by that score, spans that read the same (normalised) answer merged into the best one;
- passage / doc: the units read re-ranked by their best read span, which becomes the hit's phrase; units ranked
  below ``read_passages`` follow them unread, in retrieval order, with their retrieval scores.

Read hits carry ``read`` (the reader's span score) beside the retrieval leg's ``dense`` and ``lexical``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from spanseek.core.confidence import FEATURE_DEPTH, FittedFile, LogisticModel, check_header, presence_at
from spanseek.core.hits import Hit, HitBuilder, Hits, non_overlapping
from spanseek.core.metrics import normalize_answer
from spanseek.core.page import Pager
from spanseek.core.params import UNITS, SearchParams
from spanseek.core.plan import Plan, StageTimes
from spanseek.core.reader import PassageReader, ReadSpan

READING_NAME = "reading.json"
READING_VERSION = 3
RECENT_READS = 4096  # (question, passage) pairs whose spans a stage remembers, the least recently read forgotten
# first (evaluation reads a pair per unit; a service, the questions asked again and again)
READ_FEATURES = ("reader", "reader_margin", "answer_mass", "agreement", "retrieval_z", "retrieval_rank",
                 "reader_null", "retrieval_confidence")
# the features of older files, each read with the features added since at weight 0: version 1 was fitted before
# ``reader_null``, version 2 before ``retrieval_confidence``
OLD_FEATURES = {1: READ_FEATURES[:6], 2: READ_FEATURES[:7]}
V1_FEATURES = OLD_FEATURES[1]
RETRIEVAL_LOGIT = 10.0  # ``retrieval_confidence`` is clipped to +-this: past it the calibrator's tails say no more


class ReadingError(ValueError):
    """A reading file cannot be used; the message names it and says why."""


@dataclass(frozen=True)
class Reading(FittedFile):
    """How read spans are combined with retrieval, fitted on training questions: passages read by default, spans
    kept per passage, and per unit a logistic model over ``READ_FEATURES``."""

    read_passages: int
    spans_per_passage: int
    models: dict[str, LogisticModel]
    fitted_on: dict[str, Any] = field(default_factory=dict)
    window_chars: int = 0  # read this many characters each side of the unit's best phrase (0: the whole passage)
    # per unit (a, b): a hit's confidence is sigmoid(a x its score + b), fitted on the first hits (the models rank)
    calibration: dict[str, tuple[float, float]] = field(default_factory=dict)
    # the models and calibration fitted for reading other numbers of passages (``at``), the same window
    depths: dict[int, Reading] = field(default_factory=dict)
    kind: ClassVar[str] = "reading"
    refit: ClassVar[str] = "fit one with `spanseek train fit-reading`"
    error: ClassVar[type[ValueError]] = ReadingError

    def confidence(self, unit: str, score: float) -> float:
        a, b = self.calibration.get(unit, (1.0, 0.0))
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, a * score + b))))

    def at(self, depth: int) -> Reading:
        """The fit for reading ``depth`` passages per question: the one fitted at that depth, else at the nearest
        depth fitted (the smaller on a tie). The features' distribution shifts with the passages read, so a
        request's ``read_passages`` is scored by the models fitted for it."""
        fits = {self.read_passages: self, **self.depths}
        return fits[min(fits, key=lambda d: (abs(d - depth), d))]

    def _fit_dict(self) -> dict[str, Any]:
        return {"calibration": {u: list(ab) for u, ab in sorted(self.calibration.items())},
                "models": {u: m.to_dict() for u, m in sorted(self.models.items())}}

    def to_dict(self) -> dict[str, Any]:
        return {"version": READING_VERSION, "features": list(READ_FEATURES), "read_passages": self.read_passages,
                "spans_per_passage": self.spans_per_passage, "window_chars": self.window_chars,
                "fitted_on": self.fitted_on, **self._fit_dict(),
                "depths": {str(d): r._fit_dict() for d, r in sorted(self.depths.items())}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reading:
        if (version := d.get("version")) in OLD_FEATURES:
            check_header(d, version, OLD_FEATURES[version])
            d = upgrade(d, len(READ_FEATURES) - len(OLD_FEATURES[version]))
        check_header(d, READING_VERSION, READ_FEATURES)

        def fit(depth: int, f: dict[str, Any], fitted_on: dict[str, Any]) -> Reading:
            models = {u: LogisticModel.from_dict(m, READ_FEATURES) for u, m in f["models"].items()}
            calibration = {u: (float(a), float(b)) for u, (a, b) in f.get("calibration", {}).items()}
            return cls(depth, int(d["spans_per_passage"]), models, fitted_on, int(d.get("window_chars", 0)),
                       calibration)

        depths = {int(k): fit(int(k), f, {}) for k, f in d.get("depths", {}).items()}
        reading = replace(fit(int(d["read_passages"]), d, dict(d.get("fitted_on", {}))), depths=depths)
        if min([reading.read_passages, *depths]) < 1 or reading.spans_per_passage < 1 or reading.window_chars < 0:
            raise ValueError("read_passages (and every fitted depth) and spans_per_passage must be >= 1, "
                             "window_chars >= 0")
        for depth, fitted in {reading.read_passages: reading, **depths}.items():  # every unit is read by each
            if missing := [u for u in UNITS if u not in fitted.models]:
                raise ValueError(f"no model for unit={', '.join(missing)} at {depth} passages read")
        return reading


def upgrade(d: dict[str, Any], added: int) -> dict[str, Any]:
    """An older reading file as the current version: each model gains the ``added`` features fitted since with weight
    0 (mean 0, scale 1), so it ranks and scores exactly as before."""
    def models(f: dict[str, Any]) -> dict[str, Any]:
        return {**f, "models": {u: {**m, "mean": [*m["mean"], *[0.0] * added], "scale": [*m["scale"], *[1.0] * added],
                                    "coef": [*m["coef"], *[0.0] * added]} for u, m in f["models"].items()}}

    return {**models(d), "version": READING_VERSION, "features": list(READ_FEATURES),
            "depths": {k: models(f) for k, f in d.get("depths", {}).items()}}


@dataclass(frozen=True)
class Candidate:
    """A read span of one question: the passage hit it was read from (``source``, at ``rank``) and the span."""

    source: Hit
    rank: int
    span: ReadSpan


def read_features(candidates: Sequence[Candidate], sources: Sequence[Hit], first: float | None) -> np.ndarray:
    """(n, len(READ_FEATURES)) features of one question's read spans; ``sources``: every unit it read, best first
    (their retrieval scores are z-normalised over them); ``first``: the calibrator's log-odds that its first unit is
    right (``judge``; None where none applies: NaN, ``known``)."""
    if not candidates:
        return np.zeros((0, len(READ_FEATURES)))
    s = np.array([c.span.score for c in candidates], dtype=np.float64)
    texts = [normalize_answer(c.span.text) for c in candidates]
    total = np.logaddexp.reduce(s)
    mass: dict[str, float] = {}
    count: dict[str, int] = {}
    for t, score in zip(texts, s.tolist(), strict=True):
        mass[t] = float(np.logaddexp(mass.get(t, -np.inf), score))
        count[t] = count.get(t, 0) + 1
    retrieval = np.array([h.score for h in sources], dtype=np.float64)
    z = (retrieval - retrieval.mean()) / (retrieval.std() or 1.0)
    return np.stack([
        s,
        s - s.max(),
        np.array([mass[t] for t in texts]) - total,
        np.log([count[t] for t in texts]),
        np.array([z[c.rank] for c in candidates]),
        np.log1p([c.rank for c in candidates]),
        s - np.array([c.span.null for c in candidates]),
        np.full(len(s), np.nan if first is None else np.clip(first, -RETRIEVAL_LOGIT, RETRIEVAL_LOGIT)),
    ], axis=1)


def known(x: np.ndarray, mean: Sequence[float]) -> np.ndarray:
    """Features with each missing one (NaN: no calibrator judged the retrieval) at ``mean``, the mean it was fitted
    on: it then moves no score, and read hits rank and score on the other features."""
    return np.where(np.isnan(x), np.asarray(mean, dtype=np.float64)[None, :], x)


class ReadingStage:
    """Reads a batch's retrieved passages and ranks their spans (see the module docstring)."""

    def __init__(self, reader: PassageReader, reading: Reading, hits: HitBuilder):
        self.reader = reader
        self.reading = reading
        self.hits = hits
        self._recent: dict[tuple[str, str, int, int | None], list[ReadSpan]] = {}  # (question, passage, k, limit)
        self._lock = threading.Lock()

    def over(self, hits: HitBuilder) -> ReadingStage:
        """This stage over another index's passages (``hits``: a live index's next version, a reloaded index),
        sharing its reader and the reads it remembers: they are keyed by the text read, so a replaced passage's new
        text is read anew and a deleted one is never retrieved."""
        stage = ReadingStage(self.reader, self.reading, hits)
        stage._recent, stage._lock = self._recent, self._lock
        return stage

    def weighs_retrieval(self, plan: Plan) -> bool:
        """Whether the fit that scores ``plan`` gives ``retrieval_confidence`` a weight (a file fitted before it reads
        it at 0): only then is the calibrator's judgement of the first unit needed at prior 0."""
        return self.reading.at(self.read_depth(plan)).models[plan.unit].coef[READ_FEATURES.index(
            "retrieval_confidence")] != 0.0

    def read_depth(self, plan: Plan) -> int:
        """How many units of each question are read."""
        return plan.params.read_passages or self.reading.read_passages

    def depth(self, plan: Plan) -> int:
        """How many units to retrieve per question: those read, and for passages and documents the page."""
        return self.read_depth(plan) if plan.unit == "phrase" else max(plan.top_k, self.read_depth(plan))

    def candidates(self, questions: Sequence[str], retrieved: Sequence[Sequence[Hit]],
                   depth: int, max_answer_tokens: int | None = None) -> list[list[Candidate]]:
        """The passages of every question's first ``depth`` units read in one batched pass (those read recently
        are not read again): their best spans (of at most ``max_answer_tokens`` tokens, when a request says) as
        candidates."""
        k = self.reading.spans_per_passage
        pairs = [(b, r) for b, hits in enumerate(retrieved) for r in range(min(depth, len(hits)))]
        windows = [self.window(retrieved[b][r]) for b, r in pairs]
        keys = [(questions[b], text, k, max_answer_tokens) for (b, _), (_, text) in zip(pairs, windows, strict=True)]
        with self._lock:  # a pair read again is the last to be forgotten (its entry moved to the end)
            spans = {key: self._recent.pop(key) for key in dict.fromkeys(keys) if key in self._recent}
            self._recent |= spans
        todo = list(dict.fromkeys(key for key in keys if key not in spans))
        if todo:
            spans |= dict(zip(todo, self.reader.read([q for q, *_ in todo], [p for _, p, *_ in todo], k=k,
                                                     max_answer_tokens=max_answer_tokens), strict=True))
            with self._lock:  # batches may run in two threads (the service pipelines them)
                self._recent |= {key: spans[key] for key in todo}
                while len(self._recent) > RECENT_READS:
                    del self._recent[next(iter(self._recent))]
        out: list[list[Candidate]] = [[] for _ in retrieved]
        for (b, r), key, (at, _) in zip(pairs, keys, windows, strict=True):
            out[b] += [Candidate(retrieved[b][r], r, replace(span, start=span.start + at, end=span.end + at))
                       for span in spans[key] if "\n\n" not in span.text]  # not over a paragraph break (HitBuilder)
        return out

    def window(self, hit: Hit) -> tuple[int, str]:
        """What is read of a unit's passage: (where it starts, the text): ``window_chars`` characters each side of
        its best phrase, widened to whole words; the whole passage when ``window_chars`` is 0."""
        width, text = self.reading.window_chars, hit.passage
        if not width or len(text) <= hit.end - hit.start + 2 * width:
            return 0, text
        a, b = max(0, hit.start - width), min(len(text), hit.end + width)
        while a > 0 and not text[a - 1].isspace():
            a -= 1
        while b < len(text) and not text[b].isspace():
            b += 1
        return a, text[a:b]

    def rank(self, plan: Plan, questions: Sequence[str], retrieved: Sequence[Sequence[Hit]],
             retrieval: Sequence[float | None] | None = None) -> list[list[Hit]]:
        """Per question, the plan's ``top_k`` read hits, best first, each with its confidence; ``retrieval``: each
        question's ``read_features`` log-odds of its retrieval (``Judged.first``; None: no calibrator applies)."""
        depth = self.read_depth(plan)
        reading = self.reading.at(depth)
        model = reading.models[plan.unit]  # every unit's (Reading.from_dict)
        out = []
        asked = plan.params.max_answer_tokens  # a request's own limit (the reader's is its default)
        cands_of = self.candidates(questions, retrieved, depth, asked)
        for cands, sources, first in zip(cands_of, retrieved, retrieval or [None] * len(retrieved), strict=True):
            x = known(read_features(cands, sources[:depth], first), model.mean)
            logit = model.logit(x) if len(x) else np.zeros(0)
            if plan.unit == "phrase":
                out.append(self._phrases(cands, logit, plan, reading))
            else:
                out.append(self._units(cands, logit, sources, plan, reading))
        return out

    def _hit(self, c: Candidate, logit: float, unit: str, reading: Reading) -> Hit:
        src = c.source
        hit = self.hits.passage_hit(src.passage_id, c.span.start, c.span.end, logit, src.dense, src.lexical,
                                    read=c.span.score)
        return hit.but(confidence=round(reading.confidence(unit, logit), 4))

    def _phrases(self, cands: list[Candidate], logit: np.ndarray, plan: Plan, reading: Reading) -> list[Hit]:
        seen: set[str] = set()
        hits = []
        for i in np.argsort(-logit, kind="stable").tolist():
            text = normalize_answer(cands[i].span.text)
            if text in seen:  # the same answer read elsewhere: merged into its best reading
                continue
            seen.add(text)
            hits.append(self._hit(cands[i], float(logit[i]), plan.unit, reading))
        return hits[: plan.top_k] if plan.params.allow_overlap else non_overlapping(hits, plan.top_k)

    def _units(self, cands: list[Candidate], logit: np.ndarray, sources: Sequence[Hit], plan: Plan,
               reading: Reading) -> list[Hit]:
        best: dict[int, int] = {}  # rank of a unit -> its best read span
        for i, c in enumerate(cands):
            if c.rank not in best or logit[i] > logit[best[c.rank]]:
                best[c.rank] = i
        read = sorted(best.values(), key=lambda i: (-logit[i], cands[i].rank))
        hits = [self._hit(cands[i], float(logit[i]), plan.unit, reading) for i in read]
        unread = [h for r, h in enumerate(sources) if r not in best]  # below the read depth, or nothing to read
        return (hits + unread)[: plan.top_k]


@dataclass(frozen=True)
class Judged:
    """What the calibrator says of each question's retrieval of the units read: ``first``, the log-odds that its first
    unit is right (a ``read_features`` feature; None for a question without hits), and ``presence``, P(its answer is
    in the index) at the request's ``unanswerable_prior`` (None at prior 0). Both None where the calibrator does not
    apply."""

    first: list[float | None] | None
    presence: list[float] | None


def judge(searcher: Any, retrieve: Plan, retrieved: list[list[Hit]], q_start: np.ndarray, q_end: np.ndarray,
          texts: list[str], timings: StageTimes, weighed: bool = True) -> Judged:
    """The calibrator's judgement of the units read (``retrieve``: the plan that ranked ``retrieved``; ``searcher``:
    the ``core.search.Searcher``), read as a search of them without read reads it: at least ``FEATURE_DEPTH`` deep,
    at its first hit; filtered, at the first unit that passes the filter, in its place in the search without the
    filter (``Pager.read_filtered``). The reading models are fitted on questions whose answer is in the index, so
    their confidence assumes it is there; the first unit's log-odds tells them how strong the retrieval is, and the
    presence model, fitted on searches with and without the answer, gives the share the prior leaves. Nothing is
    searched for it where neither is needed: the reading fit does not weigh the first unit (``weighed`` False) and
    the prior is 0."""
    pager: Pager = searcher.pager
    if not pager.calibrated(retrieve) or not (weighed or pager.shifts(retrieve)):
        return Judged(None, None)
    deep = replace(retrieve.but(top_k=max(retrieve.top_k, FEATURE_DEPTH[retrieve.unit])), unfiltered=None)
    whole = searcher._unfiltered(deep, q_start, q_end, texts, timings)
    rows: list[int] | None = None
    if whole.unfiltered is not None:  # a filtered search's hits are judged in its search without the filter
        passing = retrieved if deep.top_k == retrieve.top_k else searcher.ranking.ranked(whole, q_start, q_end, texts,
                                                                                         timings)[0]
        lists, rows = [], []
        for hits, among in zip(passing, whole.unfiltered.hits, strict=True):
            placed, at = pager.read_filtered(hits, among, deep.unit, None) if hits else ([[]], [(0, 0)])
            lists.append(placed[at[0][0]])  # where an unread search of the filter reads its first hit
            rows.append(at[0][1])
    elif deep.top_k == retrieve.top_k and retrieve.unfiltered is None:
        lists = retrieved
    else:
        lists = searcher.ranking.ranked(deep, q_start, q_end, texts, timings)[0]
    logits = pager.first_logits(deep, lists, texts, rows) or [None] * len(lists)
    prior = pager.prior(retrieve.params)
    presence = [presence_at(at, prior) for at in logits] if pager.shifts(retrieve) else None
    return Judged([None if at is None else at[0] for at in logits], presence)


def judge_search(searcher: Any, params: SearchParams, retrieved: list[list[Hit]], q_start: np.ndarray,
                 q_end: np.ndarray, texts: list[str]) -> Judged:
    """``judge`` of units retrieved by a search of ``params`` (without read), as ``spanseek train fit-reading``
    reads them."""
    return judge(searcher, searcher._plan(params), retrieved, q_start, q_end, texts, StageTimes())


def shifted(ranked: list[list[Hit]], present: list[float] | None) -> list[list[Hit]]:
    """Each question's read hits with their confidence times its presence (``Judged.presence``; unread hits as they
    are)."""
    if present is None:
        return ranked
    return [[h.but(confidence=round(h.confidence * p, 4)) if h.read is not None and h.confidence is not None else h
             for h in hits] for hits, p in zip(ranked, present, strict=True)]


def read_unsure(search: Callable[..., list[Hits]], q_start: np.ndarray, q_end: np.ndarray, params: SearchParams,
                timings: StageTimes, questions: Sequence[str] | None) -> list[Hits]:
    """``read_below`` (``search``: a searcher's ``search_vectors``): every question searched without read (from its
    first hit, so that the best one is judged), and only those whose best hit's confidence is below ``read_below``
    searched again with read; the others get the page of their search, abstaining by ``min_confidence`` as it
    would."""
    assert params.read_below is not None
    searched = search(q_start, q_end, replace(params, read=False, read_passages=None, read_below=None,
                                              min_confidence=None, offset=0, top_k=params.offset + params.top_k),
                      timings, questions)
    unsure = [i for i, hits in enumerate(searched) if not hits or (hits[0].confidence or 0.0) < params.read_below]
    out = [Pager.page_of(list(hits), params) for hits in searched]
    if unsure:
        pick = np.asarray(unsure)
        texts = [questions[i] for i in unsure] if questions is not None else None
        read = search(q_start[pick], q_end[pick], replace(params, read_below=None), timings, texts)
        for i, hits in zip(unsure, read, strict=True):
            out[i] = hits
    return out
