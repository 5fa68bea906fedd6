"""The last stage of a search: confidence for each ranked hit, abstention, and the page the request asked for."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spanseek.core.confidence import Calibrator
from spanseek.core.hits import Hit, Hits
from spanseek.core.params import SearchParams, SearchParamsError
from spanseek.core.plan import Plan
from spanseek.core.query_form import is_keyword_query


def unit_key(h: Hit, unit: str) -> object:
    """What a hit of ``unit`` is in any list of the same search: a phrase its span, a passage or document its id."""
    return (h.passage_id, h.start, h.end) if unit == "phrase" else h.passage_id if unit == "passage" else h.doc_id


def in_unfiltered(hits: list[Hit], unfiltered: list[Hit], unit: str) -> tuple[list[Hit], list[int]]:
    """A filtered list's hits placed in the same search's list without the filter (of ``unit``: a phrase is its
    span): that list with each of ``hits`` in its unit's place (or, below it, where its score ranks it), and each
    hit's position there, best first."""
    place = {unit_key(h, unit): i for i, h in enumerate(unfiltered)}
    placed = list(unfiltered)
    for h in hits:
        if unit_key(h, unit) in place:
            placed[place[unit_key(h, unit)]] = h
    # (stable: a hit keeps its unit's place among equal scores, and one not listed comes after them)
    merged = sorted([*placed, *(h for h in hits if unit_key(h, unit) not in place)], key=lambda h: -h.score)
    at = {id(h): i for i, h in enumerate(merged)}
    return merged, [at[id(h)] for h in hits]


def read_in(hits: list[Hit], among: list[Hit], unit: str, own_scores: bool) -> tuple[list[list[Hit]],
                                                                                   list[tuple[int, int]]]:
    """The lists ``hits``' confidence features are read in, and where each hit is read (list, row): a hit listed in
    ``among`` (the search without a filter, or without collapsing copies) is read there, with the other listed
    ``hits`` in their places (``own_scores``: with their own scores, which a filtered hybrid search fuses apart; else
    as ``among`` has them), so its features are those it has there; one not listed below them, where its score ranks
    it (``in_unfiltered``), so it adds nothing (no rank, no answer mass) to the listed ones."""
    merged, rows = in_unfiltered(hits, among, unit)
    listed = {unit_key(h, unit): i for i, h in enumerate(among)}
    alone = [h for h in merged if unit_key(h, unit) in listed] if own_scores else among
    at = {id(h): i for i, h in enumerate(alone)} if own_scores else {
        id(h): listed[unit_key(h, unit)] for h in hits if unit_key(h, unit) in listed}
    return [alone, merged], [(0, at[id(h)]) if id(h) in at else (1, r) for h, r in zip(hits, rows, strict=True)]


def with_listed(hits: list[Hit], listed: list[Hit], unit: str) -> tuple[list[Hit], list[int]]:
    """``listed`` (the search's list without collapsing copies) followed by those of ``hits`` it does not list, and
    where each of ``hits`` is in it (a listed hit as ``listed`` has it, with that list's score)."""
    at = {unit_key(h, unit): i for i, h in enumerate(listed)}
    whole = [*listed, *(h for h in hits if unit_key(h, unit) not in at)]
    at.update((unit_key(h, unit), i) for i, h in enumerate(whole[len(listed):], len(listed)))
    return whole, [at[unit_key(h, unit)] for h in hits]


def blank_page(params: SearchParams) -> Hits:
    """The page of a blank question (``core.text.has_text``), which is not searched: no hits, and ``no_answer`` where
    ``min_confidence`` asks for a hit that reaches it, as for a question whose search finds nothing."""
    return Pager.page_of([], params)


def scored(hits: Sequence[Hit]) -> tuple[list[float], list[float | None], list[float | None], list[str]]:
    """A ranked list as the calibrator reads it: its hits' scores, dense and lexical scores, and texts."""
    return [h.score for h in hits], [h.dense for h in hits], [h.lexical for h in hits], [h.text for h in hits]


