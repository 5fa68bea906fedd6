"""The field index of an index's documents and passages: a filter (``core.filters``) evaluated to the documents, or
the passages, that pass it.

Built from the document store (``docs.jsonl``) and the passages' own metadata (``passages.jsonl``'s ``meta``) by
every writer that changes them (``index build``, ``add``, ``upsert``, ``compact``; ``delete`` changes only the
deletion mask, which the selection applies on top) and kept as ``doc_fields.npz`` in the index directory,
checksummed in the manifest like every other file. An index built before it has no such file: ``PhraseIndex.fields``
then builds the field index in memory at its first use; one whose file was written before it held the passages'
fields builds those at the first ``passage`` condition (``FieldIndex.passage_fields``).

Per metadata field, the documents (and apart, the passages) are held per kind of value (``core.fieldvalues``), so a
condition costs a lookup and the records it selects, not a scan of every document. Document ids are looked up in a
dict (the last document of an id: upsert appends the new version and deletes the old), title prefixes by bisection
over the documents sorted by title. An ``any`` of many values costs one lookup per kind of value, not one per value:
its numbers are sorted once and found by one ``searchsorted``, its strings by their codes. Each condition becomes a
(D,) boolean mask over documents and the tree combines masks (``must`` and, ``should`` or, ``must_not`` and-not). A
filter holding a ``passage`` condition is evaluated over passages instead (``passage_mask``): a document condition's
mask is read through each passage's document, a ``passage`` condition's leaves select passages by their own
metadata, and the tree combines (P,) masks.

A live snapshot (``core.segment.LiveIndex``) filters with ``JoinedFieldIndex``: its base's field index (read or built
once a base) and those built over runs of the segment's documents and their passages (``core.segment_log``, each
built once a run and shared by the later snapshots), each condition's documents (or passages) taken from all
(numbered one part after the other), so a write builds about its own document's, not a field index over every
document.

A condition on a field no document has (in a ``passage`` condition: no passage), or of a kind the field never holds
(a range of numbers over strings, a date range over a field without dates, ``"2024"`` over numbers), raises
FilterError naming the field (HTTP 400).
"""

from __future__ import annotations

import bisect
import functools
import io
import itertools
import json
import threading
import typing
from abc import ABC, abstractmethod
from collections import ChainMap
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core.chained import Chained, ChainedArray, take
from spanseek.core.fieldvalues import (
    NONE,
    Field,
    appended_fields,
    fields_from_arrays,
    fields_of,
    fields_to_arrays,
    grouped,
)
from spanseek.core.fieldvalues import run_positions as run_positions
from spanseek.core.filters import (
    AnyOf,
    Condition,
    FilterError,
    Kind,
    Match,
    Not,
    Passage,
    Range,
    SearchFilter,
    at_place,
    holds_passage,
    kind_of,
)
from spanseek.core.ids import joined, respellings

FIELDS = "doc_fields.npz"
FORMAT = 1
_BUILDING = threading.Lock()  # the passage fields an older file lacks, built at the first call that needs them
HEADER = "header"  # the npz's JSON header: format, documents, passages, and per field (documents', passages') its strings


