"""Phrase search over a token index, phrase -> passage -> document aggregation, and the lexical / hybrid modes.

One ``SearchParams`` (``core.params``) says what to search for. In ``dense`` mode, for a batch of questions the
searcher

1. runs MIPS over the token index with q_start (top-k start tokens) and with q_end (top-k end tokens), with the
   request's faiss parameters (nprobe) given per call, so concurrent requests never change the shared index;
2. completes each start candidate i with the best end j in [i, i + max_answer_tokens) of the same passage (score
   q_end . h_j), and each end candidate j with the best start before it, reading the neighbours' vectors from the
   ``vector_source``: ``fine`` (the fp16 store on disk, which also re-scores compressed-index candidates) or
   ``codes`` (decoded from the compressed codes); both sides are re-scored with those vectors;
3. deduplicates spans and ranks them by f(i, j) = q_start . h_i + q_end . h_j + b(j - i), where b is the model's
   span length bias (``EncoderConfig.length_bias``; zero when it has none);
4. for ``passage`` and ``doc`` units, scores each unit by the max over its phrases and deepens the search
   (k x 4) until ``top_k`` unique units are found or the index is exhausted. A unit is one entry of
   ``UNIT_OF_PASSAGE``: which unit each passage belongs to.

The ``lexical`` and ``hybrid`` modes also need the question texts and the index's BM25 part (``core.lexical``).
Every span of the top lexical passages is a candidate too, scored from the stored token vectors exactly as reading
comprehension scores them (each start token completed with its best end). ``lexical`` ranks units by BM25 (a
passage's best span is its answer). ``hybrid`` ranks phrases by dense score + w x the passage's BM25 score
z-normalised over the question's candidate passages (DenSPI-style), and passages or documents by fusing the two
legs' unit scores over the candidates of both: score fusion (``core.lexical.score_fuse``) or reciprocal rank fusion
(``rrf_fuse``). Hits carry both components.

Deleted documents and a request's ``filter`` are applied inside both legs (``core.selection``): faiss searches only
the allowed tokens and the other passages' BM25 scores are zeroed, so ``top_k`` is filled when enough units pass.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from spanseek.core.confidence import FEATURE_DEPTH, Calibrator
from spanseek.core.gpu import OnDevice
from spanseek.core.lexical import LexicalIndexMissing, missing_message, rrf_fuse, score_fuse, zscore
from spanseek.core.params import MODES, UNITS, Mode, SearchFilter, SearchParams, SearchParamsError, Unit
from spanseek.core.rerank import RERANK_DEPTH, rerank_features, rerank_scores
from spanseek.core.selection import Selection, search_ids, select
from spanseek.core.spans import (
    ANSWER_CANDIDATES,
    NO_SPAN,
    Spans,
    best_answer,
    best_span,
    length_scores,
    merge_by_answer,
    numpy_blas,
    span_scores,
)
from spanseek.core.store import PhraseIndex
from spanseek.core.text import FLAG_END, FLAG_START

__all__ = [
    "ANSWER_CANDIDATES", "NO_SPAN", "RC_DECODES", "UNITS", "UNIT_OF_PASSAGE", "Hit", "Hits", "SearchParams", "Searcher",
    "Spans", "Unit", "best_answer", "best_span", "length_scores", "merge_by_answer", "numpy_blas", "span_scores",
]

log = logging.getLogger(__name__)
RC_DECODES = ("answer", "span")
DEFAULT_PARAMS = SearchParams()
# phrase unit, hybrid: the lexical passages whose every span joins the dense candidates
LEXICAL_PASSAGES = 5
# passage/doc units, hybrid: each leg brings at least this many units to the fused candidate list (documents are
# few and large: the dense leg deepens its search until it has found this many)
FUSION_DEPTH = {"phrase": 0, "passage": 20, "doc": 5}

# A PQ index ranks by its codes, coarser than the fine store: it is asked for REFINE_FACTOR times the candidates,
# which the fine store scores again, and the best k of those go on to span completion (faiss's IndexRefine, with
# the fine store as the refinement). Deep unit searches (k beyond REFINE_MAX_FETCH / factor) are not refined; 2,048
# covers a passage search of top_k 32 (k = 8 top_k). At 2.15M tokens refining passage searches of top_k 20 raised
# acc@5 by 0.5 (all validation questions, paired) for about 1.6x the search time of that layout.
REFINE_FACTOR = 8
REFINE_MAX_FETCH = 2048
SELECTIONS_KEPT = 64  # distinct filters whose token selectors a Searcher keeps (each N / 8 bytes)
# unit -> the unit of every passage, (P,) int64; the phrase unit is the span itself (None). A new unit is one entry.
UNIT_OF_PASSAGE: dict[Unit, Callable[[PhraseIndex], np.ndarray] | None] = {
    "phrase": None,
    "passage": lambda index: np.arange(len(index.passages), dtype=np.int64),
    "doc": lambda index: np.asarray([p["doc"] for p in index.passages], dtype=np.int64),
}
assert tuple(UNIT_OF_PASSAGE) == UNITS


@dataclass(frozen=True)
class Hit:
    """One result: the best phrase (of the unit), its character span in its passage, and where it is from.

    ``dense`` and ``lexical`` are the two legs' scores behind ``score``: the dense span (or unit) score and the
    passage's (or document's) BM25 score; ``lexical`` is None in dense mode.
    """

    text: str
    score: float
    start: int
    end: int
    passage_id: int
    passage: str
    doc_id: str
    title: str
    paragraph: int = 0  # the passage's number within its document (0-based)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # the document's metadata from the corpus
    dense: float | None = None
    lexical: float | None = None
    confidence: float | None = None  # probability that the hit is correct (core.confidence); None: no calibrator

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in HIT_FIELDS}  # asdict's deep copy costs 10x, per hit


HIT_FIELDS = tuple(f.name for f in fields(Hit))


class Hits(list[Hit]):
    """One question's hits, best first; ``no_answer`` is True when the search abstained (``min_confidence``)."""

    def __init__(self, hits: Sequence[Hit] = (), no_answer: bool = False):
        super().__init__(hits)
        self.no_answer = no_answer


