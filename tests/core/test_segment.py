"""A live snapshot (``core.segment.LiveIndex``) reads its base's documents, passages and field index without copying
them: its state against the snapshot made by copying (the base's lists followed by the segment's, and a field index
built over every document), on an in-memory base of random documents with random metadata, earlier versions of ids
(deleted) and a segment of upserts of base ids, new ids and tombstones.

    .venv/bin/python -m pytest -q tests/core/test_segment.py
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import itertools
import operator
import random
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faiss
import numpy as np
import pytest

from spanseek.core.chained import Chained
from spanseek.core.fieldindex import FieldIndex
from spanseek.core.filters import FilterError, SearchFilter
from spanseek.core.phrase_index import Manifest, PhraseIndex, passage_record
from spanseek.core.segment import EncodedDocument, LiveIndex, empty_like
from spanseek.core.segment_log import INLINE_RUN, wait_for_joins
from spanseek.core.selection import UNIT_OF_PASSAGE, Layout, allowed_documents, distinct
from tests.core.test_field_index import random_filter
from tests.core.test_field_index_joined import versions

DIM = 8


@pytest.mark.parametrize(("first", "then"), [([], []), ([1, 2, 3], []), ([], [4, 5]), ([1, 2, 3], [4, 5])])
def test_a_chained_sequence_reads_as_the_two_lists_joined(first, then):
    whole, chained = first + then, Chained(first, then)
    assert len(chained) == len(whole) and list(chained) == whole
    for i in range(-len(whole), len(whole)):
        assert chained[i] == whole[i] and chained[np.int64(i)] == whole[i]
    for i in (len(whole), -len(whole) - 1):
        with pytest.raises(IndexError):
            chained[i]
    bounds = [None, *range(-len(whole) - 1, len(whole) + 2)]
    for start in bounds:
        for stop in bounds:
            for step in (None, 1, 2, -1):
                assert chained[start:stop:step] == whole[start:stop:step], (start, stop, step)
    for x in range(7):
        assert bisect.bisect_left(chained, x) == bisect.bisect_left(whole, x)


def memory_base(docs: list[dict], rng: random.Random) -> PhraseIndex:
    """A ``PhraseIndex`` held in memory: each document one or two passages of two tokens, random vectors in a flat
    faiss index, the earlier versions of a repeated id deleted (as ``index add`` leaves them)."""
    base = object.__new__(PhraseIndex)
    passages = [passage_record(d, k, f"text {d}.{k}") for d in range(len(docs)) for k in range(rng.randint(1, 2))]
    n = 2 * len(passages)
    base.dir, base.docs, base.passages = Path("memory"), docs, passages
    base.token_passage = np.repeat(np.arange(len(passages), dtype=np.int32), 2)
    base.token_offsets, base.token_flags = np.zeros((n, 2), np.int32), np.zeros(n, np.uint8)
    base.passage_tokens = np.arange(0, n + 1, 2, dtype=np.int64)
    last = {doc["id"]: d for d, doc in enumerate(docs)}
    base.deleted_docs = np.asarray([d for d, doc in enumerate(docs) if last[doc["id"]] != d], np.int64)
    base.vectors = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float16)
    base.faiss = faiss.IndexFlatIP(DIM)
    base.faiss.add(base.vectors.astype(np.float32))
    base.default_nprobe, base.codes, base.vector_source, base.lexical = None, None, "fine", None
    base.manifest = Manifest(1, {}, "", "", "Flat", {}, len(docs), len(passages), n, n, None, 0.0, "")
    base._fields = None
    return base


def encoded(record: dict, rng: random.Random) -> EncodedDocument:
    k = rng.randint(1, 2)
    return EncodedDocument(record, tuple({"para": i, "text": f"new {record['id']}.{i}"} for i in range(k)),
                           np.ones((2 * k, DIM), np.float16), np.zeros((2 * k, 2), np.int32),
                           np.zeros(2 * k, np.uint8), np.full(k, 2), np.ones(2 * k, bool), tuple([] for _ in range(k)))


@pytest.mark.parametrize("seed", range(4))
def test_a_snapshot_holds_what_copying_the_base_into_it_held(seed):
    rng = random.Random(seed)
    docs = versions(seed, 260)
    base = memory_base(docs[:200], rng)
    held = sorted({d["id"] for d in base.docs})
    segment = {}
    for record in docs[200:]:  # upserts: a base id (its base row tombstoned) or a new one, perhaps written twice
        record = {**record, "id": rng.choice(held) if rng.random() < 0.4 else record["id"]}
        segment.pop(record["id"], None)
        segment[record["id"]] = encoded(record, rng)
    dead = {d for d, doc in enumerate(base.docs) if doc["id"] in segment or rng.random() < 0.05}
    live = LiveIndex(base, list(segment.values()), np.asarray(sorted(dead), np.int64), empty_like(base.faiss), None)

    all_docs = base.docs + [doc.record for doc in segment.values()]  # the snapshot as copying made it
    all_passages = base.passages + [passage_record(len(base.docs) + k, q["para"], q["text"])
                                    for k, doc in enumerate(segment.values()) for q in doc.passages]
    assert list(live.docs) == all_docs and list(live.passages) == all_passages
    assert len(live.docs) == len(all_docs) and live.passages[-3:] == all_passages[-3:]
    assert live.manifest.documents == len(all_docs) and live.manifest.passages == len(all_passages)
    by_doc = operator.itemgetter("doc")
    for row in rng.sample(range(len(all_docs)), 20):
        assert bisect.bisect_left(live.passages, row, key=by_doc) == bisect.bisect_left(all_passages, row, key=by_doc)

    filters_as_built_over(live, all_docs, rng, 40)


def filters_as_built_over(live: LiveIndex, all_docs: list[dict], rng: random.Random, n: int) -> np.ndarray:
    """``live``'s ids and ``n`` random filters against a field index built over ``all_docs`` (its documents), the
    deleted ones left out; its (D,) deletion mask."""
    oracle = FieldIndex.build(all_docs)
    ids = [d["id"] for d in all_docs]
    assert [live.fields.number_of.get(i) for i in ids] == [oracle.number_of.get(i) for i in ids]
    deleted = np.zeros(len(all_docs), bool)
    deleted[live.deleted_docs] = True
    for _ in range(n):
        flt = SearchFilter.from_json(random_filter(rng))
        try:
            want = oracle.documents_of(flt) & ~deleted
        except FilterError as e:
            with pytest.raises(FilterError, match=re.escape(str(e))):
                allowed_documents(live, flt)
            continue
        assert np.array_equal(allowed_documents(live, flt), want)
    return deleted


@pytest.mark.parametrize("seed", range(3))
def test_a_snapshot_s_unit_runs_are_those_of_its_whole_passage_lists(seed):
    """What hybrid search takes each unit's best BM25 passage by (``unit_runs``: passages in unit order, where each
    unit's run starts, how many units), made from its base's and its segment's, as made over all its passages."""
    from spanseek.core.selection import runs_of, unit_runs

    rng = random.Random(seed)
    docs = versions(seed, 80)
    base = memory_base(docs[:60], rng)
    segment = [encoded(record, rng) for record in docs[60:]] if seed else []  # (a merge empties the segment)
    live = LiveIndex(base, segment, np.asarray([1, 5], np.int64), empty_like(base.faiss), None)
    units = {u: np.asarray(f(live)) for u, f in UNIT_OF_PASSAGE.items() if f is not None}
    got, want = unit_runs(live, units), runs_of(units)
    for unit in units:
        np.testing.assert_array_equal(got[unit][0], want[unit][0])
        np.testing.assert_array_equal(got[unit][1], want[unit][1])
        assert got[unit][2] == want[unit][2] == len(np.unique(units[unit]))


def test_a_write_s_searcher_sorts_the_segment_s_passages_not_every_passage():
    """A snapshot's hybrid stage (``LexicalFusion``, made for each write's searcher) over a base of 150,000 passages
    costs a fraction of numpy's unique of the passages' documents (CPU time, the least of three), which it made, and
    a sort of every passage, for every write (3 s a write at 1M passages)."""
    from spanseek.core.selection import unit_runs

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(100_000)], rng)
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(20)]
    snaps = [LiveIndex(base, segment[:k], np.zeros(0, np.int64), empty_like(base.faiss), None) for k in (19, 20)]
    of = [{u: f(s) for u, f in UNIT_OF_PASSAGE.items() if f is not None} for s in snaps]
    unit_runs(snaps[0], of[0])  # the base's, once
    whole = np.asarray(snaps[1].passage_doc)
    assert least(lambda: unit_runs(snaps[1], of[1])) < 0.2 * least(lambda: np.unique(whole))


