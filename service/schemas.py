"""Request and response schemas of the HTTP API (pydantic); these also make the OpenAPI document at /docs."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal, TypeAlias, Union

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from spanseek.core.filters import (
    BOUNDS,
    MAX_FILTER_CONDITIONS,
    passage_scope_problem,
    size_problem,
    value_text,
)
from spanseek.core.ids import MAX_ID_CHARS
from spanseek.core.io import MAX_META_DEPTH, nesting_depth
from spanseek.core.params import HIT_WINDOW, Hit, MetaValue, SearchFilter, SearchParams, Unit

__all__ = ["ErrorResponse", "FieldConditionIn", "FilterIn", "NotIn", "PassageIn", "RangeIn", "HealthResponse", "HitOut", "InfoResponse", "QueryResult", "ReloadRequest",
           "ReloadResponse", "SearchRequest", "SearchResponse", "Timings", "Unit"]

MAX_FILTER_IDS = 10_000  # document ids in one filter
MAX_FILTER_KEYS = 64  # metadata keys in one filter
# questions one request's schema takes: the server's own limit (max_queries_per_request, at most this) is checked
# after validation; this bound stops a huge list early, before each of its items is validated. Both answer 413
# (service.errors.too_many_queries), naming the server's limit
MAX_QUERIES = 1024
# a paging cursor (service.cursors): a random id, secrets.token_urlsafe(16) (128 bits), and a position in its ranking
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{22}\.[0-9]{1,9}$"
def metadata_too_deep(meta: Any, passage_meta: Any = ()) -> str | None:
    """Which of a document's metadata objects (``'meta'``, ``'passage_meta' N``) is nested more than
    ``MAX_META_DEPTH`` levels deep, or None."""
    named = [("'meta'", meta), *((f"'passage_meta' {i}", m) for i, m in enumerate(passage_meta or ()))]
    return next((name for name, m in named if m is not None and nesting_depth(m) > MAX_META_DEPTH), None)


def too_deep_message(name: str) -> str:
    """What a 422 says of metadata ``name`` (``metadata_too_deep``'s answer) nested too deeply."""
    return (f"{name} is nested more than {MAX_META_DEPTH} levels deep (objects and lists); keep metadata flat enough "
            "to filter on and return with hits")


_KIND_NAMES = {str: "a string", int: "an integer", float: "a number"}


def kinds_text(tp: Any) -> str:
    """What a value of the union ``tp`` may be, as a 422 names it: ``true, false, 'exact' or 'near'`` (an integer is
    not named beside a number, which it is)."""
    names: list[str] = []
    for member in typing.get_args(tp):
        if member is bool:
            names += ["true", "false"]
        elif typing.get_origin(member) is Literal:
            names += [repr(v) for v in typing.get_args(member)]
        elif member is type(None):
            names.append("null")
        elif member is not int or float not in typing.get_args(tp):
            names.append(_KIND_NAMES[member])
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def one_error(tp: Any, expected: str | None = None) -> WrapValidator:
    """The validator of a field of ``tp``, a union of types (``Annotated[tp, one_error(tp)]``): a value that fits none
    of them is one error at the field's own place saying what it takes (``expected``, else ``kinds_text``). Pydantic gives one error per type of the union, each at a place named
    after the type, and a 422's message names the first: ``"collapse_duplicates": "Near"`` read
    ``body.collapse_duplicates.bool: Input should be a valid boolean``, as if "near" were not a value it takes."""
    text = expected or kinds_text(tp)

    def validate(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as e:
            if any(len(err["loc"]) > 1 for err in e.errors()):  # an error inside a value of one of its types
                raise
            raise PydanticCustomError("invalid_type", "Input should be {expected}", {"expected": text}) from None

    return WrapValidator(validate)


MetaValueIn: TypeAlias = Annotated[MetaValue, one_error(MetaValue)]  # a metadata value a filter compares


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


# a bound of a range: a number, or a date (an unparsable date is the core filter's to refuse, as in ``match``)
Bound: TypeAlias = Annotated[int | float | str | None,
                             one_error(int | float | str | None, "a number or an ISO-8601 date or datetime string")]


class RangeIn(BaseModel):
    """Bounds of a range condition: numbers, or ISO-8601 dates / datetimes (``core.filters.Range``).

    Its shape is checked here (422): at least one bound, all numbers or all strings. Its values are the core
    filter's to check (400, as the same value in ``match``): a number beyond a float's range, a date that does not
    parse. Integers are kept as given (``int``), so that one of 400 digits reaches that check instead of failing
    the schema's float."""

    model_config = ConfigDict(extra="forbid", strict=True)

    gt: Bound = Field(None, description="greater than")
    gte: Bound = Field(None, description="greater than or equal")
    lt: Bound = Field(None, description="less than")
    lte: Bound = Field(None, description="less than or equal")

    @model_validator(mode="after")
    def _one_kind(self) -> RangeIn:
        given = {b: v for b in BOUNDS if (v := getattr(self, b)) is not None}
        if not given:
            raise ValueError("give at least one of gt, gte, lt, lte")
        if len({isinstance(v, str) for v in given.values()}) > 1:
            raise ValueError("bounds must be all numbers or all ISO-8601 date strings, got "
                             + ", ".join(f"{b}={value_text(v)}" for b, v in given.items()))
        return self


class FieldConditionIn(BaseModel):
    """A condition on one metadata field: ``key`` and exactly one of ``match``, ``any`` or ``range``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    key: str = Field(min_length=1, description="the metadata field", examples=["year"])
    match: MetaValueIn = Field(None, description="the field equals this value (a list field: one of its elements)")
    any: list[MetaValueIn] | None = Field(None, min_length=1, max_length=MAX_FILTER_IDS,
                                        description="the field equals one of these values")
    range: RangeIn | None = Field(None, description="the field lies in the range (every bound given holds)")

    @model_validator(mode="after")
    def _one_form(self) -> FieldConditionIn:
        forms = [f for f in ("match", "any", "range") if f in self.model_fields_set]
        if len(forms) != 1:
            raise ValueError(f"give exactly one of match, any or range with key {self.key!r}")
        return self


class NotIn(BaseModel):
    """The condition does not hold."""

    model_config = ConfigDict(extra="forbid", strict=True)

    not_: Condition = Field(alias="not", description="the condition negated")


class PassageIn(BaseModel):
    """The condition holds for the passage's own metadata (``passage_meta``), not its document's: the search then
    returns only the passages that pass (``core.filters.Passage``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    passage: Condition = Field(description="a condition whose keys name the passage's own metadata (a PDF page's "
                               "page)", examples=[{"key": "page", "range": {"gte": 10, "lte": 20}}])

    @model_validator(mode="before")
    @classmethod
    def _of_passages(cls, data: Any) -> Any:
        """Refuse what a passage's own metadata cannot answer (``doc_ids``, ``title_prefix``, a passage condition in
        another) before its parts are validated, naming its place."""
        problem = passage_scope_problem(data["passage"]) if isinstance(data, dict) and "passage" in data else None
        if problem is not None:
            raise ValueError(problem)
        return data


def _condition_form(v: Any) -> str:
    """Which condition an object is: a field condition (has ``key``), a ``not``, a ``passage``, else a nested
    filter."""
    if isinstance(v, dict):
        return "field" if "key" in v else "not" if "not" in v else "passage" if "passage" in v else "filter"
    return ("field" if isinstance(v, FieldConditionIn) else "not" if isinstance(v, NotIn) else
            "passage" if isinstance(v, PassageIn) else "filter")


Condition = Annotated[Union[Annotated[FieldConditionIn, Tag("field")], Annotated[NotIn, Tag("not")],  # noqa: UP007
                            Annotated[PassageIn, Tag("passage")], Annotated["FilterIn", Tag("filter")]],
                      Discriminator(_condition_form)]


class FilterIn(BaseModel):
    """Which documents to search: every part given must hold (``core.filters.SearchFilter``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    doc_ids: list[str] | None = Field(None, min_length=1, max_length=MAX_FILTER_IDS,
                                      description="only these documents (their ids)")
    title_prefix: str | None = Field(None, description="only documents whose title starts with this (case-sensitive)")
    meta: dict[str, MetaValueIn] | None = Field(
        None, max_length=MAX_FILTER_KEYS, description="only documents whose metadata has each key with an equal "
        "value (strings, numbers, booleans or null; true is not 1)", examples=[{"lang": "en"}],
    )
    must: list[Condition] | None = Field(None, min_length=1, max_length=MAX_FILTER_CONDITIONS,
                                         description="conditions that must all hold")
    should: list[Condition] | None = Field(None, min_length=1, max_length=MAX_FILTER_CONDITIONS,
                                           description="conditions of which at least one holds")
    must_not: list[Condition] | None = Field(None, min_length=1, max_length=MAX_FILTER_CONDITIONS,
                                             description="conditions of which none may hold")

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any) -> Any:
        """Refuse a filter nested too deeply or holding too many conditions (``core.filters.size_problem``) before
        its parts are validated: one error naming the filter and the limit, where the core filter's own check
        answered 400 and pydantic, at a few hundred levels, a recursion error that named no limit."""
        problem = size_problem(data) if isinstance(data, dict) else None
        if problem is not None:
            raise ValueError(problem)
        return data

    def to_filter(self) -> SearchFilter:
        """The core filter (raises FilterError, a SearchParamsError, for a value it refuses: an unparsable date)."""
        return SearchFilter.from_json(self.model_dump(by_alias=True, exclude_unset=True))


NotIn.model_rebuild()
PassageIn.model_rebuild()
FieldConditionIn.model_rebuild()


# What the HTTP API adds to a search parameter's help (core.params.SearchParams): the server's limits and defaults
SERVER_NOTES = {
    "top_k": "default: the server's default_top_k; at most max_top_k (GET /info)",
    "nprobe": "at most the server's max_nprobe",
    "max_answer_tokens": "at most the server's max_answer_tokens_limit; max_answer_length, its older name, is "
                         "accepted",
    "offset": "offset + top_k is bounded by the server's max_offset_top_k (GET /info)",
    "rank_window": "at most the server's max_offset_top_k",
    "min_confidence": "GET /info lists the calibrated unit/mode pairs (service.confidence)",
    "read": "the server needs a reader (GET /info: service.reader); default false, or true on a server that reads "
            "by default (GET /info: service.default_read)",
    "read_below": "default: the server's default_read_below (GET /info), where the model can judge the unit and mode",
    "read_passages": "at most the server's max_read_passages",
}


def search_parameter_fields() -> dict[str, Any]:
    """The request fields of the search parameters, from ``SearchParams`` (its ``http`` fields, their types and
    help): a parameter with a non-boolean default is optional here (null: the server's or the index's default)."""
    hints = typing.get_type_hints(SearchParams)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(SearchParams):
        if f.metadata.get("http", True) is False:
            continue
        tp, default = hints[f.name], f.default
        if default is not None and not isinstance(default, bool):
            tp, default = tp | None, None
        if typing.get_origin(tp) in (Union, types.UnionType) and len(set(typing.get_args(tp)) - {type(None)}) > 1:
            tp = Annotated[tp, one_error(tp)]  # collapse_duplicates: true, false, 'exact' or 'near'
        note = SERVER_NOTES.get(f.name)
        alias = AliasChoices("max_answer_tokens", "max_answer_length") if f.name == "max_answer_tokens" else None
        fields[f.name] = (tp, Field(default, description=f.metadata["help"] + (f"; {note}" if note else ""),
                                    validation_alias=alias))
    return fields


class SearchRequestBase(BaseModel):
    """Body of ``POST /search``: exactly one of ``query`` / ``queries`` plus optional search parameters, or a
    ``cursor`` (the next page of a ranking) alone or with ``top_k``.

    Range checks against the server's limits (top_k, nprobe, ...) happen in the route and answer 400;
    schema violations (wrong types, both or neither of query/queries, text that is not valid Unicode) answer 422.
    Types are strict: ``"top_k": "5"`` or ``"merge_answers": "yes"`` is a 422, not silently converted.
    """

    # oneOf in the OpenAPI schema tells clients (and the fuzzer) the exactly-one rule the validator enforces
    model_config = ConfigDict(
        extra="forbid", strict=True,
        json_schema_extra={"oneOf": [{"required": ["query"]}, {"required": ["queries"]}, {"required": ["cursor"]}]},
    )

    query: str | None = Field(None, description="one question", examples=["Who built the castle?"])
    queries: list[str] | None = Field(None, min_length=1, max_length=MAX_QUERIES,
                                      description="several questions, answered in order")
    filter: FilterIn | None = Field(
        None, description="search only the documents that pass it; applied inside the search, so top_k is still "
        "filled when enough documents pass",
    )
    full_passage: bool = Field(
        False, description="return each hit's whole passage instead of a window of the server's passage_context_chars "
        "characters on each side of the phrase (whole passages can be large; the response size is capped)",
    )
    cursor: str | None = Field(
        None, pattern=CURSOR_PATTERN, description="the next page of a ranking: a result's next, alone or with top_k "
        "(default: the first page's); answered from the ranking kept when the first page was searched, so pages "
        "follow one another exactly, whatever is written or reloaded between them",
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

    @model_validator(mode="before")
    @classmethod
    def _one_name(cls, data: Any) -> Any:
        """Refuse a parameter given under both of its names (an older one is still accepted), naming both."""
        if isinstance(data, dict) and "max_answer_tokens" in data and "max_answer_length" in data:
            raise ValueError("give max_answer_tokens or max_answer_length (its older name), not both")
        return data

    @model_validator(mode="after")
    def _one_of(self) -> SearchRequestBase:
        if self.cursor is not None:
            others = sorted(self.model_fields_set - {"cursor", "top_k"})
            if others:  # the cursor's ranking was searched with the first page's question and options
                raise ValueError(f"give a cursor alone or with top_k: its question and options are the first "
                                 f"page's (got {', '.join(others)})")
        elif (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query', 'queries' or 'cursor'")
        return self

    def questions(self) -> list[str]:
        """The request's questions as a list, in order."""
        return [self.query] if self.query is not None else list(self.queries or [])

    def search_parameters(self) -> dict[str, Any]:
        """The search parameters the request gave (the others are left to the server's defaults)."""
        return {name: getattr(self, name) for name in SEARCH_PARAMETERS if getattr(self, name) is not None}


# The request: SearchRequestBase plus a field per search parameter, generated from core.params.SearchParams
SearchRequest: type[SearchRequestBase] = create_model(  # type: ignore[call-overload]
    "SearchRequest", __base__=SearchRequestBase, __doc__=SearchRequestBase.__doc__, **search_parameter_fields())
SEARCH_PARAMETERS = tuple(search_parameter_fields())


def hit_fields() -> dict[str, Any]:
    """The response fields of a hit, from ``core.params.Hit`` (its fields, types, defaults and help) and
    ``HIT_WINDOW``."""
    hints = typing.get_type_hints(Hit)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Hit):
        if f.default is not dataclasses.MISSING:
            spec = Field(f.default, description=f.metadata["help"])
        elif f.default_factory is not dataclasses.MISSING:
            spec = Field(default_factory=f.default_factory, description=f.metadata["help"])
        else:
            spec = Field(description=f.metadata["help"])
        out[f.name] = (hints[f.name], spec)
    for name, (tp, default, text) in HIT_WINDOW.items():
        out[name] = (tp, Field(default, description=text))
    return out


# One hit of the response: the fields of core.params.Hit and where its window of the passage lies
HitOut: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "HitOut", __doc__="One hit: the best phrase of the unit, its character span in its passage, and its source.",
    **hit_fields())


class QueryResult(BaseModel):
    """Hits for one question, best first (empty for a blank question)."""

    query: str = Field(description="the question as searched: its first max_query_chars characters (GET /info)")
    hits: list[HitOut]  # type: ignore[valid-type]  # generated from core.params.Hit
    no_answer: bool = Field(False, description="true when the search abstained: no hit reached min_confidence")
    truncated: bool = Field(False, description="true when the question was longer than the server's max_query_chars "
                            "and only its first max_query_chars characters were searched (and echoed in query)")
    next: str | None = Field(None, description="a cursor for the next page of this ranking (give it as cursor), when "
                             "rank_window ranked past this page and hits remain; else null")


class Timings(BaseModel):
    """Milliseconds spent in each stage; encode/search/aggregate are for the whole batch the request joined."""

    queue: float
    encode: float
    search: float
    aggregate: float
    read: float = Field(0.0, description="reading the top passages (requests with read)")
    total: float
    batch_size: int = Field(description="questions in the batch that served this request (0: a page of a cursor, "
                            "answered from its kept ranking, not searched)")


class SearchResponse(BaseModel):
    """Answer of ``POST /search``: one result per question, in request order."""

    unit: Unit
    results: list[QueryResult]
    timings_ms: Timings
    request_id: str
    warnings: list[str] = Field(default_factory=list, description="what the server did not do as asked, though the "
                                "request was answered: a parameter this index does not use (nprobe on an index "
                                "without inverted lists), or reading by default (default_read) that would have "
                                "refused the request")


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

    @field_validator("index")
    @classmethod
    def _a_path(cls, v: str | None) -> str | None:
        if v is not None and "\x00" in v:
            raise ValueError("a path cannot hold a NUL character")
        return v


class ReloadResponse(BaseModel):
    """Answer of ``POST /admin/reload``: the index now served (as in /info) and the reload counters."""

    index: dict[str, Any]
    reload: dict[str, Any]


# ---- live writes (SPANSEEK_WRITES=1; service.writes) ------------------------------------------------------------


class DocumentIn(BaseModel):
    """One document in the corpus format (``core.io``); written by id: a held id is replaced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # (its length is checked with the rest of the id, by the rule every route that writes one shares: service.writes)
    id: str = Field(min_length=1, json_schema_extra={"maxLength": MAX_ID_CHARS}, description="the document's id (the "
                    "key of upserts and deletes; a whole number is read as its digits, as in a corpus file)")
    title: str = Field("", description="title (searched with every passage by the lexical leg; at most the "
                       "server's max_title_chars characters)")

    @field_validator("id", mode="before")
    @classmethod
    def _whole_number_id(cls, v: Any) -> Any:
        """A corpus line's id may be a whole number, read as its digits (``core.io``): so may a written one."""
        return str(v) if type(v) is int else v  # type(): true and false are ints to isinstance
    paragraphs: list[str] = Field(min_length=1, description="its passages, in order (blank ones are dropped)")
    meta: dict[str, Any] | None = Field(None, description="metadata returned with hits and filtered on (objects "
                                        f"and lists nested at most {MAX_META_DEPTH} deep)")
    passage_meta: list[dict[str, Any] | None] | None = Field(None, description="metadata of each paragraph")

    @field_validator("meta", "passage_meta")
    @classmethod
    def _not_too_deep(cls, v: Any, info: ValidationInfo) -> Any:
        """Refuse metadata nested deeper than ``MAX_META_DEPTH``: every hit of the document, and GET /documents/{id},
        failed with a 500 (the JSON renderer stops at 255 levels) once it was written."""
        name = metadata_too_deep(v) if info.field_name == "meta" else metadata_too_deep(None, v)
        if name is not None:
            raise ValueError(too_deep_message(name))
        return v


class UpsertRequest(BaseModel):
    """Documents to add or replace; ``PUT /documents`` also takes one document without this wrapper."""

    model_config = ConfigDict(extra="forbid", strict=True)

    documents: list[DocumentIn] = Field(min_length=1, max_length=1000, description="the documents (ids unique)")

    @model_validator(mode="before")
    @classmethod
    def _one_document(cls, v: Any) -> Any:
        """A bare document is a batch of one (its errors are then named ``documents.0.FIELD``)."""
        return {"documents": [v]} if isinstance(v, dict) and "documents" not in v else v


class WriteResponse(BaseModel):
    """What a write did: it is in the log and searchable when this answer is sent (unless ``/info``'s
    ``writes.publish_error`` says its snapshot could not be served: then from the next write, merge or start)."""

    documents: int = Field(description="documents added or replaced")
    passages: int = Field(description="passages written")
    tokens: int = Field(description="tokens encoded")
    request_id: str


class FileWriteResponse(WriteResponse):
    """What a file's write did (PUT/POST /files/{name}): the document it became, and what ``WriteResponse`` says."""

    id: str = Field(description="the document's id")
    title: str = Field(description="the document's title, as the file's reader found it")
    warnings: list[str] = Field(default_factory=list, description="what the reader could not read of the file "
                                "(a PDF's pages without a text layer, say); the rest is written")


class DeleteByFilterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    filter: FilterIn = Field(description="the documents to delete: those that pass this search filter")
    dry_run: bool = Field(False, description="only say which documents the filter would delete; delete none")


# the ids a delete answer lists at most (a filter may delete any number of documents; ``count`` says how many)
MAX_LISTED_DELETES = 1000


class DeleteResponse(BaseModel):
    deleted: list[str] = Field(description=f"ids of the documents deleted (the first {MAX_LISTED_DELETES:,})")
    count: int = Field(description="how many documents were deleted")
    dry_run: bool = Field(False, description="true: a dry run; these would be deleted, and none was")
    request_id: str


MAX_LISTED_DOCUMENTS = 1000  # documents in one page of GET /documents


class DocumentSummary(BaseModel):
    id: str
    title: str
    meta: dict[str, Any] = Field(description="the document's metadata, as GET /documents/{id} gives it")


class DocumentList(BaseModel):
    documents: list[DocumentSummary] = Field(description="the page's documents, in id order (code points)")
    next: str | None = Field(description="the last id of this page when more follow (give it as ``after``), else "
                                         "null")


class CompactResponse(BaseModel):
    merging: bool = Field(description="whether a merge is running (started now, or already)")
    live: dict[str, Any] = Field(description="the base, the segment's documents and tokens, tombstones, log bytes, "
                                             "merges done and the last merge's result")
