"""Which passages a search may return: the index's deleted documents removed, a request's filter applied.

A ``Selection`` is made once per distinct filter (``Selections`` keeps the recent ones, up to a budget in bytes)
and is applied inside each leg of the search, so ``top_k`` is still filled when enough passages pass:

- dense: a faiss selector given in the per-call search parameters (``PhraseIndex.search_parameters``), so MIPS
  returns only tokens of allowed passages (``search_ids``);
- lexical: the BM25 scores of the other passages are zeroed (only passages that match score above zero).

The filter is evaluated over the index's field index (``core.fieldindex``) into a (D,) boolean mask over documents,
the deleted documents are removed, and the mask is expanded to passages ((P,) booleans, for the lexical leg and the
unit counts) and packed into a passage bitmap. faiss reads it through ``IDSelectorTranslated``: token id -> its
passage (one ``int64`` map per index, shared by every selection) -> the passage's bit (``IDSelectorBitmap``). A
selection thus costs D + P + P/8 bytes and O(D + P) time, never O(tokens): at 64 tokens a passage about 0.018 bytes
a token, where a bitmap over token ids (``IDSelectorBitmap`` of N bits, as before) costs 0.125 bytes a token and an
O(N) expansion for every new filter (about 3 s at 3B tokens). The shared map costs 8 bytes a token once, made at
the first selection (an index with neither deletions nor filters never makes it); a flat search with it scanned
2M tokens 8% slower than with a token bitmap (faiss 1.15, one core). What a search reads per token is made from
the selection at the first search that reads it and kept with it (``Selection.allowed_tokens``: the (N,) mask a flat
scan, which scores every token of each batch anyway, masks with; ``Selection.allowed_ids``: the tokens an exact search
of a small selection scores), so no later batch of the same filter makes it again: made each batch, from the whole
(N,) map whatever the batch and however few tokens are allowed, the mask took 6-12 ms and the ids of a selection
small enough to be scored whole 7-12 ms at 10M tokens (``bench/batch_overheads.py``, 2 shared AMD EPYC cores).

Deleted documents and filters select whole documents, or, with a ``passage`` condition (``core.filters.Passage``),
passages; either way every span (which never crosses a passage) of an allowed token lies in an allowed passage. A
filter that selects passages counts its units and tokens over its passages, O(P), not over its documents.

An exhaustive (flat) faiss index scores a batch of queries with one matrix product (BLAS), but falls back to one
query at a time when given a selector (faiss 1.15), which made a batch of 64 questions 3.4x slower with 20 of 22
documents allowed. When most tokens are allowed, ``search_ids`` therefore asks a flat index for more neighbours
without the selector and keeps the allowed ones; a question that did not get ``k`` of them (its nearest documents
are the deleted or filtered ones) is asked once more for 8x more, then with the selector. Either way the ids are
the same (but for the order of exact ties). IVF indexes take the selector (they scan lists one query at a time),
but a selector only keeps the allowed tokens of the ``nprobe`` lists nearest each query: a selection of at most
``EXACT_SELECTED_TOKENS`` tokens is scored whole from the fine vectors instead (``selected_top``: the exact index's
hits), and a larger one is searched with nprobe divided by its share of the tokens.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spanseek.core.chained import ChainedArray, passage_numbers, take
from spanseek.core.faiss_spec import ivf_of
from spanseek.core.params import UNITS, SearchFilter, Unit
from spanseek.core.phrase_index import PhraseIndex

# bytes of recent filters' selections a Searcher keeps by default (each D + P + P / 8 bytes, its filter and
# ENTRY_BYTES: ``Selections.cost``)
SELECTION_CACHE_BYTES = 1 << 30
# what a kept selection holds besides its arrays and its filter: the Selection, its faiss selectors and unit counts,
# the cache's slot (measured over the demo index: 3.4 KB of memory a selection with a filter of two ids, whose
# arrays are 1.2 KB and objects 1.1 KB)
ENTRY_BYTES = 1024
# unit -> the unit of every passage, (P,) int64; the phrase unit is the span itself (None). A new unit is one entry.
UNIT_OF_PASSAGE: dict[Unit, Callable[[PhraseIndex], np.ndarray] | None] = {
    "phrase": None,
    "passage": passage_numbers,
    "doc": lambda index: index.passage_doc,
}
assert tuple(UNIT_OF_PASSAGE) == UNITS

# a flat index over-fetches (rather than take the selector) when at least this share of its tokens is allowed
OVERFETCH_MIN_ALLOWED = 0.5
OVERFETCH_TRIES, OVERFETCH_GROWTH = 2, 8  # then the questions still short take the selector
# an IVF index scans only the nprobe lists nearest each query, and a selector keeps the allowed tokens among them:
# a filter to a few documents found a few of their passages (1 of 6 asked for, IVF256 at its nprobe). Up to this
# many allowed tokens (their (tokens, 2B) scores within 32 MB at a batch of 64 questions) every allowed token is
# scored from the fine vectors; more are searched with nprobe divided by their share (at most every list)
EXACT_SELECTED_TOKENS = 1 << 16
PROBE_GROWTH = 4  # an IVF search short of k tokens is searched again over this many times the lists


@dataclass(frozen=True)
class Selection:
    """The documents and passages a search may return; ``passages`` None (and no selector) when every one may be.

    docs: (D,) bool, allowed documents; passages: (P,) bool, allowed passages.
    selector: the faiss selector of their tokens (``IDSelectorTranslated`` over ``bitmap``, the packed passages).
    unit_count: allowed units per unit name (``passage``, ``doc``): a unit search deepens until it finds
        ``min(top_k, unit_count)`` units.
    token_share: the share of the index's tokens allowed.
    keep: what the selector reads through bare pointers (the bitmap's selector, the shared token map).
    made: the token-level forms made at the first search that reads them (``allowed_tokens``, ``allowed_ids``),
        kept with the selection so that no later batch makes them again.
    charge: called with the selection when it has made one of them (``Selections`` charges its bytes then).
    """

    passages: np.ndarray | None
    selector: Any
    bitmap: np.ndarray | None
    unit_count: dict[str, int]
    docs: np.ndarray | None = None
    token_share: float = 1.0
    keep: tuple[Any, ...] = ()
    made: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    charge: Callable[[Selection], None] | None = field(default=None, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        """No passage may be returned."""
        return self.passages is not None and not self.passages.any()

    @property
    def nbytes(self) -> int:
        """The bytes this selection holds (its arrays, those it has made since; the shared token map is the
        index's)."""
        return sum(a.nbytes for a in (self.docs, self.passages, self.bitmap, *self.made.values()) if a is not None)

    def allowed_tokens(self, index: PhraseIndex) -> np.ndarray | None:
        """(N,) bool: the tokens of ``index`` (this selection's) in allowed passages, None when every one is: what a
        flat scan masks its products with. Made at the first search that asks and kept (N bytes): each batch made it
        again from the token -> passage map (6-12 ms at 10M tokens, for a scan of a single question)."""
        passages = self.passages
        if passages is None:
            return None
        return self._kept("tokens", lambda: np.asarray(passages[index.token_passage], dtype=bool))

    def allowed_ids(self, index: PhraseIndex) -> np.ndarray:
        """The ids of the tokens of ``index`` in allowed passages, ascending (every token's when all are), from the
        allowed passages' token ranges: what an exact search of a small selection scores (``selected_top``). Made at
        the first search that asks and kept (8 bytes an allowed token): each batch read the (N,) token -> passage map
        again (7-12 ms at 10M tokens, for a selection of 65k)."""
        def make() -> np.ndarray:
            ptok = index.passage_tokens
            passages = np.flatnonzero(self.passages) if self.passages is not None else np.arange(len(ptok) - 1)
            first, lengths = ptok[passages], ptok[passages + 1] - ptok[passages]
            return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(first - (np.cumsum(lengths) - lengths),
                                                                             lengths)

        return self._kept("ids", make)

    def _kept(self, name: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        """``made[name]``, made now if it is not yet (by ``make``; of two searches making it at once, both return the
        one kept) and then charged (``charge``): a filter searched once holds it as long as it is kept, so its bytes
        count from when it is made, not from the filter's next look-up."""
        made = self.made.get(name)
        if made is None:
            made = self.made.setdefault(name, make())
            if self.charge is not None:
                self.charge(self)
        return made


def allowed_documents(index: PhraseIndex, flt: SearchFilter | None) -> np.ndarray | None:
    """(D,) bool: documents not deleted that pass ``flt`` (FilterError naming a field the index cannot filter on);
    None when that is every document. ``flt`` selects whole documents (no ``passage`` condition: ``select``)."""
    if flt is None and not len(index.deleted_docs):
        return None
    allowed = index.fields.documents_of(flt) if flt is not None else np.ones(len(index.docs), dtype=bool)
    allowed[index.deleted_docs] = False
    return allowed


def allowed_passages(index: PhraseIndex, flt: SearchFilter, passage_doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((P,) bool, (D,) bool): the passages of documents not deleted that pass ``flt``, a filter that selects
    passages (``SearchFilter.reads_passages``), and the documents that have one of them."""
    passages = index.fields.passage_mask(flt, passage_doc)
    if len(index.deleted_docs):
        live = np.ones(len(index.docs), dtype=bool)
        live[index.deleted_docs] = False
        passages &= take(live, passage_doc)
    docs = np.zeros(len(index.docs), dtype=bool)
    docs[passage_doc[passages]] = True
    return passages, docs


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` (1-D) by a sort: numpy 2's hashing unique took 0.8-1.5 s for 1M values, a sort of the
    nearly sorted (unit, document) pairs of a ``Layout`` some 50 ms, and each write's snapshot makes one."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


class Layout:
    """What every selection of one index reads, computed once: each unit's count per document (filters select whole
    documents, so a selection's unit counts and token share are sums over its documents, O(D)), and the token ->
    passage map faiss translates token ids through (``faiss.Int64Vector``, 8 bytes a token, made at the first
    selection that needs it)."""

    def __init__(self, index: PhraseIndex, unit_of_passage: dict[str, np.ndarray]):
        self.index = index
        self.unit_of_passage = unit_of_passage
        self.passage_doc = unit_of_passage["doc"]
        parts = getattr(index, "token_parts", None)
        if parts is None:
            self.units_per_doc, self.tokens_per_doc = self._counts(index, unit_of_passage)
        else:
            # a live snapshot: a document's counts are its own passages', so the base's documents count as in the
            # base (counted once a base, by its own searcher's layout) and only the segment's are counted here
            base, segment = parts
            first = self._counts(base, {u: f(base) for u, f in UNIT_OF_PASSAGE.items() if f is not None})
            seg = slice(len(base.passages), None)
            units, tokens = per_document({u: of[seg] for u, of in unit_of_passage.items()},
                                         np.diff(segment.passage_tokens), len(index.docs) - len(base.docs),
                                         len(base.docs))
            # read where each lies (a copy of the base's counts was an array over every document a write)
            self.units_per_doc = {u: ChainedArray(first[0][u], units[u]) for u in units}
            self.tokens_per_doc = ChainedArray(first[1], tokens)

    @staticmethod
    def _counts(index: PhraseIndex, unit_of_passage: dict[str, np.ndarray]
                ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``per_document`` of all of ``index``'s documents, kept on the index (for a live snapshot's base: made once
        a base, read by its later snapshots); made again for a copy of the index given other passages (and tokens)."""
        made = index.__dict__.get("_layout_counts")
        if made is None or made[0] is not index.passage_tokens:
            counts = per_document(unit_of_passage, np.diff(index.passage_tokens), len(index.docs))
            made = index.__dict__["_layout_counts"] = (index.passage_tokens, counts)
        return made[1]

    def unit_count(self, docs: np.ndarray | None) -> dict[str, int]:
        """Units of the allowed documents (all of them for None), per unit."""
        return {u: int(per_doc.sum() if docs is None else per_doc[docs].sum()) for u, per_doc in
                self.units_per_doc.items()}

    def passage_counts(self, passages: np.ndarray) -> tuple[dict[str, int], int]:
        """Units of the allowed passages per unit, and their tokens: O(P), for a filter that selects passages
        rather than whole documents (whose counts are sums over documents)."""
        units = {u: len(distinct(np.asarray(of[passages], dtype=np.int64))) for u, of in self.unit_of_passage.items()}
        return units, int(np.diff(self.index.passage_tokens)[passages].sum())

    def token_map(self) -> Any:
        """The token -> passage map of the index's tokens (``passage_map``); a live snapshot's: its base's, made once
        a base (its segment's tokens are translated by ``core.segment.LiveIndex.search_parameters``), not one over
        every token at each write (0.12-0.28 s at 12M tokens, the first filtered search after each write)."""
        parts = getattr(self.index, "token_parts", None)
        return passage_map(self.index if parts is None else parts[0])


_MAP_LOCK = threading.Lock()


def passage_map(index: PhraseIndex) -> Any:
    """``faiss.Int64Vector`` of each token's passage (``index.token_passage``, 8 bytes a token), made at the first
    call and kept on the index (for its snapshots' and its own searchers'; again for a copy given other tokens)."""
    with _MAP_LOCK:
        made = index.__dict__.get("_passage_map")
        if made is None or made[0] is not index.token_passage:
            made = index.__dict__["_passage_map"] = (index.token_passage, int64_vector(index.token_passage))
        return made[1]


def int64_vector(values: Any) -> Any:
    """``values`` (1-D) as a ``faiss.Int64Vector``, the id map ``IDSelectorTranslated`` reads."""
    import faiss

    out = faiss.Int64Vector()
    faiss.copy_array_to_vector(np.ascontiguousarray(values, dtype=np.int64), out)
    return out


def unit_runs(index: PhraseIndex, unit_of_passage: dict[str, np.ndarray]
              ) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """Per unit (``unit_of_passage``: the index's, each passage's unit): the passages in unit order (a stable sort),
    where each unit's run of them starts, and the number of units; what hybrid search takes each unit's best BM25
    passage by. Kept on the index (again for a copy given other passages). A live snapshot's are its base's (made
    once a base) followed by its segment's, whose units all come after the base's: a write sorts its segment's
    passages, not every passage (3 s a write at 1M passages, numpy's hashing unique and a sort over all)."""
    parts = getattr(index, "token_parts", None)
    if parts is not None:
        base = parts[0]
        first = unit_runs(base, {u: f(base) for u, f in UNIT_OF_PASSAGE.items() if f is not None and u in unit_of_passage})
        n = len(base.passages)
        then = runs_of({u: np.asarray(of[n:]) for u, of in unit_of_passage.items()})
        return {u: (np.concatenate([a[0], b[0] + n]), np.concatenate([a[1], b[1] + n]), a[2] + b[2])
                for u, a, b in ((u, first[u], then[u]) for u in unit_of_passage)}
    made = index.__dict__.get("_unit_runs")
    if made is None or made[0] is not index.passages:
        made = index.__dict__["_unit_runs"] = (index.passages, runs_of(unit_of_passage))
    return made[1]


def runs_of(unit_of_passage: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    out = {}
    for u, of in unit_of_passage.items():
        order = np.argsort(of, kind="stable")
        starts = np.flatnonzero(np.r_[len(of) > 0, of[order][1:] != of[order][:-1]])  # (none without passages)
        out[u] = (order, starts, len(starts))
    return out


def per_document(unit_of_passage: dict[str, np.ndarray], passage_tokens: np.ndarray, n_docs: int,
                 first_doc: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(n_docs,) distinct units of each document per unit, and (n_docs,) tokens of each: documents ``first_doc`` to
    ``first_doc + n_docs`` and their passages (``unit_of_passage["doc"]``; ``passage_tokens``: tokens of each)."""
    passage_doc = unit_of_passage["doc"] - first_doc
    units_per_doc = {}
    for unit, of_passage in unit_of_passage.items():
        pairs = distinct(of_passage.astype(np.int64) * n_docs + passage_doc)
        units_per_doc[unit] = np.bincount(pairs % max(n_docs, 1), minlength=n_docs)
    return units_per_doc, np.bincount(passage_doc, weights=passage_tokens, minlength=n_docs)


def select(index: PhraseIndex, flt: SearchFilter | None, layout: Layout) -> Selection:
    """The ``Selection`` of ``index`` for ``flt`` (``layout``: the index's ``Layout``)."""
    import faiss

    if flt is not None and flt.reads_passages:  # the passages that pass, of whichever documents
        passages, docs = allowed_passages(index, flt, layout.passage_doc)
        unit_count, tokens = layout.passage_counts(passages)
    else:
        allowed = allowed_documents(index, flt)
        if allowed is None:
            return Selection(None, None, None, layout.unit_count(None))
        docs, passages = allowed, take(allowed, layout.passage_doc)
        unit_count, tokens = layout.unit_count(docs), layout.tokens_per_doc[docs].sum()
    bitmap = np.packbits(passages, bitorder="little")  # faiss reads bit (id & 7) of byte (id >> 3)
    inner = faiss.IDSelectorBitmap(len(passages), faiss.swig_ptr(bitmap))
    token_map = layout.token_map()
    selector = faiss.IDSelectorTranslated(token_map, inner)
    share = float(tokens / max(1, index.num_tokens))
    return Selection(passages, selector, bitmap, unit_count, docs, share, (inner, token_map))


def faiss_search(index: PhraseIndex, x: np.ndarray, k: int, selector: Any, probes: int | None,
                 device: Any = None) -> np.ndarray:
    """(n, k) ids of one faiss search (on ``device`` where it serves it), at ``probes`` lists (None: the index's)."""
    if device is not None:
        ids = device.search(x, k, probes or index.default_nprobe, selector)
        if ids is not None:
            return ids
    return index.faiss.search(x, k, params=index.search_parameters(probes, selector))[1]


def widening_search(index: PhraseIndex, x: np.ndarray, k: int, selector: Any, probes: int | None, need: int,
                    device: Any = None) -> np.ndarray:
    """``faiss_search``, with an IVF search's queries whose lists hold fewer than ``need`` tokens (allowed ones)
    searched again over ``PROBE_GROWTH`` times as many lists, up to all of them: a passage or document search deepens
    until it has ``top_k`` units, and the lists it visited held fewer (16 of 20 documents at the default nprobe)."""
    ids = faiss_search(index, x, k, selector, probes, device)
    ivf = ivf_of(index.faiss)
    if ivf is None:
        return ids
    probes = probes or index.default_nprobe or 1
    short = np.flatnonzero((ids >= 0).sum(axis=1) < need)
    while len(short) and probes < ivf.nlist:
        probes = min(int(ivf.nlist), probes * PROBE_GROWTH)
        ids[short] = faiss_search(index, x[short], k, selector, probes, device)
        short = short[(ids[short] >= 0).sum(axis=1) < need]
    return ids


def search_ids(index: PhraseIndex, queries: np.ndarray, k: int, nprobe: int | None, sel: Selection,
               device: Any = None, need: int | None = None) -> np.ndarray:
    """(n, k) ids of the ``k`` best allowed tokens for each query (-1 where there are fewer), best first.

    ``device`` (a ``core.gpu.DeviceIndex``) serves each search it can; the others go to the CPU index. ``need``
    (default k): an IVF search with fewer ids than that for a query searches more lists for it (a refined search
    fetches more candidates than it needs)."""
    need = k if need is None else min(need, k)
    faiss_index = index.faiss
    ivf = ivf_of(faiss_index)

    def search(x: np.ndarray, kk: int, selector: Any = None, probes: int | None = nprobe) -> np.ndarray:
        return widening_search(index, x, kk, selector, probes, min(need, kk), device)

    if sel.selector is None:
        return search(queries, k)
    assert sel.passages is not None
    n = faiss_index.ntotal
    share = sel.token_share
    if ivf is not None:  # the lists near a query may hold few allowed tokens (EXACT_SELECTED_TOKENS)
        if share * n <= EXACT_SELECTED_TOKENS and not hasattr(faiss_index, "ivf_index"):  # (not live writes)
            return selected_top(index, queries, k, sel.allowed_ids(index))
        probes = min(int(ivf.nlist), math.ceil((nprobe or index.default_nprobe or 1) / max(share, 1e-12)))
        return search(queries, k, sel.selector, probes)
    if share < OVERFETCH_MIN_ALLOWED or k >= n:
        return search(queries, k, sel.selector)
    wide = min(n, int(k / share * 1.5) + 16)  # allowed ones are about a share of any neighbours
    out = np.full((len(queries), k), -1, dtype=np.int64)
    rows = np.arange(len(queries))
    for _ in range(OVERFETCH_TRIES):
        ids = search(queries[rows], wide)
        ok = ids >= 0
        ok[ok] = sel.passages[index.token_passage[ids[ok]]]
        short = []
        for row, row_ids, row_ok in zip(rows.tolist(), ids, ok, strict=True):
            kept = row_ids[row_ok][:k]
            if len(kept) < k and wide < n:  # its nearest tokens are mostly not allowed
                short.append(row)
            else:  # (with every token searched, fewer than k are allowed)
                out[row, : len(kept)] = kept
        rows = np.asarray(short, dtype=np.int64)
        if not len(rows):
            return out
        wide = min(n, wide * OVERFETCH_GROWTH)
    out[rows] = search(queries[rows], k, sel.selector)
    return out


def selected_top(index: PhraseIndex, queries: np.ndarray, k: int, ids: np.ndarray) -> np.ndarray:
    """(n, k) ids of the ``k`` best of the allowed tokens ``ids`` (ascending; ``Selection.allowed_ids``) for each
    query, every one of them scored from the fine vectors (``PhraseIndex.token_scores``, as span completion scores
    them); best first, the larger id first among equal scores, at the cut too (of the copies of a duplicated passage
    tied at the k-th place, the larger ids are kept); -1 where fewer are allowed."""
    out = np.full((len(queries), k), -1, dtype=np.int64)
    kk = min(k, len(ids))
    if kk == 0:
        return out
    scores = np.asarray(index.token_scores(ids, np.ascontiguousarray(queries.T)), dtype=np.float32).T  # (n, m)
    if kk < len(ids):
        top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]  # among tokens tied at the k-th place: any of them
        kth = np.take_along_axis(scores, top, axis=1).min(axis=1)
        for r in np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > kk):  # ties at the cut (rare): by id
            at = np.flatnonzero(scores[r] >= kth[r])  # ascending
            top[r] = at[np.lexsort((-at, -scores[r, at]))[:kk]]
    else:
        top = np.tile(np.arange(len(ids)), (len(queries), 1))
    order = np.lexsort((-top, -np.take_along_axis(scores, top, axis=1)), axis=1)  # by score, then larger id
    out[:, :kk] = ids[np.take_along_axis(top, order, axis=1)]
    return out


_LEAVES = frozenset({str, int, float, bool, type(None), bytes})


def object_bytes(value: Any) -> int:
    """The bytes of the Python objects ``value`` holds (``sys.getsizeof`` over its tuples, lists, sets, dicts and
    dataclass fields, each object once): what keeping a filter costs. A filter of 10,000 ids holds about a megabyte
    (the ids, and the key its equality goes by), far more than a small index's selection."""
    seen = {id(value)}
    total = sys.getsizeof(value)
    todo = [value]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            members: Any = [*x.keys(), *x.values()]
        elif isinstance(x, (tuple, list, set, frozenset)):
            members = x
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            members = [x.__dict__]
        else:
            continue
        ids = set(map(id, members))
        new = ids - seen  # each object once (the ids' strings are in the filter's key too)
        fresh = list(members) if len(new) == len(ids) else [e for e in members if id(e) in new] if new else []
        if len(fresh) > len(new):  # an object twice in one container
            fresh = list({id(e): e for e in fresh}.values())
        seen |= new
        total += sum(map(sys.getsizeof, fresh))
        todo += [e for e in fresh if type(e) not in _LEAVES]
    return total


class Selections:
    """The ``select`` of the most recently used filters of one index, within ``max_bytes`` (``cost``: each
    selection's arrays, its filter and ``ENTRY_BYTES``; the newest is kept even when it alone is larger). A plain
    dict, not an lru_cache of a bound method, so its owner is freed as soon as it is unused; a lock, since the
    service checks requests while a batch searches."""

    def __init__(self, index: PhraseIndex, unit_of_passage: dict[str, np.ndarray], max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"the selection cache's byte budget must be >= 0, got {max_bytes}")
        self.index = index
        self.max_bytes = max_bytes
        self.layout = Layout(index, unit_of_passage)
        self.recent: dict[SearchFilter | None, tuple[Selection, int]] = {}  # oldest first; (selection, its cost)
        self._arrays: dict[SearchFilter | None, int] = {}  # the bytes of each kept selection's arrays charged
        self.nbytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def cost(flt: SearchFilter | None, sel: Selection) -> int:
        """The bytes keeping ``sel`` for ``flt`` holds: its arrays, the filter's objects (``object_bytes``) and
        ``ENTRY_BYTES``. Counting only the arrays let a budget of a gigabyte keep every filter of a small index's
        traffic: 1.2 KB counted for each of the demo index's selections, while a filter of 1,000 ids held 110 KB."""
        return sel.nbytes + object_bytes(flt) + ENTRY_BYTES

    def get(self, flt: SearchFilter | None) -> Selection:
        with self._lock:
            kept = self.recent.pop(flt, None)
            if kept is not None:
                self.recent[flt] = kept  # most recent last
                return kept[0]
        sel = select(self.index, flt, self.layout)  # outside the lock: searches go on
        sel = replace(sel, charge=self._charger(flt))
        cost = self.cost(flt, sel)
        with self._lock:
            old = self.recent.pop(flt, None)  # made meanwhile by another thread
            self._arrays[flt] = sel.nbytes
            self._charge(flt, sel, cost, old[1] if old is not None else 0)
        return sel

    def _charger(self, flt: SearchFilter | None) -> Callable[[Selection], None]:
        """What a selection kept for ``flt`` calls when it has made a token form (``Selection.made``): its bytes are
        charged and the oldest selections dropped while over the budget. It holds the cache weakly, so a selection
        does not keep its cache (and index) alive."""
        cache = weakref.ref(self)

        def charge(sel: Selection) -> None:
            owner = cache()
            if owner is not None:
                owner._grown(flt, sel)

        return charge

    def _grown(self, flt: SearchFilter | None, sel: Selection) -> None:
        """Charge the bytes ``sel`` (kept for ``flt``) has made since it was charged; nothing once it has been dropped
        or replaced (its arrays then go with the searches that still hold it)."""
        with self._lock:
            kept = self.recent.get(flt)
            if kept is None or kept[0] is not sel:
                return
            grown = sel.nbytes - self._arrays[flt]
            self._arrays[flt] += grown
            del self.recent[flt]
            self._charge(flt, sel, kept[1] + grown, kept[1])

    def _charge(self, flt: SearchFilter | None, sel: Selection, cost: int, charged: int) -> None:
        """Keep ``sel`` for ``flt`` as the most recent at ``cost`` bytes (``charged`` of them already counted), and
        drop the oldest while over the budget (under the lock)."""
        self.nbytes += cost - charged
        self.recent[flt] = (sel, cost)
        while self.nbytes > self.max_bytes and len(self.recent) > 1:
            oldest = next(iter(self.recent))
            self.nbytes -= self.recent.pop(oldest)[1]
            del self._arrays[oldest]
