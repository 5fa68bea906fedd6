"""A search filter: which documents a search may return, and its JSON form (the HTTP ``filter``, ``--filter``).

A filter is a tree, in the manner of Qdrant's filter language. A ``SearchFilter`` holds the older conditions
(``doc_ids``, ``title_prefix``, ``meta`` equality) and three lists of conditions: ``must`` (all hold), ``should``
(at least one holds) and ``must_not`` (none holds); every part given must hold. A condition is one of

- ``Match(key, value)``  ``{"key": "lang", "match": "en"}``: the metadata field equals the value;
- ``AnyOf(key, values)``  ``{"key": "tags", "any": ["a", "b"]}``: it equals one of the values;
- ``Range(key, gt=, gte=, lt=, lte=)``  ``{"key": "year", "range": {"gte": 2000, "lt": 2010}}``: it lies in the
  range; bounds are numbers, or ISO-8601 dates / datetimes (``"2024-05-01"``, ``"2024-05-01T12:00:00Z"``);
- ``Not(condition)``  ``{"not": {...}}``: the condition does not hold;
- a nested ``SearchFilter`` (an object with the filter's own keys).

Metadata values are JSON scalars compared as JSON: a number equals the same number (``2024 == 2024.0``; numbers
compare as float64, so integers beyond 2**53 that round to the same float are equal), a boolean
only a boolean (``true`` is not ``1``), a missing key nothing (not even ``null``). A field holding a list matches
when one of its elements does (``tags: ["a", "b"]`` matches ``{"key": "tags", "match": "a"}``). Dates compare as
instants: a date is its midnight, a datetime without a zone is UTC. ``matches`` is the per-document definition;
searches evaluate filters over the index's field index instead (``core.fieldindex``).

This module needs only the standard library (the HTTP client imports it). Filters are frozen and hashable (lists
and mappings are kept as tuples), so requests with equal filters share a search and a cached selection.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Union

from spanseek.core.ids import id_spellings

MetaValue = str | int | float | bool | None
META_TYPES = (str, int, float, bool, type(None))
MAX_FILTER_CONDITIONS = 1024  # conditions (and nested filters) in one filter
MAX_FILTER_DEPTH = 16  # nesting of filters and ``not``
BOUNDS = ("gt", "gte", "lt", "lte")
_UNCHECKED = frozenset({str, bool, type(None)})  # value types that always fit (a number may be out of a float's range)
Kind = Literal["number", "string", "boolean", "null", "date"]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
T = TypeVar("T")
_ROOT = "filter"  # the place of a whole filter in the errors of its JSON form (``filter.must[2]``)


class SearchParamsError(ValueError):
    """A search parameter is out of its valid range (the service answers 400)."""


class FilterError(SearchParamsError):
    """A filter is malformed, or does not fit the index's fields (an unknown field, a range over strings); ``field``
    names the metadata field when there is one."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def parse_date(value: str) -> int | None:
    """Microseconds since 1970-01-01 UTC of an ISO-8601 date or datetime string (a date is its midnight, a datetime
    without a zone is UTC), or None when ``value`` is not one."""
    if not _DATE.fullmatch(value):
        return None
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:  # 2024-02-30, 25:00, ...
        return None
    t = t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
    return (t - _EPOCH) // dt.timedelta(microseconds=1)


def kind_of(value: Any) -> Kind | None:
    """The kind of a JSON scalar (``number`` for ints and floats, not booleans); None for anything else."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else None


def elements(value: Any) -> list[Any]:
    """The scalars a metadata value offers to a condition: the value, or a list's elements."""
    return value if isinstance(value, list) else [value]


def same(a: Any, b: Any) -> bool:
    """JSON equality of scalars: numbers compare by value as floats (``finite_float``: 2**53 + 1 equals 2**53, as
    the field index compares them), but a boolean equals only a boolean."""
    if kind_of(a) == "number" and kind_of(b) == "number":
        x = finite_float(a)
        return x is not None and x == finite_float(b)
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _tagged(value: MetaValue) -> tuple[bool, MetaValue]:
    """A value as cache and batch keys compare it: ``true`` and ``1`` hash alike in Python, but are different."""
    return isinstance(value, bool), value