def test_a_write_s_snapshot_makes_no_record_of_its_segment_s_passages_until_read(monkeypatch):
    """A snapshot's segment passages are made into records when read, not by the write (each write made a record of
    every segment passage: 5 ms a write at 500 documents written, growing with them)."""
    import spanseek.core.segment_log as segment_log

    made: list[tuple] = []
    record = segment_log.passage_record
    monkeypatch.setattr(segment_log, "passage_record", lambda *a: made.append(a) or record(*a))
    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(30)], rng)
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(50)]
    live = LiveIndex(base, segment, np.zeros(0, np.int64), empty_like(base.faiss), None)
    assert made == []
    assert live.passages[len(base.passages)] == {"doc": 30, "para": 0, "text": "new n0.0"} and len(made) == 1
    assert live.passages[-1]["doc"] == 79 and np.array_equal(live.passage_doc[-3:], [r["doc"] for r in live.passages[-3:]])


def test_a_copy_given_other_passages_reads_their_documents_not_the_original_s():
    """A copy of an index given other passages (``trainer.calibrate.without_documents``, after a searcher over the
    original made its passages' documents) numbers them by its own passages."""
    base = memory_base(versions(1, 20), random.Random(1))
    assert base.passage_doc.tolist() == [p["doc"] for p in base.passages]
    sub = copy.copy(base)
    sub.passages = [{**p, "doc": p["doc"] - 1} for p in base.passages if p["doc"] > 0]
    assert sub.passage_doc.tolist() == [p["doc"] for p in sub.passages]
    assert base.passage_doc.tolist() == [p["doc"] for p in base.passages]


class Unread(list):
    """A base's list that fails when read item by item (len and identity still work)."""

    def __iter__(self):
        raise AssertionError("the snapshot read every item of its base's list")

    def __getitem__(self, i):
        raise AssertionError("the snapshot read an item of its base's list")


def test_a_write_s_snapshot_reads_none_of_its_base_s_documents_or_passages(monkeypatch):
    """What a write costs grows with the segment, not the base: the base's field index is built once (here before
    the write), and the snapshot neither copies the base's lists nor builds a field index over its documents."""
    rng = random.Random(0)
    base = memory_base(versions(0, 300), rng)
    base.fields  # noqa: B018  (made once a base: read from doc_fields.npz, or by its first searcher)
    passage_doc = base.passage_doc
    base.docs, base.passages = Unread(base.docs), Unread(base.passages)
    base.passage_doc = passage_doc  # (made once a base, for these passages)
    built: list[int] = []
    build = FieldIndex.build
    monkeypatch.setattr(FieldIndex, "build", staticmethod(lambda docs, *passages: built.append(len(docs)) or build(
        docs, *passages)))
    segment = [encoded({"id": "new", "title": "New", "meta": {"year": 2001}}, rng)]
    live = LiveIndex(base, segment, np.asarray([3], np.int64), empty_like(base.faiss), None)
    assert built == [1]
    flt = SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 2001, "lte": 2001}}]})
    assert live.fields.documents_of(flt)[-1] and live.docs[300]["id"] == "new" and len(live.passages) > 300
    units = {u: f(live) for u, f in UNIT_OF_PASSAGE.items() if f is not None}  # what a searcher over it makes
    passages_per_doc = np.bincount(live.passage_doc, minlength=301)
    assert live.passage_doc[-1] == 300 and len(live.passage_doc) == len(live.passages)
    layout = Layout(live, units)
    assert np.array_equal(layout.units_per_doc["passage"], passages_per_doc)
    assert np.array_equal(layout.units_per_doc["doc"], passages_per_doc > 0)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_distinct_is_numpy_s_unique(n):
    values = np.random.default_rng(n).integers(-5, 50, n)
    assert np.array_equal(distinct(values), np.unique(values)) and distinct(values).dtype == values.dtype


def bm25(terms: list[list[str]], live: list[bool], question: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Lucene BM25 (bm25s' formula) of every passage for ``question``, counted over the live passages only."""
    held = [t for t, alive in zip(terms, live, strict=True) if alive]
    avg = sum(map(len, held)) / len(held)
    out = []
    for ts, alive in zip(terms, live, strict=True):
        score = 0.0
        for q in question:
            df = sum(q in h for h in held)
            if alive and df and q in ts:
                tf = ts.count(q)
                idf = np.log(1 + (len(held) - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + k1 * (1 - b + b * len(ts) / avg))
        out.append(score)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_live_bm25_counts_the_live_base_and_segment_passages_as_a_scan_does(seed):
    """The statistics a snapshot counts from the base's (less its dead passages') and the segment's: every passage's
    score against BM25 scanned over the live passages, segment terms the base never held included."""
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(12)]
    base_terms = [[rng.choice(words[:9]) for _ in range(rng.randint(1, 6))] for _ in range(40)]
    seg_terms = [[rng.choice(words) for _ in range(rng.randint(1, 6))] for _ in range(5)]
    vocab: dict[str, int] = {}
    rows, cols = zip(*[(p, vocab.setdefault(t, len(vocab))) for p, ts in enumerate(base_terms) for t in ts],
                     strict=True)
    tf = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(base_terms), len(vocab)))
    tf.sum_duplicates()
    terms = BaseTerms(tf, vocab, np.asarray([len(t) for t in base_terms]))
    live = [rng.random() > 0.2 for _ in base_terms] + [True] * len(seg_terms)
    retriever = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"))
    # the segment's postings in runs of passages, as a snapshot reads them (a run's passages one document's here)
    runs = [SegmentPostings.of([terms.numbered(seg_terms[a:b])]) for a, b in ((0, 2), (2, 3), (3, 5))]
    lexical = LiveLexical(retriever, terms, runs, np.flatnonzero(~np.asarray(live[:40])))
    questions = [rng.sample(words, 3) for _ in range(6)]
    got = lexical.scores(["?"] * len(questions), questions)
    want = [bm25(base_terms + seg_terms, live, q) for q in questions]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, counted_over_all(terms, seg_terms, np.asarray(live), questions))


def counted_over_all(terms, seg_terms: list[list[str]], live: np.ndarray, questions: list[list[str]]) -> np.ndarray:
    """BM25 as a snapshot counted it over every passage and term (each term's idf, the live mask and every passage's
    length in arrays over all of them), to the bit: what a snapshot's lexical part must still give."""
    import scipy.sparse as sp

    vocab = dict(terms.vocab)
    cols = [vocab.setdefault(t, len(vocab)) for ts in seg_terms for t in ts]
    rows = np.repeat(np.arange(len(seg_terms)), [len(t) for t in seg_terms])
    seg = sp.csc_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(seg_terms), len(vocab)))
    seg.sum_duplicates()
    n_base, n_base_terms = terms.tf.shape
    doc_len = np.concatenate([terms.doc_len, [len(t) for t in seg_terms]]).astype(np.int64)
    n_live = int(live.sum())
    avg = np.float64(doc_len[live].mean())
    df = np.zeros(len(vocab), np.int64)
    df[:n_base_terms] = np.asarray((terms.tf[live[:n_base]] > 0).sum(axis=0)).reshape(-1)
    df += np.asarray((seg > 0).sum(axis=0)).reshape(-1)
    idf = np.where(df > 0, np.log(1 + (n_live - df + 0.5) / (df + 0.5)), 0.0).astype(np.float32)
    by_term, mask = terms.tf.tocsc(), live.astype(np.float32)
    out = np.zeros((len(questions), len(live)), np.float32)
    for q, words in enumerate(questions):
        for term in (vocab[t] for t in words if t in vocab):
            parts = [(by_term, 0)] if term < n_base_terms else []
            for tf_of, first in (*parts, (seg, n_base)):
                a, b = tf_of.indptr[term], tf_of.indptr[term + 1]
                r, tf = tf_of.indices[a:b] + first, tf_of.data[a:b]
                tfc = tf / (1.5 * ((1 - 0.75) + 0.75 * doc_len[r] / avg) + tf)
                out[q, r] += (idf[term] * tfc).astype(np.float32) * mask[r]
    return out


