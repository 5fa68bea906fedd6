"""A live snapshot's token map (``core.chained``): its base's arrays followed by its segment's, read without copying
either, against the arrays joined; what a search computes from the token map (the tokens spans may start and end at,
the wide gaps, the layout's per-document counts) against the same computed over the joined arrays; and the cost of
a write and of the first search after it, which grows with the segment, not the base.

    .venv/bin/python -m pytest -q tests/core/test_chained.py
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
import tracemalloc

import numpy as np
import pytest

from spanseek.core.chained import ChainedArray
from spanseek.core.dense import DenseLeg
from spanseek.core.hits import HitBuilder
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.segment import EncodedDocument, LiveIndex, empty_like
from spanseek.core.selection import UNIT_OF_PASSAGE, Layout
from spanseek.core.text import FLAG_END, FLAG_START
from tests.core.test_segment import DIM, memory_base


@pytest.mark.parametrize(("n_first", "n_then"), [(0, 0), (5, 0), (0, 4), (5, 4)])
def test_a_chained_array_reads_as_the_two_arrays_joined(n_first, n_then):
    rng = np.random.default_rng(n_first * 10 + n_then)
    first, then = rng.integers(0, 99, (n_first, 2)).astype(np.int32), rng.integers(0, 99, (n_then, 2))
    whole, chained = np.concatenate([first, then.astype(np.int32)]), ChainedArray(first, then)
    n = len(whole)
    assert len(chained) == n and chained.shape == whole.shape and chained.dtype == np.int32
    assert np.array_equal(np.asarray(chained), whole) and np.array_equal(np.asarray(chained, np.int64), whole)
    for i in range(-n, n):
        assert np.array_equal(chained[i], whole[i]) and chained[np.int64(i), 1] == whole[i, 1]
    for i in (n, -n - 1):
        with pytest.raises(IndexError):
            chained[i]
    bounds = [None, *range(-n - 1, n + 2)]
    for start in bounds:
        for stop in bounds:
            for step in (None, 1, 2, -1):
                assert np.array_equal(chained[start:stop:step], whole[start:stop:step]), (start, stop, step)
    if n:
        ids = rng.integers(-n, n, (3, 4))
        assert np.array_equal(chained[ids], whole[ids]) and np.array_equal(chained[ids, 0], whole[ids, 0])
        assert np.array_equal(chained[1:, 0], whole[1:, 0]) and np.array_equal(chained[ids[0], :], whole[ids[0], :])
    assert chained[np.zeros(0, np.int64)].shape == (0, 2)
    with pytest.raises(IndexError):
        chained[np.asarray([n])]
    mask = rng.random(n) < 0.5
    assert np.array_equal(chained[mask], whole[mask]) and chained.sum() == whole.sum()
    with pytest.raises(IndexError):
        chained[np.ones(n + 1, bool)]


def offsets(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2) int32 offsets of one-character tokens a space apart, and one in 20 followed by a wide gap."""
    starts = np.cumsum(np.where(rng.random(n) < 0.05, 4, 2)).astype(np.int32)
    return np.stack([starts, starts + 1], 1)


