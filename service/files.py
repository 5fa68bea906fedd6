"""HTTP routes that write a file as a document: PUT /files/{name} (add or replace), POST /files/{name} (add only).

The request body is the file itself (any Content-Type). Its name's suffix says how it is read, exactly as
``spanseek corpus from-files`` reads a file (``indexer.ingest``: .txt, .md, .markdown, .html, .htm, .pdf, .docx,
.pptx, .epub, .odt, .odp, .fodt, .fodp, .xlsx, .xlsm, .ods, .fods, .csv, .tsv, .eml, .rtf), and its passages are cut with the served model's tokenizer at from-files' sizes (``max_tokens``, ``overlap`` and
``min_tokens`` may be given as query parameters, as the command's flags): the document written is the one that
from-files then ``PUT /documents`` would write, with its pages or sections as passage metadata. The id is the name
(as from-files names a file inside a folder: ``guide/install.md``) unless ``id`` is given; ``meta=KEY=VALUE``
(repeatable) adds metadata, as from-files' ``--meta``. A body of at most ``max_file_bytes`` is taken (413 above).

Refusals: 415 for a name whose suffix no reader takes; 422 ``unreadable_file`` naming the file and the reason for
an empty body or a file the reader skips or refuses (no text, a PDF without a text layer, a damaged, encrypted or
binary file, front matter that is not valid YAML), 422 ``validation_error`` for bad ids and metadata; 503
``reader_unavailable`` when the process that reads files could not start (the server's fault: the next upload starts
it again); keys, 403/503 and the write itself as ``service.writes``. Files are
read in a process of their own at a lower CPU priority (``service.file_reader``), so a large PDF does not hold up
searches; a file of more than ``max_file_tokens`` tokens is refused (413) before it is encoded, as is one whose
reading takes more than ``file_read_memory_bytes``, one whose title is
longer than ``max_title_chars`` is a 422, and at most ``max_file_uploads`` uploads are read or encoded at once
(429 above, before a body of declared length is read; a body still arriving holds none of them:
``service.file_reader``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from spanseek.core.ids import new_id
from spanseek.core.io import CorpusError
from spanseek.core.written import file_document
from spanseek.indexer.chunking import ChunkOptions, ChunkOptionsError
from spanseek.indexer.extracted import IngestError
from spanseek.indexer.ingest import FORMATS, IngestOptions, parse_meta
from spanseek.indexer.live import HeldDocuments, UnheldIds
from spanseek.service import file_reader
from spanseek.service.errors import (
    Overloaded,
    PayloadTooLarge,
    ReaderUnavailable,
    UnreadableFile,
    UnsupportedMediaType,
    naming,
    quoted,
    request_id_of,
    shortened,
)
from spanseek.service.file_reader import ReaderStopped, ReadOutOfMemory, UploadsBusy
from spanseek.service.live import too_many_tokens
from spanseek.service.routes import _errors, known_query
from spanseek.service.schemas import FileWriteResponse
from spanseek.service.writes import (
    held_already,
    live_of,
    named,
    path_text,
    query_texts,
    refuse,
    require_write_key,
    upsert_held_or_new,
    written_document,
)

router = APIRouter(tags=["documents"])
SUFFIXES = ", ".join(sorted(FORMATS))


def file_options(meta: list[str], max_tokens: int | None, overlap: int | None, min_tokens: int | None
                 ) -> IngestOptions:
    """from-files' options of one upload: ``meta`` as its ``--meta KEY=VALUE`` (422 naming a malformed or repeated
    key), passage sizes as its flags (422 naming a size ChunkOptions refuses: ``query.max_tokens``)."""
    try:
        extra = parse_meta(meta, "meta")
    except ValueError as e:
        raise refuse("query", "meta", str(e)) from None
    try:
        chunk = ChunkOptions.of(max_tokens, overlap, min_tokens)
    except ChunkOptionsError as e:
        raise refuse("query", e.field, str(e)) from None
    return IngestOptions(chunk=chunk, extra_meta=extra)


async def _write(request: Request, name: str, doc_id: str | None, meta: list[str], max_tokens: int | None,
                 overlap: int | None, min_tokens: int | None, only_new: bool) -> FileWriteResponse:
    live = live_of(request)
    given = path_text(request, name, "name")
    name = new_id(given)  # (its source and reading; the id is found in any spelling below)
    if not PurePosixPath(name).name or name.endswith("/"):  # ``PUT /files/``, ``PUT /files/guide/``: no file's name
        raise refuse("path", "name", f"{quoted(name)} names no file; give the file's name after /files/ "
                                     "(/files/guide/install.md)")
    if PurePosixPath(name).suffix.lower() not in FORMATS:
        hidden = PurePosixPath(name).name.lower() in FORMATS  # ".txt": a hidden file's name, with no suffix
        raise UnsupportedMediaType(f"{quoted(name)}: a file's name must end in one of {SUFFIXES} (its suffix says "
                                   "how it is read)" + ("; a name that is a dot and a suffix alone is a hidden "
                                                        "file's, which has none: name it (notes.txt)" if hidden else ""))
    id_given, doc_id = doc_id is not None, given if doc_id is None else path_text(request, doc_id, "id", "query")
    if id_given and not doc_id.strip():  # (a name is never blank: it has a suffix)
        raise refuse("query", "id", "the id is blank; give one with a visible character, or leave id out (the "
                                    "file's name is its id)")
    opts = file_options(query_texts(request, meta, "meta"), max_tokens, overlap, min_tokens)
    # a file's id is its name, in any spelling, as /documents/{id}'s; looked up off the loop (writes.read_document)
    held, replacing = await asyncio.to_thread(named, live.store.snapshot, doc_id)
    id_at = ("query", "id") if id_given else ("path", "name")  # where the request gives the id
    try:  # what the request gives of the document, checked as PUT /documents checks one, before the body is read
        written_document({"id": doc_id, "paragraphs": [name], "meta": opts.extra_meta}, shortened(name),
                         live.settings.max_title_chars, replacing)
    except CorpusError as e:
        raise refuse(*(("query", "meta") if e.field == "meta" else id_at), str(e)) from None
    reader = live.file_reader
    try:
        declared = _declared_length(request)
        if declared:  # every slot taken: refused before its client sends the body (nothing is reserved)
            reader.check_slot()
        with reader.holding(live.settings.max_file_bytes if declared is None
                            else min(declared, live.settings.max_file_bytes)):
            data = await request.body()  # (a slow client's body holds its bytes, not a slot, while it arrives)
            with reader.slot():
                return await _read_and_write(request, live, name, doc_id, (held, replacing), opts, only_new, data)
    except UploadsBusy as e:
        raise Overloaded(str(e), e.retry_after) from None
    except UnheldIds as e:  # held when looked up above, deleted before the write: a new id, too long to be one
        raise refuse(*id_at, f"{shortened(name)}: 'id' {e.problem()}") from None


def _declared_length(request: Request) -> int | None:
    """The body's declared length (Content-Length; the middleware refuses one over ``max_file_bytes``), or None for
    a body sent in chunks of no declared length, which may hold up to ``max_file_bytes``."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