def finite_float(value: float) -> float | None:
    """A JSON number as the float it is compared as, or None when it has no finite one (NaN, an infinity, or an
    integer beyond a float's range, about ±1.8e308): such a value matches no condition and bounds none."""
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def unfit_number(value: Any) -> bool:
    """Whether ``value`` is a number (not a boolean) that has no finite float (``finite_float``)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and finite_float(value) is None


def value_text(value: Any) -> str:
    """A value as an error shows it: its repr, but an integer too long to read at a glance by its count of digits."""
    if isinstance(value, int) and abs(value) > 10**40:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"  # str() may refuse it
    return repr(value)


def _scalar(where: str, value: Any, key: str | None = None) -> MetaValue:
    if not isinstance(value, META_TYPES) or unfit_number(value):
        raise FilterError(f"{where}: a value must be a string, number (finite, within about ±1.8e308), boolean or "
                          f"null, got {value_text(value)}", key)
    return value


def _all_fit(values: tuple[Any, ...]) -> bool:
    """Whether every value is one a condition takes (``_scalar``), judged by their types and, for numbers, one
    finiteness check in C: checking each value in Python cost tens of ms for 60,000. False when one is not (or is
    of a subclass): ``_scalar`` then judges each, and names it."""
    kinds = set(map(type, values))
    if not kinds - _UNCHECKED:
        return True
    if not kinds - _UNCHECKED <= {int, float}:
        return False
    numbers = values if kinds <= {int, float, bool} else [v for v in values if type(v) in (int, float)]
    try:
        return all(map(math.isfinite, numbers))
    except OverflowError:  # an integer beyond a float's range
        return False


def _key_name(where: str, key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise FilterError(f"{where}: the key must be a non-empty string, got {key!r}")
    return key


class _Keyed:
    """Equality and hashing by ``_key()`` (the fields, values tagged so that ``true`` is not ``1``).

    Filters are frozen, so the key and the hash are made once per filter and kept: a request's filter is hashed
    and compared once per question of a batch (grouping, the selection cache), and a filter of 100,000 values made
    its key again each time, seconds of the worker that every other request's batch waited for."""

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _made_key(self) -> tuple[Any, ...]:
        made = self.__dict__.get("_made_key_")
        if made is None:
            made = self._key()
            object.__setattr__(self, "_made_key_", made)  # frozen dataclass: set past its __setattr__
        return made

    def __getstate__(self) -> dict[str, Any]:
        # pickled without the kept key and hash: a string's hash differs between processes (PYTHONHASHSEED), so a
        # filter unpickled in another (a worker process, a cache on disk) kept a hash its equals there do not have,
        # and missed them in every dict and set
        return {k: v for k, v in self.__dict__.items() if k not in ("_made_key_", "_hash_")}

    def __eq__(self, other: object) -> bool:
        return other is self or (type(other) is type(self)
                                 and self._made_key() == other._made_key())  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        made = self.__dict__.get("_hash_")
        if made is None:
            made = hash((type(self).__name__, self._made_key()))
            object.__setattr__(self, "_hash_", made)
        return made


@dataclass(frozen=True, eq=False)
class Match(_Keyed):
    """The metadata field ``key`` equals ``value`` (or, for a list, one of its elements does)."""

    key: str
    value: MetaValue

    def __post_init__(self) -> None:
        _key_name("match", self.key)
        _scalar(f"match on {self.key!r}", self.value, self.key)

    def _key(self) -> tuple[Any, ...]:
        return self.key, _tagged(self.value)

    def matches(self, doc_id: str, title: str, meta: Mapping[str, Any], passage_meta: Mapping[str, Any] | None = None
                ) -> bool:
        return self.key in meta and any(same(v, self.value) for v in elements(meta[self.key]))

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "match": self.value}