class Pager:
    """Confidences from the model's calibrator (``core.confidence``) where it applies to the plan, then
    ``min_confidence`` and the page ``[offset, offset + top_k)``. Read hits (``core.reading``) bring their own
    confidence, from the reader's calibration."""

    def __init__(self, calibrator: Calibrator | None, phrase_rerank: dict[str, float] | None,
                 unanswerable_prior: float = 0.0):
        self.calibrator = calibrator
        self.phrase_rerank = phrase_rerank
        self.unanswerable_prior = unanswerable_prior  # when the request does not say

    def calibrated(self, plan: Plan) -> bool:
        """Whether the calibrator applies to this plan: its unit, mode and (hybrid) fusion and lexical weight."""
        if self.calibrator is None:
            return False
        return self.calibrator.applies(plan.unit, plan.mode, plan.fusion, plan.lexical_weight, self.phrase_rerank)

    def check(self, plan: Plan) -> None:
        """SearchParamsError when the plan asks for confidences the calibrator does not give: ``min_confidence`` (of
        a search without read: read hits have the reader's) or ``read_below`` (which judges the search without read)."""
        params = plan.params
        for name in ("min_confidence", "read_below"):
            gated = name == "read_below" or not params.read
            if getattr(params, name) is not None and gated and not self.calibrated(plan):
                raise SearchParamsError(f"{name} needs a calibrated model (unit={params.unit}, mode={plan.mode}); this "
                                        "model has no calibration for it (or for this fusion and lexical weight): fit "
                                        "one with `spanseek train calibrate`")

    def first_logits(self, plan: Plan, lists: Sequence[Sequence[Hit]], questions: Sequence[str] | None,
                     rows: Sequence[int] | None = None) -> list[tuple[float, float | None] | None] | None:
        """Per question, the calibrator's log-odds (correct, answer in the index; ``Calibrator.first_logits``) at
        the first hit of its ranked ``lists`` of the plan's unit, or at its row in ``rows``. None where the
        calibrator does not apply to the plan (``calibrated``)."""
        if not self.calibrated(plan):
            return None
        assert self.calibrator is not None
        return self.calibrator.first_logits(plan.unit, plan.mode, [scored(hits) for hits in lists],
                                            None if questions is None else [is_keyword_query(q) for q in questions],
                                            rows)

    def shifts(self, plan: Plan) -> bool:
        """Whether the plan's prior moves confidences read in its ranking: above 0, with a calibrator for it."""
        return self.prior(plan.params) > 0.0 and self.calibrated(plan)

    def prior(self, params: SearchParams) -> float:
        """The share of unanswerable questions the confidences assume: the request's, else the searcher's."""
        return self.unanswerable_prior if params.unanswerable_prior is None else params.unanswerable_prior

    @staticmethod
    def past_the_end(params: SearchParams, plan: Plan) -> bool:
        """Whether the page starts past the last passage or document the search may return (the page is empty, and
        nothing need be searched; not with ``min_confidence``, which judges the first hit)."""
        count = plan.selection.unit_count.get(params.unit)
        return count is not None and params.offset >= count and params.min_confidence is None

    def pages(self, ranked: list[list[Hit]], params: SearchParams, plan: Plan,
              questions: Sequence[str] | None = None, uncollapsed: list[list[Hit]] | None = None) -> list[Hits]:
        """Each question's ranked hits -> confidences (the calibrator evaluated once for the batch; the keyword
        models for the ``questions`` that read as keywords, where it has them), abstention, then the page of
        ``params``. A filtered hit's features are read in the list of the plan's ``unfiltered`` search where it has
        one (``in_unfiltered``), so it is as confident as without the filter; a hit of a search that collapsed copies
        (``collapse_duplicates``) likewise in the list without collapsing (``uncollapsed``: each question's, from
        ``Ranking.ranked``; the unfiltered search collapses none; filtered, that list's hits are placed in the
        unfiltered one, ``read_filtered``), so collapsing selects hits and re-scores none."""
        unfiltered = plan.unfiltered.hits if plan.unfiltered is not None else uncollapsed or None
        if not params.read and self.calibrator is not None and self.calibrated(plan):
            # each question's lists and where each of its hits is read in them (list, row)
            read = [([hits], [(0, r) for r in range(len(hits))]) if unfiltered is None else
                    self.read_filtered(hits, unfiltered[b], plan.unit, uncollapsed[b] if uncollapsed else None)
                    if plan.unfiltered is not None else read_in(hits, unfiltered[b], plan.unit, False)
                    for b, hits in enumerate(ranked)]
            keywords = None if questions is None else [is_keyword_query(q) for q in questions]
            lists = [(b, hits) for b, (many, _) in enumerate(read) for hits in many]
            conf = self.calibrator.confidences_of_hits(
                plan.unit, plan.mode, [scored(hits) for _, hits in lists], self.prior(params),
                None if keywords is None else [keywords[b] for b, _ in lists])
            if conf is not None:
                first = np.cumsum([0] + [len(many) for many, _ in read]).tolist()
                ranked = [[h.but(confidence=conf[first[b] + i][r]) for h, (i, r) in zip(hits, at, strict=True)]
                          for b, (hits, (_, at)) in enumerate(zip(ranked, read, strict=True))]
        return [self.page_of(hits, params) for hits in ranked]

    @staticmethod
    def read_filtered(hits: list[Hit], unfiltered: list[Hit], unit: str, uncollapsed: list[Hit] | None
                      ) -> tuple[list[list[Hit]], list[tuple[int, int]]]:
        """``read_in`` of a filtered search's hits (their own scores, placed in the ``unfiltered`` list); of one that
        collapsed copies, the hits of its list without collapsing (``uncollapsed``) are placed, as the search
        without collapsing places them, dropped copies and the scores of that list included (a deeper round's
        fusion scores a hit apart), and each kept hit is read at its own place among them."""
        if uncollapsed is None:
            return read_in(hits, unfiltered, unit, True)
        whole, where = with_listed(hits, uncollapsed, unit)
        lists, at = read_in(whole, unfiltered, unit, True)
        return lists, [at[i] for i in where]

    @staticmethod
    def page_of(hits: list[Hit], params: SearchParams) -> Hits:
        """Abstention (``min_confidence`` against the first hit), then the page ``[offset, offset + top_k)``."""
        if params.min_confidence is not None and (not hits or (hits[0].confidence or 0.0) < params.min_confidence):
            return Hits(no_answer=True)
        return Hits(hits[params.offset : params.offset + params.top_k])
