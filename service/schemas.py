"""Request and response schemas of the HTTP API (pydantic); these also make the OpenAPI document at /docs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from spanseek.core.params import Fusion, MetaValue, Mode, SearchFilter, Unit

__all__ = ["ErrorResponse", "FilterIn", "HealthResponse", "HitOut", "InfoResponse", "QueryResult", "ReloadRequest",
           "ReloadResponse", "SearchRequest", "SearchResponse", "Timings", "Unit"]

MAX_FILTER_IDS = 10_000  # document ids in one filter
MAX_FILTER_KEYS = 64  # metadata keys in one filter


def unencodable_at(text: str) -> int | None:
    """Index of the first character that has no UTF-8 form (a lone surrogate), or None when ``text`` encodes.

    JSON lets a client send ``"\\ud800"``, and raw bytes ED A0 80 decode (surrogatepass) to the same lone
    surrogate; the tokenizer refuses such text, so it is caught here, before the question joins a batch.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


class FilterIn(BaseModel):
    """Which documents to search: every condition given must hold (``core.params.SearchFilter``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    doc_ids: list[str] | None = Field(None, min_length=1, max_length=MAX_FILTER_IDS,
                                      description="only these documents (their ids)")
    title_prefix: str | None = Field(None, description="only documents whose title starts with this (case-sensitive)")
    meta: dict[str, MetaValue] | None = Field(
        None, max_length=MAX_FILTER_KEYS, description="only documents whose metadata has each key with an equal "
        "value (strings, numbers, booleans or null; true is not 1)", examples=[{"lang": "en"}],
    )

    def to_filter(self) -> SearchFilter:
        """The core filter (raises SearchParamsError for a value it refuses)."""
        return SearchFilter(doc_ids=tuple(self.doc_ids) if self.doc_ids is not None else None,
                            title_prefix=self.title_prefix, meta=tuple(self.meta.items()) if self.meta else None)


class SearchRequest(BaseModel):
    """Body of ``POST /search``: exactly one of ``query`` / ``queries`` plus optional search parameters.

    Range checks against the server's limits (top_k, nprobe, ...) happen in the route and answer 400;
    schema violations (wrong types, both or neither of query/queries, text that is not valid Unicode) answer 422.
    Types are strict: ``"top_k": "5"`` or ``"merge_answers": "yes"`` is a 422, not silently converted.
    """

    # oneOf in the OpenAPI schema tells clients (and the fuzzer) the exactly-one rule the validator enforces
    model_config = ConfigDict(
        extra="forbid", strict=True,
        json_schema_extra={"oneOf": [{"required": ["query"]}, {"required": ["queries"]}]},
    )

    query: str | None = Field(None, description="one question", examples=["Who built the castle?"])
    queries: list[str] | None = Field(None, min_length=1, description="several questions, answered in order")
    top_k: int | None = Field(None, description="hits per question (default: server's default_top_k)")
    # "max_answer_length" is the name older clients send; it is still accepted
    max_answer_tokens: int | None = Field(
        None, description="longest answer phrase in tokens (default: the model's)",
        validation_alias=AliasChoices("max_answer_tokens", "max_answer_length"),
    )
    nprobe: int | None = Field(None, description="IVF lists to visit (compressed indexes only)")
    mode: Mode | None = Field(
        None, description="dense (phrase vectors), lexical (BM25 over passages) or hybrid (both fused); default: "
        "the server's (GET /info)",
    )
    fusion: Fusion | None = Field(
        None, description="hybrid passage/doc ranking: score (normalised scores, weighted) or rrf (reciprocal rank "
        "fusion); default: the index's",
    )
    lexical_weight: float | None = Field(
        None, description="hybrid: weight of the normalised BM25 score, 0 to 1000 (default: the one fitted for the "
        "unit)",
    )
    merge_answers: bool = Field(
        False, description="unit=phrase only: one hit per distinct answer (phrases that read the same once "
        "normalised), scored by the log of the summed exp(score) of its phrases; the hit shows its best phrase",
    )
    offset: int | None = Field(
        None, description="hits to skip before the top_k returned: page n (from 0) is offset = n x top_k; offset + "
        "top_k is bounded by the server's max_offset_top_k (GET /info)",
    )
    allow_overlap: bool = Field(
        False, description="unit=phrase: also return phrases that overlap a better one in the same passage (\"1340\", "
        "\"In 1340\"); by default phrase hits do not overlap",
    )
    min_confidence: float | None = Field(
        None, description="abstain when the best hit's confidence is below this (0-1): the question gets no hits and "
        "no_answer = true; needs a calibrated model (GET /info: confidence)",
    )
    read: bool = Field(
        False, description="read the top passages with the cross-attention reader and answer with its spans "
        "(slower, more often exact; needs a server with a reader: GET /info reader); passages and documents are "
        "re-ranked by their best read answer",
    )
    read_passages: int | None = Field(
        None, description="with read: passages (units) read per question, up to the server's max_read_passages "
        "(default: the reader's fitted one)",
    )

    filter: FilterIn | None = Field(
        None, description="search only the documents that pass it; applied inside the search, so top_k is still "
        "filled when enough documents pass",
    )

    full_passage: bool = Field(
        False, description="return each hit's whole passage instead of a window of the server's passage_context_chars "
        "characters on each side of the phrase (whole passages can be large; the response size is capped)",
    )

    @field_validator("query", "queries")
    @classmethod
    def _valid_unicode(cls, v: str | list[str] | None) -> str | list[str] | None:
        """Refuse text the tokenizer cannot take (lone surrogates), naming the question and the character."""
        for n, text in enumerate([v] if isinstance(v, str) else v or []):
            at = unencodable_at(text)
            if at is not None:
                where = "" if isinstance(v, str) else f"question {n}: "
                raise ValueError(f"{where}character {at} (U+{ord(text[at]):04X}) is a lone surrogate, not valid Unicode")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> SearchRequest:
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' or 'queries'")
        return self

    def questions(self) -> list[str]:
        """The request's questions as a list, in order."""
        return [self.query] if self.query is not None else list(self.queries or [])


