"""The last stage of a search: confidence for each ranked hit, abstention, and the page the request asked for."""

from __future__ import annotations

from collections.abc import Sequence

from spanseek.core.confidence import Calibrator
from spanseek.core.hits import Hit, Hits
from spanseek.core.params import SearchParams, SearchParamsError
from spanseek.core.plan import Plan
from spanseek.core.query_form import is_keyword_query


def in_unfiltered(hits: list[Hit], unfiltered: list[Hit], unit: str) -> tuple[list[Hit], list[int]]:
    """A filtered list's hits placed in the same search's list without the filter (of ``unit``: a phrase is its
    span): that list with each of ``hits`` in its unit's place (or, below it, where its score ranks it), and each
    hit's position there, best first."""
    def key(h: Hit) -> object:
        return (h.passage_id, h.start, h.end) if unit == "phrase" else h.passage_id if unit == "passage" else h.doc_id

    place = {key(h): i for i, h in enumerate(unfiltered)}
    placed = list(unfiltered)
    for h in hits:
        if key(h) in place:
            placed[place[key(h)]] = h
    # (stable: a hit keeps its unit's place among equal scores, and one not listed comes after them)
    merged = sorted([*placed, *(h for h in hits if key(h) not in place)], key=lambda h: -h.score)
    at = {id(h): i for i, h in enumerate(merged)}
    return merged, [at[id(h)] for h in hits]


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
              questions: Sequence[str] | None = None) -> list[Hits]:
        """Each question's ranked hits -> confidences (the calibrator evaluated once for the batch; the keyword
        models for the ``questions`` that read as keywords, where it has them), abstention, then the page of
        ``params``. A filtered hit's features are read in the list of the plan's ``unfiltered`` search where it has
        one (``in_unfiltered``), so it is as confident as without the filter."""
        unfiltered = None if plan.unfiltered is None else plan.unfiltered.hits
        if not params.read and self.calibrator is not None and self.calibrated(plan):
            lists, rows = zip(*[(hits, range(len(hits))) if unfiltered is None else
                                in_unfiltered(hits, unfiltered[b], plan.unit) for b, hits in enumerate(ranked)],
                              strict=True) if ranked else ((), ())
            conf = self.calibrator.confidences_of_hits(
                plan.unit, plan.mode, [([h.score for h in hits], [h.dense for h in hits], [h.lexical for h in hits],
                                        [h.text for h in hits]) for hits in lists], self.prior(params),
                None if questions is None else [is_keyword_query(q) for q in questions])
            if conf is not None:
                ranked = [[h.but(confidence=cs[r]) for h, r in zip(hits, at, strict=True)]
                          for hits, cs, at in zip(ranked, conf, rows, strict=True)]
        return [self.page_of(hits, params) for hits in ranked]

    @staticmethod
    def page_of(hits: list[Hit], params: SearchParams) -> Hits:
        """Abstention (``min_confidence`` against the first hit), then the page ``[offset, offset + top_k)``."""
        if params.min_confidence is not None and (not hits or (hits[0].confidence or 0.0) < params.min_confidence):
            return Hits(no_answer=True)
        return Hits(hits[params.offset : params.offset + params.top_k])
