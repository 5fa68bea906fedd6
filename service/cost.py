"""What one search request costs the batcher, in question-equivalents: the unit admission and batches count.

A question-equivalent is the work of one ``phrase`` question at the default depth in a full batch. A question
costs more the deeper its ranking (``depth``: ``rank_window``, else ``offset + top_k``): a phrase search completes spans for 2 x depth
start and end tokens, a ``passage`` or ``doc`` search for 8 x depth, and the latter widens its token search
(4x a round) until ``depth`` distinct units are among the candidates, which costs more and more as the depth nears
the number of passages or documents in the index, and at that number completes spans for every token. Reading
adds a reader pass per passage read (``READ_PASSAGE_COST``, measured apart). The factors below were measured on the demo index (22 documents, 1,022
passages, 146k tokens; ``python bench/attack.py --parts cost``: 16-question batches, seconds per batch against 16
default phrase questions), per unit: documents, each of many passages, are found sooner than passages;
docs/service.md lists them. At full depth every token is searched, so that point scales with the index's tokens
(at the demo index's 146k: 6.1 for passages, 11.1 for documents; never below the 90% point).

The service refuses (400) a request whose cost exceeds ``max_request_cost``, queues work by cost
(service/batcher.py, service/overload.py) and shares it fairly between clients (service/fairness.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from spanseek.core.confidence import FEATURE_DEPTH
from spanseek.core.params import SearchParams

# Question-equivalents per unit of depth, at least 1. The phrase constant is an earlier fit (1.16 at depth 100, 2.84
# at 200); the last measurement read 1.94 and 2.22, beside another job (load average 2-3.4), so it is kept. Passages:
# 2.31 at depth 102, a tenth of the demo index's passages.
PHRASE_DEPTH_COST = 0.0142
UNIT_DEPTH_COST = 0.0226
# A passage or document search, times this factor of its depth's share of the index's units (linear in between;
# never below 1: shallower pages measured a little under the depth term). Past 0.9 the cost climbs steeply: the
# rarest units are found only by searching almost every token; the last point is for an index of FULL_DEPTH_TOKENS
# tokens and scales with the index's tokens. Measured cost at each share (demo index, 2-core Xeon with AMX):
# passages 3.3 / 9.1 / 21.2 / 115.6 / 140.7 at 0.25 / 0.5 / 0.75 / 0.9 / 1.0 of them, documents 0.93 / 0.96 / 1.2 /
# 1.4 / 11.1 at 0.27 / 0.5 / 0.73 / 0.91 / 1.0 (two runs beside another job gave 5.7 and 11.1 for every document:
# the larger is kept).
SHARE_FACTOR = {
    "passage": ((0.0, 1.0), (0.5, 1.0), (0.75, 1.25), (0.9, 5.6), (1.0, 6.1)),
    "doc": ((0.0, 1.0), (0.5, 1.0), (0.73, 1.2), (0.91, 1.4), (1.0, 11.1)),
}
FULL_DEPTH_TOKENS = 146_352
# A search with a filter that may leave units out also runs the same search without its filter first (core.search,
# Searcher._unfiltered): in hybrid mode always (fusion's basis), in the dense and lexical modes for the confidences
# (counted as if the model were calibrated, as the bundled ones are; not with read, whose confidences are the
# reader's). A filtered batch of 64 against an unfiltered one on the demo index (bench/filtered_hybrid.py, CPU time,
# two runs): hybrid 1.26-1.45 (phrases 1.35-1.43; 1.45 with other filters), dense 1.17-1.30; the larger is kept.
# Lexical measured 1.5-2.0 of its own unfiltered batch, but that is 29-58 ms against 200-215 for the dense one each
# question is counted as: a filtered lexical question still costs under the question-equivalent it is counted.
FILTERED_FACTOR = {"hybrid": 1.45, "dense": 1.3, "lexical": 1.0}
# A search that collapses copies (collapse_duplicates, core.ranking) ranks a question whose page held copies once more,
# 4 times deeper (and again while it stays short). CPU time of collapsing against plain batches of 32 validation
# questions at top_k 10 (deeper.py-style count of the rounds, two runs, the smaller kept): on the demo index (two
# copied paragraphs) 1-2% of the questions rank deeper and the batch costs 1.01-1.02 times as much; on an index of
# 5 of its articles with every third paragraph copied and one article filed twice (483 passages, 11 documents)
# every question ranks deeper: 1.25 for phrases and passages, 1.59 for documents (whose deeper round ranks all 11).
# The factors of the index full of copies are kept: admission cannot know how many a page will hold.
COLLAPSE_FACTOR = {"phrase": 1.25, "passage": 1.25, "doc": 1.6}
# collapse_duplicates="near" also compares each ranked hit's text with the kept hits' (core.duplicates): CPU time
# against exact collapsing, batches of 64 validation questions (every 4th of them: 1,122) on the demo index, whose
# one near-copied paragraph changed 11 passage pages: passages 1.09-1.15 (first run, then with the pairs compared
# kept), phrases 1.01-1.04, documents 1.04-1.09 (the exact ones read 0.96-1.02 of plain batches). But a ranking of
# near copies of one kept hit compares far more: its comparisons stop at core.duplicates.NEAR_WORK a hit of the page
# (over all of a question's rankings), which such a ranking spends in full. Measured with bench/near_copies_cost.py
# (each case against a batch of 64 default phrase questions in the same process, 2 loaded cores): 0.29 and 0.23
# question-equivalents a hit of the page for passages (top_k 10, 100), 0.33 and 0.29 for 2,000-word documents, 0.53
# for 6,000-word ones at top_k 10. The largest is counted for each hit of the depth, over exact collapsing's cost
# (admission cannot know how many near copies a ranking holds).
NEAR_HIT_COST = 0.55
# Reading: question-equivalents per passage read. CPU time (this process, all threads) of batches of validation
# phrase questions read at 1, 3 and 5 passages against the same batches unread, a line fitted through the ratios
# (bench/reading.py --parts cost; demo index, default model and reader in ONNX Runtime, AMD EPYC with AVX-512 bf16,
# 2 cores shared with other jobs): 2.59 and 2.35 a passage in batches of 16 (max_batch_size's default), 2.78 in
# batches of 64; a question read at the reader's default 3 passages measured 8.0-9.4 question-equivalents in all
# (bench/results/reading_cost.json).
# The largest is kept.
READ_PASSAGE_COST = 2.8


@dataclass(frozen=True)
class CostModel:
    """The per-question cost of a search on one index: its unit counts and the service's defaults."""

    units: Mapping[str, int]  # "passage" and "doc": how many the index serves (deleted documents' not counted)
    tokens: int = FULL_DEPTH_TOKENS  # in the index
    default_top_k: int = 10
    # the served reader's fitted number of passages (core.reading.Reading.read_passages): what a read request that
    # gives no read_passages reads; None without a reader (read is refused)
    read_passages: int | None = None
    default_mode: str = "hybrid"  # the index's, for requests that name no mode
    unanswerable_prior: float = 0.0  # the server's, for requests that give none
    # whether every token of every passage is indexed (no token filter): then a passage or document search finds every
    # unit; a filter may leave a passage without an indexed token, which no dense search finds (service.bounds)
    every_token_indexed: bool = True

    def question(self, params: SearchParams) -> float:
        """Question-equivalents of one question searched with ``params``: its searches and its reading."""
        return self.searches(params) + READ_PASSAGE_COST * self.passages_read(params)

    def searches(self, params: SearchParams) -> float:
        """Question-equivalents of one question's searches with ``params``: its search, and with read the searches
        without reading beside it: ``read_below``'s first one, and at a prior above 0 those its answer's presence
        is read in (``presence_searches``). Each is counted as the question's own search."""
        unread = (params.read_below is not None) + self.presence_searches(params) if params.read else 0
        return self.search(params) * (1 + unread)

    def presence_searches(self, params: SearchParams) -> int:
        """The searches a read question runs at a prior above 0 for the presence of its answer (core.reading.presence;
        counted as if the model were calibrated, as the bundled ones are): the units read ranked again as deep as the
        calibration reads them (``FEATURE_DEPTH``) where they were ranked shallower (a phrase's passages, read
        ``read_passages`` deep), and with a filter that may leave units out, the search without it. None otherwise:
        the presence is read in the ranking of the units read."""
        prior = self.unanswerable_prior if params.unanswerable_prior is None else params.unanswerable_prior
        if not params.read or prior <= 0:
            return 0
        read = self.passages_read(params)
        unit, depth = ("passage", read) if params.unit == "phrase" else (params.unit, max(params.depth, read))
        filtered = params.filter is not None and not params.filter.passes_everything
        return int(depth < FEATURE_DEPTH[unit]) + int(filtered)

    def passages_read(self, params: SearchParams) -> int:
        """Passages one question with ``params`` has read: ``read_passages``, else the reader's default (with
        ``read_below``, at most that many: admission cannot know which questions will be read)."""
        return (params.read_passages or self.read_passages or 0) if params.read else 0

    def search(self, params: SearchParams) -> float:
        """Question-equivalents of one question's search with ``params``, without its reading."""
        depth = params.depth
        if params.unit == "phrase":
            cost = max(1.0, PHRASE_DEPTH_COST * depth) * self.filtered_factor(params) * collapse_factor(params)
        elif params.offset >= self.units.get(params.unit, depth) and params.min_confidence is None:
            return 1.0  # the page starts past the index's last unit: nothing is searched (core.page.Pager.past_the_end)
        else:
            share = min(1.0, depth / max(1, self.units.get(params.unit, depth)))
            table = SHARE_FACTOR[params.unit]
            factor = float(np.interp(share, [x for x, _ in table], self._share_factors(params.unit)))
            cost = max(1.0, UNIT_DEPTH_COST * depth) * factor * self.filtered_factor(params) * collapse_factor(params)
        if params.collapse_duplicates == "near":
            cost += self.near_cost(params)
        return cost

    @staticmethod
    def near_cost(params: SearchParams) -> float:
        """What comparing the ranked texts for near copies may add to a question (``NEAR_HIT_COST`` a hit of the
        page the comparisons' budget is sized by: its depth, at least the depth a calibrated search ranks,
        ``FEATURE_DEPTH``, unless it reads)."""
        return NEAR_HIT_COST * (params.depth if params.read else max(params.depth, FEATURE_DEPTH[params.unit]))

    def filtered_factor(self, params: SearchParams) -> float:
        """What a question with ``params`` costs for its search without its filter (``FILTERED_FACTOR``): 1 without a
        filter that may leave units out, and in the dense and lexical modes with read."""
        flt, mode = params.filter, params.mode or self.default_mode
        if flt is None or flt.passes_everything or (mode != "hybrid" and params.read):
            return 1.0
        return FILTERED_FACTOR.get(mode, 1.0)

    def _share_factors(self, unit: str) -> list[float]:
        """The factors of ``SHARE_FACTOR[unit]`` with the full-depth one scaled to this index's tokens."""
        *factors, full = (y for _, y in SHARE_FACTOR[unit])
        return [*factors, max(factors[-1], full * self.tokens / FULL_DEPTH_TOKENS)]

    def request(self, questions: int, params: SearchParams) -> float:
        """Question-equivalents of a request of ``questions`` questions (at least one: blank ones are cheap but not
        free)."""
        return max(1, questions) * self.question(params)

    def most_passages_read(self, limits: RequestLimits) -> int:
        """The most passages one request may have read: ``max_passages_read``, by default a request of the most
        questions at the reader's default ``read_passages``."""
        return limits.max_passages_read or limits.max_queries_per_request * (self.read_passages or 1)

    def refusal(self, questions: int, params: SearchParams, limits: RequestLimits) -> str | None:
        """Why a request of ``questions`` questions with ``params`` is more than this server ever admits, or None.

        Its search is bounded by ``max_request_cost``, its reading apart by the passages it has read: a read
        question costs about ten unread ones (``READ_PASSAGE_COST``), so one limit on both would refuse a read
        request of a few questions that the same request unread passes. The whole must fit the queue.
        """
        n = max(1, questions)
        search, read = n * self.searches(params), n * self.passages_read(params)
        most_read = self.most_passages_read(limits)
        if search > limits.max_request_cost:
            return (f"this request would cost {search:.0f} question-equivalents, over this server's limit of "
                    f"{limits.max_request_cost:g} (max_request_cost) ({questions} questions, {self.explain(params)}); "
                    "ask fewer questions or a shallower page (top_k + offset, rank_window)")
        if read > most_read:
            return (f"this request would have {read} passages read ({questions} questions x read_passages "
                    f"{self.passages_read(params)}), over this server's limit of {most_read} (max_passages_read); "
                    "ask fewer questions or fewer read_passages")
        if (cost := self.request(questions, params)) > limits.max_queue:
            return (f"this request would cost {cost:.0f} question-equivalents, more than this server's whole queue "
                    f"holds ({limits.max_queue}, max_queue) ({questions} questions, {self.explain(params)}); ask "
                    "fewer questions, a shallower page or fewer read_passages")
        return None

    def explain(self, params: SearchParams) -> str:
        """Why a question with ``params`` costs what it does, for the 400 beyond ``max_request_cost``."""
        depth = params.depth
        what = f"unit={params.unit}, {'rank_window' if params.rank_window else 'offset + top_k'} = {depth}"
        if params.unit != "phrase":
            what += f" of the index's {self.units.get(params.unit, 0)} {params.unit}s"
        if self.filtered_factor(params) > 1.0:
            what += ", filtered (also searched without the filter)"
        if collapse_factor(params) > 1.0:
            what += ", collapsing copies (ranked deeper where the page holds some)"
        if params.collapse_duplicates == "near":
            what += (f", comparing the ranked texts for near copies ({self.near_cost(params):.1f} of it; "
                     '"collapse_duplicates": "exact" does not compare them)')
        if not params.read:
            return f"{what}: {self.question(params):.1f} question-equivalents a question"
        n = self.passages_read(params)
        return (f"{what}, {n} passages read: {self.question(params):.1f} question-equivalents a question, "
                f"{self.searches(params):.1f} its search and {n * READ_PASSAGE_COST:.1f} its reading "
                f"({READ_PASSAGE_COST:g} a passage)")


class RequestLimits(Protocol):
    """The settings that bound one request's work (service.settings.Settings)."""

    max_request_cost: float
    max_passages_read: int | None
    max_queries_per_request: int
    max_queue: int


def collapse_factor(params: SearchParams) -> float:
    """What a question with ``params`` costs for the deeper rankings that fill a page of collapsed copies
    (``COLLAPSE_FACTOR``; near copies' comparisons are counted apart, ``NEAR_HIT_COST``): 1 without
    ``collapse_duplicates``."""
    if params.collapse_duplicates is False:
        return 1.0
    return COLLAPSE_FACTOR[params.unit]
