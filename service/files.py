"""HTTP routes that write a file as a document: PUT /files/{name} (add or replace), POST /files/{name} (add only).

The request body is the file itself (any Content-Type). Its name's suffix says how it is read, exactly as
``spanseek corpus from-files`` reads a file (``indexer.ingest``: .txt, .md, .markdown, .html, .htm, .pdf, .docx,
.pptx), and its passages are cut with the served model's tokenizer at from-files' sizes (``max_tokens``, ``overlap`` and
``min_tokens`` may be given as query parameters, as the command's flags): the document written is the one that
from-files then ``PUT /documents`` would write, with its pages or sections as passage metadata. The id is the name
(as from-files names a file inside a folder: ``guide/install.md``) unless ``id`` is given; ``meta=KEY=VALUE``
(repeatable) adds metadata, as from-files' ``--meta``. A body of at most ``max_file_bytes`` is taken (413 above).

Refusals: 415 for a name whose suffix no reader takes; 422 ``unreadable_file`` naming the file and the reason for
an empty body or a file the reader skips or refuses (no text, a PDF without a text layer, a damaged, encrypted or
binary file, front matter that is not valid YAML), 422 ``validation_error`` for bad ids and metadata; keys, 403/503 and the write itself as ``service.writes``. Files are
read one at a time in a thread of their own (``LiveWrites.file_pool``), so a large PDF does not hold up searches.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError

from spanseek.core.io import Document
from spanseek.indexer.chunking import ChunkOptions
from spanseek.indexer.documents import IngestError
from spanseek.indexer.ingest import FORMATS, IngestOptions, parse_meta, read_document
from spanseek.indexer.live import HeldDocuments
from spanseek.service.errors import BadRequest, Conflict, UnreadableFile, UnsupportedMediaType, request_id_of
from spanseek.service.routes import _errors
from spanseek.service.schemas import FileWriteResponse
from spanseek.service.writes import id_problem, live_of, require_write_key

router = APIRouter(tags=["documents"])
SUFFIXES = ", ".join(sorted(FORMATS))


def _refuse(where: str, field: str, msg: str) -> RequestValidationError:
    return RequestValidationError([{"loc": (where, field), "msg": msg, "type": "value_error"}])


def file_options(meta: list[str], max_tokens: int | None, overlap: int | None, min_tokens: int | None
                 ) -> IngestOptions:
    """from-files' options of one upload: ``meta`` as its ``--meta KEY=VALUE`` (422 naming a malformed or repeated
    key), passage sizes as its flags (400 for sizes ChunkOptions refuses)."""
    try:
        extra = parse_meta(meta, "meta")
    except ValueError as e:
        raise _refuse("query", "meta", str(e)) from None
    try:
        chunk = ChunkOptions.of(max_tokens, overlap, min_tokens)
    except ValueError as e:
        raise BadRequest(str(e)) from None
    return IngestOptions(chunk=chunk, extra_meta=extra)


class _Renamed(logging.Filter):
    """Rewrites a record whose message names the temporary copy ``path`` to name the file ``name`` instead, and keeps
    the warnings this thread's read logs (``warnings``: a PDF's pages without a text layer), for its answer."""

    def __init__(self, path: str, name: str):
        super().__init__()
        self.path, self.name = path, name
        self.thread = threading.get_ident()
        self.warnings: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.path in message:
            record.msg, record.args = message.replace(self.path, self.name), None
        if record.levelno >= logging.WARNING and record.thread == self.thread:
            self.warnings.append(record.getMessage())
        return True


@contextmanager
def _logged_as(path: Path, name: str) -> Iterator[_Renamed]:
    """While a file is read: the readers' log records (``spanseek.indexer.*``: a PDF's pages without a text layer,
    say) name the file, not its temporary copy. Records of other reads pass unchanged (their paths differ)."""
    renamed = _Renamed(str(path), name)
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
               if n == "spanseek.indexer" or n.startswith("spanseek.indexer.")]
    for logger in loggers:
        logger.addFilter(renamed)
    try:
        yield renamed
    finally:
        for logger in loggers:
            logger.removeFilter(renamed)


def read_upload(data: bytes, name: str, opts: IngestOptions, count: Any) -> tuple[Document | str, list[str]]:
    """The document of a file ``name`` whose bytes are ``data`` (``indexer.ingest.read_document`` on a temporary
    copy named like it), or the reason the reader skips it, and the warnings the reader logged (pages it could not
    read); IngestError (its text naming ``name``) when it refuses it. A reason, error, warning or log record never
    shows the temporary copy's path."""
    with tempfile.TemporaryDirectory(prefix="spanseek-upload-") as tmp:
        path = Path(tmp) / f"upload{PurePosixPath(name).suffix.lower()}"
        path.write_bytes(data)
        try:
            with _logged_as(path, name) as logged:
                doc = read_document(path, name, count, opts)
        except IngestError as e:
            raise IngestError(str(e).replace(str(path), name)) from None
        return (doc.replace(str(path), name) if isinstance(doc, str) else doc), logged.warnings


