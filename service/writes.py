"""HTTP routes of live writes: PUT /documents, POST /documents (add only), DELETE /documents/{id}, POST
/documents/delete, GET /documents/{id}, GET /documents (a page of ids, titles and metadata),
POST /admin/compact (``service.live`` does the work; on only with ``SPANSEEK_WRITES=1``).

Writes need the admin key when one is configured (``SPANSEEK_ADMIN_API_KEY``; the API key then only reads), else
the API key; a server with neither refuses them (403). A document the corpus reader would refuse is a 422 whose
``details`` name the document and the field; a write the disk has no room for is a 507 naming the file (searches go
on); nothing of a refused request is written. GET /documents/{id} is a read: it needs the API key as searches do, and
a server without writes answers it from the served index; so is GET /documents, which lists the documents whose
metadata holds given values (what ``spanseek sync`` compares a folder with), a page at a time, without their
passages. An id names one document in either Unicode spelling (``held_id``: "café" typed on a Mac or on Linux), on
these routes and ``service.files``'; one in a path holding a line break or NUL, or not UTF-8, is a 422.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

import numpy as np
from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.convertors import PathConvertor, register_url_convertor

from spanseek.core.filters import FilterError, SearchFilter
from spanseek.core.ids import held_id as spelling_held
from spanseek.core.ids import length_problem, new_id
from spanseek.core.io import CorpusError, Document
from spanseek.core.params import SearchParamsError
from spanseek.core.written import routing_problem
from spanseek.core.written import written_document as core_written_document
from spanseek.indexer.ingest import parse_meta
from spanseek.indexer.live import HeldDocuments, UnheldIds, indexed_document, live_row
from spanseek.service.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    NotReady,
    Unauthorized,
    naming,
    quoted,
    request_id_of,
)
from spanseek.service.live import made_once, respelled_ids
from spanseek.service.routes import (
    _check_range,
    _errors,
    _presents_key,
    get_state,
    known_query,
    not_ready,
    require_api_key,
    require_json_body,
)
from spanseek.service.schemas import (
    MAX_LISTED_DELETES,
    MAX_LISTED_DOCUMENTS,
    CompactResponse,
    DeleteByFilterRequest,
    DeleteResponse,
    DocumentIn,
    DocumentList,
    DocumentSummary,
    UpsertRequest,
    WriteResponse,
)

router = APIRouter(tags=["documents"])


async def require_write_key(request: Request) -> None:
    """The admin key when one is configured, else the API key; 403 when the server has neither."""
    settings = get_state(request).settings
    key = settings.admin_api_key or settings.api_key
    if key is None:  # no secret to guard: say everything the server lacks, so one restart is enough
        off = "" if settings.writes else "writes are off on this server (start it with SPANSEEK_WRITES=1) and "
        raise Forbidden(f"{off}writes need a key on the server (SPANSEEK_ADMIN_API_KEY or SPANSEEK_API_KEY)")
    if not _presents_key(request, key.get_secret_value()):
        read = settings.api_key if settings.admin_api_key is not None else None
        if read is not None and _presents_key(request, read.get_secret_value()):  # a good key, not for this
            raise Forbidden("writes need the admin key (SPANSEEK_ADMIN_API_KEY); this key may only search and read")
        raise Unauthorized()


def live_of(request: Request) -> Any:
    """The service's LiveWrites; 403 when writes are off, 503 until loaded."""
    state = get_state(request)
    if not state.settings.writes:
        raise Forbidden("writes are off on this server (start it with SPANSEEK_WRITES=1)")
    if state.status != "ready" or state.live is None:
        raise not_ready(request)
    return state.live


class PathTextConvertor(PathConvertor):
    """A document's id or a file's name in the path, line breaks included: ``{x:path}``'s ``.*`` stops at one, and a
    path holding one was a bare 404 from routing rather than the 422 that names the problem."""

    regex = "(?s:.*)"


register_url_convertor("path_text", PathTextConvertor())


def refuse(where: str, field: str, msg: str) -> RequestValidationError:
    """A 422 ``validation_error`` at ``where.field`` saying ``msg``."""
    return RequestValidationError([{"loc": (where, field), "msg": msg, "type": "value_error"}])


