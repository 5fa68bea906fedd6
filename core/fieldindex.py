"""The field index of an index's documents: a filter (``core.filters``) evaluated to the documents that pass it.

Built from the document store (``docs.jsonl``) by every writer that changes it (``index build``, ``add``,
``upsert``, ``compact``; ``delete`` changes only the deletion mask, which the selection applies on top) and kept
as ``doc_fields.npz`` in the index directory, checksummed in the manifest like every other file. An index built
before it has no such file: ``PhraseIndex.fields`` then builds the field index in memory at its first use.

Per metadata field, the documents are held per kind of value, so a condition costs a lookup and the documents it
selects, not a scan of every document:

- numbers: values sorted, with their documents (float64, int32): a range or an equality is two ``searchsorted``;
- ISO-8601 date / datetime strings: the same, as microseconds since 1970 UTC (int64);
- strings: the sorted distinct strings (in the header), and per string its documents (CSR: ``starts``, ``docs``);
- booleans: the documents of ``true`` and of ``false``; null: the documents of ``null``.

A list value contributes each of its elements; objects and nested lists are not indexed (no condition matches
them). Document ids are looked up in a dict (the last document of an id: upsert appends the new version and
deletes the old), title prefixes by bisection over the documents sorted by title. An ``any`` of many values costs
one lookup per kind of value, not one per value: its numbers are sorted once and found by one ``searchsorted``,
its strings by their codes. Each condition becomes a (D,) boolean mask over documents and the tree combines masks
(``must`` and, ``should`` or, ``must_not`` and-not).

A live snapshot (``core.segment.LiveIndex``) filters with ``JoinedFieldIndex``: its base's field index (read or built
once a base) and those built over runs of the segment's documents (``core.segment_log``, each built once a run and
shared by the later snapshots), each condition's documents taken from all (numbered one part after the other), so a
write builds about its own document's, not a field index over every document.

A condition on a field no document has, or of a kind the field never holds (a range of numbers over strings, a
date range over a field without dates, ``"2024"`` over numbers), raises FilterError naming the field (HTTP 400).
"""

from __future__ import annotations

import bisect
import functools
import io
import itertools
import json
import typing
from abc import ABC, abstractmethod
from collections import ChainMap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spanseek.core.chained import Chained
from spanseek.core.filters import (
    AnyOf,
    Condition,
    FilterError,
    Kind,
    Match,
    MetaValue,
    Not,
    Range,
    SearchFilter,
    at_place,
    elements,
    finite_float,
    kind_of,
    parse_date,
)
from spanseek.core.ids import joined, respellings

FIELDS = "doc_fields.npz"
FORMAT = 1
HEADER = "header"  # the JSON header's array in the npz: format, documents, and per field its strings


@dataclass
class Postings:
    """Sorted values and the document of each (numbers: float64; dates: int64 microseconds)."""

    values: np.ndarray
    docs: np.ndarray

    @classmethod
    def of(cls, values: list[Any], docs: list[int], dtype: type) -> Postings:
        v: np.ndarray = np.asarray(values, dtype=dtype)
        d = np.asarray(docs, dtype=np.int32)
        order = np.argsort(v, kind="stable")
        return cls(v[order], d[order])

    def between(self, rng: Range) -> np.ndarray:
        """The documents of the values in ``rng`` (every bound given holds)."""
        gt, gte, lt, lte = rng.bounds
        lo, hi = 0, len(self.values)
        if gt is not None:
            lo = max(lo, self._at(gt, "right"))
        if gte is not None:
            lo = max(lo, self._at(gte, "left"))
        if lt is not None:
            hi = min(hi, self._at(lt, "left"))
        if lte is not None:
            hi = min(hi, self._at(lte, "right"))
        return self.docs[lo:max(lo, hi)]

    def among(self, values: np.ndarray) -> np.ndarray:
        """The documents of the values equal to one of ``values`` (sorted, distinct): a run of the sorted values
        each, found for all at once."""
        return self.docs[run_positions(np.searchsorted(self.values, values, "left"), np.searchsorted(self.values, values, "right"))]

    def _at(self, value: float, side: Literal["left", "right"]) -> int:
        return int(np.searchsorted(self.values, value, side=side))