def least(run) -> float:
    """The least CPU time of three runs of ``run``."""
    times = []
    for _ in range(3):
        t0 = time.process_time()
        run()
        times.append(time.process_time() - t0)
    return min(times)


def test_a_write_s_bm25_statistics_cost_the_segment_not_the_base_s_postings():
    """A snapshot's BM25 part over a base of 2M postings takes a fraction of one pass over them (CPU time, the
    least of three, against ``tocsc`` of the base's postings; recounting them took several such passes)."""
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings

    n, per, words = 100_000, 20, 50_000
    rng = np.random.default_rng(0)
    rows, cols = np.repeat(np.arange(n), per), rng.integers(0, words, n * per)
    tf = sp.csr_matrix((np.ones(n * per, np.float32), (rows, cols)), shape=(n, words))
    terms = BaseTerms(tf, {f"w{i}": i for i in range(words)}, np.full(n, per))
    terms.by_term, terms.df  # noqa: B018  (made once a base)
    one_pass = least(tf.tocsc)
    retriever = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"))
    written = [SegmentPostings.of([terms.numbered([["w1", "new"]])])]
    assert least(lambda: LiveLexical(retriever, terms, written, np.asarray([7]))) < 0.3 * one_pass


def test_a_write_s_bm25_part_costs_about_a_dictionary_lookup_a_segment_term():
    """The segment's terms are numbered by a lookup each in the base's vocabulary (CPU time, the least of three,
    against one pass of such lookups; through the snapshot's two-level vocabulary it took over 10 passes)."""
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings

    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    tf = sp.csr_matrix((np.ones(len(words), np.float32), (np.arange(len(words)), np.arange(len(words)))))
    terms = BaseTerms(tf, {w: i for i, w in enumerate(words)}, np.ones(len(words), np.int64))
    terms.by_term, terms.df  # noqa: B018  (made once a base)
    seg_terms = [[rng.choice(words) if rng.random() < 0.9 else f"new{rng.randrange(999)}" for _ in range(150)]
                 for _ in range(400)]
    retriever = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"))

    held = terms.vocab
    one_pass = least(lambda: [held.get(t) for ts in seg_terms for t in ts])
    assert least(lambda: LiveLexical(retriever, terms, [SegmentPostings.of([terms.numbered(seg_terms)])],
                                        np.zeros(0, np.int64))) < 6 * one_pass


def test_a_written_document_keeps_no_float32_copy_of_its_vectors_nor_its_base_s_index_alive():
    """Over a base whose faiss index is filled with vectors (an HNSW graph here), a snapshot's segment index holds the
    segment's vectors (it searches as a scan of base and segment does) while a written document keeps nothing beyond its
    own fields (a float32 copy of its vectors doubled what it held, for as long as it stayed in the segment), and the
    document does not keep its base's faiss index alive once the base and its snapshots are gone."""
    import gc
    import weakref

    rng = random.Random(0)
    base = memory_base([{"id": f"d{k}", "title": f"T{k}"} for k in range(6)], rng)
    base.faiss = faiss.IndexHNSWFlat(DIM, 8, faiss.METRIC_INNER_PRODUCT)
    base.faiss.add(base.vectors.astype(np.float32))
    vecs = np.random.default_rng(1).standard_normal((6, DIM)).astype(np.float16) * 4
    docs = [dataclasses.replace(encoded({"id": f"new{k}", "title": "N"}, random.Random(1)), vectors=vecs[2 * k:2 * k + 2])
            for k in range(3)]
    live = LiveIndex(base, docs, np.zeros(0, np.int64), empty_like(base.faiss), None)
    x = vecs.astype(np.float32)
    oracle = x @ np.concatenate([base.vectors, vecs]).astype(np.float32).T  # (6, base + segment tokens)
    np.testing.assert_array_equal(live.faiss.search(x, 3)[1], np.argsort(-oracle, axis=1, kind="stable")[:, :3])
    fields = {f.name for f in dataclasses.fields(EncodedDocument)}

    def held(value) -> int:
        if isinstance(value, np.ndarray):
            return value.nbytes
        if isinstance(value, (tuple, list)):
            return sum(held(v) for v in value)
        return held(list(vars(value).values())) if dataclasses.is_dataclass(value) else 0

    assert [held([v for k, v in vars(d).items() if k not in fields]) for d in docs] == [0, 0, 0]
    ref = weakref.ref(base.faiss)
    del live, base
    gc.collect()
    assert ref() is None


class Counted(dict):
    """A vocabulary that counts its lookups."""

    looked = 0

    def get(self, key, default=None):
        Counted.looked += 1
        return super().get(key, default)


def test_a_write_numbers_its_own_document_s_terms_once():
    """Over a series of writes each written document's BM25 terms are looked up in the base's vocabulary once, by the
    first snapshot that holds it (each snapshot numbered every segment term again)."""
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(200)], rng)
    n = len(base.passages)
    tf = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), np.arange(n) % 50)), shape=(n, 50))
    terms = BaseTerms(tf, Counted({f"w{i}": i for i in range(50)}), np.ones(n, np.int64))
    Counted.looked = 0
    base.lexical = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"), analyzer="folded")
    written = []
    for i in range(6):
        doc = encoded({"id": f"n{i}", "title": "n"}, rng)
        written.append(dataclasses.replace(doc, terms=tuple([f"w{i}", f"new{i}", "w3"] for _ in doc.passages)))
        LiveIndex(base, written, np.asarray([1, 2]), empty_like(base.faiss), terms)
    assert Counted.looked == sum(len(t) for doc in written for t in doc.terms)


def test_the_terms_of_a_replaced_version_are_held_no_longer_once_no_snapshot_reads_them():
    """A document replaced 200 times, each version with terms the base lacks: neither the base's terms nor the
    snapshot number those of the versions before (each such term ever written stayed numbered with the base until a
    merge: 600,000 terms, 69 MB, after 20,000 versions of 30 new terms), and BM25 scores the live version's as one
    counted over the live passages does."""
    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(20)], rng)
    terms = one_term(base)
    template = empty_like(base.faiss)
    segment = [dataclasses.replace(doc, terms=tuple(["w", "shared"] for _ in doc.passages)) for doc in
               (encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(10))]
    for v in range(200):
        doc = encoded({"id": "edited", "title": "n"}, rng)
        doc = dataclasses.replace(doc, terms=tuple([f"v{v}x{k}", "shared"] for k in range(len(doc.passages))))
        segment = [d for d in segment if d.id != "edited"] + [doc]
        live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    numbered = [value for value in vars(terms).values() if isinstance(value, dict)
                and all(isinstance(c, int) for c in value.values())]  # (the base's vocabulary, and what it numbered)
    held = {t for value in numbered for t in value} | {t for s in live.lexical.segment for t in getattr(
        s, "new_terms", ())}
    assert held == {"w", "shared", *(t for ts in segment[-1].terms for t in ts)}, len(held)
    questions = [["v199x0", "shared"], ["v0x0", "w"], ["v198x1"]]
    seg_terms = [t for doc in segment for t in doc.terms]
    np.testing.assert_array_equal(live.lexical.scores(["?"] * 3, questions), counted_over_all(
        terms, seg_terms, np.ones(len(base.passages) + len(seg_terms), bool), questions))


def test_a_write_s_bm25_part_makes_nothing_over_every_passage():
    """A snapshot's BM25 part over a base of 2M passages takes a fraction of the mean passage length over them that it
    made (CPU time, the least of three), with an idf, a live mask and the lengths over every passage and term."""
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings

    n = 2_000_000
    tf = sp.csr_matrix((np.ones(n, np.float32), np.arange(n) % 1000, np.arange(n + 1)), shape=(n, 1000))
    terms = BaseTerms(tf, {f"w{i}": i for i in range(1000)}, np.full(n, 3, np.int64))
    terms.by_term, terms.df, terms.total_len  # noqa: B018  (made once a base)
    written = [SegmentPostings.of([terms.numbered([["w1", "new"], ["w2"]])])]
    retriever = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"))
    live = np.ones(n + 2, bool)
    mean_length = least(lambda: np.concatenate([terms.doc_len, [2, 1]])[live].mean())
    assert least(lambda: LiveLexical(retriever, terms, written, np.asarray([5, 9]))) < 0.2 * mean_length