def path_text(request: Request, text: str, field: str, where: str = "path") -> str:
    """``text``, the path parameter ``field`` (``where`` "query": the query parameter); 422 when its percent-encoded
    bytes are not UTF-8 (the server read each as U+FFFD, and an id of them would name another document than the
    client meant)."""
    if "\ufffd" in text:  # (a U+FFFD sent as UTF-8, %EF%BF%BD, is the text's own)
        for raw in _raw_values(request, field, where):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                what = f"the {field}" if where == "path" else f"the query parameter {field}"
                raise refuse(where, field, f"{what} is not UTF-8 ({e.reason} at its byte 0x{raw[e.start]:02x}); "
                                           f"percent-encode its UTF-8 bytes") from None
    return text


def _raw_values(request: Request, field: str, where: str) -> list[bytes]:
    """The bytes the client sent for ``field``: the whole path, or each value of the query parameter."""
    if where == "path":
        return [unquote_to_bytes(request.scope.get("raw_path", b"").decode("ascii", "replace"))]
    pairs = (part.split(b"=", 1) for part in request.scope.get("query_string", b"").split(b"&"))
    return [unquote_to_bytes(pair[1].replace(b"+", b" ")) for pair in pairs
            if len(pair) == 2 and unquote_to_bytes(pair[0]) == field.encode()]


def query_texts(request: Request, values: list[str], field: str) -> list[str]:
    """``values``, the query parameter ``field`` given any number of times (``meta``); 422 as ``path_text`` for one
    whose bytes are not UTF-8."""
    for value in values:
        path_text(request, value, field, "query")
    return values


def held_id(index: Any, doc_id: str) -> str:
    """The id ``doc_id`` names in ``index`` (``core.ids.held_id``: the first of its spellings a live document
    holds, or a held id of the same NFC spelling, else the NFC one a new document is written under)."""
    return spelling_held(doc_id, lambda spelling: live_row(index, spelling) is not None, respelled_ids(index))


def named(index: Any, doc_id: str) -> tuple[str, bool]:
    """The id a write of ``doc_id`` names in ``index`` (``held_id``), and whether it replaces a document held under
    it that is longer than a write takes (``MAX_ID_CHARS``): an index built from a corpus file may hold such an id,
    which ``/documents/{id}`` reads and deletes, and a write replaces it alike (one lookup more, for such ids only)."""
    held = held_id(index, doc_id)
    return held, length_problem(doc_id) is not None and live_row(index, held) is not None


def named_id(request: Request, doc_id: str, index: Any) -> str:
    """The id that the path's ``/documents/{id}`` names in ``index`` (``held_id``); 422 for one that is not UTF-8, is
    blank, or holds a line break or NUL (no document can be written under it)."""
    path_text(request, doc_id, "id")
    if not doc_id.strip():  # (``GET /documents/``: no document has a blank id, which the corpus reader refuses)
        raise refuse("path", "id", f"the id is blank ({quoted(doc_id)}); name the document: /documents/ID")
    if (problem := routing_problem(doc_id)) is not None:
        raise refuse("path", "id", f"{quoted(doc_id)}: {problem}")
    return held_id(index, doc_id)


def parse_documents(given: list[DocumentIn], index: Any, max_title_chars: int) -> list[Document]:
    """The corpus documents of a request, each under the id it names in ``index`` (``held_id``: NFC for a new one);
    RequestValidationError (422) naming the document and field of the first one ``written_document`` refuses, or an
    id given twice (in any spelling)."""
    out: list[Document] = []
    seen: dict[str, int] = {}
    for i, d in enumerate(given):
        held, replacing = named(index, d.id)
        try:
            doc = written_document(d.model_dump(exclude_none=True), f"document {i}", max_title_chars, replacing)
        except CorpusError as e:
            raise refuse_document(i, e.field or "paragraphs", str(e)) from None
        doc = dataclasses.replace(doc, id=held)
        if doc.id in seen:
            other = given[seen[doc.id]].id
            raise refuse_document(i, "id", f"document id {quoted(d.id)} is also document {seen[doc.id]} of this "
                                  "request" + ("" if other == d.id else f" (spelled {quoted(other)} there: one id in "
                                                                        "Unicode)"))
        seen[doc.id] = i
        out.append(doc)
    return out