@dataclass(frozen=True, eq=False)
class AnyOf(_Keyed):
    """The metadata field ``key`` equals one of ``values`` (a list is kept as a tuple)."""

    key: str
    values: tuple[MetaValue, ...]

    def __post_init__(self) -> None:
        _key_name("any", self.key)
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Iterable):
            raise FilterError(f"any on {self.key!r}: give a list of values, got {self.values!r}", self.key)
        values = tuple(self.values)
        if not _all_fit(values):  # then the first that is not says so
            for v in values:
                _scalar(f"any on {self.key!r}", v, self.key)
        if not values:
            raise FilterError(f"any on {self.key!r}: the list of values is empty", self.key)
        object.__setattr__(self, "values", values)

    def _key(self) -> tuple[Any, ...]:
        # the same set of values in any order; booleans apart, as true is not 1
        if bool not in set(map(type, self.values)):
            return self.key, frozenset(self.values), frozenset()
        return (self.key, frozenset(v for v in self.values if not isinstance(v, bool)),
                frozenset(v for v in self.values if isinstance(v, bool)))

    def matches(self, doc_id: str, title: str, meta: Mapping[str, Any], passage_meta: Mapping[str, Any] | None = None
                ) -> bool:
        return self.key in meta and any(same(v, w) for v in elements(meta[self.key]) for w in self.values)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "any": list(self.values)}


@dataclass(frozen=True, eq=False)
class Range(_Keyed):
    """The metadata field ``key`` (or one of a list's elements) lies in the range: every bound given holds.

    Bounds are all numbers, or all ISO-8601 date / datetime strings (``kind`` says which); ``bounds`` holds them
    as compared: floats, or microseconds since 1970 UTC (``parse_date``)."""

    key: str
    gt: float | str | None = None
    gte: float | str | None = None
    lt: float | str | None = None
    lte: float | str | None = None

    def __post_init__(self) -> None:
        _key_name("range", self.key)
        given = {b: getattr(self, b) for b in BOUNDS if getattr(self, b) is not None}
        where = f"range on {self.key!r}"
        if not given:
            raise FilterError(f"{where}: give at least one of gt, gte, lt, lte", self.key)
        kinds = {kind_of(v) for v in given.values()}
        if kinds == {"number"}:
            bounds = {b: finite_float(v) for b, v in given.items()}
            wrong = [f"{b} {value_text(v)}" for b, v in given.items() if bounds[b] is None]
            if wrong:
                raise FilterError(f"{where}: bounds must be finite numbers within about ±1.8e308 (a float's range), "
                                  f"got {', '.join(wrong)}", self.key)
        elif kinds == {"string"}:
            bounds = {}
            for b, v in given.items():
                at = parse_date(v)
                if at is None:
                    raise FilterError(f"{where}: {b} {v!r} is not an ISO-8601 date or datetime (e.g. 2024-05-01 or "
                                      "2024-05-01T12:00:00Z)", self.key)
                bounds[b] = at
        else:
            raise FilterError(f"{where}: bounds must be all numbers or all ISO-8601 date strings, got "
                              f"{', '.join(f'{b}={v!r}' for b, v in given.items())}", self.key)
        object.__setattr__(self, "bounds", tuple(bounds.get(b) for b in BOUNDS))

    # the bounds as compared (gt, gte, lt, lte; None where not given), set from those given
    bounds: tuple[float | int | None, ...] = field(default=(), init=False, repr=False)

    @property
    def kind(self) -> Kind:
        """``number`` or ``date``: what the bounds are, and which of the field's values they compare with."""
        return "date" if any(isinstance(getattr(self, b), str) for b in BOUNDS) else "number"

    def _key(self) -> tuple[Any, ...]:
        return self.key, self.kind, self.bounds

    def holds(self, x: float | int) -> bool:
        """Whether a number (or a date, as microseconds) lies in the range."""
        gt, gte, lt, lte = self.bounds
        return ((gt is None or x > gt) and (gte is None or x >= gte) and (lt is None or x < lt)
                and (lte is None or x <= lte))

    def matches(self, doc_id: str, title: str, meta: Mapping[str, Any], passage_meta: Mapping[str, Any] | None = None
                ) -> bool:
        if self.key not in meta:
            return False
        for v in elements(meta[self.key]):
            x = (finite_float(v) if kind_of(v) == "number" else None) if self.kind == "number" else (
                parse_date(v) if isinstance(v, str) else None)
            if x is not None and self.holds(x):
                return True
        return False

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "range": {b: getattr(self, b) for b in BOUNDS if getattr(self, b) is not None}}