class HitOut(BaseModel):
    """One hit: the best phrase of the unit, its character span in its passage, and its source."""

    text: str = Field(description="the answer phrase")
    score: float = Field(description="dense mode: q_start . h_start + q_end . h_end (+ length bias); lexical: the "
                         "BM25 score; hybrid: the fused score")
    start: int = Field(description="character offset of the phrase in `passage`")
    end: int = Field(description="character end offset (exclusive) of the phrase in `passage`")
    passage_id: int = Field(description="the passage's number in the index (changes when the index is compacted)")
    paragraph: int = Field(0, description="the passage's number within its document, from 0")
    passage: str = Field(description="the passage text around the phrase (all of it with full_passage)")
    passage_offset: int = Field(0, description="where `passage` starts in the whole passage (0 with full_passage)")
    passage_chars: int = Field(description="length of the whole passage in characters")
    doc_id: str
    title: str
    meta: dict[str, Any] = Field(default_factory=dict, description="the document's metadata from the corpus")
    dense: float | None = Field(None, description="the dense leg's score: the phrase's, or the unit's best phrase's")
    lexical: float | None = Field(None, description="the BM25 score of the passage (or document); null in dense mode")
    confidence: float | None = Field(
        None, description="calibrated probability that the hit is correct (phrase: matches the answer; passage: "
        "contains it; doc: is the answer's document); null when the model has no calibration",
    )
    read: float | None = Field(None, description="the reader's score of the phrase when the hit was read (read: "
                               "true); null when it was not read")


class QueryResult(BaseModel):
    """Hits for one question, best first (empty for a blank question)."""

    query: str
    hits: list[HitOut]
    no_answer: bool = Field(False, description="true when the search abstained: no hit reached min_confidence")


class Timings(BaseModel):
    """Milliseconds spent in each stage; encode/search/aggregate are for the whole batch the request joined."""

    queue: float
    encode: float
    search: float
    aggregate: float
    read: float = Field(0.0, description="reading the top passages (requests with read)")
    total: float
    batch_size: int = Field(description="questions in the batch that served this request")


class SearchResponse(BaseModel):
    """Answer of ``POST /search``: one result per question, in request order."""

    unit: Unit
    results: list[QueryResult]
    timings_ms: Timings
    request_id: str


class ErrorResponse(BaseModel):
    """The one error body of every non-2xx answer."""

    error: str = Field(description="machine-readable error type, e.g. bad_request, overloaded")
    message: str = Field(description="human-readable explanation")
    request_id: str = Field(description="also in the X-Request-ID header and in the server log")
    details: list[dict[str, Any]] | None = Field(None, description="validation errors (422 only)")


class HealthResponse(BaseModel):
    """Liveness / readiness state."""

    status: Literal["ok", "loading", "ready", "failed"]
    detail: str | None = None


class InfoResponse(BaseModel):
    """What is being served: model, index manifest summary, counts and the batching settings."""

    model: dict[str, Any]
    index: dict[str, Any]
    service: dict[str, Any]


class ReloadRequest(BaseModel):
    """Body of ``POST /admin/reload`` (optional): the index to serve from now on, else the served path again."""

    model_config = ConfigDict(extra="forbid", strict=True)

    index: str | None = Field(None, min_length=1, description="index directory or alias on the server; "
                                                              "default: the served path, resolved again")


class ReloadResponse(BaseModel):
    """Answer of ``POST /admin/reload``: the index now served (as in /info) and the reload counters."""

    index: dict[str, Any]
    reload: dict[str, Any]