def written_document(obj: dict[str, Any], where: str, max_title_chars: int, replacing: bool = False) -> Document:
    """``core.written.written_document`` on a route that writes one (``PUT /documents``, and ``PUT /files/{name}``'s
    request; ``replacing``: a document is held under its id, ``named``): its CorpusError quoting the id the client
    sent shortened (``naming``), as a 404 does."""
    try:
        return core_written_document(obj, where, max_title_chars, replacing)
    except CorpusError as e:
        raise CorpusError(naming(str(e), obj["id"]) if isinstance(obj.get("id"), str) else str(e), e.field) from None


def held_already(e: HeldDocuments, replacing: str) -> Conflict:
    """The 409 of an add (``POST /documents``, ``POST /files/{name}``) naming the first ids held already, each
    quoted shortened, and the route ``replacing`` that replaces them."""
    return Conflict(f"{e.message(quoted)}; {replacing} replaces documents by id")


async def upsert_held_or_new(live: Any, docs: list[Document], given: list[str], only_new: bool = False,
                             max_tokens: int = 0) -> tuple[dict[str, int], list[Document]]:
    """``live.upsert(docs)``, each document under the id held for the id the request spells as ``given``; returns
    what it wrote and the documents as written. One held under an id a new one may not have (longer than a write
    takes, or not spelled composed), deleted after the request looked it up, is written as new under the request's id
    (``new_id``: composed), as had the delete come first, where that id is short enough to be new; else UnheldIds
    naming those that are not (a write cannot make the held id anew)."""
    while True:
        try:
            return await live.upsert(docs, only_new=only_new, max_tokens=max_tokens), docs
        except UnheldIds as e:
            spelled = {d.id: new_id(g) for d, g in zip(docs, given, strict=True) if d.id in e.ids
                       and length_problem(g) is None and length_problem(new_id(g)) is None}
            if len(spelled) < len(e.ids):
                raise UnheldIds([i for i in e.ids if i not in spelled]) from None
            docs = [dataclasses.replace(d, id=spelled.get(d.id, d.id)) for d in docs]


async def upsert_documents(live: Any, docs: list[Document], given: list[str], only_new: bool = False
                           ) -> dict[str, int]:
    """Write a request's ``docs`` (``parse_documents``; ``given``: their ids as the request spells them,
    ``upsert_held_or_new``); the 422 at a document's id that ``parse_documents`` gives one too long to be new, where
    the document held under it, which the write was to replace, was deleted since."""
    try:
        return (await upsert_held_or_new(live, docs, given, only_new, live.settings.max_write_tokens))[0]
    except UnheldIds as e:
        i = next(i for i, d in enumerate(docs) if d.id == e.ids[0])
        raise refuse_document(i, "id", f"document {i}: 'id' {e.problem()}") from None


def refuse_document(i: int, field: str, msg: str) -> RequestValidationError:
    """A 422 at ``body.documents.i.field`` saying ``msg``."""
    return RequestValidationError([{"loc": ("body", "documents", i, field), "msg": msg, "type": "value_error"}])


@router.put("/documents", response_model=WriteResponse,
            dependencies=[Depends(require_write_key), Depends(known_query), Depends(require_json_body)],
            responses=_errors(401, 403, 413, 415, 422, 503, 507))
async def put_documents(request: Request, body: UpsertRequest) -> WriteResponse:
    """Add or replace documents by id (a batch ``{"documents": [...]}`` or one document). The answer comes once
    the write is in the fsynced log and searchable, with the passages and tokens written."""
    live = live_of(request)
    docs = await asyncio.to_thread(parse_documents, body.documents, live.store.snapshot,  # (ids looked up: off the loop)
                                   live.settings.max_title_chars)
    written = await upsert_documents(live, docs, [d.id for d in body.documents])
    return WriteResponse(**written, request_id=request_id_of(request))


@router.post("/documents", response_model=WriteResponse,
             dependencies=[Depends(require_write_key), Depends(known_query), Depends(require_json_body)],
             responses=_errors(401, 403, 409, 413, 415, 422, 503, 507))