@dataclass(frozen=True, eq=False)
class Not(_Keyed):
    """The condition does not hold."""

    condition: Condition

    def __post_init__(self) -> None:
        if not isinstance(self.condition, CONDITION_TYPES):
            raise FilterError(f"not: expected a condition, got {self.condition!r}")

    def _key(self) -> tuple[Any, ...]:
        return (self.condition,)

    def matches(self, doc_id: str, title: str, meta: Mapping[str, Any], passage_meta: Mapping[str, Any] | None = None
                ) -> bool:
        return not self.condition.matches(doc_id, title, meta, passage_meta)

    def to_json(self) -> dict[str, Any]:
        return {"not": self.condition.to_json()}


@dataclass(frozen=True, eq=False)
class Passage(_Keyed):
    """The condition holds for the passage's own metadata (``passage_meta``: a PDF page's ``page``, a section),
    not its document's: ``{"passage": {"key": "page", "range": {"gte": 10, "lte": 20}}}``. A filter that holds one
    selects passages rather than whole documents (a document's other passages are not returned, and a document
    scores by its passages that pass). Inside, keys name passage metadata; ``doc_ids``, ``title_prefix`` and another
    ``passage`` have no meaning there and are refused."""

    condition: Condition

    def __post_init__(self) -> None:
        if not isinstance(self.condition, CONDITION_TYPES):
            raise FilterError(f"passage: expected a condition, got {self.condition!r}")
        problem = passage_scope_problem(self.condition)
        if problem is not None:
            raise FilterError(problem)

    def _key(self) -> tuple[Any, ...]:
        return (self.condition,)

    def matches(self, doc_id: str, title: str, meta: Mapping[str, Any], passage_meta: Mapping[str, Any] | None = None
                ) -> bool:
        return self.condition.matches(doc_id, title, passage_meta or {})

    def to_json(self) -> dict[str, Any]:
        return {"passage": self.condition.to_json()}


def passage_scope_problem(c: Any, where: str = "passage") -> str | None:
    """Why a condition, in its core or its JSON form, cannot be a ``passage`` condition's (a document's ids or title,
    which a passage's own metadata does not hold, or a ``passage`` condition inside another), naming its place from
    ``where``; None when it can. The JSON form is checked by the service's schema (422), the core form when it is
    made."""
    def part(name: str) -> Any:
        return c.get(name) if isinstance(c, Mapping) else getattr(c, name, None)

    if isinstance(c, Passage) or (isinstance(c, Mapping) and "passage" in c and "key" not in c):
        return f"{where}: a passage condition inside another; its keys already name passage metadata"
    if isinstance(c, Not) or (isinstance(c, Mapping) and "not" in c and "key" not in c):
        return passage_scope_problem(part("not") if isinstance(c, Mapping) else c.condition, f"{where}.not")
    if not isinstance(c, SearchFilter | Mapping) or (isinstance(c, Mapping) and "key" in c):
        return None
    for name in ("doc_ids", "title_prefix"):
        if part(name) is not None:
            return (f"{where}: {name} is a condition on documents, not on a passage's own metadata; give it outside "
                    "the passage condition")
    for name in ("must", "should", "must_not"):
        for i, inner in enumerate(part(name) if isinstance(part(name), list | tuple) else ()):
            problem = passage_scope_problem(inner, f"{where}.{name}[{i}]")
            if problem is not None:
                return problem
    return None


