"""Request and response schemas of the HTTP API (pydantic); these also make the OpenAPI document at /docs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from spanseek.core.params import Fusion, Mode, Unit

__all__ = ["ErrorResponse", "HealthResponse", "HitOut", "InfoResponse", "QueryResult", "SearchRequest",
           "SearchResponse", "ReloadRequest", "ReloadResponse", "Timings", "Unit"]


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
        None, description="hybrid: weight of the normalised BM25 score (default: the one fitted for the unit)",
    )
    merge_answers: bool = Field(
        False, description="unit=phrase only: one hit per distinct answer (phrases that read the same once "
        "normalised), scored by the log of the summed exp(score) of its phrases; the hit shows its best phrase",
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
    passage_id: int
    passage: str = Field(description="the passage text around the phrase (all of it with full_passage)")
    passage_offset: int = Field(0, description="where `passage` starts in the whole passage (0 with full_passage)")
    passage_chars: int = Field(description="length of the whole passage in characters")
    doc_id: str
    title: str
    meta: dict[str, Any] = Field(default_factory=dict, description="the document's metadata from the corpus")
    dense: float | None = Field(None, description="the dense leg's score: the phrase's, or the unit's best phrase's")
    lexical: float | None = Field(None, description="the BM25 score of the passage (or document); null in dense mode")


class QueryResult(BaseModel):
    """Hits for one question, best first (empty for a blank question)."""

    query: str
    hits: list[HitOut]


class Timings(BaseModel):
    """Milliseconds spent in each stage; encode/search/aggregate are for the whole batch the request joined."""

    queue: float
    encode: float
    search: float
    aggregate: float
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