async def _write(request: Request, name: str, doc_id: str | None, meta: list[str], max_tokens: int | None,
                 overlap: int | None, min_tokens: int | None, only_new: bool) -> FileWriteResponse:
    live = live_of(request)
    if PurePosixPath(name).suffix.lower() not in FORMATS:
        raise UnsupportedMediaType(f"{name!r}: a file's name must end in one of {SUFFIXES} (its suffix says how it "
                                   f"is read)")
    id_given, doc_id = doc_id is not None, name if doc_id is None else doc_id
    if (problem := id_problem(doc_id)) is not None:
        raise _refuse(*(("query", "id") if id_given else ("path", "name")), f"{doc_id!r}: {problem}")
    opts = file_options(meta, max_tokens, overlap, min_tokens)
    data = await request.body()
    if not data:
        raise UnreadableFile(f"{name}: the request has no body; send the file's bytes as the body")
    try:
        doc, warnings = await asyncio.get_running_loop().run_in_executor(live.file_pool, read_upload, data, name,
                                                                         opts, live.file_counter)
    except IngestError as e:
        raise UnreadableFile(str(e)) from None
    if isinstance(doc, str):
        raise UnreadableFile(f"{name}: {doc}")
    doc = dataclasses.replace(doc, id=doc_id)
    try:
        written = await live.upsert([doc], only_new=only_new)
    except HeldDocuments as e:
        raise Conflict(f"{e}; PUT /files/{{name}} replaces documents by id") from None
    return FileWriteResponse(**written, id=doc.id, title=doc.title, warnings=warnings,
                             request_id=request_id_of(request))


IdParam = Annotated[str | None, Query(description="the document's id (default: the name)")]
MetaParam = Annotated[list[str], Query(description="metadata KEY=VALUE, repeatable (as from-files' --meta)")]
MaxTokens = Annotated[int | None, Query(description="most tokens in a passage (from-files' default: 200)")]
Overlap = Annotated[int | None, Query(description="tokens shared by consecutive windows of a long paragraph "
                                                  "(default: a fifth of max_tokens)")]
MinTokens = Annotated[int | None, Query(description="a passage under this takes in the paragraphs after it (32)")]
_WRITE_ERRORS = (401, 403, 413, 415, 422, 503)
# the body, for /docs and generated clients: the route reads it as bytes, so FastAPI would not describe it
_FILE_BODY = {"requestBody": {"required": True, "description": "the file's bytes (any Content-Type)", "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}


@router.put("/files/{name:path}", response_model=FileWriteResponse, dependencies=[Depends(require_write_key)],
            responses=_errors(*_WRITE_ERRORS), openapi_extra=_FILE_BODY)
async def put_file(request: Request, name: str, id: IdParam = None, meta: MetaParam = [],  # noqa: B006
                   max_tokens: MaxTokens = None, overlap: Overlap = None, min_tokens: MinTokens = None
                   ) -> FileWriteResponse:
    """Add or replace the document of a file (the body), read as ``spanseek corpus from-files`` reads it. The
    answer comes once it is in the fsynced log and searchable."""
    return await _write(request, name, id, meta, max_tokens, overlap, min_tokens, only_new=False)


@router.post("/files/{name:path}", response_model=FileWriteResponse, dependencies=[Depends(require_write_key)],
             responses=_errors(409, *_WRITE_ERRORS), openapi_extra=_FILE_BODY)
async def post_file(request: Request, name: str, id: IdParam = None, meta: MetaParam = [],  # noqa: B006
                    max_tokens: MaxTokens = None, overlap: Overlap = None, min_tokens: MinTokens = None
                    ) -> FileWriteResponse:
    """Add the document of a file whose id is new: 409 when a live document holds it, and nothing written."""
    return await _write(request, name, id, meta, max_tokens, overlap, min_tokens, only_new=True)