def non_overlapping(hits: Sequence[Hit], k: int) -> list[Hit]:
    """The first ``k`` hits (greedy, best first) whose phrases do not overlap a phrase kept before them: two hits
    overlap when they are in the same passage and their character ranges intersect."""
    kept: list[Hit] = []
    taken: dict[int, list[tuple[int, int]]] = {}
    for h in hits:
        spans = taken.setdefault(h.passage_id, [])
        if any(h.start < e and s < h.end for s, e in spans):
            continue
        spans.append((h.start, h.end))
        kept.append(h)
        if len(kept) == k:
            break
    return kept


def non_overlapping_spans(starts: np.ndarray, ends: np.ndarray, order: np.ndarray, k: int) -> np.ndarray:
    """``non_overlapping`` on spans: the first ``k`` of ``order`` (best first) whose token range does not intersect
    one kept before them. Token ids run through each passage in turn, so intersecting token ranges are exactly
    intersecting character ranges in one passage."""
    kept: list[int] = []
    for i in order.tolist():
        s, e = starts[i], ends[i]
        if any(s <= ends[j] and starts[j] <= e for j in kept):
            continue
        kept.append(i)
        if len(kept) == k:
            break
    return np.asarray(kept, dtype=np.int64)


def dedupe_spans(starts: np.ndarray, ends: np.ndarray, scores: np.ndarray, n_tokens: int) -> Spans:
    """Spans sorted by score (descending, stable), each (start, end) once, with its first (best) score."""
    order = np.argsort(-scores, kind="stable")
    starts, ends, scores = starts[order], ends[order], scores[order]
    _, first = np.unique(starts * n_tokens + ends, return_index=True)
    first.sort()
    return Spans(starts[first].astype(np.int64), ends[first].astype(np.int64), scores[first].astype(np.float32))


def refine(ids: np.ndarray, queries: np.ndarray, k: int, scores: Callable[[np.ndarray, np.ndarray], np.ndarray]
           ) -> np.ndarray:
    """(n, k) of (n, m) candidate ids (-1: none), re-ranked by ``scores(ids, (d, 1) query)`` (the inner product
    of their vectors with the query): the best ``k`` first, -1 after the real ones."""
    out = np.full((len(ids), k), -1, dtype=np.int64)
    for row, (cand, q) in enumerate(zip(ids, queries, strict=True)):
        cand = cand[cand >= 0]
        if len(cand):
            order = np.argsort(-scores(cand, q[:, None])[:, 0], kind="stable")[:k]
            out[row, : len(order)] = cand[order]
    return out


def first_per_unit(units: np.ndarray) -> np.ndarray:
    """Positions of each unit's first occurrence in ``units``, in order of appearance."""
    _, first = np.unique(units, return_index=True)
    return np.sort(first)