@dataclass
class Field:
    """One metadata field's documents, by kind of value (see the module docstring); absent kinds are None."""

    numbers: Postings | None = None
    dates: Postings | None = None
    strings: list[str] | None = None  # sorted, distinct
    string_starts: np.ndarray | None = None  # (V + 1,) int64: documents of strings[i] are docs[starts[i]:starts[i+1]]
    string_docs: np.ndarray | None = None
    true: np.ndarray | None = None
    false: np.ndarray | None = None
    null: np.ndarray | None = None
    _code: dict[str, int] | None = field(default=None, repr=False)

    @property
    def kinds(self) -> list[Kind]:
        """The kinds of value the field holds (``date``: strings that are ISO-8601 dates)."""
        booleans = self.true if self.true is not None else self.false
        have: dict[Kind, Any] = {"number": self.numbers, "string": self.strings, "boolean": booleans,
                                 "null": self.null, "date": self.dates}
        return [k for k, v in have.items() if v is not None]

    def any_of(self, values: tuple[MetaValue, ...]) -> np.ndarray:
        """The documents whose value (or one of whose list elements) equals one of ``values`` (a document may come
        more than once). Per kind of value, one lookup for all the values of that kind: the numbers' runs by
        ``searchsorted``, the strings' by their codes; a Python step per value cost 195 ms for 60,000 numbers."""
        found = []
        for kind, some in _grouped(values).items():
            if kind == "number" and self.numbers is not None:
                found.append(self.numbers.among(np.unique(np.asarray(some, dtype=np.float64))))
            elif kind == "string" and self.string_starts is not None and self.string_docs is not None:
                code = self._codes()
                codes = np.fromiter(map(code.get, some, repeat(-1)), dtype=np.int64, count=len(some))
                codes = np.unique(codes[codes >= 0])
                found.append(self.string_docs[run_positions(self.string_starts[codes], self.string_starts[codes + 1])])
            elif kind == "boolean":
                found += [docs for flag, docs in ((True, self.true), (False, self.false))
                          if docs is not None and flag in some]
            elif kind == "null" and self.null is not None:
                found.append(self.null)
        return np.concatenate(found) if found else _NONE

    def _codes(self) -> dict[str, int]:
        """Each string's number in ``strings`` (made at the first condition on the field's strings)."""
        if self._code is None:
            self._code = {s: i for i, s in enumerate(self.strings or ())}
        return self._code


