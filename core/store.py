"""The on-disk phrase index: its manifest, file names, and the reader the searcher uses.

An index directory (written by ``spanseek index build``) holds:

- ``manifest.json``      format version, encoder config + weights fingerprint, faiss factory and parameters,
                         counts, filter threshold, build time. Written last: no manifest = no finished index.
- ``vectors.npy``        (N, d) float16 token vectors in passage order (the fine store, memory-mapped).
- ``token_passage.npy``  (N,) int32 passage of each token.
- ``token_offsets.npy``  (N, 2) int32 character [start, end) of each token in its passage.
- ``token_flags.npy``    (N,) uint8 FLAG_START / FLAG_END (core.text).
- ``passage_tokens.npy`` (P + 1,) int64: tokens of passage p are ids [passage_tokens[p], passage_tokens[p+1]).
- ``passages.jsonl``     one ``{"doc": int, "para": int, "text": str}`` per passage.
- ``docs.jsonl``         one ``{"id": str, "title": str}`` per document, plus ``"meta": {...}`` when the corpus
                         gave the document metadata (returned with its hits).
- ``index.faiss``        a faiss index over the (kept) token vectors, faiss ids = token ids.
- ``codes.npy``          (N, code_size) uint8, optional: every token's faiss code (``sa_encode``) in id order,
                         written for compressed (non-Flat) indexes; decoded with the index's ``sa_decode``.
- ``token_filter.npy``   (N, 2) float16, optional: start/end filter probabilities (models with a filter head).

Neighbour vectors (span completion and re-scoring) come from one of two sources, chosen per PhraseIndex
(``vector_source``; the build records its default in ``manifest.faiss_params["vector_source"]``):
``fine`` reads the fp16 fine store through a memory map; ``codes`` decodes the compressed codes of the ids.

Token ids are contiguous per passage, so the L neighbours of a token are the next (or previous) L ids,
clipped to its passage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spanseek.core.config import EncoderConfig

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
VECTORS = "vectors.npy"
TOKEN_PASSAGE = "token_passage.npy"
TOKEN_OFFSETS = "token_offsets.npy"
TOKEN_FLAGS = "token_flags.npy"
PASSAGE_TOKENS = "passage_tokens.npy"
PASSAGES = "passages.jsonl"
DOCS = "docs.jsonl"
FAISS_INDEX = "index.faiss"
CODES = "codes.npy"
FILTER_SCORES = "token_filter.npy"
VECTOR_SOURCES = ("fine", "codes")


class IndexFormatError(RuntimeError):
    """An index directory is missing, partial, or does not match the model."""


@dataclass(frozen=True)
class Manifest:
    format_version: int
    encoder: dict[str, Any]
    model_fingerprint: str
    model_ref: str
    factory: str
    faiss_params: dict[str, Any]
    documents: int
    passages: int
    tokens: int
    indexed_tokens: int
    filter_threshold: float | None
    build_seconds: float
    created: str
    phrase_fingerprint: str | None = None  # core.model.phrase_fingerprint (absent in indexes built before it)

    @classmethod
    def load(cls, index_dir: str | Path) -> Manifest:
        index_dir = Path(index_dir)
        path = index_dir / MANIFEST
        if not index_dir.is_dir():
            raise IndexFormatError(f"{index_dir}: no such index directory (build one with `spanseek index build`)")
        if not path.is_file():
            raise IndexFormatError(
                f"{index_dir}: no {MANIFEST}, so the build did not finish; run the same "
                f"`spanseek index build ... --out {index_dir}` again to resume it"
            )
        d = json.loads(path.read_text())
        if d.get("format_version") != FORMAT_VERSION:
            raise IndexFormatError(f"{index_dir}: index format {d.get('format_version')} (this spanseek reads {FORMAT_VERSION})")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d or k != "phrase_fingerprint"})

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def check_model(self, config: EncoderConfig, fingerprint: str, phrase_fingerprint: str | None = None) -> None:
        """Refuse a model whose token vectors differ from the ones this index was built with.

        The weights match when the whole checkpoint is the one that built the index, or when its phrase side is
        (a query-side fine-tuned model; ``phrase_fingerprint`` is recorded by builds since it was added).
        """
        built = EncoderConfig.from_dict(self.encoder)
        diffs = [
            f"{k}: index {built.index_relevant()[k]!r} vs model {v!r}"
            for k, v in config.index_relevant().items()
            if built.index_relevant()[k] != v
        ]
        same_phrase_side = phrase_fingerprint is not None and phrase_fingerprint == self.phrase_fingerprint
        if fingerprint != self.model_fingerprint and not same_phrase_side:
            diffs.append(f"phrase-encoder weights: index {self.phrase_fingerprint or self.model_fingerprint} "
                         f"vs model {phrase_fingerprint if self.phrase_fingerprint else fingerprint}")
        if diffs:
            raise IndexFormatError(
                "index was built with a different model (" + "; ".join(diffs) + "); "
                "use the model that built it or rebuild the index"
            )


def doc_record(doc_id: str, title: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line of ``docs.jsonl``: the key ``meta`` only when there is metadata (older indexes have none)."""
    return {"id": doc_id, "title": title, **({"meta": meta} if meta else {})}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def decode_codes(index: Any, codes: np.ndarray) -> np.ndarray:
    """(n, code_size) uint8 faiss codes (``index.sa_encode``) -> (n, d) float32 vectors (``index.sa_decode``).

    IVF-PQ fast-scan indexes are decoded from the index's own parts (coarse centroid if by_residual + PQ decode,
    then the inverse pre-transform, e.g. OPQ), with the same result: their ``sa_decode`` crashes once the index
    has been read back from disk (faiss 1.15).
    """
    import faiss

    is_pre = isinstance(index, faiss.IndexPreTransform)
    inner = faiss.downcast_index(index.index) if is_pre else index
    if not isinstance(inner, faiss.IndexIVFPQFastScan):
        return index.sa_decode(codes)
    # Any below: these are faiss's low-level SWIG calls (pointer arguments), which its type stubs do not model
    ivf: Any = inner
    cc = ivf.coarse_code_size()
    listno = np.zeros(len(codes), np.int64)
    for i in range(cc):  # the list number, little-endian in the first cc bytes
        listno |= codes[:, i].astype(np.int64) << (8 * i)
    x: Any = ivf.pq.decode(np.ascontiguousarray(codes[:, cc:]))
    if ivf.by_residual:
        x += ivf.quantizer.reconstruct_batch(listno)
    if is_pre:
        pre: Any = index
        out = np.empty((len(x), pre.d), np.float32)
        pre.reverse_chain(len(x), faiss.swig_ptr(np.ascontiguousarray(x, dtype=np.float32)), faiss.swig_ptr(out))
        x = out
    return x


