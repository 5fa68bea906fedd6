"""One search request's parameters as one frozen value, validated once where it is made.

The HTTP route, the micro-batcher, the CLI (``spanseek search``, ``spanseek eval``) and the benchmarks build a
``SearchParams`` and hand it whole to ``core.search.Searcher``; requests with equal parameters share one search
call in the batcher (the dataclass is hashable). Server-side limits (largest top_k, nprobe, ...) are the service's
business and are checked in the route; what is checked here holds for every caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

Unit = Literal["phrase", "passage", "doc"]
UNITS: tuple[Unit, ...] = get_args(Unit)
Mode = Literal["dense", "lexical", "hybrid"]
MODES: tuple[Mode, ...] = get_args(Mode)
Fusion = Literal["score", "rrf"]
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)
VectorSource = Literal["fine", "codes"]
VECTOR_SOURCES: tuple[VectorSource, ...] = get_args(VectorSource)


class SearchParamsError(ValueError):
    """A search parameter is out of its valid range (the service answers 400)."""


@dataclass(frozen=True)
class SearchParams:
    """What to search for and how; ``None`` fields take the index's (or model's) default.

    unit: answer phrases, passages or documents.
    top_k: hits per question.
    max_answer_tokens: longest answer phrase in tokens (default: the model's).
    nprobe: IVF lists visited (compressed indexes; default: the index's).
    vector_source: where span completion reads neighbour vectors, ``fine`` or ``codes`` (default: the index's).
    merge_answers: phrase unit only: one hit per distinct answer string, its phrases' probabilities summed.
    mode: ``dense`` (phrase MIPS), ``lexical`` (BM25 over passages), ``hybrid`` (both fused); default: the index's.
    fusion: how hybrid ranks passages and documents: ``score`` (per-query normalised scores, weighted) or
        ``rrf`` (reciprocal rank fusion); default: the index's.
    lexical_weight: weight of the normalised lexical score in hybrid score fusion (phrase unit: added to each span's
        dense score; passage/doc: to the normalised dense score); default: the one fitted for the unit.
    offset: hits skipped before the ``top_k`` returned (pagination: page n is ``offset = n * top_k``); the page is
        cut from one ranking of ``offset + top_k`` hits.
    allow_overlap: phrase unit (passages and documents never overlap): keep phrases that overlap a better one in the same passage ("1340",
        "In 1340"); by default each phrase hit is the best of its stretch of text, filled to top_k from deeper ones.
    min_confidence: abstain (no hits, ``no_answer``) when the best hit's confidence is below this; needs a
        calibrated model (``core.confidence``).
    """

    unit: Unit = "phrase"
    top_k: int = 10
    max_answer_tokens: int | None = None
    nprobe: int | None = None
    vector_source: VectorSource | None = None
    merge_answers: bool = False
    mode: Mode | None = None
    fusion: Fusion | None = None
    lexical_weight: float | None = None
    offset: int = 0
    allow_overlap: bool = False
    min_confidence: float | None = None

    def __post_init__(self) -> None:
        _one_of("unit", self.unit, UNITS)
        _positive("top_k", self.top_k)
        _positive("max_answer_tokens", self.max_answer_tokens)
        _positive("nprobe", self.nprobe)
        _one_of("vector_source", self.vector_source, VECTOR_SOURCES)
        _one_of("mode", self.mode, MODES)
        _one_of("fusion", self.fusion, FUSIONS)
        if self.merge_answers and self.unit != "phrase":
            raise SearchParamsError(f"merge_answers applies to unit=phrase, not unit={self.unit}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise SearchParamsError(f"offset must be an integer >= 0, got {self.offset!r}")
        c = self.min_confidence
        if c is not None and (isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c <= 1):
            raise SearchParamsError(f"min_confidence must be a number in [0, 1], got {c!r}")
        w = self.lexical_weight
        if w is not None and (isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0):
            raise SearchParamsError(f"lexical_weight must be a finite number >= 0, got {w!r}")


def _one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise SearchParamsError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SearchParamsError(f"{name} must be an integer >= 1, got {value!r}")
