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
                   unit_ids: Callable[[Spans], np.ndarray] | None) -> list[Spans]:
        """Candidate spans per question from MIPS over the tokens the plan's selection allows; a unit search
        (``unit_ids``: each span's unit) deepens until ``top_k`` units are among them, or every unit it may return."""
        ntotal = self.index.faiss.ntotal
        unit = plan.params.unit
        k = min(ntotal, max(32, 2 * top_k) if unit == "phrase" else max(64, 8 * top_k))
        want = min(top_k, plan.selection.unit_count.get(unit, top_k))
        pending = np.arange(len(q_start))
        spans: list[Spans] = [EMPTY_SPANS] * len(q_start)
        while len(pending):
            found = self.spans(q_start[pending], q_end[pending], k, plan)
            still = []
            for b, sp in zip(pending.tolist(), found, strict=True):
                spans[b] = sp
                if unit_ids is not None and k < ntotal and len(np.unique(unit_ids(sp))) < want:
                    still.append(b)
            pending = np.asarray(still, dtype=np.int64)
            k = min(ntotal, k * 4)
        return spans

    def spans(self, q_start: np.ndarray, q_end: np.ndarray, k: int, plan: Plan) -> list[Spans]:
        """One round: top ``k`` start and end tokens per question, each completed to its best span."""
        if self.index.faiss.ntotal == 0:
            return [EMPTY_SPANS for _ in range(len(q_start))]
        # One faiss call for both sides: a flat index streams its vectors once for all 2B queries
        queries = np.concatenate([q_start, q_end])
        device = self.on_device.index if self.on_device is not None else None
        fetch = min(self.index.faiss.ntotal, k * self.refine_factor)
        sel, nprobe, vectors = plan.selection, plan.params.nprobe, plan.vectors
        if self.refine_factor > 1 and vectors == self.index.token_vectors and fetch > k and fetch <= REFINE_MAX_FETCH:
            ids = refine(search_ids(self.index, queries, fetch, nprobe, sel, device), queries, k,
                         lambda t, q: self.scores(vectors, t, q))
        else:
            ids = search_ids(self.index, queries, k, nprobe, sel, device)  # (2B, k)
        start_ids, end_ids = ids[: len(q_start)], ids[len(q_start) :]
        with numpy_blas().limit(limits=1):
            return [self.complete(start_ids[b], end_ids[b], q_start[b], q_end[b], plan.max_tokens, vectors)
                    for b in range(len(q_start))]

    def complete(self, start_ids: np.ndarray, end_ids: np.ndarray, qs: np.ndarray, qe: np.ndarray, max_tokens: int,
                 vec: Callable[[np.ndarray], np.ndarray]) -> Spans:
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