# faiss's exhaustive (flat) search either scans the database once per query, or, for batches, computes
# query x database blocks with BLAS. faiss 1.15 picks BLAS when queries x dim reaches its threshold (default
# 128,000, so service-sized batches never got it) and cuts the database into 1,024-row blocks, too small for
# a sgemm on a few queries. Measured on the 146k-token demo index (d 384, 2 cores), milliseconds per search of
# 2 / 4 / 8 / 16 / 64 queries: 8 / 16 / 32 / 65 / 263 by default; BLAS from 4 queries on 16,384-row blocks:
# 8 / 14 / 20 / 17 / 43. Results are the same up to float rounding.
FAISS_BLAS_MIN_QUERIES = 4
FAISS_BLAS_DATABASE_BLOCK = 16384
# faiss allocates query block x database block floats of scratch: 256 x 16,384 is 16 MiB (its default query
# block of 4,096 would make that 256 MiB for large batches such as mining chunks). Service batches are smaller.
FAISS_BLAS_QUERY_BLOCK = 256


def tune_faiss(dim: int) -> None:
    """Process-wide faiss settings for batched exhaustive search (idempotent)."""
    import faiss

    faiss.cvar.distance_compute_blas_threshold = (FAISS_BLAS_MIN_QUERIES - 1) * dim + 1
    faiss.cvar.distance_compute_blas_database_bs = FAISS_BLAS_DATABASE_BLOCK
    faiss.cvar.distance_compute_blas_query_bs = FAISS_BLAS_QUERY_BLOCK