_NONE = np.zeros(0, dtype=np.int32)


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

    @abstractmethod
    def kinds_of(self, key: str) -> list[Kind] | None:
        """The kinds of value field ``key`` holds (``Field.kinds``), None when no document has it."""

    @abstractmethod
    def names(self) -> list[str]:
        """Every metadata field's name, sorted."""

    @abstractmethod
    def found(self, leaf: Match | AnyOf | Range) -> np.ndarray:
        """The documents a condition selects (a document may come more than once), none where the field or the
        kind asked for is missing (``check`` refuses such a condition before)."""

    @abstractmethod
    def titled(self, prefix: str) -> np.ndarray:
        """The documents whose title starts with ``prefix``."""

    def check(self, flt: SearchFilter | None) -> None:
        """Raise FilterError naming the field when a condition of ``flt`` names a field no document has, or asks
        for a kind of value the field never holds."""
        for where, leaf in flt.placed_leaves() if flt is not None else ():
            at_place(where, self._check_leaf, leaf)

    def documents_of(self, flt: SearchFilter) -> np.ndarray:
        """(D,) bool: the documents that pass ``flt`` (deletions aside); FilterError as ``check``, naming the
        condition's place (a delete by filter, or a search whose index changed since its filter was checked)."""
        self.check(flt)
        return self._mask(flt)

    def numbers_of(self, ids: Iterable[str]) -> np.ndarray:
        """The document numbers of the ids the index holds (unknown ids are left out)."""
        ids = list(ids)
        found = np.fromiter(map(self.number_of.get, ids, repeat(-1, len(ids))), dtype=np.int64, count=len(ids))
        return found[found >= 0]

    def _check_leaf(self, leaf: Match | AnyOf | Range) -> None:
        """The field a condition reads exists, and holds the kind of value the condition asks for."""
        kinds = self.kinds_of(leaf.key)
        if kinds is None:
            raise FilterError(f"filter field {leaf.key!r}: no document has it (known fields: "
                              f"{_listed(self.names())})", leaf.key)
        if isinstance(leaf, Range):
            if leaf.kind not in kinds:
                what = "numbers" if leaf.kind == "number" else "ISO-8601 dates"
                raise FilterError(f"filter field {leaf.key!r}: a range of {what}, but the field holds "
                                  f"{_listed(kinds)}", leaf.key)
            return
        values = leaf.values if isinstance(leaf, AnyOf) else (leaf.value,)
        if set(_grouped(values)) <= set(kinds):
            return
        for value in values:  # the first value of a kind the field does not hold names it
            kind = kind_of(value)
            if kind not in kinds:
                raise FilterError(f"filter field {leaf.key!r}: {json.dumps(value)} is a {kind}, but the field holds "
                                  f"{_listed(kinds)}", leaf.key)

    def _mask(self, c: Condition) -> np.ndarray:
        if isinstance(c, Not):
            return ~self._mask(c.condition)
        if isinstance(c, SearchFilter):
            return self._filter_mask(c)
        return self._select(self.found(c))  # (checked by ``documents_of``)

    def _filter_mask(self, flt: SearchFilter) -> np.ndarray:
        masks = []
        if flt.doc_ids is not None:
            masks.append(self._select(self.numbers_of(flt.spelled_ids)))
        if flt.title_prefix is not None:
            masks.append(self._select(self.titled(flt.title_prefix)))
        masks += [self._select(self.found(Match(k, v))) for k, v in flt.meta or ()]
        masks += [self._mask(c) for c in flt.must or ()]
        if flt.should is not None:
            masks.append(np.logical_or.reduce([self._mask(c) for c in flt.should]))
        if flt.must_not is not None:
            masks.append(~np.logical_or.reduce([self._mask(c) for c in flt.must_not]))
        if not masks:
            return np.ones(self.documents, dtype=bool)
        return np.logical_and.reduce(masks) if len(masks) > 1 else masks[0]

    def _select(self, docs: np.ndarray) -> np.ndarray:
        mask = np.zeros(self.documents, dtype=bool)
        mask[docs] = True
        return mask