def random_base(passages: int, rng: np.random.Generator, longest: int = 6):
    """``memory_base`` with ``passages`` passages of 1 to ``longest`` tokens, random flags and offsets with wide
    gaps."""
    base = memory_base([{"id": f"d{d}", "title": f"T{d}"} for d in range(passages // 2)], random.Random(0))
    lengths = rng.integers(1, longest + 1, len(base.passages))
    n = int(lengths.sum())
    base.token_passage = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    base.passage_tokens = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    base.token_flags = rng.integers(0, 4, n).astype(np.uint8)
    base.token_offsets = offsets(n, rng)
    base.vectors = np.zeros((n, DIM), np.float16)
    base.faiss = empty_like(base.faiss)
    return base


def written(k: int, rng: np.random.Generator) -> EncodedDocument:
    lengths = rng.integers(1, 7, rng.integers(1, 3))
    n = int(lengths.sum())
    return EncodedDocument({"id": f"new{k}", "title": f"New {k}"},
                           tuple({"para": i, "text": "new"} for i in range(len(lengths))),
                           np.ones((n, DIM), np.float16), offsets(n, rng),
                           rng.integers(0, 4, n).astype(np.uint8), lengths, np.ones(n, bool),
                           tuple([] for _ in lengths))


def joined(live: LiveIndex) -> PhraseIndex:
    """The snapshot as copying made it: an index of its documents and passages, its token map as plain arrays."""
    whole = copy.copy(live.base)
    whole.__dict__.pop("_derived", None)
    whole.passages, whole.docs = list(live.passages), list(live.docs)
    for name in ("token_passage", "token_offsets", "token_flags", "passage_tokens"):
        setattr(whole, name, np.asarray(getattr(live, name)))
    return whole


def spannable(index: PhraseIndex, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    return DenseLeg(index, (), None, max_tokens).spannable(max_tokens)


@pytest.mark.parametrize("seed", range(4))
def test_what_a_search_computes_from_a_snapshot_s_token_map_is_what_the_joined_arrays_give(seed):
    rng = np.random.default_rng(seed)
    base = random_base(60, rng)
    segment = [written(k, rng) for k in range(int(rng.integers(0, 5)))]
    bare = written(9, rng)  # a document none of whose tokens may start or end a phrase
    segment.insert(0, dataclasses.replace(bare, flags=np.zeros_like(bare.flags)))
    for _ in range(2):  # the second snapshot reuses the base's parts
        live = LiveIndex(base, segment, np.zeros(0, np.int64), empty_like(base.faiss), None)
        whole = joined(live)
        assert np.array_equal(whole.token_passage, np.repeat(np.arange(len(live.passages)), np.diff(whole.passage_tokens)))
        for max_tokens in (1, 3):
            got, want = spannable(live, max_tokens), spannable(whole, max_tokens)
            assert all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want, strict=True))
            assert want[0].sum() and (whole.token_flags & FLAG_START).any() and (whole.token_flags & FLAG_END).any()
        gaps = HitBuilder(whole).wide_gaps()  # tokens followed by a gap in their passage
        assert len(gaps) and np.array_equal(HitBuilder(live).wide_gaps(), gaps)
        units = {u: f(live) for u, f in UNIT_OF_PASSAGE.items() if f is not None}
        got_layout, want_layout = Layout(live, units), Layout(whole, {u: np.asarray(of) for u, of in units.items()})
        for unit in units:
            assert np.array_equal(got_layout.units_per_doc[unit], want_layout.units_per_doc[unit])
        assert np.array_equal(got_layout.tokens_per_doc, want_layout.tokens_per_doc)
        segment = segment[:-1]


def test_a_write_and_the_first_search_after_it_cost_the_segment_not_the_base(tmp_path):
    """A snapshot copies none of its base's token arrays (a memory-mapped one stays memory-mapped), and what a
    search computes from the token map is the base's (made once a base) and the segment's."""
    rng = np.random.default_rng(0)
    base = random_base(10_000, rng, longest=60)
    np.save(tmp_path / "offsets.npy", base.token_offsets)
    base.token_offsets = np.load(tmp_path / "offsets.npy", mmap_mode="r")
    units_of = {u: f for u, f in UNIT_OF_PASSAGE.items() if f is not None}

    def first_search(index) -> float:
        t0 = time.process_time()
        spannable(index, 10)
        HitBuilder(index).wide_gaps()
        Layout(index, {u: f(index) for u, f in units_of.items()})
        return time.process_time() - t0

    on_base = first_search(base)
    LiveIndex(base, [], np.zeros(0, np.int64), empty_like(base.faiss), None)  # once a base: its field index, imports
    tracemalloc.start()
    live = LiveIndex(base, [written(0, rng)], np.asarray([3], np.int64), empty_like(base.faiss), None)
    copied = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    held = sum(a.nbytes for a in (base.token_passage, base.token_offsets, base.token_flags, base.passage_tokens))
    assert copied < held / 10, (copied, held)  # (each passage's document, 8 bytes a passage, is still made)
    assert isinstance(live.token_offsets[:5], np.memmap)
    tracemalloc.start()
    first_search(live)
    computed = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert computed < held / 10, (computed, held)
    assert min(first_search(live) for _ in range(3)) < on_base / 10


def test_a_snapshot_s_layout_sorts_the_segment_s_passages_not_the_base_s(monkeypatch):
    """The layout's per-document counts (each a sort of (unit, document) pairs and a count, 120 ms at 1M passages)
    are the base's, counted once a base, joined to the segment's."""
    import spanseek.core.selection as selection

    rng = np.random.default_rng(0)
    base = random_base(1000, rng)
    units_of = {u: f for u, f in UNIT_OF_PASSAGE.items() if f is not None}
    Layout(base, {u: f(base) for u, f in units_of.items()})  # the base's searcher's
    sorted_sizes: list[int] = []
    distinct = selection.distinct
    monkeypatch.setattr(selection, "distinct", lambda values: sorted_sizes.append(len(values)) or distinct(values))
    segment = [written(k, rng) for k in range(3)]
    for write in range(1, 4):
        live = LiveIndex(base, segment[:write], np.zeros(0, np.int64), empty_like(base.faiss), None)
        layout = Layout(live, {u: f(live) for u, f in units_of.items()})
        assert len(layout.tokens_per_doc) == len(live.docs) == len(base.docs) + write
    assert sorted_sizes and max(sorted_sizes) <= sum(len(doc.passages) for doc in segment)


def test_a_snapshot_s_layout_reads_its_base_s_per_document_counts_where_they_lie():
    """A write's layout allocates a fraction of the base's per-document counts (it copied them: an array over every
    document, each unit's and the tokens'), and counts a selection's units and tokens as the joined counts do."""
    import tracemalloc

    from spanseek.core.selection import per_document

    rng = np.random.default_rng(0)
    base = random_base(200_000, rng)
    units_of = {u: f for u, f in UNIT_OF_PASSAGE.items() if f is not None}
    Layout(base, {u: f(base) for u, f in units_of.items()})  # the base's searcher's
    live = LiveIndex(base, [written(k, rng) for k in range(5)], np.zeros(0, np.int64), empty_like(base.faiss), None)
    unit_of_passage = {u: f(live) for u, f in units_of.items()}
    tracemalloc.start()
    try:
        layout = Layout(live, unit_of_passage)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 0.25 * 8 * len(base.docs)
    units, tokens = per_document({u: np.asarray(of) for u, of in unit_of_passage.items()},
                                 np.diff(np.asarray(live.passage_tokens)), len(live.docs))
    for docs in (None, rng.random(len(live.docs)) < 0.3):
        assert layout.unit_count(docs) == {u: int(c.sum() if docs is None else c[docs].sum()) for u, c in units.items()}
    docs = rng.random(len(live.docs)) < 0.3
    assert layout.tokens_per_doc[docs].sum() == tokens[docs].sum()


def test_a_snapshot_computes_its_segment_s_part_once_however_many_rounds_read_it():
    """What a search derives from a snapshot's token map (the spannable tokens each unit search's round reads) is
    computed over its segment once a snapshot, not at every read (7.6 ms a read at 1,200 demo-sized documents)."""
    from spanseek.core.chained import derived

    rng = np.random.default_rng(0)
    base = random_base(50, rng)
    computed: list[int] = []

    def count(index):
        computed.append(len(index.token_passage))
        return np.asarray(index.token_flags).copy()

    first = LiveIndex(base, [written(k, rng) for k in range(3)], np.zeros(0, np.int64), empty_like(base.faiss), None)
    second = LiveIndex(base, first.segment[:2], np.zeros(0, np.int64), empty_like(base.faiss), None)
    for live in (first, first, first, second, second):
        got = derived(live, "flags", count, "rows")
        assert np.array_equal(np.asarray(got), np.asarray(live.token_flags))
    seg_tokens = [len(live.token_passage) - len(base.token_passage) for live in (first, second)]
    assert computed == [len(base.token_passage), seg_tokens[0], seg_tokens[1]]


class Watched(np.ndarray):
    """An array that notes the numpy functions run over it (in ``read``)."""

    read: list[str] = []

    def __array_function__(self, func, types, args, kwargs):
        Watched.read.append(func.__name__)
        return super().__array_function__(func, types, args, kwargs)


def test_a_write_joins_no_vectors_and_the_first_search_joins_them_once(monkeypatch):
    """A write's snapshot over a flat base reads none of its segment's vectors (joining them cost every write a copy
    of all of them); its first read of them joins them, once, as the documents hold them."""
    rng = np.random.default_rng(0)
    base = random_base(20, rng)
    segment = [written(k, rng) for k in range(3)]
    segment = [dataclasses.replace(d, vectors=(d.vectors * (k + 1)).view(Watched)) for k, d in enumerate(segment)]
    monkeypatch.setattr(Watched, "read", [])
    live = LiveIndex(base, segment, np.zeros(0, np.int64), empty_like(base.faiss), None)
    assert Watched.read == []
    want = np.concatenate([np.asarray(d.vectors).view(np.ndarray) for d in segment])
    assert np.array_equal(live.seg_vectors, want) and live.seg_vectors is live.seg_vectors


def test_a_write_over_a_base_that_keeps_codes_joins_none_of_the_segment_s_codes(monkeypatch):
    """Where the base's fine store reads codes, a write's snapshot makes its new document's codes and joins none of the
    segment's (it copied every segment document's codes at each write); its first read of them joins them, once."""
    rng = np.random.default_rng(0)
    base = random_base(20, rng)
    base.codes = base.faiss.sa_encode(np.zeros((len(base.token_passage), DIM), np.float32))
    segment = [dataclasses.replace(written(k, rng), vectors=rng.standard_normal((n, DIM)).astype(np.float16))
               for k, n in enumerate((3, 2, 4))]
    LiveIndex(base, segment[:2], np.zeros(0, np.int64), empty_like(base.faiss), None)  # the writes before
    for doc in segment[:2]:  # their codes, as those writes made them, now watched
        made, parts = doc.__dict__["_written_parts"]
        doc.__dict__["_written_parts"] = (made, dataclasses.replace(parts, codes=parts.codes.view(Watched)))
    monkeypatch.setattr(Watched, "read", [])
    live = LiveIndex(base, segment, np.zeros(0, np.int64), empty_like(base.faiss), None)
    assert Watched.read == []
    want = base.faiss.sa_encode(np.concatenate([d.vectors for d in segment]).astype(np.float32))
    assert np.array_equal(np.asarray(live.seg_codes).view(np.ndarray), want) and live.seg_codes is live.seg_codes