class PhraseIndex:
    """Read-only view of an index directory: token vectors (memory-mapped), token map, passages, faiss.

    ``vector_source`` picks where neighbour vectors come from (``neighbour_vectors``): ``fine`` (the fp16 store)
    or ``codes`` (decoded compressed codes); None takes the manifest's default. With ``mmap`` the fine store,
    the codes and the character offsets stay on disk (page cache); the rest is held in RAM.
    """

    def __init__(self, index_dir: str | Path, mmap: bool = True, vector_source: str | None = None):
        import faiss

        self.dir = Path(index_dir)
        self.manifest = Manifest.load(self.dir)
        mode: Literal["r"] | None = "r" if mmap else None
        try:
            self.vectors = np.load(self.dir / VECTORS, mmap_mode=mode)
            self.token_passage = np.load(self.dir / TOKEN_PASSAGE)
            self.token_offsets = np.load(self.dir / TOKEN_OFFSETS, mmap_mode=mode)
            self.token_flags = np.load(self.dir / TOKEN_FLAGS)
            self.passage_tokens = np.load(self.dir / PASSAGE_TOKENS)
            self.passages = read_jsonl(self.dir / PASSAGES)
            self.docs = read_jsonl(self.dir / DOCS)
            if not (self.dir / FAISS_INDEX).is_file():  # faiss would raise its own RuntimeError
                raise FileNotFoundError(2, "No such file", str(self.dir / FAISS_INDEX))
            self.faiss = faiss.read_index(str(self.dir / FAISS_INDEX))
            tune_faiss(self.faiss.d)
            ivf = self._ivf()
            self.default_nprobe: int | None = int(ivf.nprobe) if ivf is not None else None
        except FileNotFoundError as e:
            raise IndexFormatError(f"{self.dir}: index is incomplete ({Path(e.filename).name} missing); rebuild it") from e
        self.codes = np.load(self.dir / CODES, mmap_mode=mode) if (self.dir / CODES).is_file() else None
        n = len(self.token_passage)
        if not (len(self.vectors) == len(self.token_offsets) == len(self.token_flags) == n == self.manifest.tokens):
            raise IndexFormatError(f"{self.dir}: token arrays disagree in length with the manifest ({self.manifest.tokens})")
        if len(self.passages) != self.manifest.passages or len(self.passage_tokens) != len(self.passages) + 1:
            raise IndexFormatError(f"{self.dir}: passage store disagrees with the manifest ({self.manifest.passages})")
        if self.codes is not None and len(self.codes) != n:
            raise IndexFormatError(f"{self.dir}: {CODES} has {len(self.codes)} rows for {n} tokens; rebuild the index")
        self.vector_source = "fine"
        self.set_vector_source(vector_source or self.manifest.faiss_params.get("vector_source", "fine"))

    def set_vector_source(self, source: str) -> None:
        """Where ``neighbour_vectors`` reads from: ``fine`` (fp16 store) or ``codes`` (decoded faiss codes)."""
        if source not in VECTOR_SOURCES:
            raise ValueError(f"vector_source must be one of {VECTOR_SOURCES}, got {source!r}")
        if source == "codes" and self.codes is None:
            raise IndexFormatError(
                f"{self.dir}: no compressed codes ({CODES}; factory {self.manifest.factory}); use vector_source='fine'"
            )
        self.vector_source = source

    @property
    def encoder_config(self) -> EncoderConfig:
        return EncoderConfig.from_dict(self.manifest.encoder)

    @property
    def num_tokens(self) -> int:
        return len(self.token_passage)

    def token_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Fine vectors of token ids (any shape) as float32, shape ids.shape + (d,)."""
        return self._gather(ids, lambda rows: self.vectors[rows])

    def code_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of token ids decoded from their compressed codes (faiss ``sa_decode``), shape ids.shape + (d,)."""
        if self.codes is None:
            raise IndexFormatError(f"{self.dir}: no compressed codes ({CODES}) in a {self.manifest.factory} index")
        return self._gather(ids, lambda rows: decode_codes(self.faiss, np.ascontiguousarray(self.codes[rows])))

    def neighbour_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of token ids from the selected ``vector_source`` (what the searcher scores spans with)."""
        return self.code_vectors(ids) if self.vector_source == "codes" else self.token_vectors(ids)

    def _gather(self, ids: np.ndarray, read) -> np.ndarray:
        """Rows ``read(sorted unique ids)`` scattered back to ids' shape + (d,), as float32 (one batched read)."""
        ids = np.asarray(ids)
        uniq, inverse = np.unique(ids.reshape(-1), return_inverse=True)  # sorted reads suit a memory map
        rows = np.asarray(read(uniq), dtype=np.float32).reshape(len(uniq), self.vectors.shape[1])
        return rows[inverse].reshape(*ids.shape, self.vectors.shape[1])

    def passage_range(self, passage: int) -> tuple[int, int]:
        return int(self.passage_tokens[passage]), int(self.passage_tokens[passage + 1])

    def _ivf(self):
        import faiss

        try:
            return faiss.extract_index_ivf(self.faiss)
        except RuntimeError:
            return None

    def set_nprobe(self, nprobe: int | None) -> None:
        """Set the IVF nprobe for the next searches; None restores the index's stored default (no-op without IVF).

        Restoring matters: a per-request nprobe must not leak into the requests after it.
        """
        ivf = self._ivf()
        if ivf is not None:
            chosen = nprobe if nprobe is not None else self.default_nprobe
            assert chosen is not None  # an IVF index always has its stored default
            ivf.nprobe = int(chosen)