@dataclass(frozen=True, eq=False)
class SearchFilter(_Keyed):
    """Which documents a search may return: every part given holds (an absent one holds for every document).

    doc_ids: the document is one of these ids, in any of its spellings (``core.ids.id_spellings``: "café" composed
        or decomposed names one document, as in every lookup of an id); a list is accepted and kept as a tuple, each
        id once, in the order given; filters with the same ids in any order are equal.
    title_prefix: the document's title starts with this text (case-sensitive).
    meta: for every key, the document's metadata has the key with an equal value (a mapping is accepted and kept
        as sorted ``(key, value)`` pairs); values are JSON scalars, and ``true`` is not ``1``.
    must / should / must_not: conditions (``Match``, ``AnyOf``, ``Range``, ``Not`` or a nested ``SearchFilter``)
        of which all / at least one / none hold (lists are kept as tuples).
    """

    doc_ids: tuple[str, ...] | None = None
    title_prefix: str | None = None
    meta: tuple[tuple[str, MetaValue], ...] | None = None
    must: tuple[Condition, ...] | None = None
    should: tuple[Condition, ...] | None = None
    must_not: tuple[Condition, ...] | None = None

    def __post_init__(self) -> None:
        if self.doc_ids is not None:
            ids = self.doc_ids
            if isinstance(ids, str) or not isinstance(ids, Iterable):
                raise FilterError(f"filter doc_ids must be a list of strings, got {ids!r}")
            ids = tuple(ids)
            wrong = next(((n, i) for n, i in enumerate(ids) if not isinstance(i, str)), None) if set(
                map(type, ids)) - {str} else None  # (the types first: a check per id cost ms for 60,000 ids)
            if wrong is not None:
                raise FilterError(f"filter doc_ids must be a list of strings, got {value_text(wrong[1])} at position "
                                  f"{wrong[0]}")
            # each id once, in the order given: equality and hashing go by the set (``_key``); sorting 60,000 ids,
            # as they were kept, took tens of ms of every request with such a filter
            if len(set(ids)) != len(ids):
                ids = tuple(dict.fromkeys(ids))
            if not ids:
                raise FilterError("filter doc_ids is empty; give at least one document id or leave it out")
            object.__setattr__(self, "doc_ids", ids)
        if self.title_prefix is not None and not isinstance(self.title_prefix, str):
            raise FilterError(f"filter title_prefix must be a string, got {self.title_prefix!r}")
        if self.meta is not None:
            pairs = list(self.meta.items()) if isinstance(self.meta, Mapping) else list(self.meta)
            for pair in pairs:
                if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise FilterError(f"filter meta must map keys to values, got {pair!r}")
                _scalar(f"filter meta {pair[0]!r}", pair[1], pair[0])
            if len({k for k, _ in pairs}) != len(pairs):
                raise FilterError("filter meta names a key twice")
            object.__setattr__(self, "meta", tuple(sorted(pairs, key=lambda kv: kv[0])))
        for part in ("must", "should", "must_not"):
            conditions = getattr(self, part)
            if conditions is None:
                continue
            if isinstance(conditions, str | Mapping) or not isinstance(conditions, Iterable):
                raise FilterError(f"filter {part} must be a list of conditions, got {conditions!r}")
            conditions = tuple(conditions)
            if not conditions:
                raise FilterError(f"filter {part} is empty; give at least one condition or leave it out")
            for c in conditions:
                if not isinstance(c, CONDITION_TYPES):
                    raise FilterError(f"filter {part}: expected conditions (Match, AnyOf, Range, Not, Passage, SearchFilter), "
                                      f"got {c!r}")
            object.__setattr__(self, part, conditions)
        problem = size_problem(self)  # (nested filters are made inside out: the first one too deep says so)
        if problem is not None:
            raise FilterError(problem)

    @property
    def passes_everything(self) -> bool:
        """Whether every document passes, whatever the index holds: no part constrains anything. A part constrains
        nothing when it is absent, or an empty ``meta`` or ``title_prefix``, a ``must`` of conditions that each pass
        everything, a ``should`` of which one does, or a ``must_not`` of conditions that each pass nothing (a nested
        filter that passes everything, or ``not`` of one that passes nothing). Field conditions always constrain
        (a missing key matches none). A ``must_not`` of a filter that passes everything passes nothing, which is not
        this."""
        return _passes_all(self)

    @functools.cached_property
    def spelled_ids(self) -> frozenset[str]:
        """``doc_ids`` in each of their spellings (``core.ids.id_spellings``), what a document's id is looked up in;
        empty without ``doc_ids``."""
        ids = self.doc_ids or ()
        return frozenset(i for i in ids if i.isascii()).union(  # (an ASCII id has one spelling: most ids, quickly)
            s for i in ids if not i.isascii() for s in id_spellings(i))

    def _key(self) -> tuple[Any, ...]:
        meta = None if self.meta is None else tuple((k, _tagged(v)) for k, v in self.meta)
        ids = None if self.doc_ids is None else frozenset(self.doc_ids)
        return ids, self.title_prefix, meta, self.must, self.should, self.must_not

    def matches(self, doc_id: str, title: str, meta: Mapping[str, Any], passage_meta: Mapping[str, Any] | None = None
                ) -> bool:
        """Whether a document (its id, title and metadata) passes the filter, or with ``passage_meta`` one of its
        passages (``passage`` conditions read the passage's own metadata, None: none): the definition, one at a
        time (a search evaluates the filter over the index's field index, ``core.fieldindex``)."""
        if self.doc_ids is not None and doc_id not in self.spelled_ids:
            return False
        if self.title_prefix is not None and not title.startswith(self.title_prefix):
            return False
        if not all(Match(key, value).matches(doc_id, title, meta) for key, value in self.meta or ()):
            return False
        args = (doc_id, title, meta, passage_meta)
        return (all(c.matches(*args) for c in self.must or ()) and
                (self.should is None or any(c.matches(*args) for c in self.should)) and
                not any(c.matches(*args) for c in self.must_not or ()))

    def leaves(self) -> Iterator[Match | AnyOf | Range]:
        """Every field condition of the tree (``meta`` pairs as ``Match``), for checks against the index's fields."""
        return (leaf for _, leaf, _ in self.placed_leaves())

    def placed_leaves(self, where: str = _ROOT, in_passage: bool = False
                      ) -> Iterator[tuple[str, Match | AnyOf | Range, bool]]:
        """``leaves`` with each one's place in the filter's JSON form (``filter.must[1].not``; a ``meta`` pair, whose
        key names it in its filter, the filter's place), and whether it reads a passage's own metadata (it lies in a
        ``passage`` condition)."""
        for key, value in self.meta or ():
            yield where, Match(key, value), in_passage
        for part in ("must", "should", "must_not"):
            for i, c in enumerate(getattr(self, part) or ()):
                yield from _placed(c, f"{where}.{part}[{i}]", in_passage)

    @functools.cached_property
    def reads_passages(self) -> bool:
        """Whether a condition of the tree reads a passage's own metadata (``Passage``): the filter then selects
        passages, not whole documents."""
        return holds_passage(self)

    def to_json(self) -> dict[str, Any]:
        """The filter's JSON form (what ``from_json`` reads; the HTTP ``filter`` field)."""
        out: dict[str, Any] = {}
        if self.doc_ids is not None:
            out["doc_ids"] = list(self.doc_ids)
        if self.title_prefix is not None:
            out["title_prefix"] = self.title_prefix
        if self.meta is not None:
            out["meta"] = dict(self.meta)
        for part in ("must", "should", "must_not"):
            if getattr(self, part) is not None:
                out[part] = [c.to_json() for c in getattr(self, part)]
        return out

    @classmethod
    def from_json(cls, obj: Any) -> SearchFilter:
        """A filter from its JSON form; FilterError naming what is wrong (an unknown key, a condition of no form)."""
        return _filter_from_json(obj, _ROOT)