class Searcher:
    """Batched phrase/passage/document search over a PhraseIndex, in dense, lexical or hybrid mode.

    ``encoder`` (a core.encoding.QuestionEncoder) is needed only for ``search``; ``search_vectors`` takes
    q_start / q_end (and the question texts, for the lexical leg) directly. ``vector_source`` (``fine`` |
    ``codes``; default: the index's) is where span completion reads neighbour vectors, unless the request's
    ``SearchParams`` names one. ``length_bias`` (default: the encoder's model config's, else the index's) is added
    to every span by its length. The fusion defaults (mode, fusion, weights) come from the index's manifest.
    ``calibrator`` (``core.confidence``; ``open_searcher`` loads the model's) gives hits their confidence.
    ``on_device`` (``core.gpu.place``) holds the parts of the index that are searched and scored on a GPU.
    """

    def __init__(
        self, index: PhraseIndex, encoder=None, max_answer_tokens: int | None = None, vector_source: str | None = None,
        length_bias: Sequence[float] | None = None, calibrator: Calibrator | None = None,
        on_device: OnDevice | None = None,
    ):
        self.index = index
        self.on_device = on_device
        self.calibrator = calibrator
        self.encoder = encoder
        self.max_answer_tokens = max_answer_tokens or index.encoder_config.max_answer_tokens
        if length_bias is None:  # the model's (a QSFT'd or refitted model may differ from the one that built the index)
            config = getattr(getattr(encoder, "model", None), "config", None) or index.encoder_config
            length_bias = config.length_bias
        self.length_bias = tuple(length_bias)
        if self.length_bias and len(self.length_bias) != self.max_answer_tokens:
            log.warning("the length bias has %d entries for spans of up to %d tokens; %s", len(self.length_bias),
                        self.max_answer_tokens, "its last entry serves the longer spans"
                        if len(self.length_bias) < self.max_answer_tokens else "the extra entries are unused")
        self.vector_source = vector_source or index.vector_source
        self._vector_reader(self.vector_source)  # a bad source fails here, not at the first search
        self.refine_factor = REFINE_FACTOR if index.manifest.spec.pq_m is not None else 1
        self._unit_of_passage = {u: f(index) for u, f in UNIT_OF_PASSAGE.items() if f is not None}
        self._unit_count = {u: len(np.unique(m)) for u, m in self._unit_of_passage.items()}
        self._selections: dict[SearchFilter | None, Selection] = {}  # recent filters' selections, oldest first
        self.lexical = index.lexical
        if self.lexical is None:
            log.warning("%s", missing_message(index.dir))
        fusion = index.fusion_defaults
        self.default_mode: Mode = fusion["default_mode"] if self.lexical is not None else "dense"
        self.default_fusion = fusion["fusion"]
        self.lexical_weights: dict[str, float] = dict(fusion["weights"])
        # hybrid phrases are re-ranked with these weights (core.rerank); None: ranked by the fused score alone
        self.phrase_rerank: dict[str, float] | None = fusion.get("phrase_rerank") or None

    def selection(self, flt: SearchFilter | None) -> Selection:
        """``_select`` of ``flt``, kept for the ``SELECTIONS_KEPT`` most recent filters. A plain dict, not an
        lru_cache of a bound method, so a Searcher is freed as soon as it is unused (no reference cycle)."""
        sel = self._selections.pop(flt, None)
        if sel is None:
            sel = self._select(flt)
        self._selections[flt] = sel  # most recent last
        while len(self._selections) > SELECTIONS_KEPT:
            del self._selections[next(iter(self._selections))]
        return sel

    def _select(self, flt: SearchFilter | None) -> Selection:
        """The passages a search with filter ``flt`` may return (live ones that pass it); see ``core.selection``."""
        return select(self.index, flt, self._unit_of_passage)

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The modes this index can serve: all three with a lexical part, else only ``dense``."""
        return MODES if self.lexical is not None else ("dense",)

    def check_mode(self, params: SearchParams) -> Mode:
        """The mode ``params`` asks for (or the default); raises LexicalIndexMissing when the index cannot serve it,
        and SearchParamsError when ``min_confidence`` is asked of a searcher with no calibrator for the unit/mode."""
        mode = params.mode or self.default_mode
        if mode != "dense" and self.lexical is None:
            raise LexicalIndexMissing(f"mode={mode}: {missing_message(self.index.dir)}")
        if params.min_confidence is not None and not self._calibrated(params, mode):
            raise SearchParamsError(f"min_confidence needs a calibrated model (unit={params.unit}, mode={mode}); this "
                                    "model has no calibration for it (or for this fusion and lexical weight): fit one "
                                    "with `spanseek train calibrate`")
        return mode

    def _calibrated(self, params: SearchParams, mode: Mode) -> bool:
        """Whether the calibrator applies to this request: its unit, mode and (hybrid) fusion and lexical weight."""
        if self.calibrator is None:
            return False
        weight = params.lexical_weight if params.lexical_weight is not None else self.lexical_weights[params.unit]
        return self.calibrator.applies(params.unit, mode, params.fusion or self.default_fusion, weight,
                                       self.phrase_rerank)

    def search(
        self, questions: list[str], params: SearchParams = DEFAULT_PARAMS, timings: dict[str, float] | None = None,
    ) -> list[list[Hit]]:
        """Encode questions and search; ``timings`` (if given) receives encode/search/aggregate seconds."""
        if self.encoder is None:
            raise ValueError("this Searcher has no question encoder; use search_vectors")
        t0 = time.perf_counter()
        q_start, q_end = self.encoder.encode(questions)
        if timings is not None:
            timings["encode"] = time.perf_counter() - t0
        return self.search_vectors(q_start, q_end, params, timings, questions)

    def search_vectors(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        params: SearchParams = DEFAULT_PARAMS,
        timings: dict[str, float] | None = None,
        questions: Sequence[str] | None = None,
    ) -> list[list[Hit]]:
        """q_start, q_end: (B, d) float32 -> per question, up to ``params.top_k`` hits of ``params.unit``.

        ``questions`` (the B texts) are needed by the lexical and hybrid modes. ``merge_answers`` (phrase unit
        only): phrases that read the same once normalised ("the Sun", "Sun") are one answer, scored log sum exp
        over its phrases among the best max(64, 4 top_k); each hit is the best phrase of one answer. Summing is the
        Bayes decision for exact match when scores are log-probabilities up to a constant, which is what the
        losses' softmaxes train.

        Phrase hits do not overlap one another unless ``allow_overlap`` (``non_overlapping``). Each hit
        carries ``confidence`` when the searcher has a calibrator for the unit and mode; a question whose best hit
        is below ``min_confidence`` gets no hits and ``no_answer`` (each list returned is a ``Hits``). The hits are
        ranked ``offset + top_k`` deep (at least ``FEATURE_DEPTH[unit]``, which the confidence features read) and the
        page ``[offset, offset + top_k)`` is returned.
        """
        want = params.offset + params.top_k
        depth = max(want, FEATURE_DEPTH[params.unit]) if self.calibrator is not None else want
        mode = self.check_mode(params)
        raw = dataclasses.replace(params, top_k=depth, offset=0, min_confidence=None)
        ranked = self._ranked(q_start, q_end, raw, timings, questions)
        if params.unit == "phrase" and not params.allow_overlap and mode != "lexical":
            # fewer non-overlapping phrases than asked: deepen the dense candidates while that finds more
            pending, k = [b for b, hits in enumerate(ranked) if len(hits) < depth], 4 * depth
            while pending and k <= 64 * depth:
                deep = dataclasses.replace(raw, top_k=k)
                found = self._ranked(q_start[pending], q_end[pending], deep, timings,
                                     None if questions is None else [questions[b] for b in pending])
                still = []
                for b, hits in zip(pending, found, strict=True):
                    more = len(hits) > len(ranked[b])
                    ranked[b] = hits[:depth] if more else ranked[b]
                    if more and len(ranked[b]) < depth:
                        still.append(b)
                pending, k = still, 4 * k
        t0 = time.perf_counter()
        out: list[list[Hit]] = [self._page(hits, params, mode) for hits in ranked]
        _add(timings, "aggregate", time.perf_counter() - t0)
        return out

    def _page(self, hits: list[Hit], params: SearchParams, mode: Mode) -> Hits:
        """One question's ranked hits -> confidences, abstention, then the page [offset, offset + top_k)."""
        conf = None
        if self.calibrator is not None and self._calibrated(params, mode):
            conf = self.calibrator.confidences(params.unit, mode, [h.score for h in hits], [h.dense for h in hits],
                                               [h.lexical for h in hits], [h.text for h in hits])
        if conf is not None:
            hits = [dataclasses.replace(h, confidence=c) for h, c in zip(hits, conf, strict=True)]
        if params.min_confidence is not None and (not hits or (hits[0].confidence or 0.0) < params.min_confidence):
            return Hits(no_answer=True)
        return Hits(hits[params.offset : params.offset + params.top_k])

    def _ranked(
        self, q_start: np.ndarray, q_end: np.ndarray, params: SearchParams, timings: dict[str, float] | None,
        questions: Sequence[str] | None,
    ) -> list[list[Hit]]:
        """The raw ranking: top_k hits per question (phrases overlapping a better one dropped unless
        ``allow_overlap``), no confidence, offset ignored."""
        if params.merge_answers:  # every span of an answer counts, overlapping or not; then one hit per answer
            wide = dataclasses.replace(params, top_k=max(ANSWER_CANDIDATES, 4 * params.top_k), merge_answers=False,
                                       allow_overlap=True)
            many = self._ranked(q_start, q_end, wide, timings, questions)
            t0 = time.perf_counter()
            merged = [[dataclasses.replace(hits[r], score=score) for r, score in
                       merge_by_answer([h.text for h in hits], [h.score for h in hits])] if hits else []
                      for hits in many]
            merged = [m[: params.top_k] if params.allow_overlap else non_overlapping(m, params.top_k) for m in merged]
            _add(timings, "aggregate", time.perf_counter() - t0)
            return merged
        mode = self.check_mode(params)
        if mode != "dense" and (questions is None or len(questions) != len(q_start)):
            raise ValueError(f"mode={mode} needs the question texts, one per row of q_start")
        unit, top_k = params.unit, params.top_k
        max_tokens = params.max_answer_tokens or self.max_answer_tokens
        vectors = self._vector_reader(params.vector_source or self.vector_source)
        q_start = np.ascontiguousarray(q_start, dtype=np.float32)
        q_end = np.ascontiguousarray(q_end, dtype=np.float32)
        sel = self.selection(params.filter)
        if sel.empty:
            return [[] for _ in range(len(q_start))]
        if mode == "dense":
            spans = self._dense_spans(q_start, q_end, unit, top_k, max_tokens, vectors, params.nprobe, timings, sel)
            t0 = time.perf_counter()
            hits = [self._hits(sp, unit, top_k, params.allow_overlap) for sp in spans]
            _add(timings, "aggregate", time.perf_counter() - t0)
            return hits
        depth = max(top_k, FUSION_DEPTH[unit])
        dense = ([None] * len(q_start) if mode == "lexical" else
                 self._dense_spans(q_start, q_end, unit, depth, max_tokens, vectors, params.nprobe, timings, sel))
        assert self.lexical is not None and questions is not None
        t0 = time.perf_counter()
        lexical = self.lexical.scores(questions)  # (B, P)
        if sel.passages is not None:  # only scores above zero count as matches
            lexical = np.where(sel.passages[None, :], lexical, 0)
        lex_unit = "passage" if unit == "phrase" else unit
        n_lex = top_k if mode == "lexical" else LEXICAL_PASSAGES if unit == "phrase" else depth
        hits = []
        with numpy_blas().limit(limits=1):
            for b, sp in enumerate(dense):
                units, unit_scores, passages = self._lexical_units(lexical[b], lex_unit, n_lex)
                extra = self._passage_spans(passages, q_start[b], q_end[b], max_tokens, vectors)
                if mode == "lexical":
                    hits.append(self._lexical_hits(extra, unit_scores, passages, top_k))
                else:
                    assert sp is not None
                    both = dedupe_spans(np.concatenate([sp.starts, extra.starts]), np.concatenate([sp.ends, extra.ends]),
                                        np.concatenate([sp.scores, extra.scores]), self.index.num_tokens)
                    hits.append(self._fused_hits(both, lexical[b], unit, params, questions[b]))
        _add(timings, "search", time.perf_counter() - t0)
        return hits

    # --- dense leg ----------------------------------------------------------------------------------

    def _dense_spans(self, q_start: np.ndarray, q_end: np.ndarray, unit: Unit, top_k: int, max_tokens: int, vectors,
                     nprobe: int | None, timings: dict[str, float] | None, sel: Selection) -> list[Spans]:
        """Candidate spans per question from MIPS over the tokens ``sel`` allows, deepened until ``top_k`` units
        are among them (or no more)."""
        ntotal = self.index.faiss.ntotal
        k = min(ntotal, max(32, 2 * top_k) if unit == "phrase" else max(64, 8 * top_k))
        # a unit search deepens until top_k units are found, or every unit it may return (not every token)
        want = min(top_k, sel.unit_count.get(unit, top_k))
        pending = np.arange(len(q_start))
        spans: list[Spans] = [Spans(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))] * len(q_start)
        t_search = t_agg = 0.0
        while len(pending):
            t0 = time.perf_counter()
            found = self._spans(q_start[pending], q_end[pending], k, max_tokens, vectors, nprobe, sel)
            t1 = time.perf_counter()
            still = []
            for b, sp in zip(pending.tolist(), found, strict=True):
                spans[b] = sp
                if unit != "phrase" and k < ntotal and len(np.unique(self._unit_ids(sp, unit))) < want:
                    still.append(b)
            t_search += t1 - t0
            t_agg += time.perf_counter() - t1
            pending = np.asarray(still, dtype=np.int64)
            k = min(ntotal, k * 4)
        _add(timings, "search", t_search)
        _add(timings, "aggregate", t_agg)
        return spans

    def _vector_reader(self, source: str):
        """The PhraseIndex method that reads neighbour vectors for ``source``."""
        if source == "codes":
            if self.index.codes is None:
                self.index.code_vectors(np.zeros(0, np.int64))  # raises the index's explanation
            return self.index.code_vectors
        if source != "fine":
            raise ValueError(f"vector_source must be 'fine' or 'codes', got {source!r}")
        return self.index.token_vectors

    def _spans(self, q_start: np.ndarray, q_end: np.ndarray, k: int, max_tokens: int, vectors, nprobe: int | None,
               sel: Selection) -> list[Spans]:
        if self.index.faiss.ntotal == 0:
            empty = np.zeros(0, np.int64)
            return [Spans(empty, empty, np.zeros(0, np.float32)) for _ in range(len(q_start))]
        # One faiss call for both sides: a flat index streams its vectors once for all 2B queries
        queries = np.concatenate([q_start, q_end])
        device = self.on_device.index if self.on_device is not None else None
        fetch = min(self.index.faiss.ntotal, k * self.refine_factor)
        if self.refine_factor > 1 and vectors == self.index.token_vectors and fetch > k and fetch <= REFINE_MAX_FETCH:
            ids = refine(search_ids(self.index, queries, fetch, nprobe, sel, device), queries, k,
                         lambda t, q: self._scores(vectors, t, q))
        else:
            ids = search_ids(self.index, queries, k, nprobe, sel, device)  # (2B, k)
        start_ids, end_ids = ids[: len(q_start)], ids[len(q_start) :]
        with numpy_blas().limit(limits=1):
            return [
                self._complete(start_ids[b], end_ids[b], q_start[b], q_end[b], max_tokens, vectors)
                for b in range(len(q_start))
            ]

    def _complete(
        self, start_ids: np.ndarray, end_ids: np.ndarray, qs: np.ndarray, qe: np.ndarray, max_tokens: int, vec
    ) -> Spans:
        """Span completion in both directions for one question; returns deduplicated spans by score."""
        flags = self.index.token_flags
        n = self.index.num_tokens
        s = start_ids[start_ids >= 0]
        s = s[flags[s] & FLAG_START > 0]
        e = end_ids[end_ids >= 0]
        e = e[flags[e] & FLAG_END > 0]
        offs = np.arange(max_tokens)
        # forward: start s, ends s .. s+max_tokens-1 in the same passage
        fwd = s[:, None] + offs[None, :]  # (m, max_tokens)
        ptok = self.index.passage_tokens
        fwd_ok = fwd < ptok[self.index.token_passage[s] + 1][:, None]  # end id of each start's passage
        fwd = np.minimum(fwd, n - 1)
        fwd_ok &= flags[fwd] & FLAG_END > 0
        # backward: end e, starts e-max_tokens+1 .. e in the same passage
        bwd = e[:, None] - offs[None, :]  # (m', max_tokens)
        bwd_ok = bwd >= ptok[self.index.token_passage[e]][:, None]
        bwd = np.maximum(bwd, 0)
        bwd_ok &= flags[bwd] & FLAG_START > 0

        # Neighbour windows overlap, so each distinct token is read and scored once: one batched read, then
        # its start and end score in one (U, d) @ (d, 2) product, scattered back to every place it is used.
        m, m2 = len(s), len(e)
        ids = np.concatenate([s, e, fwd.reshape(-1), bwd.reshape(-1)])  # (m + m' + (m + m') max_tokens,)
        uniq, inverse = np.unique(ids, return_inverse=True)
        sc = self._scores(vec, uniq, np.stack([qs, qe], axis=1))[inverse]  # (len(ids), 2): start score, end score
        s_score = sc[:m, 0]  # (m,)
        e_score = sc[m : m + m2, 1]
        bias = length_scores(self.length_bias, max_tokens)  # column k of fwd/bwd is a span of k + 1 tokens
        fwd_end = np.where(fwd_ok, sc[m + m2 : m + m2 + m * max_tokens, 1].reshape(m, max_tokens) + bias, -np.inf)  # (m, max_tokens)
        bwd_start = np.where(bwd_ok, sc[m + m2 + m * max_tokens :, 0].reshape(m2, max_tokens) + bias, -np.inf)  # (m', max_tokens)
        fj = fwd_end.argmax(axis=1)
        bi = bwd_start.argmax(axis=1)
        starts = np.concatenate([s, bwd[np.arange(len(e)), bi]])
        ends = np.concatenate([fwd[np.arange(len(s)), fj], e])
        scores = np.concatenate(
            [s_score + fwd_end[np.arange(len(s)), fj], e_score + bwd_start[np.arange(len(e)), bi]]
        ).astype(np.float32)
        ok = np.isfinite(scores)  # the same span from both sides is kept once
        return dedupe_spans(starts[ok], ends[ok], scores[ok], n)

    def _scores(self, vec, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(len(ids), q): the vectors ``vec`` reads for ``ids`` dot each column of ``queries`` (d, q); on the GPU
        when the fine vectors are held there."""
        if vec == self.index.token_vectors:
            if self.on_device is not None and self.on_device.vectors is not None:
                return self.on_device.vectors.scores(ids, queries)
            return self.index.token_scores(ids, queries)
        return vec(ids) @ queries

    # --- lexical leg and fusion -------------------------------------------------------------------------

    def _lexical_units(self, scores: np.ndarray, unit: Unit, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One question's top ``n`` units by BM25 (a unit scores its best passage's score; only matching ones):
        (units, their scores, their best passages), best first, ties by passage id."""
        if unit == "passage":
            n = min(n, len(scores))
            top = np.argpartition(-scores, n - 1)[:n] if n < len(scores) else np.arange(len(scores))
            top = top[np.lexsort((top, -scores[top]))]
        else:
            top = np.argsort(-scores, kind="stable")
            top = top[first_per_unit(self._unit_of_passage[unit][top])][:n]
        top = top[scores[top] > 0]
        return self._unit_of_passage[unit][top], scores[top], top

    def _passage_spans(self, passages: np.ndarray, qs: np.ndarray, qe: np.ndarray, max_tokens: int, vec) -> Spans:
        """Every start token of ``passages`` completed with its best end: reading comprehension's exact best span
        of each passage is among them (``best_span``), with the same score."""
        ptok = self.index.passage_tokens
        lengths = ptok[passages + 1] - ptok[passages]
        if not len(passages) or not lengths.sum():
            return Spans(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
        ids = np.concatenate([np.arange(ptok[p], ptok[p + 1]) for p in passages])  # (n,) token ids
        n = len(ids)
        sc = self._scores(vec, ids, np.stack([qs, qe], axis=1))  # (n, 2): start score, end score
        flags = self.index.token_flags[ids]
        stop = np.repeat(np.cumsum(lengths), lengths)  # (n,) local end of each token's passage
        fwd = np.arange(n)[:, None] + np.arange(max_tokens)[None, :]  # (n, max_tokens) local end positions
        ok = (fwd < stop[:, None]) & (flags[:, None] & FLAG_START > 0)
        fwd = np.minimum(fwd, n - 1)
        ok &= flags[fwd] & FLAG_END > 0
        end_scores = np.where(ok, sc[fwd, 1] + length_scores(self.length_bias, max_tokens), -np.inf)
        j = end_scores.argmax(axis=1)  # ties: the shortest span, as best_span
        rows = np.arange(n)
        scores = (sc[:, 0] + end_scores[rows, j]).astype(np.float32)
        keep = np.isfinite(scores)
        return dedupe_spans(ids[keep], ids[fwd[rows, j]][keep], scores[keep], self.index.num_tokens)

    def _lexical_hits(self, spans: Spans, unit_scores: np.ndarray, passages: np.ndarray, top_k: int) -> list[Hit]:
        """Lexical mode: units in BM25 order, each answered by the best span of its best passage."""
        span_passage = self.index.token_passage[spans.starts]
        best = {int(span_passage[i]): int(i) for i in first_per_unit(span_passage)}  # spans are sorted
        hits = []
        for p, score in zip(passages.tolist(), unit_scores.tolist(), strict=True):
            i = best.get(p)
            if i is None:  # no valid span in the passage (no token may start or end a phrase)
                continue
            hits.append(self._hit(int(spans.starts[i]), int(spans.ends[i]), score, float(spans.scores[i]), score))
            if len(hits) == top_k:
                break
        return hits

    def _fused_hits(self, spans: Spans, lexical: np.ndarray, unit: Unit, params: SearchParams, question: str
                    ) -> list[Hit]:
        """Hybrid: one question's candidate spans (dense and lexical) ranked with the lexical leg fused in; phrases
        then re-ranked (``core.rerank``) when the index's fusion defaults carry re-ranking weights."""
        if not len(spans.scores):
            return []
        weight = params.lexical_weight if params.lexical_weight is not None else self.lexical_weights[unit]
        passages = self.index.token_passage[spans.starts]
        if unit == "phrase":
            cand, where = np.unique(passages, return_inverse=True)  # the candidate passages, and each span's
            fused = spans.scores + weight * zscore(lexical[cand])[where]
            order = np.argsort(-fused, kind="stable")
            scores = fused[order]
            if self.phrase_rerank:  # the head of the fused list re-ranked; the rest follows, its scores shifted
                head, tail = order[:RERANK_DEPTH], order[RERANK_DEPTH:]
                texts = [self._span_text(int(spans.starts[i]), int(spans.ends[i])) for i in head]
                score = rerank_scores(rerank_features(fused[head], texts, question), self.phrase_rerank)
                new = np.argsort(-score, kind="stable")
                order = np.concatenate([head[new], tail])
                scores = np.concatenate([score[new], fused[tail] - fused[head[-1]] + score.min()])
            pos = (np.arange(min(params.top_k, len(order))) if params.allow_overlap else
                   non_overlapping_spans(spans.starts[order], spans.ends[order], np.arange(len(order)), params.top_k))
            return [self._hit(int(spans.starts[i]), int(spans.ends[i]), float(sc), float(spans.scores[i]),
                              float(lexical[passages[i]])) for i, sc in zip(order[pos], scores[pos], strict=True)]
        unit_of_passage = self._unit_of_passage[unit]
        first = first_per_unit(unit_of_passage[passages])  # each candidate unit's best span (spans are sorted)
        dense = spans.scores[first].astype(np.float64)
        units = unit_of_passage[passages[first]]
        if unit == "passage":
            lex = lexical[units].astype(np.float64)
        else:  # a document's lexical score is its best passage's
            lex = np.zeros(self._unit_count[unit])
            np.maximum.at(lex, unit_of_passage, lexical)
            lex = lex[units]
        fusion = params.fusion or self.default_fusion
        fused = score_fuse(dense, lex, weight) if fusion == "score" else rrf_fuse(dense, lex)
        pick = np.argsort(-fused, kind="stable")[: params.top_k]
        return [self._hit(int(spans.starts[first[i]]), int(spans.ends[first[i]]), float(fused[i]), float(dense[i]),
                          float(lex[i])) for i in pick]

    # --- units and hits -----------------------------------------------------------------------------

    def _unit_ids(self, sp: Spans, unit: Unit) -> np.ndarray:
        return self._unit_of_passage[unit][self.index.token_passage[sp.starts]]

    def _hits(self, sp: Spans, unit: Unit, top_k: int, allow_overlap: bool = True) -> list[Hit]:
        if unit == "phrase":  # spans are sorted
            pick = (np.arange(min(top_k, len(sp.scores))) if allow_overlap else
                    non_overlapping_spans(sp.starts, sp.ends, np.arange(len(sp.scores)), top_k))
        else:  # spans are sorted, so a unit's first span is its best one: score = max over its phrases
            pick = first_per_unit(self._unit_ids(sp, unit))[:top_k]
        return [self._hit(int(sp.starts[i]), int(sp.ends[i]), float(sp.scores[i]), float(sp.scores[i])) for i in pick]

    def _span_text(self, start_tok: int, end_tok: int) -> str:
        idx = self.index
        text = idx.passages[int(idx.token_passage[start_tok])]["text"]
        return text[int(idx.token_offsets[start_tok, 0]) : int(idx.token_offsets[end_tok, 1])]

    def _hit(self, start_tok: int, end_tok: int, score: float, dense: float | None = None,
             lexical: float | None = None) -> Hit:
        idx = self.index
        p = int(idx.token_passage[start_tok])
        passage = idx.passages[p]
        doc = idx.docs[passage["doc"]]
        a, b = int(idx.token_offsets[start_tok, 0]), int(idx.token_offsets[end_tok, 1])
        return Hit(
            text=passage["text"][a:b], score=score, start=a, end=b, passage_id=p,
            passage=passage["text"], doc_id=doc["id"], title=doc["title"], paragraph=int(passage["para"]),
            meta=doc.get("meta", {}),
            dense=dense, lexical=lexical,
        )

    def passage_best_span(
        self, passage: int, q_start: np.ndarray, q_end: np.ndarray, max_answer_tokens: int | None = None,
        decode: str = "span",
    ) -> Hit:
        """Reading comprehension inside one passage (exact, brute force): ``decode="span"`` returns the best span
        (``best_span``), ``"answer"`` the best span of the most probable answer string (``best_answer``), scored
        log sum exp over the answer's spans."""
        if decode not in RC_DECODES:
            raise ValueError(f"decode must be one of {RC_DECODES}, got {decode!r}")
        a, b = self.index.passage_range(passage)
        vecs = self.index.token_vectors(np.arange(a, b))
        args = (vecs @ q_start, vecs @ q_end, self.index.token_flags[a:b], max_answer_tokens or self.max_answer_tokens)
        try:
            if decode == "span":
                i, j, score = best_span(*args, self.length_bias)
            else:
                offsets = self.index.token_offsets[a:b]
                text = self.index.passages[passage]["text"]
                i, j, score = best_answer(*args, lambda x, y: text[offsets[x, 0] : offsets[y, 1]], self.length_bias)
        except ValueError as e:
            raise ValueError(f"passage {passage}: {e}") from None
        return self._hit(a + i, a + j, score, score)


def _add(timings: dict[str, float] | None, stage: str, seconds: float) -> None:
    if timings is not None:
        timings[stage] = timings.get(stage, 0.0) + seconds
