"""The fine store: every token's vector, read back for span completion and for re-scoring compressed candidates.

Written by ``spanseek index build --store fp16|sq8|sq4`` (recorded in ``manifest.fine_store``), read by
``core.phrase_index.PhraseIndex``. One of:

- ``fp16``: ``vectors.npy`` (N, d) float16, 2·d bytes per token (768 B at d = 384).
- ``sq8`` / ``sq4``: ``fine_codes.npy`` (N, code_size) uint8 faiss ScalarQuantizer codes, d (384 B) or d / 2
  (192 B) bytes per token, and ``fine_quantizer.faiss``, the trained (empty) ``IndexScalarQuantizer`` whose
  per-dimension range decodes them. A component within the trained range comes back within half a step of
  its value (step = range / 255 or range / 15).
- ``pq192`` / ``pq128`` / ``pq96``: the same files with 8-bit product-quantiser codes (faiss ``IndexPQ``, M
  sub-vectors of d / M dimensions, 256 centroids each): M bytes per token. A centroid per 2-4 dimensions
  follows the vectors' distribution where sq4 spends 16 even steps on every dimension, so pq128 re-scores about
  as well as sq4 in two thirds of the bytes (docs/scale.md).
- ``pca192``: 192 bytes per token spent where the variance is (``RotatedPQ``): the vectors are rotated onto their
  principal axes, then the 64 strongest components get a byte each (an 8-bit scalar quantiser: even steps over
  the range keep the extreme values that make a token score high), the next 128 a byte per pair (PQ) and the rest
  a byte per group of (d - 192) / 64. The token vectors' variance is concentrated (at d = 384 the first 32
  components hold two thirds) and the questions point along the same axes, so inner products come out about half
  as far off as from pq192's even two dimensions a byte (docs/scale.md). ``fine_codes.npy`` holds the codes,
  ``fine_rotation.npz`` the rotation and the segments' quantisers.

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

from spanseek.core.io import atomic_path, new_memmap, write_faiss

STORES = ("fp16", "sq8", "sq4", "pq192", "pq128", "pq96", "pca192")
DEFAULT_STORE = "fp16"
VECTORS = "vectors.npy"
FINE_CODES = "fine_codes.npy"
FINE_QUANTIZER = "fine_quantizer.faiss"
FINE_ROTATION = "fine_rotation.npz"
FINE_KEPT = "fine_kept.npy"
RANK_BLOCK = 256  # tokens per entry of RowMap's rank table (8 int64 bytes per 256 tokens)
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1).astype(np.uint8)
ENCODE_CHUNK = 65536
_SQ_BITS = {"sq8": 8, "sq4": 4}
_PQ_M = {"pq192": 192, "pq128": 128, "pq96": 96}
_ROTATED_BYTES = {"pca192": 192}


class FineStoreError(ValueError):
    """A fine store is missing, of an unknown kind, or cannot be derived from the one given."""


def store_files(kind: str) -> tuple[str, ...]:
    """The files of a ``kind`` fine store, relative to the index directory."""
    check_kind(kind)
    if kind == "fp16":
        return (VECTORS,)
    return (FINE_CODES, FINE_ROTATION if kind in _ROTATED_BYTES else FINE_QUANTIZER)


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


class RotatedPQ:
    """A principal-axes rotation, then segments of the rotated dimensions, each with its own faiss quantiser (an
    8-bit scalar quantiser on the strongest components, product quantisers on the rest): the ``pca192`` store's
    quantiser (module docstring). It has what the fine store uses of a faiss quantiser: ``d``,
    ``sa_code_size()``, ``sa_encode``, ``sa_decode``."""

    def __init__(self, mean: np.ndarray, rotation: np.ndarray, segments: list[tuple[int, str]], parts: list[Any]):
        self.mean = np.asarray(mean, np.float32)  # (d,)
        self.rotation = np.asarray(rotation, np.float32)  # (d, d): column k is the k-th principal axis
        self.segments = [(int(w), str(f)) for w, f in segments]  # (dimensions, faiss factory of their quantiser)
        self.parts = parts
        self.d = len(self.mean)

    @staticmethod
    def plan(d: int, nbytes: int) -> list[tuple[int, str]]:
        """The segments of an ``nbytes`` code at dimension ``d``: a third of the bytes on the strongest nbytes / 3
        components (8-bit scalar), a third on the next 2 nbytes / 3 (a byte per pair), a third on the rest."""
        third = nbytes // 3
        rest = d - 3 * third
        if nbytes % 3 or rest <= 0 or rest % third:
            raise FineStoreError(f"a {nbytes}-byte rotated store needs d > {nbytes} with d - {nbytes} a multiple of "
                                 f"{third}; d = {d}")
        return [(third, "SQ8"), (2 * third, f"PQ{third}np"), (rest, f"PQ{third}np")]  # np: no polysemous training

    @classmethod
    def fit(cls, x: np.ndarray, nbytes: int) -> RotatedPQ:
        """Principal axes of the sample ``x`` (n, d), then each segment's quantiser trained on its rotated columns."""
        import faiss

        mean = x.mean(axis=0, dtype=np.float64)
        eigval, eigvec = np.linalg.eigh(np.cov(x, rowvar=False, dtype=np.float64))
        rotation = eigvec[:, np.argsort(-eigval)]
        y = ((x - mean) @ rotation).astype(np.float32)
        segments, parts, a = cls.plan(x.shape[1], nbytes), [], 0
        for width, factory in segments:
            part = faiss.index_factory(width, factory)
            part.train(np.ascontiguousarray(y[:, a : a + width]))
            parts.append(part)
            a += width
        return cls(mean.astype(np.float32), rotation.astype(np.float32), segments, parts)

    def sa_code_size(self) -> int:
        return sum(int(part.sa_code_size()) for part in self.parts)

    def sa_encode(self, x: np.ndarray) -> np.ndarray:
        y = (np.asarray(x, np.float32) - self.mean) @ self.rotation
        codes, a = [], 0
        for (width, _), part in zip(self.segments, self.parts, strict=True):
            codes.append(part.sa_encode(np.ascontiguousarray(y[:, a : a + width])))
            a += width
        return np.concatenate(codes, axis=1)

    def decode_rotated(self, codes: np.ndarray) -> np.ndarray:
        """(n, d) rows in the rotated space, centred: ``sa_decode`` before the rotation back."""
        y = np.empty((len(codes), self.d), np.float32)
        a = c = 0
        for (width, _), part in zip(self.segments, self.parts, strict=True):
            size = int(part.sa_code_size())
            y[:, a : a + width] = part.sa_decode(np.ascontiguousarray(codes[:, c : c + size]))
            a, c = a + width, c + size
        return y

    def sa_decode(self, codes: np.ndarray) -> np.ndarray:
        return self.decode_rotated(codes) @ self.rotation.T + self.mean

    def scores(self, codes: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(n, q): the decoded rows dot each column of ``queries`` (d, q), computed in the rotated space (the
        queries are rotated once instead of every row back)."""
        queries = np.asarray(queries, np.float32)
        return self.decode_rotated(codes) @ (self.rotation.T @ queries) + self.mean @ queries

    def save(self, path: Path) -> None:
        """Write it to ``path`` (an .npz: the rotation and each segment's serialised faiss quantiser), atomically."""
        import faiss

        parts: dict[str, Any] = {f"part{i}": faiss.serialize_index(part) for i, part in enumerate(self.parts)}
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, mean=self.mean, rotation=self.rotation, widths=np.asarray([w for w, _ in self.segments]),
                     factories=np.asarray([f for _, f in self.segments]), **parts)

    @classmethod
    def load(cls, path: Path) -> RotatedPQ:
        import faiss

        with np.load(path) as z:
            segments = list(zip(z["widths"].tolist(), z["factories"].tolist(), strict=True))
            return cls(z["mean"], z["rotation"], segments,
                       [faiss.deserialize_index(z[f"part{i}"]) for i in range(len(segments))])


def read_quantizer(index_dir: Path, kind: str) -> Any:
    """The trained quantiser of ``index_dir``'s ``kind`` store (a faiss index, or a RotatedPQ); a missing file
    raises FileNotFoundError naming it."""
    import faiss

    path = index_dir / store_files(kind)[1]
    if not path.is_file():
        raise FileNotFoundError(str(path))
    return RotatedPQ.load(path) if kind in _ROTATED_BYTES else faiss.read_index(str(path))


def write_quantizer(index_dir: Path, kind: str, quantizer: Any) -> None:
    """Write a ``kind`` store's trained quantiser into ``index_dir``, atomically (a faiss one through
    ``core.io.write_faiss``, which names a full disk)."""
    path = index_dir / store_files(kind)[1]
    if isinstance(quantizer, RotatedPQ):
        quantizer.save(path)
        return
    write_faiss(quantizer, path)


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

    def dot(self, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(len(ids), q) float32: the rows of token ids ``ids`` (1-D) dot each column of ``queries`` (d, q); a
        token without a row scores 0. A rotated store scores in its rotated space."""
        if not isinstance(self.quantizer, RotatedPQ):
            return as_float32(self[ids]) @ queries  # widened exactly, so the product is numpy's as before
        ids = np.asarray(ids, np.int64)
        out = np.zeros((len(ids), np.shape(queries)[1]), np.float32)
        if self.row_map is None:
            rows, has = ids, np.ones(len(ids), bool)
        else:
            if ids.size and (ids.min() < 0 or ids.max() >= self.row_map.n):
                raise IndexError(f"token ids outside 0..{self.row_map.n - 1}")
            rows, has = self.row_map.lookup(ids)
        out[has] = self.quantizer.scores(self.data[rows[has]], queries)
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


def as_float32(rows: Any) -> np.ndarray:
    """``rows`` as float32; half precision is widened by torch, about ten times faster than numpy's cast on CPUs
    (span completion widens every neighbour vector it reads; the widening is exact either way)."""
    rows = np.asarray(rows)
    if rows.dtype == np.float16:
        import torch

        return torch.from_numpy(np.ascontiguousarray(rows)).float().numpy()
    return np.asarray(rows, dtype=np.float32)


def open_fine_store(index_dir: Path, kind: str, mmap: bool = True, rows: Path | None = None) -> FineStore:
    """The ``kind`` fine store of ``index_dir`` (memory-mapped with ``mmap``; ``rows``: read the vectors or codes
    from this file instead, e.g. an add's new file); a missing file raises FileNotFoundError naming it."""

    mode: Literal["r"] | None = "r" if mmap else None
    row_map = read_row_map(index_dir) if rows is None else None
    if check_kind(kind) == "fp16":
        return FineStore(kind, np.load(rows or index_dir / VECTORS, mmap_mode=mode), row_map=row_map)
    quantizer = read_quantizer(index_dir, kind)
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
    if (index_dir / FINE_ROTATION).is_file():
        return f"pca{RotatedPQ.load(index_dir / FINE_ROTATION).sa_code_size()}"
    if (index_dir / FINE_QUANTIZER).is_file():
        import faiss

        quantizer: Any = faiss.read_index(str(index_dir / FINE_QUANTIZER))
        if isinstance(quantizer, faiss.IndexPQ):
            return f"pq{int(quantizer.pq.M)}"
        return {8: "sq8", 4: "sq4"}[int(quantizer.sq.bits)]
    raise FineStoreError(f"{index_dir}: no fine store ({VECTORS}, or {FINE_CODES} + {FINE_QUANTIZER} or "
                         f"{FINE_ROTATION})")


def train_quantizer(kind: str, vectors: Any, sample: int = 262_144, seed: int = 0) -> Any:
    """The quantiser of a ``kind`` store trained on a sorted random sample of rows: an ``IndexScalarQuantizer``
    (sq8 / sq4: per-dimension min / max), an 8-bit ``IndexPQ`` (pqM: k-means per sub-vector) or a ``RotatedPQ``
    (pca192)."""
    import faiss

    check_kind(kind)
    take = np.sort(np.random.default_rng(seed).choice(len(vectors), size=min(sample, len(vectors)), replace=False))
    x = np.ascontiguousarray(vectors[take], dtype=np.float32)
    d = x.shape[1]
    if kind in _PQ_M or kind in _ROTATED_BYTES:
        if len(x) < 256 * 39:  # faiss's k-means wants 39 points per centroid
            raise FineStoreError(f"a {kind} store trains 256 centroids per sub-vector on at least {256 * 39} "
                                 f"tokens; this index has {len(x)} (use sq8 / sq4)")
    if kind in _ROTATED_BYTES:
        return RotatedPQ.fit(x, _ROTATED_BYTES[kind])
    if kind in _PQ_M:
        m = _PQ_M[kind]
        if d % m:
            raise FineStoreError(f"a {kind} store splits vectors into {m} sub-vectors; d = {d} is not a multiple")
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

    if check_kind(kind) == "fp16":
        raise FineStoreError("write_quantized writes quantised stores; fp16 is the merged vectors.npy")
    quantizer = quantizer or train_quantizer(kind, vectors, sample)
    code_size = int(quantizer.sa_code_size())
    with atomic_path(out_dir / FINE_CODES) as tmp:
        mm = new_memmap(tmp, np.uint8, (len(vectors), code_size))
        encode_rows(quantizer, vectors, mm, progress=progress)
        mm.flush()
        del mm
    write_quantizer(out_dir, kind, quantizer)
    return {"kind": kind, "code_size": code_size, "train_size": int(min(sample, len(vectors)))}