async def post_documents(request: Request, body: UpsertRequest) -> WriteResponse:
    """Add documents whose ids are new (as ``spanseek index add``): 409 naming the ids held already, and nothing of
    the request written; a client that retries an add after a lost answer gets the 409, not a second version."""
    live = live_of(request)
    docs = await asyncio.to_thread(parse_documents, body.documents, live.store.snapshot,
                                   live.settings.max_title_chars)
    try:
        written = await upsert_documents(live, docs, [d.id for d in body.documents], only_new=True)
    except HeldDocuments as e:
        raise held_already(e, "PUT /documents") from None
    return WriteResponse(**written, request_id=request_id_of(request))


@router.delete("/documents/{doc_id:path_text}", response_model=DeleteResponse,
               dependencies=[Depends(require_write_key), Depends(known_query)], responses=_errors(401, 403, 404, 422, 503, 507))
async def delete_document(request: Request, doc_id: str) -> DeleteResponse:
    """Delete one document (its id in any spelling: ``held_id``); 404 when no live document has this id, 422 for an
    id no document can hold."""
    live = live_of(request)
    held = await asyncio.to_thread(named_id, request, doc_id, live.store.snapshot)  # off the loop (read_document)
    deleted = await live.delete([held])
    if not deleted:
        raise no_document(doc_id)
    return DeleteResponse(deleted=deleted, count=len(deleted), request_id=request_id_of(request))


@router.post("/documents/delete", response_model=DeleteResponse,
             dependencies=[Depends(require_write_key), Depends(known_query), Depends(require_json_body)],
             responses=_errors(400, 401, 403, 415, 422, 503, 507))
async def delete_documents(request: Request, body: DeleteByFilterRequest) -> DeleteResponse:
    """Delete every document that passes ``filter`` (the search filter's language); 400 naming a field no document
    has. Answers with how many were deleted and the first ``MAX_LISTED_DELETES`` ids (none is not an error); with
    ``dry_run``, which it would delete, deleting none."""
    live = live_of(request)
    try:
        deleted = await live.delete(flt=body.filter.to_filter(), dry_run=body.dry_run)
    except SearchParamsError as e:
        raise BadRequest(str(e)) from None
    return DeleteResponse(deleted=deleted[:MAX_LISTED_DELETES], count=len(deleted), dry_run=body.dry_run,
                          request_id=request_id_of(request))


def served_index(request: Request) -> Any:
    """The index reads see now: with writes on, the live store's last published snapshot (base and segment, less
    what was deleted); without, the served index; 503 until loaded."""
    state = get_state(request)
    if state.settings.writes:
        return live_of(request).store.snapshot
    if state.status != "ready" or state.searcher is None:
        raise not_ready(request)
    return state.searcher.index


def summary(record: dict[str, Any]) -> DocumentSummary:
    """A stored document's record (``docs.jsonl``) without its passages: id, title, metadata."""
    return DocumentSummary(id=record["id"], title=record["title"], meta=record.get("meta") or {})


def id_order(index: Any) -> tuple[list[str], np.ndarray]:
    """The ids of an index's live documents in code-point order, and each one's row (a repeated id: its last, the
    live one); made once for each index (``made_once``: a write's snapshot is a new one), so that listing N documents
    a page at a time reads them once, not once a page."""

    def make() -> tuple[list[str], np.ndarray]:
        live = np.ones(len(index.docs), dtype=bool)
        live[index.deleted_docs] = False
        rows = {index.docs[r]["id"]: int(r) for r in np.flatnonzero(live)}
        ids = sorted(rows)
        return ids, np.fromiter((rows[i] for i in ids), dtype=np.int64, count=len(ids))

    return made_once(index, "id_order", make)


def listed(index: Any, where: dict[str, str], after: str | None, limit: int) -> DocumentList:
    """The live documents of ``index`` whose metadata holds every ``where`` value, in id order, the first ``limit``
    after the id ``after``. A key no document has (or whose values are never text) is no match, not an error: a sync
    lists its source before any document holds it."""
    try:
        allowed = (index.fields.documents_of(SearchFilter.from_json({"meta": where})) if where
                   else np.ones(len(index.docs), dtype=bool))
    except FilterError:
        return DocumentList(documents=[], next=None)
    ids, rows = id_order(index)
    start = 0 if after is None else bisect.bisect_right(ids, after)
    page = start + np.flatnonzero(allowed[rows[start:]])[: limit + 1]
    more = len(page) > limit
    return DocumentList(documents=[summary(index.docs[rows[k]]) for k in page[:limit]],
                        next=ids[page[limit - 1]] if more else None)


