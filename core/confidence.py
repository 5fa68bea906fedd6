"""Calibrated confidence of search hits: score features -> a small logistic model -> a probability in [0, 1].

A hit's ``confidence`` is the probability that it is a correct answer: for the phrase unit, that the phrase matches a
gold answer exactly (``core.metrics.exact_match``); for the passage unit, that the passage contains a gold answer
(``core.metrics.passage_has_answer``); for the doc unit, that the document is the question's gold document. It is
computed from the hit's place in its question's ranked list (``hit_features``), with two logistic models per unit and
search mode fitted on training questions searched with and without their article (``spanseek train calibrate``,
``trainer.calibrate``): one for whether the hit is correct when the answer is in the index, one for whether the
answer is in the index. Their product, at the share of questions without an answer in the index that the caller
expects (``unanswerable_prior``, default 0), is the confidence (``Calibrator.predict``). A calibrator fitted on keyword
forms of the questions too (``spanseek train calibrate --forms question keywords``) holds a second pair per unit and
mode for keyword queries (``"unit/mode/keywords"``), used for a query that reads as keywords
(``core.query_form.is_keyword_query``): the same scores mean less of a phrase, and more of a BM25 passage, when the
query says no more than its subject. The fitted coefficients are plain numbers in
``calibration.json`` next to the model's weights (``CALIBRATION_NAME``): the scores a calibrator reads are the
model's, so a calibrator belongs to the model that made them and is refused for another one (fingerprint check);
without one, hits carry ``confidence = None``. Applying it needs only numpy.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from spanseek.core.io import write_json_atomic
from spanseek.core.metrics import normalize_answer

log = logging.getLogger(__name__)

CALIBRATION_NAME = "calibration.json"
CALIBRATION_VERSION = 2  # 2: a correctness and a presence model per unit/mode (1: one model, still read)
# the ranked list the features are read from is at least this deep per unit (the served page may be shorter):
# the softmax feature normalises over these first hits. Documents are few and a deep document search is costly.
FEATURE_DEPTH = {"phrase": 10, "passage": 10, "doc": 5}
FEATURES = ("score", "margin", "gap_to_best", "log_rank", "answer_prob", "log_lexical", "dense")
LABELS = {
    "phrase": "the phrase matches a gold answer exactly (normalised)",
    "passage": "the passage contains a gold answer (normalised)",
    "doc": "the document is the question's gold document",
}


KEYWORDS = "keywords"  # the suffix of the models fitted on keyword queries: "phrase/hybrid/keywords"


def model_key(unit: str, mode: str, keywords: bool = False) -> str:
    """The key of a unit and mode's models: ``"unit/mode"``, or ``"unit/mode/keywords"`` for keyword queries."""
    return f"{unit}/{mode}/{KEYWORDS}" if keywords else f"{unit}/{mode}"


class CalibrationError(ValueError):
    """A calibration file is unreadable or does not fit this model; the message names the file."""


def hit_features(unit: str, scores: Sequence[float], dense: Sequence[float | None], lexical: Sequence[float | None],
                 texts: Sequence[str]) -> np.ndarray:
    """(n, len(FEATURES)) features of one question's ranked hits (best first), from their scores alone.

    score: the ranking score; margin: its lead over the next hit below it with a different answer (phrase unit: a
    different normalised text; other units: the next hit), or over the last hit when none differs; gap_to_best:
    how far below the first hit it is; log_rank: log(1 + rank); answer_prob: the softmax of the dense scores
    (normalised over the first ``FEATURE_DEPTH[unit]`` hits), summed over every hit of the list with the same answer
    (phrase unit); log_lexical: log(1 + BM25 score), 0 without a lexical leg; dense: the dense leg's score. A deeper
    list changes no feature of its first hits but the last one's margin and, for phrases, the answer mass of those
    that share an answer with a hit it adds.
    """
    n = len(scores)
    if n == 0:
        return np.zeros((0, len(FEATURES)))
    s = np.asarray(scores, dtype=np.float64)
    d = np.asarray([s[i] if v is None else v for i, v in enumerate(dense)], dtype=np.float64)
    lex = np.asarray([0.0 if v is None else math.log1p(max(v, 0.0)) for v in lexical])
    keys = [normalize_answer(t) or f"\x00{i}" for i, t in enumerate(texts)] if unit == "phrase" else [str(i) for i in range(n)]
    ids: dict[str, int] = {}  # a number per distinct key (only which hits share one matters)
    key_ids = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, n) if unit == "phrase" else np.arange(n)
    below = np.triu(key_ids[None, :] != key_ids[:, None], 1)  # [i, j]: j is below i with a different answer
    margin = s - np.where(below.any(axis=1), s[below.argmax(axis=1)], s[-1])
    top = d[: FEATURE_DEPTH.get(unit, n)]
    p = np.exp(d - top.max())
    p /= p[: len(top)].sum()
    mass: dict[str, float] = {}
    for k, v in zip(keys, p, strict=True):
        mass[k] = mass.get(k, 0.0) + float(v)
    prob = np.asarray([mass[k] for k in keys])
    return np.stack([s, margin, s[0] - s, np.log1p(np.arange(n)), prob, lex, d], axis=1)


