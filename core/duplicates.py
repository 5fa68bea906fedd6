"""Copies of one text in an index, and the ranking stage that collapses them (``collapse_duplicates``).

    spanseek search --index INDEX_DIR --unit passage --collapse-duplicates "question"

Corpora repeat paragraphs (a site's boilerplate on every page, a document filed twice, one notice in every manual).
Two passages are copies when their texts are equal once normalised (``normalise_passage``: runs of whitespace are
one space, leading and trailing whitespace dropped, letters lower case); two documents are copies when their passages
are copies, in order. ``Copies`` is the index's table of them: each passage's text is normalised and hashed once, the
first time a search collapses (``passage_keys``, kept per index; a live index hashes only its segment's passages),
never per hit. ``collapse`` keeps the best-ranked hit of each group of copies and says how many copies it stands for.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import numpy as np

from spanseek.core.params import Hit, Unit
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.selection import Selection

MAX_COPY_IDS = 10  # documents a collapsed hit names (copy_doc_ids): a boilerplate paragraph can be in thousands

_KEYS: weakref.WeakKeyDictionary[PhraseIndex, np.ndarray] = weakref.WeakKeyDictionary()
_KEYS_LOCK = threading.Lock()


def normalise_passage(text: str) -> str:
    """A passage's text as copies are compared: whitespace runs as one space, no leading or trailing whitespace,
    lower case (``str.lower``)."""
    return " ".join(text.split()).lower()


def hash_passages(passages: Sequence[dict]) -> np.ndarray:
    """(P,) int64: the hash of each passage's normalised text."""
    return np.fromiter((hash(normalise_passage(p["text"])) for p in passages), dtype=np.int64, count=len(passages))


def passage_keys(index: PhraseIndex) -> np.ndarray:
    """(P,) int64: the hash of each of the index's passages' normalised text, computed once per index (a live
    index, whose passages are its base's followed by its segment's, reuses its base's and hashes the segment's)."""
    with _KEYS_LOCK:
        keys = _KEYS.get(index)
    if keys is None:
        base = getattr(index, "base", None)  # core.segment.LiveIndex
        if isinstance(base, PhraseIndex) and base is not index:
            head = passage_keys(base)
            keys = np.concatenate([head, hash_passages(index.passages[len(head):])])
        else:
            keys = hash_passages(index.passages)
        with _KEYS_LOCK:
            _KEYS[index] = keys
    return keys


class Copies:
    """An index's copies, per unit: each passage's (and document's) key, equal for copies, and the passages (and
    documents) of every key held more than once. ``Copies.of(index)``; held by the searcher's ``HitBuilder``."""

    def __init__(self, index: PhraseIndex, passage_key: np.ndarray, passage_doc: np.ndarray):
        self.index = index
        self.passage_doc = passage_doc
        self.key = {"passage": passage_key, "doc": doc_keys(passage_key, passage_doc, len(index.docs))}
        self.members = {unit: repeated(keys) for unit, keys in self.key.items()}

    @classmethod
    def of(cls, index: PhraseIndex, passage_doc: np.ndarray) -> Copies:
        """The copies of ``index``; ``passage_doc``: (P,) each passage's document."""
        return cls(index, passage_keys(index), passage_doc)

    def hit_key(self, hit: Hit, unit: Unit) -> object:
        """What two hits of ``unit`` share when one is a copy of the other: a passage's or document's key; for a
        phrase, its passage's key and where it is in the passage's text without its whitespace (so the same phrase
        of a copy whose spacing differs has the same key)."""
        p = hit.passage_id
        if unit == "doc":
            return int(self.key["doc"][self.passage_doc[p]])
        key = int(self.key["passage"][p])
        if unit == "passage":
            return key
        if key not in self.members["passage"]:  # no copy: its own offsets (the passage is its key's only one)
            return key, hit.start, hit.end
        return key, non_space_before(hit.passage, hit.start), non_space_before(hit.passage, hit.end)

    def copies_of(self, hit: Hit, unit: Unit, selection: Selection) -> tuple[int, list[str]]:
        """How many copies of ``hit``'s passage (or document) the search may return (``selection``), the hit's own
        included, and the ids of the other copies' documents (distinct, in index order, at most ``MAX_COPY_IDS``)."""
        of = "doc" if unit == "doc" else "passage"
        own = int(self.passage_doc[hit.passage_id]) if of == "doc" else hit.passage_id
        members = self.members[of].get(int(self.key[of][own]))
        if members is None:
            return 1, []
        allowed = selection.passages if of == "passage" else selection.docs
        if allowed is not None:  # passages (documents) of deleted or filtered-out documents are no copies
            members = members[allowed[members]]
        docs = members if of == "doc" else self.passage_doc[members[members != own]]
        ids: list[str] = []
        for d in dict.fromkeys(docs.tolist()):  # distinct, in order
            if of == "doc" and d == own:
                continue
            if len(ids) == MAX_COPY_IDS:
                break
            ids.append(self.index.docs[d]["id"])
        return max(len(members), 1), ids


def doc_keys(passage_key: np.ndarray, passage_doc: np.ndarray, n_docs: int) -> np.ndarray:
    """(D,) int64: each document's key, the hash of its passages' keys in order (equal for documents whose passages
    are copies, in order)."""
    order = np.argsort(passage_doc, kind="stable")
    bounds = np.searchsorted(passage_doc[order], np.arange(n_docs + 1))
    keys = passage_key[order].tolist()
    return np.fromiter((hash(tuple(keys[a:b])) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)),
                       dtype=np.int64, count=n_docs)


def repeated(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Each key held more than once -> its positions in ``keys``, ascending."""
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    many = np.flatnonzero(counts[inverse] > 1)
    if not len(many):
        return {}
    many = many[np.argsort(inverse[many], kind="stable")]  # grouped by key, ascending within a key
    cuts = np.flatnonzero(np.diff(inverse[many])) + 1
    return {int(keys[g[0]]): g for g in np.split(many, cuts)}


def non_space_before(text: str, at: int) -> int:
    """Characters of ``text[:at]`` that are not whitespace."""
    prefix = text[:at]
    return len(prefix) - sum(1 for c in prefix if c.isspace())


def collapse(hits: Sequence[Hit], k: int, unit: Unit, copies: Copies, selection: Selection) -> list[Hit]:
    """The first ``k`` hits (best first) that are no copy of a hit before them (``Copies.hit_key``), each with
    ``copies`` and ``copy_doc_ids`` set (``Copies.copies_of``)."""
    kept: list[Hit] = []
    seen: set[object] = set()
    for h in hits:
        if len(kept) == k:
            break
        key = copies.hit_key(h, unit)
        if key in seen:
            continue
        seen.add(key)
        n, ids = copies.copies_of(h, unit, selection)
        kept.append(h.but(copies=n, copy_doc_ids=ids))
    return kept
