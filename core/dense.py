"""The dense leg of a search: MIPS over the token index, span completion, and every span of given passages.

For a batch of questions the leg

1. runs MIPS over the token index with q_start (top-k start tokens) and with q_end (top-k end tokens) in one faiss
   call, with the request's faiss parameters (nprobe) given per call, so concurrent requests never change the
   shared index; a PQ index is asked for ``REFINE_FACTOR`` times the candidates, re-ranked by the fine store;
2. completes each start candidate i with the best end j in [i, i + max_answer_tokens) of the same passage (score
   q_end . h_j), and each end candidate j with the best start before it, reading the neighbours' vectors from the
   plan's ``vectors`` (the fine store, or vectors decoded from the compressed codes); both sides are re-scored with
   those vectors;
3. deduplicates spans and ranks them by f(i, j) = q_start . h_i + q_end . h_j + b(j - i), where b is the model's
   span length bias (``EncoderConfig.length_bias``; zero when it has none);
4. for ``passage`` and ``doc`` units deepens the search (k x 4) until ``top_k`` distinct units are among the spans or
   the index is exhausted; only the candidates whose span may be their unit's best are completed (a unit is
   ranked by its best span).

``passage_spans`` scores every span of given passages exactly as reading comprehension does: the lexical leg's
passages join the candidates that way.

Every token score of a batch (completion's neighbours, the lexical passages' tokens) comes from its
``BatchScores``: on an exact fp16 index searched on the CPU, the flat scan's (2B, N) inner products already hold
them (the flat index holds the fine vectors, widened), so they are read from there, or, where a small batch's scan
ranks from fp16 products (``core.flat_search``), they are the scan's exact scores of the pairs asked for, the ones
its ranking used; otherwise the plan's vectors are read and scored.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from spanseek.core.bf16_scan import BF16_ROWS, Bf16Vectors
from spanseek.core.chained import derived
from spanseek.core.fine_store import FineStore, as_float32
from spanseek.core.flat_search import (
    HALF_ROWS,
    FlatScan,
    HalfVectors,
    flat_vectors,
    top_ids,
    transposed,
)
from spanseek.core.gpu import OnDevice
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.selection import search_ids
from spanseek.core.spans import Spans, best_answer, best_span, by_group_then_score, length_scores, numpy_blas
from spanseek.core.text import FLAG_END, FLAG_START

if TYPE_CHECKING:
    from spanseek.core.plan import Plan

log = logging.getLogger(__name__)
# A PQ index ranks by its codes, coarser than the fine store: it is asked for REFINE_FACTOR times the candidates,
# which the fine store scores again, and the best k of those go on to span completion (faiss's IndexRefine, with
# the fine store as the refinement). Deep unit searches (k beyond REFINE_MAX_FETCH / factor) are not refined; 2,048
# covers a passage search of top_k 32 (k = 8 top_k). At 2.15M tokens refining passage searches of top_k 20 raised
# acc@5 by 0.5 (all validation questions, paired) for about 1.6x the search time of that layout.
REFINE_FACTOR = 8
RC_DECODES = ("answer", "span")  # how reading comprehension decodes a passage (``DenseLeg.best_in_passage``)
REFINE_MAX_FETCH = 2048
# a unit search bounds its candidates' spans (``DenseLeg._complete_for_units``) when its units have at least this
# many candidates each, per side, on average
UNIT_CANDIDATES = 4
EMPTY_SPANS = Spans(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


def dedupe_grouped(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray, scores: np.ndarray, n_tokens: int,
                   n_groups: int) -> list[Spans]:
    """Per group g < ``n_groups`` (``groups``: each span's), its spans sorted by score (descending; equal scores in
    their order here), each (start, end) once, with its first (best) score."""
    if not len(starts):
        return [EMPTY_SPANS] * n_groups
    order = by_group_then_score(groups, scores)
    groups, starts, ends, scores = groups[order], starts[order], ends[order], scores[order]
    if n_groups * n_tokens * n_tokens < 1 << 62:  # one integer a (group, span): np.unique keeps each's first place
        key = (groups.astype(np.int64) * n_tokens + starts) * n_tokens + ends
        first = np.unique(key, return_index=True)[1]
    else:
        key = starts.astype(np.int64) * n_tokens + ends
        at = np.lexsort((np.arange(len(key)), key, groups))  # each (group, span)'s copies together, the best first
        first = at[np.r_[True, (groups[at][1:] != groups[at][:-1]) | (key[at][1:] != key[at][:-1])]]
    first.sort()
    bounds = np.searchsorted(groups[first], np.arange(n_groups + 1))
    starts, ends, scores = starts[first].astype(np.int64), ends[first].astype(np.int64), scores[first].astype(np.float32)
    return [Spans(starts[a:b], ends[a:b], scores[a:b]) if b > a else EMPTY_SPANS
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


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


class BatchScores:
    """(q_start . h, q_end . h) of one batch's questions for any token ids: ``of(b, ids)`` is (len(ids), 2).

    ``held`` (2B, N), when given, holds every token's score for the batch (a flat scan's inner products, start rows
    then end rows, with the plan's vectors): the scores are read from it. ``rescored``, when given, is the batch's
    flat scan ranking from fp16 products (start rows then end rows, with the plan's vectors): the scores are its
    exact ones (``FlatScan.exact``), which its ranking used. Otherwise each call reads the plan's vectors of ``ids``
    and scores them (``DenseLeg.scores``). ``segment`` (n, (2B, S) scores), with ``held`` (2B, n): the tokens from n
    on are a segment of live writes whose scores it holds (``SegmentedScan``). ``of_questions`` gives some of the
    batch's questions as a batch of their own, reading the same held scores or scan."""

    def __init__(self, leg: DenseLeg, plan: Plan, q_start: np.ndarray, q_end: np.ndarray,
                 held: Callable[[], np.ndarray | None] | None = None, rescored: FlatScan | None = None,
                 segment: tuple[int, np.ndarray] | None = None):
        self.leg, self.plan = leg, plan
        self.q_start, self.q_end = q_start, q_end
        self._held = held
        self._rescored = rescored
        self._segment = segment
        self._rows: np.ndarray | None = None  # each question's row among the held scores' (None: its own)

    def of_questions(self, picked: np.ndarray) -> BatchScores:
        """The scores of this batch's questions ``picked`` (their positions here), question i being ``picked[i]``:
        the same held scores or rescoring scan, read at their rows, so the same bits as here."""
        sub = BatchScores(self.leg, self.plan, self.q_start[picked], self.q_end[picked], self._held, self._rescored,
                          self._segment)
        sub._rows = self._row_of(np.asarray(picked, dtype=np.int64))
        return sub

    def _row_of(self, questions: Any) -> Any:
        return questions if self._rows is None else self._rows[questions]

    def __len__(self) -> int:
        return len(self.q_start)

    def held_array(self) -> np.ndarray | None:
        """The (2B, N) scores of every token, when held (``held``); None otherwise."""
        return self._held() if self._held is not None else None

    def ranked(self) -> bool:
        """Whether the batch's token search ranked every token by these very scores, so that a question's first top
        token is its best by them, to the bit: a flat scan's held product, or a fp16 scan's exact scores where every
        row had its certificate (``FlatScan.fell_back``)."""
        if self._rescored is not None:
            return not self._rescored.fell_back
        return self.held_array() is not None

    def of_rows(self, questions: np.ndarray, ids: np.ndarray, distinct: bool = True) -> np.ndarray:
        """(len(ids), 2) float32: question ``questions[i]``'s start and end score of token ``ids[i]``. ``distinct``:
        each question's ids are known to be distinct (as ``of``'s)."""
        held = self.held_array()
        if held is not None and self._segment is not None:
            return self._with_segment(held, self._row_of(questions), ids)
        if held is not None:  # gathered from the flat array: 2x faster than indexing rows and columns
            flat, n = held.reshape(-1), held.shape[1]
            at = self._row_of(questions) * n + ids
            return np.stack([flat.take(at), flat.take(at + len(held) // 2 * n)], axis=1)
        if self._rescored is not None:
            return self._exact(questions, ids)
        out = np.zeros((0, 2), np.float32)
        # each question's rows by one sort: a mask over every row per question made a batch of B questions cost B^2
        # (10,000 questions did not finish in 15 minutes)
        order = np.argsort(questions, kind="stable")
        for mine in np.split(order, np.flatnonzero(np.diff(questions[order])) + 1):
            if not len(mine):
                continue
            part = self.of(int(questions[mine[0]]), ids[mine], distinct=distinct)
            if not out.size:
                out = np.empty((len(ids), 2), part.dtype)
            out[mine] = part
        return out

    def of(self, b: int, ids: np.ndarray, distinct: bool = False) -> np.ndarray:
        """(len(ids), 2) float32: question ``b``'s start and end score of tokens ``ids`` (1-D). ``distinct``: the
        ids are known to be distinct (each vector is read once without deduplicating them)."""
        held = self._held() if self._held is not None else None
        if held is not None and self._segment is not None:
            ids = np.asarray(ids)
            return self._with_segment(held, np.full(len(ids), self._row_of(b)), ids)
        if held is not None:
            row = self._row_of(b)
            return np.stack([held[row, ids], held[len(held) // 2 + row, ids]], axis=1)
        if self._rescored is not None:
            return self._exact(np.full(len(ids), b), np.asarray(ids))
        queries = np.stack([self.q_start[b], self.q_end[b]], axis=1)
        if distinct:
            return self.leg.scores(self.plan.vectors, ids, queries)
        uniq, inverse = np.unique(ids, return_inverse=True)  # neighbour windows overlap: each token read once
        return self.leg.scores(self.plan.vectors, uniq, queries)[inverse]

    def _with_segment(self, held: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """(len(ids), 2): start and end scores of held rows ``rows`` for token ``ids``, the base's from ``held`` and
        the segment's (ids from n on) from ``segment``'s scores."""
        assert self._segment is not None
        n, seg = self._segment
        half = len(held) // 2
        out = np.empty((len(ids), 2), np.float32)
        base = ids < n
        r, i = rows[base], ids[base]
        out[base, 0], out[base, 1] = held[r, i], held[half + r, i]
        r, i = rows[~base], ids[~base] - n
        out[~base, 0], out[~base, 1] = seg[r, i], seg[half + r, i]
        return out

    def _exact(self, questions: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """(len(ids), 2): the rescoring scan's exact scores of question ``questions[i]`` for token ``ids[i]``, each
        distinct pair scored once (neighbour windows overlap)."""
        assert self._rescored is not None
        n = self.leg.index.num_tokens
        rows = self._row_of(questions.astype(np.int64))
        pairs, inverse = np.unique(rows * n + ids, return_inverse=True)
        row = pairs // n
        half = len(self._rescored.queries) // 2
        return self._rescored.exact(pairs % n, np.stack([row, half + row], axis=1))[inverse.reshape(-1)]


class DenseLeg:
    """Candidate spans of a batch of questions from the token index (see the module docstring)."""

    def __init__(self, index: PhraseIndex, length_bias: Sequence[float], on_device: OnDevice | None = None,
                 max_answer_tokens: int | None = None):
        self.index = index
        self.length_bias = tuple(length_bias)
        if self.length_bias and max_answer_tokens and len(self.length_bias) != max_answer_tokens:
            log.warning("the length bias has %d entries for spans of up to %d tokens; %s", len(self.length_bias),
                        max_answer_tokens, "its last entry serves the longer spans"
                        if len(self.length_bias) < max_answer_tokens else "the extra entries are unused")
        self.on_device = on_device
        self.refine_factor = REFINE_FACTOR if index.manifest.spec.pq_m is not None else 1
        self.flat_holds_fine = on_device is None and flat_holds_fine(index)
        self._half: HalfVectors | None = None
        self._half_lock = threading.Lock()
        self._transposed: tuple[tuple[int, int], np.ndarray | None] | None = None  # (the vectors' address, N), copy

    def query_vectors(self, q_start: object, q_end: object) -> tuple[np.ndarray, np.ndarray]:
        """The q_start and q_end of ``Searcher.search_vectors`` as C-contiguous float32 (B, d) arrays, d the index's
        dimensions; ValueError naming what is wrong: not numbers, another shape (one question's (d,) vector, another
        model's dimensions), NaN or infinite values, or not one row each per question. (They failed deep in numpy,
        torch or faiss, or a NaN row silently got no hits.)"""
        dim, arrays = self.index.faiss.d, []
        for name, value in (("q_start", q_start), ("q_end", q_end)):
            try:
                array = np.ascontiguousarray(value, dtype=np.float32)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{name} must be a (questions, {dim}) array of numbers: {e}") from None
            if array.ndim != 2 or array.shape[1] != dim:
                raise ValueError(f"{name} must be a (questions, {dim}) array, one row per question ({dim}: the index's "
                                 f"dimensions), got shape {array.shape}"
                                 + (f" (one question's: {name}[None])" if array.shape == (dim,) else ""))
            if not np.isfinite(array).all():
                row = int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])
                raise ValueError(f"{name} holds NaN or infinite values (row {row})")
            arrays.append(array)
        if len(arrays[0]) != len(arrays[1]):
            raise ValueError(f"q_start and q_end must have one row per question, got {len(arrays[0])} and "
                             f"{len(arrays[1])} rows")
        return arrays[0], arrays[1]

    def vector_reader(self, source: str) -> Callable[[np.ndarray], np.ndarray]:
        """The PhraseIndex method that reads neighbour vectors for ``source`` (``fine`` or ``codes``)."""
        if source == "codes":
            if self.index.codes is None:
                self.index.code_vectors(np.zeros(0, np.int64))  # raises the index's explanation
            return self.index.code_vectors
        if source != "fine":
            raise ValueError(f"vector_source must be 'fine' or 'codes', got {source!r}")
        return self.index.token_vectors

    def batch(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, search: bool = True) -> DenseBatch:
        """One batch's dense search: its token searches (``search``: none for the lexical mode) and its scores. The
        flat scan of a plan with an ``unfiltered`` search (the same questions without its filter, searched before)
        takes over that search's held products (``FlatScan``) instead of computing them again."""
        return DenseBatch.of(self, plan, q_start, q_end, search)

    def candidates(self, batch: DenseBatch, top_k: int, unit_of_passage: np.ndarray | None,
                   dedupe: bool = True) -> list[Spans]:
        """Candidate spans per question from MIPS over the tokens the plan's selection allows; a unit search
        (``unit_of_passage``: each passage's unit) deepens until ``top_k`` units are among them, or every unit it may
        return. ``dedupe``: as ``complete_all``'s.

        A round's units are those of its candidate tokens that can start or end a span (``unit_counts``): what the
        completed spans would hold, known before completing them, so each question is completed once, at its last
        round's k. On a flat index the batch's scores are computed once for every round (``core.flat_search``).
        A unit search completes only the candidates that may be their unit's best span (``complete_all``)."""
        plan, search = batch.plan, batch.search
        assert search is not None, "a batch made without its token search (the lexical mode) has no candidates"
        ntotal = self.index.faiss.ntotal
        unit = plan.params.unit
        k = min(ntotal, max(32, 2 * top_k) if unit == "phrase" else max(64, 8 * top_k))
        want = min(top_k, plan.selection.unit_count.get(unit, top_k))
        last: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64),) * 2] * len(batch.scores)
        pending = np.arange(len(batch.scores))
        while len(pending) and ntotal:
            ids = self.round_ids(search, pending, k)  # (2P, k): start rows, then end rows
            for row, b in enumerate(pending.tolist()):
                last[b] = (ids[row], ids[len(pending) + row])
            if unit_of_passage is None or k >= ntotal:
                break
            pending = pending[self.unit_counts(ids, plan.max_tokens, unit_of_passage) < want]
            k = min(ntotal, k * 4)
        return self.complete_all(batch.scores, last, dedupe, unit_of_passage)

    def searcher(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray,
                 products_of: FlatScan | SegmentedScan | None = None
                 ) -> tuple[Callable[[np.ndarray, int], np.ndarray], FlatScan | SegmentedScan | None]:
        """``ids(rows, k)``: the (2 len(rows), k) best token ids of questions ``rows`` (start rows, then end rows):
        a ``FlatScan`` of the whole batch on a flat index searched on the CPU (returned too), else faiss for each
        round (with the request's nprobe, the selection's selector, the refinement of a PQ index). ``products_of``:
        see ``FlatScan``."""
        n = len(q_start)
        queries = np.concatenate([q_start, q_end])  # one search for both sides: a flat index streams its vectors once
        xb = flat_vectors(self.index.faiss) if self.on_device is None else None
        if xb is not None:
            allowed = plan.selection.allowed_tokens(self.index)
            screened = self.flat_holds_fine and len(queries) <= max(HALF_ROWS, BF16_ROWS)
            half = self.half_vectors() if screened else None
            scan = FlatScan(self.index.faiss, queries, allowed, half=half, transposed=self.transposed_vectors(xb),
                            products_of=products_of if isinstance(products_of, FlatScan) else None)
            return (lambda rows, k: scan.top(np.concatenate([rows, n + rows]), k)), scan
        parts = getattr(self.index.faiss, "flat_parts", None)  # a base and a segment of live writes, both flat
        base = parts() if parts is not None and self.on_device is None else None
        if base is not None:
            allowed = plan.selection.allowed_tokens(self.index)
            segmented = SegmentedScan(self.index, queries, allowed, base,
                                      products_of=products_of if isinstance(products_of, SegmentedScan) else None)
            return (lambda rows, k: segmented.top(np.concatenate([rows, n + rows]), k)), segmented
        device = self.on_device.index if self.on_device is not None else None
        sel, nprobe, vectors = plan.selection, plan.params.nprobe, plan.vectors

        def ids(rows: np.ndarray, k: int) -> np.ndarray:
            x = queries[np.concatenate([rows, n + rows])]
            fetch = min(self.index.faiss.ntotal, k * self.refine_factor)
            if (self.refine_factor > 1 and vectors == self.index.token_vectors and fetch > k
                    and fetch <= REFINE_MAX_FETCH):
                return refine(search_ids(self.index, x, fetch, nprobe, sel, device, need=k), x, k,
                              lambda t, q: self.scores(vectors, t, q))
            return search_ids(self.index, x, k, nprobe, sel, device)

        return ids, None

    def half_vectors(self) -> HalfVectors:
        """The reduced vectors a small batch's scan ranks from on this CPU, with their largest norm and whether it
        does (``HalfVectors``): a bf16 copy of the flat vectors where the CPU multiplies bf16 but not fp16 natively
        (``core.bf16_scan``), else the fp16 fine store as the flat index holds it (``flat_holds_fine``). Found on
        first use, once (again after ``drop_transposed``)."""
        with self._half_lock:
            if self._half is None:
                store, xb = self.index.vectors, flat_vectors(self.index.faiss)
                assert isinstance(store, FineStore) and xb is not None
                self._half = Bf16Vectors.of_vectors(xb) or HalfVectors.of(store.data, xb)
        return self._half

    def transposed_vectors(self, xb: np.ndarray | None = None) -> np.ndarray | None:
        """The flat index's vectors ``xb`` (default: read from it now) transposed for the product
        (``core.flat_search.transposed``; None where it keeps none, or for an index searched on a GPU): made on first
        use, and again once the index holds other vectors (another buffer or row count: a faiss index that grew or
        shrank). A served index is never rewritten in place (writes go to a segment, a reload opens a new index), so
        the same buffer and count are the same vectors."""
        xb = xb if xb is not None else flat_vectors(self.index.faiss) if self.on_device is None else None
        if xb is None:
            return None
        key = (xb.ctypes.data, len(xb))
        with self._half_lock:
            if self._transposed is None or self._transposed[0] != key:
                self._transposed = None  # the old copy is freed before the new one is made
                self._transposed = (key, transposed(xb))
            return self._transposed[1]

    def drop_transposed(self) -> None:
        """Let go of the transposed and bf16 copies (a searcher over a segmented index, which faiss searches, serves
        instead); a later flat scan makes them again."""
        with self._half_lock:
            self._transposed = None
            if isinstance(self._half, Bf16Vectors):
                self._half = None

    def round_ids(self, search: Callable[[np.ndarray, int], np.ndarray], rows: np.ndarray, k: int) -> np.ndarray:
        """One round of the search: the top ``k`` start and end tokens of questions ``rows``."""
        return search(rows, k)

    def unit_counts(self, ids: np.ndarray, max_tokens: int, unit_of_passage: np.ndarray) -> np.ndarray:
        """(P,) distinct units among the spans of each question's candidates ``ids`` (2P, k): the units of its start
        candidates that can start a span and of its end candidates that can end one (``window``)."""
        p = len(ids) // 2
        ok = ids >= 0
        for half, spannable in zip((slice(0, p), slice(p, 2 * p)), self.spannable(max_tokens), strict=True):
            part = ok[half]  # a view: the starts' rows, then the ends'
            part[part] = spannable[ids[half][part]]
        question, units = np.nonzero(ok)[0] % p, unit_of_passage[self.index.token_passage[ids[ok]]]
        n_units = int(units.max()) + 1 if len(units) else 1  # the candidates' range (not a pass over (P,) a round)
        pairs = np.unique(question * n_units + units)
        return np.bincount(pairs // n_units, minlength=p)

    def spannable(self, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(N,) bool each, for spans of at most ``max_tokens``: the tokens that start a span (they may start one, and a
        token that may end one follows within reach in their passage: ``window`` forward has a valid end), and the
        tokens that end one. Found once per index and ``max_tokens`` (for a live snapshot once per base, and over its
        segment at each snapshot: ``core.chained.derived``), from each token's next possible end and last possible
        start."""
        return derived(self.index, ("spannable", max_tokens), functools.partial(_spannable, max_tokens=max_tokens),
                       "rows")

    def window(self, tokens: np.ndarray, max_tokens: int, forward: bool) -> tuple[np.ndarray, np.ndarray]:
        """(len(tokens), max_tokens) each: the ends of the spans each start token may begin (``forward``; column k
        is a span of k + 1 tokens), or the starts of those each end token may close, clipped to the index, and
        which of them are valid: in the token's passage, and a token that may end (start) a phrase."""
        ptok, n, flags = self.index.passage_tokens, self.index.num_tokens, self.index.token_flags
        offs = np.arange(max_tokens)
        passage = self.index.token_passage[tokens]
        if forward:
            win = tokens[:, None] + offs[None, :]
            ok = win < ptok[passage + 1][:, None]  # before the end of the start's passage
            win = np.minimum(win, n - 1)
            return win, ok & (flags[win] & FLAG_END > 0)
        win = tokens[:, None] - offs[None, :]
        ok = win >= ptok[passage][:, None]
        win = np.maximum(win, 0)
        return win, ok & (flags[win] & FLAG_START > 0)

    def complete_all(self, scores: BatchScores, candidates: Sequence[tuple[np.ndarray, np.ndarray]],
                     dedupe: bool = True, unit_of_passage: np.ndarray | None = None) -> list[Spans]:
        """Each question's start and end candidates (ids, -1 for none; from its last round) completed to spans, in
        both directions: a start token with its best end within ``max_tokens``, an end token with its best start.
        Per question, the spans deduplicated, by score; or, without ``dedupe``, as completed (the starts' spans, then
        the ends'; a span found from both sides twice), for a caller that sorts them itself. The batch's candidates
        are completed together.

        ``unit_of_passage`` (each passage's unit): the caller keeps only each unit's best span, so a candidate whose
        span cannot reach the best span found in its unit is left out (``_complete_for_units``); the spans kept are
        the others' in the same order, and each unit's best span is the same, ties included."""
        flags = self.index.token_flags
        out = [EMPTY_SPANS] * len(candidates)
        sides = []
        for side, flag in ((0, FLAG_START), (1, FLAG_END)):
            ids = [np.asarray(c[side]) for c in candidates]
            tokens = np.concatenate(ids) if ids else np.zeros(0, np.int64)
            owner = np.repeat(np.arange(len(ids)), [len(x) for x in ids])
            ok = tokens >= 0
            ok[ok] = flags[tokens[ok]] & flag > 0
            sides.append((tokens[ok], owner[ok]))
        (s, qs), (e, qe) = sides
        if not len(s) and not len(e):
            return out
        if unit_of_passage is not None and scores.ranked():
            starts, ends, span_scores, question = self._complete_for_units(scores, candidates, unit_of_passage,
                                                                           s, qs, e, qe)
        else:
            starts, ends, span_scores, question = self._complete(scores, s, qs, e, qe)
        ok = np.isfinite(span_scores)  # the same span from both sides is kept once, with its best score
        if dedupe:
            return dedupe_grouped(question[ok], starts[ok], ends[ok], span_scores[ok], self.index.num_tokens,
                                  len(candidates))
        order = np.flatnonzero(ok)[np.argsort(question[ok], kind="stable")]
        bounds = np.searchsorted(question[order], np.arange(len(candidates) + 1))
        return [Spans(starts[order[a:b]].astype(np.int64), ends[order[a:b]].astype(np.int64), span_scores[order[a:b]])
                if b > a else EMPTY_SPANS for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _complete(self, scores: BatchScores, s: np.ndarray, qs: np.ndarray, e: np.ndarray, qe: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Start tokens ``s`` (of questions ``qs``) completed with their best end and end tokens ``e`` with their best
        start: (starts, ends, float32 scores, questions), the starts' spans then the ends'; -inf where a token has
        no valid span."""
        max_tokens = scores.plan.max_tokens
        fwd, fwd_ok = self.window(s, max_tokens, True)  # (m, max_tokens): ends s .. s + max_tokens - 1
        bwd, bwd_ok = self.window(e, max_tokens, False)  # (m', max_tokens): starts e - max_tokens + 1 .. e
        m, m2 = len(s), len(e)
        # one scoring of every token used: the candidates, then their windows, each for its question
        with numpy_blas().limit(limits=1):
            sc = scores.of_rows(np.concatenate([qs, qe, np.repeat(qs, max_tokens), np.repeat(qe, max_tokens)]),
                                np.concatenate([s, e, fwd.reshape(-1), bwd.reshape(-1)]), distinct=False)
        bias = length_scores(self.length_bias, max_tokens)  # column k of fwd/bwd is a span of k + 1 tokens
        fwd_end = np.where(fwd_ok, sc[m + m2 : m + m2 + m * max_tokens, 1].reshape(m, max_tokens) + bias, -np.inf)
        bwd_start = np.where(bwd_ok, sc[m + m2 + m * max_tokens :, 0].reshape(m2, max_tokens) + bias, -np.inf)
        fj = fwd_end.argmax(axis=1)
        bi = bwd_start.argmax(axis=1)
        starts = np.concatenate([s, bwd[np.arange(m2), bi]])
        ends = np.concatenate([fwd[np.arange(m), fj], e])
        span_scores = np.concatenate(
            [sc[:m, 0] + fwd_end[np.arange(m), fj], sc[m : m + m2, 1] + bwd_start[np.arange(m2), bi]]
        ).astype(np.float32)
        return starts, ends, span_scores, np.concatenate([qs, qe])

    def _complete_for_units(self, scores: BatchScores, candidates: Sequence[tuple[np.ndarray, np.ndarray]],
                            unit_of_passage: np.ndarray, s: np.ndarray, qs: np.ndarray, e: np.ndarray,
                            qe: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``_complete`` for a caller that keeps only each (question, unit)'s best span: the spans of the candidates
        that may be it, in their order. First each unit's first start token and first end token (its best: the
        candidates come best first) are completed; then another candidate only when its bound reaches the best span
        of its unit so far. A start token's span scores at most its start score + the question's best end score of
        any token + the largest length bias (an end token's likewise; float32 sums round monotonically, so the bound
        holds to the bit). Exact where the candidates are an exact search's top tokens, best first, ranked by the
        scores ``scores`` gives (``BatchScores.ranked``): a question's first top token is then its best token. Only
        where units have several candidates each (documents: 29% of a document search's candidates are completed on
        the 146k-token demo index; passages have about one each and are completed as they are)."""
        may_return = scores.plan.selection.unit_count.get(scores.plan.unit, 1)  # the units the selection allows
        if UNIT_CANDIDATES * 2 * len(candidates) * may_return > len(s) + len(e):  # too few a unit, even if all had some
            return self._complete(scores, s, qs, e, qe)
        tokens, question, side = np.concatenate([s, e]), np.concatenate([qs, qe]), np.repeat([0, 1], [len(s), len(e)])
        units = unit_of_passage[self.index.token_passage[tokens]]  # the key's range: the candidates', not (P,)'s
        key = (question * (int(units.max()) + 1) + units) * 2
        sides, head, where = np.unique(key + side, return_index=True, return_inverse=True)  # each unit's side
        if UNIT_CANDIDATES * len(sides) > len(tokens):  # too few candidates per unit to leave any out
            return self._complete(scores, s, qs, e, qe)
        # each question's best start and end score of any token: its first top start and end token's
        best = np.full((len(candidates), 2), np.inf, np.float32)  # no top tokens: nothing is left out
        for col in (0, 1):
            first = np.asarray([c[col][0] if len(c[col]) else -1 for c in candidates], np.int64)
            has = np.flatnonzero(first >= 0)
            best[has, col] = scores.of_rows(has, first[has], distinct=False)[:, col]
        reach = np.float32(length_scores(self.length_bias, scores.plan.max_tokens).max())
        own = scores.of_rows(question, tokens, distinct=False)[np.arange(len(tokens)), side]
        bound = own + (best[question, 1 - side] + reach)
        out_starts, out_ends = np.zeros(len(tokens), np.int64), np.zeros(len(tokens), np.int64)
        out_scores = np.full(len(tokens), -np.inf, np.float32)

        def complete(at: np.ndarray) -> None:  # ascending positions: the starts' candidates, then the ends'
            first, second = at[at < len(s)], at[at >= len(s)]
            done = self._complete(scores, tokens[first], question[first], tokens[second], question[second])
            out_starts[at], out_ends[at], out_scores[at] = done[0], done[1], done[2]

        complete(np.sort(head))
        units, unit_of_side = np.unique(sides // 2, return_inverse=True)
        floor = np.full(len(units), -np.inf, np.float32)  # each unit's best span among its first candidates'
        np.maximum.at(floor, unit_of_side, out_scores[head])
        keep = bound >= floor[unit_of_side[where]]
        keep[head] = False
        complete(np.flatnonzero(keep))
        keep[head] = True
        return out_starts[keep], out_ends[keep], out_scores[keep], question[keep]

    def scores(self, vec: Callable[[np.ndarray], np.ndarray], ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(len(ids), q): the vectors ``vec`` reads for ``ids`` dot each column of ``queries`` (d, q); on the GPU
        when the fine vectors are held there."""
        if vec == self.index.token_vectors:
            if self.on_device is not None and self.on_device.vectors is not None:
                return self.on_device.vectors.scores(ids, queries)
            return self.index.token_scores(ids, queries)
        return vec(ids) @ queries

    def passage_spans(self, groups: Sequence[np.ndarray], scores: BatchScores, best_only: bool = False
                      ) -> list[Spans]:
        """Per question b of the batch, every start token of its passages ``groups[b]`` completed with its best end,
        by score: reading comprehension's exact best span of each passage is among them (``best_span``), with the
        same score. ``best_only``: only that span of each passage (the first in token order among equal scores),
        completing only the starts that may give it (``_may_be_best``). The batch's passages are laid end to end
        and completed together; each question's spans are its own."""
        ptok = self.index.passage_tokens
        passages = np.concatenate([np.asarray(g, np.int64) for g in groups]) if len(groups) else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(groups)), [len(g) for g in groups])  # each passage's question
        lengths = ptok[passages + 1] - ptok[passages]
        out = [EMPTY_SPANS] * len(groups)
        if not lengths.sum():
            return out
        max_tokens = scores.plan.max_tokens
        first = np.cumsum(lengths) - lengths  # each passage's first position in the batch's layout
        ids = np.arange(int(lengths.sum())) + np.repeat(ptok[passages] - first, lengths)  # (n,) token ids
        question = np.repeat(owner, lengths)  # (n,) each token's question
        sc = scores.of_rows(question, ids)  # (n, 2): start score, end score
        flags = self.index.token_flags[ids]
        # End scores laid out with max_tokens - 1 places of -inf after each passage: the window of max_tokens
        # ends at every start never reaches into the next passage, and it is a strided view, not a gather.
        at = np.arange(len(ids)) + np.repeat(np.arange(len(passages)) * (max_tokens - 1), lengths)
        ends = np.full(len(ids) + len(passages) * (max_tokens - 1), -np.inf)
        ends[at] = np.where(flags & FLAG_END > 0, sc[:, 1], -np.inf)
        rows = np.flatnonzero(flags & FLAG_START > 0)  # the tokens that may start a phrase
        bias = length_scores(self.length_bias, max_tokens)
        windows = np.lib.stride_tricks.sliding_window_view(ends, max_tokens)
        if best_only and len(rows):
            rows = self._may_be_best(rows, sc[:, 0], ends[at], lengths, windows, at, bias)
        end_scores = windows[at[rows]] + bias  # (r, max_tokens): column k ends the span k tokens later
        j = end_scores.argmax(axis=1)  # ties: the shortest span, as best_span
        span_scores = np.full(len(ids), -np.inf, np.float32)
        span_scores[rows] = sc[rows, 0] + end_scores[np.arange(len(rows)), j]
        last = np.zeros(len(ids), np.int64)
        last[rows] = rows + j  # position of each start's best end
        keep = np.flatnonzero(np.isfinite(span_scores))  # one span per start token: nothing to deduplicate
        if best_only and len(keep):  # each passage's best row, the first in token order among equal scores
            passage = np.repeat(np.arange(len(passages)), lengths)[keep]
            cut = np.flatnonzero(np.r_[True, passage[1:] != passage[:-1]])  # keep is in token order
            best = np.repeat(np.maximum.reduceat(span_scores[keep], cut), np.diff(np.r_[cut, len(keep)]))
            at_best = np.flatnonzero(span_scores[keep] == best)
            keep = keep[at_best[np.r_[True, passage[at_best][1:] != passage[at_best][:-1]]]]
        keep = keep[by_group_then_score(question[keep], span_scores[keep])]  # by question, then by score
        bounds = np.r_[0, np.cumsum(np.bincount(question[keep], minlength=len(groups)))]
        for b in range(len(groups)):
            k = keep[bounds[b] : bounds[b + 1]]
            if len(k):
                out[b] = Spans(ids[k].astype(np.int64), ids[last[k]].astype(np.int64), span_scores[k])
        return out

    @staticmethod
    def _may_be_best(rows: np.ndarray, start: np.ndarray, end: np.ndarray, lengths: np.ndarray, windows: np.ndarray,
                     at: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """The start positions ``rows`` (ascending) whose span may be the best of its passage: a span from i scores
        at most start[i] + its passage's best end score + the largest bias (summed as the spans are, in float64 and
        then float32: monotone roundings), so a start whose bound is below the span of its passage's best start can
        neither be the passage's best nor tie with it. ``start``, ``end``: each position's scores (end: -inf where
        no span may end); ``lengths``: the passages' positions, laid end to end; ``windows[at[i]]``: the end scores
        of the spans from position i."""
        passage = np.repeat(np.arange(len(lengths)), lengths)
        nonempty = np.flatnonzero(lengths)
        best_end = np.full(len(lengths), -np.inf)
        best_end[nonempty] = np.maximum.reduceat(end, (np.cumsum(lengths) - lengths)[nonempty])
        own = passage[rows]
        bound = (start[rows] + (best_end[own] + float(bias.max()))).astype(np.float32)
        # each passage's best start (the first among equal ones), completed: the floor its other starts must reach
        cut = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
        top = np.repeat(np.maximum.reduceat(start[rows], cut), np.diff(np.r_[cut, len(rows)]))
        lead = rows[np.minimum.reduceat(np.where(start[rows] == top, np.arange(len(rows)), len(rows)), cut)]
        floor = np.full(len(lengths), -np.inf, np.float32)
        floor[passage[lead]] = (start[lead] + (windows[at[lead]] + bias).max(axis=1)).astype(np.float32)
        return rows[bound >= floor[own]]

    def best_in_passage(self, passage: int, q_start: np.ndarray, q_end: np.ndarray, max_tokens: int,
                        decode: str = "span") -> tuple[int, int, float]:
        """Reading comprehension inside one passage (exact, brute force): (start token id, end token id, score).
        ``decode="span"``: the best span (``best_span``); ``"answer"``: the best span of the most probable answer
        string (``best_answer``), scored log sum exp over the answer's spans."""
        if decode not in RC_DECODES:
            raise ValueError(f"decode must be one of {RC_DECODES}, got {decode!r}")
        a, b = self.index.passage_range(passage)
        vecs = self.index.token_vectors(np.arange(a, b))
        args = (vecs @ q_start, vecs @ q_end, self.index.token_flags[a:b], max_tokens)
        try:
            if decode == "span":
                i, j, score = best_span(*args, self.length_bias)
            else:
                offsets = self.index.token_offsets[a:b]
                text = self.index.passages[passage]["text"]
                i, j, score = best_answer(*args, lambda x, y: text[offsets[x, 0] : offsets[y, 1]], self.length_bias)
        except ValueError as e:
            raise ValueError(f"passage {passage}: {e}") from None
        return a + i, a + j, score


def _spannable(index: Any, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``DenseLeg.spannable`` of a token map (each passage's tokens looked at alone)."""
    flags, ptok, passage = index.token_flags, index.passage_tokens, index.token_passage
    tokens = np.arange(len(passage))
    ends, starts = np.flatnonzero(flags & FLAG_END > 0), np.flatnonzero(flags & FLAG_START > 0)
    # the first possible end at or after each token (len(tokens): none), the last possible start at or before (-1)
    end_at = np.append(ends, len(tokens))[np.searchsorted(ends, tokens)]
    reach = np.minimum(tokens + max_tokens - 1, ptok[passage + 1] - 1)
    can_start = (flags & FLAG_START > 0) & (end_at <= reach)
    start_at = np.concatenate([[-1], starts])[np.searchsorted(starts, tokens, side="right")]
    back = np.maximum(tokens - max_tokens + 1, ptok[passage])
    can_end = (flags & FLAG_END > 0) & (start_at >= back)
    return can_start, can_end


def merge_top(dist: np.ndarray, ids: np.ndarray, seg_dist: np.ndarray, seg_ids: np.ndarray, k: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """The k best of the base's and the segment's top-k lists (scores and token ids, -1 for none), best first; ties
    to the base (lower ids)."""
    dist, ids = np.concatenate([dist, seg_dist], axis=1), np.concatenate([ids, seg_ids], axis=1)
    dist = np.where(ids < 0, -np.inf, dist)
    order = np.argsort(-dist, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ids, order, axis=1)


class SegmentedScan:
    """One batch's token search over a base and a segment of live writes, both flat (``core.segment``'s
    ``SegmentedFaiss.flat_parts``): the base's scores held once for the batch as any flat scan's (``FlatScan``; not
    ranked from fp16 products, nor by a transposed copy, since each write makes a new searcher), the segment's (S, d)
    indexed tokens scored in full, and each round's two top-k lists merged as ``SegmentedFaiss.search`` merges
    faiss's (``merge_top``): the same tokens, without searching the base again each round. ``held`` gives every
    base token's scores where its flat index holds its fine vectors (``flat_holds_fine``), and ``seg_all`` every
    segment token's, for the spans' scores (``BatchScores``). ``products_of``: the segmented scan of the same queries
    without a filter, whose base products this scan takes over (``FlatScan``'s ``products_of``) and whose segment
    scores it reads, instead of computing them again."""

    half = None  # never ranked from fp16 products

    def __init__(self, index: Any, queries: np.ndarray, allowed: np.ndarray | None, base: Any,
                 products_of: SegmentedScan | None = None):
        self.queries, self.nb = queries, base.ntotal
        self.seg_ids = index.faiss.segment_ids  # the indexed (kept) segment tokens' ids
        self.scan: FlatScan = FlatScan(base, queries, None if allowed is None else allowed[: self.nb],
                                       products_of=None if products_of is None else products_of.scan)
        self.seg_all: np.ndarray
        # every segment token's scores, the indexed ones' ranked from these very bits (``held`` holds them too)
        if (products_of is not None and products_of.seg_all.shape[1] == len(index.token_passage) - index.n_base_tokens
                and np.array_equal(products_of.queries, queries)):
            self.seg_all = products_of.seg_all  # read only: the masked copy below is this scan's own
        else:  # (the segment's vectors widened once a written document, core.widened)
            with numpy_blas().limit(limits=1):  # OpenBLAS's spinning workers would slow the base's product (2-core
                self.seg_all = queries @ index.segment_scan_vectors().T  # Xeon: 93 against 56 ms); (2B, S) is small
        self.seg_scores = self.seg_all[:, self.seg_ids - self.nb]
        if allowed is not None:
            self.seg_scores[:, ~allowed[self.seg_ids]] = -np.inf
        self.holds_fine = flat_holds_fine(index.base) and len(index.base.token_passage) == self.nb

    def top(self, rows: np.ndarray, k: int) -> np.ndarray:
        """(len(rows), k) token ids of the k best allowed tokens of query rows ``rows``, best first; -1 after them."""
        import torch

        top = self.scan.top(rows, k)
        if not self.seg_scores.shape[1]:
            return top
        held = self.scan.held()
        if held is not None:
            scores = held[rows[:, None], np.maximum(top, 0)]  # (r, k) gathered, not the rows copied
        else:  # over the byte budget: the k scores of each row
            xb = self.scan.xb.numpy()
            scores = np.stack([xb[np.maximum(t, 0)] @ self.queries[r] for r, t in zip(rows, top, strict=True)])
        seg = self.seg_scores[rows]
        cols = top_ids(torch.from_numpy(seg), min(k, seg.shape[1]))
        seg_top = np.where(cols >= 0, self.seg_ids[np.maximum(cols, 0)], -1)
        seg_best = np.take_along_axis(seg, np.maximum(cols, 0), axis=1)
        return merge_top(np.where(top < 0, -np.inf, scores), top, seg_best, seg_top, k)[1]

    def held(self) -> np.ndarray | None:
        """(2B, n) scores of every base token, where the base's flat index holds its fine vectors and they are within
        the byte budget; None otherwise. The segment's are ``seg_all`` (``BatchScores``'s ``segment``): not copied
        beside them, which would take a second (2B, N) buffer and push the base's vectors out of the CPU's cache."""
        return self.scan.held() if self.holds_fine else None


class DenseBatch:
    """One batch of questions in the dense leg: ``search(rows, k)`` (its token searches, see ``DenseLeg.searcher``;
    None for the lexical mode) and ``scores`` (its ``BatchScores``: from the flat scan, held or rescored, when its
    vectors are the fine ones). ``of_questions`` gives some of its questions as a batch of their own that searches
    the same scan: a deeper search of a few of them ranks the batch's held product again instead of computing
    another."""

    def __init__(self, plan: Plan, search: Callable[[np.ndarray, int], np.ndarray] | None, scores: BatchScores,
                 scan: FlatScan | SegmentedScan | None = None):
        self.plan, self.search, self.scores = plan, search, scores
        self.scan = scan  # its flat (or segmented flat) scan, on a flat index searched on the CPU

    @classmethod
    def of(cls, leg: DenseLeg, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, search: bool = True
           ) -> DenseBatch:
        taken = None if plan.unfiltered is None else plan.unfiltered.batch.scan
        ids, scan = leg.searcher(plan, q_start, q_end, taken) if search else (None, None)
        if isinstance(scan, SegmentedScan):  # live writes: the held scores where the base holds its fine vectors
            fine = plan.vectors == leg.index.token_vectors
            scores = BatchScores(leg, plan, q_start, q_end, scan.held if fine else None,
                                 segment=(scan.nb, scan.seg_all) if fine else None)
        elif scan is None or not leg.flat_holds_fine or plan.vectors != leg.index.token_vectors:
            scores = BatchScores(leg, plan, q_start, q_end)
        elif scan.half is not None:
            scores = BatchScores(leg, plan, q_start, q_end, rescored=scan)
        else:
            scores = BatchScores(leg, plan, q_start, q_end, scan.held)
        return cls(plan, ids, scores, scan)

    def of_questions(self, picked: np.ndarray) -> DenseBatch:
        """This batch's questions ``picked`` (positions here; question i is ``picked[i]``), searching the same
        scan (or faiss, for their rows) and reading the same scores."""
        picked = np.asarray(picked, dtype=np.int64)
        search = self.search
        return DenseBatch(self.plan, None if search is None else (lambda rows, k: search(picked[rows], k)),
                          self.scores.of_questions(picked))


def flat_holds_fine(index: PhraseIndex) -> bool:
    """Whether the index's faiss index is flat and holds exactly its fp16 fine vectors, widened (as a build adds
    them): its inner products are then the fine vectors' scores. Checked on the first and last rows."""
    xb = flat_vectors(index.faiss)
    store = index.vectors
    if xb is None or not isinstance(store, FineStore) or store.kind != "fp16" or store.row_map is not None:
        return False
    rows = np.asarray([0, len(xb) - 1])
    return len(xb) == len(store) and np.array_equal(xb[rows], as_float32(store[rows]))
