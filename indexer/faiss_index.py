"""Create, train and fill the faiss index over token vectors.

``spanseek index build --factory F`` accepts any faiss factory string (inner-product metric); ``Flat`` is the
exact index. Vectors are read in chunks from the memory-mapped fine store, so memory stays bounded.
"""

from __future__ import annotations

import logging

import numpy as np
from tqdm.auto import tqdm

log = logging.getLogger(__name__)

ADD_CHUNK = 65536


class FactoryError(ValueError):
    """A factory string faiss cannot build, or a corpus too small to train it."""


def needs_ids(factory: str) -> bool:
    """Whether the index type stores explicit ids (IVF) or needs an IDMap for non-contiguous ids."""
    return "IVF" in factory or factory.startswith("IDMap")


def create_index(factory: str, dim: int, contiguous_ids: bool):
    """A faiss index for ``factory`` (inner product); wrapped in IDMap2 when ids are not 0..n-1."""
    import faiss

    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise FactoryError(f"faiss cannot build factory {factory!r} for dim {dim}: {str(e).strip().splitlines()[-1]}") from None
    if not contiguous_ids and not needs_ids(factory):
        index = faiss.IndexIDMap2(index)
    return index


def train_index(index, vectors: np.ndarray, max_train: int, seed: int = 0) -> None:
    """Train on a random sample of at most ``max_train`` vectors (no-op for indexes that need no training)."""
    if index.is_trained:
        return
    rng = np.random.default_rng(seed)
    n = len(vectors)
    take = np.sort(rng.choice(n, size=min(n, max_train), replace=False))
    sample = np.ascontiguousarray(vectors[take], dtype=np.float32)
    log.info("training faiss index on %d vectors", len(sample))
    index.train(sample)


def accepts_ids(index) -> bool:
    """Whether the index stores explicit ids (IDMap, IVF); a plain index numbers vectors 0..n-1 itself."""
    import faiss

    if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)):
        return True
    try:
        faiss.extract_index_ivf(index)
        return True
    except RuntimeError:
        return False


def add_vectors(index, vectors: np.ndarray, ids: np.ndarray, progress: bool = True) -> None:
    """Add vectors[ids] to the index in chunks of ADD_CHUNK, with faiss ids = token ids."""
    with_ids = accepts_ids(index)
    if not with_ids and not np.array_equal(ids, np.arange(index.ntotal, index.ntotal + len(ids))):
        raise ValueError("this index numbers vectors itself; wrap it in IDMap2 to add arbitrary token ids")
    for a in tqdm(range(0, len(ids), ADD_CHUNK), desc="faiss add", unit="chunk", disable=not progress):
        chunk = ids[a : a + ADD_CHUNK]
        x = np.ascontiguousarray(vectors[chunk], dtype=np.float32)
        if with_ids:
            index.add_with_ids(x, chunk.astype(np.int64))
        else:
            index.add(x)