Condition = Union[Match, AnyOf, Range, Not, Passage, SearchFilter]  # noqa: UP007  (a runtime alias of classes above)
CONDITION_TYPES = (Match, AnyOf, Range, Not, Passage, SearchFilter)


def _placed(c: Condition, place: str, in_passage: bool) -> Iterator[tuple[str, Match | AnyOf | Range, bool]]:
    """The field conditions of ``c`` at ``place`` (``SearchFilter.placed_leaves``)."""
    while isinstance(c, Not | Passage):
        in_passage = in_passage or isinstance(c, Passage)
        c, place = c.condition, f"{place}.{'not' if isinstance(c, Not) else 'passage'}"
    if isinstance(c, SearchFilter):
        yield from c.placed_leaves(place, in_passage)
    else:
        yield place, c, in_passage


def holds_passage(c: Condition) -> bool:
    """Whether ``c`` holds a ``Passage`` condition (one of no field conditions too: ``{"passage": {}}``)."""
    if isinstance(c, Passage):
        return True
    if isinstance(c, Not):
        return holds_passage(c.condition)
    return isinstance(c, SearchFilter) and any(holds_passage(x) for part in ("must", "should", "must_not")
                                               for x in getattr(c, part) or ())
FILTER_KEYS = ("doc_ids", "title_prefix", "meta", "must", "should", "must_not")