class FilterTree(ABC):
    """A filter evaluated over numbered documents: the tree (``must`` and, ``should`` or, ``must_not`` and-not) and
    the check of each condition, over the conditions' documents that a subclass finds (``FieldIndex``: one index's;
    ``JoinedFieldIndex``: two, the second numbered after the first)."""

    ids: Sequence[str]  # each document's id, in document order
    number_of: Mapping[str, int]  # document number by id (the last document of a repeated id)

    @property
    @abstractmethod
    def documents(self) -> int:
        """The documents numbered."""

    @property
    @abstractmethod
    def respelled(self) -> Mapping[str, Sequence[str]]:
        """The ids not spelled composed (NFC), by their composed spelling (``core.ids.respellings``)."""

    @property
    @abstractmethod
    def passages(self) -> int:
        """The passages numbered (``found`` numbers a passage condition's)."""

    @abstractmethod
    def kinds_of(self, key: str, in_passage: bool = False) -> list[Kind] | None:
        """The kinds of value field ``key`` holds (``Field.kinds``), None when no document has it (``in_passage``:
        no passage's own metadata)."""

    @abstractmethod
    def names(self, in_passage: bool = False) -> list[str]:
        """Every metadata field's name, sorted (``in_passage``: of the passages' own metadata)."""

    @abstractmethod
    def found(self, leaf: Match | AnyOf | Range, in_passage: bool = False) -> np.ndarray:
        """The documents a condition selects (a document may come more than once), none where the field or the
        kind asked for is missing (``check`` refuses such a condition before); ``in_passage``: the passages, by
        their own metadata."""

    @abstractmethod
    def titled(self, prefix: str) -> np.ndarray:
        """The documents whose title starts with ``prefix``."""

    def check(self, flt: SearchFilter | None) -> None:
        """Raise FilterError naming the field when a condition of ``flt`` names a field no document has (a
        ``passage`` condition's: no passage), or asks for a kind of value the field never holds."""
        for where, leaf, in_passage in flt.placed_leaves() if flt is not None else ():
            at_place(where, self._check_leaf, leaf, in_passage)

    def documents_of(self, flt: SearchFilter) -> np.ndarray:
        """(D,) bool: the documents that pass ``flt`` (deletions aside); FilterError as ``check``, naming the
        condition's place (a delete by filter, or a search whose index changed since its filter was checked), and
        for a filter that selects passages (``passage_mask``: a ``passage`` condition), which passes no whole
        document."""
        if flt.reads_passages:
            raise FilterError("a passage condition selects passages, not whole documents: it filters searches only "
                              "(give document conditions here)")
        self.check(flt)
        return self._mask(flt)

    def passage_mask(self, flt: SearchFilter, passage_doc: np.ndarray | ChainedArray) -> np.ndarray:
        """(P,) bool: the passages that pass ``flt`` (``passage_doc``: each passage's document), a document condition
        holding for every passage of a document that passes it and a ``passage`` condition for the passages whose
        own metadata pass it; FilterError as ``check``."""
        self.check(flt)
        if len(passage_doc) != self.passages and flt.reads_passages:
            raise ValueError(f"{len(passage_doc)} passages, the field index numbers {self.passages}")
        return self._mask(flt, passage_doc)

    def numbers_of(self, ids: Iterable[str]) -> np.ndarray:
        """The document numbers of the ids the index holds (unknown ids are left out)."""
        ids = list(ids)
        found = np.fromiter(map(self.number_of.get, ids, repeat(-1, len(ids))), dtype=np.int64, count=len(ids))
        return found[found >= 0]

    def _check_leaf(self, leaf: Match | AnyOf | Range, in_passage: bool = False) -> None:
        """The field a condition reads exists, and holds the kind of value the condition asks for."""
        kinds = self.kinds_of(leaf.key, in_passage)
        if kinds is None:
            holder = ("passage has it in its own metadata (known passage fields" if in_passage else
                      "document has it (known fields")
            raise FilterError(f"filter field {leaf.key!r}: no {holder}: {_listed(self.names(in_passage))})", leaf.key)
        if isinstance(leaf, Range):
            if leaf.kind not in kinds:
                what = "numbers" if leaf.kind == "number" else "ISO-8601 dates"
                raise FilterError(f"filter field {leaf.key!r}: a range of {what}, but the field holds "
                                  f"{_listed(kinds)}", leaf.key)
            return
        values = leaf.values if isinstance(leaf, AnyOf) else (leaf.value,)
        if set(grouped(values)) <= set(kinds):
            return
        for value in values:  # the first value of a kind the field does not hold names it
            kind = kind_of(value)
            if kind not in kinds:
                raise FilterError(f"filter field {leaf.key!r}: {json.dumps(value)} is a {kind}, but the field holds "
                                  f"{_listed(kinds)}", leaf.key)

    def _mask(self, c: Condition, passage_doc: np.ndarray | ChainedArray | None = None, in_passage: bool = False
              ) -> np.ndarray:
        """``c`` evaluated over documents, (D,) bool; with ``passage_doc`` over passages, (P,) bool: a document's
        mask read through ``passage_doc``, a ``passage`` condition's leaves (``in_passage``) over the passages' own
        metadata."""
        if passage_doc is not None and not in_passage and not (isinstance(c, Passage | Not | SearchFilter)
                                                               and holds_passage(c)):
            return take(self._mask(c), passage_doc)  # a document condition holds for each of its passages
        if isinstance(c, Not):
            return ~self._mask(c.condition, passage_doc, in_passage)
        if isinstance(c, Passage):
            return self._mask(c.condition, passage_doc, True)
        if isinstance(c, SearchFilter):
            return self._filter_mask(c, passage_doc, in_passage)
        return self._select(self.found(c, in_passage), in_passage)  # (checked by ``documents_of``)

    def _filter_mask(self, flt: SearchFilter, passage_doc: np.ndarray | ChainedArray | None = None,
                     in_passage: bool = False) -> np.ndarray:
        masks = []
        if flt.doc_ids is not None:  # (not in a passage condition: refused there)
            masks.append(self._select(self.numbers_of(flt.spelled_ids)))
        if flt.title_prefix is not None:
            masks.append(self._select(self.titled(flt.title_prefix)))
        if passage_doc is not None:
            masks = [take(m, passage_doc) for m in masks]
        masks += [self._mask(Match(k, v), passage_doc, in_passage) for k, v in flt.meta or ()]
        masks += [self._mask(c, passage_doc, in_passage) for c in flt.must or ()]
        if flt.should is not None:
            masks.append(np.logical_or.reduce([self._mask(c, passage_doc, in_passage) for c in flt.should]))
        if flt.must_not is not None:
            masks.append(~np.logical_or.reduce([self._mask(c, passage_doc, in_passage) for c in flt.must_not]))
        if not masks:
            return np.ones(self.documents if passage_doc is None else len(passage_doc), dtype=bool)
        return np.logical_and.reduce(masks) if len(masks) > 1 else masks[0]

    def _select(self, found: np.ndarray, in_passage: bool = False) -> np.ndarray:
        mask = np.zeros(self.passages if in_passage else self.documents, dtype=bool)
        mask[found] = True
        return mask