def copied_texts(rng: random.Random, n: int) -> list[str]:
    """``n`` passage texts drawn from a few, respaced and recased now and then (copies once normalised)."""
    pick = [rng.choice(["A notice.", "The river bridge", "Alba built it", "One more"]) for _ in range(n)]
    return [t.upper() if rng.random() < 0.2 else t.replace(" ", "  ") if rng.random() < 0.2 else t for t in pick]


@pytest.mark.parametrize("seed", range(4))
def test_a_snapshot_s_copies_are_those_of_an_index_of_its_passages(seed):
    """A snapshot's table of copies (its base's, made once a base, followed by its segment's) groups passages and
    documents, and counts a hit's copies, as the table of an index holding the same passages does."""
    from spanseek.core.duplicates import Copies

    rng = random.Random(seed)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(40)], rng)
    base.passages = [{**p, "text": t} for p, t in zip(base.passages, copied_texts(rng, len(base.passages)),
                                                       strict=True)]
    Copies.of(base, base.passage_doc)
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(rng.randint(0, 12))]
    segment = [dataclasses.replace(doc, passages=tuple({**q, "text": t} for q, t in zip(
        doc.passages, copied_texts(rng, len(doc.passages)), strict=True))) for doc in segment]
    live = LiveIndex(base, segment, np.asarray([2, 7], np.int64), empty_like(base.faiss), None)
    copies_as_made_from_scratch(live, rng, hits=True)


def copies_as_made_from_scratch(live: LiveIndex, rng: random.Random, hits: bool) -> None:
    """``live``'s table of copies against that of an index holding its passages, made from scratch: each passage's and
    document's key and group; with ``hits``, each passage's hit's key and copies in each unit, with and without a
    selection."""
    from spanseek.core.duplicates import Copies
    from spanseek.core.params import Hit
    from spanseek.core.selection import Selection

    whole = object.__new__(PhraseIndex)  # an index holding the snapshot's passages, its table made from scratch
    whole.docs, whole.passages = list(live.docs), list(live.passages)
    got, want = Copies.of(live, live.passage_doc), Copies.of(whole, np.asarray(live.passage_doc))
    allowed = np.asarray([rng.random() < 0.8 for _ in whole.docs])
    selections = [Selection(None, None, None, {}), Selection(allowed[np.asarray(live.passage_doc)], None, None, {},
                                                             allowed)]
    for of, n in (("passage", len(whole.passages)), ("doc", len(whole.docs))):
        for i in range(n):
            key = int(want.key[of][i])
            assert int(got.key[of][i]) == key and (key in got.members[of]) == (key in want.members[of])
            assert np.array_equal(got.members[of].get(key) if key in got.members[of] else [],
                                  want.members[of].get(key) if key in want.members[of] else [])
    for p, record in enumerate(whole.passages if hits else ()):
        hit = Hit(record["text"][:3], 0.0, 0, 3, p, record["text"], whole.docs[record["doc"]]["id"], "t")
        for unit, selection in itertools.product(("phrase", "passage", "doc"), selections):
            assert got.hit_key(hit, unit) == want.hit_key(hit, unit)
            assert got.copies_of(hit, unit, selection) == want.copies_of(hit, unit, selection)
    for d in range(len(whole.docs) if hits else 0):
        assert got.words("doc", d) == want.words("doc", d)


def test_a_series_of_writes_copies_are_those_of_an_index_of_their_passages_each_document_keyed_once(monkeypatch):
    """Over a series of writes (new documents, segment documents replaced and deleted) with copied texts, each
    snapshot's table of copies is that of an index of its passages made from scratch, and a new document's write keys
    its own document (and those of the runs it builds), not every segment document (each snapshot hashed every written
    document's passage keys and sorted every segment key: 5.9 ms at 5,000 written documents)."""
    import spanseek.core.duplicates as duplicates
    import spanseek.core.segment_log as segment_log
    from spanseek.core.duplicates import Copies

    monkeypatch.setattr(segment_log, "INLINE_RUN", 4)  # (runs joined by the joining thread as the writes go on)
    keyed: list[int] = []
    counting, me, keys_of = [False], threading.get_ident(), duplicates.written_keys
    monkeypatch.setattr(duplicates, "written_keys", lambda doc: (counting[0] and threading.get_ident() == me
                                                                 and keyed.append(1)) or keys_of(doc))
    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(30)], rng)
    Copies.of(base, base.passage_doc)
    template, segment = empty_like(base.faiss), []

    def written(doc_id: str) -> EncodedDocument:
        doc = encoded({"id": doc_id, "title": "n"}, rng)
        return dataclasses.replace(doc, passages=tuple({**q, "text": t} for q, t in zip(
            doc.passages, copied_texts(rng, len(doc.passages)), strict=True)))

    for i in range(120):
        pick = rng.random()
        if pick < 0.15 and segment:
            segment.append(written(segment.pop(rng.randrange(len(segment))).id))
        elif pick < 0.25 and segment:
            segment.pop(rng.randrange(len(segment)))
        else:
            segment.append(written(f"n{i}"))
        live = LiveIndex(base, segment, np.zeros(0, np.int64), template, None)
        counting[0] = pick >= 0.25  # (a new document's write's table alone: one that replaces or deletes a segment
        # document makes the rows and runs after it again; the table made from scratch keys every document)
        Copies.of(live, live.passage_doc)
        counting[0] = False
        copies_as_made_from_scratch(live, rng, hits=i % 40 == 39)
    wait_for_joins()
    assert len(keyed) < 6 * 120  # (each snapshot keyed every segment document: 2,973 here)


def test_a_write_s_copies_cost_its_segment_not_the_base_s_passages():
    """A snapshot's table of copies over a base of 200,000 passages, whose table is made, costs a fraction of
    numpy's unique of the passages' keys (CPU time, the least of three), which it made, with a sort of every
    passage and a hash of every document's keys, for every write (2-3 s a write at 1M passages)."""
    from spanseek.core import duplicates

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(150_000)], rng)
    duplicates.Copies.of(base, base.passage_doc)  # the base's, once
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(20)]
    keys = duplicates.hash_passages(base.passages)

    def snapshot_copies():
        live = LiveIndex(base, segment, np.zeros(0, np.int64), empty_like(base.faiss), None)
        duplicates.Copies.of(live, live.passage_doc)

    assert least(snapshot_copies) < 0.3 * least(lambda: np.unique(keys, return_inverse=True, return_counts=True))


def test_each_snapshot_s_scan_vectors_are_its_segment_s_widened_each_document_widened_once(monkeypatch):
    """A snapshot's float32 segment vectors (what the flat scan multiplies by the questions) are its float16 ones
    widened, bit for bit, whatever its writes did (adds, replacements and deletions of segment documents) and in
    whatever order the snapshots are first searched; a document is widened once, not every segment token at every
    batch; past the bytes the widened rows may take, a snapshot widens its own."""
    import spanseek.core.widened as widened

    widened_rows: list[int] = []
    as_float32 = widened.as_float32
    monkeypatch.setattr(widened, "as_float32", lambda rows: widened_rows.append(len(rows)) or as_float32(rows))
    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(10)], rng)
    segment: dict[str, EncodedDocument] = {}
    snaps, written = [], 0
    for step in range(40):
        name = f"n{rng.randrange(12)}"
        if rng.random() < 0.2:
            segment.pop(name, None)
        else:
            doc = encoded({"id": name, "title": "n"}, rng)
            doc = dataclasses.replace(doc, vectors=np.random.default_rng(step).standard_normal(
                doc.vectors.shape).astype(np.float16))
            segment.pop(name, None)
            segment[name] = doc
            written += doc.tokens
        snaps.append(LiveIndex(base, list(segment.values()), np.zeros(0, np.int64), empty_like(base.faiss), None))
        if rng.random() < 0.5:  # searched now, or later (out of order)
            got = snaps[-1].segment_scan_vectors()
            assert got.dtype == np.float32 and np.array_equal(got, snaps[-1].seg_vectors.astype(np.float32))
    assert sum(widened_rows) <= written
    queries = np.random.default_rng(1).standard_normal((3, DIM)).astype(np.float32)
    for snap in rng.sample(snaps, len(snaps)):
        got = snap.segment_scan_vectors()
        assert np.array_equal(got, snap.seg_vectors.astype(np.float32)) and got.flags.c_contiguous
        assert np.array_equal(queries @ got.T, queries @ snap.seg_vectors.astype(np.float32).T)
        rows = np.arange(len(got))[::3]
        if len(rows):
            assert np.array_equal(snap.token_vectors(rows + len(base.token_passage)), got[rows])
    monkeypatch.setattr(widened, "WIDENED_BYTES", 4 * DIM * 5)  # room for 5 rows: a new base's snapshot widens its own
    fresh = memory_base([{"id": f"d{d}", "title": "t"} for d in range(10)], rng)
    snap = LiveIndex(fresh, snaps[-1].segment, np.zeros(0, np.int64), empty_like(fresh.faiss), None)
    assert np.array_equal(snap.segment_scan_vectors(), snap.seg_vectors.astype(np.float32))


