"""Phrase search over a token index, and phrase -> passage -> document aggregation.

For a batch of questions the searcher

1. runs MIPS over the token index with q_start (top-k start tokens) and with q_end (top-k end tokens);
2. completes each start candidate i with the best end j in [i, i + L) of the same passage (score q_end . h_j),
   and each end candidate j with the best start in (j - L, j] (score q_start . h_i), reading the neighbours'
   vectors from the ``vector_source``: ``fine`` (the fp16 store on disk, which also re-scores compressed-index
   candidates) or ``codes`` (decoded from the compressed codes); both sides are re-scored with those vectors;
3. deduplicates spans and ranks them by f(i, j) = q_start . h_i + q_end . h_j + b(j - i), where b is the model's
   span length bias (``EncoderConfig.length_bias``; zero when it has none);
4. for ``passage`` and ``doc`` units, scores each unit by the max over its phrases and deepens the search
   (k x 4) until ``top_k`` unique units are found or the index is exhausted.

``best_span`` is the brute-force best span over one token range (the tests' oracle, and reading comprehension's
``decode="span"``); reading comprehension decodes with ``best_answer`` by default, which sums the probability of
spans that give the same answer string.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spanseek.core.metrics import normalize_answer
from spanseek.core.store import PhraseIndex
from spanseek.core.text import FLAG_END, FLAG_START

log = logging.getLogger(__name__)
Unit = Literal["phrase", "passage", "doc"]
UNITS: tuple[Unit, ...] = ("phrase", "passage", "doc")
RC_DECODES = ("answer", "span")
NO_SPAN = "no valid span: the passage is empty, or none of its tokens may start or end a phrase"
ANSWER_CANDIDATES = 64  # spans best_answer sums over: the softmax mass past them is negligible


@dataclass(frozen=True)
class Hit:
    """One result: the best phrase (of the unit), its character span in its passage, and where it is from."""

    text: str
    score: float
    start: int
    end: int
    passage_id: int
    passage: str
    doc_id: str
    title: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # the document's metadata from the corpus

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in HIT_FIELDS}  # asdict's deep copy costs 10x, per hit


HIT_FIELDS = tuple(f.name for f in fields(Hit))


@dataclass(frozen=True)
class Spans:
    """Candidate spans of one question, sorted by score (descending). Arrays of equal length."""

    starts: np.ndarray
    ends: np.ndarray
    scores: np.ndarray


@functools.cache
def numpy_blas():
    """A threadpoolctl controller of numpy's own BLAS library (not faiss's, not torch's).

    Span completion runs small (U, d) @ (d, 2) products under ``numpy_blas().limit(limits=1)``. Left multi-threaded,
    numpy's OpenBLAS wakes its worker threads for them, and they busy-wait on the cores long after: measured on
    the demo index (2 cores), the next faiss search of a 32-question batch took 80 ms instead of 41.
    """
    from threadpoolctl import ThreadpoolController

    # numpy wheels vendor their BLAS next to the package: site-packages/numpy.libs (Linux), numpy/.dylibs (macOS)
    package = Path(np.__file__).resolve().parent
    homes = (str(package) + os.sep, str(package.with_name("numpy.libs")) + os.sep)
    controller = ThreadpoolController()
    mine = [
        c.filepath for c in controller.lib_controllers
        if c.user_api == "blas" and str(Path(c.filepath).resolve()).startswith(homes)
    ]
    if not mine:  # numpy on a system/conda BLAS: nothing to limit here (its threads may still spin)
        log.warning("numpy's BLAS library was not found among %s; span completion runs it unlimited",
                    [c.filepath for c in controller.lib_controllers if c.user_api == "blas"])
    return controller.select(filepath=mine)


def length_scores(length_bias: Sequence[float] | None, L: int) -> np.ndarray:
    """(L,) score added to a span of k + 1 tokens: the model's length bias (its last entry repeated past its end, for
    a longer ``max_answer_tokens`` than it was fitted for), or zeros when the model has none."""
    if not length_bias:
        return np.zeros(L, np.float32)
    b = np.asarray(length_bias, dtype=np.float32)
    return b[:L] if L <= len(b) else np.concatenate([b, np.full(L - len(b), b[-1], np.float32)])


def span_scores(
    start_scores: np.ndarray, end_scores: np.ndarray, flags: np.ndarray, max_answer_tokens: int,
    length_bias: Sequence[float] | None = None,
) -> np.ndarray:
    """(n, n) score of every span (i, j): start_scores[i] + end_scores[j] + the length bias of j - i; -inf where the
    span is not valid (j < i, j - i >= L, i not a possible start or j not a possible end)."""
    n = len(start_scores)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    length = j - i
    valid = (length >= 0) & (length < max_answer_tokens)
    valid &= (flags[:, None] & FLAG_START > 0) & (flags[None, :] & FLAG_END > 0)
    bias = length_scores(length_bias, max_answer_tokens)[np.clip(length, 0, max_answer_tokens - 1)]
    return np.where(valid, start_scores[:, None] + end_scores[None, :] + bias, -np.inf)


def best_span(
    start_scores: np.ndarray, end_scores: np.ndarray, flags: np.ndarray, max_answer_tokens: int,
    length_bias: Sequence[float] | None = None,
) -> tuple[int, int, float]:
    """Brute force: the valid span (i, j), i <= j < i + L, maximising start_scores[i] + end_scores[j] (+ length bias);
    ties go to the smallest (i, j). Raises ValueError when there is no valid span."""
    total = span_scores(start_scores, end_scores, flags, max_answer_tokens, length_bias)
    n = len(start_scores)
    if not np.isfinite(total).any():
        raise ValueError(NO_SPAN)
    flat = int(np.argmax(total))
    return flat // n, flat % n, float(total.flat[flat])


def best_answer(
    start_scores: np.ndarray, end_scores: np.ndarray, flags: np.ndarray, max_answer_tokens: int,
    text_of: Callable[[int, int], str], length_bias: Sequence[float] | None = None,
    candidates: int = ANSWER_CANDIDATES,
) -> tuple[int, int, float]:
    """The span whose answer string is most probable: the Bayes decision for exact match.

    The span scores' softmax over a passage is what the span-level loss trains, so a span's probability is
    exp(score) / Z. Exact match compares normalised strings (``core.metrics.normalize_answer``), and several spans
    often give the same one ("the Sun" and "Sun", or a name said twice), so the probability of an answer is the
    sum over its spans. Among the ``candidates`` best spans this returns the best span of the answer with the
    largest sum, scored log sum exp(score) of its spans (never below its best span's score).
    """
    total = span_scores(start_scores, end_scores, flags, max_answer_tokens, length_bias).ravel()
    n = len(start_scores)
    k = min(candidates, int(np.isfinite(total).sum()))
    if k <= 1:
        return best_span(start_scores, end_scores, flags, max_answer_tokens, length_bias)
    top = np.sort(np.argpartition(-total, k - 1)[:k])  # ascending, so ties rank as in best_span
    top = top[np.argsort(-total[top], kind="stable")]  # best first, so an answer's first span is its best one
    r, score = merge_by_answer([text_of(int(f) // n, int(f) % n) for f in top], total[top])[0]
    return int(top[r]) // n, int(top[r]) % n, score


def merge_by_answer(texts: Sequence[str], scores: Sequence[float] | np.ndarray) -> list[tuple[int, float]]:
    """Group candidates, given best first, by their normalised text (``core.metrics.normalize_answer``).

    Returns one (index of the answer's best candidate, log sum exp of its candidates' scores) per answer, best
    answer first; ties keep the order of the answers' best candidates. Candidates that normalise to nothing
    (an article, a punctuation mark) are never merged: each stays on its own.
    """
    s = np.asarray(scores, dtype=np.float64)
    finite = s[np.isfinite(s)]
    top = float(finite.max()) if len(finite) else 0.0
    prob = np.exp(s - top)
    mass: dict[str, float] = {}
    first: dict[str, int] = {}
    for r, text in enumerate(texts):
        key = normalize_answer(text) or f"\x00{r}"  # an empty answer is a group of one
        mass[key] = mass.get(key, 0.0) + float(prob[r])
        first.setdefault(key, r)
    order = sorted(mass, key=lambda a: (-mass[a], first[a]))
    with np.errstate(divide="ignore"):  # an answer of -inf scores has mass 0: log 0 = -inf
        return [(first[a], top + float(np.log(mass[a]))) for a in order]


class Searcher:
    """Batched phrase/passage/document search over a PhraseIndex.

    ``encoder`` (a core.encoding.QuestionEncoder) is needed only for ``search``; ``search_vectors`` takes
    q_start / q_end directly. ``vector_source`` (``fine`` | ``codes``; default: the index's) is where span
    completion reads neighbour vectors; ``search``/``search_vectors`` can override it per call. ``length_bias``
    (default: the encoder's model config's, else the index's) is added to every span by its length.
    """

    def __init__(
        self, index: PhraseIndex, encoder=None, max_answer_tokens: int | None = None, vector_source: str | None = None,
        length_bias: Sequence[float] | None = None,
    ):
        self.index = index
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
        if vector_source is not None:
            index.set_vector_source(vector_source)
        self._passage_doc = np.asarray([p["doc"] for p in index.passages], dtype=np.int64)

    def search(
        self,
        questions: list[str],
        unit: Unit = "phrase",
        top_k: int = 10,
        max_answer_tokens: int | None = None,
        nprobe: int | None = None,
        timings: dict[str, float] | None = None,
        vector_source: str | None = None,
        merge_answers: bool = False,
    ) -> list[list[Hit]]:
        """Encode questions and search; ``timings`` (if given) receives encode/search/aggregate seconds."""
        if self.encoder is None:
            raise ValueError("this Searcher has no question encoder; use search_vectors")
        t0 = time.perf_counter()
        q_start, q_end = self.encoder.encode(questions)
        if timings is not None:
            timings["encode"] = time.perf_counter() - t0
        return self.search_vectors(q_start, q_end, unit, top_k, max_answer_tokens, nprobe, timings, vector_source,
                                   merge_answers)

    def search_vectors(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        unit: Unit = "phrase",
        top_k: int = 10,
        max_answer_tokens: int | None = None,
        nprobe: int | None = None,
        timings: dict[str, float] | None = None,
        vector_source: str | None = None,
        merge_answers: bool = False,
    ) -> list[list[Hit]]:
        """q_start, q_end: (B, d) float32 -> per question, up to top_k hits of the unit.

        ``merge_answers`` (phrase unit only): phrases that read the same once normalised ("the Sun", "Sun") are one
        answer, scored log sum exp over its phrases among the best max(64, 4 top_k); each hit is the best phrase of
        one answer. Summing is the Bayes decision for exact match when scores are log-probabilities up to a
        constant, which is what the losses' softmaxes train.
        """
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if merge_answers:
            if unit != "phrase":
                raise ValueError(f"merge_answers applies to the phrase unit, not {unit!r}")
            many = self.search_vectors(q_start, q_end, "phrase", max(ANSWER_CANDIDATES, 4 * top_k),
                                       max_answer_tokens, nprobe, timings, vector_source)
            t0 = time.perf_counter()
            merged = [
                [dataclasses.replace(hits[r], score=score) for r, score in
                 merge_by_answer([h.text for h in hits], [h.score for h in hits])[:top_k]] if hits else []
                for hits in many
            ]
            if timings is not None:
                timings["aggregate"] = timings.get("aggregate", 0.0) + time.perf_counter() - t0
            return merged
        L = max_answer_tokens or self.max_answer_tokens
        vectors = self._vector_reader(vector_source)
        q_start = np.ascontiguousarray(q_start, dtype=np.float32)
        q_end = np.ascontiguousarray(q_end, dtype=np.float32)
        self.index.set_nprobe(nprobe)
        ntotal = self.index.faiss.ntotal
        k = min(ntotal, max(32, 2 * top_k) if unit == "phrase" else max(64, 8 * top_k))
        # a unit search deepens until top_k units are found, or every unit the index has (not every token)
        want = min(top_k, len(self.index.passages) if unit == "passage" else len(self.index.docs))
        pending = np.arange(len(q_start))
        spans: list[Spans | None] = [None] * len(q_start)
        t_search = t_agg = 0.0
        while len(pending):
            t0 = time.perf_counter()
            found = self._spans(q_start[pending], q_end[pending], k, L, vectors)
            t1 = time.perf_counter()
            still = []
            for b, sp in zip(pending.tolist(), found, strict=True):
                spans[b] = sp
                if unit != "phrase" and k < ntotal and self._count_units(sp, unit) < want:
                    still.append(b)
            t_search += t1 - t0
            t_agg += time.perf_counter() - t1
            pending = np.asarray(still, dtype=np.int64)
            k = min(ntotal, k * 4)
        t0 = time.perf_counter()
        hits = [self._hits(sp, unit, top_k) for sp in spans if sp is not None]
        if timings is not None:
            timings["search"] = timings.get("search", 0.0) + t_search
            timings["aggregate"] = timings.get("aggregate", 0.0) + t_agg + time.perf_counter() - t0
        return hits

    # --- internals -------------------------------------------------------------------------------

    def _vector_reader(self, source: str | None):
        """The PhraseIndex method that reads neighbour vectors for ``source`` (None: the index's default)."""
        source = source or self.index.vector_source
        if source == "codes":
            if self.index.codes is None:
                self.index.set_vector_source("codes")  # raises the index's explanation
            return self.index.code_vectors
        if source != "fine":
            raise ValueError(f"vector_source must be 'fine' or 'codes', got {source!r}")
        return self.index.token_vectors

    def _spans(self, q_start: np.ndarray, q_end: np.ndarray, k: int, L: int, vectors) -> list[Spans]:
        if self.index.faiss.ntotal == 0:
            empty = np.zeros(0, np.int64)
            return [Spans(empty, empty, np.zeros(0, np.float32)) for _ in range(len(q_start))]
        # One faiss call for both sides: a flat index streams its vectors once for all 2B queries
        _, ids = self.index.faiss.search(np.concatenate([q_start, q_end]), k)  # (2B, k)
        start_ids, end_ids = ids[: len(q_start)], ids[len(q_start) :]
        with numpy_blas().limit(limits=1):
            return [
                self._complete(start_ids[b], end_ids[b], q_start[b], q_end[b], L, vectors)
                for b in range(len(q_start))
            ]

    def _complete(
        self, start_ids: np.ndarray, end_ids: np.ndarray, qs: np.ndarray, qe: np.ndarray, L: int, vec
    ) -> Spans:
        """Span completion in both directions for one question; returns deduplicated spans by score."""
        flags = self.index.token_flags
        n = self.index.num_tokens
        s = start_ids[start_ids >= 0]
        s = s[flags[s] & FLAG_START > 0]
        e = end_ids[end_ids >= 0]
        e = e[flags[e] & FLAG_END > 0]
        offs = np.arange(L)
        # forward: start s, ends s .. s+L-1 in the same passage
        fwd = s[:, None] + offs[None, :]  # (m, L)
        ptok = self.index.passage_tokens
        fwd_ok = fwd < ptok[self.index.token_passage[s] + 1][:, None]  # end id of each start's passage
        fwd = np.minimum(fwd, n - 1)
        fwd_ok &= flags[fwd] & FLAG_END > 0
        # backward: end e, starts e-L+1 .. e in the same passage
        bwd = e[:, None] - offs[None, :]  # (m', L)
        bwd_ok = bwd >= ptok[self.index.token_passage[e]][:, None]
        bwd = np.maximum(bwd, 0)
        bwd_ok &= flags[bwd] & FLAG_START > 0

        # Neighbour windows overlap, so each distinct token is read and scored once: one batched read, then
        # its start and end score in one (U, d) @ (d, 2) product, scattered back to every place it is used.
        m, m2 = len(s), len(e)
        ids = np.concatenate([s, e, fwd.reshape(-1), bwd.reshape(-1)])  # (m + m' + (m + m') L,)
        uniq, inverse = np.unique(ids, return_inverse=True)
        sc = (vec(uniq) @ np.stack([qs, qe], axis=1))[inverse]  # (len(ids), 2): start score, end score
        s_score = sc[:m, 0]  # (m,)
        e_score = sc[m : m + m2, 1]
        bias = length_scores(self.length_bias, L)  # column k of fwd/bwd is a span of k + 1 tokens
        fwd_end = np.where(fwd_ok, sc[m + m2 : m + m2 + m * L, 1].reshape(m, L) + bias, -np.inf)  # (m, L)
        bwd_start = np.where(bwd_ok, sc[m + m2 + m * L :, 0].reshape(m2, L) + bias, -np.inf)  # (m', L)
        fj = fwd_end.argmax(axis=1)
        bi = bwd_start.argmax(axis=1)
        starts = np.concatenate([s, bwd[np.arange(len(e)), bi]])
        ends = np.concatenate([fwd[np.arange(len(s)), fj], e])
        scores = np.concatenate(
            [s_score + fwd_end[np.arange(len(s)), fj], e_score + bwd_start[np.arange(len(e)), bi]]
        ).astype(np.float32)
        ok = np.isfinite(scores)
        starts, ends, scores = starts[ok], ends[ok], scores[ok]
        order = np.argsort(-scores, kind="stable")
        starts, ends, scores = starts[order], ends[order], scores[order]
        _, first = np.unique(starts * n + ends, return_index=True)  # same span from both sides: keep one
        first.sort()
        return Spans(starts[first].astype(np.int64), ends[first].astype(np.int64), scores[first])

    def _unit_ids(self, sp: Spans, unit: Unit) -> np.ndarray:
        passages = self.index.token_passage[sp.starts]
        return passages if unit == "passage" else self._passage_doc[passages]

    def _count_units(self, sp: Spans, unit: Unit) -> int:
        return len(np.unique(self._unit_ids(sp, unit)))

    def _hits(self, sp: Spans, unit: Unit, top_k: int) -> list[Hit]:
        if unit == "phrase":
            pick = np.arange(min(top_k, len(sp.scores)))
        else:  # spans are sorted, so a unit's first span is its best one: score = max over its phrases
            _, first = np.unique(self._unit_ids(sp, unit), return_index=True)
            pick = np.sort(first)[:top_k]
        return [self._hit(int(sp.starts[i]), int(sp.ends[i]), float(sp.scores[i])) for i in pick]

    def _hit(self, start_tok: int, end_tok: int, score: float) -> Hit:
        idx = self.index
        p = int(idx.token_passage[start_tok])
        passage = idx.passages[p]
        doc = idx.docs[passage["doc"]]
        a, b = int(idx.token_offsets[start_tok, 0]), int(idx.token_offsets[end_tok, 1])
        return Hit(
            text=passage["text"][a:b], score=score, start=a, end=b, passage_id=p,
            passage=passage["text"], doc_id=doc["id"], title=doc["title"], meta=doc.get("meta", {}),
        )

    def passage_best_span(
        self, passage: int, q_start: np.ndarray, q_end: np.ndarray, L: int | None = None, decode: str = "span"
    ) -> Hit:
        """Reading comprehension inside one passage (exact, brute force): ``decode="span"`` returns the best span
        (``best_span``), ``"answer"`` the best span of the most probable answer string (``best_answer``), scored
        log sum exp over the answer's spans."""
        if decode not in RC_DECODES:
            raise ValueError(f"decode must be one of {RC_DECODES}, got {decode!r}")
        a, b = self.index.passage_range(passage)
        vecs = self.index.token_vectors(np.arange(a, b))
        args = (vecs @ q_start, vecs @ q_end, self.index.token_flags[a:b], L or self.max_answer_tokens)
        try:
            if decode == "span":
                i, j, score = best_span(*args, self.length_bias)
            else:
                offsets = self.index.token_offsets[a:b]
                text = self.index.passages[passage]["text"]
                i, j, score = best_answer(*args, lambda x, y: text[offsets[x, 0] : offsets[y, 1]], self.length_bias)
        except ValueError as e:
            raise ValueError(f"passage {passage}: {e}") from None
        return self._hit(a + i, a + j, score)