@dataclass(frozen=True)
class LogisticModel:
    """p = sigmoid(coef . (x - mean) / scale + intercept) over ``FEATURES``."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(n, F) features -> (n,) probabilities."""
        return 1.0 / (1.0 + np.exp(-np.clip(self.logit(x), -50, 50)))

    def logit(self, x: np.ndarray) -> np.ndarray:
        """(n, F) features -> (n,) log-odds."""
        return (x - np.asarray(self.mean)) / np.asarray(self.scale) @ np.asarray(self.coef) + self.intercept

    def to_dict(self) -> dict[str, Any]:
        return {"mean": list(self.mean), "scale": list(self.scale), "coef": list(self.coef),
                "intercept": self.intercept}

    @classmethod
    def from_dict(cls, d: dict[str, Any], features: Sequence[str] = FEATURES) -> LogisticModel:
        """The model of ``to_dict``, over ``features``; ValueError saying what is wrong."""
        m = cls(tuple(map(float, d["mean"])), tuple(map(float, d["scale"])), tuple(map(float, d["coef"])),
                float(d["intercept"]))
        if not len(m.mean) == len(m.scale) == len(m.coef) == len(features):
            raise ValueError(f"expected {len(features)} numbers per vector ({', '.join(features)})")
        if not all(map(math.isfinite, (*m.mean, *m.scale, *m.coef, m.intercept))) or min(m.scale) <= 0:
            raise ValueError("coefficients must be finite and scales positive")
        return m


class FittedFile:
    """A fitted part saved as plain numbers in a JSON file: the subclass's ``to_dict`` and ``from_dict`` (ValueError
    saying what is wrong), written atomically and read back with ``error`` naming the file and how to ``refit``."""

    kind: ClassVar[str]
    refit: ClassVar[str]
    error: ClassVar[type[ValueError]]

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read the file; ``error`` naming it and what is wrong."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise cls.error(f"{path}: not a usable {cls.kind} file ({e}); {cls.refit}") from None


def check_header(d: dict[str, Any], version: int, features: Sequence[str]) -> None:
    """ValueError unless a fitted file is of ``version`` over ``features`` (what this spanseek computes)."""
    if d.get("version") != version:
        raise ValueError(f"version {d.get('version')!r}, this spanseek reads {version}")
    if tuple(d.get("features", ())) != tuple(features):
        raise ValueError(f"features {d.get('features')}, this spanseek computes {list(features)}")


def prior_shift(present_logit: np.ndarray, prior: float) -> np.ndarray:
    """P(answer in the index | hit) from the log-odds of a model fitted with as many answer-absent lists as present
    ones, moved (Bayes' rule: the odds scale with the prior odds) to a world where a share ``prior`` of the questions
    has no answer in the index."""
    if prior <= 0.0:
        return np.ones_like(present_logit)
    if prior >= 1.0:
        return np.zeros_like(present_logit)
    shifted = present_logit + math.log((1.0 - prior) / prior)
    return 1.0 / (1.0 + np.exp(-np.clip(shifted, -50, 50)))


