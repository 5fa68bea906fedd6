"""The fine store: every token's vector, read back for span completion and for re-scoring compressed candidates.

Written by ``spanseek index build --store fp16|sq8|sq4`` (recorded in ``manifest.fine_store``), read by
``core.store.PhraseIndex``. One of:

- ``fp16``: ``vectors.npy`` (N, d) float16, 2·d bytes per token (768 B at d = 384).
- ``sq8`` / ``sq4``: ``fine_codes.npy`` (N, code_size) uint8 faiss ScalarQuantizer codes, d (384 B) or d / 2
  (192 B) bytes per token, and ``fine_quantizer.faiss``, the trained (empty) ``IndexScalarQuantizer`` whose
  per-dimension range decodes them. A component within the trained range comes back within half a step of
  its value (step = range / 255 or range / 15).
- ``pq192`` / ``pq128`` / ``pq96``: the same files with 8-bit product-quantiser codes (faiss ``IndexPQ``, M
  sub-vectors of d / M dimensions, 256 centroids each): M bytes per token. A centroid per 2-4 dimensions
  follows the vectors' distribution where sq4 spends 16 even steps on every dimension, so pq128 re-scores about
  as well as sq4 in two thirds of the bytes (docs/scale.md).

With a token filter (``index build --filter-threshold``) the store holds rows of the kept tokens only, and
``fine_kept.npy``, a bit per token (``np.packbits``), says which tokens have a row (``RowMap``: row of token t =
kept tokens before t, from a rank table per 256 tokens). Reading a token without a row gives zeros; its flags are
cleared in ``token_flags.npy``, so span completion never starts or ends a phrase there.

Either way the store is memory-mapped and only the gathered rows are read and decoded: ``FineStore`` behaves
as a read-only (N, d) array for row reads (``store[ids]``, ``store[a:b]``), returning float32 for the quantised
stores (fp16 rows as stored), so the faiss trainer, the recall measurement and the searcher read it alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.io import atomic_path

STORES = ("fp16", "sq8", "sq4", "pq192", "pq128", "pq96")
DEFAULT_STORE = "fp16"
VECTORS = "vectors.npy"
FINE_CODES = "fine_codes.npy"
FINE_QUANTIZER = "fine_quantizer.faiss"
FINE_KEPT = "fine_kept.npy"
RANK_BLOCK = 256  # tokens per entry of RowMap's rank table (8 int64 bytes per 256 tokens)
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1).astype(np.uint8)
ENCODE_CHUNK = 65536
_SQ_BITS = {"sq8": 8, "sq4": 4}
_PQ_M = {"pq192": 192, "pq128": 128, "pq96": 96}


class FineStoreError(ValueError):
    """A fine store is missing, of an unknown kind, or cannot be derived from the one given."""


def store_files(kind: str) -> tuple[str, ...]:
    """The files of a ``kind`` fine store, relative to the index directory."""
    check_kind(kind)
    return (VECTORS,) if kind == "fp16" else (FINE_CODES, FINE_QUANTIZER)


def check_kind(kind: str) -> str:
    """``kind`` if it is a known store, else FineStoreError naming the choices."""
    if kind not in STORES:
        raise FineStoreError(f"fine store must be one of {', '.join(STORES)}; got {kind!r}")
    return kind


def step_sizes(quantizer: Any) -> np.ndarray:
    """(d,) decoding step of a trained sq8/sq4 quantiser: the per-dimension range over 2^bits - 1."""
    import faiss

    sq = quantizer.sq
    trained = faiss.vector_to_array(sq.trained)
    d = int(quantizer.d)
    vdiff = trained[d:] if len(trained) == 2 * d else np.full(d, trained[1])
    return vdiff / (2 ** int(sq.bits) - 1)


class RowMap:
    """Which tokens have a fine-store row and which row: a packed bitmap of N bits plus a rank table."""

    def __init__(self, bits: np.ndarray, n: int):
        if len(bits) != (n + 7) // 8:
            raise ValueError(f"a row map of {n} tokens needs {(n + 7) // 8} bytes, got {len(bits)}")
        self.n = n
        per = RANK_BLOCK // 8
        self.bits = np.concatenate([np.asarray(bits, np.uint8), np.zeros(-len(bits) % per + per, np.uint8)])
        counts = np.concatenate([_POPCOUNT[self.bits[a : a + (1 << 24)]].reshape(-1, per).sum(axis=1, dtype=np.int64)
                                 for a in range(0, len(self.bits), 1 << 24)])  # (1 << 24) is a multiple of per
        self.ranks = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @classmethod
    def from_mask(cls, keep: np.ndarray) -> RowMap:
        """The row map of a boolean (N,) mask of the tokens that have a row."""
        return cls(np.packbits(np.asarray(keep, bool)), len(keep))

    @property
    def stored(self) -> int:
        """Tokens with a row (the store's row count)."""
        return int(self.ranks[-1])

    def rows(self, missing: int = -1) -> np.ndarray:
        """(N,) int64: every token's row, ``missing`` where it has none."""
        out = np.full(self.n, missing, dtype=np.int64)
        block = 1 << 24  # tokens at a time (a multiple of 8)
        for lo in range(0, self.n, block):
            hi = min(self.n, lo + block)
            has = np.unpackbits(self.bits[lo // 8 : (hi + 7) // 8])[: hi - lo].astype(bool)
            first = self.lookup(np.asarray([lo]))[0][0]  # rows before this block
            out[lo:hi][has] = first + np.arange(int(has.sum()))
        return out

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each token id, whether it has one); the row is meaningless where it has none."""
        ids = np.asarray(ids, np.int64)
        block, pos = ids // RANK_BLOCK, ids % RANK_BLOCK
        per = RANK_BLOCK // 8
        window = np.unpackbits(self.bits[block[..., None] * per + np.arange(per)], axis=-1)  # (..., RANK_BLOCK)
        before = (window * (np.arange(RANK_BLOCK) < pos[..., None])).sum(axis=-1, dtype=np.int64)
        has = np.take_along_axis(window, pos[..., None], axis=-1)[..., 0].astype(bool)
        return self.ranks[block] + before, has


class FineStore:
    """A read-only (N, d) view of a fine store; ``rows = store[ids]`` decodes only the rows asked for.

    With a ``row_map`` the data holds rows of the kept tokens only; a token without a row reads as zeros.
    """

    def __init__(self, kind: str, data: np.ndarray, quantizer: Any = None, row_map: RowMap | None = None):
        self.kind = check_kind(kind)
        self.data = data  # fp16: the (N, d) vectors; sq: the (N, code_size) codes
        self.quantizer = quantizer
        self.dim = int(data.shape[1]) if quantizer is None else int(quantizer.d)
        if row_map is not None and row_map.stored != len(data):
            raise ValueError(f"the row map gives {row_map.stored} rows, the store has {len(data)}")
        self.row_map = row_map

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.dim)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype if self.quantizer is None else np.dtype(np.float32)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored rows (what a full read costs; the quantiser is a few KB)."""
        return int(self.data.nbytes)

    @property
    def mapped(self) -> bool:
        """Whether the rows stay on disk behind a memory map."""
        return isinstance(self.data, np.memmap)

    def __len__(self) -> int:
        return self.row_map.n if self.row_map is not None else len(self.data)

    def __getitem__(self, rows: Any) -> np.ndarray:
        if self.row_map is None:
            return self._rows(rows)
        ids = np.arange(self.row_map.n)[rows] if isinstance(rows, slice) else np.asarray(rows, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.row_map.n):
            raise IndexError(f"token ids outside 0..{self.row_map.n - 1}")
        row, has = self.row_map.lookup(ids)
        out = np.zeros((*ids.shape, self.dim), self.dtype)
        out[has] = self._rows(row[has])
        return out

    def stored_rows(self, lo: int, hi: int) -> np.ndarray:
        """Stored rows ``lo:hi`` decoded (row numbers of the data, not token ids: see ``row_map``)."""
        return self._rows(slice(lo, hi))

    def _rows(self, rows: Any) -> np.ndarray:
        """Stored rows (data row numbers), decoded."""
        got = self.data[rows]
        if self.quantizer is None:
            return got
        codes = np.ascontiguousarray(got.reshape(-1, got.shape[-1]))
        return self.quantizer.sa_decode(codes).reshape(*got.shape[:-1], self.dim)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


def open_fine_store(index_dir: Path, kind: str, mmap: bool = True, rows: Path | None = None) -> FineStore:
    """The ``kind`` fine store of ``index_dir`` (memory-mapped with ``mmap``; ``rows``: read the vectors or codes
    from this file instead, e.g. an add's new file); a missing file raises FileNotFoundError naming it."""
    import faiss

    mode: Literal["r"] | None = "r" if mmap else None
    row_map = read_row_map(index_dir) if rows is None else None
    if check_kind(kind) == "fp16":
        return FineStore(kind, np.load(rows or index_dir / VECTORS, mmap_mode=mode), row_map=row_map)
    if not (index_dir / FINE_QUANTIZER).is_file():
        raise FileNotFoundError(str(index_dir / FINE_QUANTIZER))
    quantizer = faiss.read_index(str(index_dir / FINE_QUANTIZER))
    return FineStore(kind, np.load(rows or index_dir / FINE_CODES, mmap_mode=mode), quantizer, row_map)


def read_row_map(index_dir: Path) -> RowMap | None:
    """The row map of a filtered store (``fine_kept.npy``: the token count, then the packed bits), else None."""
    path = index_dir / FINE_KEPT
    if not path.is_file():
        return None
    raw = np.load(path)
    return RowMap(raw[8:], int(raw[:8].view(np.int64)[0]))


def write_row_map(index_dir: Path, keep: np.ndarray) -> RowMap:
    """Write ``fine_kept.npy`` for a boolean (N,) mask of the tokens that keep a row, atomically."""
    row_map = RowMap.from_mask(keep)
    raw = np.concatenate([np.array([len(keep)], np.int64).view(np.uint8), np.packbits(np.asarray(keep, bool))])
    with atomic_path(index_dir / FINE_KEPT) as tmp, open(tmp, "wb") as f:
        np.save(f, raw)
    return row_map


def detect_kind(index_dir: Path) -> str:
    """Which store ``index_dir`` holds (from its files): ``fp16`` when ``vectors.npy`` is there, else the
    quantiser's kind."""
    if (index_dir / VECTORS).is_file():
        return "fp16"
    if (index_dir / FINE_QUANTIZER).is_file():
        import faiss

        quantizer: Any = faiss.read_index(str(index_dir / FINE_QUANTIZER))
        if isinstance(quantizer, faiss.IndexPQ):
            return f"pq{int(quantizer.pq.M)}"
        return {8: "sq8", 4: "sq4"}[int(quantizer.sq.bits)]
    raise FineStoreError(f"{index_dir}: no fine store ({VECTORS} or {FINE_CODES} + {FINE_QUANTIZER})")


def train_quantizer(kind: str, vectors: Any, sample: int = 262_144, seed: int = 0) -> Any:
    """The quantiser of a ``kind`` store trained on a sorted random sample of rows: an ``IndexScalarQuantizer``
    (sq8 / sq4: per-dimension min / max) or an 8-bit ``IndexPQ`` (pqM: k-means per sub-vector)."""
    import faiss

    check_kind(kind)
    take = np.sort(np.random.default_rng(seed).choice(len(vectors), size=min(sample, len(vectors)), replace=False))
    x = np.ascontiguousarray(vectors[take], dtype=np.float32)
    d = x.shape[1]
    if kind in _PQ_M:
        m = _PQ_M[kind]
        if d % m:
            raise FineStoreError(f"a {kind} store splits vectors into {m} sub-vectors; d = {d} is not a multiple")
        if len(x) < 256 * 39:  # faiss's k-means wants 39 points per centroid
            raise FineStoreError(f"a {kind} store trains 256 centroids per sub-vector on at least {256 * 39} "
                                 f"tokens; this index has {len(x)} (use sq8 / sq4)")
        quantizer: Any = faiss.IndexPQ(d, m, 8, faiss.METRIC_INNER_PRODUCT)
    else:
        qtype = {8: faiss.ScalarQuantizer.QT_8bit, 4: faiss.ScalarQuantizer.QT_4bit}[_SQ_BITS[kind]]
        quantizer = faiss.IndexScalarQuantizer(d, qtype, faiss.METRIC_INNER_PRODUCT)
    quantizer.train(x)
    return quantizer


def encode_rows(quantizer: Any, vectors: Any, out: np.ndarray, start: int = 0, progress: bool = False) -> None:
    """``out[start + i] = code of vectors[i]``, chunk by chunk (memory stays at one chunk)."""
    for a in tqdm(range(0, len(vectors), ENCODE_CHUNK), desc="fine store", unit="chunk", disable=not progress):
        x = np.ascontiguousarray(vectors[a : a + ENCODE_CHUNK], dtype=np.float32)
        out[start + a : start + a + len(x)] = quantizer.sa_encode(x)


def write_quantized(out_dir: Path, kind: str, vectors: Any, sample: int = 262_144, progress: bool = False,
                    quantizer: Any = None) -> dict[str, Any]:
    """Write a quantised (sq / pq) fine store of ``vectors`` (any (N, d) row source) into ``out_dir`` atomically, training
    the quantiser on a sample unless one is given. Returns the manifest's record of it."""
    import faiss

    if check_kind(kind) == "fp16":
        raise FineStoreError("write_quantized writes quantised stores; fp16 is the merged vectors.npy")
    quantizer = quantizer or train_quantizer(kind, vectors, sample)
    code_size = int(quantizer.sa_code_size())
    with atomic_path(out_dir / FINE_CODES) as tmp:
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(len(vectors), code_size))
        encode_rows(quantizer, vectors, mm, progress=progress)
        mm.flush()
        del mm
    with atomic_path(out_dir / FINE_QUANTIZER) as tmp:
        faiss.write_index(quantizer, str(tmp))
    return {"kind": kind, "code_size": code_size, "train_size": int(min(sample, len(vectors)))}

