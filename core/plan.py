"""One batch's search plan (the request with every default resolved) and the stage timings it collects.

The ``Searcher`` turns a ``SearchParams`` into a ``Plan`` once per batch; every stage (``core.dense``,
``core.fusion``, ``core.reading``, ``core.page``) reads what it needs from the plan instead of a list of arguments.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from spanseek.core.lexical import FusionBasis
from spanseek.core.params import Fusion, Hit, Mode, SearchParams, Unit
from spanseek.core.postings import Postings
from spanseek.core.selection import Selection


class Unfiltered(NamedTuple):
    """A filtered search's questions searched without the filter (``Searcher``'s unfiltered stage): each one's hits
    (which the filtered hits' confidence is read in, ``core.page``), each one's candidates where hybrid fusion
    standardises over them (which the filtered ones are fused against; None in the dense and lexical modes), and the
    dense batch (whose flat scan's products the filtered search takes over)."""

    hits: list[list[Hit]]
    basis: list[FusionBasis] | None
    batch: Any  # a core.dense.DenseBatch (core.dense imports this module)

    def of_questions(self, picked: Sequence[int]) -> Unfiltered:
        """The same for the questions ``picked`` (positions in this batch; question i is ``picked[i]``), as a deeper
        search of some of them sees it."""
        return Unfiltered([self.hits[b] for b in picked],
                          None if self.basis is None else [self.basis[b] for b in picked], self.batch)


@dataclass(frozen=True)
class Plan:
    """params: the request as ranked (``top_k`` is the ranking depth, offset 0, no abstention); mode, fusion and
    lexical_weight: resolved from the index's defaults; max_tokens: the longest answer; vectors: where span
    completion reads neighbour vectors; selection: the passages the search may return; unfiltered: the same search
    without its filter, where a filter would otherwise change a unit's score, rank or confidence; bm25: the BM25
    postings of the plan's questions (``core.postings.Postings``), where a search of the same questions has made them
    (the unfiltered search's, which the filtered one takes over)."""

    params: SearchParams
    mode: Mode
    fusion: Fusion
    lexical_weight: float
    max_tokens: int
    vectors: Callable[[np.ndarray], np.ndarray]
    selection: Selection
    unfiltered: Unfiltered | None = None
    bm25: Postings | None = None

    @property
    def unit(self) -> Unit:
        return self.params.unit

    @property
    def top_k(self) -> int:
        return self.params.top_k

    def but(self, **changes: Any) -> Plan:
        """This plan with some of its ``params`` changed (``top_k``, ``merge_answers``, ...)."""
        return dataclasses.replace(self, params=dataclasses.replace(self.params, **changes))


@dataclass
class StageTimes:
    """Seconds spent per stage over a batch (summed over its searches): the service reports them per request.

    ``intervals`` keeps each timed run as (stage, start, end) in ``time.perf_counter`` seconds, in order: the
    service turns them into trace spans with their real start and end times.
    """

    encode: float = 0.0
    search: float = 0.0
    aggregate: float = 0.0
    read: float = 0.0
    intervals: list[tuple[str, float, float]] = field(default_factory=list, compare=False, repr=False)

    def add(self, stage: str, start: float, end: float) -> None:
        """Count one run of ``stage`` from ``start`` to ``end`` (perf_counter seconds)."""
        setattr(self, stage, getattr(self, stage) + end - start)
        self.intervals.append((stage, start, end))

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, t0, time.perf_counter())

    @classmethod
    def total(cls, parts: Iterable[StageTimes]) -> StageTimes:
        """The stages of several runs together: seconds summed, intervals in order of start."""
        out = cls()
        for stage, start, end in sorted((i for part in parts for i in part.intervals), key=lambda i: i[1]):
            out.add(stage, start, end)
        return out
