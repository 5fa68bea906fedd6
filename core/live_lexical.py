"""The lexical (BM25) part of a live snapshot: base and segment passages scored as one index of the live ones.

    spanseek serve --index INDEX_DIR --writes     # (core.segment.LiveIndex holds one per snapshot)

``BaseTerms`` holds a base's passages' term frequencies, made once a base; ``LiveLexical`` scores BM25 (bm25s' Lucene
variant, the formula the base's ``lexical/`` was built with) over the live passages, base and segment together: the
number of passages, their mean length and each term's document frequency count the live passages only, as an index
built from scratch over the same documents would. A snapshot's statistics are the base's (counted once a base), less
its dead passages', plus the segment's: O(segment + tombstones) postings.
"""

from __future__ import annotations

import functools
from collections import ChainMap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spanseek.core.lexical import LexicalIndex, passage_text, top_passages
from spanseek.core.phrase_index import PhraseIndex


class LiveLexical:
    """BM25 over base + segment passages, counting only the live ones (module docstring); ``scores`` as
    ``LexicalIndex.scores``. ``base_terms`` are the base's passages' terms (tokenised once per base); ``live``: (P,)
    bool, the passages not deleted. A snapshot reads the base's term frequencies where they lie and counts the
    statistics from the base's (made once a base), less its dead passages', plus the segment's: O(segment +
    tombstones) postings, not the base's (500 ms a write at 1M passages of 30 terms when recounted over all)."""

    def __init__(self, base: LexicalIndex, base_terms: BaseTerms, segment_terms: Sequence[list[str]],
                 live: np.ndarray):
        import scipy.sparse as sp

        r = base.retriever
        self.k1, self.b, self.method = float(r.k1), float(r.b), r.method
        self.base, self.base_terms = base, base_terms
        self.n_passages = len(live)
        self.n_base, self.n_base_terms = base_terms.tf.shape
        new: dict[str, int] = {}  # the segment's terms the base has not, numbered after the base's
        self.vocab = ChainMap(new, base_terms.vocab)
        known = base_terms.vocab.get  # (a plain dict's lookup: the ChainMap's cost 5 us a term of the segment)
        cols = [c if (c := known(t)) is not None else new.setdefault(t, self.n_base_terms + len(new))
                for terms in segment_terms for t in terms]
        rows = np.repeat(np.arange(len(segment_terms)), [len(t) for t in segment_terms])
        n_terms = self.n_base_terms + len(new)  # (not len(self.vocab): a ChainMap's counts every key)
        seg = sp.csc_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(segment_terms), n_terms))
        seg.sum_duplicates()
        self.segment_tf = seg  # (S, V) term frequencies of the segment's passages
        self.live = live.astype(np.float32)
        self.doc_len = np.concatenate([base_terms.doc_len, [len(t) for t in segment_terms]]).astype(np.int64)
        n_live = int(live.sum())
        self.avg_len = np.float64(self.doc_len[live].mean()) if n_live else np.float64(1.0)
        dead = np.flatnonzero(~live[:self.n_base])
        df = np.zeros(n_terms, np.int64)  # (V,) live passages holding each term
        df[:self.n_base_terms] = base_terms.df - _holding(base_terms.tf[dead])
        df += _holding(sp.diags(live[self.n_base:].astype(np.float32)) @ seg) if len(segment_terms) else 0
        self.idf = np.where(df > 0, np.log(1 + (n_live - df + 0.5) / (df + 0.5)), 0.0).astype(np.float32)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "passages": self.n_passages, "live": True}

    @property
    def analyzer(self) -> str:
        return self.base.analyzer

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The terms of ``texts`` by the base's analyzer (the segment's passages were made with it)."""
        return self.base.tokenize(texts)

    def term_scores(self, term: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The passages holding ``term`` and their BM25 score for it (0 for passages not live): the base's, then the
        segment's (each read where it lies, not copied together: a common term has a long list in the base)."""
        base, seg = self.base_terms.by_term, self.segment_tf
        parts = [(base, 0)] if term < self.n_base_terms else []
        for tf_of, first in (*parts, (seg, self.n_base)):
            a, b = tf_of.indptr[term], tf_of.indptr[term + 1]
            if a == b:
                continue
            rows, tf = (tf_of.indices[a:b] + first) if first else tf_of.indices[a:b], tf_of.data[a:b]
            tfc = tf / (self.k1 * ((1 - self.b) + self.b * self.doc_len[rows] / self.avg_len) + tf)  # float64, as bm25s
            yield rows, (self.idf[term] * tfc).astype(np.float32) * self.live[rows]

    def scores(self, questions: Sequence[str], terms: Sequence[list[str]] | None = None) -> np.ndarray:
        """(B, P) float32 BM25 score of every passage for every question (0 where no query term occurs); ``terms``:
        the questions' ``tokenize``, when the caller has it (as ``LexicalIndex.scores``)."""
        out = np.zeros((len(questions), self.n_passages), np.float32)
        for q, words in enumerate(self.tokenize(questions) if terms is None else terms):
            for term in (self.vocab[t] for t in words if t in self.vocab):
                for rows, s in self.term_scores(term):
                    out[q, rows] += s
        return out

    def top(self, questions: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return top_passages(self.scores(questions), k)


@dataclass(frozen=True)
class BaseTerms:
    """Term frequencies of a base's passages: tf (P, V) CSR, vocab {term: column}, doc_len (P,) terms a passage;
    ``by_term`` and ``df`` are made once a base, for its snapshots."""

    tf: Any
    vocab: dict[str, int]
    doc_len: np.ndarray

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
        out.by_term, out.df  # noqa: B018  (made here, with the base, not by its first write)
        return out


def _holding(tf: Any) -> np.ndarray:
    """(V,) int64: the rows of a sparse (rows, V) matrix holding each column."""
    return np.asarray((tf > 0).sum(axis=0), np.int64).reshape(-1)
