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
   the index is exhausted.

``passage_spans`` scores every span of given passages exactly as reading comprehension does: the lexical leg's
passages join the candidates that way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from spanseek.core.flat_search import FlatScan, flat_vectors
from spanseek.core.gpu import OnDevice
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.selection import search_ids
from spanseek.core.spans import Spans, best_answer, best_span, length_scores, numpy_blas
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
EMPTY_SPANS = Spans(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


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

    def vector_reader(self, source: str) -> Callable[[np.ndarray], np.ndarray]:
        """The PhraseIndex method that reads neighbour vectors for ``source`` (``fine`` or ``codes``)."""
        if source == "codes":
            if self.index.codes is None:
                self.index.code_vectors(np.zeros(0, np.int64))  # raises the index's explanation
            return self.index.code_vectors
        if source != "fine":
            raise ValueError(f"vector_source must be 'fine' or 'codes', got {source!r}")
        return self.index.token_vectors

    def candidates(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, top_k: int,
                   unit_of_passage: np.ndarray | None) -> list[Spans]:
        """Candidate spans per question from MIPS over the tokens the plan's selection allows; a unit search
        (``unit_of_passage``: each passage's unit) deepens until ``top_k`` units are among them, or every unit it may
        return.

        A round's units are those of its candidate tokens that can start or end a span (``unit_counts``): what the
        completed spans would hold, known before completing them, so each question is completed once, at its last
        round's k. On a flat index the batch's scores are computed once for every round (``core.flat_search``)."""
        ntotal = self.index.faiss.ntotal
        unit = plan.params.unit
        k = min(ntotal, max(32, 2 * top_k) if unit == "phrase" else max(64, 8 * top_k))
        want = min(top_k, plan.selection.unit_count.get(unit, top_k))
        search = self.searcher(plan, q_start, q_end)
        last: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64),) * 2] * len(q_start)
        pending = np.arange(len(q_start))
        while len(pending) and ntotal:
            ids = self.round_ids(search, pending, k)  # (2P, k): start rows, then end rows
            for row, b in enumerate(pending.tolist()):
                last[b] = (ids[row], ids[len(pending) + row])
            if unit_of_passage is None or k >= ntotal:
                break
            pending = pending[self.unit_counts(ids, plan.max_tokens, unit_of_passage) < want]
            k = min(ntotal, k * 4)
        return self.complete_all(plan, q_start, q_end, last)

    def searcher(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
        """``ids(rows, k)``: the (2 len(rows), k) best token ids of questions ``rows`` (start rows, then end rows):
        a ``FlatScan`` of the whole batch on a flat index searched on the CPU, else faiss for each round (with the
        request's nprobe, the selection's selector, the refinement of a PQ index)."""
        n = len(q_start)
        queries = np.concatenate([q_start, q_end])  # one search for both sides: a flat index streams its vectors once
        if self.on_device is None and flat_vectors(self.index.faiss) is not None:
            allowed = None if plan.selection.passages is None else plan.selection.passages[self.index.token_passage]
            scan = FlatScan(self.index.faiss, queries, allowed)
            return lambda rows, k: scan.top(np.concatenate([rows, n + rows]), k)
        device = self.on_device.index if self.on_device is not None else None
        sel, nprobe, vectors = plan.selection, plan.params.nprobe, plan.vectors

        def ids(rows: np.ndarray, k: int) -> np.ndarray:
            x = queries[np.concatenate([rows, n + rows])]
            fetch = min(self.index.faiss.ntotal, k * self.refine_factor)
            if (self.refine_factor > 1 and vectors == self.index.token_vectors and fetch > k
                    and fetch <= REFINE_MAX_FETCH):
                return refine(search_ids(self.index, x, fetch, nprobe, sel, device), x, k,
                              lambda t, q: self.scores(vectors, t, q))
            return search_ids(self.index, x, k, nprobe, sel, device)

        return ids

    def round_ids(self, search: Callable[[np.ndarray, int], np.ndarray], rows: np.ndarray, k: int) -> np.ndarray:
        """One round of the search: the top ``k`` start and end tokens of questions ``rows``."""
        return search(rows, k)

    def unit_counts(self, ids: np.ndarray, max_tokens: int, unit_of_passage: np.ndarray) -> np.ndarray:
        """(P,) distinct units among the spans of each question's candidates ``ids`` (2P, k): the units of its start
        candidates that can start a span and of its end candidates that can end one (``window``)."""
        p, flags = len(ids) // 2, self.index.token_flags
        ok = ids >= 0
        for half, flag, forward in ((slice(0, p), FLAG_START, True), (slice(p, 2 * p), FLAG_END, False)):
            part = ok[half]  # a view: the starts' rows, then the ends'
            tokens = ids[half][part]
            part[part] = (flags[tokens] & flag > 0) & self.window(tokens, max_tokens, forward)[1].any(axis=1)
        question = np.nonzero(ok)[0] % p
        n_units = int(unit_of_passage.max()) + 1
        pairs = np.unique(question * n_units + unit_of_passage[self.index.token_passage[ids[ok]]])
        return np.bincount(pairs // n_units, minlength=p)

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

    def complete_all(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray,
                     candidates: list[tuple[np.ndarray, np.ndarray]]) -> list[Spans]:
        """Each question's start and end candidates (from its last round) completed to spans."""
        with numpy_blas().limit(limits=1):
            return [self.complete(s, e, q_start[b], q_end[b], plan.max_tokens, plan.vectors) if len(s) or len(e)
                    else EMPTY_SPANS for b, (s, e) in enumerate(candidates)]

    def complete(self, start_ids: np.ndarray, end_ids: np.ndarray, qs: np.ndarray, qe: np.ndarray, max_tokens: int,
                 vec: Callable[[np.ndarray], np.ndarray]) -> Spans:
        """Span completion in both directions for one question; returns deduplicated spans by score."""
        flags = self.index.token_flags
        n = self.index.num_tokens
        s = start_ids[start_ids >= 0]
        s = s[flags[s] & FLAG_START > 0]
        e = end_ids[end_ids >= 0]
        e = e[flags[e] & FLAG_END > 0]
        fwd, fwd_ok = self.window(s, max_tokens, True)  # (m, max_tokens): ends s .. s + max_tokens - 1
        bwd, bwd_ok = self.window(e, max_tokens, False)  # (m', max_tokens): starts e - max_tokens + 1 .. e
        m, m2 = len(s), len(e)
        # Neighbour windows overlap, so each distinct token is read and scored once: one batched read, then
        # its start and end score in one (U, d) @ (d, 2) product, scattered back to every place it is used.
        ids = np.concatenate([s, e, fwd.reshape(-1), bwd.reshape(-1)])  # (m + m' + (m + m') max_tokens,)
        uniq, inverse = np.unique(ids, return_inverse=True)
        sc = self.scores(vec, uniq, np.stack([qs, qe], axis=1))[inverse]  # (len(ids), 2): start score, end score
        s_score = sc[:m, 0]  # (m,)
        e_score = sc[m : m + m2, 1]
        bias = length_scores(self.length_bias, max_tokens)  # column k of fwd/bwd is a span of k + 1 tokens
        fwd_end = np.where(fwd_ok, sc[m + m2 : m + m2 + m * max_tokens, 1].reshape(m, max_tokens) + bias, -np.inf)
        bwd_start = np.where(bwd_ok, sc[m + m2 + m * max_tokens :, 0].reshape(m2, max_tokens) + bias, -np.inf)
        fj = fwd_end.argmax(axis=1)
        bi = bwd_start.argmax(axis=1)
        starts = np.concatenate([s, bwd[np.arange(len(e)), bi]])
        ends = np.concatenate([fwd[np.arange(len(s)), fj], e])
        scores = np.concatenate(
            [s_score + fwd_end[np.arange(len(s)), fj], e_score + bwd_start[np.arange(len(e)), bi]]
        ).astype(np.float32)
        ok = np.isfinite(scores)  # the same span from both sides is kept once
        return dedupe_spans(starts[ok], ends[ok], scores[ok], n)

    def scores(self, vec: Callable[[np.ndarray], np.ndarray], ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(len(ids), q): the vectors ``vec`` reads for ``ids`` dot each column of ``queries`` (d, q); on the GPU
        when the fine vectors are held there."""
        if vec == self.index.token_vectors:
            if self.on_device is not None and self.on_device.vectors is not None:
                return self.on_device.vectors.scores(ids, queries)
            return self.index.token_scores(ids, queries)
        return vec(ids) @ queries

    def passage_spans(self, passages: np.ndarray, qs: np.ndarray, qe: np.ndarray, plan: Plan) -> Spans:
        """Every start token of ``passages`` completed with its best end: reading comprehension's exact best span
        of each passage is among them (``best_span``), with the same score."""
        ptok = self.index.passage_tokens
        lengths = ptok[passages + 1] - ptok[passages]
        if not len(passages) or not lengths.sum():
            return EMPTY_SPANS
        max_tokens = plan.max_tokens
        ids = np.concatenate([np.arange(ptok[p], ptok[p + 1]) for p in passages])  # (n,) token ids
        n = len(ids)
        sc = self.scores(plan.vectors, ids, np.stack([qs, qe], axis=1))  # (n, 2): start score, end score
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