def presence_at(logits: tuple[float, float | None] | None, prior: float) -> float:
    """P(the answer is in the index) at the prior from a hit's (correct, present) log-odds
    (``Calibrator.first_logits``): 1 without a hit or a presence model."""
    if logits is None or logits[1] is None:
        return 1.0
    return float(prior_shift(np.array([logits[1]]), prior)[0])


@dataclass(frozen=True)
class Calibrator(FittedFile):
    """Per ``"unit/mode"`` (e.g. ``"phrase/hybrid"``) two logistic models and what they were fitted on: ``models``,
    P(the hit is correct | its features, the answer is in the index), and ``present``, P(the answer is in the index |
    the hit's features) fitted on as many lists without the answer as with it. A hit's confidence is their product
    at the share of unanswerable questions the caller expects (``unanswerable_prior``; 0: every answer is in the
    index). Keys ``"unit/mode/keywords"`` (``model_key``) hold the models of keyword queries, where fitted; a keyword
    query without them gets the question models. A version-1 file has one model per unit/mode fitted on half
    unanswerable lists, used at any prior."""

    models: dict[str, LogisticModel]
    model_fingerprint: str
    fitted_on: dict[str, Any]
    present: dict[str, LogisticModel] = field(default_factory=dict)
    kind: ClassVar[str] = "calibration"
    refit: ClassVar[str] = "refit it with `spanseek train calibrate`"
    error: ClassVar[type[ValueError]] = CalibrationError

    def applies(self, unit: str, mode: str, fusion: str | None = None, weight: float | None = None,
                phrase_rerank: Mapping[str, float] | None = None) -> bool:
        """Whether a model was fitted for ``unit``/``mode`` and, in hybrid mode, for the same fusion: hybrid scores
        move with the fusion, its lexical weight and (phrases) the re-ranking weights, so a calibrator fitted under
        other ones (or under unrecorded ones) does not apply and hits carry no confidence rather than a wrong one."""
        if f"{unit}/{mode}" not in self.models:
            return False
        if mode != "hybrid":
            return True
        fitted = self.fitted_on.get("fusion") or {}
        w = (fitted.get("weights") or {}).get(unit)
        if unit == "phrase" and (fitted.get("phrase_rerank") or None) != (dict(phrase_rerank) if phrase_rerank else None):
            return False
        same_fusion = unit == "phrase" or fitted.get("fusion") == fusion  # phrases always fuse by score
        return same_fusion and w is not None and weight is not None and math.isclose(float(w), weight)

    def predict(self, key: str, x: np.ndarray, unanswerable_prior: float = 0.0) -> np.ndarray:
        """(n,) confidences of (n, F) features under ``key`` (``"unit/mode"``) at the prior."""
        p = self.models[key].predict(x)
        present = self.present.get(key)
        return p if present is None else p * prior_shift(present.logit(x), unanswerable_prior)

    def first_logits(self, unit: str, mode: str,
                     questions: Sequence[tuple[Sequence[float], Sequence[float | None], Sequence[float | None],
                                               Sequence[str]]],
                     keywords: Sequence[bool] | None = None,
                     rows: Sequence[int] | None = None) -> list[tuple[float, float | None] | None]:
        """Per question, the log-odds of the two models at the first hit of its ranked list of ``unit`` ((scores,
        dense, lexical, texts), best first, at least ``FEATURE_DEPTH`` deep), or at its row in ``rows`` (a filtered
        search's first hit in the list without the filter): (the hit is correct, the answer is in the index; None where
        no presence model was fitted, as in a version-1 file, whose one model holds the share of unanswerable lists it
        was fitted on); None for a question without hits. Read hits take them (``core.reading.judge``): how strong the
        retrieval is, and ``presence_at`` the prior's share of confidences that assume the answer is in the index."""
        keys = [self.key(unit, mode, bool(k)) for k in (keywords or [False] * len(questions))]
        out: list[tuple[float, float | None] | None] = []
        for key, q, row in zip(keys, questions, rows or [0] * len(questions), strict=True):
            x = hit_features(unit, *q)[row:row + 1]
            present = self.present.get(key)
            out.append((float(self.models[key].logit(x)[0]), None if present is None else float(present.logit(x)[0]))
                       if len(x) else None)
        return out

    def key(self, unit: str, mode: str, keywords: bool = False) -> str:
        """The key whose models judge a query's hits: the keyword models for a keyword query where they were fitted,
        else the question models."""
        key = model_key(unit, mode, keywords)
        return key if key in self.models else model_key(unit, mode)

    def confidences(self, unit: str, mode: str, scores: Sequence[float], dense: Sequence[float | None],
                    lexical: Sequence[float | None], texts: Sequence[str],
                    unanswerable_prior: float = 0.0, keywords: bool = False) -> list[float] | None:
        """Confidence of each of one question's ranked hits (``keywords``: the query reads as keywords); None when no
        model was fitted for unit/mode."""
        many = self.confidences_of_hits(unit, mode, [(scores, dense, lexical, texts)], unanswerable_prior, [keywords])
        return None if many is None else many[0]

    def confidences_of_hits(self, unit: str, mode: str,
                            questions: Sequence[tuple[Sequence[float], Sequence[float | None], Sequence[float | None],
                                                      Sequence[str]]],
                            unanswerable_prior: float = 0.0,
                            keywords: Sequence[bool] | None = None) -> list[list[float]] | None:
        """``confidences`` of several questions' hits ((scores, dense, lexical, texts) each; ``keywords``: whether
        each query reads as keywords, default none), each set of models evaluated once over the hits it judges;
        None when no model was fitted for unit/mode."""
        if model_key(unit, mode) not in self.models:
            return None
        keys = [self.key(unit, mode, bool(k)) for k in (keywords or [False] * len(questions))]
        features = [hit_features(unit, *q) for q in questions]
        out: list[list[float]] = [[] for _ in questions]
        for key in dict.fromkeys(keys):
            rows = [i for i, k in enumerate(keys) if k == key and len(features[i])]
            if not rows:
                continue
            p = self.predict(key, np.concatenate([features[i] for i in rows]), unanswerable_prior).tolist()
            bounds = np.cumsum([0] + [len(features[i]) for i in rows]).tolist()
            for i, a, b in zip(rows, bounds[:-1], bounds[1:], strict=True):
                out[i] = [round(x, 4) for x in p[a:b]]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"version": CALIBRATION_VERSION, "model_fingerprint": self.model_fingerprint, "features": list(FEATURES),
                "labels": LABELS, "fitted_on": self.fitted_on,
                "models": {k: m.to_dict() for k, m in sorted(self.models.items())},
                "present": {k: m.to_dict() for k, m in sorted(self.present.items())}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibrator:
        if d.get("version") == 1:  # one model per unit/mode, fitted on half unanswerable lists
            d = {**d, "version": CALIBRATION_VERSION, "present": {}}
        check_header(d, CALIBRATION_VERSION, FEATURES)
        parts: dict[str, dict[str, LogisticModel]] = {"models": {}, "present": {}}
        for part, models in parts.items():
            for key, m in d[part].items():
                try:
                    models[key] = LogisticModel.from_dict(m)
                except (KeyError, TypeError, ValueError) as e:
                    raise ValueError(f"{part} {key!r}: {e}") from None
        if set(parts["present"]) - set(parts["models"]):
            raise ValueError(f"present models without a correctness model: {sorted(set(parts['present']) - set(parts['models']))}")
        return cls(parts["models"], str(d["model_fingerprint"]), dict(d.get("fitted_on", {})), parts["present"])


def load_calibrator(model_dir: str | Path, fingerprint: str) -> Calibrator | None:
    """The model's calibrator (``MODEL_DIR/calibration.json``), or None when it has none or it was fitted for other
    weights (a warning says so): hits then carry no confidence rather than a wrong one."""
    path = Path(model_dir) / CALIBRATION_NAME
    if not path.is_file():
        return None
    calibrator = Calibrator.load(path)
    if calibrator.model_fingerprint != fingerprint:
        log.warning("%s was fitted for model %s, not this one (%s); hits carry no confidence until it is refitted "
                    "with `spanseek train calibrate`", path, calibrator.model_fingerprint, fingerprint)
        return None
    return calibrator
