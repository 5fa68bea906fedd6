"""An index's table of copies: each passage's and document's key (equal for copies) and where each key is held.

    spanseek search --index INDEX_DIR --unit passage --collapse-duplicates "question"   # (core.duplicates reads it)

``CopyTable`` is what ``core.duplicates.Copies`` looks copies up in: the keys (hashes of passages' normalised texts,
and of each document's passages' keys in order), their groups (``KeyGroups``: positions found by a binary search of
the keys sorted once) and the passages in document order. A live snapshot's table is its base's, made once a base,
followed by its segment's (``CopyTable.then``), made from keys and groups its base's snapshots share
(``segment_table``), so a write keys, sorts and groups about its own document's passages only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from spanseek.core.chained import ChainedArray
from spanseek.core.segment_log import appended_rows, segment_chunks, segment_columns


class KeyGroups:
    """Where each key of an array of keys (passages' or documents') is held: ``get(key)``, its positions, ascending,
    where it is held more than once. Found by a binary search of the keys sorted once (``of``); a live snapshot's
    are its base's, sorted once a base, followed by its segment's (``then``), so a write sorts its segment's keys
    only (a table of every key held twice, made by a unique over every passage, was made again for each write)."""

    def __init__(self, parts: tuple[tuple[np.ndarray, np.ndarray], ...]):
        self.parts = parts  # (keys sorted, their positions), in the order of the positions

    @classmethod
    def of(cls, keys: np.ndarray) -> KeyGroups:
        order = np.argsort(keys, kind="stable")  # positions ascending within a key
        return cls(((keys[order], order),))

    def then(self, other: KeyGroups, offset: int) -> KeyGroups:
        """These keys followed by ``other``'s, whose positions start at ``offset``."""
        return KeyGroups(self.parts + tuple((keys, order + offset) for keys, order in other.parts))

    def get(self, key: int) -> np.ndarray | None:
        """(n,) the positions holding ``key``, ascending, where n > 1; None where it is held once (or not)."""
        held = [order[np.searchsorted(keys, key, "left"):np.searchsorted(keys, key, "right")] for keys, order in
                self.parts]
        return np.concatenate(held) if sum(len(h) for h in held) > 1 else None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int | np.integer) and self.get(int(key)) is not None


class CopyTable(NamedTuple):
    """An index's copies, whatever their units' texts: each passage's and document's ``key`` (equal for copies),
    the ``members`` of each key (``KeyGroups``) and the passages in document order with where each document's start
    (``doc_passages``). A live snapshot's (``core.duplicates.copy_table``) is its base's, made once a base, followed by its
    segment's: ``core.chained.ChainedArray`` reads both without copying either."""

    key: dict[str, Any]
    members: dict[str, KeyGroups]
    doc_passages: tuple[Any, Any]

    @classmethod
    def over(cls, passage_key: np.ndarray, passage_doc: np.ndarray, n_docs: int) -> CopyTable:
        """The table of passages keyed ``passage_key`` in documents ``passage_doc`` (numbered from 0, ``n_docs``)."""
        order, bounds = doc_runs(passage_doc, n_docs)
        doc_key = doc_keys(passage_key, order, bounds)
        return cls({"passage": passage_key, "doc": doc_key},
                   {"passage": KeyGroups.of(passage_key), "doc": KeyGroups.of(doc_key)}, (order, bounds))

    def then(self, other: CopyTable) -> CopyTable:
        """This table followed by ``other``'s passages and documents (numbered from 0 there)."""
        n = {u: len(self.key[u]) for u in self.key}
        order, bounds = self.doc_passages
        return CopyTable({u: ChainedArray(self.key[u], other.key[u]) for u in self.key},
                         {u: self.members[u].then(other.members[u], n[u]) for u in self.members},
                         (ChainedArray(order, other.doc_passages[0] + n["passage"]),
                          ChainedArray(bounds[:-1], other.doc_passages[1] + n["passage"])))


def doc_runs(passage_doc: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """The passages in document order (a stable sort of ``passage_doc``) and where each of the ``n_docs`` documents'
    start there (n_docs + 1)."""
    order = np.argsort(passage_doc, kind="stable")
    return order, np.searchsorted(np.asarray(passage_doc)[order], np.arange(n_docs + 1))


def doc_keys(passage_key: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """(D,) int64: each document's key, the hash of its passages' keys in order (equal for documents whose passages
    are copies, in order); ``order``, ``bounds``: the passages in document order and where each document's start."""
    n_docs = len(bounds) - 1
    keys = passage_key[order].tolist()
    return np.fromiter((doc_key(keys[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)),
                       dtype=np.int64, count=n_docs)


def doc_key(passage_keys: list[int]) -> int:
    """A document's key: the hash of its passages' keys, in order."""
    return hash(tuple(passage_keys))


def segment_table(base: Any, segment: Sequence[Any], keys_of: Callable[[Any], np.ndarray]) -> CopyTable:
    """The ``CopyTable`` of the documents ``segment`` written over ``base`` (numbered from 0), ``keys_of(doc)`` each
    one's passages' keys: read from what the base's snapshots share (``core.segment_log``), each document's keys
    laid in rows once and its groups sorted in runs of documents once a run, so a write makes its own document's part
    (a snapshot hashed every segment document's passage keys and sorted every segment key again: 5.9 ms at 5,000
    written documents). The segment's passages are in document order already."""
    def rows(docs: Sequence[Any], *_: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        keys = [keys_of(doc) for doc in docs]
        return {"passage": (np.concatenate([np.zeros(0, np.int64), *keys]), np.fromiter(map(len, keys), np.int64,
                                                                                      len(keys))),
                "doc": (np.fromiter((doc_key(k.tolist()) for k in keys), np.int64, len(keys)),
                        np.ones(len(keys), np.int64))}

    def groups(_: Any, docs: Sequence[Any], __: int) -> tuple[KeyGroups, KeyGroups, int]:
        made = rows(docs)
        return KeyGroups.of(made["passage"][0]), KeyGroups.of(made["doc"][0]), len(made["passage"][0])

    if not segment:
        return CopyTable.over(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
    key = appended_rows(base, "copy_keys", segment, rows)
    passage_starts = segment_columns(base, segment)["passage_starts"]
    runs = segment_chunks(base, "copy_groups", segment, groups)
    members = {"passage": KeyGroups(tuple((keys, order + int(passage_starts[c.start])) for c in runs
                                          for keys, order in c.part[0].parts)),
               "doc": KeyGroups(tuple((keys, order + c.start) for c in runs for keys, order in c.part[1].parts))}
    return CopyTable(key, members, (np.arange(len(key["passage"])), passage_starts))
