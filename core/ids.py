"""Document ids: the spellings that name one document, and which of them a lookup takes.

An id is opaque text, except that Unicode spells an accented letter two ways: composed (NFC: "café" as Linux and
the service write it) and decomposed (NFD: how macOS's HFS+ spells a file's name). Both name one document wherever
an id is looked up: the HTTP routes (``service.writes``, a filter's ``doc_ids``), ``SearchFilter(doc_ids=...)`` built
in Python, ``spanseek index delete --ids``, ``index add`` and ``index upsert`` (a corpus naming a held document in the other
spelling repeats its id, or replaces it under the spelling held) and ``spanseek sync``; new documents are written
under the composed one by the service and sync.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable


def id_spellings(doc_id: str) -> tuple[str, ...]:
    """The spellings of a document id that name one document: as given, composed (NFC: how the service writes ids)
    and decomposed (NFD: how macOS's HFS+ spells a file's name). "café" typed on a Mac and on Linux is one id; ids
    are otherwise opaque (no case folding, no NFKC: "ﬁ" and "fi" are two)."""
    return tuple(dict.fromkeys((doc_id, new_id(doc_id), unicodedata.normalize("NFD", doc_id))))


def new_id(doc_id: str) -> str:
    """The spelling a new document's id is written under: composed (NFC), whatever spelling the name came in."""
    return unicodedata.normalize("NFC", doc_id)


def held_id(doc_id: str, held: Callable[[str], bool]) -> str:
    """The id ``doc_id`` names, where ``held(id)`` says whether a live document holds ``id``: the first of its
    spellings (``id_spellings``) that one holds, so a document stored under another spelling (an index built before
    ids were made NFC, a file named on a Mac) is the one read, replaced or deleted; else ``new_id``, the spelling a
    new document takes."""
    forms = id_spellings(doc_id)
    if len(forms) == 1:  # (an ASCII id, most of them: no lookup)
        return doc_id
    return next((s for s in forms if held(s)), new_id(doc_id))
