"""The raw ranking of a batch of questions (``Searcher``'s core, before reading and the page): ``top_k`` hits per
question from the dense leg alone (``dense`` mode) or with the lexical leg and fusion (``lexical``, ``hybrid``),
merged by answer when asked, copies collapsed when asked (``core.duplicates``), and phrase searches deepened for
questions that found too few non-overlapping spans.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from spanseek.core.dense import DenseBatch, DenseLeg
from spanseek.core.duplicates import Copies, NearBudget, collapse
from spanseek.core.fusion import LexicalFusion
from spanseek.core.hits import Hit, HitBuilder, non_overlapping
from spanseek.core.lexical import FusionBasis
from spanseek.core.plan import Plan, StageTimes
from spanseek.core.spans import ANSWER_CANDIDATES, merge_by_answer

# a collapsing search ranks top_k x COLLAPSE_DEPTH without collapsing, then drops the copies (so a page without
# copies is the page of the search without collapse_duplicates, hybrid fusion's depth-dependent scores included), and
# ranks a question left short COLLAPSE_GROWTH times deeper again, at most COLLAPSE_MAX times the page's depth (as
# phrase deepening stops at 64 top_k): a paragraph held by thousands of documents leaves the page short instead of
# ranking the whole index for one question
COLLAPSE_DEPTH, COLLAPSE_GROWTH, COLLAPSE_MAX = 1, 4, 64


class Ranking:
    """The ranking stage over one index's legs: ``dense``, ``fusion`` (None without a lexical part), ``hits`` and
    each unit's passage-to-unit map (``core.selection.UNIT_OF_PASSAGE``)."""

    def __init__(self, dense: DenseLeg, fusion: LexicalFusion | None, hits: HitBuilder,
                 unit_of_passage: dict[str, np.ndarray]):
        self.dense, self.fusion, self.hits, self.unit_of_passage = dense, fusion, hits, unit_of_passage
        self._copies: Copies | None = None
        self._finding_copies = threading.Lock()  # taken only until the copies are found

    def copies(self) -> Copies:
        """The index's copies (``core.duplicates``), found at the first search that collapses them, or before it
        (the service's warm-up; a live snapshot's when it is made, ``service.live``). Searches in several threads
        (a ``Searcher`` shared by threads) find them once: the others wait for them (the texts are hashed at about 10
        µs a passage), and once found they are read without a lock."""
        copies = self._copies
        if copies is None:
            with self._finding_copies:
                if self._copies is None:
                    self._copies = Copies.of(self.hits.index, self.unit_of_passage["doc"])
                copies = self._copies
        return copies

    @property
    def found_copies(self) -> bool:
        """Whether the index's copies have been found (``copies``)."""
        return self._copies is not None

    def deep(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, texts: list[str] | None,
             timings: StageTimes, batch: DenseBatch | None = None, uncollapsed: list[list[Hit]] | None = None
             ) -> tuple[list[list[Hit]], list[FusionBasis] | None]:
        """``ranked``, with questions that found fewer non-overlapping phrases than asked searched again with
        deeper dense candidates (k x 4, up to 64 top_k) while that finds more. The deeper searches are the batch's
        own (``DenseBatch.of_questions``): a flat index's product of the batch is ranked again, not computed again.
        ``batch``: the batch's, when the caller has made it. Each question's candidates are those of the search that
        ranked its hits. ``uncollapsed``: as ``ranked``'s, of the first search."""
        deepens = plan.unit == "phrase" and not plan.params.allow_overlap and plan.mode != "lexical"
        if batch is None and deepens and not plan.selection.empty:
            batch = self.dense.batch(plan, q_start, q_end)
        ranked, basis = self.ranked(plan, q_start, q_end, texts, timings, batch, uncollapsed)
        if not deepens:
            return ranked, basis
        depth = plan.top_k
        pending, k = [b for b, hits in enumerate(ranked) if len(hits) < depth], 4 * depth
        while pending and k <= 64 * depth:
            plain: list[list[Hit]] | None = [] if uncollapsed else None
            found, bases = self.again(plan.but(top_k=k), pending, q_start, q_end, texts, timings, batch, plain)
            for b, hits in zip(pending, plain or [], strict=False):  # as the search without collapsing deepens
                if uncollapsed is not None and len(hits[:depth]) > len(uncollapsed[b]):
                    uncollapsed[b] = hits[:depth]
            grown = [(i, b, hits[:depth]) for i, (b, hits) in enumerate(zip(pending, found, strict=True))
                     if len(hits) > len(ranked[b])]
            for i, b, hits in grown:
                ranked[b] = hits
                if basis is not None and bases is not None:  # the candidates of the search that ranked its hits
                    basis[b] = bases[i]
            pending, k = [b for _, b, hits in grown if len(hits) < depth], 4 * k
        return ranked, basis

    def again(self, plan: Plan, pending: list[int], q_start: np.ndarray, q_end: np.ndarray, texts: list[str] | None,
              timings: StageTimes, batch: DenseBatch | None, uncollapsed: list[list[Hit]] | None = None
              ) -> tuple[list[list[Hit]], list[FusionBasis] | None]:
        """``ranked`` of the questions ``pending`` (positions in the batch) alone, as ``plan`` (a deeper one) asks."""
        deeper = dataclasses.replace(plan, bm25=None if plan.bm25 is None else plan.bm25.of_questions(pending),
                                     unfiltered=None if plan.unfiltered is None else plan.unfiltered.of_questions(pending))
        return self.ranked(deeper, q_start[pending], q_end[pending], None if texts is None else
                           [texts[b] for b in pending], timings,
                           None if batch is None else batch.of_questions(np.asarray(pending)), uncollapsed)

    def collapsed(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, texts: list[str] | None,
                  timings: StageTimes, batch: DenseBatch | None, uncollapsed: list[list[Hit]] | None = None
                  ) -> tuple[list[list[Hit]], list[FusionBasis] | None]:
        """``ranked`` with copies collapsed (``core.duplicates.collapse``): the ranking without it (``COLLAPSE_DEPTH``
        times as deep), less the copies of better hits; a question left short of ``top_k`` whose ranking was full is
        ranked again ``COLLAPSE_GROWTH`` times deeper, until it fills, its ranking runs out, or the ranking is
        ``COLLAPSE_MAX`` times the page's depth (the page then holds fewer than ``top_k``). ``collapse_duplicates``
        "near": near copies of a kept hit too (``core.duplicates.collapse_near``). Each question's candidates are
        those of the ranking its hits were cut from. ``uncollapsed``: as ``ranked``'s."""
        copies, k = self.copies(), COLLAPSE_DEPTH * plan.top_k
        near = plan.params.collapse_duplicates == "near"
        batch = batch if batch is not None else self.dense.batch(plan, q_start, q_end, search=plan.mode != "lexical")
        wide = plan.but(top_k=k, collapse_duplicates=False)
        many, basis = self.ranked(wide, q_start, q_end, texts, timings, batch)
        if uncollapsed is not None:
            uncollapsed[:] = many
        budgets = [NearBudget.for_page(plan.top_k) if near else None for _ in many]  # each question's, over its rankings
        with timings.timing("aggregate"):
            out = [collapse(h, plan.top_k, plan.unit, copies, plan.selection, near, budgets[b])
                   for b, h in enumerate(many)]
        pending = [b for b, (h, c) in enumerate(zip(many, out, strict=True)) if len(c) < plan.top_k and len(h) >= k]
        while pending and k * COLLAPSE_GROWTH <= COLLAPSE_MAX * plan.top_k:
            k *= COLLAPSE_GROWTH
            found, bases = self.again(wide.but(top_k=k), pending, q_start, q_end, texts, timings, batch)
            with timings.timing("aggregate"):
                for i, (b, h) in enumerate(zip(pending, found, strict=True)):
                    out[b] = collapse(h, plan.top_k, plan.unit, copies, plan.selection, near, budgets[b])
                    if basis is not None and bases is not None:
                        basis[b] = bases[i]
            pending = [b for b, h in zip(pending, found, strict=True) if len(out[b]) < plan.top_k and len(h) >= k]
        return out, basis

    def ranked(self, plan: Plan, q_start: np.ndarray, q_end: np.ndarray, texts: list[str] | None,
               timings: StageTimes, batch: DenseBatch | None = None, uncollapsed: list[list[Hit]] | None = None
               ) -> tuple[list[list[Hit]], list[FusionBasis] | None]:
        """The raw ranking: ``plan.top_k`` hits per question (phrases overlapping a better one dropped unless
        ``allow_overlap``), no confidence, offset ignored; and in hybrid mode each question's candidates
        (``LexicalFusion.search``; else None). ``batch``: these questions' dense batch, when the caller has made it
        (for this plan's selection and vectors). ``uncollapsed``, where given to a search that collapses copies (and
        merges no answers), is filled with each question's ranking without collapsing, as deep: the plain search's
        list, which a kept hit's confidence is read in (``core.page``), as it is without collapsing."""
        if plan.params.merge_answers:  # every span of an answer counts, overlapping or not; then one hit per answer
            wide = plan.but(top_k=max(ANSWER_CANDIDATES, 4 * plan.top_k), merge_answers=False, allow_overlap=True)
            many, basis = self.ranked(wide, q_start, q_end, texts, timings, batch)
            with timings.timing("aggregate"):
                merged = [[h[r].but(score=score) for r, score in
                           merge_by_answer([x.text for x in h], [x.score for x in h])] if h else [] for h in many]
                return [m[: plan.top_k] if plan.params.allow_overlap else non_overlapping(m, plan.top_k)
                        for m in merged], basis
        if plan.selection.empty:
            return [[] for _ in range(len(q_start))], None
        if plan.params.collapse_duplicates:
            return self.collapsed(plan, q_start, q_end, texts, timings, batch, uncollapsed)
        units = self.unit_of_passage.get(plan.unit)  # each passage's unit (None: phrases)
        batch = batch if batch is not None else self.dense.batch(plan, q_start, q_end, search=plan.mode != "lexical")
        if plan.mode == "dense":
            with timings.timing("search"):
                spans = self.dense.candidates(batch, plan.top_k, units)
            with timings.timing("aggregate"):
                return [self.hits.ranked(sp, plan, units) for sp in spans], None
        assert self.fusion is not None and texts is not None
        with timings.timing("search"):
            return self.fusion.search(plan, batch, texts)
