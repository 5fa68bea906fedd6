"""Request and response schemas of the HTTP API (pydantic); these also make the OpenAPI document at /docs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Unit = Literal["phrase", "passage", "doc"]


class SearchRequest(BaseModel):
    """Body of ``POST /search``: exactly one of ``query`` / ``queries`` plus optional search parameters.

    Range checks against the server's limits (top_k, nprobe, ...) happen in the route and answer 400;
    schema violations (wrong types, both or neither of query/queries) answer 422.
    """

    # oneOf in the OpenAPI schema tells clients (and the fuzzer) the exactly-one rule the validator enforces
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"oneOf": [{"required": ["query"]}, {"required": ["queries"]}]}
    )

    query: str | None = Field(None, description="one question", examples=["Who built the castle?"])
    queries: list[str] | None = Field(None, min_length=1, description="several questions, answered in order")
    top_k: int | None = Field(None, description="hits per question (default: server's default_top_k)")
    max_answer_length: int | None = Field(None, description="longest answer phrase in tokens (default: the model's)")
    nprobe: int | None = Field(None, description="IVF lists to visit (compressed indexes only)")
    merge_answers: bool = Field(
        False, description="unit=phrase only: one hit per distinct answer (phrases that read the same once "
        "normalised), scored by the log of the summed exp(score) of its phrases; the hit shows its best phrase",
    )

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
    score: float = Field(description="q_start . h_start + q_end . h_end")
    start: int = Field(description="character offset of the phrase in `passage`")
    end: int = Field(description="character end offset (exclusive) of the phrase in `passage`")
    passage_id: int
    passage: str = Field(description="the passage text")
    doc_id: str
    title: str
    meta: dict[str, Any] = Field(default_factory=dict, description="the document's metadata from the corpus")


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