def test_a_write_s_snapshot_makes_no_array_over_every_passage():
    """A snapshot's passage -> document map and passage numbers (what its searcher's units read) are its base's,
    made once a base, followed by its segment's: a write allocates a fraction of one array over every passage (it
    copied the base's map and made a range over every passage, a few ms a write at 1M passages)."""
    import tracemalloc

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(100_000)], rng)
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(20)]
    maps = [f for f in UNIT_OF_PASSAGE.values() if f is not None]
    [f(base) for f in maps]  # noqa: B018  (the base's, once, as its field index)
    base.fields  # noqa: B018
    LiveIndex(base, segment[:1], np.zeros(0, np.int64), empty_like(base.faiss), None)  # (what it imports)
    tracemalloc.start()
    try:
        live = LiveIndex(base, segment, np.zeros(0, np.int64), empty_like(base.faiss), None)
        units = [f(live) for f in maps]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 0.25 * base.passage_doc.nbytes
    whole = np.asarray([p["doc"] for p in live.passages])
    assert np.array_equal(np.asarray(units[0]), np.arange(len(whole))) and np.array_equal(np.asarray(units[1]), whole)
    assert units[1].max() == whole.max() and np.array_equal(units[1][[0, -1, len(base.passages)]],
                                                           whole[[0, -1, len(base.passages)]])


def test_a_write_hashes_its_own_document_s_passages_for_the_table_of_copies(monkeypatch):
    """Over a series of writes, each followed by its snapshot's table of copies, each written passage's text is
    normalised and hashed once (every segment passage was hashed again at each write)."""
    from spanseek.core import duplicates

    hashed: list[str] = []
    normalise = duplicates.normalise_passage
    monkeypatch.setattr(duplicates, "normalise_passage", lambda text: hashed.append(text) or normalise(text))
    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(30)], rng)
    duplicates.Copies.of(base, base.passage_doc)
    hashed.clear()
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(8)]
    for k in range(1, len(segment) + 1):
        live = LiveIndex(base, segment[:k], np.zeros(0, np.int64), empty_like(base.faiss), None)
        duplicates.Copies.of(live, live.passage_doc)
    assert sorted(hashed) == sorted(q["text"] for doc in segment for q in doc.passages)


def test_a_segment_past_the_widened_rows_bytes_holds_no_rows_nor_documents_that_left_it():
    """Once a segment's float32 vectors would take more than the widened rows may, each snapshot widens its own, and
    the shared rows let go of their buffer and of the documents they held: a written document deleted or replaced
    since is no longer kept alive by them (they held both until the next merge)."""
    import gc
    import weakref

    from spanseek.core.widened import WidenedRows

    rng = random.Random(0)
    rows = WidenedRows(DIM, max_bytes=4 * DIM * 12)  # room for 12 rows
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(3)]  # 2 or 4 rows each
    first = rows.rows_of(segment)
    assert first is not None and np.array_equal(first, np.concatenate([d.vectors for d in segment]).astype(np.float32))
    gone = weakref.ref(segment[0])
    segment = segment[1:] + [encoded({"id": f"m{i}", "title": "n"}, rng) for i in range(6)]  # n0 deleted; 14+ rows
    assert rows.rows_of(segment) is None
    assert rows.buffer.nbytes == 0 and not rows.docs
    del first
    gc.collect()
    assert gone() is None
    kept = segment[:2]  # back under the bytes: widened again, from the float16 vectors
    assert np.array_equal(rows.rows_of(kept), np.concatenate([d.vectors for d in kept]).astype(np.float32))


@pytest.mark.parametrize(("seed", "inline_run"), [(0, None), (1, None), (2, None), (3, 2), (4, 4)])
def test_every_snapshot_of_a_series_of_writes_filters_and_scores_as_one_built_over_its_documents(seed, inline_run,
                                                                                                 monkeypatch):
    """Writes one after another over one base (new documents, segment documents replaced and deleted, base documents
    tombstoned), and now and then an older snapshot made again: each snapshot's filters select what a field index
    built over all its documents selects, and its BM25 scores are, to the bit, those counted over all its passages
    (the segment's parts are built over runs of its documents and shared between snapshots); with ``inline_run``,
    runs past that many documents are joined by the joining thread as the writes go on, each snapshot reading what
    is joined by then."""
    import spanseek.core.segment_log as segment_log

    if inline_run is not None:
        monkeypatch.setattr(segment_log, "INLINE_RUN", inline_run)
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    docs = versions(seed, 130)
    base = memory_base(docs[:60], rng)
    base_terms = [[rng.choice(words[:20]) for _ in range(rng.randint(1, 5))] for _ in base.passages]
    vocab: dict[str, int] = {}
    cols = [vocab.setdefault(t, len(vocab)) for ts in base_terms for t in ts]
    rows = np.repeat(np.arange(len(base_terms)), [len(ts) for ts in base_terms])
    tf = sp.csr_matrix((np.ones(len(cols), np.float32), (rows, cols)), shape=(len(base_terms), len(vocab)))
    tf.sum_duplicates()
    terms = BaseTerms(tf, vocab, np.asarray([len(ts) for ts in base_terms], np.int64))
    base.lexical = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"), analyzer="folded")
    template, segment, dead, older = empty_like(base.faiss), [], set(), []
    questions = [rng.sample(words, 3) for _ in range(4)]

    def written(record: dict) -> EncodedDocument:
        doc = encoded(record, rng)
        n = doc.tokens
        return dataclasses.replace(doc, terms=tuple([rng.choice(words) for _ in range(rng.randint(1, 5))]
                                                    for _ in doc.passages),
                                   vectors=np.random.default_rng(rng.randrange(99)).standard_normal((n, DIM)).astype(
                                       np.float16), offsets=np.arange(2 * n, dtype=np.int32).reshape(n, 2),
                                   flags=np.arange(n, dtype=np.uint8), kept=np.arange(n) % 2 == 0)

    def check(segment: list[EncodedDocument], dead: set[int]) -> None:
        live = LiveIndex(base, segment, np.asarray(sorted(dead), np.int64), template, terms)
        deleted = filters_as_built_over(live, base.docs + [doc.record for doc in segment], rng, 4)
        token_map_as_copied(live, base, segment)
        seg_terms = [t for doc in segment for t in doc.terms]
        passage_live = np.r_[~deleted[[p["doc"] for p in base.passages]], np.ones(len(seg_terms), bool)]
        np.testing.assert_array_equal(live.lexical.scores(["?"] * len(questions), questions),
                                      counted_over_all(terms, seg_terms, passage_live, questions))

    for i, record in enumerate(docs[60:]):
        pick = rng.random()
        if pick < 0.15 and segment:  # a segment document replaced: it leaves, its new version comes last
            old = segment.pop(rng.randrange(len(segment)))
            segment.append(written({**record, "id": old.id}))
        elif pick < 0.25 and segment:
            segment.pop(rng.randrange(len(segment)))
        elif pick < 0.3:
            dead.add(rng.randrange(len(base.docs)))
        else:
            segment.append(written(record))
        if i % 10 == 0:
            older.append((list(segment), set(dead)))
        check(segment, dead)
        if i % 25 == 24:
            check(*older[rng.randrange(len(older))])