class FieldIndex(FilterTree):
    """The documents' ids, titles and metadata fields, indexed for filters (see the module docstring).

    ``ids`` and ``titles`` are the document store's (``docs.jsonl``, in document order); ``title_order`` the
    document numbers sorted by title; ``fields`` every metadata field by name.
    """

    def __init__(self, ids: list[str], titles: list[str], title_order: np.ndarray, fields: dict[str, Field]):
        self.ids, self.titles, self.title_order, self.fields = ids, titles, title_order, fields
        self.number_of = {doc_id: d for d, doc_id in enumerate(ids)}  # the last document of a repeated id

    @functools.cached_property
    def respelled(self) -> dict[str, list[str]]:
        """The ids not spelled composed (NFC), by their composed spelling (``core.ids.respellings``), made at the
        first lookup by id that needs it: where ``core.ids.held_id`` finds a document held under a third spelling
        of the id given."""
        return respellings(self.ids)

    @property
    def documents(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, docs: list[Mapping[str, Any]]) -> FieldIndex:
        """The field index of document records (``docs.jsonl``'s ``{"id", "title", "meta"}``)."""
        raw: dict[str, dict[str, tuple[list[Any], list[int]]]] = {}
        for d, doc in enumerate(docs):
            for key, value in (doc.get("meta") or {}).items():
                per_kind = raw.setdefault(key, {})
                for v in elements(value):
                    kind = kind_of(v)
                    if kind is None or (kind == "number" and finite_float(v) is None):
                        continue  # an object or a nested list (or NaN, or beyond a float): matches no condition
                    bucket = "true" if v is True else "false" if v is False else kind
                    values, numbers = per_kind.setdefault(bucket, ([], []))
                    values.append(v)
                    numbers.append(d)
                    at = parse_date(v) if kind == "string" else None
                    if at is not None:
                        values, numbers = per_kind.setdefault("date", ([], []))
                        values.append(at)
                        numbers.append(d)
        fields = {key: _field(per_kind) for key, per_kind in raw.items()}
        titles = [doc["title"] for doc in docs]
        order = np.asarray(sorted(range(len(titles)), key=titles.__getitem__), dtype=np.int32)
        return cls([doc["id"] for doc in docs], titles, order, fields)

    # --- the file -----------------------------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the field index to exactly ``path`` (an npz: a JSON header and the arrays, no pickles)."""
        header: dict[str, Any] = {"format": FORMAT, "documents": self.documents, "fields": []}
        arrays: dict[str, np.ndarray] = {"title_order": self.title_order}
        for i, (name, f) in enumerate(self.fields.items()):
            header["fields"].append({"name": name, "strings": f.strings})
            for part in ("true", "false", "null", "string_starts", "string_docs"):
                if getattr(f, part) is not None:
                    arrays[f"f{i}.{part}"] = getattr(f, part)
            for part in ("numbers", "dates"):
                postings = getattr(f, part)
                if postings is not None:
                    arrays[f"f{i}.{part}.values"], arrays[f"f{i}.{part}.docs"] = postings.values, postings.docs
        arrays[HEADER] = np.frombuffer(json.dumps(header, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as the allow_pickle flag
        path.write_bytes(buf.getvalue())

    @classmethod
    def load(cls, path: Path, docs: list[Mapping[str, Any]]) -> FieldIndex:
        """Read ``path`` for the document records ``docs``; ValueError when it does not fit them (the caller names
        the file)."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        header = json.loads(arrays.pop(HEADER).tobytes().decode("utf-8"))
        if header.get("format") != FORMAT:
            raise ValueError(f"field index format {header.get('format')!r} (this spanseek reads {FORMAT})")
        if header.get("documents") != len(docs):
            raise ValueError(f"{header.get('documents')} documents, the document store has {len(docs)}")
        fields = {}
        for i, spec in enumerate(header["fields"]):
            f = Field(strings=spec.get("strings"))
            for part in ("true", "false", "null", "string_starts", "string_docs"):
                setattr(f, part, arrays.get(f"f{i}.{part}"))
            for part in ("numbers", "dates"):
                if f"f{i}.{part}.values" in arrays:
                    setattr(f, part, Postings(arrays[f"f{i}.{part}.values"], arrays[f"f{i}.{part}.docs"]))
            fields[spec["name"]] = f
        return cls([d["id"] for d in docs], [d["title"] for d in docs], arrays["title_order"], fields)

    # --- filters ------------------------------------------------------------------------------------------------

    def kinds_of(self, key: str) -> list[Kind] | None:
        f = self.fields.get(key)
        return None if f is None else f.kinds

    def names(self) -> list[str]:
        return sorted(self.fields)

    def found(self, leaf: Match | AnyOf | Range) -> np.ndarray:
        f = self.fields.get(leaf.key)
        if f is None:
            return _NONE
        if isinstance(leaf, Range):
            postings = f.numbers if leaf.kind == "number" else f.dates
            return _NONE if postings is None else postings.between(leaf)
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
        self.ids = functools.reduce(Chained, (p.ids for p in then), first.ids)
        shifted = [_shifted(p, at) for p, at in zip(then[::-1], self.offsets[-2:0:-1], strict=True)]
        self.number_of = ChainMap(*shifted, first.number_of)  # type: ignore[arg-type]  # (a read-only view)

    @property
    def documents(self) -> int:
        return self.offsets[-1]

    @functools.cached_property
    def respelled(self) -> Mapping[str, Sequence[str]]:
        return functools.reduce(joined, (p.respelled for p in self.parts))

    def kinds_of(self, key: str) -> list[Kind] | None:
        held = [k for p in self.parts if (k := p.kinds_of(key)) is not None]
        if len(held) < 2:
            return held[0] if held else None
        return [k for k in typing.get_args(Kind) if any(k in h for h in held)]

    def names(self) -> list[str]:
        return sorted({n for p in self.parts for n in p.names()})

    def found(self, leaf: Match | AnyOf | Range) -> np.ndarray:
        return self._joined([p.found(leaf) for p in self.parts])

    def titled(self, prefix: str) -> np.ndarray:
        return self._joined([p.titled(prefix) for p in self.parts])

    def _joined(self, found: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([f.astype(np.int64) + at for f, at in zip(found, self.offsets[:-1], strict=True)])


def _shifted(part: FilterTree, offset: int) -> Mapping[str, int]:
    """``part``'s document numbers by id, numbered from ``offset``: made once a part and offset (a segment's run of
    documents keeps its offset in every snapshot that reads it)."""
    made = part.__dict__.get("_shifted")
    if made is None or made[0] != offset:
        made = part.__dict__["_shifted"] = (offset, {doc_id: offset + d for doc_id, d in part.number_of.items()})
    return made[1]


_KIND_OF_TYPE: dict[type, Kind] = {int: "number", float: "number", str: "string", bool: "boolean",
                                   type(None): "null"}


def _grouped(values: tuple[MetaValue, ...]) -> dict[Kind | None, list[MetaValue]]:
    """``values`` by their kind (``kind_of``), in the order given; values of one type (the usual filter) in one
    step, by their types rather than a check of each value."""
    types = set(map(type, values))
    kinds = {_KIND_OF_TYPE.get(t) for t in types}
    if len(kinds) == 1 and None not in kinds:
        return {kinds.pop(): list(values)}
    grouped: dict[Kind | None, list[MetaValue]] = {}
    for v in values:  # mixed kinds, or a subclass of a JSON type (judged as kind_of judges it)
        grouped.setdefault(kind_of(v), []).append(v)
    return grouped


def run_positions(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The positions ``starts[i]:ends[i]`` of every run, one after another: ``np.concatenate`` of the aranges
    without a Python step per run."""
    lengths = ends - starts
    before = np.cumsum(lengths) - lengths  # where each run starts in the output
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - before, lengths)


def _after(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (its last character stepped on), or
    None when every string from ``prefix`` on starts with it (an empty prefix, or one of U+10FFFF only)."""
    prefix = prefix.rstrip("\U0010ffff")
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else None


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) if " " in n else n for n in names[:20])
    return (shown + f" and {len(names) - 20} more" if len(names) > 20 else shown) or "none"


def _field(per_kind: dict[str, tuple[list[Any], list[int]]]) -> Field:
    """A ``Field`` from each kind's (values, documents) in document order."""
    f = Field()
    for bucket, (values, docs) in per_kind.items():
        if bucket == "number":
            f.numbers = Postings.of(values, docs, np.float64)
        elif bucket == "date":
            f.dates = Postings.of(values, docs, np.int64)
        elif bucket == "string":
            f.strings = sorted(set(values))
            code = {s: i for i, s in enumerate(f.strings)}
            codes = np.fromiter((code[v] for v in values), dtype=np.int64, count=len(values))
            order = np.argsort(codes, kind="stable")
            f.string_docs = np.asarray(docs, dtype=np.int32)[order]
            f.string_starts = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(f.strings)))])
        else:
            setattr(f, bucket, np.asarray(docs, dtype=np.int32))
    return f