async def _read_and_write(request: Request, live: Any, name: str, doc_id: str, held: tuple[str, bool],
                          opts: IngestOptions, only_new: bool, data: bytes) -> FileWriteResponse:
    """Read the file ``name`` (``data``) and write its document under ``held``, the id the request's ``doc_id`` names
    and whether it replaces a document held under it (``writes.named``): the document is checked under ``doc_id``, as ``PUT /documents`` checks one before it looks its id
    up, so that a document held under a longer spelling than the one given (an index built from a corpus file) is
    replaced, not refused for a length the client never sent."""
    shown = shortened(name)  # how every message names the file (its name may be as long as an id, or longer)
    if not data:
        raise UnreadableFile(f"{shown}: the request has no body; send the file's bytes as the body")
    try:
        read = await live.file_reader.read(data, name, opts)
    except ReadOutOfMemory as e:
        raise PayloadTooLarge(naming(str(e), name)) from None
    except file_reader.ReaderUnavailable as e:  # the server's, not the file's: 503, and the next upload tries again
        raise ReaderUnavailable(str(e)) from None
    except (IngestError, ReaderStopped) as e:
        raise UnreadableFile(naming(str(e), name)) from None
    if isinstance(read.doc, str):
        raise UnreadableFile(f"{shown}: {naming(read.doc, name)}")
    if (refusal := too_many_tokens(shown, read.tokens, live.settings.max_file_tokens, "max_file_tokens",
                                   "one file")) is not None:
        raise refusal
    try:  # the document read, under its id, as PUT /documents takes one (its title, its front matter's keys)
        doc = file_document(read.doc, doc_id, shown, live.settings.max_title_chars, held[1])
    except CorpusError as e:
        raise UnreadableFile(naming(str(e), doc_id)) from None
    try:
        written, (doc,) = await upsert_held_or_new(live, [dataclasses.replace(doc, id=held[0])], [doc_id], only_new)
    except HeldDocuments as e:
        raise held_already(e, "PUT /files/{name}") from None
    return FileWriteResponse(**written, id=doc.id, title=doc.title, warnings=[naming(w, name) for w in read.warnings],
                             request_id=request_id_of(request))


