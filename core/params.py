"""The search's types, each defined once: a request's parameters (``SearchParams``, validated once where it is
made) and a hit (``Hit``).

The HTTP route, the micro-batcher, the CLI (``spanseek search``, ``spanseek eval``) and the benchmarks build a
``SearchParams`` and hand it whole to ``core.search.Searcher``; requests with equal parameters share one search
call in the batcher (the dataclasses are hashable: a filter's lists and objects are held as tuples). Server-side limits (largest top_k, nprobe, ...) are the service's
business and are checked in the route; what is checked here holds for every caller.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from spanseek.core.filters import META_TYPES as META_TYPES
from spanseek.core.filters import MetaValue as MetaValue
from spanseek.core.filters import SearchFilter as SearchFilter
from spanseek.core.filters import SearchParamsError as SearchParamsError
from spanseek.core.options import option

Unit = Literal["phrase", "passage", "doc"]
UNITS: tuple[Unit, ...] = get_args(Unit)
Mode = Literal["dense", "lexical", "hybrid"]
MODES: tuple[Mode, ...] = get_args(Mode)
Fusion = Literal["score", "rrf"]
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)
CollapseMode = Literal["exact", "near"]
COLLAPSE_MODES: tuple[CollapseMode, ...] = get_args(CollapseMode)
VectorSource = Literal["fine", "codes"]
VECTOR_SOURCES: tuple[VectorSource, ...] = get_args(VectorSource)


MAX_READ_PASSAGES = 64  # a question's reading cost grows with each passage read
MAX_LEXICAL_WEIGHT = 1000.0  # beyond it BM25 alone decides (and fused scores lose the dense part to rounding)


@dataclass(frozen=True)
class SearchParams:
    """What to search for and how; an option left unset takes the index's (or model's) default.

    The one definition of the search parameters: each field's help is also its ``spanseek search`` flag
    (``core.options``) and its field of the HTTP request (``service.schemas.SearchRequest``); ``http=False`` fields
    are not request fields (the unit is the route's ``?unit=``; the filter has its own request model).
    """

    unit: Unit = option("phrase", "what to return: answer phrases, passages or documents", http=False)
    top_k: int = option(10, "hits per question")
    max_answer_tokens: int | None = option(None, "longest answer phrase in tokens (default: the model's)")
    nprobe: int | None = option(None, "IVF lists visited (IVF indexes; default: the index's; an exact index, which "
                                "scores every token, ignores it)")
    vector_source: VectorSource | None = option(
        None, "where span completion reads neighbour vectors, fine (the fine store) or codes (decoded compressed "
        "codes); default: the index's", http=False)
    merge_answers: bool = option(
        False, "phrase unit only: one hit per distinct answer (phrases that read the same once normalised), scored "
        "by the log of the summed exp(score) of its phrases; the hit shows its best phrase (read hits are one per "
        "answer already)")
    collapse_duplicates: bool | CollapseMode = option(
        False, "keep only the best-ranked of hits that are copies: true or exact, passages whose texts are the same "
        "once runs of whitespace are one space and letters lower case (a paragraph copied into several documents); "
        "near, also near copies (lightly edited copies, boilerplate variants): texts whose words, so normalised, "
        "match in order for at least 70% of them (2 x matched / total words), found among the hits ranked; phrase "
        "unit: the same phrase in a copy (near: the same phrase text in a near copy) of its passage; doc unit: "
        "documents whose passages are copies, in order (near: whose whole texts are near copies). The kept hit "
        "gives how many copies it stands for and their documents (copies, copy_doc_ids); the page is filled from a "
        "deeper ranking. Not with read")
    mode: Mode | None = option(None, "dense (phrase vectors), lexical (BM25 over passages) or hybrid (both fused); "
                               "default: the index's")
    fusion: Fusion | None = option(None, "hybrid passage/doc ranking (and the passages a phrase search with read "
                                   "reads): score (normalised scores, weighted) or rrf (reciprocal rank fusion, "
                                   "unweighted); default: the index's. Refused where it would rank nothing: outside "
                                   "hybrid, and for phrases without read")
    lexical_weight: float | None = option(
        None, "hybrid: weight of the normalised BM25 score, 0 to 1000 (phrase unit: added to each span's dense "
        "score; passage/doc: to the normalised dense score; phrase with read: the passages read are ranked with "
        "the same multiple of the passage unit's weight); default: the one fitted for the unit. Refused where it "
        "would weigh nothing: outside hybrid, and with fusion rrf")
    offset: int = option(0, "hits to skip before the top_k returned: page n (from 0) is offset = n x top_k, with "
                         "the same rank_window for every page")
    rank_window: int | None = option(
        None, "the depth of the ranking the page is cut from (at least offset + top_k): pages asked with the same "
        "rank_window are slices of one list, with no hit repeated or skipped; default offset + top_k (a deeper "
        "ranking weighs more candidates, so its first hits may differ)")
    allow_overlap: bool = option(
        False, "phrase unit: also return phrases that overlap a better one in the same passage (\"1340\", "
        "\"In 1340\"); by default phrase hits do not overlap (passages and documents never do)")
    min_confidence: float | None = option(
        None, "abstain (no hits, no_answer) when the best hit's confidence is below this (0-1); needs a calibrated "
        "model")
    unanswerable_prior: float | None = option(
        None, "the share of questions you expect to have no answer in the index (0-1): a hit's confidence is the "
        "probability that it is correct among such questions; default: the searcher's (0: every answer is in the "
        "index)")
    filter: SearchFilter | None = option(None, "search only the documents that pass it (SearchFilter)", cli=False,
                                         http=False)
    read: bool = option(
        False, "read the top passages with the cross-attention reader and answer with its spans (slower, more often "
        "exact; needs a reader); passages and documents are re-ranked by their best read answer")
    read_passages: int | None = option(None, "with read: passages (units) read per question (default: the reader's "
                                       "fitted one)")
    read_below: float | None = option(
        None, "with read: read only the questions whose best hit, as the search without read finds it, has a "
        "confidence below this (0-1); the others answer with that search's hits. Fewer questions read, for a little "
        "accuracy; needs a calibrated model")

    def __post_init__(self) -> None:
        if self.unit not in UNITS:  # not optional: None was a KeyError at search time
            raise SearchParamsError(f"unit must be one of {', '.join(UNITS)}; got {self.unit!r}")
        if self.top_k is None:  # (optional fields allow None; top_k is not)
            raise SearchParamsError("top_k must be an integer >= 1, got None")
        _positive("top_k", self.top_k)
        _positive("max_answer_tokens", self.max_answer_tokens)
        _positive("nprobe", self.nprobe)
        _positive("read_passages", self.read_passages)
        if not isinstance(self.read, bool):
            raise SearchParamsError(f"read must be true or false, got {self.read!r}")
        if self.read_passages is not None and self.read_passages > MAX_READ_PASSAGES:
            raise SearchParamsError(f"read_passages must be at most {MAX_READ_PASSAGES}, got {self.read_passages}")
        _one_of("vector_source", self.vector_source, VECTOR_SOURCES)
        _one_of("mode", self.mode, MODES)
        _one_of("fusion", self.fusion, FUSIONS)
        if self.merge_answers and self.unit != "phrase":
            raise SearchParamsError(f"merge_answers applies to unit=phrase, not unit={self.unit}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise SearchParamsError(f"offset must be an integer >= 0, got {self.offset!r}")
        _positive("rank_window", self.rank_window)
        if self.rank_window is not None and self.rank_window < self.offset + self.top_k:
            raise SearchParamsError(f"rank_window must be at least offset + top_k ({self.offset + self.top_k}), got "
                                    f"{self.rank_window}")
        for name in ("merge_answers", "allow_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise SearchParamsError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.collapse_duplicates, bool) and self.collapse_duplicates not in COLLAPSE_MODES:
            raise SearchParamsError("collapse_duplicates must be true, false, "
                                    f"{' or '.join(repr(m) for m in COLLAPSE_MODES)}, got {self.collapse_duplicates!r}")
        if self.collapse_duplicates is not False and self.read:
            raise SearchParamsError("collapse_duplicates does not apply with read=true (read hits are ranked by the "
                                    "reader; search without read to collapse copies)")
        for name in ("read_passages", "read_below"):  # asked for without read, they would be silently ignored
            if getattr(self, name) is not None and not self.read:
                raise SearchParamsError(f"{name} applies with read=true")
        for name in ("min_confidence", "unanswerable_prior", "read_below"):
            c = getattr(self, name)
            if c is not None and (isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c <= 1):
                raise SearchParamsError(f"{name} must be a number in [0, 1], got {c!r}")
        w = self.lexical_weight
        if w is not None and (isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= MAX_LEXICAL_WEIGHT):
            raise SearchParamsError(f"lexical_weight must be a number in [0, {MAX_LEXICAL_WEIGHT:g}] (larger ranks by "
                                    f"BM25 alone: use mode=lexical), got {w!r}")
        if self.filter is not None and not isinstance(self.filter, SearchFilter):
            raise SearchParamsError(f"filter must be a SearchFilter, got {type(self.filter).__name__}")
        why = unused_fusion(self, self.mode, self.fusion)  # asked for where they rank nothing, they were ignored
        if why is not None:
            raise SearchParamsError(why)


    @property
    def depth(self) -> int:
        """How deep the ranking the page is cut from is: ``rank_window``, else ``offset + top_k``."""
        return self.rank_window if self.rank_window is not None else self.offset + self.top_k


def unused_fusion(params: SearchParams, mode: Mode | None, fusion: Fusion | None) -> str | None:
    """Why ``params`` asks for ``fusion`` or ``lexical_weight`` where it would rank nothing, under ``mode`` and
    ``fusion`` (the request's own, or resolved from the index's defaults; None: not known), or None. Both weigh the
    dense and lexical legs of hybrid mode together, so they do nothing in another mode; reciprocal rank fusion has
    no weight, so ``lexical_weight`` does nothing with ``fusion=rrf`` where fusion ranks (passages and documents, and
    the passages a phrase search with read reads; phrases are ranked by the weight whatever the fusion). That
    ``fusion`` ranks no phrase is checked of a request (``core.fusion.check_fusion``), not here:
    parameters are also templates whose unit is changed per search (a benchmark's sweep over the units), and
    ``read_below`` searches a phrase request with read without read first, keeping its fusion for the read."""
    given = [name for name in ("fusion", "lexical_weight") if getattr(params, name) is not None]
    if given and mode is not None and mode != "hybrid":
        default = " (the index's default mode)" if params.mode is None else ""
        return (f"{given[0]} applies to mode=hybrid, which weighs the dense and lexical legs together; "
                f"mode={mode}{default} ranks by the {mode} leg alone")
    if fusion == "rrf" and params.lexical_weight is not None and (params.unit != "phrase" or params.read):
        default = " (the index's default fusion)" if params.fusion is None else ""
        return (f"lexical_weight does not apply with fusion=rrf{default}: reciprocal rank fusion adds the two legs' "
                "reciprocal ranks, unweighted; send fusion=score to weigh the BM25 score")
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_search_args(questions: object, params: object) -> list[str]:
    """The questions of ``Searcher.search(questions, params)`` as a list; TypeError naming what is wrong: a string
    where a list of them is expected (it was searched character by character), an item that is not a string, or
    params that are not a SearchParams (a dict of them, None). A tuple, or a one-dimensional numpy array of strings
    (a column of a table), is taken as the list it holds."""
    # numpy is not imported for this: this module imports only the standard library (spanseek.client uses it), and
    # an array exists only where numpy is imported already
    np = sys.modules.get("numpy")
    if np is not None and isinstance(questions, np.ndarray):
        if questions.ndim != 1:
            raise TypeError(f"questions must be a list of strings, got ndarray of shape {questions.shape}")
        questions = questions.tolist()  # numpy's strings as Python's
    if isinstance(questions, str | bytes) or not isinstance(questions, Sequence):
        raise TypeError(f"questions must be a list of strings, got {type(questions).__name__}"
                        + (" (search([question]) for one)" if isinstance(questions, str) else ""))
    for i, q in enumerate(questions):
        if not isinstance(q, str):
            raise TypeError(f"questions[{i}] must be a string, got {type(q).__name__}")
        if not q.isascii() and _SURROGATE.search(q):
            raise TypeError(f"questions[{i}] holds a lone surrogate (text that is not valid Unicode)")
    if not isinstance(params, SearchParams):
        raise TypeError(f"params must be a SearchParams, got {type(params).__name__}"
                        + (" (SearchParams(**options))" if isinstance(params, dict) else ""))
    return list(questions)


def _one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise SearchParamsError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SearchParamsError(f"{name} must be an integer >= 1, got {value!r}")


def _doc(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class Hit:
    """One result: the best phrase (of the unit), its character span in its passage, and where it is from.

    The one definition of a hit: the HTTP response's hit (``service.schemas.HitOut``) and the client's
    (``spanseek.client.Hit``) are generated from these fields and their help, plus ``HIT_WINDOW``.
    """

    text: str = field(metadata=_doc("the answer phrase"))
    score: float = field(metadata=_doc(
        "what the hit is ranked by: dense mode q_start . h_start + q_end . h_end (+ length bias); lexical the BM25 "
        "score; hybrid the fused score; read hits the log-odds of the reading model"))
    start: int = field(metadata=_doc("character offset of the phrase in `passage`"))
    end: int = field(metadata=_doc("character end offset (exclusive) of the phrase in `passage`"))
    passage_id: int = field(metadata=_doc("the passage's number in the index (changes when the index is compacted)"))
    passage: str = field(metadata=_doc("the passage text around the phrase (over HTTP: a window of it, all of it "
                                       "with full_passage)"))
    doc_id: str = field(metadata=_doc("the document's id in the corpus"))
    title: str = field(metadata=_doc("the document's title"))
    paragraph: int = field(default=0, metadata=_doc("the passage's number within its document, from 0"))
    meta: dict[str, Any] = field(default_factory=dict, metadata=_doc(
        "the document's metadata from the corpus, with its passage's own keys (passage_meta: a PDF page's page) over "
        "it; filters read the document's, and a passage condition the passage's own"))
    dense: float | None = field(default=None, metadata=_doc(
        "the dense leg's score: the phrase's, or the unit's best phrase's"))
    lexical: float | None = field(default=None, metadata=_doc(
        "the BM25 score of the passage (or document); null in dense mode"))
    confidence: float | None = field(default=None, metadata=_doc(
        "calibrated probability that the hit is correct (phrase: matches the answer; passage: contains it; doc: is "
        "the answer's document); null when the model has no calibration for the search"))
    read: float | None = field(default=None, metadata=_doc(
        "the reader's score of the phrase when the hit was read (read: true); null when it was not read"))
    copies: int | None = field(default=None, metadata=_doc(
        "with collapse_duplicates: how many passages the search may return hold this hit's passage text (unit=doc: "
        "documents this document's), itself included (near: or the text of a near copy ranked, and its copies); "
        "the others are left out of the hits. Left out (null over HTTP) without collapse_duplicates"))
    copy_doc_ids: list[str] | None = field(default=None, metadata=_doc(
        "with collapse_duplicates: the ids of the other copies' documents, distinct, in index order, at most 10. "
        "Left out (null over HTTP) without collapse_duplicates"))

    def to_dict(self) -> dict:
        """The hit's fields by name; those of ``COLLAPSE_FIELDS`` only when set (a search with
        ``collapse_duplicates``), so other searches' hits read as before."""
        out = {name: getattr(self, name) for name in HIT_FIELDS}  # asdict's deep copy costs 10x, per hit
        for name in COLLAPSE_FIELDS:
            if out[name] is None:
                del out[name]
        return out

    def but(self, **changes: Any) -> Hit:
        """A copy with ``changes``: ``dataclasses.replace`` without running the frozen constructor again (1.8 against
        9 us a hit; a search batch sets the confidence of hundreds)."""
        if not changes.keys() <= _HIT_FIELD_SET:
            raise TypeError(f"Hit has no field {sorted(changes.keys() - _HIT_FIELD_SET)[0]!r}")
        return Hit.of_fields({**self.__dict__, **changes})

    @staticmethod
    def of_fields(values: dict[str, Any]) -> Hit:
        """The hit of ``values``, a dict with every field (taken, not copied), made without the frozen constructor:
        2 against 4 us a hit, for the hits a search batch makes by the thousand."""
        new = object.__new__(Hit)
        object.__setattr__(new, "__dict__", values)
        return new


HIT_FIELDS = tuple(f.name for f in fields(Hit))
_HIT_FIELD_SET = frozenset(HIT_FIELDS)
COLLAPSE_FIELDS = ("copies", "copy_doc_ids")  # set by collapse_duplicates (core.duplicates), else left out
# What a hit sent over HTTP adds: where its window of the passage starts, and how long the whole passage is
HIT_WINDOW: dict[str, tuple[type, int, str]] = {
    "passage_offset": (int, 0, "where `passage` starts in the whole passage (0 with full_passage)"),
    "passage_chars": (int, 0, "length of the whole passage in characters"),
}


class Hits(list[Hit]):
    """One question's hits, best first; ``no_answer`` is True when the search abstained (``min_confidence``)."""

    def __init__(self, hits: Sequence[Hit] = (), no_answer: bool = False):
        super().__init__(hits)
        self.no_answer = no_answer
