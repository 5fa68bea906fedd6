"""A served index with live writes: an immutable base, a small segment of documents written since, and tombstones.

    spanseek serve --index INDEX_DIR --writes     # (service.live keeps the segment; indexer.live encodes into it)

``LiveIndex`` is a ``PhraseIndex`` whose rows are the base's followed by the segment's: token ids, passage and
document numbers continue after the base's, as ``spanseek index add`` numbers them, so the searcher, its stages and
the hits run on it unchanged. Each write publishes a new ``LiveIndex`` (a snapshot: the base's passages, documents,
token map and field index are read through, not copied, ``core.chained.Chained``, ``ChainedArray`` and
``core.fieldindex.JoinedFieldIndex``, so a memory-mapped base array stays memory-mapped; the segment's are made once
a written document and shared by the base's snapshots, ``core.segment_log``) and a new ``Searcher`` over
it (``searcher_over``). What the first search computes from the token map (the tokens spans may start and end at,
the wide gaps where a paragraph break can be) is the base's, made once a base, joined to the segment's
(``core.chained.derived``); so are the per-document counts of its selections' layout (``core.selection.Layout``).

- **Dense leg.** ``SegmentedFaiss`` searches the base's faiss index and a faiss index of the segment's (kept) tokens
  made from the base's trained, empty index (so the same quantiser and codes), and merges the two top-k lists by
  score. For an exact (Flat) factory that is the exact top k of the union; for IVF the same lists are probed in
  both parts, so it is what one IVF index over both would return. Where both are flat (``flat_parts``), the dense
  leg scans the base once a batch and the segment in full, merging each round's lists as ``search`` does
  (``core.dense.SegmentedScan``), instead of asking faiss again for each deeper round. The segment's float32 vectors
  it multiplies are widened once a written document, into rows its base's snapshots share (``core.widened``).
- **What a write makes.** A written document's faiss codes (``WrittenParts``) are made once, by the first snapshot
  that needs them, and kept on it for the later snapshots of the same base (no float32 copy of its vectors is kept:
  it would hold twice its float16 vectors). The segment's faiss index is made at a snapshot's first search that asks
  faiss (never over a flat base, whose segment the dense leg scans itself) and is filled from those parts (an IVF
  index takes the codes as they are: no quantiser search, no encoding again; another takes the float32 vectors
  widened then), then only read: a search in flight keeps the snapshot it started on. The segment's float16
  vectors and its codes are joined at a snapshot's first read of them (``seg_vectors``, ``seg_codes``), not by the
  write.
- **Tombstones** are the base's document numbers deleted or replaced by a write: they join the deletion mask
  (``deleted_docs``) that ``core.selection`` applies inside both legs. A document of the segment that is replaced
  or deleted simply leaves the segment (a replacement is appended at its end).
- **Lexical leg.** ``core.live_lexical.LiveLexical`` scores BM25 (bm25s' Lucene variant, the formula the base's
  ``lexical/`` was built with) over the live passages, base and segment together: the number of passages, their mean length and each
  term's document frequency count the live passages only, as an index built from scratch over the same documents
  would. Term frequencies are kept per passage (the base's tokenised once), and a snapshot's statistics are the
  base's (counted once a base), less its dead passages', plus the segment's: O(segment + tombstones) postings.

So a search over base + segment + tombstones ranks as one over an index built from scratch from the live documents
(base order, then the segment in write order), up to float rounding. What differs: a base with a quantised fine
store (sq8/sq4) reads the segment's neighbour vectors as fp16.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spanseek.core.chained import Chained, ChainedArray, TokenMap
from spanseek.core.copy_table import doc_runs
from spanseek.core.dense import merge_top
from spanseek.core.faiss_spec import ivf_of, unmapped
from spanseek.core.fieldindex import FieldIndex, JoinedFieldIndex, run_positions
from spanseek.core.flat_search import flat_vectors
from spanseek.core.hits import HitBuilder
from spanseek.core.lexical import passage_text, tokenize
from spanseek.core.live_lexical import BaseTerms, LiveLexical, SegmentPostings, WrittenTerms
from spanseek.core.phrase_index import (
    PhraseIndex,
    as_float32,
    decode_codes,
    faiss_search_parameters,
)
from spanseek.core.search import Searcher
from spanseek.core.segment_log import (
    SegmentPassages,
    SegmentRecords,
    appended_rows,
    segment_chunks,
    segment_columns,
)
from spanseek.core.selection import int64_vector
from spanseek.core.widened import widened_rows


@dataclass(frozen=True, eq=False)
class EncodedDocument:
    """One document encoded as an index build encodes it (``indexer.shards``): its store records and token rows.
    Compared by identity: what a base's snapshots share finds the documents it holds so (``core.segment_log``), and
    arrays have no single truth value to compare by.

    record: its ``docs.jsonl`` line; passages: its ``passages.jsonl`` lines without ``doc``; vectors: (n, d) float16;
    offsets: (n, 2) int32; flags: (n,) uint8; ntokens: (p,) tokens per passage; kept: (n,) bool, the tokens faiss
    holds (the filter head's choice; all without a threshold); terms: each passage's BM25 terms (``tokenize``).
    """

    record: dict[str, Any]
    passages: tuple[dict[str, Any], ...]
    vectors: np.ndarray
    offsets: np.ndarray
    flags: np.ndarray
    ntokens: np.ndarray
    kept: np.ndarray
    terms: tuple[list[str], ...]

    @property
    def id(self) -> str:
        return str(self.record["id"])

    @property
    def tokens(self) -> int:
        return len(self.vectors)


def passage_terms(title: str, texts: Sequence[str], analyzer: str) -> list[list[str]]:
    """The BM25 terms of a document's passages by ``analyzer`` (what ``core.lexical`` indexes: title + passage)."""
    return tokenize([passage_text(title, t) for t in texts], analyzer) if texts else []


@dataclass(frozen=True)
class SegmentParams:
    """Per-call faiss parameters for each part of a ``SegmentedFaiss``."""

    base: Any
    segment: Any
    keep: tuple[Any, ...] = ()  # what the segment's selector reads through bare pointers


class SegmentedFaiss:
    """The base's faiss index and the segment's, searched as one (module docstring): ``search`` merges the two
    top-k lists by score. Ids are token ids of the live index: the segment's index numbers its rows itself, and
    ``segment_ids`` maps them (a faiss id map would hand a selector its own row numbers, not the token ids).

    The segment's index (``segment``: ``template`` filled with its documents' ``WrittenParts``, ``segment_index``)
    is made at its first search and kept, never added to again: a search in flight on this snapshot reads it while a write makes the next
    snapshot's. The dense leg over a flat base scans the segment's vectors itself (``flat_parts``), so a write over
    a flat base copies no vector into a faiss index.
    """

    def __init__(self, base: Any, template: Any, documents: Sequence[EncodedDocument], keep_codes: bool,
                 segment_ids: np.ndarray):
        self.base = base
        self.segment_ids = segment_ids
        self.d = base.d
        self.ntotal = int(base.ntotal + len(segment_ids))
        self.ivf_index = base  # core.faiss_spec.ivf_of looks through to the base's lists
        self._template, self._documents, self._keep_codes = template, documents, keep_codes
        self._segment: Any = None
        self._lock = threading.Lock()

    @property
    def segment(self) -> Any:
        """The segment's faiss index (its rows: ``segment_ids``), made at the first call."""
        with self._lock:
            if self._segment is None:
                rows = [written_parts(doc, self.base, self._keep_codes).rows for doc in self._documents]
                self._segment = segment_index(self._template, [
                    as_float32(doc.vectors[doc.kept]) if r is None else r for doc, r in zip(self._documents, rows,
                                                                                         strict=True)])
            return self._segment

    def search(self, x: np.ndarray, k: int, params: SegmentParams | None = None) -> tuple[np.ndarray, np.ndarray]:
        dist, ids = self.base.search(x, k, params=params.base if params is not None else None)
        if not len(self.segment_ids):
            return dist, ids
        d2, i2 = self.segment.search(x, k, params=params.segment if params is not None else None)
        return merge_top(dist, ids, d2, np.where(i2 >= 0, self.segment_ids[np.maximum(i2, 0)], -1), k)

    def flat_parts(self) -> Any | None:
        """The base, where it and the segment are flat inner-product indexes: the dense leg then scans the base
        once a batch (``core.flat_search``) and the segment's vectors in full (``core.dense.SegmentedScan``) instead
        of searching them again each round; None otherwise (IVF, PQ), which ``search`` serves."""
        import faiss

        flat = type(self._template) in (faiss.IndexFlat, faiss.IndexFlatIP)
        return self.base if flat and flat_vectors(self.base) is not None else None


def empty_like(index: Any) -> Any:
    """An empty faiss index with ``index``'s training (quantiser, codebooks, rotation); an id map's inner index (an
    ``IDMap,Flat`` base's ``Flat``): the segment's index numbers its rows itself, ``SegmentedFaiss.segment_ids`` maps
    them, and an id map takes no rows without ids."""
    import faiss

    index = inner = unmapped(index)
    empty: Any
    if isinstance(inner, faiss.IndexFlat):
        empty = faiss.IndexFlat(inner.d, inner.metric_type)
    else:
        empty = faiss.clone_index(index)  # once per base: the copy of its lists is dropped at once
        empty.reset()
    return empty


@dataclass(frozen=True)
class WrittenParts:
    """What one written document adds to each snapshot's segment, made once a document and base (``written_parts``).

    rows: what its kept tokens fill the segment's faiss index with, where it takes codes: (k, code_size) uint8 codes
    of an IVF index's list and code (``_filled_by_codes``); None for the others, filled with float32 vectors widened
    from the document's at the segment index's making, not kept (they would double what the document holds);
    codes: (n, code_size) uint8, every token's ``sa_encode`` by the base's index, where the base's fine store reads
    codes (``PhraseIndex.code_vectors``).
    """

    rows: np.ndarray | None
    codes: np.ndarray | None


def _filled_by_codes(index: Any) -> Any | None:
    """The IVF index through which an index like ``index`` is filled with codes (``add_sa_codes``: each token's list
    and code, as ``sa_encode`` makes them, the same lists and codes as ``add``) when it is an IVF index or a
    pre-transform (OPQ) over one that stores codes one by one; None otherwise (flat; fast-scan lists, packed in
    blocks): filled with float32 vectors by ``add``."""
    import faiss

    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    return inner if isinstance(inner, faiss.IndexIVF) and not isinstance(inner, faiss.IndexIVFFastScan) else None


def written_parts(doc: EncodedDocument, index: Any, keep_codes: bool) -> WrittenParts:
    """``doc``'s ``WrittenParts`` over the base whose faiss index is ``index`` (``keep_codes``: the base's fine store
    reads codes), made at the first snapshot that holds the document and kept on it: a write widens and encodes its
    own document, not every document of the segment again. A document kept over a new base (written while a merge
    built it) has them made again, for that base's index; the document refers to the index weakly, so it keeps no
    base's index alive once the base is gone."""
    made = doc.__dict__.get("_written_parts")
    if made is not None and made[0]() is index:
        return made[1]
    codec = unmapped(index)  # (an id map encodes nothing itself)
    by_codes = _filled_by_codes(codec) is not None
    codes = (codec.sa_encode(as_float32(doc.vectors).reshape(len(doc.vectors), codec.d)) if keep_codes or by_codes
             else None)
    parts = WrittenParts(np.ascontiguousarray(codes[doc.kept]) if by_codes else None,  # type: ignore[index]
                         codes if keep_codes else None)
    # kept on the frozen record, as functools.cached_property does
    doc.__dict__["_written_parts"] = (weakref.ref(index), parts)
    return parts


def term_columns(doc: EncodedDocument, base_terms: BaseTerms) -> WrittenTerms:
    """``doc``'s passages' BM25 terms as columns of ``base_terms`` (``BaseTerms.numbered``), made at the first
    snapshot that holds the document and kept on it, as ``written_parts`` are: a write numbers its own terms."""
    made = doc.__dict__.get("_term_columns")
    if made is None or made[0]() is not base_terms:
        made = doc.__dict__["_term_columns"] = (weakref.ref(base_terms), base_terms.numbered(doc.terms))
    return made[1]


def live_fields(base: PhraseIndex, segment: Sequence[EncodedDocument]) -> JoinedFieldIndex:
    """The field index of ``base``'s documents followed by ``segment``'s: the base's built once a base, the segment's
    runs of documents once a run (``core.segment_log``), shared by the base's snapshots."""
    return JoinedFieldIndex(base.fields, *(c.part for c in segment_chunks(
        base, "fields", segment, lambda _, docs, __: FieldIndex.build([doc.record for doc in docs],
                                                                       [p for doc in docs for p in doc.passages]))))


def live_lexical(base: PhraseIndex, base_terms: BaseTerms, segment: Sequence[EncodedDocument],
                 deleted_docs: np.ndarray) -> LiveLexical:
    """The BM25 part of a snapshot of ``base`` holding ``segment`` with ``deleted_docs`` dead: the segment's postings
    built over runs of its documents, each run once a base (``core.segment_log``), read by the later snapshots."""
    assert base.lexical is not None
    postings = segment_chunks(base_terms, "postings", segment, lambda terms, docs, _: SegmentPostings.of(
        [term_columns(doc, terms) for doc in docs]))  # (given the terms: a join waiting keeps them not, ``Build``)
    return LiveLexical(base.lexical, base_terms, [c.part for c in postings], passages_of(base, deleted_docs))


def passages_of(index: PhraseIndex, docs: np.ndarray) -> np.ndarray:
    """The passages of documents ``docs`` (sorted, distinct): the index's passages by document, made once an index
    (again for a copy given other passages), then a run of them a document, not a pass over every passage."""
    made = index.__dict__.get("_doc_passages")
    if made is None or made[0] is not index.passages:
        made = index.__dict__["_doc_passages"] = (index.passages, doc_runs(index.passage_doc, len(index.docs)))
    order, starts = made[1]
    docs = np.asarray(docs, np.int64)
    return np.sort(order[run_positions(starts[docs], starts[docs + 1])])


def segment_index(template: Any, parts: Sequence[np.ndarray]) -> Any:
    """A faiss index of the segment's kept tokens, in order: ``template`` (the base's trained, empty index) filled
    with its documents' rows: an IVF index takes their codes (``WrittenParts.rows``: no quantiser search or encoding
    again), the others their float32 vectors (a flat index copies them in)."""
    import faiss

    out = faiss.clone_index(template)
    rows = [r for r in parts if len(r)]
    if not rows:
        return out
    ivf = _filled_by_codes(out)
    if ivf is None:
        out.add(np.concatenate(rows))
    else:
        ivf.add_sa_codes(np.concatenate(rows))
        out.ntotal = ivf.ntotal  # (a pre-transform counts what its add adds; this one went to its IVF directly)
    return out


class LiveIndex(PhraseIndex):
    """The base ``PhraseIndex`` followed by the segment's documents, less the tombstoned base documents.

    ``template``: ``empty_like(base.faiss)`` (kept by the caller, so each snapshot clones a small index);
    ``base_terms``: ``BaseTerms.of(base)`` when the base has a lexical part.
    """

    def __init__(self, base: PhraseIndex, segment: Sequence[EncodedDocument], tombstones: np.ndarray,
                 template: Any, base_terms: BaseTerms | None):
        self.base = base
        self.segment = list(segment)
        self.dir = base.dir
        n, d = len(base.token_passage), len(base.docs)
        self._seg_joined: dict[str, np.ndarray | None] = {}  # ``seg_vectors``, ``seg_codes``: joined at the first read
        self._seg_lock = threading.Lock()
        cols = segment_columns(base, self.segment)  # (the base's buffers: each document's rows made once)
        # the segment's token map, numbered from 0; the snapshot's is the base's followed by it, read where each lies
        seg = TokenMap(cols["token_passage"], cols["token_offsets"], cols["token_flags"], cols["passage_tokens"])
        self.token_parts = (base, seg)  # what core.chained.derived reads
        self.token_passage = ChainedArray(base.token_passage, cols["live_token_passage"])
        self.token_offsets = ChainedArray(base.token_offsets, seg.token_offsets)
        self.token_flags = ChainedArray(base.token_flags, seg.token_flags)
        self.passage_tokens = ChainedArray(base.passage_tokens, cols["live_passage_tokens"])
        seg_passages = SegmentPassages(self.segment, d, cols["passage_starts"], cols["live_passage_doc"])
        self.passages = Chained(base.passages, seg_passages)  # the base's lists are shared, not copied
        self.docs = Chained(base.docs, SegmentRecords(self.segment))
        self.deleted_docs = np.union1d(base.deleted_docs, tombstones).astype(np.int64)
        self._fields = live_fields(base, self.segment)
        self.passage_doc = ChainedArray(base.passage_doc, seg_passages.doc)  # (the base's made once a base)
        n_seg = int(seg.passage_tokens[-1])
        keep_codes = base.codes is not None
        self.faiss = SegmentedFaiss(base.faiss, template, self.segment, keep_codes, cols["kept_ids"])
        self.default_nprobe = base.default_nprobe
        self.vectors = base.vectors
        self.codes = base.codes
        for doc in self.segment if keep_codes else ():  # each new document's codes made here, in the write
            written_parts(doc, base.faiss, True)
        self.vector_source = base.vector_source
        self.manifest = dataclasses.replace(
            base.manifest, documents=len(self.docs), passages=len(self.passages), tokens=n + n_seg,
            indexed_tokens=self.faiss.ntotal)
        self.lexical = None
        if base.lexical is not None and base_terms is not None:
            self.lexical = live_lexical(base, base_terms, self.segment, self.deleted_docs)

    @property
    def seg_vectors(self) -> np.ndarray:
        """(S, d) float16: the segment's token vectors, a view of rows its base's snapshots share, each document's
        copied in once (``core.segment_log.AppendedRows``), at the first snapshot that reads them (a search): a
        snapshot joined every segment document's at its first read."""
        base = self.base
        return self._joined("vectors", lambda: _appended(base, "vectors", lambda doc: doc.vectors,
                                                         np.zeros((0, base.faiss.d), np.float16), self.segment))

    @property
    def seg_codes(self) -> np.ndarray | None:
        """(S, code_size) uint8 where the base's fine store reads codes (its documents' ``WrittenParts``, made by the
        writes), held as ``seg_vectors`` are; None otherwise."""
        base = self.base
        if base.codes is None or len(self.token_passage) == self.n_base_tokens:
            return None
        def codes(doc: EncodedDocument) -> np.ndarray:
            made = written_parts(doc, base.faiss, True).codes  # (made with the codes kept)
            assert made is not None
            return made

        return self._joined("codes", lambda: _appended(base, "codes", codes, np.zeros((0, 0), np.uint8), self.segment))

    def segment_scan_vectors(self) -> np.ndarray:
        """(S, d) float32: the segment's token vectors widened, as the flat scan multiplies them by a batch's
        questions: a view of the base's ``core.widened.WidenedRows`` (each written document widened once, shared by
        the later snapshots), made at the snapshot's first scan; past their bytes, ``seg_vectors`` widened here."""
        wide = self._joined("widened", lambda: widened_rows(self.base).rows_of(self.segment))
        return wide if wide is not None else as_float32(self.seg_vectors)

    def _segment_rows(self, rows: np.ndarray) -> np.ndarray:
        """The segment's token vectors ``rows`` as float32: read from the widened ones where a scan made them."""
        wide = self._seg_joined.get("widened")
        return wide[rows] if wide is not None else as_float32(self.seg_vectors[rows])

    def _joined(self, name: str, join: Callable[[], np.ndarray | None]) -> Any:
        """The segment's ``name`` rows, ``join()`` at the first call (under a lock: searches racing to read them
        join them once) and kept: the snapshot never changes."""
        with self._seg_lock:
            if name not in self._seg_joined:
                self._seg_joined[name] = join()
            return self._seg_joined[name]

    @property
    def n_base_tokens(self) -> int:
        return len(self.base.token_passage)

    def _split(self, ids: np.ndarray, base_read, segment_read, width: int) -> np.ndarray:
        """Rows for token ids ``ids`` (1-D), the base's from ``base_read`` and the segment's from ``segment_read``."""
        ids = np.asarray(ids)
        out = np.empty((len(ids), width), np.float32)
        in_base = ids < self.n_base_tokens
        if in_base.any():
            out[in_base] = base_read(ids[in_base])
        if not in_base.all():
            out[~in_base] = segment_read(ids[~in_base] - self.n_base_tokens)
        return out

    def token_vectors(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        flat = self._split(ids.reshape(-1), self.base.token_vectors, self._segment_rows, self.base.faiss.d)
        return flat.reshape(*ids.shape, -1)

    def token_scores(self, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        return self._split(ids, lambda r: self.base.token_scores(r, queries),
                           lambda r: self._segment_rows(r) @ queries, queries.shape[1])

    def code_vectors(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        codes = self.seg_codes
        flat = self._split(ids.reshape(-1), self.base.code_vectors,
                           lambda r: decode_codes(self.base.faiss, np.ascontiguousarray(codes[r])),  # type: ignore[index]
                           self.base.faiss.d)
        return flat.reshape(*ids.shape, -1)

    def search_parameters(self, nprobe: int | None, selector: Any = None) -> Any:
        ivf = ivf_of(self.base.faiss)
        base = self.base.search_parameters(nprobe, selector)
        probes = int(nprobe or (ivf.nprobe if ivf is not None else 1))
        if selector is None:
            return SegmentParams(base, faiss_search_parameters(self.faiss.segment, probes) if nprobe else None)
        import faiss

        # ``selector`` (``core.selection.select``'s) translates the base's token ids to passages (the base's map, not
        # one over every token each write) and asks its passage bitmap (``sel``); the segment's rows are translated
        # to their passages by a map of the segment's own, made at the snapshot's first filtered search
        rows = self._joined("row_passages", lambda: int64_vector(self.token_passage[self.faiss.segment_ids]))
        translated = faiss.IDSelectorTranslated(rows, selector.sel)
        return SegmentParams(base, faiss_search_parameters(self.faiss.segment, probes, translated),
                             (translated, selector, rows))


def _appended(base: PhraseIndex, name: str, rows: Callable[[EncodedDocument], np.ndarray], empty: np.ndarray,
              segment: Sequence[EncodedDocument]) -> np.ndarray:
    """``rows`` of ``segment``'s documents, in order, as ``segment_columns`` holds its columns."""
    if not segment:
        return empty

    def joined(docs: Sequence[EncodedDocument], *_: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        made = [rows(doc) for doc in docs]
        return {name: (np.concatenate(made), np.fromiter(map(len, made), np.int64, len(made)))}
    return appended_rows(base, name, segment, joined)[name]


def searcher_over(searcher: Searcher, index: PhraseIndex) -> Searcher:
    """A ``Searcher`` configured as ``searcher`` (encoder, calibration, reading, limits, chunk size) over ``index``;
    the search runs on the CPU (a device copy of the base does not hold the segment)."""
    reading = searcher.reading
    if reading is not None:
        reading = reading.over(HitBuilder(index))
    out = Searcher(index, searcher.encoder, searcher.max_answer_tokens, searcher.vector_source, searcher.length_bias,
                   searcher.calibrator, None, reading, searcher.selection_cache_bytes,
                   searcher.pager.unanswerable_prior)
    out.phrase_rerank = searcher.phrase_rerank
    out.chunk_size = searcher.chunk_size  # (a size set on the searcher, not only the class's)
    return out
