"""Document ids: the spellings that name one document, and which of them a lookup takes.

An id is opaque text, except that Unicode spells an accented letter two ways: composed (NFC: "café" as Linux and
the service write it) and decomposed (NFD: how macOS's HFS+ spells a file's name). Both name one document wherever
an id is looked up: the HTTP routes (``service.writes``, a filter's ``doc_ids``), ``SearchFilter(doc_ids=...)`` built
in Python, ``spanseek index delete --ids``, ``index add`` and ``index upsert`` (a corpus naming a held document in the other
spelling repeats its id, or replaces it under the spelling held) and ``spanseek sync``; new documents are written
under the composed one by the service and sync. A document held under a third spelling (an accent's marks in an order
neither form keeps: "ẹ" + U+0302 for the "ệ" of "việt", from an index built before ids were made composed) is found by
any spelling of the same composed form where a document is looked up by id (``held_id`` with ``respellings`` of the
ids held: the HTTP routes' ``/documents/{id}`` and writes, ``index delete --ids``, ``index add`` and ``index upsert``);
a filter's ``doc_ids`` matches only the three spellings above. A served index with live writes is its base and a segment
of recent documents: ``joined`` gives the ``respellings`` of both from each one's, so a write passes over its segment's
ids, not every id held.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence


def id_spellings(doc_id: str) -> tuple[str, ...]:
    """The spellings of a document id that name one document: as given, composed (NFC: how the service writes ids)
    and decomposed (NFD: how macOS's HFS+ spells a file's name). "café" typed on a Mac and on Linux is one id; ids
    are otherwise opaque (no case folding, no NFKC: "ﬁ" and "fi" are two)."""
    return tuple(dict.fromkeys((doc_id, new_id(doc_id), unicodedata.normalize("NFD", doc_id))))


MAX_ID_CHARS = 1024  # the longest id a write takes, however it comes: the service's routes (a file's name too), sync


def length_problem(doc_id: str) -> str | None:
    """Why a write cannot take ``doc_id`` for its length (over ``MAX_ID_CHARS`` characters), or None. An index built
    from a corpus file may hold a longer id, which a lookup still finds."""
    if len(doc_id) <= MAX_ID_CHARS:
        return None
    return f"has {len(doc_id):,} characters; an id has at most {MAX_ID_CHARS:,}"


def new_id(doc_id: str) -> str:
    """The spelling a new document's id is written under: composed (NFC), whatever spelling the name came in."""
    return unicodedata.normalize("NFC", doc_id)


def respellings(ids: Iterable[str]) -> dict[str, list[str]]:
    """The ids among ``ids`` not spelled composed, by their composed spelling (NFC), each once and in order: where
    ``held_id`` finds a document held under a spelling that is neither the one given, composed nor decomposed.
    Made once for many lookups (one pass, ASCII ids skipped at once); small, as most ids are composed."""
    out: dict[str, list[str]] = {}
    for i in ids:
        if not i.isascii() and not unicodedata.is_normalized("NFC", i):
            same = out.setdefault(new_id(i), [])
            if i not in same:
                same.append(i)
    return out


def joined(first: Mapping[str, Sequence[str]], then: Mapping[str, Sequence[str]]) -> Mapping[str, Sequence[str]]:
    """``respellings(a + b)`` from ``first = respellings(a)`` and ``then = respellings(b)``, without copying either:
    a key's ids are ``first``'s, then those of ``then`` not among them. Looking a key up costs the two lookups, so the
    respellings of a large base are made once and each of its snapshots adds only its own few ids."""
    return _Joined(first, then) if then else first


class _Joined(Mapping[str, Sequence[str]]):
    """Two ``respellings`` maps read as one (``joined``)."""

    def __init__(self, first: Mapping[str, Sequence[str]], then: Mapping[str, Sequence[str]]):
        self.first, self.then = first, then

    def __getitem__(self, key: str) -> Sequence[str]:
        a, b = self.first.get(key), self.then.get(key)
        if b is None:
            if a is None:
                raise KeyError(key)
            return a
        return b if a is None else [*a, *(i for i in b if i not in a)]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self.first, *self.then]))

    def __len__(self) -> int:
        return len(self.first.keys() | self.then.keys())


def held_id(doc_id: str, held: Callable[[str], bool], respelled: Mapping[str, Sequence[str]] | None = None) -> str:
    """The id ``doc_id`` names, where ``held(id)`` says whether a live document holds ``id`` and ``respelled`` is
    ``respellings`` of the ids held (None: no document is held under a third spelling): the first of its spellings
    (``id_spellings``), then of the held ids with its composed spelling, that one holds, so a document stored under
    another spelling (an index built before ids were made NFC, a file named on a Mac) is the one read, replaced or
    deleted; else ``new_id``, the spelling a new document takes."""
    forms = id_spellings(doc_id)
    composed = new_id(doc_id)
    others = () if respelled is None else respelled.get(composed, ())
    if len(forms) == 1 and not others:  # (an ASCII id, most of them: no lookup)
        return doc_id
    return next((s for s in (*forms, *others) if held(s)), composed)


def held_in(ids: Collection[str]) -> Callable[[str], str]:
    """``held_id`` over a collection of the live ids (its ``respellings`` made once): the id each id given names."""
    respelled = respellings(ids)
    return lambda doc_id: held_id(doc_id, ids.__contains__, respelled)