def token_map_as_copied(live: LiveIndex, base: PhraseIndex, segment: list[EncodedDocument]) -> None:
    """``live``'s token map, passages, documents, kept tokens and segment vectors against the base's and the
    segment documents' copied together."""
    n, ntokens = len(base.token_passage), np.concatenate([np.zeros(0, np.int64), *[d.ntokens for d in segment]])
    joined = {"offsets": np.zeros((0, 2), np.int32), "flags": np.zeros(0, np.uint8), "kept": np.zeros(0, bool),
              "vectors": np.zeros((0, DIM), np.float16)}
    joined = {k: np.concatenate([v, *[getattr(d, k) for d in segment]]) for k, v in joined.items()}
    assert np.array_equal(np.asarray(live.token_passage), np.r_[base.token_passage, len(base.passages) + np.repeat(
        np.arange(len(ntokens)), ntokens)])
    assert np.array_equal(np.asarray(live.passage_tokens), np.r_[base.passage_tokens, n + np.cumsum(ntokens)])
    assert np.array_equal(np.asarray(live.token_offsets), np.r_[base.token_offsets, joined["offsets"]])
    assert np.array_equal(np.asarray(live.token_flags), np.r_[base.token_flags, joined["flags"]])
    assert np.array_equal(live.faiss.segment_ids, n + np.flatnonzero(joined["kept"]))
    assert np.array_equal(live.seg_vectors, joined["vectors"])
    assert np.array_equal(np.asarray(live.passage_doc), [p["doc"] for p in live.passages])
    assert list(live.docs) == base.docs + [d.record for d in segment]
    assert list(live.passages) == base.passages + [passage_record(len(base.docs) + k, q["para"], q["text"])
                                                   for k, d in enumerate(segment) for q in d.passages]


def test_a_write_builds_the_field_index_postings_and_token_map_of_about_its_own_document(monkeypatch):
    """Over 300 writes, the segment's field index parts and BM25 postings are built over about log2(segment)
    documents a write (each write built them over every segment document: 45,150 in all), a snapshot made once the
    joining thread has joined what is due reads at most log2(segment) + 1 of them, and each written document's token map rows are made once (each write joined every
    segment document's)."""
    import spanseek.core.segment_log as segment_log

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(50)], rng)
    terms = one_term(base)
    built, posted = counted_builds(monkeypatch)
    made, token_rows = [], segment_log._token_rows
    monkeypatch.setattr(segment_log, "_token_rows", lambda base: lambda docs, *at: made.extend(docs) or token_rows(
        base)(docs, *at))
    template, segment = empty_like(base.faiss), []
    for i in range(300):
        segment.append(encoded({"id": f"n{i}", "title": "n", "meta": {"i": i}}, rng))
        live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
        wait_for_joins()  # (the runs the next snapshot reads joined: their count at most as the docstring says)
        assert len(live.seg_vectors) == len(live.token_passage) - len(base.token_passage)
        assert len(live.fields.parts) <= 2 + np.log2(len(segment))
        assert len(live.lexical.segment) <= 1 + np.log2(len(segment))
    assert sum(built) <= 300 * (1 + np.log2(300))
    assert sum(posted) <= len(live.passages) * (1 + np.log2(300))  # (each write posted every segment passage)
    assert len(made) == len(segment) and {id(doc) for doc in made} == {id(doc) for doc in segment}
    assert live.fields.documents_of(SearchFilter.from_json({"meta": {"i": 299}})).tolist() == [False] * 349 + [True]


def test_replacing_or_deleting_the_first_written_document_makes_no_other_document_s_rows(monkeypatch):
    """A write that replaces the first written document (its new version comes last) makes the token map rows of
    that version only, and one that deletes it makes none: the rows of the documents after it are kept, moved up
    (each document of the segment had its rows made again); the snapshot's token map, passages and documents are
    those of the segment's documents copied together."""
    import spanseek.core.segment_log as segment_log

    rng = random.Random(3)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(20)], rng)
    made, token_rows = [], segment_log._token_rows
    monkeypatch.setattr(segment_log, "_token_rows", lambda base: lambda docs, *at: made.extend(docs) or token_rows(
        base)(docs, *at))
    template = empty_like(base.faiss)
    segment = [encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(40)]
    LiveIndex(base, segment, np.zeros(0, np.int64), template, None)
    for step in range(6):
        made.clear()
        if step % 2:
            segment = segment[1:]
        else:
            segment = [*segment[1:], encoded({**segment[0].record, "title": f"again {step}"}, rng)]
        live = LiveIndex(base, segment, np.zeros(0, np.int64), template, None)
        assert made == ([] if step % 2 else [segment[-1]])
        token_map_as_copied(live, base, segment)


def test_a_deep_replace_copies_the_rows_that_stay_once():
    """A segment document replaced deep in the segment: the widened rows and the appended rows of the documents that
    stay are copied into the new buffer (room for twice them) a run at a time, with no temporary copy of them all
    (a gather by a mask made one first: a peak of three times their bytes, where the buffer takes two); the rows are
    those of the documents that stay, in order, and the new version's."""
    import tracemalloc

    from spanseek.core.segment_log import AppendedRows
    from spanseek.core.widened import WidenedRows

    class Written:  # (compared by identity, as a written document is)
        def __init__(self, vectors: np.ndarray):
            self.vectors = vectors

    rng = np.random.default_rng(0)
    docs = [Written(rng.standard_normal((500, 64)).astype(np.float16)) for _ in range(40)]
    wide, appended = WidenedRows(64), AppendedRows()

    def rows(segment, *_):
        return {"v": (np.concatenate([d.vectors for d in segment]), np.asarray([len(d.vectors) for d in segment]))}

    wide.rows_of(docs)
    appended.of(docs, rows)
    for at in (1, 0):  # deep in the segment, then its first document
        docs = [*docs[:at], *docs[at + 1:], Written(docs[at].vectors.copy())]
        whole = np.concatenate([d.vectors for d in docs])
        for held, read in ((wide, wide.rows_of), (appended, lambda segment: appended.of(segment, rows)["v"])):
            tracemalloc.start()
            try:
                got = read(docs)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 2.5 * got.nbytes, type(held).__name__
            np.testing.assert_array_equal(got, whole.astype(got.dtype))


def test_no_write_builds_a_run_longer_than_the_inline_run_itself(monkeypatch):
    """Over 520 writes one by one, no write builds the field index and BM25 postings of more than ``INLINE_RUN``
    documents itself (the write that filled a run of 256 or 512 built that whole run: a spike of 27 ms at 4,096
    written documents, where a write costs 0.7 ms); the joining thread joins the longer runs, and once it has, a
    snapshot reads about log2(segment) parts, and filters and scores as one built over its documents."""
    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(20)], rng)
    terms = one_term(base)
    template, segment = empty_like(base.faiss), []
    built, posted = counted_builds(monkeypatch)
    most = 0
    for i in range(520):
        doc = encoded({"id": f"n{i}", "title": "n", "meta": {"i": i}}, rng)
        segment.append(dataclasses.replace(doc, terms=tuple(["w", f"x{(i + k) % 7}"] for k in range(len(doc.passages)))))
        built.clear()
        LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
        most = max(most, sum(built))
    assert most == INLINE_RUN and max(posted) <= 2 * INLINE_RUN  # (a document: one or two passages)
    wait_for_joins()
    live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    assert [len(p.ids) for p in live.fields.parts[1:]] == [256, 128, 64, 64, 8]
    filters_as_built_over(live, base.docs + [doc.record for doc in segment], rng, 5)
    questions = [["w"], ["x3", "w"], ["x6", "x1"]]
    seg_terms = [t for doc in segment for t in doc.terms]
    np.testing.assert_array_equal(live.lexical.scores(["?"] * 3, questions), counted_over_all(
        terms, seg_terms, np.ones(len(base.passages) + len(seg_terms), bool), questions))


def test_a_write_s_parts_find_their_documents_held_without_comparing_them_one_by_one_in_python(monkeypatch):
    """A write's snapshot finds the documents each of its parts holds by one comparison of lists (documents compare
    by identity), not a Python call for each pair (0.5 ms of a write's 1.4 at 5,000 written documents); a segment that
    lost a document still finds the first that differs, and the snapshot reads what one built over its documents
    does."""
    import spanseek.core.segment_log as segment_log

    pairs = []
    monkeypatch.setattr(segment_log, "operator", SimpleNamespace(
        is_=lambda a, b: pairs.append(1) or a is b, index=operator.index))
    rng = random.Random(0)
    base, terms, template, segment = written_one_by_one(40, rng)
    pairs.clear()
    segment.append(encoded({"id": "new", "title": "n", "meta": {"i": 40}}, rng))
    LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    assert pairs == []  # (each pair of 40 was compared in Python, for each part)
    del segment[5]
    live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    assert pairs
    filters_as_built_over(live, base.docs + [doc.record for doc in segment], rng, 5)