def _passes_all(c: Condition) -> bool:
    """Whether every document passes ``c``, by its structure alone (``SearchFilter.passes_everything``)."""
    if isinstance(c, Passage):
        return _passes_all(c.condition)
    if isinstance(c, Not):
        return _passes_none(c.condition)
    if not isinstance(c, SearchFilter):
        return False  # a field condition: a document without the key fails it
    return (c.doc_ids is None and not c.title_prefix and not c.meta
            and all(_passes_all(x) for x in c.must or ())
            and (c.should is None or any(_passes_all(x) for x in c.should))
            and all(_passes_none(x) for x in c.must_not or ()))


def _passes_none(c: Condition) -> bool:
    """Whether no document passes ``c``, by its structure alone (a ``must_not`` of it then constrains nothing)."""
    if isinstance(c, Passage):
        return _passes_none(c.condition)
    if isinstance(c, Not):
        return _passes_all(c.condition)
    if not isinstance(c, SearchFilter):
        return False
    return (any(_passes_none(x) for x in c.must or ())
            or (c.should is not None and all(_passes_none(x) for x in c.should))
            or any(_passes_all(x) for x in c.must_not or ()))


def _inner(c: Any) -> tuple[Any, ...] | None:
    """The conditions directly inside ``c``, a condition in its core or its JSON form; None for a field condition
    (``Match``, ``AnyOf``, ``Range``, an object with ``key``, or anything else, which holds none)."""
    if isinstance(c, Not | Passage):
        return (c.condition,)
    if isinstance(c, SearchFilter):
        return (*(c.must or ()), *(c.should or ()), *(c.must_not or ()))
    if not isinstance(c, Mapping) or "key" in c:
        return None
    if "not" in c or "passage" in c:
        return (c.get("not", c.get("passage")),)
    return tuple(x for part in FILTER_KEYS[3:] if isinstance(c.get(part), list) for x in c[part])


def _shape(c: Any, levels: int = MAX_FILTER_DEPTH + 1) -> tuple[int, int]:
    """(conditions, depth) of a condition tree, in its core or its JSON form: every filter, ``not``, ``passage`` and
    field condition counts one; a filter, ``not`` or ``passage`` adds a level. Only ``levels`` levels are walked: a deeper tree has its
    depth counted as more than that, and the conditions below uncounted (it is refused for its depth)."""
    inner = _inner(c)
    if inner is None:
        return 1, 0
    if levels == 0:
        return 1, 1
    parts = [_shape(x, levels - 1) for x in inner]
    return 1 + sum(s for s, _ in parts), 1 + max((d for _, d in parts), default=0)


