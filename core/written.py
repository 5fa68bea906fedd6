"""What a live write takes of a document: the one rule of the service's routes that write one (``PUT /documents``,
``PUT /files/{name}``: ``service.writes``, ``service.files``) and of a client that checks its files before it sends
them (``spanseek sync --dry-run``), so that what a dry run passes is what the write takes.

Messages here quote ids and names in full; the service shortens what it echoes back (``service.errors.naming``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spanseek.core.ids import length_problem
from spanseek.core.io import CorpusError, Document, document_from_json, document_json

# what a written document's id may not hold: what str.splitlines() splits at, and NUL. Such an id was written, then
# never found by id (an ids file lists one a line; GET and DELETE /documents/{id} refuse it); one that a log already
# holds is still replayed and merged.
UNROUTABLE = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00")


def id_problem(doc_id: str, replacing: bool = False) -> str | None:
    """Why no document can be written under ``doc_id``, or None: the one rule of every route that writes one, whether
    the id comes in a body (``PUT /documents``), a query (``PUT /files/{name}?id=``) or a path (a file's name): more
    than ``MAX_ID_CHARS`` characters unless the write is ``replacing`` a document held under it (an index built from
    a corpus file may hold a longer id than a write takes), or a line break or NUL (``routing_problem``)."""
    return (None if replacing else length_problem(doc_id)) or routing_problem(doc_id)


def routing_problem(doc_id: str) -> str | None:
    """Why ``doc_id`` cannot be named by ``/documents/{id}`` (it holds a line break or NUL), or None. A lookup checks
    only this: an index built from a corpus file may hold a longer id than a write takes."""
    if (bad := next((c for c in doc_id if c in UNROUTABLE), None)) is None:
        return None
    return (f"holds {'a NUL' if bad == chr(0) else 'a line break'} ({bad!a}): /documents/{{id}} could not name it, "
            f"nor an ids file list it")


def title_problem(title: str, max_title_chars: int | None) -> str | None:
    """What is wrong with a written document's ``title`` (longer than the server's ``max_title_chars``; None: no
    limit known), or None."""
    if max_title_chars is None or len(title) <= max_title_chars:
        return None
    return f"a title of {len(title):,} characters; at most {max_title_chars:,} (max_title_chars)"


def written_document(obj: dict[str, Any], where: str, max_title_chars: int | None, replacing: bool = False
                     ) -> Document:
    """The corpus document of ``obj`` (the corpus format) as a write takes it: CorpusError starting with ``where`` and
    naming the field for a title over ``max_title_chars``, anything the corpus reader refuses
    (``core.io.document_from_json``), no non-blank paragraph, an id too long for a write that is not ``replacing`` a
    document held under it or holding a line break or NUL (``id_problem``), or a
    metadata key holding a NUL (no ``--meta`` flag can give one, nor a ``meta=`` be told from a mistyped one)."""
    title = obj.get("title", "")
    if isinstance(title, str) and (problem := title_problem(title, max_title_chars)) is not None:
        raise CorpusError(problem, "title")
    doc = document_from_json(obj, where)
    if doc is None:
        raise CorpusError(f"{where} ({str(obj.get('id'))!r}) has no non-blank paragraph", "paragraphs")
    if (problem := id_problem(doc.id, replacing)) is not None:
        raise CorpusError(f"{where}: 'id' {problem}", "id")
    for field, metas in (("meta", [doc.meta]), ("passage_meta", doc.passage_meta)):
        if (key := next((k for m in metas for k in m if "\x00" in k), None)) is not None:
            raise CorpusError(f"{where}: its {field} key {key!r} holds a NUL; give keys without one", field)
    return doc


def file_document(doc: Document, doc_id: str, where: str, max_title_chars: int | None, replacing: bool = False
                  ) -> Document:
    """The document read from a file (``indexer.ingest.read_document``, its metadata the write's with it) as
    ``PUT /files/{name}`` writes it under ``doc_id``: CorpusError starting with ``where`` (how the file is named) for
    a title over ``max_title_chars`` (a heading or front matter's ``title``; None: no limit known), or anything else
    ``written_document`` refuses of it (its front matter's metadata with the write's, say; ``replacing``: as there)."""
    if (problem := title_problem(doc.title, max_title_chars)) is not None:
        raise CorpusError(f"{where}: {problem}; give the file a shorter one", "title")
    return written_document(document_json(dataclasses.replace(doc, id=doc_id)), where, max_title_chars, replacing)
