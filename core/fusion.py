"""The lexical leg and the fusion of the two legs (``lexical`` and ``hybrid`` modes).

Every span of the top lexical passages is a candidate too, scored from the stored token vectors exactly as reading
comprehension scores them (``DenseLeg.passage_spans``). ``lexical`` ranks units by BM25 (a passage's best span is
its answer). ``hybrid`` ranks phrases by dense score + w x the passage's BM25 score z-normalised over the question's
candidate passages (DenSPI-style), then re-ranks the head of that list (``core.rerank``); passages and documents
are ranked by fusing the two legs' unit scores over the candidates of both: score fusion
(``core.lexical.score_fuse``) or reciprocal rank fusion (``rrf_fuse``, unweighted). Hits carry both components.
A filtered search fuses its candidates against the candidates of the same search without the filter (the plan's
``unfiltered``, ``core.search``): passages and documents against its units' scores, phrases against its passages'
BM25 scores and the head of its fused list, re-ranked with them; so a unit scores as it does unfiltered.

A request's ``fusion`` and ``lexical_weight`` are refused where they would rank nothing (``check_fusion``); a phrase
request with read has its passages ranked by a passage search, its weight carried over to that unit's scale
(``read_weight``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from spanseek.core.dense import EMPTY_SPANS, BatchScores, DenseBatch, DenseLeg, dedupe_grouped
from spanseek.core.hits import Hit, HitBuilder, distinct, first_per_unit, non_overlapping_spans
from spanseek.core.lexical import FusionBasis, LexicalIndex, RerankHead, rrf_fuse, score_fuse, zscore
from spanseek.core.params import (
    MAX_LEXICAL_WEIGHT,
    Fusion,
    Mode,
    SearchParams,
    SearchParamsError,
    unused_fusion,
)
from spanseek.core.plan import Plan
from spanseek.core.postings import Postings, scores_of
from spanseek.core.rerank import RERANK_DEPTH, rerank_features, rerank_scores
from spanseek.core.selection import runs_of, unit_runs
from spanseek.core.spans import Spans, by_group_then_score, numpy_blas

# phrase unit, hybrid: the lexical passages whose every span joins the dense candidates
LEXICAL_PASSAGES = 5
# passage/doc units, hybrid: each leg brings at least this many units to the fused candidate list (documents are
# few and large: the dense leg deepens its search until it has found this many)
FUSION_DEPTH = {"phrase": 0, "passage": 20, "doc": 5}


def check_fusion(params: SearchParams, default_mode: Mode, default_fusion: Fusion) -> None:
    """SearchParamsError when a request's ``fusion`` or ``lexical_weight`` would rank nothing, its mode and fusion
    taken from the index's defaults where it gives none (``core.params.unused_fusion``), or ``fusion`` is asked of
    phrases without read: they are ranked by dense score + lexical_weight x BM25, not fused (with read, the passages
    read are ranked by a passage search, which fuses). A request's check (``Searcher.check_mode`` and ``search``),
    not ``search_vectors``': a benchmark sweeps every unit with one set of parameters, and ``read_below`` first
    searches a phrase request with read without read."""
    why = unused_fusion(params, params.mode or default_mode, params.fusion or default_fusion)
    if why is None and params.fusion is not None and params.unit == "phrase" and not params.read:
        why = ("fusion applies to the passage and doc units (and to unit=phrase with read, whose passages it ranks): "
               "unit=phrase ranks by dense score + lexical_weight x BM25, with no fusion")
    if why is not None:
        raise SearchParamsError(why)


def read_weight(params: SearchParams, weights: Mapping[str, float]) -> float | None:
    """The lexical weight of the search whose units a request with read reads (None: that unit's default, of
    ``weights``). A phrase request's passages are ranked by a passage search, and its weight is on the phrase unit's
    scale (added to a raw dense score, where a passage's is added to a z-scored one): it is carried over as the same
    multiple of the passage unit's default (the phrase default reads as the passage default; the weight itself where
    the phrase default is 0), at most ``MAX_LEXICAL_WEIGHT``. The reading models were fitted on passages ranked by the
    passage default."""
    weight = params.lexical_weight
    if weight is None or params.unit != "phrase":
        return weight
    default = weights["phrase"]
    return min(weights["passage"] * (weight / default) if default > 0 else weight, MAX_LEXICAL_WEIGHT)


class LexicalFusion:
    """The lexical leg of a batch, alone (``lexical``) or fused with the dense leg's spans (``hybrid``)."""

    def __init__(self, lexical: LexicalIndex, dense: DenseLeg, hits: HitBuilder,
                 unit_of_passage: dict[str, np.ndarray], phrase_rerank: dict[str, float] | None):
        self.lexical = lexical
        self.dense = dense
        self.hits = hits
        self.unit_of_passage = unit_of_passage
        self.phrase_rerank = phrase_rerank
        self._unit_runs: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def search(self, plan: Plan, batch: DenseBatch, questions: list[str]
               ) -> tuple[list[list[Hit]], list[FusionBasis] | None]:
        """``ranked`` for a batch, the dense leg's candidates searched where hybrid (each leg brings at least
        ``FUSION_DEPTH`` units), fused against the plan's ``unfiltered`` candidates where it has them."""
        units = self.unit_of_passage.get(plan.unit)
        depth = max(plan.top_k, FUSION_DEPTH[plan.unit])
        dense = None if plan.mode == "lexical" else self.dense.candidates(batch, depth, units, units is None)
        return self.ranked(plan, batch.scores, questions, dense,
                           None if plan.unfiltered is None else plan.unfiltered.basis)

    def ranked(self, plan: Plan, scores: BatchScores, questions: list[str], dense: list[Spans] | None,
               basis: Sequence[FusionBasis] | None = None) -> tuple[list[list[Hit]], list[FusionBasis] | None]:
        """Per question, the plan's ``top_k`` hits: by BM25 (``dense`` None) or fused with ``dense`` spans (the
        lexical passages' spans scored with the batch's ``scores``); and in hybrid mode (else None) each question's
        candidates as a ``FusionBasis``. ``basis``: per question, the candidates of the same search without the
        plan's filter, which the candidates are fused against (``fused_units``, ``fused_phrases``)."""
        if not questions:
            return [], None
        terms = self.lexical.tokenize(questions)  # once: BM25 and the re-ranker's question terms
        lexical = plan.bm25 if plan.bm25 is not None else self.lexical.postings(questions, terms)
        if plan.selection.passages is not None:  # the filter's passages only
            lexical = lexical.within(plan.selection.passages)
        unit, top_k = plan.unit, plan.top_k
        lex_unit = "passage" if unit == "phrase" else unit
        n_lex = top_k if dense is None else LEXICAL_PASSAGES if unit == "phrase" else max(top_k, FUSION_DEPTH[unit])
        with numpy_blas().limit(limits=1):
            found = lexical.top_units(n_lex, None if lex_unit == "passage" else self.unit_of_passage[lex_unit])
            # phrases in hybrid mode rank every span; units and lexical hits take each passage's best
            spans = self.dense.passage_spans([passages for _, _, passages in found], scores,
                                             best_only=dense is None or unit != "phrase")
            if dense is None:
                return [self.lexical_hits(extra, unit_scores, passages, top_k)
                        for (_, unit_scores, passages), extra in zip(found, spans, strict=True)], None
            # each question's dense and lexical spans together (one pass for the batch): phrases deduplicated,
            # units each by its best span
            parts = [sp for pair in zip(dense, spans, strict=True) for sp in pair]
            together = (np.repeat(np.arange(len(parts)) // 2, [len(sp.starts) for sp in parts]),
                        np.concatenate([sp.starts for sp in parts]), np.concatenate([sp.ends for sp in parts]),
                        np.concatenate([sp.scores for sp in parts]))
            if unit == "phrase":  # ranked together (one tokenisation a batch)
                merged = dedupe_grouped(*together, self.dense.index.num_tokens, len(questions))
                return self.fused_phrases(merged, lexical, plan, questions, terms, basis)
            best = self.best_per_unit(*together, unit, len(questions))
            fused = [self.fused_units(sp, lexical, b, plan, None if basis is None else basis[b])
                     for b, sp in enumerate(best)]
            return [hits for hits, _ in fused], [own for _, own in fused]

    def best_per_unit(self, groups: np.ndarray, starts: np.ndarray, ends: np.ndarray, scores: np.ndarray, unit: str,
                      n_groups: int) -> list[Spans]:
        """Per group g < ``n_groups``, the best span of each unit among its spans (``groups``: each span's), best
        first; equal scores keep their order here. The same units, spans and scores as the first span of each unit
        after ``dedupe_grouped`` (a duplicate comes after its first copy, in the same unit), without deduplicating."""
        if not len(starts):
            return [EMPTY_SPANS] * n_groups
        order = by_group_then_score(groups, scores)
        units = self.unit_of_passage[unit][self.dense.index.token_passage[starts[order]]]
        key = groups[order].astype(np.int64) * (int(units.max()) + 1) + units
        first = order[np.sort(np.unique(key, return_index=True)[1])]  # each (group, unit)'s first, in that order
        bounds = np.searchsorted(groups[first], np.arange(n_groups + 1))
        starts, ends, scores = starts[first].astype(np.int64), ends[first].astype(np.int64), scores[first]
        return [Spans(starts[a:b], ends[a:b], scores[a:b].astype(np.float32)) if b > a else EMPTY_SPANS
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def unit_runs(self, unit: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The passages in ``unit`` order, where each unit's run of them starts (the end appended) and each run's
        unit (``core.selection.unit_runs``: kept on the index, a live snapshot's made from its base's)."""
        if unit not in self._unit_runs:  # (once a searcher: a live snapshot's joins its base's and its segment's)
            runs = (runs_of(self.unit_of_passage) if self.dense is None else
                    unit_runs(self.dense.index, self.unit_of_passage))[unit]
            order, starts = runs[0], runs[1]
            self._unit_runs[unit] = (order, np.r_[starts, len(order)],
                                     np.asarray(self.unit_of_passage[unit][order[starts]]))
        return self._unit_runs[unit]

    def unit_scores(self, lexical: Postings, b: int, unit: str, units: np.ndarray) -> np.ndarray:
        """float32 BM25 score of each of ``units`` (each holding a passage) for question ``b`` of ``lexical``: its
        best passage's, looked up (0 where none matches): among the units the question matches where its postings
        were added up whole (``Postings.every_unit``, found with its top), else in each unit's passages."""
        if unit == "passage":
            return lexical.at(b, units)
        every = lexical.every_unit(self.unit_of_passage[unit])[b]
        if every is not None:
            return scores_of(every[0], every[1], units)
        order, bounds, run_unit = self.unit_runs(unit)
        run = np.searchsorted(run_unit, units)
        lengths = bounds[run + 1] - bounds[run]
        first = np.r_[0, np.cumsum(lengths)[:-1]]  # where each unit's passages start among them all
        passages = order[np.repeat(bounds[run] - first, lengths) + np.arange(int(lengths.sum()))]
        return np.maximum.reduceat(lexical.at(b, passages), first)

    def lexical_hits(self, spans: Spans, unit_scores: np.ndarray, passages: np.ndarray, top_k: int) -> list[Hit]:
        """Lexical mode: units in BM25 order, each answered by the best span of its best passage."""
        span_passage = self.dense.index.token_passage[spans.starts]
        best = {int(span_passage[i]): int(i) for i in first_per_unit(span_passage)}  # spans are sorted
        hits = []
        for p, score in zip(passages.tolist(), unit_scores.tolist(), strict=True):
            i = best.get(p)
            if i is None:  # no valid span in the passage (no token may start or end a phrase)
                continue
            hits.append(self.hits.hit(int(spans.starts[i]), int(spans.ends[i]), score, float(spans.scores[i]), score))
            if len(hits) == top_k:
                break
        return hits

    def fused_units(self, spans: Spans, lexical: Postings, b: int, plan: Plan, basis: FusionBasis | None = None
                    ) -> tuple[list[Hit], FusionBasis]:
        """Hybrid passages or documents: question ``b``'s candidate units (each by its best span) ranked by the two
        legs' scores (BM25: ``unit_scores``, 0 for a unit none of whose passages matches) fused over the
        candidates, or over ``basis``'s (the same search's candidates without its filter: a unit then scores as it
        does there, ``score_fuse`` and ``rrf_fuse``); and the candidates' own basis."""
        if not len(spans.scores):
            return [], FusionBasis(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
        unit_of_passage = self.unit_of_passage[plan.unit]
        passages = self.dense.index.token_passage[spans.starts]
        first = first_per_unit(unit_of_passage[passages])  # each candidate unit's best span (spans are sorted)
        dense = spans.scores[first].astype(np.float64)
        units = unit_of_passage[passages[first]]
        lex = self.unit_scores(lexical, b, plan.unit, units).astype(np.float64)  # a document's: its best passage's
        fused = (score_fuse(dense, lex, plan.lexical_weight, basis) if plan.fusion == "score"
                 else rrf_fuse(dense, lex, basis=basis, units=units))
        pick = np.argsort(-fused, kind="stable")[: plan.top_k]
        return [self.hits.hit(int(spans.starts[first[i]]), int(spans.ends[first[i]]), float(fused[i]),
                              float(dense[i]), float(lex[i])) for i in pick], FusionBasis(units, dense, lex)

    def fused_phrases(self, spans: Sequence[Spans], lexical: Postings, plan: Plan, questions: Sequence[str],
                      question_terms: Sequence[list[str]] | None = None, basis: Sequence[FusionBasis] | None = None
                      ) -> tuple[list[list[Hit]], list[FusionBasis]]:
        """Phrases of several questions (their candidate spans, BM25 matches and texts): dense score + w x
        z-normalised BM25 of their passage; the head of each ranking re-ranked when the index's fusion defaults carry
        re-ranking weights, the terms of every head found in one tokenisation (``question_terms``: the questions',
        when the caller has them). Also each question's candidate passages and the head of its fused list, as a
        ``FusionBasis``. ``basis``: per question, those of the same search without the plan's filter: BM25 is then
        standardised over its candidate passages, and the head re-ranked is that of both lists (``reranked``)."""
        fused, order, bases = [], [], []
        for q, sp in enumerate(spans):
            passages = self.dense.index.token_passage[sp.starts]
            cand, where = np.unique(passages, return_inverse=True)  # the candidate passages, and each span's
            best = np.full(len(cand), -np.inf)
            np.maximum.at(best, where, sp.scores)
            lex = lexical.at(q, cand)
            bases.append(FusionBasis(cand, best, lex.astype(np.float64)))
            fused.append(sp.scores + plan.lexical_weight * zscore(lex, None if basis is None else basis[q].lexical)[where])
            o = np.argsort(-fused[-1], kind="stable")
            order.append(o[self.hits.answers(sp.starts[o], sp.ends[o])])  # (not a lone "." or ",")
        heads = [o[:RERANK_DEPTH] if self.phrase_rerank else o[:0] for o in order]
        texts = [[self.hits.span_text(int(sp.starts[i]), int(sp.ends[i])) for i in head]
                 for sp, head in zip(spans, heads, strict=True)]
        asked = [] if question_terms is not None or not self.phrase_rerank else list(questions)
        terms = iter(self.lexical.tokenize([t for ts in texts for t in ts] + asked) if self.phrase_rerank else [])
        span_terms = [[next(terms) for _ in ts] for ts in texts]
        question_terms = list(terms) if question_terms is None else question_terms
        out: list[list[Hit]] = []
        for q, sp in enumerate(spans):
            o, head = order[q], heads[q]
            mine = RerankHead(sp.starts[head], sp.ends[head], fused[q][head], texts[q], span_terms[q])
            bases[q] = dataclasses.replace(bases[q], head=mine)
            if not len(o):  # no candidates, or none that can be an answer
                out.append([])
                continue
            scores = fused[q][o]
            if self.phrase_rerank:  # the head of the fused list re-ranked; the rest follows, its scores shifted
                o, scores = self.reranked(o, fused[q], mine, questions[q], question_terms[q], sp,
                                          None if basis is None else basis[q].head)
            pos = (np.arange(len(o)) if plan.params.allow_overlap else  # distinct hits, read lazily, below
                   non_overlapping_spans(sp.starts[o], sp.ends[o], np.arange(len(o)), plan.top_k))
            lex = lexical.at(q, self.dense.index.token_passage[sp.starts[o[pos]]])
            hits = (self.hits.hit(int(sp.starts[i]), int(sp.ends[i]), float(sc), float(sp.scores[i]), float(x))
                    for i, sc, x in zip(o[pos], scores[pos], lex, strict=True))
            out.append(distinct(hits, plan.top_k) if plan.params.allow_overlap else list(hits))
        return out, bases

    def reranked(self, order: np.ndarray, fused: np.ndarray, head: RerankHead, question: str,
                 question_terms: Sequence[str], spans: Spans, unfiltered: RerankHead | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """One question's candidates in fused ``order`` (``fused``: their scores) with the ``head`` of that order
        re-ranked (``core.rerank``), and their scores: the head's re-ranked, the rest shifted to follow. With
        ``unfiltered``, the head of the same search without the plan's filter, the head re-ranked is the first
        ``RERANK_DEPTH`` of both heads together (each span of ``spans`` once, by fused score), as that search
        re-ranks it, and the candidates here keep their place's score in it."""
        n = len(head.fused)
        fused_head, texts, terms = head.fused, list(head.texts), list(head.terms)
        pick = np.arange(n)
        if unfiltered is not None and len(unfiltered.fused):
            known = set(zip(spans.starts.tolist(), spans.ends.tolist(), strict=True))
            other = [i for i, se in enumerate(zip(unfiltered.starts.tolist(), unfiltered.ends.tolist(), strict=True))
                     if se not in known]
            fused_head = np.concatenate([fused_head, unfiltered.fused[other]])
            texts += [unfiltered.texts[i] for i in other]
            terms += [unfiltered.terms[i] for i in other]
            pick = np.argsort(-fused_head, kind="stable")[:RERANK_DEPTH]
        features = rerank_features(fused_head[pick], [texts[i] for i in pick], question,
                                   ([terms[i] for i in pick], question_terms))
        score = rerank_scores(features, self.phrase_rerank or {})
        new = np.argsort(-score, kind="stable")
        ours = pick[new] < n  # this list's candidates in the re-ranked head (the first m of its own head)
        tail = order[int(ours.sum()):]
        return (np.concatenate([order[pick[new][ours]], tail]),
                np.concatenate([score[new][ours], fused[tail] - fused_head[pick[-1]] + score.min()]))