IdParam = Annotated[str | None, Query(description="the document's id (default: the name)")]
MetaParam = Annotated[list[str], Query(description="metadata KEY=VALUE, repeatable (as from-files' --meta)")]
MaxTokens = Annotated[int | None, Query(description=f"most tokens in a passage (from-files' default: 200; at most "
                                                     f"{ChunkOptions.MOST_TOKENS})")]
Overlap = Annotated[int | None, Query(description="tokens shared by consecutive windows of a long paragraph "
                                                  "(default: a fifth of max_tokens)")]
MinTokens = Annotated[int | None, Query(description="a passage under this takes in the paragraphs after it (32, or "
                                                     "max_tokens where that is smaller)")]
_WRITE_ERRORS = (401, 403, 413, 415, 422, 503)
# the body, for /docs and generated clients: the route reads it as bytes, so FastAPI would not describe it
_FILE_BODY = {"requestBody": {"required": True, "description": "the file's bytes (any Content-Type)", "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}


@router.put("/files/{name:path_text}", response_model=FileWriteResponse,
            dependencies=[Depends(require_write_key), Depends(known_query)], responses=_errors(*_WRITE_ERRORS), openapi_extra=_FILE_BODY)
async def put_file(request: Request, name: str, id: IdParam = None, meta: MetaParam = [],  # noqa: B006
                   max_tokens: MaxTokens = None, overlap: Overlap = None, min_tokens: MinTokens = None
                   ) -> FileWriteResponse:
    """Add or replace the document of a file (the body), read as ``spanseek corpus from-files`` reads it. The
    answer comes once it is in the fsynced log and searchable."""
    return await _write(request, name, id, meta, max_tokens, overlap, min_tokens, only_new=False)


@router.post("/files/{name:path_text}", response_model=FileWriteResponse,
             dependencies=[Depends(require_write_key), Depends(known_query)], responses=_errors(409, *_WRITE_ERRORS), openapi_extra=_FILE_BODY)
async def post_file(request: Request, name: str, id: IdParam = None, meta: MetaParam = [],  # noqa: B006
                    max_tokens: MaxTokens = None, overlap: Overlap = None, min_tokens: MinTokens = None
                    ) -> FileWriteResponse:
    """Add the document of a file whose id is new: 409 when a live document holds it, and nothing written."""
    return await _write(request, name, id, meta, max_tokens, overlap, min_tokens, only_new=True)