def test_a_join_handed_again_over_new_documents_is_built_once_and_the_stale_one_not_at_all():
    """A write that replaces an early document while the joining thread has joins of the old documents waiting hands
    it the same runs over the new ones: each is built once, over the new documents, and the waiting ones are not
    built (a waiting join, once done, took the newer hand-over of its run for its own, which was then handed a third
    time: 19 joins built where 11 are due, 7 of them twice, and the runs left misaligned, a run of 512 from document
    128 that no later join could join with the first 128)."""
    import spanseek.core.segment_log as segment_log

    me, gate, built = threading.get_ident(), threading.Event(), []

    def build(_, docs, start):
        if threading.get_ident() != me:
            gate.wait(10)
            built.append((start, start + len(docs), id(docs[0])))
        return tuple(docs)

    chunks, docs = segment_log.SegmentChunks(), [object() for _ in range(16 * segment_log.INLINE_RUN)]
    try:
        chunks.of(docs, build)  # runs of INLINE_RUN: their joins handed to the thread, waiting at the gate
        docs = [object(), *docs[1:]]  # the first document replaced: each run built again, their joins due again
        chunks.of(docs, build)
    finally:
        gate.set()
    wait_for_joins()
    assert len(built) == len(set(built)) == 11 and all(first == id(docs[start]) for start, _, first in built)
    got = chunks.of(docs, build)
    assert [c.stop - c.start for c in got] == [k * segment_log.INLINE_RUN for k in (8, 4, 2, 1, 1)]
    assert [d for c in got for d in c.part] == docs


def test_a_join_that_fails_leaves_its_runs_unjoined_and_the_joining_thread_goes_on(monkeypatch):
    """A join whose build fails (memory, say) leaves the runs it was to join as they are, read in order, and is not
    tried again at each write while its documents stay; the joining thread goes on: ``wait_for_joins`` returns, and
    a later join is made."""
    import spanseek.core.segment_log as segment_log

    monkeypatch.setattr(segment_log, "INLINE_RUN", 2)
    failing, tried = [True], []

    def build(_, docs, start):
        if len(docs) > 2 and failing[0]:
            tried.append((start, len(docs)))
            raise MemoryError("no room for the join")
        return tuple(docs)

    chunks, docs = segment_log.SegmentChunks(), [object() for _ in range(14)]
    for k in range(1, 13):
        chunks.of(docs[:k], build)
    wait_for_joins()
    got = chunks.of(docs[:12], build)
    assert max(c.stop - c.start for c in got) == 2 and [d for c in got for d in c.part] == docs[:12]
    assert tried and len(tried) == len(set(tried))
    failing[0] = False
    chunks.of(docs, build)
    wait_for_joins()
    got = chunks.of(docs, build)
    assert max(c.stop - c.start for c in got) >= 4 and [d for c in got for d in c.part] == docs


def test_replacing_or_deleting_a_document_deep_in_the_segment_builds_the_run_of_at_most_inline_run_that_held_it(
        monkeypatch):
    """A segment document replaced or deleted deep in a segment of 256 whose runs are joined: the next snapshot builds
    the field index parts and BM25 postings of the run of at most ``INLINE_RUN`` documents that held it, over those
    that stay, and of the new version (it built every run after it again: 255 documents here, 22-29 ms a snapshot at
    5,000 written documents); the runs it was joined from are read where the joined one lost a document, and joined
    again by the joining thread; each snapshot filters as a field index built over its documents."""
    import spanseek.core.segment_log as segment_log

    monkeypatch.setattr(segment_log, "INLINE_RUN", 4)
    rng = random.Random(0)
    base, terms, template, segment = written_one_by_one(256, rng)
    wait_for_joins()
    live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    assert len(live.fields.parts) == 8  # (the base's, and the runs joined: 128, 64, 32, 16, 8, and 4 and 4 written last)
    built, posted = counted_builds(monkeypatch)
    made, token_rows = [], segment_log._token_rows
    monkeypatch.setattr(segment_log, "_token_rows", lambda base: lambda docs, *at: made.extend(docs) or token_rows(
        base)(docs, *at))
    replaced = segment.pop(1)
    segment.append(encoded({"id": replaced.id, "title": "n", "meta": {"i": -1}}, rng))
    live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    assert sum(built) <= 4 + 1 and sum(posted) <= 2 * (4 + 1)  # (a document: one or two passages)
    assert made == segment[-1:]  # (the token map rows of those after it are copied, renumbered)
    token_map_as_copied(live, base, segment)
    filters_as_built_over(live, base.docs + [doc.record for doc in segment], rng, 10)
    assert live.fields.documents_of(SearchFilter.from_json({"meta": {"i": -1}})).tolist() == [False] * 275 + [True]
    wait_for_joins()
    for at in (2, 100, 200, 250):  # deletions, deep and near the end
        del segment[at]
        built.clear()
        live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
        assert sum(built) <= 4
        filters_as_built_over(live, base.docs + [doc.record for doc in segment], rng, 5)
        token_map_as_copied(live, base, segment)
        wait_for_joins()
    live = LiveIndex(base, segment, np.zeros(0, np.int64), template, terms)
    assert len(live.fields.parts) <= 12, [len(p.ids) for p in live.fields.parts[1:]]  # (the runs read apart joined again)
    seg_terms = [t for doc in segment for t in doc.terms]
    np.testing.assert_array_equal(live.lexical.scores(["?"], [["w"]]), counted_over_all(
        terms, seg_terms, np.ones(len(base.passages) + len(seg_terms), bool), [["w"]]))


def test_deleting_the_last_written_documents_one_by_one_builds_each_remaining_run_once(monkeypatch):
    """The last-written documents of a segment of 64 deleted one by one: the runs left are built once, at the first
    such snapshot, and read by the later ones (a run cut again is built again, once; each snapshot built the cut run
    again and kept it not: 24 ms a delete at 4,096 written documents), and each filters as a field index built over
    its documents."""
    rng = random.Random(0)
    base, terms, template, segment = written_one_by_one(64, rng)
    built, posted = counted_builds(monkeypatch)
    snapshots = {k: LiveIndex(base, segment[:k], np.zeros(0, np.int64), template, terms) for k in range(63, 55, -1)}
    assert sum(built) < 2 * 64 and sum(posted) < 2 * sum(len(doc.passages) for doc in segment)  # (each: 476 and more)
    for k, live in snapshots.items():
        filters_as_built_over(live, base.docs + [doc.record for doc in segment[:k]], rng, 3)


def test_replacing_or_deleting_the_last_written_document_costs_about_an_append_not_the_segment(monkeypatch):
    """Over 100,000 written documents, a write that replaces or deletes the last-written one reads the parts and rows
    of the documents before it as held, as an append does: its snapshot's parts and rows take about an append's CPU
    (they looked up every held document again, and copied every row: 103-110 ms against an append's 2 ms), and a
    delete copies no row (it read the first rows of the buffers the snapshot before read)."""
    from spanseek.core import segment_log

    monkeypatch.setattr(segment_log, "INLINE_RUN", 1 << 20)  # (no joins: the writes' own CPU alone)

    def rows(docs, before, used):
        n = used.get("n", 0)
        return {"n": (np.arange(n, n + 3 * len(docs)), np.full(len(docs), 3, np.int64))}

    segment = [object() for _ in range(100_000)]
    chunks, appended = segment_log.SegmentChunks(), segment_log.AppendedRows()

    def snapshot() -> float:
        t0 = time.process_time()
        chunks.of(segment, lambda _, docs, __: len(docs))
        appended.of(segment, rows, {"n": "n"})
        return time.process_time() - t0

    snapshot()
    cost = {}
    for write in ("append", "replace", "delete"):
        best = np.inf
        for _ in range(8):
            if write == "append":
                segment.append(object())
            elif write == "replace":
                segment[-1:] = [object()]
            else:
                held = appended.buffers["n"]
                segment.pop()
            best = min(best, snapshot())
            if write == "delete":
                assert appended.buffers["n"] is held
        cost[write] = best
    assert max(cost["replace"], cost["delete"]) < 10 * cost["append"] + 0.002, cost
    assert [c.part for c in chunks.of(segment, lambda _, docs, __: len(docs))] == [
        c.stop - c.start for c in chunks.chunks] and chunks.chunks[-1].stop == len(segment)
    assert appended.of(segment, rows, {"n": "n"})["n"].tolist() == list(range(3 * len(segment)))


