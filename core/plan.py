"""One batch's search plan (the request with every default resolved) and the stage timings it collects.

The ``Searcher`` turns a ``SearchParams`` into a ``Plan`` once per batch; every stage (``core.dense``,
``core.fusion``, ``core.reading``, ``core.page``) reads what it needs from the plan instead of a list of arguments.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from spanseek.core.params import Fusion, Mode, SearchParams, Unit
from spanseek.core.selection import Selection


@dataclass(frozen=True)
class Plan:
    """params: the request as ranked (``top_k`` is the ranking depth, offset 0, no abstention); mode, fusion and
    lexical_weight: resolved from the index's defaults; max_tokens: the longest answer; vectors: where span
    completion reads neighbour vectors; selection: the passages the search may return."""

    params: SearchParams
    mode: Mode
    fusion: Fusion
    lexical_weight: float
    max_tokens: int
    vectors: Callable[[np.ndarray], np.ndarray]
    selection: Selection

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
    """Seconds spent per stage over a batch (summed over its searches): the service reports them per request."""

    encode: float = 0.0
    search: float = 0.0
    aggregate: float = 0.0
    read: float = 0.0

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, stage, getattr(self, stage) + time.perf_counter() - t0)