def size_problem(c: Any) -> str | None:
    """Why a filter, in its core or its JSON form, is larger than a filter may be (nested more than
    ``MAX_FILTER_DEPTH`` levels of filters, ``not`` and ``passage``, or more than ``MAX_FILTER_CONDITIONS`` conditions in all,
    nested ones included), or None. The JSON form is checked before its parts are read (the service's schema)."""
    size, depth = _shape(c)
    if depth > MAX_FILTER_DEPTH:
        return f"filter nested too deeply: more than {MAX_FILTER_DEPTH} levels of filters, not and passage"
    if size > MAX_FILTER_CONDITIONS:
        return (f"filter too large: {size} conditions (at most {MAX_FILTER_CONDITIONS} in all; every filter, not, "
                "passage and field condition counts, nested ones included)")
    return None


def _filter_from_json(obj: Any, where: str) -> SearchFilter:
    if not isinstance(obj, Mapping):
        raise FilterError(f"{where}: expected a JSON object, got {obj!r}")
    unknown = sorted(set(obj) - set(FILTER_KEYS))
    if unknown:
        raise FilterError(f"{where}: unknown key {unknown[0]!r} (a filter has {', '.join(FILTER_KEYS)}; a condition "
                          "has key with match, any or range, or not, or passage)")
    parts: dict[str, Any] = {k: obj[k] for k in FILTER_KEYS[:3] if obj.get(k) is not None}
    if isinstance(parts.get("meta"), Mapping):
        parts["meta"] = tuple(parts["meta"].items())
    for part in FILTER_KEYS[3:]:
        if obj.get(part) is not None:
            if not isinstance(obj[part], list):
                raise FilterError(f"{where}.{part}: expected a list of conditions, got {obj[part]!r}")
            parts[part] = tuple(condition_from_json(c, f"{where}.{part}[{i}]") for i, c in enumerate(obj[part]))
    return at_place(where, SearchFilter, **parts)


def condition_from_json(obj: Any, where: str = "condition") -> Condition:
    """One condition from its JSON form (``where`` names its place in errors)."""
    if not isinstance(obj, Mapping):
        raise FilterError(f"{where}: expected a JSON object, got {obj!r}")
    if "not" in obj:
        if len(obj) != 1:
            raise FilterError(f"{where}: a not condition has no other keys, got {sorted(obj)}")
        return Not(condition_from_json(obj["not"], f"{where}.not"))
    if "passage" in obj:
        if len(obj) != 1:
            raise FilterError(f"{where}: a passage condition has no other keys, got {sorted(obj)}")
        return at_place(where, Passage, condition_from_json(obj["passage"], f"{where}.passage"))
    if "key" not in obj:
        return _filter_from_json(obj, where)
    forms = [f for f in ("match", "any", "range") if f in obj]
    extra = sorted(set(obj) - {"key", "match", "any", "range"})
    if len(forms) != 1 or extra:
        raise FilterError(f"{where}: a field condition has key and exactly one of match, any or range, got "
                          f"{sorted(obj)}", obj.get("key") if isinstance(obj.get("key"), str) else None)
    key, value = obj["key"], obj[forms[0]]
    if forms[0] == "match":
        return at_place(where, Match, key, value)
    if forms[0] == "any":
        if not isinstance(value, list):
            raise FilterError(f"{where}.any: expected a list of values, got {value!r}", key)
        return at_place(where, AnyOf, key, tuple(value))
    if not isinstance(value, Mapping) or set(value) - set(BOUNDS):
        raise FilterError(f"{where}.range: expected an object of gt, gte, lt, lte, got {value!r}", key)
    return at_place(where, Range, key, **value)


def at_place(where: str, make: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``make(*args, **kwargs)``, for the condition or filter at ``where`` in a filter's JSON form (``filter.must[2]``:
    making it, or checking it against an index's fields), whose FilterError (a date that does not parse, a field no
    document has) names that place, so that one of several conditions on the same field is found (the whole filter's
    errors name it already: ``filter meta 'lang': ...``)."""
    try:
        return make(*args, **kwargs)
    except FilterError as e:
        if where == _ROOT:
            raise
        raise FilterError(f"{where}: {e}", e.field) from None