def test_a_segment_document_replaced_near_the_start_makes_the_rows_after_it_in_one_pass(monkeypatch):
    """A segment document replaced near the start of a segment of 64: the next snapshot makes the token map rows,
    passage runs, kept ids and vectors of the documents after it in one pass a column (it made them one document at a
    time: 270 ms a snapshot at 5,000 written documents, against 8 ms), the same rows as the segment's copied
    together, and the snapshot before the write still reads its own."""
    from spanseek.core.segment_log import AppendedRows

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(20)], rng)
    template = empty_like(base.faiss)
    segment = [dataclasses.replace(doc, vectors=np.random.default_rng(i).standard_normal(doc.vectors.shape).astype(
        np.float16), kept=np.arange(doc.tokens) % 3 > 0)
        for i, doc in enumerate(encoded({"id": f"n{i}", "title": "n"}, rng) for i in range(64))]
    for k in range(1, len(segment) + 1):
        before = LiveIndex(base, segment[:k], np.zeros(0, np.int64), template, None)
        before.seg_vectors  # noqa: B018  (a search)
    puts: list[str] = []
    put = AppendedRows._put
    monkeypatch.setattr(AppendedRows, "_put", lambda self, name, *a: puts.append(name) or put(self, name, *a))
    written = [*segment[:1], *segment[2:], encoded({"id": segment[1].id, "title": "n"}, rng)]
    live = LiveIndex(base, written, np.zeros(0, np.int64), template, None)
    live.seg_vectors  # noqa: B018
    assert sorted(puts) == sorted(set(puts)) and len(puts) == 10  # (nine token map columns and the vectors)
    token_map_as_copied(live, base, written)
    token_map_as_copied(before, base, segment)


def written_one_by_one(n: int, rng: random.Random) -> tuple[PhraseIndex, Any, Any, list[EncodedDocument]]:
    """A base of 20 documents with BM25 terms, its empty faiss index and ``n`` documents written over it one by one,
    each write's snapshot made."""
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(20)], rng)
    terms = one_term(base)
    template = empty_like(base.faiss)
    segment = [encoded({"id": f"n{i}", "title": "n", "meta": {"i": i}}, rng) for i in range(n)]
    for k in range(1, len(segment) + 1):
        LiveIndex(base, segment[:k], np.zeros(0, np.int64), template, terms)
    return base, terms, template, segment


def one_term(base: PhraseIndex) -> Any:
    """BM25 terms for ``base`` (each passage the one term ``w``), and a lexical index's settings on it."""
    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms

    n = len(base.passages)
    base.lexical = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"), analyzer="folded")
    return BaseTerms(sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), np.zeros(n, int))), shape=(n, 1)),
                     {"w": 0}, np.ones(n, np.int64))


def counted_builds(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The documents of each field index part built and the passages of each BM25 postings run, from now on, by the
    calling thread (what a write waits for; the joining thread's joins are not counted)."""
    import threading

    from spanseek.core.live_lexical import SegmentPostings

    built: list[int] = []
    posted: list[int] = []
    real, real_postings = FieldIndex.build, SegmentPostings.of
    me = threading.get_ident()

    def counted(into: list[int], n: int) -> None:
        if threading.get_ident() == me:
            into.append(n)

    monkeypatch.setattr(FieldIndex, "build", classmethod(lambda cls, docs, *passages: counted(built, len(docs)) or real(
        docs, *passages)))
    monkeypatch.setattr(SegmentPostings, "of", classmethod(lambda cls, c: counted(posted, len(c)) or real_postings(c)))
    return built, posted


def test_an_older_snapshot_scanned_after_a_newer_one_reads_the_first_of_its_widened_rows():
    """Each write's snapshot scanned, then the one before it (a search still in flight on it): the older one's
    float32 rows are the first rows of the newer one's buffer, bit for bit, and the buffer stays (it was started over,
    copying every row held, at each such scan, and again at the next write's)."""
    from spanseek.core.widened import widened_rows

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t"} for d in range(10)], rng)
    template, segment = empty_like(base.faiss), []
    for i in range(12):
        doc = encoded({"id": f"n{i}", "title": "n"}, rng)
        older = LiveIndex(base, list(segment), np.zeros(0, np.int64), template, None)
        segment.append(dataclasses.replace(doc, vectors=np.random.default_rng(i).standard_normal(
            doc.vectors.shape).astype(np.float16)))
        LiveIndex(base, list(segment), np.zeros(0, np.int64), template, None).segment_scan_vectors()
        buffer = widened_rows(base).buffer
        got = older.segment_scan_vectors()
        assert widened_rows(base).buffer is buffer and (not len(got) or np.shares_memory(got, buffer))
        assert np.array_equal(got, older.seg_vectors.astype(np.float32))


def test_a_base_and_its_terms_are_freed_when_their_last_snapshot_goes_without_the_garbage_collector():
    """What a base's snapshots share (the segment's rows and runs, kept on the base and on its BM25 terms) refers to
    neither, so once a merge's new base serves, the old base and its terms go with their last snapshot (a function
    kept with them referred to them: a cycle that only a full garbage collection freed)."""
    import gc
    import weakref

    import scipy.sparse as sp

    from spanseek.core.live_lexical import BaseTerms

    rng = random.Random(0)
    base = memory_base([{"id": f"d{d}", "title": "t", "meta": {"n": d}} for d in range(20)], rng)
    n = len(base.passages)
    terms = BaseTerms(sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), np.zeros(n, int))), shape=(n, 1)),
                      {"w": 0}, np.ones(n, np.int64))
    base.lexical = SimpleNamespace(retriever=SimpleNamespace(k1=1.5, b=0.75, method="lucene"), analyzer="folded")
    segment = [dataclasses.replace(encoded({"id": f"n{i}", "title": "n"}, rng), terms=(["w", f"x{i}"],))
               for i in range(6)]
    gc.disable()
    try:
        for k in range(1, 7):
            live = LiveIndex(base, segment[:k], np.asarray([1]), empty_like(base.faiss), terms)
            live.seg_vectors, live.segment_scan_vectors()  # noqa: B018
        held = weakref.ref(base), weakref.ref(terms)
        del base, terms, live
        assert [ref() for ref in held] == [None, None]
    finally:
        gc.enable()


def test_joins_waiting_for_the_joining_thread_keep_neither_the_base_its_terms_nor_its_documents(monkeypatch):
    """Joins of a base's runs still queued behind others when the base goes (merged away: its last snapshot dropped)
    keep none of it: the base, its BM25 terms and its segment's documents are freed at once, not when the queue
    drains (a queued BM25 join's build referred to the terms, and held the run's documents), and the joins are not
    built."""
    import gc
    import weakref

    from spanseek.core import segment_log
    from spanseek.core.live_lexical import SegmentPostings

    monkeypatch.setattr(segment_log, "INLINE_RUN", 2)
    gate, busy, joined = threading.Event(), threading.Event(), []
    real_of = SegmentPostings.of
    monkeypatch.setattr(SegmentPostings, "of", classmethod(
        lambda cls, written: (joined.append(len(written)) if threading.current_thread().name.endswith("joins")
                              else None) or real_of(written)))

    def held_up(*_):
        busy.set()
        gate.wait(10)

    rng = random.Random(0)
    blocker = segment_log.SegmentChunks()
    blocker._queued[(0, 1)] = (-1, ())
    gc.disable()
    try:
        segment_log.JOINER.add(blocker, (0, 1), -1, held_up)  # the thread busy with another base's join
        assert busy.wait(10)
        base, terms, template, segment = written_one_by_one(12, rng)
        assert segment_log.JOINER._jobs.qsize() > 0  # (joins of this base's runs, waiting)
        held = weakref.ref(base), weakref.ref(terms), weakref.ref(segment[0])
        del base, terms, template, segment
        assert [ref() for ref in held] == [None, None, None]
    finally:
        gate.set()
        gc.enable()
    joined.clear()
    wait_for_joins()
    assert joined == []