class FieldIndex(FilterTree):
    """The documents' ids, titles and metadata fields, and their passages' own metadata fields, indexed for filters
    (see the module docstring).

    ``ids`` and ``titles`` are the document store's (``docs.jsonl``, in document order); ``title_order`` the
    document numbers sorted by title; ``fields`` every metadata field by name; ``passage_fields`` every field of the
    passages' own metadata (``passages.jsonl``'s ``meta``), numbered by passage, or None to build them from
    ``passage_records`` at the first ``passage`` condition (an index whose ``doc_fields.npz`` was written before
    they were kept in it).
    """

    def __init__(self, ids: list[str], titles: list[str], title_order: np.ndarray, fields: dict[str, Field],
                 passage_fields: dict[str, Field] | None = None,
                 passage_records: Sequence[Mapping[str, Any]] = ()):
        self.ids, self.titles, self.title_order, self.fields = ids, titles, title_order, fields
        self.number_of = {doc_id: d for d, doc_id in enumerate(ids)}  # the last document of a repeated id
        self._passage_fields, self._passage_records = passage_fields, passage_records
        self._passages = len(passage_records)

    @functools.cached_property
    def respelled(self) -> dict[str, list[str]]:
        """The ids not spelled composed (NFC), by their composed spelling (``core.ids.respellings``), made at the
        first lookup by id that needs it: where ``core.ids.held_id`` finds a document held under a third spelling
        of the id given."""
        return respellings(self.ids)

    @property
    def documents(self) -> int:
        return len(self.ids)

    @property
    def passages(self) -> int:
        return self._passages

    @property
    def passage_fields(self) -> dict[str, Field]:
        """The passages' own metadata fields, built from the passage records at the first call where the field
        index was read from a file that does not hold them (about 0.1 s a million passages without metadata)."""
        if self._passage_fields is None:
            with _BUILDING:  # once, however many threads ask (each request's filter is checked in a worker thread)
                if self._passage_fields is None:
                    self._passage_fields = fields_of(enumerate(p.get("meta") for p in self._passage_records))
                    self._passage_records = ()  # (the index's own list: not held twice)
        return self._passage_fields

    @classmethod
    def build(cls, docs: list[Mapping[str, Any]], passages: Sequence[Mapping[str, Any]] = ()) -> FieldIndex:
        """The field index of document records (``docs.jsonl``'s ``{"id", "title", "meta"}``) and of their passages'
        records (``passages.jsonl``'s, of which only ``meta`` is read; its fields built at the first ``passage``
        condition, or by ``save``)."""
        fields = fields_of(enumerate(doc.get("meta") for doc in docs))
        titles = [doc["title"] for doc in docs]
        order = np.asarray(sorted(range(len(titles)), key=titles.__getitem__), dtype=np.int32)
        return cls([doc["id"] for doc in docs], titles, order, fields, None, passages)

    # --- the file -----------------------------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the field index to exactly ``path`` (an npz: a JSON header and the arrays, no pickles)."""
        header: dict[str, Any] = {"format": FORMAT, "documents": self.documents, "passages": self.passages}
        arrays: dict[str, np.ndarray] = {"title_order": self.title_order}
        header["fields"] = fields_to_arrays(self.fields, "f", arrays)
        header["passage_fields"] = fields_to_arrays(self.passage_fields, "p", arrays)
        arrays[HEADER] = np.frombuffer(json.dumps(header, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as the allow_pickle flag
        path.write_bytes(buf.getvalue())

    @classmethod
    def load(cls, path: Path, docs: list[Mapping[str, Any]], passages: Sequence[Mapping[str, Any]] | None = ()
             ) -> FieldIndex:
        """Read ``path`` for the document records ``docs`` and passage records ``passages``; ValueError when it does
        not fit them (the caller names the file). A file written before passage fields were kept in it has them
        built from ``passages`` at the first ``passage`` condition. ``passages`` None: the passages are not read (to
        append to the field index: ``appended``), and a file without their fields is refused (ValueError)."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        header = json.loads(arrays.pop(HEADER).tobytes().decode("utf-8"))
        if header.get("format") != FORMAT:
            raise ValueError(f"field index format {header.get('format')!r} (this spanseek reads {FORMAT})")
        if header.get("documents") != len(docs):
            raise ValueError(f"{header.get('documents')} documents, the document store has {len(docs)}")
        if passages is None and "passage_fields" not in header:
            raise ValueError("written before the passages' fields were kept in it")
        if passages is not None and "passage_fields" in header and header.get("passages") != len(passages):
            raise ValueError(f"{header.get('passages')} passages, the passage store has {len(passages)}")
        fields = fields_from_arrays(header["fields"], "f", arrays)
        passage_fields = (fields_from_arrays(header["passage_fields"], "p", arrays) if "passage_fields" in header
                          else None)
        index = cls([d["id"] for d in docs], [d["title"] for d in docs], arrays["title_order"], fields,
                    passage_fields, passages or ())
        if passages is None:
            index._passages = int(header["passages"])
        return index

    def appended(self, docs: Sequence[Mapping[str, Any]], passages: Iterable[Mapping[str, Any]]) -> FieldIndex:
        """This field index with the records of more documents ``docs`` and of their passages ``passages`` numbered
        after its own (``index add``, ``upsert``): what ``build`` over all the records gives, the same file from
        ``save``, without this one's records read again (its passages' fields are appended to, not rebuilt: the
        passage store's whole text took 0.97 s a 300k passages to read). Each field's records of a value stay in
        record order, and the titles' order is merged by bisection."""
        metas = [p.get("meta") for p in passages]
        fields = appended_fields(self.fields, fields_of(enumerate((d.get("meta") for d in docs), self.documents)))
        passage_fields = appended_fields(self.passage_fields, fields_of(enumerate(metas, self.passages)))
        titles = self.titles + [d["title"] for d in docs]
        new = sorted(range(self.documents, len(titles)), key=titles.__getitem__)  # (stable: by number among equals)
        at = [bisect.bisect_right(self.title_order, titles[d], key=titles.__getitem__) for d in new]
        order = np.insert(self.title_order, at, new).astype(np.int32)
        index = FieldIndex([*self.ids, *(d["id"] for d in docs)], titles, order, fields, passage_fields)
        index._passages = self.passages + len(metas)
        return index

    # --- filters ------------------------------------------------------------------------------------------------

    def kinds_of(self, key: str, in_passage: bool = False) -> list[Kind] | None:
        f = (self.passage_fields if in_passage else self.fields).get(key)
        return None if f is None else f.kinds

    def names(self, in_passage: bool = False) -> list[str]:
        return sorted(self.passage_fields if in_passage else self.fields)

    def found(self, leaf: Match | AnyOf | Range, in_passage: bool = False) -> np.ndarray:
        f = (self.passage_fields if in_passage else self.fields).get(leaf.key)
        if f is None:
            return NONE
        if isinstance(leaf, Range):
            postings = f.numbers if leaf.kind == "number" else f.dates
            return NONE if postings is None else postings.between(leaf)
        return f.any_of(leaf.values if isinstance(leaf, AnyOf) else (leaf.value,))

    def titled(self, prefix: str) -> np.ndarray:
        """Documents whose title starts with ``prefix``: a run of the documents sorted by title."""
        order, title = self.title_order, self.titles.__getitem__
        lo = bisect.bisect_left(order, prefix, key=title)
        after = _after(prefix)
        hi = len(order) if after is None else bisect.bisect_left(order, after, lo=lo, key=title)
        return order[lo:hi]


class JoinedFieldIndex(FilterTree):
    """The field index of ``first``'s documents followed by each of ``then``'s in turn (each numbered after the one
    before), read from the parts without building one over all: a live index's base (built once a base) and its
    segment's runs of documents (``core.segment_log``, built once a run). Each condition selects documents one by
    one, so its documents are the parts', renumbered; a filter answers as ``FieldIndex.build`` over all the
    documents does (an id held by several is the last part's, the last document of the id)."""

    def __init__(self, first: FilterTree, *then: FilterTree):
        self.parts = (first, *then)
        self.offsets = list(itertools.accumulate((p.documents for p in self.parts), initial=0))
        self.passage_offsets = list(itertools.accumulate((p.passages for p in self.parts), initial=0))
        self.ids = functools.reduce(Chained, (p.ids for p in then), first.ids)
        shifted = [_shifted(p, at) for p, at in zip(then[::-1], self.offsets[-2:0:-1], strict=True)]
        self.number_of = ChainMap(*shifted, first.number_of)  # type: ignore[arg-type]  # (a read-only view)

    @property
    def documents(self) -> int:
        return self.offsets[-1]

    @property
    def passages(self) -> int:
        return self.passage_offsets[-1]

    @functools.cached_property
    def respelled(self) -> Mapping[str, Sequence[str]]:
        return functools.reduce(joined, (p.respelled for p in self.parts))

    def kinds_of(self, key: str, in_passage: bool = False) -> list[Kind] | None:
        held = [k for p in self.parts if (k := p.kinds_of(key, in_passage)) is not None]
        if len(held) < 2:
            return held[0] if held else None
        return [k for k in typing.get_args(Kind) if any(k in h for h in held)]

    def names(self, in_passage: bool = False) -> list[str]:
        return sorted({n for p in self.parts for n in p.names(in_passage)})

    def found(self, leaf: Match | AnyOf | Range, in_passage: bool = False) -> np.ndarray:
        return self._joined([p.found(leaf, in_passage) for p in self.parts],
                            self.passage_offsets if in_passage else self.offsets)

    def titled(self, prefix: str) -> np.ndarray:
        return self._joined([p.titled(prefix) for p in self.parts], self.offsets)

    @staticmethod
    def _joined(found: list[np.ndarray], offsets: list[int]) -> np.ndarray:
        return np.concatenate([f.astype(np.int64) + at for f, at in zip(found, offsets[:-1], strict=True)])


def _shifted(part: FilterTree, offset: int) -> Mapping[str, int]:
    """``part``'s document numbers by id, numbered from ``offset``: made once a part and offset (a segment's run of
    documents keeps its offset in every snapshot that reads it)."""
    made = part.__dict__.get("_shifted")
    if made is None or made[0] != offset:
        made = part.__dict__["_shifted"] = (offset, {doc_id: offset + d for doc_id, d in part.number_of.items()})
    return made[1]


def _after(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (its last character stepped on), or
    None when every string from ``prefix`` on starts with it (an empty prefix, or one of U+10FFFF only)."""
    prefix = prefix.rstrip("\U0010ffff")
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else None


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) if " " in n else n for n in names[:20])
    return (shown + f" and {len(names) - 20} more" if len(names) > 20 else shown) or "none"


