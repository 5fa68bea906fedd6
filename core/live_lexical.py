"""The lexical (BM25) part of a live snapshot: base and segment passages scored as one index of the live ones.

    spanseek serve --index INDEX_DIR --writes     # (core.segment.LiveIndex holds one per snapshot)

``BaseTerms`` holds a base's passages' term frequencies, made once a base; ``LiveLexical`` scores BM25 (the bm25s
variant the base's ``lexical/`` was built with: Lucene's for every index built here; one that scores passages without
a query's terms, BM25L or BM25+, is refused) over the live passages, base and segment together: the
number of passages, their mean length and each term's document frequency count the live passages only, as an index
built from scratch over the same documents would. A snapshot's statistics are the base's (counted once a base), less
its dead passages', plus the segment's, kept apart and joined for a query's terms at the search: a write costs its
own document's terms (numbered once, ``BaseTerms.numbered``), its postings (the segment's are built over runs of
written documents, each run once, ``core.segment_log``) and O(tombstones) postings, nothing over every passage or
term of the base nor every posting of the segment.
A query term's base postings are read where they lie and scored where a search reads them (``term_list``), so the
live leg prunes as a base's does (``core.postings``): a common term's long list is looked up, not scored whole.
A written term the base lacks is numbered by each run of postings holding it (``SegmentPostings.new_terms``), so it
is held no longer than a snapshot reads such a run, not until the next merge.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from spanseek.core.lexical import LexicalIndex, passage_text
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.postings import Matches, Postings, TermList

# bm25s' BM25 variants (``bm25s.scoring``) over arrays: each term's idf from the passages holding it (df >= 1) of n
_IDF = {
    "lucene": lambda df, n: np.log(1 + (n - df + 0.5) / (df + 0.5)),
    "robertson": lambda df, n: np.log(np.maximum((n - df + 0.5) / (df + 0.5), 1.0)),  # (bm25s: never negative)
    "atire": lambda df, n: np.log(n / df),
    "bm25l": lambda df, n: np.log((n + 1) / (df + 0.5)),
    "bm25+": lambda df, n: np.log((n + 1) / df),
}
# ... and a posting's term-frequency part from its count and its passage's length over the mean (``norm``); bm25l and
# bm25+ are left out: they score every passage, those without the term too, which no postings list holds
_TFC = {
    "lucene": lambda tf, norm, k1: tf / (k1 * norm + tf),
    "robertson": lambda tf, norm, k1: tf / (k1 * norm + tf),
    "atire": lambda tf, norm, k1: tf * (k1 + 1) / (tf + k1 * norm),
}


class LiveLexical:
    """BM25 over base + segment passages, counting only the live ones (module docstring); ``scores`` as
    ``LexicalIndex.scores``. ``base_terms`` are the base's passages' terms (tokenised once per base); ``segment``: the
    segment passages' postings, run after run (``SegmentPostings``, built once a run of written documents and shared
    by the later snapshots, ``core.segment_log``); ``dead``: the base's
    passages deleted (sorted, distinct). A snapshot reads the base's term frequencies where they lie and keeps what
    the writes change apart: the segment's postings, the dead passages' document frequencies and lengths. A query
    term's idf is made from them at the search; nothing is made over every passage or every term (a snapshot recounted
    the base's postings, 500 ms a write at 1M passages of 30 terms; then made an idf, a mask and lengths over all of
    them, and numbered every segment term again)."""

    def __init__(self, base: LexicalIndex, base_terms: BaseTerms, segment: Sequence[SegmentPostings],
                 dead: np.ndarray):
        r = base.retriever
        self.k1, self.b, self.method = float(r.k1), float(r.b), r.method
        self.idf_method = getattr(r, "idf_method", None) or r.method
        if self.method not in _TFC or self.idf_method not in _IDF:
            variant = self.method if self.method not in _TFC else self.idf_method
            raise ValueError(f"the lexical part's BM25 variant {variant!r} cannot be scored over live writes (only "
                             f"{', '.join(map(repr, _TFC))}: it scores passages without a query's terms too); rebuild "
                             "it with `spanseek index add-lexical`, which writes Lucene's")
        self.base, self.base_terms = base, base_terms
        self.n_base, self.n_base_terms = base_terms.tf.shape
        self.vocab = base_terms.vocab  # (a term the base lacks has a column in each run of postings holding it)
        self.segment = segment
        self.seg_first = np.cumsum([self.n_base, *(len(s.lengths) for s in segment)])  # each run's first passage
        self.n_passages = int(self.seg_first[-1])
        self.dead = np.zeros(self.n_base, bool)  # (calloc'd: pages are made only where a passage is dead)
        self.dead[dead] = True
        # the dead passages' postings: each (passage, term) once in a summed CSR, so a term's count is its dead df
        self.dead_terms, at = _runs_of(np.sort(base_terms.tf[dead].indices.astype(np.int64)))
        self.dead_df = np.diff(at)
        self.n_live = self.n_passages - len(dead)
        total = base_terms.total_len - int(base_terms.doc_len[dead].sum()) + sum(s.total for s in segment)
        self.avg_len = np.float64(total) / self.n_live if self.n_live else np.float64(1.0)  # (as a mean of them)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "passages": self.n_passages, "live": True}

    @property
    def analyzer(self) -> str:
        return self.base.analyzer

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The terms of ``texts`` by the base's analyzer (the segment's passages were made with it)."""
        return self.base.tokenize(texts)

    def idf(self, terms: Sequence[str]) -> np.ndarray:
        """(n,) float32 idf of ``terms`` over the live passages."""
        base = np.fromiter((self.vocab.get(t, -1) for t in terms), np.int64, count=len(terms))  # (-1: the base lacks it)
        df = np.zeros(len(terms), np.int64)
        in_base = base >= 0
        df[in_base] = self.base_terms.df[base[in_base]]
        df -= _count_of(self.dead_terms, self.dead_df, base)
        for postings in self.segment:
            own = np.fromiter((postings.new_terms.get(t, _NONE) for t in terms), np.int64, count=len(terms))
            df += _count_of(postings.terms, np.diff(postings.starts), np.where(in_base, base, own))
        idf = _IDF[self.idf_method](np.maximum(df, 1).astype(np.float64), np.float64(self.n_live))
        return np.where(df > 0, idf, 0.0).astype(np.float32)

    def term_list(self, term: str, idf: np.float32) -> tuple[TermList, np.float32]:
        """The passages holding ``term``, the base's then the segment's, with their BM25 scores for it (0 for a dead
        passage), and a score none of them passes. The base's postings are read where they lie and scored when a
        search reads them (``TermList``): pruning looks passages up in a common term's long list rather than scoring
        it whole; its bound is its best posting's (``BaseTerms.frontier``, the dead counted). The segment's, few, are
        scored at once."""
        column = self.vocab.get(term)
        rows, base_tf = np.zeros(0, np.int32), np.zeros(0, np.float32)
        bound = np.float32(0)
        if column is not None:
            tf_of = self.base_terms.by_term
            a, b = tf_of.indptr[column], tf_of.indptr[column + 1]
            rows, base_tf = tf_of.indices[a:b], tf_of.data[a:b]
            tf, length = self.base_terms.frontier(column)
            # (one ulp up: a posting that the frontier's dominates scores no more, rounding included)
            bound = np.nextafter(self._scored(idf, tf, length).max(), np.float32(np.inf))
        rest, scored = [], []
        for postings, first in zip(self.segment, self.seg_first[:-1].tolist(), strict=True):
            own = postings.column(term, column)
            held = None if own is None else postings.of_term(own)
            if held is not None:
                rest.append(held[0] + first)
                scored.append(self._scored(idf, held[1], postings.lengths[held[0]]))
        segment = np.concatenate([np.zeros(0, np.float32), *scored])
        n_base, doc_len, dead = len(rows), self.base_terms.doc_len, self.dead

        def score(positions: np.ndarray) -> np.ndarray:
            out = np.empty(len(positions), np.float32)
            mine = positions < n_base
            at = positions[mine]
            held = rows[at]
            out[mine] = np.where(dead[held], np.float32(0), self._scored(idf, base_tf[at], doc_len[held]))
            out[~mine] = segment[positions[~mine] - n_base]
            return out

        passages = np.concatenate([rows.astype(np.int64), *rest])
        return TermList(passages, score=score), max(bound, segment.max(initial=0))

    def _scored(self, idf: np.float32, tf: np.ndarray, length: np.ndarray) -> np.ndarray:
        tfc = _TFC[self.method](tf, (1 - self.b) + self.b * length / self.avg_len, self.k1)  # float64, as bm25s
        return (idf * tfc).astype(np.float32)

    def postings(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> Postings:
        """The BM25 of ``questions`` over the live passages as search reads it (``core.postings.Postings``, as
        ``LexicalIndex.postings``): each of their terms' scored passages, base and segment in one ascending list, in
        the questions' order of terms, and the highest of each; ``terms``: the questions' ``tokenize``, when the
        caller has it."""
        lists: list[list[TermList]] = []
        bounds = []
        for words in self.tokenize(questions) if terms is None else terms:
            held = [t for t in words if t in self.vocab or any(t in s.new_terms for s in self.segment)]
            made = [self.term_list(term, idf) for term, idf in zip(held, self.idf(held), strict=True)]
            lists.append([term for term, _ in made])
            bounds.append(np.asarray([bound for _, bound in made], np.float32))
        return Postings.of_lists(lists, bounds, self.n_passages)

    def matches(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> Matches:
        """Every BM25 match of ``questions`` over the live passages (``Matches``), every posting read."""
        return self.postings(questions, terms).matches()

    def scores(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> np.ndarray:
        """(B, P) float32 BM25 score of every passage for every question (``matches`` as an array)."""
        return self.matches(questions, terms).dense()

    def top(self, questions: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.postings(questions).top(k)


@dataclass(frozen=True)
class SegmentPostings:
    """The BM25 postings of a run of segment passages (numbered from 0 in the run), built once a run of written
    documents (``core.segment_log``) and read by every later snapshot holding it: terms, the sorted distinct term
    columns; starts, where each one's postings start (the end appended); rows and tf, each posting's passage and
    count; lengths, (p,) each passage's terms; total, their sum."""

    terms: np.ndarray
    starts: np.ndarray
    rows: np.ndarray
    tf: np.ndarray
    lengths: np.ndarray
    total: int
    new_terms: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, written: Sequence[WrittenTerms]) -> SegmentPostings:
        """The postings of the passages of documents whose terms are ``written`` (``BaseTerms.numbered``), in order:
        the terms the base lacks numbered -1, -2, ... in the run (``new_terms``)."""
        new: dict[str, int] = {}
        local = np.fromiter((new.setdefault(t, -1 - len(new)) for doc in written for t in doc.new), np.int64)
        columns = [c for doc in written for c in doc.columns]
        lengths = np.asarray([len(c) for c in columns], np.int64)
        cols = np.concatenate([np.zeros(0, np.int64), *columns])
        if len(local):  # a document's -1 - k is its new[k]: the run's column of that term, after the documents' before
            first_new = np.cumsum([0, *(len(doc.new) for doc in written[:-1])])
            doc_terms = [int(sum(len(c) for c in doc.columns)) for doc in written]
            neg = cols < 0
            cols[neg] = local[np.repeat(first_new, doc_terms)[neg] - 1 - cols[neg]]
        width = max(len(columns), 1)
        # (term, passage) pairs in order, each once with its count
        pairs = np.sort(cols * width + np.repeat(np.arange(len(columns)), lengths))
        first = np.flatnonzero(np.r_[True, pairs[1:] != pairs[:-1]]) if len(pairs) else np.zeros(0, np.int64)
        terms, starts = _runs_of(pairs[first] // width)  # (floor division: a new term's column stays negative)
        return cls(terms, starts, pairs[first] % width, np.diff(np.r_[first, len(pairs)]).astype(np.float32),
                   lengths, int(lengths.sum()), new)

    def column(self, term: str, base_column: int | None) -> int | None:
        """``term``'s column in these postings: the base's where it has one, else the run's own; None: neither."""
        return base_column if base_column is not None else self.new_terms.get(term)

    def of_term(self, term: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The passages holding ``term`` and its count in each; None where none does."""
        at = np.searchsorted(self.terms, term)
        if at == len(self.terms) or self.terms[at] != term:
            return None
        a, b = self.starts[at], self.starts[at + 1]
        return self.rows[a:b], self.tf[a:b]


_NONE = np.iinfo(np.int64).min  # a column no postings hold: a term a run lacks


def _runs_of(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``values``' distinct values and where each one's run starts (with the end appended)."""
    first = np.flatnonzero(np.r_[True, values[1:] != values[:-1]]) if len(values) else np.zeros(0, np.int64)
    return values[first], np.r_[first, len(values)].astype(np.int64)


def _count_of(keys: np.ndarray, counts: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """``counts`` of ``terms`` among the sorted distinct ``keys`` (0 for a term not among them)."""
    if not len(keys):
        return np.zeros(len(terms), np.int64)
    at = np.minimum(np.searchsorted(keys, terms), len(keys) - 1)
    return np.where(keys[at] == terms, counts[at], 0)


class WrittenTerms(NamedTuple):
    """A written document's BM25 terms over a base (``BaseTerms.numbered``): ``columns``, each passage's terms as the
    base's columns, a term the base lacks as ``-1 - k`` for ``new[k]``; ``new``: those terms, each once."""

    columns: list[np.ndarray]
    new: tuple[str, ...]


@dataclass(frozen=True)
class BaseTerms:
    """Term frequencies of a base's passages: tf (P, V) CSR, vocab {term: column}, doc_len (P,) terms a passage;
    ``by_term``, ``df`` and ``total_len`` are made once a base, for its snapshots. The written documents' terms the
    base lacks are numbered by each run of postings that holds them (``SegmentPostings.new_terms``), not here: kept
    with the base, every such term ever written stayed numbered until a merge, those of documents deleted or replaced
    since among them (69 MB after one document was replaced 20,000 times, each version with 30 new terms)."""

    tf: Any
    vocab: dict[str, int]
    doc_len: np.ndarray

    @functools.cached_property
    def total_len(self) -> int:
        """The terms of every passage together."""
        return int(self.doc_len.sum())

    def numbered(self, terms: Sequence[list[str]]) -> WrittenTerms:
        """A written document's passages' terms as the base's columns, those the base lacks numbered in the document
        (``WrittenTerms``): a dictionary lookup a term, once a document, not at each write."""
        known = self.vocab.get  # (a plain dict's lookup)
        new: dict[str, int] = {}
        columns = [np.fromiter((c if (c := known(t)) is not None else -1 - new.setdefault(t, len(new)) for t in ts),
                               np.int64, count=len(ts)) for ts in terms]
        return WrittenTerms(columns, tuple(new))

    def frontier(self, column: int) -> tuple[np.ndarray, np.ndarray]:
        """The term frequencies and passage lengths of term ``column``'s postings that no other of its postings
        dominates (as high a count in as short a passage, one of them more): its BM25 score is highest at one of them,
        whatever the mean length and idf (``pareto``)."""
        a, b = self.pareto[0][column], self.pareto[0][column + 1]
        return self.pareto[1][a:b], self.pareto[2][a:b]

    @functools.cached_property
    def pareto(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every term's ``frontier``: (V + 1,) where each term's starts, and their counts and lengths."""
        by = self.by_term
        term = np.repeat(np.arange(by.shape[1], dtype=np.int64), np.diff(by.indptr))
        tf, length = by.data, self.doc_len[by.indices]
        order = np.lexsort((-tf, length, term))  # a term's postings, shortest passage first, higher count first
        # a posting is on the frontier where its count beats every one before it of its term (each term's keys above
        # the one before's: its running maximum restarts there)
        key = term[order] * (int(tf.max(initial=0)) + 1) + tf[order].astype(np.int64)
        on = np.r_[len(key) > 0, key[1:] > np.maximum.accumulate(key)[:-1]] if len(key) else np.zeros(0, bool)
        kept = order[on]
        return (np.searchsorted(term[kept], np.arange(by.shape[1] + 1)).astype(np.int64), tf[kept],
                length[kept])

    @functools.cached_property
    def by_term(self) -> Any:
        """tf as (P, V) CSC: each term's passages."""
        return self.tf.tocsc()

    @functools.cached_property
    def df(self) -> np.ndarray:
        """(V,) int64: the passages holding each term."""
        return _holding(self.tf)

    @classmethod
    def of(cls, index: PhraseIndex) -> BaseTerms:
        import scipy.sparse as sp

        if index.lexical is None:
            raise ValueError(f"{index.dir} has no lexical index to take terms from")
        terms = index.lexical.tokenize([passage_text(index.docs[p["doc"]]["title"], p["text"]) for p in index.passages])
        vocab: dict[str, int] = {}
        rows, cols = [], []
        for p, ts in enumerate(terms):
            for t in ts:
                rows.append(p)
                cols.append(vocab.setdefault(t, len(vocab)))
        tf = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(terms), len(vocab)))
        tf.sum_duplicates()
        out = cls(tf, vocab, np.asarray([len(t) for t in terms], np.int64))
        out.by_term, out.df, out.total_len, out.pareto  # noqa: B018  (made here, with the base, not by its first write)
        return out


def _holding(tf: Any) -> np.ndarray:
    """(V,) int64: the rows of a sparse (rows, V) matrix holding each column."""
    return np.asarray((tf > 0).sum(axis=0), np.int64).reshape(-1)