ListMeta = Annotated[list[str], Query(description="only documents whose metadata holds KEY=VALUE (repeatable; the "
                                                  "value as text)")]
After = Annotated[str | None, Query(description="the page after this id (the last page's ``next``)")]
Limit = Annotated[int | None, Query(description=f"documents in the page (default and most: {MAX_LISTED_DOCUMENTS})")]


@router.get("/documents", response_model=DocumentList,
            dependencies=[Depends(require_api_key), Depends(known_query)], responses=_errors(400, 401, 422, 503))
async def list_documents(request: Request, meta: ListMeta = [], after: After = None,  # noqa: B006
                         limit: Limit = None) -> DocumentList:
    """The live documents' ids, titles and metadata (no passages), in id order, a page at a time; with ``meta``, only
    those whose metadata holds these values (``meta=synced_from=docs``: what a sync of that name wrote). A read: a
    server without writes lists the index it serves."""
    try:
        where = parse_meta(query_texts(request, meta, "meta"), "meta")
    except ValueError as e:
        raise RequestValidationError([{"loc": ("query", "meta"), "msg": str(e), "type": "value_error"}]) from None
    _check_range("limit", limit, 1, MAX_LISTED_DOCUMENTS)
    if after is not None:  # (bytes that are not UTF-8 read as U+FFFD: a page after another id than the client's)
        path_text(request, after, "after", "query")
    index = served_index(request)
    return await asyncio.to_thread(listed, index, where, after, limit or MAX_LISTED_DOCUMENTS)


MetaOnly = Annotated[bool, Query(description="only the id, title and metadata, without the paragraphs")]


@router.get("/documents/{doc_id:path_text}",
            dependencies=[Depends(require_api_key), Depends(known_query)], responses=_errors(401, 404, 422, 503))
async def get_document(request: Request, doc_id: str, meta_only: MetaOnly = False) -> dict[str, Any]:
    """The live version of a document, in the corpus format; 404 when none has this id. ``meta_only``: its id, title
    and metadata (what a sync compares), not its paragraphs. A read: a server without writes answers from the index
    it serves (its documents not deleted). The id is found in any spelling (``held_id``); 422 for one no document can
    hold."""
    index = served_index(request)
    store = live_of(request).store if get_state(request).settings.writes else None
    doc = await asyncio.to_thread(read_document, request, doc_id, index, store, meta_only)
    if doc is None:
        raise no_document(doc_id)
    return doc


def no_document(doc_id: str) -> NotFound:
    """The 404 of ``/documents/{id}`` (GET, DELETE) when no live document holds ``doc_id`` in any spelling: quoting
    the id as the client gave it, not the composed spelling the lookup tried last."""
    return NotFound(f"no document {quoted(doc_id)}")


def read_document(request: Request, doc_id: str, index: Any, store: Any, meta_only: bool) -> dict[str, Any] | None:
    """The document in ``index`` (``store``, the live store: with writes) of the id the path's ``doc_id`` names
    (``named_id``), or None; its summary where ``meta_only``. Run off the event loop, as every lookup by id is: the
    first one of an index makes its respellings (``respelled_ids``: a pass over every id, 13-52 ms at 1M documents
    that every other request waited for), and the live store's lock may be held by a write."""
    doc_id = named_id(request, doc_id, index)
    if meta_only:
        row = live_row(index, doc_id)
        return None if row is None else summary(index.docs[row]).model_dump()
    return store.get(doc_id) if store is not None else indexed_document(index, doc_id)


@router.post("/admin/compact", response_model=CompactResponse, status_code=202,
             dependencies=[Depends(require_write_key), Depends(known_query)], responses=_errors(401, 403, 422, 503))
async def compact(request: Request) -> CompactResponse:
    """Merge the segment and the tombstones into a new base in the background (searches and writes go on; the new
    base is swapped in when built and checked). 202 with whether a merge runs and the live state."""
    live = live_of(request)
    if live is None:
        raise NotReady()
    merging = live.maybe_merge(force=True)
    return CompactResponse(merging=merging, live=live.describe())
